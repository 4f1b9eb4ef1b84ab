//! Per-principal limits: a token-bucket request rate (HTTP 429 past it), the tasks and the
//! sessions a principal may create per minute (`-32001` past them), and a watch on bursts
//! of lookups of unknown task ids (enumeration attempts), reported as audit warnings; and per
//! client address, a cap on wrong tokens (guessing), past which the address is not heard for
//! the rest of its minute.

use std::num::NonZeroU32;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::GatewayConfig;

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
        let requests = NonZeroU32::new(cfg.rate_limit_per_second).map(|rate| {
            let burst = NonZeroU32::new(cfg.rate_limit_burst).unwrap_or(rate);
            RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
        });
        let failed_lookups = NonZeroU32::new(cfg.failed_lookup_alert_per_minute)
            .map(|n| RateLimiter::keyed(Quota::per_minute(n)));
        let per_minute =
            |n: u32| NonZeroU32::new(n).map(|n| RateLimiter::keyed(Quota::per_minute(n)));
        let one = NonZeroU32::MIN;
        Self {
            requests,
            tasks: per_minute(cfg.tasks_per_minute),
            sessions: per_minute(cfg.sessions_per_minute),
            failed_auth: (cfg.failed_auth_per_minute > 0)
                .then(|| (cfg.failed_auth_per_minute, parking_lot::Mutex::default())),
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

    /// Whether `ip` sent `limits.failed_auth_per_minute` wrong tokens within its minute.
    pub(crate) fn auth_locked(&self, ip: std::net::IpAddr) -> bool {
        let Some((limit, by_ip)) = &self.failed_auth else {
            return false;
        };
        by_ip
            .lock()
            .get(&ip)
            .is_some_and(|f| f.since.elapsed() < AUTH_WINDOW && f.count >= *limit)
    }

    /// Count a wrong token from `ip`; the one that reaches the limit is audited. Whether it is
    /// the first of the address's minute (or no limit counts them: then every one is).
    pub(crate) fn auth_failed(&self, ip: std::net::IpAddr) -> bool {
        let Some((limit, by_ip)) = &self.failed_auth else {
            return true;
        };
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
        f.count += 1;
        if f.count == *limit {
            tracing::warn!(
                target: "audit",
                event = "auth_failures_locked",
                principal = "",
                issuer = "",
                node = self.node,
                method = "",
                request_id = "",
                task_id = "",
                outcome = "address locked out for the rest of its minute",
                peer = %ip,
                failures = f.count,
                "too many wrong tokens from one address; not heard for the rest of its minute"
            );
        }
        f.count == 1
    }

    /// Count a lookup of an unknown (or foreign, or expired) task id.
    pub(crate) fn failed_lookup(&self, principal: &str, task_id: &str) {
        let Some(l) = &self.failed_lookups else {
            return;
        };
        let key = principal.to_string();
        if l.check_key(&key).is_err() && self.alerts.check_key(&key).is_ok() {
            tracing::warn!(
                target: "audit",
                event = "failed_lookup_burst",
                principal = %principal,
                issuer = "",
                node = self.node,
                method = "",
                request_id = "",
                task_id = %task_id,
                outcome = "burst of lookups of unknown task ids",
                "burst of lookups of unknown task ids"
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
