//! `[events]` (how task events are delivered to webhooks) and `[[webhooks]]` (the operator's
//! webhooks), documented in docs/configuration.md and docs/events.md.

use serde::Deserialize;
use taskmesh_webhook::{Cidr, EgressPolicy, Secret};

/// The longest name of an operator webhook.
pub const MAX_WEBHOOK_NAME: usize = 64;

/// `[events]`: timeouts, retries, concurrency and egress of webhook deliveries.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EventSettings {
    /// How long one delivery attempt may take (connect, send, answer), in ms. Default 5000;
    /// 100 to 60000.
    pub delivery_timeout_ms: u64,
    /// The wait before the second attempt, in ms; each later wait doubles, up to
    /// `retry_max_ms`. Default 1000; at least 10.
    pub retry_base_ms: u64,
    /// The longest wait between two attempts, in ms. Default 60000; at least `retry_base_ms`.
    pub retry_max_ms: u64,
    /// An event is given up (abandoned) once this long has passed since its status change and
    /// an attempt failed, in ms. Default 900000 (15 min); at least 1000.
    pub retry_window_ms: u64,
    /// Attempts per event and subscription before it is abandoned. Default 8; at least 1.
    pub max_attempts: u32,
    /// Deliveries in flight at once on a node (attempts and the waits between them).
    /// Default 256; at least 1.
    pub max_in_flight: usize,
    /// Attempts in flight at once to one destination (scheme, host and port). Default 16; at
    /// least 1.
    pub per_destination: usize,
    /// Attempts per second to one destination (scheme, host and port), bursts of as many;
    /// past it attempts wait their turn (delayed, never dropped). Default 0: no limit (the
    /// concurrency bound, `per_destination`, still holds).
    pub per_destination_per_second: u32,
    /// Failed attempts in a row to one webhook, spread over at least `suspend_after_ms`, after
    /// which a node suspends it: no more attempts but one probe every `probe_interval_ms`,
    /// until a probe is acknowledged. Default 100; 0 never suspends.
    pub suspend_after_failures: u32,
    /// See `suspend_after_failures`, in ms. Default 300000 (5 min).
    pub suspend_after_ms: u64,
    /// The wait between two probes of a suspended webhook, in ms. Default 30000; at least 100.
    pub probe_interval_ms: u64,
    /// Threads that render, sign, post and settle deliveries, apart from those that serve
    /// requests. Default 1; 1 to 64.
    pub delivery_threads: usize,
    /// How much lower the delivery threads' scheduling priority is than the request path's
    /// (Linux nice value added; 0 = the same), so that a create or a poll never waits behind a
    /// delivery for a core. Default 10; 0 to 19.
    pub delivery_nice: i32,
    /// How long a shard's leader gathers settled deliveries before it records them in one log
    /// entry, in ms: longer means fewer entries under load, and more events delivered again
    /// when the leader dies meanwhile. Default 50; at most 1000.
    pub settle_linger_ms: u64,
    /// Address blocks (`10.0.0.0/8`, `::1`) that webhooks may be sent to although they are not
    /// globally routable. Default none.
    pub allow_addresses: Vec<String>,
    /// Hosts (as written in URLs) that webhooks may be sent to over plain http. Default none:
    /// https only.
    pub http_hosts: Vec<String>,
    /// Status changes each shard keeps for `events/poll` and `events/stream`, the newest ones;
    /// a reader whose cursor is older is told it missed some (`truncated`). Must be the same on
    /// every node. Default 1000; at most 1000000; 0 keeps none.
    pub retain_changes: usize,
    /// The wait an `events/poll` answer suggests before the next poll (`nextPollMs`) when it
    /// has no more events, in ms. Default 1000; 100 to 3600000.
    pub poll_interval_ms: u64,
    /// Events one `events/poll` answers when the request does not say (`maxEvents`).
    /// Default 100; 1 to `max_poll_events`.
    pub default_poll_events: usize,
    /// The most events one `events/poll` answers, whatever the request's `maxEvents`. Default
    /// 1000; 1 to 1000.
    pub max_poll_events: usize,
    /// The interval of an `events/stream`'s heartbeats, in ms. Default 15000; 100 to 30000
    /// (the events extension asks for one at least every 30 s).
    pub stream_heartbeat_ms: u64,
    /// `events/stream` requests one principal may hold open on one node; one more is answered
    /// HTTP 429. Default 16; at least 1.
    pub max_streams_per_principal: usize,
    /// The life an `events/subscribe` grants when it asks for none (`ttlMs` absent), in ms.
    /// Default 3600000 (1 h); between `min_subscription_ttl_ms` and `max_subscription_ttl_ms`.
    pub subscription_ttl_ms: u64,
    /// The shortest life a subscription is granted (a shorter `ttlMs` is raised to it), in
    /// ms. Default 60000; at least 1000.
    pub min_subscription_ttl_ms: u64,
    /// The longest life a subscription is granted (a longer `ttlMs`, or `null`, is lowered to
    /// it), in ms. Default 86400000 (a day); at least `min_subscription_ttl_ms`.
    pub max_subscription_ttl_ms: u64,
    /// Webhook subscriptions one principal may hold (`events/subscribe` past it: -32025).
    /// Default 16; at least 1.
    pub max_subscriptions_per_principal: usize,
    /// How long deliveries stay signed with a secret a refresh replaced too, in ms. Default
    /// 300000 (5 min).
    pub secret_grace_ms: u64,
    /// URL prefixes whose endpoints need no verification handshake at `events/subscribe`
    /// (verified otherwise, or the operator's). Default none: every new subscription's
    /// endpoint must echo the challenge.
    pub verified_urls: Vec<String>,
    /// How long a node remembers that a principal's endpoint (its URL) passed verification,
    /// in ms: another subscription of that principal to that URL meanwhile is not verified
    /// again. Default 3600000 (1 h); at most 86400000; 0 remembers nothing.
    pub verification_cache_ms: u64,
    /// Verification POSTs a node sends to one host a minute; a new subscription that would
    /// need one more fails (-32025, `data.limit: "verifications"`) with nothing sent.
    /// Default 20; 1 to 10000.
    pub verifications_per_host_per_minute: u32,
}

