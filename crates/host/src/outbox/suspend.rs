//! Suspension of a webhook whose receiver keeps failing, per node: after
//! `events.suspend_after_failures` failed attempts in a row spread over at least
//! `events.suspend_after_ms`, the node stops attempting deliveries to it (they stay owed in the
//! outboxes, costing nothing) and sends one delivery every `events.probe_interval_ms` as a
//! probe. The first acknowledged probe resumes the webhook: every shard loop looks at its
//! outboxes again, and what the webhook missed is delivered, each event with a full retry
//! window counted from the resumption (time suspended does not count against it).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;

use super::EventSettings;
use crate::now_ms;

/// Whether a delivery may start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// The webhook is not suspended.
    Open,
    /// It is suspended and this delivery is its probe: one attempt, no retries.
    Probe,
    /// It is suspended: leave the event owed.
    Closed,
}

/// What an attempt told of the receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// It acknowledged (2xx).
    Answered,
    /// It refused the event for good (410, 413): it is there.
    Refusing,
    /// It failed (no connection, timeout, TLS, another status).
    Failing,
}

#[derive(Debug, Default)]
struct Breaker {
    failures_in_a_row: u32,
    failing_since_ms: Option<u64>,
    suspended_since_ms: Option<u64>,
    next_probe_ms: u64,
    probing: bool,
    resumed_ms: u64,
}

/// The suspension state of every webhook on this node.
pub(crate) struct Breakers {
    after_failures: u32,
    after_ms: u64,
    probe_interval_ms: u64,
    state: Mutex<HashMap<String, Breaker>>,
    /// Bumped when the shard loops must look at their outboxes again (a resumption, a probe
    /// due).
    rescan: watch::Sender<u64>,
}

impl Breakers {
    pub(crate) fn new(s: &EventSettings) -> Arc<Self> {
        Arc::new(Self {
            after_failures: s.suspend_after_failures,
            after_ms: s.suspend_after_ms,
            probe_interval_ms: s.probe_interval_ms,
            state: Mutex::new(HashMap::new()),
            rescan: watch::channel(0).0,
        })
    }

    /// A receiver of the rescan signal, for a shard loop.
    pub(crate) fn rescans(&self) -> watch::Receiver<u64> {
        self.rescan.subscribe()
    }

    /// Whether a delivery to `subscription` may start now.
    pub(crate) fn admit(&self, subscription: &str) -> Admit {
        let mut state = self.state.lock();
        let Some(b) = state.get_mut(subscription) else {
            return Admit::Open;
        };
        if b.suspended_since_ms.is_none() {
            return Admit::Open;
        }
        if b.probing || now_ms() < b.next_probe_ms {
            return Admit::Closed;
        }
        b.probing = true;
        Admit::Probe
    }

    /// Whether deliveries to `subscription` are suspended (a delivery waiting to retry stops).
    pub(crate) fn suspended(&self, subscription: &str) -> bool {
        self.state
            .lock()
            .get(subscription)
            .is_some_and(|b| b.suspended_since_ms.is_some())
    }

    /// Since when `subscription` is suspended, if it is.
    pub(crate) fn suspended_since(&self, subscription: &str) -> Option<u64> {
        self.state
            .lock()
            .get(subscription)
            .and_then(|b| b.suspended_since_ms)
    }

    /// Where an event of `at_ms` starts its retry window: at the change, or at the webhook's
    /// last resumption if that came later.
    pub(crate) fn window_start(&self, subscription: &str, at_ms: u64) -> u64 {
        self.state
            .lock()
            .get(subscription)
            .map_or(at_ms, |b| b.resumed_ms.max(at_ms))
    }

    /// Record what an attempt to `subscription` (a probe or not) told of its receiver.
    pub(crate) fn record(self: &Arc<Self>, subscription: &str, seen: Seen, probe: bool) {
        let now = now_ms();
        let mut state = self.state.lock();
        let b = state.entry(subscription.to_owned()).or_default();
        if probe {
            b.probing = false;
        }
        match seen {
            Seen::Answered | Seen::Refusing => {
                b.failures_in_a_row = 0;
                b.failing_since_ms = None;
                if b.suspended_since_ms.take().is_some() {
                    b.resumed_ms = now;
                    tracing::info!(subscription, "webhook resumed: its receiver answers again");
                    drop(state);
                    self.rescan.send_modify(|g| *g += 1);
                }
            }
            Seen::Failing => {
                b.failures_in_a_row = b.failures_in_a_row.saturating_add(1);
                let since = *b.failing_since_ms.get_or_insert(now);
                let sustained = self.after_failures > 0
                    && b.failures_in_a_row >= self.after_failures
                    && now.saturating_sub(since) >= self.after_ms;
                if b.suspended_since_ms.is_none() && sustained {
                    b.suspended_since_ms = Some(now);
                    tracing::warn!(
                        subscription,
                        failures = b.failures_in_a_row,
                        "webhook suspended: its receiver keeps failing; probing it"
                    );
                }
                if b.suspended_since_ms.is_some() {
                    b.next_probe_ms = now.saturating_add(self.probe_interval_ms);
                    drop(state);
                    self.probe_later();
                }
            }
        }
    }

    /// Forget `subscription`'s failures: a suspended one resumes at once, its events each with
    /// a full retry window from now (a refresh reactivates a subscription).
    pub(crate) fn reset(&self, subscription: &str) {
        let mut state = self.state.lock();
        let Some(b) = state.get_mut(subscription) else {
            return;
        };
        let was = b.suspended_since_ms.is_some();
        *b = Breaker {
            resumed_ms: now_ms(),
            probing: b.probing,
            ..Breaker::default()
        };
        drop(state);
        if was {
            self.rescan.send_modify(|g| *g += 1);
        }
    }

    /// A probe of `subscription` ended. One that made no attempt (its event was settled or gone,
    /// or the leadership moved) lets the next due delivery be the probe, at once.
    pub(crate) fn probe_done(&self, subscription: &str) {
        let mut state = self.state.lock();
        let Some(b) = state.get_mut(subscription) else {
            return;
        };
        b.probing = false;
        let due = b.suspended_since_ms.is_some() && now_ms() >= b.next_probe_ms;
        drop(state);
        if due {
            self.rescan.send_modify(|g| *g += 1);
        }
    }

    /// Signal the shard loops once the next probe is due.
    fn probe_later(self: &Arc<Self>) {
        let this = self.clone();
        let wait = Duration::from_millis(self.probe_interval_ms);
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            this.rescan.send_modify(|g| *g += 1);
        });
    }
}
