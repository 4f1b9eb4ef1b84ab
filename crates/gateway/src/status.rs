//! The operators' endpoints: `GET /healthz` (alive), `GET /readyz` (ready to serve, or why
//! not), `GET /metrics` (Prometheus text) and `GET /status` (this node's view of every shard).
//!
//! `/mcp`'s router serves them behind the same front checks as MCP requests (`/status` and
//! `/metrics` only to `auth.status_principals`); [`ops_router`] serves the unauthenticated
//! ones on `[metrics] listen`. They read the node only through the router's status
//! (`Router::shard_status`, `shard_count`, `live_tasks`, `placed`), never the task path.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::front::{plain, Fronted};
use crate::{metrics, Gateway};

impl Gateway {
    /// Whether this node is ready to serve (`GET /readyz`), or why not: the node is not
    /// stopping; every replica it hosts
    /// knows its group's leader and, on a follower, has applied the group's commits up to
    /// `ready_max_lag_entries`; every shard it hosts no replica of is placed (the cluster
    /// metadata is known), so its requests can be routed.
    pub fn readiness(&self) -> Result<(), String> {
        if self.stopping.load(std::sync::atomic::Ordering::Relaxed) {
            return Err("the node is stopping".into());
        }
        readiness_of(
            &self.router.shard_status(),
            self.router.shard_count(),
            |shard| !self.router.placed(shard).is_empty(),
            self.cfg.readiness.max_lag_entries,
            self.cfg.readiness.max_leader_silence_ms,
        )
    }
}

/// The readiness decision of [`Gateway::readiness`] for a node that is not stopping: the
/// status of the replicas it hosts (`hosted`) among `shard_count` shards, whether a shard it
/// hosts no replica of is placed, how far a follower may lag and how long it may go without
/// hearing from its leader.
pub fn readiness_of(
    hosted: &[taskmesh_host::ShardStatus],
    shard_count: u32,
    placed: impl Fn(u32) -> bool,
    max_lag_entries: u64,
    max_leader_silence_ms: u64,
) -> Result<(), String> {
    let mut here = vec![false; shard_count as usize];
    for s in hosted {
        if let Some(h) = here.get_mut(s.shard as usize) {
            *h = true;
        }
        if s.leader.is_none() {
            return Err(format!("shard {} knows no leader", s.shard));
        }
        if !s.is_leader {
            match s.leader_silence_ms {
                None => {
                    return Err(format!(
                        "shard {} has not heard from its leader yet",
                        s.shard
                    ))
                }
                Some(ms) if ms > max_leader_silence_ms => {
                    return Err(format!(
                        "shard {} has not heard from its leader for {ms} ms",
                        s.shard
                    ))
                }
                Some(_) => {}
            }
        }
        let applied = s.last_applied_index.unwrap_or(0);
        if let Some(committed) = s.committed_index.filter(|_| !s.is_leader) {
            if applied.saturating_add(max_lag_entries) < committed {
                return Err(format!(
                    "shard {} is catching up: applied {applied} of {committed}",
                    s.shard
                ));
            }
        }
    }
    match (0..shard_count).find(|shard| !here[*shard as usize] && !placed(*shard)) {
        Some(shard) => Err(format!(
            "shard {shard} has no replica here and no placement (the cluster metadata is not known yet)"
        )),
        None => Ok(()),
    }
}

/// The operator endpoints without authentication, for a listener only operators and their
/// tools reach (`[metrics] listen`): `/metrics`, `/healthz`, `/readyz`.
pub fn ops_router(gw: Arc<Gateway>) -> axum::Router {
    axum::Router::new()
        .route("/metrics", axum::routing::get(handle_open_metrics))
        .route("/healthz", axum::routing::get(handle_healthz))
        .route("/readyz", axum::routing::get(handle_readyz))
        .with_state(gw)
}

/// `GET /healthz`: the process is alive and serving HTTP. No authentication, no work.
pub(crate) async fn handle_healthz() -> Response {
    plain(StatusCode::OK, "ok\n")
}

