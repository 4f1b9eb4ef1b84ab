//! Per-principal limits: a token-bucket request rate (HTTP 429 past it), the tasks and the
//! sessions a principal may create per minute (`-32001` past them), and a watch on bursts
//! of lookups of unknown task ids (enumeration attempts), reported as audit warnings; and per
//! client address, a cap on wrong tokens (guessing).
//!
//! Past the cap (`limits.failed_auth_per_minute`), the address's wrong tokens are not heard
//! for the rest of its minute: each is answered 429 and is neither counted nor audited, so a
//! guesser can neither flood the log nor learn anything from the answer but that it is locked
//! out. Every token is still verified, and one that verifies is served: many clients may share
//! an address (a proxy, a NAT), and one client's mistakes must not lock the others out. What
//! keeps a token from being guessed is its length; the cap bounds the log and the work a
//! guesser makes, not the guessing itself.

use std::num::NonZeroU32;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::GatewayConfig;

/// What a wrong token from an address comes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WrongToken {
    /// Counted towards the address's limit: answered 401 as any wrong token.
    Counted,
    /// The address is past its limit for the rest of its minute: answered 429, nothing counted
    /// or audited.
    Locked,
}

/// Wrong tokens from one address within its current minute.
struct Failures {
    since: std::time::Instant,
    count: u32,
}

/// The window of `limits.failed_auth_per_minute`.
const AUTH_WINDOW: std::time::Duration = std::time::Duration::from_secs(60);
/// Addresses tracked before the ones whose window is over are dropped.
const AUTH_TRACKED: usize = 10_000;

pub(crate) struct Limits {
    requests: Option<DefaultKeyedRateLimiter<String>>,
    /// `limits.tasks_per_minute`, per principal.
    tasks: Option<DefaultKeyedRateLimiter<String>>,
    /// `limits.sessions_per_minute`, per principal.
    sessions: Option<DefaultKeyedRateLimiter<String>>,
    /// `limits.failed_auth_per_minute` (`None`: unlimited), and the wrong tokens by address.
    failed_auth: Option<(
        u32,
        parking_lot::Mutex<std::collections::HashMap<std::net::IpAddr, Failures>>,
    )>,
    failed_lookups: Option<DefaultKeyedRateLimiter<String>>,
    alerts: DefaultKeyedRateLimiter<String>,
    /// This node's id, for the audit events.
    node: u64,
}

impl Limits {
    pub(crate) fn new(cfg: &GatewayConfig, node: u64) -> Self {
        let requests = NonZeroU32::new(cfg.limits.requests_per_second).map(|rate| {
            let burst = NonZeroU32::new(cfg.limits.burst).unwrap_or(rate);
            RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
        });
        let failed_lookups = NonZeroU32::new(cfg.limits.failed_lookup_alert_per_minute)
            .map(|n| RateLimiter::keyed(Quota::per_minute(n)));
        let per_minute =
            |n: u32| NonZeroU32::new(n).map(|n| RateLimiter::keyed(Quota::per_minute(n)));
        let one = NonZeroU32::MIN;
        Self {
            requests,
            tasks: per_minute(cfg.limits.tasks_per_minute),
            sessions: per_minute(cfg.limits.sessions_per_minute),
            failed_auth: (cfg.limits.failed_auth_per_minute > 0).then(|| {
                (
                    cfg.limits.failed_auth_per_minute,
                    parking_lot::Mutex::default(),
                )
            }),
            failed_lookups,
            alerts: RateLimiter::keyed(Quota::per_minute(one)),
            node,
        }
    }

    /// Whether `principal` may make one more request now.
    pub(crate) fn allow_request(&self, principal: &str) -> bool {
        allow(self.requests.as_ref(), principal)
    }

    /// Whether `principal` may create one more task now (`limits.tasks_per_minute`).
    pub(crate) fn allow_task(&self, principal: &str) -> bool {
        allow(self.tasks.as_ref(), principal)
    }

    /// Whether `principal` may open one more session now (`limits.sessions_per_minute`).
    pub(crate) fn allow_session(&self, principal: &str) -> bool {
        allow(self.sessions.as_ref(), principal)
    }

