//! A receiver of OpenTelemetry spans over OTLP/HTTP (protobuf), as a collector would take them:
//! `POST /v1/traces` with an `ExportTraceServiceRequest`, answered with an empty
//! `ExportTraceServiceResponse`. It keeps every span it was sent, flattened with the
//! `service.instance.id` of the node that sent it, for tests to query.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use prost::Message;

/// One received span.
#[derive(Debug, Clone)]
pub struct Span {
    /// The `service.instance.id` of the exporting process (`node-N` for taskmesh).
    pub instance: String,
    /// The `service.name` of the exporting process.
    pub service: String,
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
    /// 16 hex digits; empty for a root span.
    pub parent_span_id: String,
    /// The span's name.
    pub name: String,
    /// OTLP's span kind: 1 internal, 2 server, 3 client.
    pub kind: i32,
    /// Attributes whose values are strings or integers, as text.
    pub attributes: BTreeMap<String, String>,
    /// OTLP's status code: 0 unset, 1 ok, 2 error.
    pub status_code: i32,
}

impl Span {
    /// An attribute's value as text.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

/// The receiver: a server on a free loopback port, stopped when dropped.
pub struct Receiver {
    /// The collector's base URL (`http://127.0.0.1:PORT`), for `[tracing] otlp_endpoint`.
    pub url: String,
    spans: Arc<Mutex<Vec<Span>>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text_of(attributes: &[KeyValue]) -> BTreeMap<String, String> {
    attributes
        .iter()
        .filter_map(|kv| {
            let value = match kv.value.as_ref()?.value.as_ref()? {
                any_value::Value::StringValue(s) => s.clone(),
                any_value::Value::IntValue(i) => i.to_string(),
                any_value::Value::BoolValue(b) => b.to_string(),
                any_value::Value::DoubleValue(d) => d.to_string(),
                _ => return None,
            };
            Some((kv.key.clone(), value))
        })
        .collect()
}

async fn take(State(spans): State<Arc<Mutex<Vec<Span>>>>, body: Bytes) -> impl IntoResponse {
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, Vec::new()).into_response();
    };
    let mut got = Vec::new();
    for rs in request.resource_spans {
        let resource = text_of(rs.resource.as_ref().map_or(&[][..], |r| &r.attributes));
        let instance = resource
            .get("service.instance.id")
            .cloned()
            .unwrap_or_default();
        let service = resource.get("service.name").cloned().unwrap_or_default();
        for ss in rs.scope_spans {
            for s in ss.spans {
                got.push(Span {
                    instance: instance.clone(),
                    service: service.clone(),
                    trace_id: hex(&s.trace_id),
                    span_id: hex(&s.span_id),
                    parent_span_id: hex(&s.parent_span_id),
                    name: s.name,
                    kind: s.kind,
                    attributes: text_of(&s.attributes),
                    status_code: s.status.map_or(0, |st| st.code),
                });
            }
        }
    }
    spans.lock().expect("spans").extend(got);
    (
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
        .into_response()
}

impl Receiver {
    /// Listen on a free loopback port.
    pub async fn start() -> Receiver {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(take))
            .with_state(spans.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the OTLP receiver");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { url, spans, server }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().expect("spans").clone()
    }

    /// The spans of trace `trace_id` received so far.
    pub fn trace(&self, trace_id: &str) -> Vec<Span> {
        self.spans()
            .into_iter()
            .filter(|s| s.trace_id == trace_id)
            .collect()
    }

    /// Wait (at most `within`) until `done` holds of the spans received; the spans then, or
    /// `None` if it never did.
    pub async fn wait_for(
        &self,
        within: Duration,
        done: impl Fn(&[Span]) -> bool,
    ) -> Option<Vec<Span>> {
        let deadline = Instant::now() + within;
        loop {
            let spans = self.spans();
            if done(&spans) {
                return Some(spans);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
