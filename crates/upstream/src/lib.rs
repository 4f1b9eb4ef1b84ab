//! Upstream MCP servers as tool backends.
//!
//! An [`Upstream`] is one configured server ([`UpstreamConfig`]): [`Upstream::discover`] lists
//! its tools (every page) and makes each one served a [`Tool`] of this node, whose `call`
//! makes the plain `tools/call` upstream and relays what the upstream sends about it: its
//! progress to the task's progress token, its `elicitation/create` and
//! `sampling/createMessage` to the task's client (the task goes `input_required` as for a
//! built-in tool) with the client's answer sent back, its log messages to the client (at the
//! level its session set with `logging/setLevel`).
//! The upstream's result is the tool's result, `isError` included; a JSON-RPC error it
//! answers with is the outcome exactly. A cancelled task or a call past its timeout sends
//! `notifications/cancelled` upstream. A call that cannot reach the upstream, or whose
//! connection ends before the answer, fails with a message naming the upstream and the cause.
//!
//! An upstream that runs calls as tasks itself (it declares `tasks.requests.tools.call`) gets
//! task-augmented calls of its tools that accept them: the upstream task's id is recorded with
//! the task ([`taskmesh_tools::ToolIo::record_upstream_task`]) and the task followed to its
//! result, its requests relayed the same way. A later execution of the task (a failover)
//! follows the recorded upstream task instead of calling again; a task cancelled, or a call past
//! its timeout, sends `tasks/cancel` for it, while an execution handed over leaves it running.
//!
//! Connections: one Streamable HTTP session per upstream, shared by its calls and made again
//! when it ends; a stdio upstream gets up to `processes` processes, each carrying one call at
//! a time and reused, a process that ended being replaced. At most `max_concurrent_calls`
//! calls run at once per upstream; more wait.
//!
//! The upstream, its connections and its tool list are here (its settings in `config.rs`);
//! each tool it lists is an [`UpstreamTool`] (`tool.rs`), whose calls are made one attempt at a
//! time in `attempt.rs`.

mod attempt;
pub mod config;
mod tool;

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::json;
use taskmesh_client::{Client, ClientError, Endpoint, HeaderName, HttpSpec, Options, StdioSpec};
use taskmesh_mcp::TaskSupport;
use taskmesh_tools::{ResumePolicy, Tool, ToolRegistry, ToolSpec};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

pub use config::{validate_all, ConfigError, ToolFilter, ToolOverride, UpstreamConfig};
pub use tool::UpstreamTool;

/// One upstream server and its connections.
pub struct Upstream {
    cfg: UpstreamConfig,
    endpoint: Endpoint,
    opts: Options,
    calls: Arc<Semaphore>,
    pool: Pool,
    /// Bumped when the upstream should be listed again: one of its connections said its tools
    /// changed, or a call lost its connection.
    relist: Arc<watch::Sender<u64>>,
    /// `forward_principal_header`, parsed once.
    principal_header: Option<HeaderName>,
}

enum Pool {
    /// The shared session, once made.
    Http(tokio::sync::Mutex<Option<Client>>),
    /// Idle processes, and a permit per process that may run.
    Stdio {
        idle: Mutex<Vec<Client>>,
        slots: Arc<Semaphore>,
    },
}

/// A connection lent to one call; a stdio process goes back to the idle ones when dropped.
struct Lease<'a> {
    client: Client,
    upstream: &'a Upstream,
    _slot: Option<OwnedSemaphorePermit>,
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Pool::Stdio { idle, .. } = &self.upstream.pool {
            if !self.client.is_closed() {
                idle.lock().push(self.client.clone());
            }
        }
    }
}

