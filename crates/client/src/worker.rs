//! A worker of taskmesh's worker API, over its JSON mirror (`POST /worker/v1/<call>`,
//! docs/workers.md): register the tools served, poll for leased tasks, renew each lease with
//! heartbeats while the work runs, ask the task's client for input, complete.
//!
//! [`Worker`] has the calls one by one; [`Worker::serve`] is the loop most workers want: it
//! polls for as many tasks as it has free places, runs the handler of each in its own tokio
//! task with a [`Job`] (progress, input requests, cancellation), heartbeats every third of the
//! lease in the background, and completes with what the handler returned. A task cancelled by
//! its client cancels the job's token and its completion is not sent.
//!
//! ```no_run
//! # async fn demo() -> Result<(), taskmesh_client::worker::WorkerError> {
//! use serde_json::json;
//! use taskmesh_client::worker::{Declaration, Worker};
//!
//! let tools = vec![Declaration::new("echo", json!({"type": "object"}))];
//! let worker = Worker::register("http://127.0.0.1:8080", "worker-token", tools, 4, "demo").await?;
//! worker
//!     .serve(|job| async move { Ok(json!({"content": [{"type": "text", "text": job.arguments.to_string()}]})) })
//!     .await
//! # }
//! ```

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use taskmesh_mcp::jsonrpc::ErrorObject;
pub use tokio_util::sync::CancellationToken;

/// Why a worker call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WorkerError {
    /// The server refused the call: the HTTP status, the gRPC code name (`NOT_FOUND`,
    /// `FAILED_PRECONDITION`, ...) and its message. Nothing changed.
    #[error("refused ({status} {code}): {message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The gRPC code's name.
        code: String,
        /// What the server said.
        message: String,
    },
    /// The call did not reach the server, or its answer did not arrive whole.
    #[error("transport: {0}")]
    Transport(String),
}

impl WorkerError {
    /// The refusal's code, if the server refused.
    pub fn code(&self) -> Option<&str> {
        match self {
            WorkerError::Refused { code, .. } => Some(code),
            WorkerError::Transport(_) => None,
        }
    }
}

/// A tool a worker serves, as declared at registration.
#[derive(Debug, Clone)]
pub struct Declaration {
    /// Its name.
    pub name: String,
    /// Its display name.
    pub title: Option<String>,
    /// What it does.
    pub description: Option<String>,
    /// JSON Schema of its arguments (an object schema).
    pub input_schema: Value,
    /// JSON Schema of its structured result.
    pub output_schema: Option<Value>,
    /// `optional` (default), `required` or `forbidden`.
    pub task_support: &'static str,
    /// `rerun` (default) or `fail`.
    pub resume: &'static str,
}

impl Declaration {
    /// A tool of `name` taking arguments of `input_schema`, optional as a task, rerun when its
    /// worker is lost.
    pub fn new(name: impl Into<String>, input_schema: Value) -> Self {
        Self {
            name: name.into(),
            title: None,
            description: None,
            input_schema,
            output_schema: None,
            task_support: "optional",
            resume: "rerun",
        }
    }

    /// The same tool with resume policy `fail`.
    pub fn failing_when_lost(mut self) -> Self {
        self.resume = "fail";
        self
    }

    fn to_json(&self) -> Value {
        let mut v = json!({
            "name": self.name,
            "inputSchema": self.input_schema,
            "taskSupport": self.task_support,
            "resume": self.resume,
        });
        if let Some(t) = &self.title {
            v["title"] = json!(t);
        }
        if let Some(d) = &self.description {
            v["description"] = json!(d);
        }
        if let Some(o) = &self.output_schema {
            v["outputSchema"] = o.clone();
        }
        v
    }
}

