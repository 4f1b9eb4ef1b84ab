//! Where a webhook's events go: an operator webhook's target, made once, or a client
//! subscription's, made when it is first delivered to and again only when its URL or secrets
//! change (a refresh), so that an attempt neither parses a URL nor registers a metric.

use std::collections::HashMap;
use std::sync::Arc;

use taskmesh_metrics::metrics::{counter, gauge, histogram};
use taskmesh_metrics::names;
use taskmesh_shard::ShardReplica;
use taskmesh_webhook::{EgressError, EgressPolicy, Endpoint, Secret};

use super::Delivery;
use crate::now_ms;

/// Most client subscriptions' targets a node keeps made; past it they are made again as
/// needed.
const MAX_KEPT_TARGETS: usize = 4096;

/// Where a subscription's events go, how they are signed, and its metrics.
pub(super) struct Target {
    /// The `webhook` label of its metrics: an operator webhook's name, a client
    /// subscription's id.
    pub(super) name: String,
    /// The URL as configured or subscribed.
    url: String,
    /// The URL as the egress policy passed it, or why it does not (every attempt then fails
    /// as refused, sending nothing).
    pub(super) endpoint: Result<Endpoint, EgressError>,
    /// The current secret first, then one a refresh replaced, while it is honoured.
    pub(super) secrets: Vec<Secret>,
    /// The texts of `secrets`, to tell whether a refresh changed them.
    secret_texts: Vec<String>,
    /// Its metrics, registered once (an attempt does not look them up).
    pub(super) attempts: taskmesh_metrics::metrics::Counter,
    pub(super) lag: taskmesh_metrics::metrics::Histogram,
    pub(super) acked: taskmesh_metrics::metrics::Counter,
    pub(super) refused: taskmesh_metrics::metrics::Counter,
    pub(super) abandoned: taskmesh_metrics::metrics::Counter,
    pub(super) suspended: taskmesh_metrics::metrics::Gauge,
}

impl Target {
    /// The target of `url`, signing with the secrets of `secret_texts` (each already valid:
    /// checked when configured or subscribed); `None` if one is not.
    pub(super) fn new(
        name: String,
        url: String,
        secret_texts: Vec<String>,
        policy: &EgressPolicy,
    ) -> Option<Self> {
        let secrets = secret_texts
            .iter()
            .map(|s| Secret::parse(s).ok())
            .collect::<Option<Vec<_>>>()?;
        let endpoint = policy.check_url(&url);
        let settled = |outcome: &'static str| counter!(names::WEBHOOK_DELIVERIES, "webhook" => name.clone(), "outcome" => outcome);
        Some(Self {
            endpoint,
            attempts: counter!(names::WEBHOOK_ATTEMPTS, "webhook" => name.clone()),
            lag: histogram!(names::WEBHOOK_LAG, "webhook" => name.clone()),
            acked: settled("acked"),
            refused: settled("refused"),
            abandoned: settled("abandoned"),
            suspended: gauge!(names::WEBHOOK_SUSPENDED, "webhook" => name.clone()),
            name,
            url,
            secrets,
            secret_texts,
        })
    }
}

/// What the shard holds of a client subscription, against the target made of it before.
enum Found {
    /// No such subscription, or it lapsed.
    Gone,
    /// As when its target was made.
    Same(Arc<Target>),
    /// New here, or refreshed since: (url, secret texts).
    Changed(String, Vec<String>),
}

impl Delivery {
    /// The target of `subscription`: an operator webhook, or a client subscription the shard
    /// holds that has not lapsed; `None` when it is neither (gone).
    pub(super) fn target(&self, shard: &ShardReplica, subscription: &str) -> Option<Arc<Target>> {
        if let Some(h) = self.hooks.get(subscription) {
            return Some(h.target.clone());
        }
        let now = now_ms();
        let kept = self.client_targets.lock().get(subscription).cloned();
        let found = shard.read_local(|s| {
            let Some(sub) = s.subscription(subscription) else {
                return Found::Gone;
            };
            if sub.lapsed(now) {
                return Found::Gone;
            }
            let previous = sub
                .previous_secret
                .as_ref()
                .filter(|_| sub.previous_until_ms > now);
            let same = kept.as_ref().filter(|t| {
                t.url == sub.url
                    && t.secret_texts.first() == Some(&sub.secret)
                    && t.secret_texts.get(1) == previous
            });
            match same {
                Some(t) => Found::Same(t.clone()),
                None => Found::Changed(
                    sub.url.clone(),
                    std::iter::once(sub.secret.clone())
                        .chain(previous.cloned())
                        .collect(),
                ),
            }
        });
        match found {
            Found::Same(t) => Some(t),
            Found::Gone => {
                self.client_targets.lock().remove(subscription);
                None
            }
            Found::Changed(url, secrets) => {
                let made = Arc::new(Target::new(
                    subscription.to_owned(),
                    url,
                    secrets,
                    self.sender.policy(),
                )?);
                let mut kept = self.client_targets.lock();
                if kept.len() >= MAX_KEPT_TARGETS {
                    kept.clear();
                }
                kept.insert(subscription.to_owned(), made.clone());
                Some(made)
            }
        }
    }
}

/// Client subscriptions' targets by id.
pub(super) type KeptTargets = parking_lot::Mutex<HashMap<String, Arc<Target>>>;
