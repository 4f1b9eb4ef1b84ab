//! The messages a gateway writes to clients' SSE streams, and how long they took to get there.
//!
//! A message that a task hands out carries the moment it did (its [`Stamp`]): a status
//! notification the moment the shard's leader applied the change, a task's request or
//! progress notification the moment its actor handed it out, a `tasks/result` answer the
//! moment the leader applied the terminal status. When the gateway that writes the message to
//! the client's connection frames it, it adds the time since then to the histogram of the
//! message's kind ([`DeliveryStats`], shown by `GET /status`). The moments are wall-clock
//! times of the node that made them, so a delay measured on another machine includes the two
//! clocks' offset (a negative one counts as 0).
//!
//! Only messages that came to be while the connection that writes them was reading their
//! stream count: one that waited in a stream's ring for a client to come back, one sent
//! again after a reconnection, and a request that goes out on a `tasks/result` stream that
//! attached after the task handed it out lose their stamp, since their wait was the client's. A slow client that
//! holds a stream back while it reads it does count: that wait is the stream's.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};

/// What a message on a client's stream is, for the delay histograms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A `notifications/tasks/status` notification.
    Status,
    /// A task's request to the client or its progress notification.
    Message,
    /// The answer of a held `tasks/result`.
    Result,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Status, Kind::Message, Kind::Result];

    fn index(self) -> usize {
        match self {
            Kind::Status => 0,
            Kind::Message => 1,
            Kind::Result => 2,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Status => "status",
            Kind::Message => "message",
            Kind::Result => "result",
        }
    }

    /// The kind's number on the wire between nodes (`StreamEvent.kind`); 0 is no stamp.
    pub fn to_wire(self) -> u32 {
        self.index() as u32 + 1
    }

    /// The kind a wire number names; `None` for 0 (no stamp) and unknown numbers.
    pub fn from_wire(n: u32) -> Option<Kind> {
        Kind::ALL.get((n as usize).checked_sub(1)?).copied()
    }
}

/// Where a message's delivery delay starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// The message's kind.
    pub kind: Kind,
    /// When it came to be, µs since the epoch, on the clock of the node that made it.
    pub at_us: u64,
}

/// One serialised JSON-RPC message for a client's stream, shared between the streams it goes
/// to, with the start of its delivery delay when it is measured.
#[derive(Debug, Clone)]
pub struct JsonMessage {
    /// The message.
    pub json: Arc<Vec<u8>>,
    /// Where its delay starts; `None`: not measured.
    pub stamp: Option<Stamp>,
    /// Not a message: the connection that carries the stream is to be closed on purpose at
    /// this point ([`JsonMessage::close_here`]); `json` is empty.
    pub close: bool,
}

impl JsonMessage {
    /// A message whose delay is not measured (a response to the request, a message sent again).
    pub fn plain(json: Arc<Vec<u8>>) -> Self {
        Self {
            json,
            stamp: None,
            close: false,
        }
    }

    /// The mark that ends the connection carrying a resumable stream on purpose once what came
    /// before it is written (the client reconnects with `Last-Event-ID` for what follows); a
    /// stream that cannot be resumed ignores it.
    pub fn close_here() -> Self {
        Self {
            json: Arc::default(),
            stamp: None,
            close: true,
        }
    }

    /// A message of `kind` that came to be at `at_us` (µs since the epoch; 0: not measured).
    pub fn stamped(json: Arc<Vec<u8>>, kind: Kind, at_us: u64) -> Self {
        let stamp = (at_us != 0).then_some(Stamp { kind, at_us });
        Self {
            json,
            stamp,
            close: false,
        }
    }

    /// The same message without its stamp (it is delivered again).
    pub fn unstamped(&self) -> Self {
        Self::plain(self.json.clone())
    }
}

/// Upper bounds of the histogram buckets, in µs; one more bucket takes everything above.
const BOUNDS_US: [u64; 32] = [
    50, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1_000, 1_250, 1_500, 1_750, 2_000, 2_500,
    3_000, 3_500, 4_000, 4_500, 5_000, 6_000, 7_000, 8_000, 10_000, 15_000, 20_000, 50_000,
    100_000, 250_000, 500_000, 1_000_000,
];

