//! Where a webhook's events go: an operator webhook's target, made once, or a client
//! subscription's, read from the shard's state for each attempt.

use std::sync::Arc;

use taskmesh_metrics::metrics::{counter, gauge, histogram};
use taskmesh_metrics::names;
use taskmesh_shard::ShardReplica;
use taskmesh_webhook::Secret;

use super::{destination_key, Delivery};
use crate::now_ms;

/// Where a subscription's events go, how they are signed, and its metrics.
pub(super) struct Target {
    /// The `webhook` label of its metrics: an operator webhook's name, a client
    /// subscription's id.
    pub(super) name: String,
    pub(super) url: String,
    /// Its scheme, host and port: the attempts in flight and the rate are per destination.
    pub(super) destination: String,
    /// The current secret first, then one a refresh replaced, while it is honoured.
    pub(super) secrets: Vec<Secret>,
    /// Its metrics, registered once (an attempt does not look them up).
    pub(super) attempts: taskmesh_metrics::metrics::Counter,
    pub(super) lag: taskmesh_metrics::metrics::Histogram,
    pub(super) acked: taskmesh_metrics::metrics::Counter,
    pub(super) refused: taskmesh_metrics::metrics::Counter,
    pub(super) abandoned: taskmesh_metrics::metrics::Counter,
    pub(super) suspended: taskmesh_metrics::metrics::Gauge,
}

impl Target {
    pub(super) fn new(name: String, url: String, secrets: Vec<Secret>) -> Self {
        let settled = |outcome: &'static str| counter!(names::WEBHOOK_DELIVERIES, "webhook" => name.clone(), "outcome" => outcome);
        Self {
            destination: destination_key(&url),
            attempts: counter!(names::WEBHOOK_ATTEMPTS, "webhook" => name.clone()),
            lag: histogram!(names::WEBHOOK_LAG, "webhook" => name.clone()),
            acked: settled("acked"),
            refused: settled("refused"),
            abandoned: settled("abandoned"),
            suspended: gauge!(names::WEBHOOK_SUSPENDED, "webhook" => name.clone()),
            name,
            url,
            secrets,
        }
    }
}

impl Delivery {
    /// The target of `subscription`: an operator webhook, or a client subscription the shard
    /// holds that has not lapsed; `None` when it is neither (gone).
    pub(super) fn target(&self, shard: &ShardReplica, subscription: &str) -> Option<Arc<Target>> {
        if let Some(h) = self.hooks.get(subscription) {
            return Some(h.target.clone());
        }
        let now = now_ms();
        let sub = shard.read_local(|s| s.subscription(subscription).cloned())?;
        if sub.lapsed(now) {
            return None;
        }
        let mut secrets = vec![Secret::parse(&sub.secret).ok()?];
        if let Some(previous) = &sub.previous_secret {
            if sub.previous_until_ms > now {
                secrets.extend(Secret::parse(previous).ok());
            }
        }
        Some(Arc::new(Target::new(sub.id, sub.url, secrets)))
    }
}