impl Upstream {
    /// An upstream from its (validated) settings; nothing is connected yet.
    pub fn new(cfg: UpstreamConfig) -> Arc<Self> {
        let endpoint = match (&cfg.url, &cfg.command) {
            (Some(url), _) => Endpoint::Http(HttpSpec {
                url: url.clone(),
                headers: cfg
                    .headers
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                oauth: None,
            }),
            (None, command) => Endpoint::Stdio(StdioSpec {
                command: command.clone().unwrap_or_default(),
                args: cfg.args.clone(),
                env: cfg.env.clone(),
                cwd: cfg.cwd.clone(),
            }),
        };
        let opts = Options {
            name: cfg.name.clone(),
            protocol_version: cfg.protocol_version.clone(),
            max_message_bytes: cfg.max_message_bytes,
            connect_timeout: Duration::from_millis(cfg.connect_timeout_ms),
            // An upstream's requests are relayed to taskmesh's own client as they come.
            run_requests_as_tasks: false,
        };
        let pool = match &endpoint {
            Endpoint::Http(_) => Pool::Http(tokio::sync::Mutex::new(None)),
            Endpoint::Stdio(_) => Pool::Stdio {
                idle: Mutex::new(Vec::new()),
                slots: Arc::new(Semaphore::new(cfg.processes)),
            },
        };
        let principal_header = cfg
            .forward_principal_header
            .as_deref()
            .and_then(|h| HeaderName::try_from(h).ok());
        Arc::new(Self {
            principal_header,
            calls: Arc::new(Semaphore::new(cfg.max_concurrent_calls)),
            cfg,
            endpoint,
            opts,
            pool,
            relist: Arc::new(watch::Sender::new(0)),
        })
    }

