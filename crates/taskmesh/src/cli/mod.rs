//! The command line of MCP clients: `taskmesh call`, `taskmesh tasks ...` and
//! `taskmesh tools`, against any MCP server that speaks Streamable HTTP (taskmesh or not).
//!
//! A command resolves its settings (`settings.rs`: flags, environment, profile file), opens
//! a connection in the protocol generation the server and the settings agree on (`conn.rs`),
//! follows a call or a task with a progress bar and the server's questions asked in the
//! terminal (`follow.rs`, `prompt.rs`), and prints for people or, with `--json`, for scripts
//! (`output.rs`).
//!
//! Exit codes: [`EXIT_OK`] for a completed call whose result is not a tool error (and for the
//! commands that only read or detach), [`EXIT_FAILED`] for a tool error, a failed or cancelled
//! task, or a call the server answered with an error, [`EXIT_USAGE`] for a usage error (also
//! one the server found: an unknown tool or task, arguments it refuses) or a server that
//! cannot be reached or used.

mod conn;
mod follow;
mod output;
mod prompt;
pub mod settings;
mod webhooks;
mod workers;

pub use webhooks::WebhooksArgs;
pub use workers::WorkersArgs;

use serde_json::{json, Map, Value};
use taskmesh_client::ClientError;

use conn::{Conn, Start};
use follow::{Display, Ended};
use settings::ConnFlags;

/// A completed call whose result is not a tool error.
pub const EXIT_OK: u8 = 0;
/// A tool error, a failed or cancelled task, a call answered with an error.
pub const EXIT_FAILED: u8 = 1;
/// A usage error, or a server that cannot be reached or used.
pub const EXIT_USAGE: u8 = 2;

/// Why a command stopped early: its exit code and what to tell.
#[derive(Debug)]
pub struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    fn usage(message: impl Into<String>) -> Self {
        Self {
            code: EXIT_USAGE,
            message: message.into(),
        }
    }

    fn connect(message: String) -> Self {
        Self::usage(message)
    }

    /// A request about the server or its tasks failed.
    fn client(e: ClientError) -> Self {
        Self::usage(e.to_string())
    }

    /// A call's own outcome was an error: a JSON-RPC error or a task that did not complete
    /// is the call's failure, but for the errors that say the request was wrong (an unknown
    /// tool or task, arguments the tool refuses: [`is_usage_error`]); a transport problem is
    /// the connection's.
    fn outcome(e: ClientError) -> Self {
        let code = match &e {
            ClientError::Rpc(o) if is_usage_error(o.code) => EXIT_USAGE,
            ClientError::Rpc(_) | ClientError::TaskCancelled(_) | ClientError::TaskLost(_) => {
                EXIT_FAILED
            }
            _ => EXIT_USAGE,
        };
        Self {
            code,
            message: e.to_string(),
        }
    }
}

/// Whether a JSON-RPC error code says the request itself was wrong: invalid request, method
/// not found, invalid params (an unknown tool or task id, arguments that do not fit).
pub fn is_usage_error(code: i64) -> bool {
    use taskmesh_client::jsonrpc::{INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND};
    [INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND].contains(&code)
}

/// `taskmesh call`.
#[derive(clap::Args)]
pub struct CallArgs {
    /// The tool to call.
    pub tool: String,
    /// Arguments as key=value: the value is read as JSON when it parses (numbers, true,
    /// false, null, objects, arrays, "quoted strings"), else taken as a string.
    #[arg(value_name = "KEY=VALUE")]
    pub pairs: Vec<String>,
    /// The arguments as one JSON object (key=value pairs are laid over it).
    #[arg(long, value_name = "JSON")]
    pub args: Option<String>,
    /// Print the task's id as soon as the server created it, and exit (the task runs on).
    #[arg(long)]
    pub detach: bool,
    /// Print the whole result as JSON, and no progress.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub conn: ConnFlags,
}

/// `taskmesh tools`.
#[derive(clap::Args)]
pub struct ToolsArgs {
    /// Print the tools as JSON (`{"tools": [...]}`).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub conn: ConnFlags,
}

/// `taskmesh tasks`.
#[derive(clap::Args)]
pub struct TasksArgs {
    #[command(subcommand)]
    pub command: TasksCommand,
    /// Print JSON for scripts.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(flatten)]
    pub conn: ConnFlags,
}