/// A task leased to this worker.
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    /// The task's id.
    pub task_id: String,
    /// The tool called.
    pub tool: String,
    /// The call's arguments.
    pub arguments: Value,
    /// The principal that created the task.
    pub principal: String,
    /// Which attempt, from 1.
    pub attempt: u32,
    /// The lease's token.
    pub token: String,
    /// When the lease runs out unless renewed, in ms since the Unix epoch.
    pub deadline_ms: u64,
}

/// A heartbeat's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Beat {
    /// The lease's new deadline.
    pub deadline_ms: u64,
    /// The task was cancelled: stop.
    pub cancelled: bool,
}

/// A registered worker: its registration and the HTTP client it calls with.
#[derive(Clone)]
pub struct Worker {
    http: reqwest::Client,
    base: String,
    token: String,
    /// The registration's id.
    pub worker_id: String,
    /// How long a lease lasts without a heartbeat.
    pub lease: Duration,
    /// The longest wait a poll is granted.
    pub poll_wait_max: Duration,
    max_concurrent: u32,
}

/// The server's base URL from `url`: a trailing `/mcp` and `/` are dropped.
fn base_of(url: &str) -> String {
    let url = url.trim_end_matches('/');
    url.strip_suffix("/mcp").unwrap_or(url).to_string()
}

async fn post(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    call: &str,
    body: &Value,
) -> Result<Value, WorkerError> {
    let r = http
        .post(format!("{base}/worker/v1/{call}"))
        .bearer_auth(token)
        .json(body)
        .send()
        .await
        .map_err(|e| WorkerError::Transport(e.to_string()))?;
    let status = r.status().as_u16();
    let v: Value = r
        .json()
        .await
        .map_err(|e| WorkerError::Transport(format!("an answer that is not JSON: {e}")))?;
    if status == 200 {
        return Ok(v);
    }
    Err(WorkerError::Refused {
        status,
        code: v["error"]["code"].as_str().unwrap_or_default().to_string(),
        message: v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    })
}

fn lease_of(v: &Value) -> Lease {
    Lease {
        task_id: v["taskId"].as_str().unwrap_or_default().to_string(),
        tool: v["tool"].as_str().unwrap_or_default().to_string(),
        arguments: v["arguments"].clone(),
        principal: v["principal"].as_str().unwrap_or_default().to_string(),
        attempt: v["attempt"].as_u64().unwrap_or(0) as u32,
        token: v["token"].as_str().unwrap_or_default().to_string(),
        deadline_ms: v["deadlineMs"].as_u64().unwrap_or(0),
    }
}

impl Worker {
    /// Register `tools` at the server at `url` with the worker credential `token`, to hold up
    /// to `max_concurrent` leases at once.
    pub async fn register(
        url: &str,
        token: &str,
        tools: Vec<Declaration>,
        max_concurrent: u32,
        label: &str,
    ) -> Result<Worker, WorkerError> {
        let http = reqwest::Client::new();
        let base = base_of(url);
        let body = json!({
            "tools": tools.iter().map(Declaration::to_json).collect::<Vec<_>>(),
            "maxConcurrentTasks": max_concurrent,
            "label": label,
        });
        let a = post(&http, &base, token, "register", &body).await?;
        Ok(Worker {
            http,
            base,
            token: token.to_string(),
            worker_id: a["workerId"].as_str().unwrap_or_default().to_string(),
            lease: Duration::from_millis(a["leaseMs"].as_u64().unwrap_or(30_000)),
            poll_wait_max: Duration::from_millis(a["pollWaitMaxMs"].as_u64().unwrap_or(30_000)),
            max_concurrent: max_concurrent.max(1),
        })
    }

    /// The same worker talking to the node at `url` instead: after its node went away, its
    /// leases are renewed and completed through another (its registration is the old node's;
    /// [`Worker::register`] makes one on the new node for polls).
    pub fn via(&self, url: &str) -> Worker {
        Worker {
            base: base_of(url),
            ..self.clone()
        }
    }