impl Default for EventSettings {
    fn default() -> Self {
        Self {
            delivery_timeout_ms: 5_000,
            retry_base_ms: 1_000,
            retry_max_ms: 60_000,
            retry_window_ms: 900_000,
            max_attempts: 8,
            max_in_flight: 256,
            per_destination: 16,
            per_destination_per_second: 0,
            settle_linger_ms: 50,
            delivery_threads: 1,
            delivery_nice: 10,
            suspend_after_failures: 100,
            suspend_after_ms: 300_000,
            probe_interval_ms: 30_000,
            allow_addresses: Vec::new(),
            http_hosts: Vec::new(),
            retain_changes: taskmesh_task::changes::DEFAULT_CAPACITY,
            poll_interval_ms: 1_000,
            default_poll_events: 100,
            max_poll_events: 1_000,
            stream_heartbeat_ms: 15_000,
            max_streams_per_principal: 16,
            subscription_ttl_ms: 3_600_000,
            min_subscription_ttl_ms: 60_000,
            max_subscription_ttl_ms: 86_400_000,
            max_subscriptions_per_principal: 16,
            secret_grace_ms: 300_000,
            verified_urls: Vec::new(),
            verification_cache_ms: 3_600_000,
            verifications_per_host_per_minute: 20,
        }
    }
}

