//! The taskmesh load generator and the HTTP ceiling it is compared with.
//!
//! [`run`] opens `sessions` MCP sessions spread over the target URLs, prepares what the scenario
//! needs, then drives `concurrency` workers until `duration` has passed:
//!
//! - `poll`: create `tasks` long-running tasks, then `tasks/get` them round-robin, at maximum
//!   rate (closed loop) or at `rate` requests per second scheduled by the clock (open loop:
//!   latency counts from when a request was due, so a slow server cannot hide its latency);
//! - `create`: `tools/call` as a task, at maximum rate;
//! - `mixed`: create, poll until terminal, fetch the result; a share of the tasks is cancelled
//!   right after creation;
//! - `failover`: closed-loop polls while the process `kill_pid` is killed (SIGKILL) after
//!   `kill_after`; reports, per shard, the longest time without a successful answer.
//!
//! Every answer is checked (the task id, the status the scenario expects, the result's
//! content), and a wrong one counts as a failure, not as an operation.

pub mod ceiling;
pub mod client;
pub mod report;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use shared::Shared;

pub use client::{Failure, Session};
pub use report::{Report, Stats};

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// Create `tasks` long-running tasks, then poll them with `tasks/get`, in a closed loop or,
    /// with `rate`, in an open loop.
    Poll,
    /// `tools/call` as a task at maximum rate; one operation is one created task.
    Create,
    /// One operation is a whole task: create, poll until `completed`, fetch the result; a
    /// `cancel_share` of the tasks is cancelled right after creation instead.
    Mixed,
    /// Closed-loop polls while `kill_pid` gets SIGKILL after `kill_after`; reports, per shard,
    /// the longest time without a successful answer.
    Failover,
    /// One operation is a plain `tools/call` of `tool` with `arguments`, answered with a
    /// result that is not an error.
    Call,
    /// One operation is a task-augmented `tools/call` of `tool` with `arguments` followed at
    /// once by `tasks/result`, which waits for the task to end: from the call to its result,
    /// `completed` and not an error.
    Task,
}

impl std::str::FromStr for Scenario {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "poll" => Ok(Scenario::Poll),
            "create" => Ok(Scenario::Create),
            "mixed" => Ok(Scenario::Mixed),
            "failover" => Ok(Scenario::Failover),
            "call" => Ok(Scenario::Call),
            "task" => Ok(Scenario::Task),
            other => Err(format!(
                "unknown scenario {other:?} (poll, create, mixed, failover, call, task)"
            )),
        }
    }
}

impl Scenario {
    /// The scenario's name as it is parsed and shown in reports (`poll`, `create`, `mixed`,
    /// `failover`).
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Poll => "poll",
            Scenario::Create => "create",
            Scenario::Mixed => "mixed",
            Scenario::Failover => "failover",
            Scenario::Call => "call",
            Scenario::Task => "task",
        }
    }
}