/// `GET /readyz`: 200 when the node is ready to serve ([`Gateway::readiness`]), else 503
/// saying why. No authentication; a few reads of local state.
pub(crate) async fn handle_readyz(State(gw): State<Arc<Gateway>>) -> Response {
    match gw.readiness() {
        Ok(()) => plain(StatusCode::OK, "ready\n"),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("not ready: {why}\n"),
        )
            .into_response(),
    }
}

/// A caller who may read `/status` and `/metrics`: the front checks of `/mcp`, and with
/// authentication on, one of `auth.status_principals` (403 otherwise).
pub(crate) struct StatusReader;

impl axum::extract::FromRequestParts<Arc<Gateway>> for StatusReader {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        gw: &Arc<Gateway>,
    ) -> Result<Self, Self::Rejection> {
        let Fronted(identity) = Fronted::from_request_parts(parts, gw).await?;
        if !gw.auth.may_read_status(&identity) {
            return Err(plain(
                StatusCode::FORBIDDEN,
                "Forbidden: not one of auth.status_principals",
            ));
        }
        Ok(StatusReader)
    }
}

/// `GET /metrics` on the MCP listener: the same rules as `/status` (with authentication on,
/// only the principals of `auth.status_principals`).
pub(crate) async fn handle_metrics(gw: State<Arc<Gateway>>, _: StatusReader) -> Response {
    handle_open_metrics(gw).await
}

/// The metrics in the Prometheus text format, this node's state read now; 404 when metrics
/// are off.
async fn handle_open_metrics(State(gw): State<Arc<Gateway>>) -> Response {
    if !taskmesh_metrics::installed() {
        return plain(
            StatusCode::NOT_FOUND,
            "Not Found: metrics are off ([metrics] enabled = false)",
        );
    }
    metrics::refresh(&gw, gw.readiness().is_ok());
    match taskmesh_metrics::render() {
        Some(text) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, taskmesh_metrics::CONTENT_TYPE)],
            text,
        )
            .into_response(),
        None => plain(StatusCode::NOT_FOUND, "Not Found: metrics are off"),
    }
}

/// `GET /status`: this node's view of every shard (leader, term, applied and log indexes, task
/// counts), for operators and tests. Same Origin, authentication and rate-limit rules as `/mcp`;
/// with authentication on, only the principals of `auth.status_principals` may read it (the
/// node's task counts would tell a caller about other principals' tasks).
pub(crate) async fn handle_status(State(gw): State<Arc<Gateway>>, _: StatusReader) -> Response {
    let status = gw.router.shard_status();
    let node = status
        .first()
        .map(|s| s.node)
        .or_else(|| Some(gw.router.node_id()).filter(|id| *id != 0));
    let shards: Vec<serde_json::Value> = status
        .into_iter()
        .map(|s| {
            serde_json::json!({
                "shard": s.shard,
                "isLeader": s.is_leader,
                "leader": s.leader,
                "term": s.term,
                "lastAppliedIndex": s.last_applied_index,
                "firstLogIndex": s.first_log_index,
                "lastLogIndex": s.last_log_index,
                "tasks": s.tasks,
                "liveTasks": s.live_tasks,
                "voters": s.voters,
                "quiet": match s.quiet {
                    taskmesh_host::Quiet::Awake => None,
                    taskmesh_host::Quiet::Leading => Some("leader"),
                    taskmesh_host::Quiet::Following { .. } => Some("follower"),
                },
            })
        })
        .collect();
    let body = serde_json::json!({
        "node": node,
        "liveTasks": gw.router.live_tasks(),
        "sseStreams": gw.slots.open(),
        "shards": shards,
        "streamDelivery": gw.delivery.to_json(),
        "upstreams": gw.tools.source_reports(),
        "workers": gw.router.host().cluster_workers(),
        "webhooks": gw.router.host().webhooks(),
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
