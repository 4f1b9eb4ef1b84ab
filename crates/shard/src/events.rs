//! What a replica tells its observers: applied changes and leadership.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use taskmesh_task::TaskRecord;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

/// A change made by an applied command, emitted after the apply is durable, in log order.
///
/// Installing a snapshot (a follower catching up) replaces the whole state and emits no events:
/// [`crate::ShardReplica::snapshot_installs`] tells when that happened, so that whoever keeps
/// state derived from the events rebuilds it from [`crate::ShardReplica::read_local`].
#[derive(Clone, Debug)]
pub enum ShardEvent {
    /// A record was created or changed by an applied command.
    Changed {
        /// Log index of the entry whose apply made the change.
        index: u64,
        /// The record as it is after the change. Shared: up to `event_buffer` events may wait
        /// for each subscriber of every replica, and a whole record per event would make a
        /// slow subscriber cost megabytes.
        record: std::sync::Arc<TaskRecord>,
    },
    /// Records deleted by expiry.
    Expired {
        /// Log index of the `Expire` entry that deleted them.
        index: u64,
        /// Ids of the deleted records; never empty.
        task_ids: Vec<String>,
    },
}

/// This replica's view of its group's leadership.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Leadership {
    /// Whether this replica is the leader.
    pub is_leader: bool,
    /// The current Raft term.
    pub term: u64,
    /// The leader this replica knows of, if any.
    pub leader: Option<u64>,
}

/// Where one replica's applied changes go: a queue per subscriber holding at most `capacity`
/// undelivered events.
///
/// A queue's memory follows what waits in it, not its capacity. (A broadcast channel of
/// 4,096 slots allocated and wrote ~290 KiB per replica at its start, whether or not anything
/// ever happened in the group: the largest share of an idle replica's memory.) An event that
/// finds its subscriber's queue full is dropped for that subscriber, which learns it from its
/// next [`EventReceiver::recv`]: `Lagged(n)` before the events still queued, as a broadcast
/// receiver that fell behind would, so that it rebuilds what it derives from the current state.
pub(crate) struct EventFanout<E> {
    capacity: usize,
    subscribers: Mutex<Vec<Subscriber<E>>>,
}

struct Subscriber<E> {
    tx: mpsc::UnboundedSender<E>,
    counts: Arc<Counts>,
}

/// A subscriber's undelivered events and the events it missed since it last heard.
#[derive(Default)]
struct Counts {
    queued: AtomicUsize,
    missed: AtomicU64,
}

impl<E: Clone> EventFanout<E> {
    /// A fan-out whose subscribers each hold up to `capacity` (at least 1) undelivered events.
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            subscribers: Mutex::new(Vec::new()),
        }
    }

    /// A receiver of every event sent from now on.
    pub(crate) fn subscribe(&self) -> EventReceiver<E> {
        let (tx, rx) = mpsc::unbounded_channel();
        let counts = Arc::new(Counts::default());
        self.subscribers.lock().push(Subscriber {
            tx,
            counts: counts.clone(),
        });
        EventReceiver { rx, counts }
    }

    /// Queue `event` for every subscriber; subscribers whose receiver was dropped are let go.
    pub(crate) fn send(&self, event: E) {
        let mut subscribers = self.subscribers.lock();
        subscribers.retain(|s| {
            if s.counts.queued.fetch_add(1, Ordering::AcqRel) >= self.capacity {
                s.counts.queued.fetch_sub(1, Ordering::AcqRel);
                s.counts.missed.fetch_add(1, Ordering::AcqRel);
                return !s.tx.is_closed();
            }
            if s.tx.send(event.clone()).is_err() {
                s.counts.queued.fetch_sub(1, Ordering::AcqRel);
                return false;
            }
            true
        });
    }
}

/// One subscriber's end of an [`EventFanout`].
pub struct EventReceiver<E> {
    rx: mpsc::UnboundedReceiver<E>,
    counts: Arc<Counts>,
}

impl<E> EventReceiver<E> {
    /// The next event. `Err(Lagged(n))` when `n` events were dropped because this receiver's
    /// queue was full (told before the events still queued); `Err(Closed)` when the replica is
    /// gone and every queued event was received.
    pub async fn recv(&mut self) -> Result<E, RecvError> {
        let missed = self.counts.missed.swap(0, Ordering::AcqRel);
        if missed > 0 {
            return Err(RecvError::Lagged(missed));
        }
        match self.rx.recv().await {
            Some(event) => {
                self.counts.queued.fetch_sub(1, Ordering::AcqRel);
                Ok(event)
            }
            None => Err(RecvError::Closed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_queue_drops_new_events_and_says_so_first() {
        let fanout = EventFanout::new(2);
        let mut slow = fanout.subscribe();
        for i in 0..5u32 {
            fanout.send(i);
        }
        let mut fresh = fanout.subscribe();
        // 2, 3 and 4 found the queue full, and so does 5.
        fanout.send(5);
        assert!(matches!(slow.recv().await, Err(RecvError::Lagged(4))));
        assert_eq!(slow.recv().await, Ok(0));
        assert_eq!(slow.recv().await, Ok(1));
        // Room again: the next event is queued.
        fanout.send(6);
        assert_eq!(slow.recv().await, Ok(6));
        // A later subscriber sees only what was sent after it subscribed.
        assert_eq!(fresh.recv().await, Ok(5));
        assert_eq!(fresh.recv().await, Ok(6));
        drop(fresh);
        fanout.send(7);
        assert_eq!(
            fanout.subscribers.lock().len(),
            1,
            "a dropped receiver is let go"
        );
        drop(fanout);
        assert_eq!(slow.recv().await, Ok(7));
        assert_eq!(slow.recv().await, Err(RecvError::Closed));
    }

    /// Up to `event_buffer` (4,096) events may wait per subscriber: an event must stay a few
    /// words, whatever a record holds.
    #[test]
    fn an_event_is_a_few_words_not_a_record() {
        let event = std::mem::size_of::<ShardEvent>();
        let record = std::mem::size_of::<TaskRecord>();
        println!("ShardEvent: {event} bytes, TaskRecord: {record} bytes");
        assert!(event <= 48, "ShardEvent is {event} bytes");
        assert!(
            event * 4 < record,
            "an event ({event}) near a record's size ({record})"
        );
    }
}
