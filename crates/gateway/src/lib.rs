//! The MCP front door: Streamable HTTP as MCP 2025-11-25 defines it.
//!
//! A request travels: [`http`] (Origin check, authentication, body limit, session and
//! protocol-version headers) -> [`dispatch`] (JSON-RPC method, parameter validation, version
//! rules) -> the router (task operations) -> back as `application/json`, or as
//! `text/event-stream` when the answer needs a stream (`tasks/result` of a running task, a
//! plain `tools/call` that reports progress or asks the client something). The gateway holds
//! no task state: it translates and routes.
//!
//! Beside them: `front.rs` (the checks before a method is looked at: Origin,
//! token, scopes, rate, session id), `spans.rs` (a request's spans and audit facts),
//! `service.rs` (the task service both protocol generations share), `status.rs` (the
//! operators' `/healthz`, `/readyz`, `/metrics` and `/status`), [`modern`] (2026-07-28).

mod audit;
pub mod auth;
pub mod delivery;
pub mod dispatch;
mod front;
pub mod http;
mod inflight;
mod limits;
mod logging;
mod metrics;
pub mod modern;
pub mod relay;
pub mod resume;
mod service;
pub mod session;
pub mod settings;
pub mod sign;
mod slots;
mod spans;
mod status;
pub mod wire;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use taskmesh_host::HostEvent;
use taskmesh_router::Router;
use taskmesh_tools::{ToolRegistry, ToolResult};
use tokio::sync::oneshot;

use delivery::{DeliveryStats, JsonMessage, Kind};
pub use http::router as http_router;
use session::Sessions;
use sign::Signer;
pub use status::readiness_of;

/// What the gateway runs with, made by [`GatewayConfig::from_settings`] from the sections it
/// owns ([`settings`]), which are documented in docs/configuration.md.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// Origins allowed to call (DNS-rebinding protection). An entry without a port matches any
    /// port of that scheme and host. A request without an `Origin` header is allowed.
    pub allowed_origins: Vec<String>,
    /// `[auth]`: static tokens, trusted issuers, scopes. Nothing set: no authentication,
    /// every caller is `anonymous`.
    pub auth: auth::AuthConfig,
    /// Largest accepted request body, in bytes (larger: HTTP 413).
    pub max_body_bytes: usize,
    /// Secret that signs session ids and cursors (shared by every node of a cluster).
    pub secret: Vec<u8>,
    /// `tools/list` page size.
    pub tools_page_size: usize,
    /// `tasks/list` page size.
    pub tasks_page_size: usize,
    /// Lifetime of a `tasks/list` cursor; an older one is stale (-32602).
    pub cursor_ttl_ms: u64,
    /// Interval of SSE keep-alive comments.
    pub sse_keepalive_ms: u64,
    /// Events one SSE stream keeps for a reconnection, and its queue length: a `tasks/result`
    /// or plain-call stream holds its producer back when this many wait unread; a GET stream
    /// takes no more messages then.
    pub stream_buffer: usize,
    /// The reconnection delay sent in the SSE `retry` field.
    pub sse_retry_ms: u64,
    /// How long a stream whose connection ended is kept for a reconnection with
    /// `Last-Event-ID`; 0: not kept.
    pub sse_resume_window_ms: u64,
    /// After how long an SSE connection is closed on purpose (the client reconnects with
    /// `Last-Event-ID`), for 2025-11-25 sessions; 0: never.
    pub sse_max_stream_ms: u64,
    /// Requests per second allowed per principal (token bucket); 0 = no limit.
    pub rate_limit_per_second: u32,
    /// Burst above the steady rate; 0 = the rate itself.
    pub rate_limit_burst: u32,
    /// Tasks one principal may create per minute on this node; 0 = no limit.
    pub tasks_per_minute: u32,
    /// Sessions (`initialize`) one principal may open per minute on this node; 0 = no limit.
    pub sessions_per_minute: u32,
    /// Wrong bearer tokens one client address may send within a minute; past it its wrong
    /// tokens get HTTP 429, uncounted and unaudited, until its minute is over, while a token
    /// that verifies is served; 0 = unlimited.
    pub failed_auth_per_minute: u32,
    /// Unknown-task lookups per minute per principal above which an audit warning is logged
    /// (at most one a minute per principal); 0 = never.
    pub failed_lookup_alert_per_minute: u32,
    /// Verified session ids remembered (their signature is checked once); 0 = none.
    pub verified_session_cache: usize,
    /// Cancellable requests (plain `tools/call`, `tasks/result` held open) one session may
    /// have in flight at once; more are refused with `-32001`.
    pub max_inflight_per_session: usize,
    /// GET streams one session may hold open at once; one more is refused with HTTP 429.
    pub max_streams_per_session: usize,
    /// SSE answers (of every kind) open at once on this node; one more: HTTP 429.
    pub max_sse_streams: usize,
    /// SSE answers one principal may have open at once on this node; one more: HTTP 429.
    pub max_sse_streams_per_principal: usize,
    /// How long a request's body may take to arrive once its headers did, ms (slower: 408).
    pub body_read_timeout_ms: u64,
    /// Task ids one 2026-07-28 `subscriptions/listen` may watch; more are refused with
    /// `-32602`.
    pub max_listen_task_ids: usize,
    /// `subscriptions/listen` streams one principal may hold open on a node at once; one more
    /// is refused with HTTP 429.
    pub max_listen_streams_per_principal: usize,
    /// How long a 2026-07-28 `requestState` (the answers of a plain call's earlier input
    /// rounds) stays good, ms; an older one is `-32602`.
    pub request_state_ttl_ms: u64,
    /// `GET /readyz`: a follower replica more than this many entries behind its group's
    /// commit index is still catching up (the node is not ready).
    pub ready_max_lag_entries: u64,
    /// `GET /readyz`: a follower replica that has not heard from its leader for longer than
    /// this (ms) has no working leader (the node is not ready).
    pub ready_max_leader_silence_ms: u64,
}

