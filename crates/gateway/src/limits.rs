//! Per-principal limits: a token-bucket request rate (HTTP 429 past it) and a watch on bursts
//! of lookups of unknown task ids (enumeration attempts), reported as audit warnings.

use std::num::NonZeroU32;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::GatewayConfig;

pub(crate) struct Limits {
    requests: Option<DefaultKeyedRateLimiter<String>>,
    failed_lookups: Option<DefaultKeyedRateLimiter<String>>,
    alerts: DefaultKeyedRateLimiter<String>,
}

impl Limits {
    pub(crate) fn new(cfg: &GatewayConfig) -> Self {
        let requests = NonZeroU32::new(cfg.rate_limit_per_second).map(|rate| {
            let burst = NonZeroU32::new(cfg.rate_limit_burst).unwrap_or(rate);
            RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
        });
        let failed_lookups = NonZeroU32::new(cfg.failed_lookup_alert_per_minute)
            .map(|n| RateLimiter::keyed(Quota::per_minute(n)));
        let one = NonZeroU32::MIN;
        Self {
            requests,
            failed_lookups,
            alerts: RateLimiter::keyed(Quota::per_minute(one)),
        }
    }

    /// Whether `principal` may make one more request now.
    pub(crate) fn allow_request(&self, principal: &str) -> bool {
        match &self.requests {
            None => true,
            Some(l) => {
                let ok = l.check_key(&principal.to_string()).is_ok();
                if l.len() > 10_000 {
                    l.retain_recent();
                }
                ok
            }
        }
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
                task_id = %task_id,
                "burst of lookups of unknown task ids"
            );
        }
    }
}
