//! OpenTelemetry traces of MCP requests, exported over OTLP/HTTP: off unless
//! `[tracing] otlp_endpoint` is set.
//!
//! How a request is traced:
//!
//! 1. The gateway decides once, when the request arrives, whether it is sampled ([`decide`]): a
//!    client's `traceparent` header decides by its sampled flag (the trace is the client's and
//!    continues here); without one, `sample_ratio` does. An unsampled request makes no span and
//!    carries nothing: with the exporter on, a poll pays one random draw.
//! 2. A sampled request gets a server span ([`Span::start`]) and runs in its context
//!    ([`scope`]). Every call a node makes for it to a peer carries the context as a
//!    `traceparent` ([`current_traceparent`], put in the gRPC metadata by `taskmesh_rpc::trace`);
//!    the peer opens its own span under it.
//! 3. A task keeps the `traceparent` of the span that created it in its durable record; each
//!    execution of the task (the first, and any after a failover) opens a span under it, and the
//!    calls it makes to an upstream MCP server send theirs on.
//!
//! Spans are queued in memory (at most `max_queue_spans`; the rest are dropped and counted by
//! the SDK) and exported in batches by one background thread, so a traced request never waits
//! for the collector.

use std::borrow::Cow;
use std::cell::Cell;
use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::trace::{
    SpanContext, SpanId, Status, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer as _,
};
use opentelemetry::Context;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider,
};
use serde::Deserialize;

pub use opentelemetry::trace::SpanKind;
pub use opentelemetry::KeyValue;

/// The HTTP header (and gRPC metadata key) of a W3C trace context.
pub const HEADER: &str = "traceparent";

/// The path OTLP/HTTP takes spans at, under the collector's base URL.
pub const TRACES_PATH: &str = "/v1/traces";

/// `[tracing]`: export of OpenTelemetry spans.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TracingConfig {
    /// Base URL of an OTLP/HTTP collector (`http://HOST:4318`); spans are posted to
    /// [`TRACES_PATH`] under it as protobuf. Unset: no spans are made or exported.
    pub otlp_endpoint: Option<String>,
    /// Share of requests without a client's `traceparent` that are traced, from 0 to 1. A
    /// request with one follows its sampled flag.
    pub sample_ratio: f64,
    /// The `service.name` of the spans.
    pub service_name: String,
    /// How long one export may take before it is abandoned, in milliseconds.
    pub export_timeout_ms: u64,
    /// Spans held for export at most; more are dropped until the queue drains.
    pub max_queue_spans: usize,
    /// Spans per export request at most.
    pub max_export_batch_spans: usize,
    /// How long a span may wait before its batch is sent, in milliseconds.
    pub export_delay_ms: u64,
}

impl Default for TracingConfig {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            sample_ratio: 0.01,
            service_name: "taskmesh".into(),
            export_timeout_ms: 10_000,
            max_queue_spans: 8_192,
            max_export_batch_spans: 512,
            export_delay_ms: 1_000,
        }
    }
}

/// Why tracing could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A setting is out of its range.
    #[error("tracing.{0}")]
    Setting(String),
    /// The exporter could not be built.
    #[error("tracing: the OTLP exporter could not be built: {0}")]
    Exporter(String),
    /// Tracing was installed already in this process.
    #[error("tracing: installed twice in one process")]
    Twice,
}

impl TracingConfig {
    /// Check every setting: a clear error, and nothing started, for a bad one.
    pub fn validate(&self) -> Result<(), Error> {
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            return Err(Error::Setting(format!(
                "sample_ratio must be between 0 and 1 (got {})",
                self.sample_ratio
            )));
        }
        if let Some(url) = &self.otlp_endpoint {
            if !url.starts_with("http://") || url.len() <= "http://".len() {
                return Err(Error::Setting(format!(
                    "otlp_endpoint must be an http:// URL of an OTLP/HTTP collector, e.g. \
                     http://127.0.0.1:4318 (got {url:?}; https is not supported: run the \
                     collector beside the node)"
                )));
            }
        }
        if self.service_name.is_empty() {
            return Err(Error::Setting("service_name must not be empty".into()));
        }
        for (name, value) in [
            ("export_timeout_ms", self.export_timeout_ms),
            ("max_queue_spans", self.max_queue_spans as u64),
            ("max_export_batch_spans", self.max_export_batch_spans as u64),
            ("export_delay_ms", self.export_delay_ms),
        ] {
            if value == 0 {
                return Err(Error::Setting(format!("{name} must be at least 1")));
            }
        }
        if self.max_export_batch_spans > self.max_queue_spans {
            return Err(Error::Setting(format!(
                "max_export_batch_spans ({}) must not exceed max_queue_spans ({})",
                self.max_export_batch_spans, self.max_queue_spans
            )));
        }
        Ok(())
    }

    /// The URL spans are posted to.
    pub fn traces_url(&self) -> Option<String> {
        self.otlp_endpoint
            .as_deref()
            .map(|base| format!("{}{TRACES_PATH}", base.trim_end_matches('/')))
    }
}