    /// A wrong token (refused for `why`) from `peer`: [`WrongToken::Locked`] when the address
    /// sent `limits.failed_auth_per_minute` of them within its minute already (then nothing is
    /// counted or audited), else it is counted, and audited when it is the address's first of
    /// its minute (every one when no limit counts them, or the address is unknown); the one that
    /// reaches the limit is audited as `auth_failures_locked`.
    pub(crate) fn wrong_token(&self, peer: Option<std::net::IpAddr>, why: &str) -> WrongToken {
        let first = match (peer, &self.failed_auth) {
            (Some(ip), Some((limit, by_ip))) => match self.count_wrong_token(ip, *limit, by_ip) {
                Some(first) => first,
                None => return WrongToken::Locked,
            },
            _ => true,
        };
        tracing::debug!(reason = %why, "token refused");
        if first {
            crate::audit::warn("auth_failed", self.node, "", "", why, peer);
        }
        WrongToken::Counted
    }

    /// Count a wrong token from `ip` within its minute: whether it is the first of the minute,
    /// or `None` (nothing counted) when the address reached `limit` already.
    fn count_wrong_token(
        &self,
        ip: std::net::IpAddr,
        limit: u32,
        by_ip: &parking_lot::Mutex<std::collections::HashMap<std::net::IpAddr, Failures>>,
    ) -> Option<bool> {
        let mut by_ip = by_ip.lock();
        if by_ip.len() >= AUTH_TRACKED {
            by_ip.retain(|_, f| f.since.elapsed() < AUTH_WINDOW);
        }
        let now = std::time::Instant::now();
        let f = by_ip.entry(ip).or_insert(Failures {
            since: now,
            count: 0,
        });
        if f.since.elapsed() >= AUTH_WINDOW {
            *f = Failures {
                since: now,
                count: 0,
            };
        }
        if f.count >= limit {
            return None;
        }
        f.count += 1;
        if f.count == limit {
            crate::audit::warn(
                "auth_failures_locked",
                self.node,
                "",
                "",
                "wrong tokens from this address refused with 429 for the rest of its minute",
                Some(ip),
            );
        }
        Some(f.count == 1)
    }

    /// Count a lookup of an unknown (or foreign, or expired) task id.
    pub(crate) fn failed_lookup(&self, principal: &str, task_id: &str) {
        let Some(l) = &self.failed_lookups else {
            return;
        };
        let key = principal.to_string();
        if l.check_key(&key).is_err() && self.alerts.check_key(&key).is_ok() {
            crate::audit::warn(
                "failed_lookup_burst",
                self.node,
                principal,
                task_id,
                "burst of lookups of unknown task ids",
                None,
            );
        }
    }
}

/// Principals a keyed limiter tracks before the ones whose budget is full again are dropped.
const TRACKED_PRINCIPALS: usize = 10_000;

/// Whether `limiter` (none: no limit) lets `principal` go on now.
fn allow(limiter: Option<&DefaultKeyedRateLimiter<String>>, principal: &str) -> bool {
    let Some(l) = limiter else {
        return true;
    };
    let ok = l.check_key(&principal.to_string()).is_ok();
    if l.len() > TRACKED_PRINCIPALS {
        l.retain_recent();
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_past_its_wrong_tokens_is_locked_and_no_other_is() {
        let mut cfg = GatewayConfig::default();
        cfg.limits.failed_auth_per_minute = 3;
        let limits = Limits::new(&cfg, 1);
        let guesser: std::net::IpAddr = [127, 0, 0, 1].into();
        let other: std::net::IpAddr = [127, 0, 0, 2].into();
        let seen: Vec<_> = (0..6)
            .map(|_| limits.wrong_token(Some(guesser), "not a configured token"))
            .collect();
        assert_eq!(seen[..3], [WrongToken::Counted; 3]);
        assert_eq!(seen[3..], [WrongToken::Locked; 3]);
        assert_eq!(limits.wrong_token(Some(other), "x"), WrongToken::Counted);
        // Without an address, or without a limit, nothing locks.
        for _ in 0..5 {
            assert_eq!(limits.wrong_token(None, "x"), WrongToken::Counted);
        }
        cfg.limits.failed_auth_per_minute = 0;
        let open = Limits::new(&cfg, 1);
        for _ in 0..50 {
            assert_eq!(open.wrong_token(Some(guesser), "x"), WrongToken::Counted);
        }
    }
}
