//! Delivery of task events to webhooks, from the outboxes of the shards this node leads.
//!
//! A watched task's status change is owed to its watchers in the same log entry that makes it
//! (`taskmesh_task::outbox`). Here the leader of each shard pays what its records owe: for
//! every (event, subscription) pair still pending it renders the event, signs and posts it
//! (`taskmesh_webhook`), retries with a doubling wait while the receiver fails, and settles the
//! pair through the shard's log once the receiver acknowledged it (2xx), refused it for good
//! (410, 413), or the retries ran out (attempts or window: abandoned). A node that stops
//! leading a shard stops its attempts there; the new leader finds the unsettled pairs in its
//! state and delivers them again. So every event reaches a receiver that answers at least
//! once, the receiver drops duplicates by `webhook-id` (the event id), and nothing here slows
//! a create or a poll: the obligation is written with the status change, the sending happens
//! after, in tasks of its own, bounded per node and per destination.

pub mod event;
mod lane;
pub mod reads;
pub mod settings;
mod status;
pub mod subscriptions;
mod suspend;
mod target;
mod verify;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use taskmesh_shard::{ShardEvent, ShardReplica};
use taskmesh_task::{Command, OutboxEvent, Settlement, TaskRecord, Watcher};
use taskmesh_webhook::{Attempt, Failure, Message, Secret, Sender};
use tokio::sync::{mpsc, Semaphore};

pub use settings::{validate_webhooks, EventSettings, WebhookSettings};
pub use status::{DeliveryStats, WebhookStatus};
use suspend::{Admit, Breakers, Seen};
use target::Target;
pub use verify::VerifyError;

use crate::now_ms;

/// Most pairs one `Settle` entry settles: what the deliveries of a shard settled while its
/// previous `Settle` was being committed, up to this.
pub const MAX_SETTLE_BATCH: usize = 1024;

use event::Renderer;
pub use event::{event_id, Render, TASK_EVENT};

/// One operator webhook, ready to sign with.
struct Hook {
    settings: WebhookSettings,
    /// Where its events go, ready for every attempt.
    target: Arc<Target>,
}

/// A pair owed: an event of a task, and a subscription it is owed to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Pair {
    task_id: String,
    index: u64,
    subscription: String,
}

/// The node's delivery of events: its webhooks, client and bounds, and the pairs in flight.
pub(crate) struct Delivery {
    settings: EventSettings,
    hooks: HashMap<String, Hook>,
    pub(crate) sender: Sender,
    render: Renderer,
    /// Pairs being delivered on this node, so that a pair is attempted by one task at a time.
    in_flight: Mutex<HashSet<Pair>>,
    /// Deliveries in flight on the node (`events.max_in_flight`).
    permits: Arc<Semaphore>,
    /// Attempts in flight per destination (`events.per_destination`).
    destinations: Mutex<HashMap<String, Arc<Semaphore>>>,
    /// Attempts per second per destination (`events.per_destination_per_second`); `None`: no
    /// limit.
    rates: Option<governor::DefaultKeyedRateLimiter<String>>,
    /// Per subscription id, what this node's deliveries came to.
    stats: Mutex<HashMap<String, DeliveryStats>>,
    /// Which webhooks this node has suspended.
    breakers: Arc<Breakers>,
    /// The threads deliveries run on.
    lane: lane::Lane,
    /// Client subscriptions' targets, made once per URL and secrets.
    client_targets: target::KeptTargets,
    /// Endpoint verification: what passed lately, and the rate per host.
    verifier: verify::Verifier,
}

impl Delivery {
    /// The delivery of these webhooks and of the clients' subscriptions.
    pub(crate) fn new(
        settings: &EventSettings,
        webhooks: &[WebhookSettings],
        render: Renderer,
    ) -> Result<Self, String> {
        validate_webhooks(webhooks, settings)?;
        let sender = Sender::new(
            settings.policy()?,
            Duration::from_millis(settings.delivery_timeout_ms),
            settings.per_destination,
        )?;
        let hooks = webhooks
            .iter()
            .map(|w| {
                let target = Target::new(
                    w.name.clone(),
                    w.url.clone(),
                    vec![w.secret.clone()],
                    sender.policy(),
                )
                .ok_or_else(|| format!("webhooks.{}.secret is not a whsec_ secret", w.name))?;
                Ok((
                    w.subscription_id(),
                    Hook {
                        settings: w.clone(),
                        target: Arc::new(target),
                    },
                ))
            })
            .collect::<Result<HashMap<_, _>, String>>()?;
        Ok(Self {
            settings: settings.clone(),
            hooks,
            sender,
            render,
            in_flight: Mutex::new(HashSet::new()),
            permits: Arc::new(Semaphore::new(settings.max_in_flight)),
            destinations: Mutex::new(HashMap::new()),
            rates: std::num::NonZeroU32::new(settings.per_destination_per_second)
                .map(|n| governor::RateLimiter::keyed(governor::Quota::per_second(n))),
            stats: Mutex::new(HashMap::new()),
            breakers: Breakers::new(settings),
            lane: lane::Lane::new(settings.delivery_threads, settings.delivery_nice)
                .map_err(|e| format!("the delivery threads could not start: {e}"))?,
            client_targets: target::KeptTargets::default(),
            verifier: verify::Verifier::new(settings),
        })
    }

