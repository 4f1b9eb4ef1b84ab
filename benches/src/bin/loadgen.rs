//! `loadgen`: drive an MCP server (taskmesh, the ceiling, or a peer) with one scenario and
//! print what it measured as a table, optionally also as JSON.
//!
//!     loadgen --url http://127.0.0.1:8080/mcp --scenario poll --duration-s 10 --concurrency 64
//!
//! See docs/benchmarks.md for the runs behind the published figures.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use taskmesh_bench::{run, RunConfig, Scenario};

#[derive(Parser)]
#[command(name = "loadgen", about = "Load generator for MCP task servers")]
struct Args {
    /// MCP endpoint(s); repeat or separate with commas to spread sessions over gateways.
    #[arg(long, required = true, value_delimiter = ',')]
    url: Vec<String>,
    /// poll, create, mixed, failover, call or task.
    #[arg(long, default_value = "poll")]
    scenario: Scenario,
    /// Name of the target in the report.
    #[arg(long, default_value = "taskmesh")]
    target: String,
    /// Bearer token.
    #[arg(long)]
    token: Option<String>,
    /// The certificate authority (PEM) of `https://` URLs.
    #[arg(long)]
    ca: Option<PathBuf>,
    #[arg(long, default_value_t = 10.0)]
    duration_s: f64,
    #[arg(long, default_value_t = 16)]
    sessions: usize,
    /// Closed-loop workers (requests in flight at once).
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Tasks created and then polled (poll, failover).
    #[arg(long, default_value_t = 1000)]
    tasks: usize,
    /// Open loop: offered requests per second (poll only). Without it: closed loop.
    #[arg(long)]
    rate: Option<f64>,
    /// Open loop: requests in flight at most; more are counted as dropped.
    #[arg(long, default_value_t = 10_000)]
    max_in_flight: usize,
    /// `seconds` of the slow_compute tasks created (default: 3600 for poll and failover, 0
    /// for create, 0.05 for mixed).
    #[arg(long)]
    task_seconds: Option<f64>,
    /// mixed: share of tasks cancelled right after creation.
    #[arg(long, default_value_t = 0.1)]
    cancel_share: f64,
    /// failover and --remote-only: the cluster's shard count.
    #[arg(long, default_value_t = 32)]
    shards: u32,
    /// poll: only poll tasks whose shard the first URL's node does not lead (so every poll
    /// is forwarded to another node).
    #[arg(long)]
    remote_only: bool,
    /// failover: pid of the node to kill -9.
    #[arg(long)]
    kill_pid: Option<i32>,
    /// failover: seconds after the start of the run to kill it.
    #[arg(long, default_value_t = 5.0)]
    kill_after_s: f64,
    /// call and task: the tool to call.
    #[arg(long, default_value = "greet")]
    tool: String,
    /// call and task: its arguments, a JSON object.
    #[arg(long, default_value = r#"{"name":"bench"}"#)]
    arguments: String,
    /// poll and failover: the tool of the tasks to poll, called with {"seconds": task_seconds}.
    #[arg(long, default_value = "slow_compute")]
    poll_tool: String,
    /// The protocol: 2025-11-25 (sessions, the default) or 2026-07-28 (stateless, with the
    /// tasks extension).
    #[arg(long, default_value = "2025-11-25")]
    protocol: String,
    /// Also write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    anyhow::ensure!(a.duration_s > 0.0, "--duration-s must be positive");
    anyhow::ensure!(
        a.concurrency > 0 && a.sessions > 0,
        "--concurrency and --sessions must be at least 1"
    );
    anyhow::ensure!(
        (0.0..=1.0).contains(&a.cancel_share),
        "--cancel-share is between 0 and 1"
    );
    if let Some(r) = a.rate {
        anyhow::ensure!(r > 0.0, "--rate must be positive");
    }
    let task_seconds = a.task_seconds.unwrap_or(match a.scenario {
        Scenario::Poll | Scenario::Failover => 3600.0,
        Scenario::Create | Scenario::Call | Scenario::Task => 0.0,
        Scenario::Mixed => 0.05,
    });
    if let Some(ca) = &a.ca {
        taskmesh_bench::client::trust_authority(ca)?;
    }
    let arguments: serde_json::Value = serde_json::from_str(&a.arguments)?;
    anyhow::ensure!(arguments.is_object(), "--arguments must be a JSON object");
    let cfg = RunConfig {
        urls: a.url,
        target: a.target,
        token: a.token,
        scenario: a.scenario,
        duration: Duration::from_secs_f64(a.duration_s),
        sessions: a.sessions,
        concurrency: a.concurrency,
        tasks: a.tasks,
        rate: a.rate,
        max_in_flight: a.max_in_flight,
        task_seconds,
        cancel_share: a.cancel_share,
        shards: a.shards,
        remote_only: a.remote_only,
        kill_pid: a.kill_pid,
        kill_after: Duration::from_secs_f64(a.kill_after_s),
        tool: a.tool,
        arguments,
        poll_tool: a.poll_tool,
        stateless: match a.protocol.as_str() {
            "2025-11-25" => false,
            "2026-07-28" => true,
            other => anyhow::bail!("--protocol is 2025-11-25 or 2026-07-28, not {other}"),
        },
        ..RunConfig::default()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let report = rt.block_on(run(&cfg))?;
    print!("{}", report.table());
    if let Some(path) = a.json {
        std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}
