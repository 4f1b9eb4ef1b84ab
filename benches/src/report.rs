//! What a run measured: successful operations with their latencies (an HDR histogram, in
//! microseconds), failures by kind, and for the failover scenario the longest gap between
//! successful answers per shard. Rendered as a table and as JSON.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::client::Failure;

/// Latencies above this are recorded as this (one minute).
const MAX_LATENCY_US: u64 = 60_000_000;

/// Counters of one worker (merged at the end of a run).
pub struct Stats {
    /// Latencies of the successful operations in microseconds, clamped to 1 us .. one minute.
    pub latency_us: Histogram<u64>,
    /// Number of successful operations.
    pub ok: u64,
    /// Failed operations counted by kind (the [`Failure`] text, such as `http_503`, or
    /// `worker_panicked` and `dropped_in_flight_limit` added by the run).
    pub failures: BTreeMap<String, u64>,
}

impl Default for Stats {
    fn default() -> Self {
        Self {
            latency_us: Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("valid bounds"),
            ok: 0,
            failures: BTreeMap::new(),
        }
    }
}

impl Stats {
    /// Count one successful operation and record its latency (clamped to 1 us .. one minute).
    pub fn success(&mut self, latency: Duration) {
        self.ok += 1;
        let us = (latency.as_micros() as u64).clamp(1, MAX_LATENCY_US);
        self.latency_us.record(us).expect("within bounds");
    }

    /// Count one failed operation under the text of `f`.
    pub fn failure(&mut self, f: &Failure) {
        *self.failures.entry(f.to_string()).or_default() += 1;
    }

    /// Add the counts and latencies of `other` (another worker's) to these.
    pub fn merge(&mut self, other: &Stats) {
        self.ok += other.ok;
        self.latency_us.add(&other.latency_us).expect("same bounds");
        for (k, v) in &other.failures {
            *self.failures.entry(k.clone()).or_default() += v;
        }
    }
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Percentiles {
    /// Median latency.
    pub p50: f64,
    /// 90th percentile latency.
    pub p90: f64,
    /// 99th percentile latency.
    pub p99: f64,
    /// 99.9th percentile latency.
    pub p999: f64,
    /// Highest latency recorded.
    pub max: f64,
}

/// The result of one run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Name of the scenario that ran (`poll`, `create`, `mixed`, `failover`).
    pub scenario: String,
    /// Name of the target, as given in the run's settings.
    pub target: String,
    /// Offered rate (open loop) or `None` (closed loop at maximum rate).
    pub offered_per_s: Option<f64>,
    /// Workers the run was configured with.
    pub concurrency: usize,
    /// MCP sessions the run opened.
    pub sessions: usize,
    /// Measured time in seconds (setup excluded).
    pub duration_s: f64,
    /// Number of successful operations.
    pub ok: u64,
    /// Successful operations per second of `duration_s`.
    pub per_s: f64,
    /// Latency percentiles of the successful operations.
    pub latency_ms: Percentiles,
    /// Failed operations counted by kind, as in [`Stats::failures`].
    pub failures: BTreeMap<String, u64>,
    /// Failover only: per shard, the longest time without a successful answer after the kill,
    /// in ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable_ms_by_shard: Option<BTreeMap<u32, f64>>,
}

impl Report {
    /// The report of a run from its merged `stats` and the measured time `elapsed`;
    /// `unavailable_ms_by_shard` is left `None` for the caller to fill.
    pub fn new(
        scenario: &str,
        target: &str,
        offered_per_s: Option<f64>,
        concurrency: usize,
        sessions: usize,
        elapsed: Duration,
        stats: &Stats,
    ) -> Self {
        let h = &stats.latency_us;
        let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        Report {
            scenario: scenario.to_string(),
            target: target.to_string(),
            offered_per_s,
            concurrency,
            sessions,
            duration_s: elapsed.as_secs_f64(),
            ok: stats.ok,
            per_s: stats.ok as f64 / elapsed.as_secs_f64().max(1e-9),
            latency_ms: Percentiles {
                p50: ms(0.5),
                p90: ms(0.9),
                p99: ms(0.99),
                p999: ms(0.999),
                max: h.max() as f64 / 1000.0,
            },
            failures: stats.failures.clone(),
            unavailable_ms_by_shard: None,
        }
    }

    /// The human-readable table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let rate = match self.offered_per_s {
            Some(r) => format!("open loop at {r:.0}/s"),
            None => "closed loop".to_string(),
        };
        out.push_str(&format!(
            "{} against {} ({rate}, {} workers, {} sessions, {:.1} s)\n",
            self.scenario, self.target, self.concurrency, self.sessions, self.duration_s
        ));
        out.push_str(&format!(
            "  {:>12} {:>12} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
            "ok", "ops/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms"
        ));
        let l = &self.latency_ms;
        out.push_str(&format!(
            "  {:>12} {:>12.0} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}\n",
            self.ok, self.per_s, l.p50, l.p90, l.p99, l.p999, l.max
        ));
        if self.failures.is_empty() {
            out.push_str("  failures: none\n");
        } else {
            for (k, v) in &self.failures {
                out.push_str(&format!("  failures {k}: {v}\n"));
            }
        }
        if let Some(by_shard) = &self.unavailable_ms_by_shard {
            for (shard, ms) in by_shard {
                out.push_str(&format!(
                    "  shard {shard}: longest gap without an answer {ms:.0} ms\n"
                ));
            }
        }
        out
    }
}