impl EventSettings {
    /// Refuse what cannot work, naming the setting.
    pub fn validate(&self) -> Result<(), String> {
        if !(100..=60_000).contains(&self.delivery_timeout_ms) {
            return Err("events.delivery_timeout_ms must be between 100 and 60000".into());
        }
        if self.retry_base_ms < 10 {
            return Err("events.retry_base_ms must be at least 10".into());
        }
        if self.retry_max_ms < self.retry_base_ms {
            return Err("events.retry_max_ms must be at least events.retry_base_ms".into());
        }
        if self.retry_window_ms < 1_000 {
            return Err("events.retry_window_ms must be at least 1000".into());
        }
        if self.max_attempts == 0 || self.max_in_flight == 0 || self.per_destination == 0 {
            return Err(
                "events.max_attempts, events.max_in_flight and events.per_destination must be at least 1"
                    .into(),
            );
        }
        if self.probe_interval_ms < 100 {
            return Err("events.probe_interval_ms must be at least 100".into());
        }
        if !(1..=64).contains(&self.delivery_threads) {
            return Err("events.delivery_threads must be 1 to 64".into());
        }
        if !(0..=19).contains(&self.delivery_nice) {
            return Err("events.delivery_nice must be 0 to 19".into());
        }
        if self.settle_linger_ms > 1_000 {
            return Err("events.settle_linger_ms must be at most 1000".into());
        }
        if self.retain_changes > taskmesh_task::changes::MAX_CAPACITY {
            return Err("events.retain_changes must be at most 1000000".into());
        }
        if !(100..=3_600_000).contains(&self.poll_interval_ms) {
            return Err("events.poll_interval_ms must be between 100 and 3600000".into());
        }
        if !(1..=crate::ops::MAX_EVENT_PAGE).contains(&self.max_poll_events) {
            return Err("events.max_poll_events must be between 1 and 1000".into());
        }
        if !(1..=self.max_poll_events).contains(&self.default_poll_events) {
            return Err(
                "events.default_poll_events must be between 1 and events.max_poll_events".into(),
            );
        }
        if !(100..=30_000).contains(&self.stream_heartbeat_ms) {
            return Err("events.stream_heartbeat_ms must be between 100 and 30000".into());
        }
        if self.verification_cache_ms > 86_400_000 {
            return Err("events.verification_cache_ms must be at most 86400000".into());
        }
        if !(1..=10_000).contains(&self.verifications_per_host_per_minute) {
            return Err("events.verifications_per_host_per_minute must be 1 to 10000".into());
        }
        if self.max_streams_per_principal == 0 {
            return Err("events.max_streams_per_principal must be at least 1".into());
        }
        if self.min_subscription_ttl_ms < 1_000 {
            return Err("events.min_subscription_ttl_ms must be at least 1000".into());
        }
        if self.max_subscription_ttl_ms < self.min_subscription_ttl_ms {
            return Err(
                "events.max_subscription_ttl_ms must be at least events.min_subscription_ttl_ms"
                    .into(),
            );
        }
        if !(self.min_subscription_ttl_ms..=self.max_subscription_ttl_ms)
            .contains(&self.subscription_ttl_ms)
        {
            return Err("events.subscription_ttl_ms must be between events.min_subscription_ttl_ms and events.max_subscription_ttl_ms".into());
        }
        if self.max_subscriptions_per_principal == 0 {
            return Err("events.max_subscriptions_per_principal must be at least 1".into());
        }
        self.policy().map(|_| ())
    }

    /// The egress policy these settings describe.
    pub fn policy(&self) -> Result<EgressPolicy, String> {
        let allow = self
            .allow_addresses
            .iter()
            .map(|a| {
                a.parse::<Cidr>()
                    .map_err(|e| format!("events.allow_addresses: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(EgressPolicy {
            allow,
            http_hosts: self.http_hosts.clone(),
        })
    }

    /// The wait after failed attempt `n` (from 1): `retry_base_ms` doubled n - 1 times, at most
    /// `retry_max_ms`.
    pub fn backoff_ms(&self, attempt: u32) -> u64 {
        let doublings = attempt.saturating_sub(1).min(32);
        self.retry_base_ms
            .saturating_mul(1u64 << doublings)
            .min(self.retry_max_ms)
    }
}

/// `[[webhooks]]`: one operator webhook, sent the events of every task (of the listed
/// principals, when some are listed).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSettings {
    /// Its name: 1 to 64 of `a-z`, `0-9`, `-` and `_`. Its subscription id (the
    /// `X-MCP-Subscription-Id` header) is `wh_` and the name.
    pub name: String,
    /// Where events are sent: an https URL (http only to a host of `events.http_hosts`).
    pub url: String,
    /// The signing secret: `whsec_` and the base64 of 24 to 64 random bytes.
    pub secret: String,
    /// Send only the change that ends a task (`completed`, `failed`, `cancelled`). Default
    /// false: every status change.
    #[serde(default)]
    pub terminal_only: bool,
    /// The principals whose tasks it receives; empty (the default): every principal's.
    #[serde(default)]
    pub principals: Vec<String>,
}

impl WebhookSettings {
    /// The subscription id of the webhook.
    pub fn subscription_id(&self) -> String {
        format!("wh_{}", self.name)
    }