/// What `taskmesh tasks` does.
#[derive(clap::Subcommand)]
pub enum TasksCommand {
    /// The tasks the server lists for this caller (2025-11-25 `tasks/list`).
    List,
    /// One task as the server has it now.
    Get {
        /// The task's id.
        id: String,
    },
    /// A task's result, once it is terminal (waits for it, answering its questions).
    Result {
        /// The task's id.
        id: String,
    },
    /// Cancel a task.
    Cancel {
        /// The task's id.
        id: String,
    },
    /// Follow a task with a progress bar until it ends, answering its questions, then print
    /// its result.
    Watch {
        /// The task's id.
        id: String,
    },
}

/// A client command.
pub enum Command {
    /// `taskmesh call`.
    Call(CallArgs),
    /// `taskmesh tools`.
    Tools(ToolsArgs),
    /// `taskmesh tasks`.
    Tasks(TasksArgs),
    /// `taskmesh workers`.
    Workers(workers::WorkersArgs),
    /// `taskmesh webhooks`.
    Webhooks(webhooks::WebhooksArgs),
}

/// Run a client command; its exit code.
pub fn run(cmd: Command) -> u8 {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("taskmesh: cannot start: {e}");
            return EXIT_USAGE;
        }
    };
    let code = match rt.block_on(dispatch(cmd)) {
        Ok(code) => code,
        Err(f) => {
            eprintln!("taskmesh: {}", f.message);
            f.code
        }
    };
    // Requests still in flight (a detached task's first poll) are not waited for.
    rt.shutdown_background();
    code
}

async fn connect(flags: &ConnFlags) -> Result<Conn, Failure> {
    let settings = settings::load(flags).map_err(|e| Failure::usage(e.to_string()))?;
    Conn::open(&settings).await
}

async fn dispatch(cmd: Command) -> Result<u8, Failure> {
    match cmd {
        Command::Call(a) => {
            let args = parse_arguments(a.args.as_deref(), &a.pairs).map_err(Failure::usage)?;
            let conn = connect(&a.conn).await?;
            let code = call(&conn, &a, args).await;
            conn.close().await;
            code
        }
        Command::Tools(a) => {
            let conn = connect(&a.conn).await?;
            let tools = conn.tools().await.map_err(Failure::client)?;
            if a.json {
                output::print_json(&json!({ "tools": tools }));
            } else {
                println!("{}", output::tools_table(&tools, stdout_is_terminal()));
            }
            conn.close().await;
            Ok(EXIT_OK)
        }
        Command::Tasks(a) => {
            let conn = connect(&a.conn).await?;
            let code = tasks(&conn, a.command, a.json).await;
            conn.close().await;
            code
        }
        Command::Workers(a) => workers::run(a).await,
        Command::Webhooks(a) => webhooks::run(a).await,
    }
}

fn stdout_is_terminal() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stdout())
}

/// The arguments of a call: the `--args` object, then each `key=value` over it.
pub fn parse_arguments(json: Option<&str>, pairs: &[String]) -> Result<Map<String, Value>, String> {
    let mut args = match json {
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => m,
            Ok(_) => return Err("--args must be a JSON object".into()),
            Err(e) => return Err(format!("--args is not JSON: {e}")),
        },
        None => Map::new(),
    };
    for pair in pairs {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(format!("{pair:?} is not key=value"));
        };
        if key.is_empty() {
            return Err(format!("{pair:?} has no key"));
        }
        let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.into()));
        args.insert(key.to_string(), value);
    }
    Ok(args)
}

async fn call(conn: &Conn, a: &CallArgs, args: Map<String, Value>) -> Result<u8, Failure> {
    let running = if a.detach {
        match conn.start(&a.tool, args).await? {
            Start::Task(id) => {
                print_detached(&id, conn.protocol(), a.json);
                return Ok(EXIT_OK);
            }
            Start::Done(result) => return Ok(print_result(&result, a.json)),
            Start::Running(running) => {
                eprintln!(
                    "the server runs {} without a task: waiting for its result",
                    a.tool
                );
                running
            }
        }
    } else {
        conn.call(&a.tool, args).await?
    };
    let mut display = Display::new(&a.tool, a.json);
    let ended = follow::follow(conn, running, &mut display).await;
    finish(ended, conn.protocol(), a.json)
}

fn print_detached(id: &str, protocol: &str, json: bool) {
    if json {
        output::print_json(&output::detached_json(id, protocol));
    } else {
        println!("{id}");
        eprintln!("follow it with: taskmesh tasks watch {id}");
    }
}