/// The settings of one run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// MCP endpoints (`http://host:port/mcp`); sessions are spread over them in turn.
    pub urls: Vec<String>,
    /// A name for the target in reports (`taskmesh`, `ceiling`, `fastmcp`, ...).
    pub target: String,
    /// Bearer token sent with every request; `None` sends no `authorization` header.
    pub token: Option<String>,
    /// The scenario to run.
    pub scenario: Scenario,
    /// How long the measured part runs, counted after the sessions are open and the tasks the
    /// scenario needs are created.
    pub duration: Duration,
    /// MCP sessions to open (at least one), spread over `urls` in turn.
    pub sessions: usize,
    /// Closed-loop workers (at least one; `failover` runs at least one per shard). Tasks are
    /// prepared by as many workers, at most 64; the open loop is bounded by `max_in_flight`.
    pub concurrency: usize,
    /// Tasks created for `poll` and `failover`.
    pub tasks: usize,
    /// Open loop: requests per second; `None`: closed loop.
    pub rate: Option<f64>,
    /// Open loop: requests allowed in flight; one due beyond that counts as `dropped`.
    pub max_in_flight: usize,
    /// `seconds` argument of the `slow_compute` tasks the run creates.
    pub task_seconds: f64,
    /// `mixed`: share of tasks cancelled right after creation (0..1).
    pub cancel_share: f64,
    /// `mixed`: pause between polls of one task.
    pub poll_gap: Duration,
    /// `failover` and `remote_only`: the shard count of the cluster.
    pub shards: u32,
    /// `poll`: poll only tasks of shards that the first URL's node does not lead (read from
    /// its `GET /status`), so that every poll takes the gateway -> leader gRPC hop.
    pub remote_only: bool,
    /// `failover`: the process to kill, and when.
    pub kill_pid: Option<i32>,
    /// `failover`: time from the start of the measured part until `kill_pid` gets SIGKILL;
    /// shard gaps are counted from then on.
    pub kill_after: Duration,
    /// `call` and `task`: the tool called, and its arguments.
    pub tool: String,
    /// `call` and `task`: the arguments (a JSON object).
    pub arguments: Value,
    /// `poll` and `failover`: the tool of the tasks created to poll, called with
    /// `{"seconds": task_seconds}` (`slow_compute`, or an upstream's tool that takes the same).
    pub poll_tool: String,
    /// Speak protocol 2026-07-28 with the tasks extension (stateless) instead of 2025-11-25
    /// sessions.
    pub stateless: bool,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            urls: vec!["http://127.0.0.1:8080/mcp".into()],
            target: "taskmesh".into(),
            token: None,
            scenario: Scenario::Poll,
            duration: Duration::from_secs(10),
            sessions: 16,
            concurrency: 64,
            tasks: 1000,
            rate: None,
            max_in_flight: 10_000,
            task_seconds: 3600.0,
            cancel_share: 0.1,
            poll_gap: Duration::from_millis(20),
            shards: 32,
            remote_only: false,
            kill_pid: None,
            kill_after: Duration::from_secs(5),
            tool: "greet".into(),
            arguments: json!({"name": "bench"}),
            poll_tool: "slow_compute".into(),
            stateless: false,
        }
    }
}

/// State shared by workers off the hot path (closed-loop workers keep their own stats and
/// merge them at the end).
mod shared {
    use std::sync::Mutex;

    /// A value behind a mutex that is taken rarely (setup, merge, per-shard failover records).
    pub struct Shared<T>(pub Mutex<T>);

    impl<T> Shared<T> {
        pub fn new(v: T) -> Self {
            Self(Mutex::new(v))
        }
        pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
            let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut g)
        }
    }
}

async fn open_sessions(cfg: &RunConfig) -> anyhow::Result<Vec<Session>> {
    anyhow::ensure!(!cfg.urls.is_empty(), "no target URL");
    let opens = (0..cfg.sessions.max(1)).map(|i| {
        let url = cfg.urls[i % cfg.urls.len()].clone();
        let token = cfg.token.clone();
        let stateless = cfg.stateless;
        async move {
            if stateless {
                Session::open_stateless(&url, token.as_deref()).await
            } else {
                Session::open(&url, token.as_deref()).await
            }
        }
    });
    let mut sessions = Vec::new();
    for s in futures::future::join_all(opens).await {
        sessions.push(s.map_err(|f| anyhow::anyhow!("opening a session: {f}"))?);
    }
    Ok(sessions)
}

/// `tools/call` of `slow_compute` as a task; the new task id.
pub async fn create_task(s: &Session, seconds: f64) -> Result<String, Failure> {
    create_task_of(s, "slow_compute", seconds).await
}

/// `tools/call` of `tool` with `{"seconds": seconds}` as a task; the new task id.
pub async fn create_task_of(s: &Session, tool: &str, seconds: f64) -> Result<String, Failure> {
    let r = s
        .call(
            "tools/call",
            json!({"name": tool, "arguments": {"seconds": seconds}, "task": {"ttl": 3_600_000}}),
        )
        .await?;
    // 2025-11-25 nests the task; 2026-07-28 answers it flat.
    let task = r.get("task").unwrap_or(&r);
    match (task["taskId"].as_str(), task["status"].as_str()) {
        (Some(id), Some("working" | "completed")) => Ok(id.to_string()),
        _ => Err(Failure::BadBody("create")),
    }
}

