//! `initialize`: the session a client opens before anything else.
//!
//! [`super::request`] hands `initialize` here; the answer carries the negotiated protocol
//! version and the server's capabilities, and the transport sends the new signed session id
//! (its claims: version, principal, client capabilities, a fresh nonce) as a header.

use std::sync::Arc;

use serde_json::{json, Map, Value};
use taskmesh_mcp::jsonrpc::{self, ErrorObject, RequestId};
use taskmesh_mcp::params;
use taskmesh_mcp::time::now_ms;

use super::{err, Cx, Reply};
use crate::session::SessionClaims;
use crate::Gateway;

pub(super) fn initialize(
    gw: &Arc<Gateway>,
    cx: &Cx,
    id: &RequestId,
    p: &Map<String, Value>,
) -> Reply {
    let requested = match params::req_str(p, "protocolVersion") {
        Ok(v) => v,
        Err(e) => return err(id, &e),
    };
    let caps = match params::opt_obj(p, "capabilities") {
        Ok(c) => c.cloned().unwrap_or_default(),
        Err(e) => return err(id, &e),
    };
    if !gw.limits.allow_session(&cx.principal) {
        return err(
            id,
            &ErrorObject::new(
                taskmesh_mcp::jsonrpc::CAPACITY_EXCEEDED,
                "too many sessions opened: this principal reached limits.sessions_per_minute; retry later",
            ),
        );
    }
    let version = taskmesh_mcp::negotiate_version(requested);
    let mut nonce = [0u8; 16];
    if getrandom::fill(&mut nonce).is_err() {
        return err(id, &ErrorObject::internal("OS random source failed"));
    }
    let claims = SessionClaims {
        version: version.to_string(),
        principal: cx.principal.clone(),
        elicitation: caps.contains_key("elicitation"),
        sampling: caps.contains_key("sampling"),
        tasks: caps.contains_key("tasks"),
        elicitation_tasks: tasks_request(&caps, "elicitation", "create"),
        sampling_tasks: tasks_request(&caps, "sampling", "createMessage"),
        nonce: nonce.iter().map(|b| format!("{b:02x}")).collect(),
        issued_at_ms: now_ms(),
        home: gw.hub.node(),
    };
    let session_id = gw.sessions.mint(&claims);
    let tasks = taskmesh_mcp::version_has_tasks(version);
    let result = json!({
        "protocolVersion": version,
        "capabilities": taskmesh_mcp::server_capabilities(tasks, gw.has_auth()),
        "serverInfo": { "name": "taskmesh", "title": "taskmesh", "version": env!("CARGO_PKG_VERSION") },
        "instructions": "Long tool calls run as durable tasks: call with `task`, poll tasks/get, fetch tasks/result.",
    });
    tracing::debug!(principal = %cx.principal, version, "session initialised");
    Reply::Initialized {
        body: jsonrpc::response(id, &result),
        session_id,
    }
}

/// Whether the client's capabilities declare `tasks.requests.<kind>.<method>`: it runs such
/// requests of the server as tasks.
fn tasks_request(caps: &Map<String, Value>, kind: &str, method: &str) -> bool {
    caps.get("tasks")
        .and_then(|t| t.get("requests"))
        .and_then(|r| r.get(kind))
        .and_then(|k| k.get(method))
        .is_some_and(Value::is_object)
}
