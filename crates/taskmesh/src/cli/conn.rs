//! One connection to an MCP server over Streamable HTTP, in whichever protocol generation the
//! settings and the server agree on, behind one interface for the commands: the tools, a
//! call (as a task when the server offers one), and the task methods.
//!
//! With [`Protocol::Auto`] the command line sends `initialize` first: a server that answers
//! it speaks 2025-11-25 (or an older version the client knows), which carries live progress
//! of tasks and `tasks/list`; a server that refuses it is asked `server/discover`, and used
//! with 2026-07-28 when it lists that version.

use std::time::Duration;

use serde_json::{Map, Value};
use taskmesh_client::{
    jsonrpc, task_support, Client, ClientError, Endpoint, ErrorObject, HttpSpec, Options, Polling,
    StatelessCall, StatelessClient, Step, TaskCall, TaskStart, ToolCall,
};

use super::settings::{Protocol, Settings};
use super::Failure;

/// How long connecting (the handshake, or `server/discover`) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// A connection of one generation.
pub enum Conn {
    /// 2025-11-25 (or older): a session.
    Classic(Client),
    /// 2026-07-28 with the tasks extension.
    Modern(StatelessClient),
}

/// How a call left running started.
pub enum Start {
    /// As task `id`.
    Task(String),
    /// Without a task, already answered: its result.
    Done(Value),
    /// Without a task, still running.
    Running(Running),
}

/// A call or a followed task, of either generation.
pub enum Running {
    /// A plain 2025-11-25 call.
    Plain(ToolCall),
    /// A 2025-11-25 task.
    Task(TaskCall),
    /// A 2026-07-28 call, or the task the server made of it.
    Modern(StatelessCall),
}

impl Running {
    /// The next event, or the outcome.
    pub async fn next(&mut self) -> Step {
        match self {
            Running::Plain(c) => c.next().await,
            Running::Task(t) => t.next().await,
            Running::Modern(m) => m.next().await,
        }
    }

    /// Give up a plain call: on 2025-11-25 `notifications/cancelled`; on 2026-07-28 its
    /// answer stream is closed. A task is left running.
    pub async fn give_up(self) {
        match self {
            Running::Plain(c) => c.cancel("interrupted by the user").await,
            Running::Task(t) => drop(t.detach()),
            Running::Modern(m) => drop(m),
        }
    }

    /// The task's id, when the call runs as one.
    pub fn task_id(&self) -> Option<String> {
        match self {
            Running::Plain(_) => None,
            Running::Task(t) => Some(t.task_id().to_string()).filter(|id| !id.is_empty()),
            Running::Modern(m) => m.task_id(),
        }
    }
}

fn polling() -> Polling {
    Polling {
        min: Duration::from_millis(100),
        max: Duration::from_secs(2),
        default: Duration::from_millis(500),
    }
}

impl Conn {
    /// Connect as `settings` say.
    pub async fn open(settings: &Settings) -> Result<Conn, Failure> {
        let mut spec = HttpSpec::new(settings.url.clone());
        if let Some(t) = &settings.token {
            spec = spec.with_bearer(t);
        }
        // With OAuth: a 2025-11-25 session gets its tokens (and renews them) itself; the
        // stateless generation is given one token, got now.
        let stateless_spec = match &settings.oauth {
            None => spec.clone(),
            Some(credentials) => {
                let http = taskmesh_client::wire::default_http();
                let token = credentials.fetch(&http, &settings.url).await.map_err(|e| {
                    Failure::connect(format!("no access token for {}: {e}", settings.url))
                })?;
                spec.clone().with_bearer(&token.token)
            }
        };
        if let Some(credentials) = &settings.oauth {
            spec = spec.with_oauth(credentials.clone());
        }
        let opts = Options {
            name: "taskmesh-cli".into(),
            connect_timeout: CONNECT_TIMEOUT,
            ..Options::default()
        };
        let classic = || async {
            Client::connect(&Endpoint::Http(spec.clone()), &opts)
                .await
                .map(Conn::Classic)
        };
        let modern = || async {
            StatelessClient::discover(&stateless_spec, &opts)
                .await
                .map(Conn::Modern)
        };
        let url = &settings.url;
        match settings.protocol {
            Protocol::V2025 => classic().await.map_err(|e| {
                Failure::connect(format!("cannot open a 2025-11-25 session with {url}: {e}"))
            }),
            Protocol::V2026 => modern()
                .await
                .map_err(|e| Failure::connect(format!("{url} does not serve 2026-07-28: {e}"))),
            Protocol::Auto => match classic().await {
                Ok(c) => Ok(c),
                Err(first) if refused(&first) => modern().await.map_err(|e| {
                    Failure::connect(format!(
                        "{url} answers neither initialize ({first}) nor server/discover ({e})"
                    ))
                }),
                Err(e) => Err(Failure::connect(format!("cannot connect to {url}: {e}"))),
            },
        }
    }

    /// The protocol version in use.
    pub fn protocol(&self) -> &str {
        match self {
            Conn::Classic(c) => &c.server().protocol_version,
            Conn::Modern(m) => &m.server().protocol_version,
        }
    }

    /// End the session, if there is one.
    pub async fn close(&self) {
        if let Conn::Classic(c) = self {
            c.close().await;
        }
    }

    /// Every tool, as listed.
    pub async fn tools(&self) -> Result<Vec<Value>, ClientError> {
        match self {
            Conn::Classic(c) => c.list_tools().await,
            Conn::Modern(m) => m.list_tools().await,
        }
    }