/// A histogram of delays with fixed buckets, updated without locks.
struct Histogram {
    buckets: [AtomicU64; BOUNDS_US.len() + 1],
    count: AtomicU64,
    sum_us: AtomicU64,
    max_us: AtomicU64,
}

impl Histogram {
    fn new() -> Self {
        Self {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            count: AtomicU64::new(0),
            sum_us: AtomicU64::new(0),
            max_us: AtomicU64::new(0),
        }
    }

    fn record(&self, us: u64) {
        let i = BOUNDS_US.partition_point(|b| *b < us);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
        self.max_us.fetch_max(us, Ordering::Relaxed);
    }

    /// The count, the sum, the maximum, and the cumulative count at or below each bound (the
    /// buckets that hold none above the last one that does are left out).
    fn to_json(&self) -> Value {
        let mut cumulative = 0;
        let mut buckets = Vec::new();
        let count = self.count.load(Ordering::Relaxed);
        for (i, bound) in BOUNDS_US.iter().enumerate() {
            cumulative += self.buckets[i].load(Ordering::Relaxed);
            buckets.push(json!({ "leUs": bound, "count": cumulative }));
            if cumulative >= count {
                break;
            }
        }
        json!({
            "count": count,
            "sumUs": self.sum_us.load(Ordering::Relaxed),
            "maxUs": self.max_us.load(Ordering::Relaxed),
            "buckets": buckets,
        })
    }
}

/// The delivery delays a gateway measured, by kind of message.
pub struct DeliveryStats {
    by_kind: [Histogram; 3],
}

impl Default for DeliveryStats {
    fn default() -> Self {
        Self {
            by_kind: std::array::from_fn(|_| Histogram::new()),
        }
    }
}

impl DeliveryStats {
    /// Count a message being written to a client's stream now.
    pub fn written(&self, m: &JsonMessage) {
        if let Some(s) = m.stamp {
            let us = taskmesh_mcp::time::now_us().saturating_sub(s.at_us);
            self.by_kind[s.kind.index()].record(us);
        }
    }

    /// The histograms, by kind name (`status`, `message`, `result`), for `GET /status`.
    pub fn to_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        for k in Kind::ALL {
            m.insert(k.name().into(), self.by_kind[k.index()].to_json());
        }
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_land_in_their_buckets_and_add_up() {
        let h = Histogram::new();
        for us in [0, 50, 51, 1_000, 1_001, 2_000_000] {
            h.record(us);
        }
        let v = h.to_json();
        assert_eq!(v["count"], 6);
        assert_eq!(v["sumUs"], 2_002_102);
        assert_eq!(v["maxUs"], 2_000_000);
        let at = |le: u64| {
            v["buckets"]
                .as_array()
                .unwrap()
                .iter()
                .find(|b| b["leUs"] == le)
                .map(|b| b["count"].as_u64().unwrap())
        };
        assert_eq!(at(50), Some(2));
        assert_eq!(at(100), Some(3));
        assert_eq!(at(1_000), Some(4));
        assert_eq!(at(1_250), Some(5));
        assert_eq!(at(1_000_000), Some(5));
    }

    #[test]
    fn only_stamped_messages_count() {
        let stats = DeliveryStats::default();
        let json = Arc::new(b"{}".to_vec());
        stats.written(&JsonMessage::plain(json.clone()));
        stats.written(&JsonMessage::stamped(json.clone(), Kind::Status, 0));
        let m = JsonMessage::stamped(json, Kind::Result, taskmesh_mcp::time::now_us());
        stats.written(&m.unstamped());
        stats.written(&m);
        let v = stats.to_json();
        assert_eq!(v["status"]["count"], 0);
        assert_eq!(v["message"]["count"], 0);
        assert_eq!(v["result"]["count"], 1);
        for k in Kind::ALL {
            assert_eq!(Kind::from_wire(k.to_wire()), Some(k));
        }
        assert_eq!(Kind::from_wire(0), None);
    }
}