/// `tasks/get`; checks that the answer is about `id` and, when given, in status `want`; the
/// status.
pub async fn get_task(s: &Session, id: &str, want: Option<&str>) -> Result<String, Failure> {
    let status = s.task_status(id).await?;
    match want {
        Some(w) if status != w => Err(Failure::BadBody("status")),
        _ => Ok(status),
    }
}

/// Run one scenario and report what it measured.
pub async fn run(cfg: &RunConfig) -> anyhow::Result<Report> {
    let sessions = Arc::new(open_sessions(cfg).await?);
    let ids = match cfg.scenario {
        Scenario::Poll | Scenario::Failover => {
            let mut ids = prepare_tasks(cfg, &sessions).await?;
            if cfg.remote_only {
                let led = led_shards(cfg).await?;
                ids.retain(|id| !led.contains(&taskmesh_task::shard_of(id, cfg.shards)));
                anyhow::ensure!(
                    !ids.is_empty(),
                    "every task landed on a shard this gateway leads; create more (--tasks)"
                );
            }
            Arc::new(ids)
        }
        _ => Arc::new(Vec::new()),
    };
    let started = Instant::now();
    let deadline = started + cfg.duration;
    let (stats, gaps) = match (cfg.scenario, cfg.rate) {
        (Scenario::Poll, Some(rate)) => (
            open_loop_polls(cfg, &sessions, &ids, rate, deadline).await,
            None,
        ),
        (Scenario::Failover, _) => {
            let (s, g) = failover(cfg, &sessions, &ids, started, deadline).await;
            (s, Some(g))
        }
        _ => (closed_loop(cfg, &sessions, &ids, deadline).await, None),
    };
    let elapsed = started.elapsed();
    let mut report = Report::new(
        cfg.scenario.name(),
        &cfg.target,
        cfg.rate.filter(|_| cfg.scenario == Scenario::Poll),
        cfg.concurrency,
        sessions.len(),
        elapsed,
        &stats,
    );
    report.unavailable_ms_by_shard = gaps;
    Ok(report)
}

/// The shards the node behind the first URL leads, from its `GET /status`.
async fn led_shards(cfg: &RunConfig) -> anyhow::Result<Vec<u32>> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let url = cfg.urls[0].replace("/mcp", "/status");
    let mut req = http.get(&url);
    if let Some(t) = &cfg.token {
        req = req.bearer_auth(t);
    }
    let status: Value = req.send().await?.error_for_status()?.json().await?;
    Ok(status["shards"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["isLeader"] == true)
        .filter_map(|s| s["shard"].as_u64().map(|v| v as u32))
        .collect())
}

/// Create the tasks that `poll` and `failover` read (in parallel, over all sessions).
async fn prepare_tasks(
    cfg: &RunConfig,
    sessions: &Arc<Vec<Session>>,
) -> anyhow::Result<Vec<String>> {
    let next = Arc::new(AtomicUsize::new(0));
    let workers = (0..cfg.concurrency.clamp(1, 64)).map(|w| {
        let (sessions, next) = (sessions.clone(), next.clone());
        let (n, secs, tool) = (cfg.tasks.max(1), cfg.task_seconds, cfg.poll_tool.clone());
        async move {
            let mut ids = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < n {
                let s = &sessions[w % sessions.len()];
                ids.push(create_task_of(s, &tool, secs).await?);
            }
            Ok::<_, Failure>(ids)
        }
    });
    let mut ids = Vec::new();
    for r in futures::future::join_all(workers).await {
        ids.extend(r.map_err(|f| anyhow::anyhow!("creating the tasks to poll: {f}"))?);
    }
    Ok(ids)
}

/// Wait for the workers and add up what they counted (a worker that panicked is counted too).
async fn merge_workers(workers: impl IntoIterator<Item = tokio::task::JoinHandle<Stats>>) -> Stats {
    let mut total = Stats::default();
    for w in futures::future::join_all(workers).await {
        match w {
            Ok(s) => total.merge(&s),
            Err(_) => *total.failures.entry("worker_panicked".into()).or_default() += 1,
        }
    }
    total
}

/// A tiny xorshift generator (the share of cancels in `mixed`); seeded per worker.
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

