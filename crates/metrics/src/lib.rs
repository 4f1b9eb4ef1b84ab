//! A node's metrics, in the Prometheus text format.
//!
//! Code records through the `metrics` facade (`metrics::counter!` and friends) under the
//! names in [`names`]; [`install`] puts the Prometheus recorder in place once per process (until
//! then every record is a no-op, which is what `[metrics] enabled = false` leaves), and
//! [`render`] produces what `GET /metrics` answers. Figures that are a state rather than a
//! stream of events (a shard's term, the live tasks) are set as gauges
//! just before each render by whoever owns them; the process's own figures are read at each
//! render ([`process`]).
//!
//! Hot paths keep their handles ([`metrics::Counter`], [`metrics::Histogram`]) instead of
//! looking a name up per event: a handle is an atomic add. Every label set is bounded: methods
//! come from a fixed list, shards and nodes from the configuration.

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub mod names;
pub mod process;

pub use metrics;

/// Why the recorder could not be installed.
#[derive(Debug)]
pub struct InstallError(String);

impl std::fmt::Display for InstallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "installing the metrics recorder: {}", self.0)
    }
}

impl std::error::Error for InstallError {}

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Upper bounds (seconds) of the latency histograms: 100 µs to 10 s.
const LATENCY_BUCKETS: &[f64] = &[
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Upper bounds of the histograms of counts (reads per batch): 1 to 4096.
const COUNT_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0,
];

/// Install the Prometheus recorder for this process (once: later calls change nothing) and
/// describe every metric. Call it before the first handle is taken: handles taken earlier
/// record nothing.
pub fn install() -> Result<(), InstallError> {
    if HANDLE.get().is_some() {
        return Ok(());
    }
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
        .map_err(|e| InstallError(e.to_string()))?
        .set_buckets_for_metric(Matcher::Suffix("_reads".into()), COUNT_BUCKETS)
        .map_err(|e| InstallError(e.to_string()))?
        .install_recorder()
        .map_err(|e| InstallError(e.to_string()))?;
    let _ = HANDLE.set(handle);
    names::describe();
    Ok(())
}

/// Whether [`install`] has run in this process.
pub fn installed() -> bool {
    HANDLE.get().is_some()
}

/// The metrics in the Prometheus text format (version 0.0.4), the process's figures sampled
/// now; `None` when no recorder is installed.
pub fn render() -> Option<String> {
    let handle = HANDLE.get()?;
    let mut text = handle.render();
    text.push_str(&process::render());
    Some(text)
}

/// Fold recorded histogram samples into their buckets every `every`, so that memory does not
/// grow between scrapes. Needs a tokio runtime; does nothing without a recorder.
pub fn spawn_upkeep(every: Duration) {
    let Some(handle) = HANDLE.get() else { return };
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            handle.run_upkeep();
        }
    });
}

/// The content type of [`render`]'s text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