impl Default for GatewayConfig {
    /// The defaults of every section, [`settings::Readiness::default`] and no secret.
    fn default() -> Self {
        Self::from_settings(
            settings::Sections {
                http: &settings::HttpSettings::default(),
                auth: &auth::AuthConfig::default(),
                session: &settings::SessionSettings::default(),
                limits: &settings::LimitsSettings::default(),
                tools: &settings::ToolsSettings::default(),
                tasks: &taskmesh_host::TaskSettings::default(),
                readiness: settings::Readiness::default(),
            },
            Vec::new(),
        )
    }
}

impl GatewayConfig {
    /// How this node's SSE streams are kept (for its [`resume::Hub`]).
    pub fn stream_settings(&self) -> resume::StreamSettings {
        resume::StreamSettings {
            buffer: self.stream_buffer,
            window: std::time::Duration::from_millis(self.sse_resume_window_ms),
            retry: std::time::Duration::from_millis(self.sse_retry_ms),
            max_connected: std::time::Duration::from_millis(self.sse_max_stream_ms),
        }
    }
}

/// The MCP front end of one node: its settings, the router to the task shards, the tool
/// registry, the sessions and the per-session request bookkeeping. Built with
/// [`Gateway::new`], served by [`http_router`].
pub struct Gateway {
    pub(crate) cfg: GatewayConfig,
    pub(crate) router: Router,
    pub(crate) tools: Arc<ToolRegistry>,
    pub(crate) sessions: Sessions,
    /// This node's SSE streams, kept for reconnections.
    pub(crate) hub: Arc<resume::Hub>,
    pub(crate) signer: Signer,
    /// Who is calling (`[auth]`).
    pub(crate) auth: auth::Authenticator,
    /// The SSE answers open on this node.
    pub(crate) slots: Arc<slots::Slots>,
    /// In-flight requests that `notifications/cancelled` may cancel: (session nonce, id).
    pub(crate) inflight: inflight::Inflight,
    /// Requests sent to clients by plain (non-task) tool calls, by id.
    pub(crate) plain_pending: Mutex<HashMap<String, oneshot::Sender<ToolResult>>>,
    pub(crate) limits: limits::Limits,
    /// How long the messages this node wrote to clients' streams took to get there.
    pub(crate) delivery: DeliveryStats,
    /// The 2026-07-28 `subscriptions/listen` streams open on this node.
    pub(crate) listeners: Arc<modern::listen::Listeners>,
    /// Set when the node begins to stop: `GET /readyz` then answers 503.
    stopping: std::sync::atomic::AtomicBool,
}