async fn closed_loop(
    cfg: &RunConfig,
    sessions: &Arc<Vec<Session>>,
    ids: &Arc<Vec<String>>,
    deadline: Instant,
) -> Stats {
    let workers = (0..cfg.concurrency.max(1)).map(|w| {
        let (sessions, ids, cfg) = (sessions.clone(), ids.clone(), cfg.clone());
        tokio::spawn(async move {
            let mut stats = Stats::default();
            let s = &sessions[w % sessions.len()];
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (w as u64 + 1));
            let mut k = w;
            while Instant::now() < deadline {
                let t0 = Instant::now();
                let r = match cfg.scenario {
                    Scenario::Poll | Scenario::Failover => {
                        k = (k + cfg.concurrency) % ids.len();
                        get_task(s, &ids[k], Some("working")).await.map(|_| ())
                    }
                    Scenario::Create => create_task(s, cfg.task_seconds).await.map(|_| ()),
                    Scenario::Mixed => lifecycle(s, &cfg, &mut rng).await,
                    Scenario::Call => plain_call(s, &cfg).await,
                    Scenario::Task => task_call(s, &cfg).await,
                };
                match r {
                    Ok(()) => stats.success(t0.elapsed()),
                    Err(f) => stats.failure(&f),
                }
            }
            stats
        })
    });
    merge_workers(workers).await
}

/// A `CallToolResult` that is not a tool error.
fn tool_result_ok(r: &Value) -> Result<(), Failure> {
    if r["content"].is_array() && r["isError"] != true {
        Ok(())
    } else {
        Err(Failure::BadBody("result"))
    }
}

/// `call`: one plain `tools/call`.
async fn plain_call(s: &Session, cfg: &RunConfig) -> Result<(), Failure> {
    let r = s
        .call(
            "tools/call",
            json!({"name": cfg.tool, "arguments": cfg.arguments}),
        )
        .await?;
    tool_result_ok(&r)
}

/// `task`: one task-augmented `tools/call`, then its result.
async fn task_call(s: &Session, cfg: &RunConfig) -> Result<(), Failure> {
    let r = s
        .call(
            "tools/call",
            json!({"name": cfg.tool, "arguments": cfg.arguments, "task": {"ttl": 600_000}}),
        )
        .await?;
    let Some(id) = r["task"]["taskId"].as_str() else {
        return Err(Failure::BadBody("create"));
    };
    let r = s.call("tasks/result", json!({"taskId": id})).await?;
    tool_result_ok(&r)?;
    if r["_meta"]["io.modelcontextprotocol/related-task"]["taskId"] != id {
        return Err(Failure::BadBody("related_task"));
    }
    Ok(())
}

/// `mixed`: one task from creation to its result (or its cancellation).
async fn lifecycle(s: &Session, cfg: &RunConfig, rng: &mut Rng) -> Result<(), Failure> {
    let id = create_task(s, cfg.task_seconds).await?;
    if rng.unit() < cfg.cancel_share {
        match s.call("tasks/cancel", json!({"taskId": id})).await {
            Ok(t) if t["status"] == "cancelled" && t["taskId"] == id.as_str() => return Ok(()),
            Ok(_) => return Err(Failure::BadBody("cancel")),
            // Finished before the cancel arrived: carry on like an uncancelled task.
            Err(Failure::Rpc(-32602)) => {}
            Err(f) => return Err(f),
        }
    }
    loop {
        let t = get_task(s, &id, None).await?;
        match t.as_str() {
            "completed" => break,
            "working" => tokio::time::sleep(cfg.poll_gap).await,
            _ => return Err(Failure::BadBody("status")),
        }
    }
    let r = s.call("tasks/result", json!({"taskId": id})).await?;
    let text = r["content"][0]["text"].as_str().unwrap_or("");
    if !text.contains("computed for") {
        return Err(Failure::BadBody("result"));
    }
    Ok(())
}

