//! What a connection is described by: which server ([`Endpoint`]: a stdio process, or a
//! Streamable HTTP URL with its headers, bearer token or OAuth client credentials), how to
//! connect ([`Options`]), what the server answered at the handshake ([`ServerInfo`]), what a
//! running call reports before its result ([`CallEvent`]), and what can go wrong
//! ([`ClientError`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use taskmesh_mcp::jsonrpc::ErrorObject;

use tokio::sync::oneshot;

use crate::oauth;

/// A stdio server: the process to start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StdioSpec {
    /// The program, looked up on taskmesh's own `PATH` when it has no `/`.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its whole environment: nothing of taskmesh's environment is passed on.
    pub env: BTreeMap<String, String>,
    /// Its working directory; taskmesh's when `None`.
    pub cwd: Option<PathBuf>,
}

/// A Streamable HTTP server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpSpec {
    /// The MCP endpoint, e.g. `http://127.0.0.1:9000/mcp`.
    pub url: String,
    /// Headers sent with every request (an `Authorization` header, say).
    pub headers: Vec<(String, String)>,
    /// Get OAuth access tokens by client credentials and send them as the bearer token
    /// ([`oauth`]); they replace an `Authorization` of `headers`.
    pub oauth: Option<oauth::ClientCredentials>,
}

impl HttpSpec {
    /// The endpoint `url`, with no headers.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            headers: Vec::new(),
            oauth: None,
        }
    }

    /// The same, with OAuth access tokens by client `credentials` (see [`oauth`]).
    pub fn with_oauth(mut self, credentials: oauth::ClientCredentials) -> Self {
        self.oauth = Some(credentials);
        self
    }

    /// The same, with `token` sent as `Authorization: Bearer {token}` on every request.
    pub fn with_bearer(mut self, token: &str) -> Self {
        self.headers
            .push(("authorization".into(), format!("Bearer {token}")));
        self
    }
}

/// Which server to connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A process spoken to over its stdin and stdout.
    Stdio(StdioSpec),
    /// A Streamable HTTP endpoint.
    Http(HttpSpec),
}

/// How to connect.
#[derive(Debug, Clone)]
pub struct Options {
    /// The name the client gives itself in `clientInfo`, and in logs about this server.
    pub name: String,
    /// The protocol version to speak; `None`: the newest taskmesh knows, or the one the server
    /// answers with when it is one taskmesh knows.
    pub protocol_version: Option<String>,
    /// The largest message accepted from the server, in bytes; a larger one ends the
    /// connection (stdio) or fails the call it answers (HTTP).
    pub max_message_bytes: usize,
    /// How long `initialize` may take.
    pub connect_timeout: Duration,
    /// Run the server's `elicitation/create` and `sampling/createMessage` as tasks of this
    /// client when the server asks for it (protocol 2025-11-25): the client declares
    /// `tasks.requests.elicitation.create` and `tasks.requests.sampling.createMessage`, answers
    /// such a request at once with a task, and serves the server's `tasks/get`, `tasks/result`,
    /// `tasks/list` and `tasks/cancel` about it. The caller answers the request as any other
    /// ([`CallEvent::Request`]); its answer, whenever it comes, is the task's result. Off by
    /// default.
    pub run_requests_as_tasks: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            name: "taskmesh".into(),
            protocol_version: None,
            max_message_bytes: 16 << 20,
            connect_timeout: Duration::from_secs(30),
            run_requests_as_tasks: false,
        }
    }
}

/// Why a request to the server did not get a result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClientError {
    /// The server answered with a JSON-RPC error.
    #[error("the server answered error {}: {}", .0.code, .0.message)]
    Rpc(ErrorObject),
    /// The connection ended (the process exited, the session ended, the stream of the
    /// answer broke off) before the answer came.
    #[error("the connection ended: {0}")]
    Closed(String),
    /// The server could not be reached or refused the request at the HTTP level.
    #[error("transport: {0}")]
    Transport(String),
    /// The server sent something that is not what MCP says it sends.
    #[error("protocol: {0}")]
    Protocol(String),
    /// No answer within the time allowed.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// No access token could be had from the OAuth authorization server.
    #[error("authorization: {0}")]
    Auth(String),
    /// A followed task was cancelled by the server (or by another of its requestors).
    #[error("{0}")]
    TaskCancelled(String),
    /// The server no longer knows a followed task (it lost it, or it serves it to another
    /// session only).
    #[error("the task is lost: {0}")]
    TaskLost(String),
}

/// What the server sends about a running call before its result.
#[derive(Debug)]
pub enum CallEvent {
    /// `notifications/progress` for the call.
    Progress {
        /// Progress so far.
        progress: f64,
        /// What it goes up to, when the server knows.
        total: Option<f64>,
        /// Text describing it.
        message: Option<String>,
    },
    /// A request to the client (`elicitation/create`, `sampling/createMessage`): the caller
    /// answers through `reply` (dropping it answers with an error).
    Request {
        /// The request's method.
        method: String,
        /// Its params, as sent.
        params: Value,
        /// Takes the answer: a result or a JSON-RPC error.
        reply: oneshot::Sender<Result<Value, ErrorObject>>,
    },
    /// `notifications/message`: a log message (its params: `level`, `logger`, `data`).
    Log(Value),
    /// A followed task's status changed (as `tasks/get` showed it).
    Status {
        /// The task's status.
        status: String,
        /// Its status message.
        message: Option<String>,
    },
}

/// The server's side of the handshake.
#[derive(Debug, Clone)]
pub struct ServerInfo {
    /// The protocol version in use.
    pub protocol_version: String,
    /// The server's `capabilities`.
    pub capabilities: Value,
    /// The server's `serverInfo`.
    pub server_info: Value,
}