    /// Call `name` with `args`: as a task when the server offers one for it.
    pub async fn call(&self, name: &str, args: Map<String, Value>) -> Result<Running, Failure> {
        match self {
            Conn::Classic(c) if as_task(c, name).await? => c
                .call_tool_as_task(name, args, None, &[], polling())
                .await
                .map(Running::Task)
                .map_err(Failure::outcome),
            Conn::Classic(c) => c
                .call_tool(name, args, None)
                .await
                .map(Running::Plain)
                .map_err(Failure::outcome),
            Conn::Modern(m) => m
                .call_tool(name, args, polling())
                .await
                .map(Running::Modern)
                .map_err(Failure::outcome),
        }
    }

    /// Call `name` with `args` to leave it running: the id of the task the server made of
    /// it, or how it runs when the server made none.
    pub async fn start(&self, name: &str, args: Map<String, Value>) -> Result<Start, Failure> {
        match self {
            Conn::Classic(c) if as_task(c, name).await? => {
                match c.start_task(name, args, None, &[]).await {
                    Ok(TaskStart::Created(task)) => match task["taskId"].as_str() {
                        Some(id) => Ok(Start::Task(id.to_string())),
                        None => Err(Failure::client(ClientError::Protocol(
                            "the created task has no id".into(),
                        ))),
                    },
                    Ok(TaskStart::Answered(result)) => Ok(Start::Done(result)),
                    Err(e) => Err(Failure::outcome(e)),
                }
            }
            Conn::Classic(c) => c
                .call_tool(name, args, None)
                .await
                .map(|call| Start::Running(Running::Plain(call)))
                .map_err(Failure::outcome),
            // The server decides; a task's questions wait in it until it is followed.
            Conn::Modern(_) => {
                let running = self.call(name, args).await?;
                Ok(match running.task_id() {
                    Some(id) => Start::Task(id),
                    None => Start::Running(running),
                })
            }
        }
    }

    /// Follow task `id` to its outcome.
    pub fn follow(&self, id: &str) -> Running {
        match self {
            Conn::Classic(c) => Running::Task(c.follow_task(id, polling())),
            Conn::Modern(m) => Running::Modern(m.follow_task(id, polling())),
        }
    }

    /// `tasks/get` (the task as the server shows it on this generation).
    pub async fn get(&self, id: &str) -> Result<Value, ClientError> {
        match self {
            Conn::Classic(c) => c.get_task(id).await,
            Conn::Modern(m) => m.get_task(id).await,
        }
    }

    /// `tasks/list`, every page; 2026-07-28 has none.
    pub async fn list(&self) -> Result<Vec<Value>, Failure> {
        match self {
            Conn::Classic(c) if !c.lists_tasks() => Err(Failure::usage(
                "the server does not offer tasks/list (its tasks.list capability); \
                 taskmesh offers it when authentication is on",
            )),
            Conn::Classic(c) => c.list_tasks().await.map_err(Failure::client),
            Conn::Modern(_) => Err(Failure::usage(
                "protocol 2026-07-28 has no tasks/list: use --protocol 2025-11-25 with a server that offers it",
            )),
        }
    }

    /// `tasks/cancel`: what the server answered (2026-07-28: an acknowledgement, then the
    /// task as `tasks/get` shows it).
    pub async fn cancel(&self, id: &str) -> Result<Value, ClientError> {
        match self {
            Conn::Classic(c) => c.cancel_task(id).await,
            Conn::Modern(m) => {
                m.cancel_task(id).await?;
                m.get_task(id).await
            }
        }
    }
}

/// Whether tool `name` is called as a task on 2025-11-25: when the server accepts task calls
/// and the tool's `taskSupport` (from `tools/list`) is not `forbidden`. (On 2026-07-28 the
/// server decides.)
async fn as_task(c: &Client, name: &str) -> Result<bool, Failure> {
    if !c.offers_tasks() {
        return Ok(false);
    }
    let tools = c.list_tools().await.map_err(Failure::client)?;
    Ok(tools
        .iter()
        .find(|t| t["name"] == name)
        .is_some_and(|t| task_support(t) != "forbidden"))
}

/// The JSON-RPC error the command line answers a server's request with when it cannot
/// answer it.
pub fn refusal(message: &str) -> ErrorObject {
    ErrorObject {
        code: jsonrpc::METHOD_NOT_FOUND,
        message: message.to_string(),
        data: None,
    }
}

/// Whether `initialize` failed in a way that says the server may speak 2026-07-28 only: it
/// answered (an error, a refusal at the HTTP level), rather than not being reached at all or
/// refusing the caller (401, 403: the other generation would be refused the same way).
fn refused(e: &ClientError) -> bool {
    match e {
        ClientError::Rpc(_) | ClientError::Protocol(_) => true,
        ClientError::Transport(t) => {
            t.contains("answered HTTP") && !t.contains("HTTP 401") && !t.contains("HTTP 403")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_refused_initialize_is_followed_by_server_discover() {
        let rpc = ClientError::Rpc(ErrorObject::new(-32601, "Method not found"));
        assert!(refused(&rpc));
        assert!(refused(&ClientError::Transport(
            "the upstream answered HTTP 400 Bad Request".into()
        )));
        assert!(!refused(&ClientError::Transport(
            "the upstream answered HTTP 401 Unauthorized".into()
        )));
        assert!(!refused(&ClientError::Transport(
            "error sending request".into()
        )));
        assert!(!refused(&ClientError::Timeout(CONNECT_TIMEOUT)));
    }
}