async fn open_loop_polls(
    cfg: &RunConfig,
    sessions: &Arc<Vec<Session>>,
    ids: &Arc<Vec<String>>,
    rate: f64,
    deadline: Instant,
) -> Stats {
    let shards: Arc<Vec<Shared<Stats>>> =
        Arc::new((0..64).map(|_| Shared::new(Stats::default())).collect());
    let in_flight = Arc::new(AtomicUsize::new(0));
    let interval = Duration::from_secs_f64(1.0 / rate.max(1e-3));
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    let mut dropped = 0u64;
    for i in 0u64.. {
        let due = start + interval.mul_f64(i as f64);
        if due.into_std() >= deadline {
            break;
        }
        tokio::time::sleep_until(due).await;
        if in_flight.load(Ordering::Relaxed) >= cfg.max_in_flight {
            dropped += 1;
            continue;
        }
        in_flight.fetch_add(1, Ordering::Relaxed);
        let (sessions, ids, shards, in_flight) = (
            sessions.clone(),
            ids.clone(),
            shards.clone(),
            in_flight.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let k = i as usize;
            let s = &sessions[k % sessions.len()];
            let r = get_task(s, &ids[k % ids.len()], Some("working")).await;
            let latency = due.elapsed();
            shards[k % shards.len()].with(|st| match r {
                Ok(_) => st.success(latency),
                Err(f) => st.failure(&f),
            });
            in_flight.fetch_sub(1, Ordering::Relaxed);
        }));
        if tasks.len() >= 4096 {
            tasks.retain(|t| !t.is_finished());
        }
    }
    futures::future::join_all(tasks).await;
    let mut total = Stats::default();
    for s in shards.iter() {
        s.with(|st| total.merge(st));
    }
    if dropped > 0 {
        total
            .failures
            .insert("dropped_in_flight_limit".into(), dropped);
    }
    total
}

async fn failover(
    cfg: &RunConfig,
    sessions: &Arc<Vec<Session>>,
    ids: &Arc<Vec<String>>,
    started: Instant,
    deadline: Instant,
) -> (Stats, BTreeMap<u32, f64>) {
    // Per shard: (last successful answer, longest gap after the kill).
    let kill_at = started + cfg.kill_after;
    let shards = cfg.shards.max(1);
    let last: Arc<Vec<Shared<(Instant, Duration)>>> = Arc::new(
        (0..shards)
            .map(|_| Shared::new((started, Duration::ZERO)))
            .collect(),
    );
    if let Some(pid) = cfg.kill_pid {
        let wait = cfg.kill_after;
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            // SAFETY: kill(2) with a pid and a signal number has no memory effects.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        });
    }
    // Workers are bound to shards (at least one each), so that polls stuck on a shard without
    // a leader hold only that shard's workers: every shard's gap is its own.
    let mut by_shard: Vec<Vec<String>> = vec![Vec::new(); shards as usize];
    for id in ids.iter() {
        by_shard[taskmesh_task::shard_of(id, shards) as usize].push(id.clone());
    }
    let by_shard = Arc::new(by_shard);
    let workers = (0..cfg.concurrency.max(shards as usize)).map(|w| {
        let (sessions, by_shard, last) = (sessions.clone(), by_shard.clone(), last.clone());
        tokio::spawn(async move {
            let mut stats = Stats::default();
            let s = &sessions[w % sessions.len()];
            let mine = &by_shard[w % by_shard.len()];
            let mut k = w / by_shard.len();
            while !mine.is_empty() && Instant::now() < deadline {
                k = (k + 1) % mine.len();
                let id = &mine[k];
                let t0 = Instant::now();
                match get_task(s, id, Some("working")).await {
                    Ok(_) => {
                        stats.success(t0.elapsed());
                        let now = Instant::now();
                        let shard = taskmesh_task::shard_of(id, shards) as usize;
                        last[shard].with(|(at, gap)| {
                            if now > kill_at {
                                *gap = (*gap).max(now - *at);
                            }
                            *at = now;
                        });
                    }
                    Err(f) => stats.failure(&f),
                }
            }
            stats
        })
    });
    let total = merge_workers(workers).await;
    let end = Instant::now();
    let gaps = last
        .iter()
        .enumerate()
        .filter(|(shard, _)| !by_shard[*shard].is_empty())
        .map(|(shard, l)| {
            l.with(|(at, gap)| {
                // A shard that never answered again is unavailable until the end.
                let open = if *at < kill_at {
                    end - kill_at
                } else {
                    Duration::ZERO
                };
                (shard as u32, (*gap).max(open).as_secs_f64() * 1000.0)
            })
        })
        .collect();
    (total, gaps)
}