    /// Run the delivery loop of `shard` on the delivery threads.
    pub(crate) fn spawn_loop(self: &Arc<Self>, shard: ShardReplica) -> tokio::task::JoinHandle<()> {
        self.lane.spawn(shard_loop(self.clone(), shard))
    }

    /// The watchers a new task of `owner` starts with: every webhook that covers its principal.
    pub(crate) fn watchers_for(&self, owner: &str) -> Vec<Watcher> {
        let mut w: Vec<Watcher> = self
            .hooks
            .iter()
            .filter(|(_, h)| h.settings.covers(owner))
            .map(|(id, h)| Watcher {
                id: id.clone(),
                terminal_only: h.settings.terminal_only,
            })
            .collect();
        w.sort_by(|a, b| a.id.cmp(&b.id));
        w
    }

    /// Every client subscription of `subs`, with this node's deliveries to it, by id.
    pub(crate) fn client_status<'a>(
        &self,
        subs: impl Iterator<Item = &'a taskmesh_task::Subscription>,
    ) -> Vec<WebhookStatus> {
        let in_flight = self.in_flight.lock();
        subs.map(|sub| WebhookStatus {
            kind: "client",
            name: sub.id.clone(),
            subscription: sub.id.clone(),
            url: sub.url.clone(),
            terminal_only: sub.terminal_only,
            principals: vec![sub.principal.clone()],
            task_id: sub.task_id.clone(),
            expires_at_ms: Some(sub.expires_at_ms),
            in_flight: in_flight
                .iter()
                .filter(|p| p.subscription == sub.id)
                .count(),
            deliveries: self.stats_of(&sub.id),
        })
        .collect()
    }

    /// Every webhook, by name, with this node's deliveries to it.
    pub(crate) fn status(&self) -> Vec<WebhookStatus> {
        let in_flight = self.in_flight.lock();
        let stats = self.stats.lock();
        let mut all: Vec<WebhookStatus> = self
            .hooks
            .iter()
            .map(|(id, h)| WebhookStatus {
                kind: "operator",
                task_id: None,
                expires_at_ms: None,
                name: h.settings.name.clone(),
                subscription: id.clone(),
                url: h.settings.url.clone(),
                terminal_only: h.settings.terminal_only,
                principals: h.settings.principals.clone(),
                in_flight: in_flight.iter().filter(|p| &p.subscription == id).count(),
                deliveries: DeliveryStats {
                    suspended_since_ms: self.breakers.suspended_since(id),
                    ..stats.get(id).cloned().unwrap_or_default()
                },
            })
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Stop suspending `subscription` on this node (a refresh reactivates it).
    pub(crate) fn reactivate(&self, subscription: &str) {
        self.breakers.reset(subscription);
    }

    /// What this node's deliveries to `subscription` came to.
    pub(crate) fn stats_of(&self, subscription: &str) -> DeliveryStats {
        DeliveryStats {
            suspended_since_ms: self.breakers.suspended_since(subscription),
            ..self
                .stats
                .lock()
                .get(subscription)
                .cloned()
                .unwrap_or_default()
        }
    }

    /// Count an attempt to `subscription` (`probe`: of a suspended webhook) and what it came to
    /// (`None`: failed, to be retried).
    fn count(
        &self,
        target: &Target,
        subscription: &str,
        got: &Attempt,
        settled: Option<&'static str>,
        probe: bool,
    ) {
        let seen = match got {
            Attempt::Acked(_) => Seen::Answered,
            Attempt::Refused(_) => Seen::Refusing,
            Attempt::Failed(_) => Seen::Failing,
        };
        self.breakers.record(subscription, seen, probe);
        let suspended = self.breakers.suspended(subscription);
        target.suspended.set(if suspended { 1.0 } else { 0.0 });
        let now = now_ms();
        let mut stats = self.stats.lock();
        let s = stats.entry(subscription.to_owned()).or_default();
        s.attempts += 1;
        match got {
            Attempt::Acked(_) => {
                s.last_delivery_at_ms = Some(now);
                s.failing_since_ms = None;
            }
            Attempt::Refused(_) => {}
            Attempt::Failed(f) => {
                s.last_error = Some(f.category());
                s.failing_since_ms.get_or_insert(now);
            }
        }
        match settled {
            Some("acked") => {
                s.acked += 1;
                target.acked.increment(1);
            }
            Some("refused") => {
                s.refused += 1;
                target.refused.increment(1);
            }
            Some("abandoned") => {
                s.abandoned += 1;
                target.abandoned.increment(1);
            }
            _ => {}
        }
    }

    /// Wait for a turn to attempt to `url`'s destination: a place among the attempts in flight
    /// there, and within its rate.
    async fn turn(&self, key: &str) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let key = key.to_owned();
        let slot = self
            .destinations
            .lock()
            .entry(key.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(self.settings.per_destination)))
            .clone();
        let permit = slot.acquire_owned().await.ok()?;
        if let Some(rates) = &self.rates {
            rates.until_key_ready(&key).await;
        }
        Some(permit)
    }

    /// The body of an event: its id, type, time and the task as it was.
    fn body(&self, record: &TaskRecord, event: &OutboxEvent) -> Vec<u8> {
        let change = taskmesh_task::Change {
            index: event.index,
            task_id: record.task_id.clone(),
            status: event.status,
            status_message: event.status_message.clone(),
            at_ms: event.at_ms,
        };
        self.render.occurrence(record, &change).into_bytes()
    }
}