    /// The upstream's name.
    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    /// A new connection, whose `notifications/tools/list_changed` make the upstream be listed
    /// again.
    async fn connect(&self) -> Result<Client, ClientError> {
        let c = Client::connect(&self.endpoint, &self.opts).await?;
        let mut changed = c.tools_changed();
        let mut closed = c.closed();
        let relist = self.relist.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    r = changed.changed() => match r {
                        Ok(()) => relist.send_modify(|n| *n += 1),
                        Err(_) => break,
                    },
                    _ = closed.wait_for(Option::is_some) => break,
                }
            }
        });
        Ok(c)
    }

    /// A call lost its connection: list the upstream again (which tells whether it is still
    /// there).
    fn suspect(&self) {
        self.relist.send_modify(|n| *n += 1);
    }

    async fn lease(&self) -> Result<Lease<'_>, ClientError> {
        match &self.pool {
            Pool::Http(shared) => {
                let mut shared = shared.lock().await;
                if let Some(c) = shared.as_ref().filter(|c| !c.is_closed()) {
                    return Ok(Lease {
                        client: c.clone(),
                        upstream: self,
                        _slot: None,
                    });
                }
                let c = self.connect().await?;
                *shared = Some(c.clone());
                Ok(Lease {
                    client: c,
                    upstream: self,
                    _slot: None,
                })
            }
            Pool::Stdio { idle, slots } => {
                let slot = slots
                    .clone()
                    .acquire_owned()
                    .await
                    .map_err(|_| ClientError::Closed("the upstream is shut down".into()))?;
                let reused = {
                    let mut idle = idle.lock();
                    idle.retain(|c| !c.is_closed());
                    idle.pop()
                };
                let client = match reused {
                    Some(c) => c,
                    None => self.connect().await?,
                };
                Ok(Lease {
                    client,
                    upstream: self,
                    _slot: Some(slot),
                })
            }
        }
    }

    /// The upstream's tools that this node serves (named with the prefix, with their settings),
    /// from every page of its `tools/list`.
    pub async fn discover(self: &Arc<Self>) -> Result<Vec<Arc<dyn Tool>>, ClientError> {
        let lease = self.lease().await?;
        let listed = lease.client.list_tools().await?;
        // It runs calls as tasks itself (2025-11-25: `tasks.requests.tools.call`).
        let runs_tasks =
            lease.client.server().capabilities["tasks"]["requests"]["tools"]["call"].is_object();
        drop(lease);
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        for entry in listed {
            let Some(name) = entry["name"].as_str() else {
                continue;
            };
            if !self.cfg.tools.serves(name) {
                continue;
            }
            let o = self.cfg.overrides.get(name).cloned().unwrap_or_default();
            let spec = ToolSpec {
                name: format!("{}{name}", self.cfg.prefix),
                title: entry["title"].as_str().map(str::to_string),
                description: entry["description"].as_str().map(str::to_string),
                input_schema: entry
                    .get("inputSchema")
                    .filter(|s| s.is_object())
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object"})),
                task_support: o
                    .task_support
                    .as_deref()
                    .and_then(config::task_support_of)
                    .unwrap_or(TaskSupport::Optional),
                resume: o
                    .resume
                    .as_deref()
                    .and_then(config::resume_of)
                    .unwrap_or(ResumePolicy::Fail),
                output_schema: entry.get("outputSchema").filter(|s| s.is_object()).cloned(),
                annotations: entry.get("annotations").filter(|s| s.is_object()).cloned(),
            };
            let as_task = runs_tasks
                && matches!(
                    entry["execution"]["taskSupport"].as_str(),
                    Some("optional" | "required")
                );
            tools.push(Arc::new(UpstreamTool {
                upstream: self.clone(),
                remote: name.to_string(),
                as_task,
                timeout: Duration::from_millis(o.timeout_ms.unwrap_or(self.cfg.timeout_ms)),
                spec,
            }));
        }
        Ok(tools)
    }

    fn transport(&self) -> &'static str {
        match self.endpoint {
            Endpoint::Http(_) => "http",
            Endpoint::Stdio(_) => "stdio",
        }
    }

    /// List the upstream's tools once and serve them in `registry` (withdrawn when the listing
    /// fails); reported in `GET /status`. How many are served, or why none are.
    pub async fn refresh(
        self: &Arc<Self>,
        registry: &ToolRegistry,
        failures: u32,
    ) -> Result<usize, ClientError> {
        match self.discover().await {
            Ok(tools) => {
                let offered = tools.len();
                let left_out = registry.set_source(self.name(), tools);
                for name in &left_out {
                    tracing::warn!(upstream = %self.name(), tool = %name,
                        "an upstream tool has the name of a tool already served; left out (set a prefix)");
                }
                let served = offered - left_out.len();
                registry.report_source(
                    self.name(),
                    json!({"name": self.name(), "transport": self.transport(), "state": "serving",
                           "tools": served}),
                );
                Ok(served)
            }
            Err(e) => {
                registry.set_source(self.name(), Vec::new());
                registry.report_source(
                    self.name(),
                    json!({"name": self.name(), "transport": self.transport(),
                           "state": "unreachable", "tools": 0, "failedAttempts": failures + 1,
                           "lastError": e.to_string()}),
                );
                Err(e)
            }
        }
    }

    /// The wait before attempt `failures + 1` after `failures` failed ones.
    fn backoff(&self, failures: u32) -> Duration {
        let ms = self
            .cfg
            .retry_initial_ms
            .saturating_mul(1u64 << failures.saturating_sub(1).min(32))
            .min(self.cfg.retry_max_ms);
        Duration::from_millis(ms)
    }

    /// Keep `registry` serving the upstream's tools until `stop`: list them again when the
    /// upstream says they changed or a call lost its connection, and while it cannot be
    /// listed retry with backoff (its tools absent meanwhile). `listed` is whether the first
    /// listing ([`Upstream::refresh`]) succeeded.
    pub async fn supervise(
        self: Arc<Self>,
        registry: Arc<ToolRegistry>,
        listed: bool,
        stop: CancellationToken,
    ) {
        let mut relist = self.relist.subscribe();
        let mut failures = u32::from(!listed);
        loop {
            if failures == 0 {
                tokio::select! {
                    r = relist.changed() => if r.is_err() { return },
                    _ = stop.cancelled() => return,
                }
            } else {
                tokio::select! {
                    _ = tokio::time::sleep(self.backoff(failures)) => {}
                    _ = stop.cancelled() => return,
                }
            }
            relist.borrow_and_update();
            match self.refresh(&registry, failures).await {
                Ok(served) => {
                    if failures > 0 {
                        tracing::info!(upstream = %self.name(), tools = served, after = failures,
                            "upstream reached; its tools are served");
                    } else {
                        tracing::info!(upstream = %self.name(), tools = served, "upstream tools listed again");
                    }
                    failures = 0;
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    tracing::warn!(upstream = %self.name(), error = %e, failures,
                        retry_in_ms = self.backoff(failures).as_millis() as u64,
                        "upstream not reached; its tools are absent");
                }
            }
        }
    }

    /// Stop every connection (processes are stopped, the HTTP session ended).
    pub async fn shutdown(&self) {
        match &self.pool {
            Pool::Http(shared) => {
                if let Some(c) = shared.lock().await.take() {
                    c.close().await;
                }
            }
            Pool::Stdio { idle, slots } => {
                slots.close();
                let idle: Vec<Client> = idle.lock().drain(..).collect();
                for c in idle {
                    c.close().await;
                }
            }
        }
    }
}