    async fn call(&self, call: &str, body: &Value) -> Result<Value, WorkerError> {
        post(&self.http, &self.base, &self.token, call, body).await
    }

    /// Wait up to `wait` for tasks and lease up to `max` of them.
    pub async fn poll(&self, max: u32, wait: Duration) -> Result<Vec<Lease>, WorkerError> {
        let body = json!({
            "workerId": self.worker_id,
            "maxTasks": max,
            "waitMs": wait.as_millis() as u64,
        });
        let a = self.call("poll", &body).await?;
        Ok(a["leases"]
            .as_array()
            .map(|l| l.iter().map(lease_of).collect())
            .unwrap_or_default())
    }

    /// Renew `lease`, relaying `progress` (progress, total, message) and setting the task's
    /// status message when given.
    pub async fn heartbeat(
        &self,
        lease: &Lease,
        progress: Option<(f64, Option<f64>, Option<&str>)>,
        status_message: Option<&str>,
    ) -> Result<Beat, WorkerError> {
        let mut body = json!({"taskId": lease.task_id, "token": lease.token});
        if let Some((p, total, message)) = progress {
            body["progress"] = json!(p);
            if let Some(t) = total {
                body["total"] = json!(t);
            }
            if let Some(m) = message {
                body["progressMessage"] = json!(m);
            }
        }
        if let Some(m) = status_message {
            body["statusMessage"] = json!(m);
        }
        let a = self.call("heartbeat", &body).await?;
        Ok(Beat {
            deadline_ms: a["deadlineMs"].as_u64().unwrap_or(0),
            cancelled: a["cancelled"].as_bool().unwrap_or(false),
        })
    }