/// The pairs `record` owes.
fn pairs(record: &TaskRecord) -> Vec<Pair> {
    let Some(outbox) = &record.outbox else {
        return Vec::new();
    };
    outbox
        .events
        .iter()
        .flat_map(|e| {
            e.pending.iter().map(|s| Pair {
                task_id: record.task_id.clone(),
                index: e.index,
                subscription: s.clone(),
            })
        })
        .collect()
}

/// The failure category named `name` (`connection_refused`, `timeout`, `tls_error`,
/// `http_4xx`, `http_5xx`, `challenge_failed`), if it is one.
pub fn error_category(name: &str) -> Option<&'static str> {
    taskmesh_webhook::Failure::category_named(name)
}

/// What a pair came to.
enum Settled {
    /// Acknowledged, refused for good or abandoned: settle it.
    Pair,
    /// Its subscription no longer exists: stop it watching the task.
    Unwatch,
}

/// The loop of one shard: while this node leads it, deliver what its records owe, those found
/// when the leadership began and those that changes add.
pub(crate) async fn shard_loop(delivery: Arc<Delivery>, shard: ShardReplica) {
    let mut leadership = shard.leadership();
    let mut events = shard.subscribe();
    let mut rescans = delivery.breakers.rescans();
    let (settle, settled) = mpsc::channel(delivery.settings.max_in_flight);
    tokio::spawn(settler(delivery.clone(), shard.clone(), settled));
    loop {
        if shard.is_leader() {
            let owed: Vec<Pair> = shard.read_local(|s| s.unsettled().flat_map(pairs).collect());
            for p in owed {
                start(&delivery, &shard, &settle, p);
            }
        }
        // Until the leadership changes, the event stream lagged, or a suspended webhook's
        // probe is due or it resumed (then look again).
        loop {
            tokio::select! {
                changed = rescans.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    break;
                }
                changed = leadership.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    break;
                }
                event = events.recv() => match event {
                    Ok(ShardEvent::Changed { record, .. }) => {
                        if record.has_unsettled() && shard.is_leader() {
                            for p in pairs(&record) {
                                start(&delivery, &shard, &settle, p);
                            }
                        }
                    }
                    Ok(ShardEvent::Expired { .. }) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => break,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    }
}

/// Deliver `pair` in a task of its own, unless it is being delivered already; what it comes to
/// goes to the shard's settler.
fn start(
    delivery: &Arc<Delivery>,
    shard: &ShardReplica,
    settle: &mpsc::Sender<(Pair, Settled)>,
    pair: Pair,
) {
    {
        let mut in_flight = delivery.in_flight.lock();
        if in_flight.contains(&pair) {
            return;
        }
        let probe = match delivery.breakers.admit(&pair.subscription) {
            Admit::Closed => return,
            Admit::Open => false,
            Admit::Probe => true,
        };
        in_flight.insert(pair.clone());
        drop(in_flight);
        let (delivery, shard, settle) = (delivery.clone(), shard.clone(), settle.clone());
        tokio::spawn(async move {
            let done = attempts(&delivery, &shard, &pair, probe).await;
            if probe {
                delivery.breakers.probe_done(&pair.subscription);
            }
            match done {
                Some(done) => {
                    if let Err(mpsc::error::SendError((pair, _))) = settle.send((pair, done)).await
                    {
                        delivery.in_flight.lock().remove(&pair);
                    }
                }
                None => {
                    delivery.in_flight.lock().remove(&pair);
                }
            }
        });
    }
}

/// Settle what the shard's deliveries came to, many pairs per log entry: each `Settle` takes
/// what arrived while the previous one was being committed, and for `events.settle_linger_ms`
/// after the first. A pair stays in flight until its
/// `Settle` is committed (or failed: the leadership moved, and the shard's next leader delivers
/// it again), so that it is not attempted twice here meanwhile.
async fn settler(
    delivery: Arc<Delivery>,
    shard: ShardReplica,
    mut settled: mpsc::Receiver<(Pair, Settled)>,
) {
    let linger = Duration::from_millis(delivery.settings.settle_linger_ms);
    while let Some(first) = settled.recv().await {
        if !linger.is_zero() {
            tokio::time::sleep(linger).await;
        }
        let mut batch = vec![first];
        while batch.len() < MAX_SETTLE_BATCH {
            match settled.try_recv() {
                Ok(more) => batch.push(more),
                Err(_) => break,
            }
        }
        let mut by_task: BTreeMap<&str, Settlement> = BTreeMap::new();
        for (pair, done) in &batch {
            let s = by_task
                .entry(pair.task_id.as_str())
                .or_insert_with(|| Settlement {
                    task_id: pair.task_id.clone(),
                    events: Vec::new(),
                    unwatch: Vec::new(),
                });
            match done {
                Settled::Pair => s.events.push((pair.index, pair.subscription.clone())),
                Settled::Unwatch => s.unwatch.push(pair.subscription.clone()),
            }
        }
        let cmd = Command::Settle {
            settled: by_task.into_values().collect(),
        };
        if let Err(e) = shard.propose(cmd).await {
            tracing::debug!(shard = shard.shard_id(), pairs = batch.len(), error = %e, "settling webhook deliveries failed; the shard's next leader delivers them again");
        }
        let mut in_flight = delivery.in_flight.lock();
        for (pair, _) in &batch {
            in_flight.remove(pair);
        }
    }
}

/// Attempt `pair` until it is settled, or until this node no longer leads the shard, the pair
/// is no longer owed, or its webhook is suspended (`None`: nothing to settle here). A `probe`
/// of a suspended webhook is one attempt.
async fn attempts(
    delivery: &Delivery,
    shard: &ShardReplica,
    pair: &Pair,
    probe: bool,
) -> Option<Settled> {
    let _permit = delivery.permits.clone().acquire_owned().await.ok()?;
    let mut attempt = 0u32;
    loop {
        if !shard.is_leader() || (attempt > 0 && delivery.breakers.suspended(&pair.subscription)) {
            return None;
        }
        // Rendered from the record where it is: no copy of the record per attempt.
        let (body, event_id, at_ms) =
            shard.read_local(|s| {
                let r = s.get(&pair.task_id)?;
                let e =
                    r.outbox.as_ref()?.events.iter().find(|e| {
                        e.index == pair.index && e.pending.contains(&pair.subscription)
                    })?;
                Some((delivery.body(r, e), e.event_id(&r.task_id), e.at_ms))
            })?;
        let Some(hook) = delivery.target(shard, &pair.subscription) else {
            return Some(Settled::Unwatch);
        };
        attempt += 1;
        let got = match &hook.endpoint {
            Err(refused) => Attempt::Failed(Failure::Egress(refused.clone())),
            Ok(to) => {
                let _slot = delivery.turn(to.origin()).await?;
                let secrets: Vec<&Secret> = hook.secrets.iter().collect();
                delivery
                    .sender
                    .send(Message {
                        to,
                        id: &event_id,
                        subscription: &pair.subscription,
                        body: &body,
                        secrets: &secrets,
                    })
                    .await
            }
        };
        let webhook = hook.name.as_str();
        hook.attempts.increment(1);
        let outcome = match &got {
            Attempt::Acked(_) => {
                let lag = now_ms().saturating_sub(at_ms) as f64 / 1000.0;
                hook.lag.record(lag);
                "acked"
            }
            Attempt::Refused(_) => "refused",
            Attempt::Failed(f) => {
                let from = delivery.breakers.window_start(&pair.subscription, at_ms);
                let spent = now_ms().saturating_sub(from) >= delivery.settings.retry_window_ms;
                if probe || (attempt < delivery.settings.max_attempts && !spent) {
                    delivery.count(&hook, &pair.subscription, &got, None, probe);
                    if probe {
                        // A failed probe: the event stays owed until the webhook resumes.
                        return None;
                    }
                    tracing::debug!(task_id = %pair.task_id, webhook, attempt, error = f.category(), "webhook delivery failed; retrying");
                    tokio::time::sleep(Duration::from_millis(
                        delivery.settings.backoff_ms(attempt),
                    ))
                    .await;
                    continue;
                }
                tracing::warn!(task_id = %pair.task_id, webhook, attempts = attempt, error = f.category(), "webhook delivery abandoned");
                "abandoned"
            }
        };
        delivery.count(&hook, &pair.subscription, &got, Some(outcome), probe);
        return Some(Settled::Pair);
    }
}