/// Print how following ended; the exit code.
fn finish(ended: Ended, protocol: &str, json: bool) -> Result<u8, Failure> {
    match ended {
        Ended::Outcome(Ok(result)) => Ok(print_result(&result, json)),
        Ended::Outcome(Err(e)) => Err(Failure::outcome(e)),
        Ended::Detached(id) => {
            print_detached(&id, protocol, json);
            Ok(EXIT_OK)
        }
        Ended::Cancelled(id, answer) => {
            match answer {
                Ok(task) if json => output::print_json(&task),
                Ok(_) => eprintln!("task {id} cancelled"),
                Err(e) => eprintln!("task {id} could not be cancelled: {e}"),
            }
            Ok(EXIT_FAILED)
        }
        Ended::Interrupted => {
            eprintln!("the call was given up");
            Ok(EXIT_FAILED)
        }
    }
}

/// Print a `CallToolResult`; the exit code it makes.
fn print_result(result: &Value, json: bool) -> u8 {
    if json {
        output::print_json(result);
    } else {
        let text = output::result_text(result);
        if !text.is_empty() {
            println!("{text}");
        }
    }
    if output::is_error(result) {
        EXIT_FAILED
    } else {
        EXIT_OK
    }
}

async fn tasks(conn: &Conn, cmd: TasksCommand, json: bool) -> Result<u8, Failure> {
    let on_terminal = stdout_is_terminal();
    match cmd {
        TasksCommand::List => {
            let tasks = conn.list().await?;
            if json {
                output::print_json(&json!({ "tasks": tasks }));
            } else {
                println!("{}", output::tasks_table(&tasks, on_terminal));
            }
            Ok(EXIT_OK)
        }
        TasksCommand::Get { id } => {
            let task = conn.get(&id).await.map_err(Failure::client)?;
            if json {
                output::print_json(&task);
            } else {
                println!("{}", output::task_table(&task, on_terminal));
            }
            Ok(EXIT_OK)
        }
        TasksCommand::Result { id } => {
            // Known first: an unknown id is a usage error, not a lost task.
            conn.get(&id).await.map_err(Failure::client)?;
            let mut quiet = Display::new(&id, true);
            let ended = follow::follow(conn, conn.follow(&id), &mut quiet).await;
            finish(ended, conn.protocol(), json)
        }
        TasksCommand::Cancel { id } => {
            let task = conn.cancel(&id).await.map_err(Failure::client)?;
            if json {
                output::print_json(&task);
            } else {
                println!("{}", output::task_table(&task, on_terminal));
            }
            Ok(EXIT_OK)
        }
        TasksCommand::Watch { id } => {
            conn.get(&id).await.map_err(Failure::client)?;
            let running = conn.follow(&id);
            let mut display = Display::new(&id, json);
            let ended = follow::follow(conn, running, &mut display).await;
            finish(ended, conn.protocol(), json)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_value_pairs_are_json_when_they_parse() {
        let pairs: Vec<String> = [
            "seconds=5",
            "label=hello world",
            "on=true",
            "o={\"a\":1}",
            "q=\"5\"",
            "e=",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let a = parse_arguments(Some(r#"{"seconds": 1, "keep": "x"}"#), &pairs).unwrap();
        assert_eq!(
            Value::Object(a),
            json!({"seconds": 5, "label": "hello world", "on": true, "o": {"a": 1}, "q": "5", "e": "", "keep": "x"})
        );
        assert!(parse_arguments(None, &["novalue".into()]).is_err());
        assert!(parse_arguments(None, &["=1".into()]).is_err());
        assert!(parse_arguments(Some("[1]"), &[]).is_err());
    }

    #[test]
    fn outcomes_map_to_exit_codes() {
        assert_eq!(print_result(&json!({"content": []}), true), EXIT_OK);
        assert_eq!(
            print_result(&json!({"content": [], "isError": true}), true),
            EXIT_FAILED
        );
        let rpc = ClientError::Rpc(taskmesh_client::ErrorObject::new(-32603, "no"));
        assert_eq!(Failure::outcome(rpc).code, EXIT_FAILED);
        let unknown = ClientError::Rpc(taskmesh_client::ErrorObject::new(-32602, "no tool"));
        assert_eq!(Failure::outcome(unknown).code, EXIT_USAGE);
        assert_eq!(
            Failure::outcome(ClientError::TaskCancelled("x".into())).code,
            EXIT_FAILED
        );
        assert_eq!(
            Failure::outcome(ClientError::Transport("down".into())).code,
            EXIT_USAGE
        );
    }
}
