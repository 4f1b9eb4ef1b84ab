//! `logging/setLevel`, and which log messages (`notifications/message`) reach a client.
//!
//! A session's level is kept by its home node ([`crate::session::Sessions::set_level`]). A
//! `logging/setLevel` that reaches another node is passed on to the home
//! (`StreamService.SessionLogLevel`) and answered once the home recorded it. The node that
//! frames a log message for one of the client's streams sends it only if its level is at or
//! above the session's: the session's GET streams live on its home, which reads its own table;
//! a `tasks/result` stream or a plain call's answer on another node asks the home, at the
//! stream's first log message and again at most every [`REMOTE_LEVEL_FOR`] after. A session
//! that never set a level gets every message, and so does a stream whose home cannot be asked
//! (that is logged).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use taskmesh_mcp::{ErrorObject, LogLevel};
use taskmesh_rpc::v1::{self, stream_service_client::StreamServiceClient};

use crate::session::{Cx, SessionClaims};
use crate::Gateway;

/// How long a level learnt from the session's home is used before it is asked again.
pub(crate) const REMOTE_LEVEL_FOR: Duration = Duration::from_secs(1);

/// Whether a serialised JSON-RPC message is a log message.
pub(crate) fn is_log(json: &[u8]) -> bool {
    const METHOD: &[u8] = b"\"notifications/message\"";
    json.windows(METHOD.len()).any(|w| w == METHOD)
}

/// The level of a serialised log message.
fn level_of(json: &[u8]) -> Option<LogLevel> {
    let v: Value = serde_json::from_slice(json).ok()?;
    LogLevel::parse(v["params"]["level"].as_str()?)
}

/// `logging/setLevel`: `level` must be one of MCP's; recorded by the session's home.
pub(crate) async fn set_level(
    gw: &Arc<Gateway>,
    cx: &Cx,
    p: &Map<String, Value>,
) -> Result<Value, ErrorObject> {
    let level = match p.get("level") {
        Some(Value::String(s)) => LogLevel::parse(s),
        _ => None,
    }
    .ok_or_else(|| {
        ErrorObject::invalid_params(
            "Invalid params: level must be one of debug, info, notice, warning, error, \
             critical, alert, emergency",
        )
    })?;
    let Some((session, claims)) = &cx.session else {
        return Err(ErrorObject::internal("logging/setLevel needs a session"));
    };
    if is_home(gw, claims) {
        gw.sessions
            .set_level(claims, level)
            .map_err(|e| ErrorObject::internal(format!("the level was not recorded: {e}")))?;
    } else {
        ask_home(gw, claims.home, session, Some(level))
            .await
            .map_err(|e| {
                ErrorObject::internal(format!(
                    "the level was not recorded: the session's home node {} did not answer ({e})",
                    claims.home
                ))
            })?;
    }
    tracing::debug!(level = level.as_str(), "session log level set");
    Ok(json!({}))
}

/// Whether this node is the session's home (sessions from before homes existed: every node).
fn is_home(gw: &Gateway, claims: &SessionClaims) -> bool {
    claims.home == 0 || claims.home == gw.hub.node()
}

/// The level the home node `home` holds for `session`, after setting it to `level` if given.
async fn ask_home(
    gw: &Gateway,
    home: u64,
    session: &str,
    level: Option<LogLevel>,
) -> Result<Option<LogLevel>, String> {
    let channel = gw
        .router
        .peer_channel(home)
        .ok_or_else(|| "no connection to it".to_string())?;
    let req = v1::SessionLogLevelRequest {
        session: session.to_string(),
        level: level.map(|l| l.as_str().to_string()),
    };
    let r = StreamServiceClient::new(channel)
        .session_log_level(req)
        .await
        .map_err(|s| s.message().to_string())?;
    Ok(r.into_inner().level.as_deref().and_then(LogLevel::parse))
}

/// Which log messages one stream of a session carries (see the module doc).
pub(crate) struct LogFilter {
    session: Option<(String, SessionClaims)>,
    /// The level learnt from the home, and when.
    remote: Option<(Option<LogLevel>, Instant)>,
}

impl LogFilter {
    /// The filter of a stream of the request's session.
    pub(crate) fn new(cx: &Cx) -> Self {
        Self {
            session: cx.session.clone(),
            remote: None,
        }
    }

    /// Whether the stream carries this message: anything but a log message, and a log message
    /// at or above the session's level.
    pub(crate) async fn allows(&mut self, gw: &Gateway, json: &[u8]) -> bool {
        if !is_log(json) {
            return true;
        }
        let Some(level) = level_of(json) else {
            return true;
        };
        match self.level(gw).await {
            Some(min) => level >= min,
            None => true,
        }
    }

    async fn level(&mut self, gw: &Gateway) -> Option<LogLevel> {
        let (session, claims) = self.session.as_ref()?;
        if is_home(gw, claims) {
            return gw.sessions.level(claims);
        }
        if let Some((level, at)) = self.remote {
            if at.elapsed() < REMOTE_LEVEL_FOR {
                return level;
            }
        }
        let level = match ask_home(gw, claims.home, session, None).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(home = claims.home, error = %e,
                    "the session's log level could not be read from its home; its log messages are all sent");
                None
            }
        };
        self.remote = Some((level, Instant::now()));
        level
    }
}

/// Whether a GET stream of `session` on this node carries the log message `json` (the GET
/// streams of a session live on its home, whose table has the level).
pub(crate) fn get_stream_allows(gw: &Gateway, session: &str, json: &[u8]) -> bool {
    if !is_log(json) {
        return true;
    }
    if !gw.sessions.has_stream(session) {
        return false; // nothing to send it on here
    }
    let min = gw
        .sessions
        .check(session)
        .and_then(|c| gw.sessions.level(&c));
    match (min, level_of(json)) {
        (Some(min), Some(level)) => level >= min,
        _ => true,
    }
}

/// The serving half of `StreamService.SessionLogLevel`.
pub(crate) fn serve_level(
    gw: &Gateway,
    req: v1::SessionLogLevelRequest,
) -> Result<v1::SessionLogLevelResponse, tonic::Status> {
    let claims = gw
        .sessions
        .check(&req.session)
        .ok_or_else(|| tonic::Status::not_found("no such live session"))?;
    if let Some(name) = &req.level {
        let level = LogLevel::parse(name)
            .ok_or_else(|| tonic::Status::invalid_argument("not an MCP log level"))?;
        gw.sessions
            .set_level(&claims, level)
            .map_err(|e| tonic::Status::internal(e.to_string()))?;
    }
    Ok(v1::SessionLogLevelResponse {
        level: gw.sessions.level(&claims).map(|l| l.as_str().to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_messages_are_told_apart_and_their_level_read() {
        let log = br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"warning","data":"x"}}"#;
        assert!(is_log(log));
        assert_eq!(level_of(log), Some(LogLevel::Warning));
        let progress = br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#;
        assert!(!is_log(progress));
    }
}
