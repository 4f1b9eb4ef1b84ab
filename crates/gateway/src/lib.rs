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
mod handoff;
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
pub mod workers;

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

/// What the gateway runs with: the sections it owns ([`settings`], documented in
/// docs/configuration.md) whole, as the node read and checked them, the keys of `[tasks]` it
/// reads, the readiness bounds and the key it signs with.
#[derive(Debug, Clone, Default)]
pub struct GatewayConfig {
    /// `[http]`: the listener's bodies and streams, the allowed origins.
    pub http: settings::HttpSettings,
    /// `[auth]`: static tokens, trusted issuers, scopes. Nothing set: no authentication,
    /// every caller is `anonymous`.
    pub auth: auth::AuthConfig,
    /// `[session]`: the verified-id cache (the secret is [`GatewayConfig::secret`]).
    pub session: settings::SessionSettings,
    /// `[limits]`: request, creation and session rates, requests in flight.
    pub limits: settings::LimitsSettings,
    /// `[tools]`: the page size of `tools/list`.
    pub tools: settings::ToolsSettings,
    /// `[tasks]`: the gateway reads `list_page_size` and `cursor_ttl_ms`.
    pub tasks: taskmesh_host::TaskSettings,
    /// `[events]`: the gateway reads the keys of `events/poll` and `events/stream`.
    pub events: taskmesh_host::EventSettings,
    /// What `GET /readyz` holds a follower replica to (from `[cluster]` and `[raft]`).
    pub readiness: settings::Readiness,
    /// Key that signs session ids and `tasks/list` cursors: `session.secret`, or the node's
    /// own key. Empty: a random one.
    pub secret: Vec<u8>,
}

impl GatewayConfig {
    /// How this node's SSE streams are kept (for its [`resume::Hub`]).
    pub fn stream_settings(&self) -> resume::StreamSettings {
        resume::StreamSettings {
            buffer: self.http.sse_buffer_events,
            window: std::time::Duration::from_millis(self.http.sse_resume_window_ms),
            retry: std::time::Duration::from_millis(self.http.sse_retry_ms),
            max_connected: std::time::Duration::from_millis(self.http.sse_max_stream_ms),
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
    /// The `events/stream` requests open on this node.
    pub(crate) event_streams: Arc<modern::events::EventStreams>,
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
                cfg.http.sse_buffer_events,
                cfg.session.verified_cache,
                cfg.http.max_streams_per_session,
            ),
            signer,
            auth: auth::Authenticator::new(&cfg_limits.auth),
            slots: slots::Slots::new(
                cfg_limits.http.max_sse_streams,
                cfg_limits.http.max_sse_streams_per_principal,
            ),
            hub,
            cfg,
            router,
            tools,
            inflight: inflight::Inflight::new(cfg_limits.limits.max_inflight_per_session),
            plain_pending: Mutex::new(HashMap::new()),
            limits: limits::Limits::new(&cfg_limits, node),
            delivery: DeliveryStats::default(),
            listeners: Arc::default(),
            event_streams: Arc::default(),
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
        self.event_streams.end_all();
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
                        gw.event_streams
                            .shard_changed(gw.router.shard_of(&task.task_id));
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