/// The process's exporter, once installed.
struct Exporter {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    /// A request without a client's context is sampled when a random draw is below this
    /// (`u64::MAX` with `sample_ratio` 1: always).
    threshold: u64,
    /// `sample_ratio` was 1.
    always: bool,
}

static EXPORTER: OnceLock<Exporter> = OnceLock::new();

/// Exports what is left when dropped (or at [`Installed::shutdown`]): keep it for the life of the
/// node.
#[must_use = "dropping it stops the export"]
pub struct Installed {
    _private: (),
}

impl Installed {
    /// Export the spans still queued (waiting at most `export_timeout_ms`) and stop. Blocks:
    /// call it from a blocking context.
    pub fn shutdown(self) {
        drop(self);
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        if let Some(e) = EXPORTER.get() {
            let _ = e.provider.force_flush();
            let _ = e.provider.shutdown();
        }
    }
}

/// Start exporting spans as `cfg` says, for node `node_id` (a resource attribute of every span).
/// `None` when `otlp_endpoint` is unset: nothing is traced.
pub fn install(cfg: &TracingConfig, node_id: u64) -> Result<Option<Installed>, Error> {
    cfg.validate()?;
    let Some(url) = cfg.traces_url() else {
        return Ok(None);
    };
    if EXPORTER.get().is_some() {
        return Err(Error::Twice);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(url)
        .with_timeout(Duration::from_millis(cfg.export_timeout_ms))
        .build()
        .map_err(|e| Error::Exporter(e.to_string()))?;
    let batching = BatchConfigBuilder::default()
        .with_max_queue_size(cfg.max_queue_spans)
        .with_max_export_batch_size(cfg.max_export_batch_spans)
        .with_scheduled_delay(Duration::from_millis(cfg.export_delay_ms))
        .build();
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(batching)
        .build();
    let resource = opentelemetry_sdk::Resource::builder_empty()
        .with_service_name(cfg.service_name.clone())
        .with_attributes([
            KeyValue::new("service.instance.id", format!("node-{node_id}")),
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        ])
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource)
        .build();
    let tracer = opentelemetry::trace::TracerProvider::tracer(&provider, "taskmesh");
    let always = cfg.sample_ratio >= 1.0;
    let threshold = (cfg.sample_ratio * u64::MAX as f64) as u64;
    EXPORTER
        .set(Exporter {
            provider,
            tracer,
            threshold,
            always,
        })
        .map_err(|_| Error::Twice)?;
    Ok(Some(Installed { _private: () }))
}

/// Whether spans are exported at all.
pub fn enabled() -> bool {
    EXPORTER.get().is_some()
}

/// Whether a request is traced, and under which parent: `None` when it is not (tracing off, a
/// client's context that is not sampled, or not drawn by `sample_ratio`); `Some(None)` for a new
/// trace; `Some(Some(parent))` to continue the client's trace.
pub fn decide(traceparent: Option<&str>) -> Option<Option<SpanContext>> {
    let exporter = EXPORTER.get()?;
    if let Some(parent) = traceparent.and_then(parse) {
        return parent.is_sampled().then_some(Some(parent));
    }
    (exporter.always || draw() < exporter.threshold).then_some(None)
}