    /// Ask the task's client `method` (`elicitation/create`, `sampling/createMessage`) with
    /// `params`, and wait for its answer: its result, or the JSON-RPC error it answered with.
    pub async fn request_input(
        &self,
        lease: &Lease,
        method: &str,
        params: Value,
    ) -> Result<Result<Value, ErrorObject>, WorkerError> {
        let body = json!({
            "taskId": lease.task_id, "token": lease.token, "method": method, "params": params,
        });
        let a = self.call("request_input", &body).await?;
        Ok(match a.get("result") {
            Some(r) => Ok(r.clone()),
            None => Err(ErrorObject {
                code: a["error"]["code"].as_i64().unwrap_or(0),
                message: a["error"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                data: a["error"].get("data").cloned(),
            }),
        })
    }

    /// Complete `lease`'s task with a `CallToolResult` or a JSON-RPC error: the status the
    /// task ended in.
    pub async fn complete(
        &self,
        lease: &Lease,
        result: Result<Value, ErrorObject>,
    ) -> Result<String, WorkerError> {
        let mut body = json!({"taskId": lease.task_id, "token": lease.token});
        match result {
            Ok(r) => body["result"] = r,
            Err(e) => {
                body["error"] = json!({"code": e.code, "message": e.message});
                if let Some(d) = e.data {
                    body["error"]["data"] = d;
                }
            }
        }
        let a = self.call("complete", &body).await?;
        Ok(a["status"].as_str().unwrap_or_default().to_string())
    }

    /// End the registration.
    pub async fn deregister(&self) -> Result<(), WorkerError> {
        self.call("deregister", &json!({"workerId": self.worker_id}))
            .await
            .map(|_| ())
    }

    /// Serve tasks with `handler` until the registration is refused (it was dropped: register
    /// again) or the server cannot be reached: the error says which.
    pub async fn serve<F, Fut>(&self, handler: F) -> Result<(), WorkerError>
    where
        F: Fn(Job) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ErrorObject>> + Send + 'static,
    {
        let handler = Arc::new(handler);
        let running = Arc::new(tokio::sync::Semaphore::new(self.max_concurrent as usize));
        loop {
            // Poll only with a free place, for as many tasks as there are free places.
            let Ok(first) = running.clone().acquire_owned().await else {
                return Ok(());
            };
            let free = running.available_permits() as u32 + 1;
            let mut places = vec![first];
            for lease in self.poll(free, self.poll_wait_max).await? {
                let permit = match places.pop() {
                    Some(p) => p,
                    None => match running.clone().acquire_owned().await {
                        Ok(p) => p,
                        Err(_) => return Ok(()),
                    },
                };
                let (worker, handler) = (self.clone(), handler.clone());
                tokio::spawn(async move {
                    worker.run_one(lease, handler.as_ref()).await;
                    drop(permit);
                });
            }
        }
    }

    /// Run one leased task: the handler beside the heartbeats, then the completion unless the
    /// task was cancelled meanwhile.
    async fn run_one<F, Fut>(&self, lease: Lease, handler: &F)
    where
        F: Fn(Job) -> Fut,
        Fut: Future<Output = Result<Value, ErrorObject>>,
    {
        let cancel = CancellationToken::new();
        let (progress_tx, mut progress_rx) = tokio::sync::mpsc::unbounded_channel();
        let job = Job {
            arguments: lease.arguments.clone(),
            lease: lease.clone(),
            worker: self.clone(),
            cancel: cancel.clone(),
            progress: progress_tx,
        };
        let work = handler(job);
        tokio::pin!(work);
        let every = self.lease / 3;
        let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        // Progress first: what the handler reported goes out before its result.
        let result = loop {
            tokio::select! {
                biased;
                Some((p, t, m)) = progress_rx.recv() => {
                    let m: Option<String> = m;
                    if stops(self.heartbeat(&lease, Some((p, t, m.as_deref())), None).await) {
                        cancel.cancel();
                    }
                }
                _ = beat.tick() => {
                    if stops(self.heartbeat(&lease, None, None).await) {
                        cancel.cancel();
                    }
                }
                r = &mut work => break r,
            }
        };
        // What it reported just before it returned.
        while let Ok((p, t, m)) = progress_rx.try_recv() {
            if cancel.is_cancelled() {
                break;
            }
            if stops(
                self.heartbeat(&lease, Some((p, t, m.as_deref())), None)
                    .await,
            ) {
                cancel.cancel();
            }
        }
        if !cancel.is_cancelled() {
            if let Err(e) = self.complete(&lease, result).await {
                tracing::warn!(task_id = %lease.task_id, error = %e, "completion refused");
            }
        }
    }
}

impl std::fmt::Debug for Worker {
    /// The registration, never the credential.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("base", &self.base)
            .field("worker_id", &self.worker_id)
            .finish_non_exhaustive()
    }
}

/// Whether a heartbeat's answer ends the job: the task was cancelled, or the lease is no longer
/// the task's (it ran out, or the task ended otherwise). A transport failure does not: the
/// next heartbeat tries again within the lease.
fn stops(beat: Result<Beat, WorkerError>) -> bool {
    match beat {
        Ok(b) => b.cancelled,
        Err(e) => e.code() == Some("FAILED_PRECONDITION"),
    }
}

/// What a handler gets for one leased task.
pub struct Job {
    /// The call's arguments.
    pub arguments: Value,
    /// The lease.
    pub lease: Lease,
    worker: Worker,
    /// Cancelled when the task is cancelled: the handler should return.
    pub cancel: CancellationToken,
    progress: tokio::sync::mpsc::UnboundedSender<(f64, Option<f64>, Option<String>)>,
}

impl Job {
    /// Report progress (relayed to the client with the next heartbeat, sent at once).
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let _ = self
            .progress
            .send((progress, total, message.map(str::to_string)));
    }

    /// Ask the client for input (`elicitation/create` with `params`) and wait for its answer.
    pub async fn elicit(&self, params: Value) -> Result<Result<Value, ErrorObject>, WorkerError> {
        self.worker
            .request_input(&self.lease, "elicitation/create", params)
            .await
    }
}