    /// Whether it receives the events of `owner`'s tasks.
    pub fn covers(&self, owner: &str) -> bool {
        self.principals.is_empty() || self.principals.iter().any(|p| p == owner)
    }
}

/// Refuse webhooks that cannot work, naming the one at fault: a bad name, a name used twice,
/// a secret that is not a `whsec_` secret, a URL the egress policy refuses as written.
pub fn validate_webhooks(hooks: &[WebhookSettings], events: &EventSettings) -> Result<(), String> {
    let policy = events.policy()?;
    let mut names = std::collections::HashSet::new();
    for h in hooks {
        let valid = !h.name.is_empty()
            && h.name.len() <= MAX_WEBHOOK_NAME
            && h.name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if !valid {
            return Err(format!(
                "webhooks: the name {:?} must be 1 to {MAX_WEBHOOK_NAME} of a-z, 0-9, - and _",
                h.name
            ));
        }
        if !names.insert(h.name.as_str()) {
            return Err(format!("webhooks: the name {:?} is used twice", h.name));
        }
        Secret::parse(&h.secret).map_err(|e| format!("webhooks.{}.secret: {e}", h.name))?;
        policy
            .check_url(&h.url)
            .map_err(|e| format!("webhooks.{}.url: {e}", h.name))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(name: &str, url: &str) -> WebhookSettings {
        WebhookSettings {
            name: name.into(),
            url: url.into(),
            secret: "whsec_KioqKioqKioqKioqKioqKioqKioqKioq".into(),
            terminal_only: false,
            principals: Vec::new(),
        }
    }

    #[test]
    fn webhooks_and_their_settings_are_checked() {
        let events = EventSettings::default();
        assert!(events.validate().is_ok());
        assert!(validate_webhooks(&[hook("ci", "https://hooks.example.com/x")], &events).is_ok());
        for (bad, why) in [
            (vec![hook("CI", "https://h.example.com/")], "name"),
            (vec![hook("", "https://h.example.com/")], "name"),
            (
                vec![
                    hook("a", "https://h.example.com/"),
                    hook("a", "https://h.example.com/"),
                ],
                "twice",
            ),
            (vec![hook("a", "http://h.example.com/")], "https"),
            (vec![hook("a", "https://127.0.0.1/")], "globally routable"),
            (
                vec![WebhookSettings {
                    secret: "nope".into(),
                    ..hook("a", "https://h.example.com/")
                }],
                "whsec_",
            ),
        ] {
            let e = validate_webhooks(&bad, &events).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
        let loopback = EventSettings {
            allow_addresses: vec!["127.0.0.0/8".into()],
            http_hosts: vec!["127.0.0.1".into()],
            ..EventSettings::default()
        };
        assert!(validate_webhooks(&[hook("a", "http://127.0.0.1:9/x")], &loopback).is_ok());
        let bad = EventSettings {
            allow_addresses: vec!["10.0.0.0/99".into()],
            ..EventSettings::default()
        };
        assert!(bad.validate().unwrap_err().contains("allow_addresses"));
        let bad = EventSettings {
            retry_max_ms: 5,
            ..EventSettings::default()
        };
        assert!(bad.validate().is_err());
        let d = EventSettings::default;
        for (bad, key) in [
            (
                EventSettings {
                    retain_changes: 1_000_001,
                    ..d()
                },
                "retain_changes",
            ),
            (
                EventSettings {
                    poll_interval_ms: 10,
                    ..d()
                },
                "poll_interval_ms",
            ),
            (
                EventSettings {
                    max_poll_events: 0,
                    ..d()
                },
                "max_poll_events",
            ),
            (
                EventSettings {
                    max_poll_events: 1_001,
                    ..d()
                },
                "max_poll_events",
            ),
            (
                EventSettings {
                    default_poll_events: 0,
                    ..d()
                },
                "default_poll_events",
            ),
            (
                EventSettings {
                    default_poll_events: 2_000,
                    ..d()
                },
                "default_poll_events",
            ),
            (
                EventSettings {
                    stream_heartbeat_ms: 31_000,
                    ..d()
                },
                "stream_heartbeat_ms",
            ),
            (
                EventSettings {
                    max_streams_per_principal: 0,
                    ..d()
                },
                "max_streams_per_principal",
            ),
            (
                EventSettings {
                    delivery_threads: 0,
                    ..d()
                },
                "delivery_threads",
            ),
            (
                EventSettings {
                    delivery_threads: 65,
                    ..d()
                },
                "delivery_threads",
            ),
            (
                EventSettings {
                    delivery_nice: -1,
                    ..d()
                },
                "delivery_nice",
            ),
            (
                EventSettings {
                    delivery_nice: 20,
                    ..d()
                },
                "delivery_nice",
            ),
        ] {
            let e = bad.validate().unwrap_err();
            assert!(e.contains(&format!("events.{key}")), "{e}");
        }
    }

    #[test]
    fn the_backoff_doubles_up_to_its_cap() {
        let s = EventSettings::default();
        let waits: Vec<u64> = (1..=9).map(|n| s.backoff_ms(n)).collect();
        assert_eq!(
            waits,
            vec![1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000, 60_000]
        );
        assert_eq!(s.backoff_ms(u32::MAX), 60_000);
    }
}