impl Gateway {
    /// `ended_sessions` is a durable tree of this node for ended session ids, `session_levels`
    /// one for the log levels its sessions set; `hub` holds this
    /// node's SSE streams (its [`relay::StreamGrpc`] serves them to the other nodes).
    pub fn new(
        cfg: GatewayConfig,
        router: Router,
        ended_sessions: sled::Tree,
        session_levels: sled::Tree,
        hub: Arc<resume::Hub>,
    ) -> Arc<Self> {
        let signer = Signer::new(&cfg.secret);
        let cfg_limits = cfg.clone();
        let tools = router.host().tools().clone();
        let node = router.host().node_id();
        let gw = Arc::new(Self {
            sessions: Sessions::new(
                signer.clone(),
                ended_sessions,
                session_levels,
                cfg.stream_buffer,
                cfg.verified_session_cache,
                cfg.max_streams_per_session,
            ),
            signer,
            auth: auth::Authenticator::new(&cfg_limits.auth),
            slots: slots::Slots::new(
                cfg_limits.max_sse_streams,
                cfg_limits.max_sse_streams_per_principal,
            ),
            hub,
            cfg,
            router,
            tools,
            inflight: inflight::Inflight::new(cfg_limits.max_inflight_per_session),
            plain_pending: Mutex::new(HashMap::new()),
            limits: limits::Limits::new(&cfg_limits, node),
            delivery: DeliveryStats::default(),
            listeners: Arc::default(),
            stopping: std::sync::atomic::AtomicBool::new(false),
        });
        gw.hub.set_gateway(&gw);
        metrics::register();
        gw.spawn_event_fanout();
        gw.spawn_tools_changed();
        gw
    }

    /// Tell every session with a GET stream on this node when the tools served change
    /// (`notifications/tools/list_changed`); changes close together are told once.
    fn spawn_tools_changed(self: &Arc<Self>) {
        let mut changes = self.tools.changes();
        let weak = Arc::downgrade(self);
        let json = Arc::new(
            serde_json::to_vec(&serde_json::json!({
                "jsonrpc": "2.0",
                "method": "notifications/tools/list_changed",
            }))
            .unwrap_or_default(),
        );
        tokio::spawn(async move {
            while changes.changed().await.is_ok() {
                changes.borrow_and_update();
                let Some(gw) = weak.upgrade() else { break };
                let told = gw.sessions.push_all(JsonMessage::plain(json.clone()));
                gw.listeners.tools_changed();
                tracing::debug!(sessions = told, "tools/list changed");
            }
        });
    }

    /// End every 2026-07-28 `subscriptions/listen` stream of this node with its response
    /// (`{resultType: "complete"}`), as at shutdown; streams opened afterwards end at once.
    pub fn end_subscriptions(&self) {
        self.listeners.end_all();
    }

    /// The node begins to stop: from now on it is not ready (`GET /readyz` answers 503), so
    /// that load balancers send new clients elsewhere while it hands over and drains.
    pub fn begin_stopping(&self) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether tasks can be scoped to an authenticated principal (then `tasks.list` exists).
    pub fn has_auth(&self) -> bool {
        self.auth.enabled()
    }