/// A uniformly random 64-bit number from a per-thread generator (splitmix64 over a randomly
/// seeded state): cheap enough for every request.
fn draw() -> u64 {
    thread_local! {
        static STATE: Cell<u64> = Cell::new({
            use std::hash::{BuildHasher, Hasher};
            std::collections::hash_map::RandomState::new().build_hasher().finish()
        });
    }
    STATE.with(|s| {
        let next = s.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        s.set(next);
        let mut z = next;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

/// A span being recorded; it ends (and is queued for export) when dropped.
pub struct Span {
    inner: opentelemetry_sdk::trace::Span,
}

impl Span {
    /// Start a span named `name` under `parent` (a new trace when `None`). `None` when tracing
    /// is off.
    pub fn start(
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        parent: Option<&SpanContext>,
        attributes: Vec<KeyValue>,
    ) -> Option<Span> {
        let exporter = EXPORTER.get()?;
        let cx = match parent {
            Some(p) => Context::new().with_remote_span_context(p.clone()),
            None => Context::new(),
        };
        let inner = exporter
            .tracer
            .span_builder(name)
            .with_kind(kind)
            .with_attributes(attributes)
            .start_with_context(&exporter.tracer, &cx);
        Some(Span { inner })
    }

    /// Start a span under the `traceparent` text `parent`, when there is one and it is sampled
    /// (the context a task keeps, or a peer sent), named and described by what `describe`
    /// returns. `None` otherwise, or when tracing is off; `describe` then never runs, so an
    /// untraced call builds no name and no attributes.
    pub fn start_under<N: Into<Cow<'static, str>>>(
        kind: SpanKind,
        parent: Option<&str>,
        describe: impl FnOnce() -> (N, Vec<KeyValue>),
    ) -> Option<Span> {
        if !enabled() {
            return None;
        }
        let parent = parse(parent?).filter(SpanContext::is_sampled)?;
        let (name, attributes) = describe();
        Span::start(name, kind, Some(&parent), attributes)
    }

    /// The span's context: the parent of what it causes.
    pub fn context(&self) -> SpanContext {
        opentelemetry::trace::Span::span_context(&self.inner).clone()
    }

    /// The span's context as a `traceparent`.
    pub fn traceparent(&self) -> String {
        format(&self.context())
    }

    /// Add an attribute.
    pub fn set(&mut self, attribute: KeyValue) {
        opentelemetry::trace::Span::set_attribute(&mut self.inner, attribute);
    }

    /// Mark the span failed, saying why.
    pub fn fail(&mut self, description: impl Into<Cow<'static, str>>) {
        opentelemetry::trace::Span::set_status(&mut self.inner, Status::error(description));
    }
}

impl std::fmt::Debug for Span {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Span")
            .field("traceparent", &self.traceparent())
            .finish()
    }
}

tokio::task_local! {
    static CURRENT: SpanContext;
}

/// Run `fut` in the context of span `cx` (`None`: untraced, runs as is).
///
/// Not an `async fn`: one would hold `fut` twice (as its argument and as what it awaits), which
/// doubles the size of every request's future it wraps.
pub fn scope<F: Future>(cx: Option<SpanContext>, fut: F) -> impl Future<Output = F::Output> {
    match cx {
        Some(cx) => futures::future::Either::Left(CURRENT.scope(cx, fut)),
        None => futures::future::Either::Right(fut),
    }
}

/// The span context the running request works in, if it is traced.
pub fn current() -> Option<SpanContext> {
    CURRENT.try_with(SpanContext::clone).ok()
}

/// [`current`] as a `traceparent`.
pub fn current_traceparent() -> Option<String> {
    CURRENT.try_with(format).ok()
}

/// Parse a W3C `traceparent`: `VERSION-TRACEID-PARENTID-FLAGS` in lowercase hex. Version `00`
/// must have exactly these four fields; a later version may add more after a `-`, which are
/// ignored; version `ff`, all-zero ids and anything else malformed give `None`.
pub fn parse(header: &str) -> Option<SpanContext> {
    let b = header.as_bytes();
    if b.len() < 55 || b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
        return None;
    }
    let version = &header[0..2];
    if !is_hex(version) || version == "ff" {
        return None;
    }
    if (version == "00" && b.len() != 55) || (b.len() > 55 && b[55] != b'-') {
        return None;
    }
    let (trace, span, flags) = (&header[3..35], &header[36..52], &header[53..55]);
    if !is_hex(trace) || !is_hex(span) || !is_hex(flags) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
        return None;
    }
    Some(SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags & 1),
        true,
        TraceState::NONE,
    ))
}

fn is_hex(s: &str) -> bool {
    s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// A span context as a version `00` `traceparent`.
pub fn format(cx: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        cx.trace_id(),
        cx.span_id(),
        cx.trace_flags().to_u8()
    )
}

#[cfg(test)]
mod tests;