    /// Deliver host events to sessions' GET streams.
    fn spawn_event_fanout(self: &Arc<Self>) {
        let mut rx = self.router.subscribe();
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let ev = match rx.recv().await {
                    Ok(ev) => ev,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(missed = n, "session fan-out lagged");
                        continue;
                    }
                    Err(_) => break,
                };
                let Some(gw) = weak.upgrade() else { break };
                match ev {
                    HostEvent::Status {
                        task,
                        session,
                        at_us,
                    } => {
                        gw.listeners.task_changed(&task.task_id);
                        if let Some(session) = &session {
                            let json = Arc::new(wire::status_notification(&task));
                            gw.sessions
                                .push(session, JsonMessage::stamped(json, Kind::Status, at_us));
                        }
                    }
                    HostEvent::SessionMessage {
                        session,
                        json,
                        request_id: None,
                        at_us,
                        ..
                    } => {
                        if logging::get_stream_allows(&gw, &session, &json) {
                            gw.sessions
                                .push(&session, JsonMessage::stamped(json, Kind::Message, at_us));
                        }
                    }
                    // A server request goes out on one stream only: a GET stream here sends
                    // it once the task's leader grants the claim (an attached `tasks/result`
                    // stream, or another gateway's GET stream, may have taken it already).
                    HostEvent::SessionMessage {
                        session,
                        task_id,
                        json,
                        request_id: Some(request_id),
                        at_us,
                    } if gw.sessions.has_stream(&session) => {
                        let gw = gw.clone();
                        let json = JsonMessage::stamped(json, Kind::Message, at_us);
                        tokio::spawn(async move {
                            let request = (task_id.clone(), request_id.clone());
                            if gw.claim(&task_id, &request_id, false).await
                                && !gw.sessions.push_request(&session, json, request)
                            {
                                // The stream closed meanwhile: give the request back.
                                gw.claim(&task_id, &request_id, true).await;
                            }
                        });
                    }
                    HostEvent::SessionMessage { .. } => {}
                }
            }
        });
    }
}

#[cfg(test)]
mod readiness_tests {
    use crate::status::readiness_of;
    use taskmesh_host::ShardStatus;

    fn replica(shard: u32, leader: Option<u64>, applied: u64, committed: u64) -> ShardStatus {
        ShardStatus {
            shard,
            node: 2,
            is_leader: leader == Some(2),
            leader,
            term: 3,
            last_applied_index: Some(applied),
            first_log_index: Some(1),
            last_log_index: Some(applied),
            tasks: 0,
            live_tasks: 0,
            voters: vec![1, 2, 3],
            committed_index: Some(committed),
            proposals_in_flight: 0,
            leader_silence_ms: (leader != Some(2)).then_some(50),
            quiet: taskmesh_host::Quiet::Awake,
            follower_lag: Vec::new(),
        }
    }

    #[test]
    fn ready_means_leaders_known_followers_caught_up_and_every_shard_placed() {
        let all = |_| true;
        let none = |_| false;
        let good = [replica(0, Some(1), 500, 520), replica(1, Some(2), 900, 900)];
        assert_eq!(readiness_of(&good, 2, none, 100, 2000), Ok(()));
        // A follower more than the allowed entries behind is catching up.
        let lagging = [replica(0, Some(1), 300, 520), replica(1, Some(2), 900, 900)];
        let e = readiness_of(&lagging, 2, none, 100, 2000).unwrap_err();
        assert!(
            e.contains("shard 0 is catching up: applied 300 of 520"),
            "{e}"
        );
        assert_eq!(readiness_of(&lagging, 2, none, 220, 2000), Ok(()));
        // A leader is never behind itself, whatever it last heard.
        let leader = [replica(1, Some(2), 10, 900)];
        assert_eq!(readiness_of(&leader, 2, all, 0, 0), Ok(()));
        // No leader known, or a leader not heard from for too long, or never.
        let lost = [replica(0, None, 500, 500)];
        let e = readiness_of(&lost, 1, none, 100, 2000).unwrap_err();
        assert!(e.contains("knows no leader"), "{e}");
        let e = readiness_of(&good, 2, none, 100, 40).unwrap_err();
        assert!(
            e.contains("shard 0 has not heard from its leader for 50 ms"),
            "{e}"
        );
        let mut fresh = replica(0, Some(1), 0, 0);
        fresh.leader_silence_ms = None;
        let e = readiness_of(&[fresh], 1, none, 100, 2000).unwrap_err();
        assert!(e.contains("has not heard from its leader yet"), "{e}");
        // A shard hosted elsewhere needs the metadata's placement.
        let e = readiness_of(&good[..1], 2, none, 100, 2000).unwrap_err();
        assert!(
            e.contains("shard 1 has no replica here and no placement"),
            "{e}"
        );
        assert_eq!(readiness_of(&good[..1], 2, all, 100, 2000), Ok(()));
        assert_eq!(readiness_of(&[], 0, none, 100, 2000), Ok(()));
    }
}
