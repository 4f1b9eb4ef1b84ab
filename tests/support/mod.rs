//! Test support: run a real `taskmesh serve` process on a free loopback port with its data in a
//! temporary directory, and talk to it over real HTTP like an MCP client.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Value};

pub const V: &str = "2025-11-25";

/// A running server process. Dropping it kills the process.
pub struct Server {
    child: Option<Child>,
    pub url: String,
    pub dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    config: String,
    /// `None`: `taskmesh serve`; `Some(bootstrap)`: `taskmesh node`.
    node: Option<bool>,
    /// Run inside this network namespace (`ip netns exec`), listening on `listen`.
    netns: Option<(String, String)>,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// Start `taskmesh serve` on a fresh data directory with the given TOML configuration.
    pub fn start(config: &str) -> Server {
        Self::launch(config, None)
    }

    /// Start one cluster node (`taskmesh node`, optionally with `--bootstrap`) with the given
    /// configuration and a fresh temporary data directory.
    pub fn start_node(config: &str, bootstrap: bool) -> Server {
        Self::launch(config, Some(bootstrap))
    }

    /// Start one cluster node inside network namespace `ns`, serving MCP on `listen`.
    pub fn start_node_in(ns: &str, listen: &str, config: &str, bootstrap: bool) -> Server {
        Self::launch_with(
            config,
            Some(bootstrap),
            Some((ns.to_string(), listen.to_string())),
        )
    }

    fn launch(config: &str, node: Option<bool>) -> Server {
        Self::launch_with(config, node, None)
    }

    fn launch_with(config: &str, node: Option<bool>, netns: Option<(String, String)>) -> Server {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_path_buf();
        let mut s = Server {
            child: None,
            url: String::new(),
            dir,
            _tmp: Some(tmp),
            config: config.to_string(),
            node,
            netns,
            log: Arc::new(Mutex::new(Vec::new())),
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let cfg_path = self.dir.join("taskmesh.toml");
        std::fs::write(&cfg_path, &self.config).expect("write config");
        let mut cmd = match &self.netns {
            None => Command::new(env!("CARGO_BIN_EXE_taskmesh")),
            Some((ns, _)) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns])
                    .arg(env!("CARGO_BIN_EXE_taskmesh"));
                c
            }
        };
        let listen = self
            .netns
            .as_ref()
            .map(|(_, l)| l.clone())
            .unwrap_or_else(|| "127.0.0.1:0".to_string());
        match self.node {
            None => {
                cmd.arg("serve");
            }
            Some(bootstrap) => {
                cmd.arg("node");
                if bootstrap {
                    cmd.arg("--bootstrap");
                }
                cmd.env("TASKMESH_DATA_DIR", self.dir.join("data"));
            }
        }
        if self.node.is_none() {
            cmd.arg("--data-dir").arg(self.dir.join("data"));
        }
        let mut child = cmd
            .arg("--listen")
            .arg(&listen)
            .arg("--config")
            .arg(&cfg_path)
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info,openraft=warn")
            .env_remove("TASKMESH_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn taskmesh");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        let log = self.log.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(i) = line.find("listening on http://") {
                    let rest = &line[i + "listening on ".len()..];
                    let url = rest
                        .split_whitespace()
                        .next()
                        .unwrap_or_default()
                        .to_string();
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(url);
                    }
                }
                log.lock().unwrap().push(line);
            }
        });
        self.child = Some(child);
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(url) => self.url = url,
            Err(_) => {
                let log = self.log.lock().unwrap().join("\n");
                panic!("server did not start:\n{log}");
            }
        }
    }

    /// kill -9, then start again on the same data directory.
    pub fn kill9_and_restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start the process again on the same data directory (after [`Server::kill9`] or
    /// [`Server::terminate`]). It listens on a new port: read [`Server::url`] again.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "the server is still running");
        self.spawn();
    }

    /// Whether the process runs (started and not killed or stopped by this handle).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Send a signal (`STOP`, `CONT`, ...) to the running process.
    pub fn signal(&self, name: &str) {
        let c = self.child.as_ref().expect("the server runs");
        let ok = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(c.id().to_string())
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -{name} failed");
    }

    /// SIGTERM and wait; returns whether it exited successfully.
    pub fn terminate(&mut self) -> bool {
        let Some(mut c) = self.child.take() else {
            return false;
        };
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(c.id().to_string())
            .status();
        for _ in 0..300 {
            if let Ok(Some(st)) = c.try_wait() {
                return st.success();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = c.kill();
        let _ = c.wait();
        false
    }

    pub fn restart(&mut self) {
        assert!(self.terminate(), "graceful stop failed");
        self.spawn();
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    pub fn data_dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.log.lock().map(|l| l.clone()).unwrap_or_default();
            let tail = &log[log.len().saturating_sub(40)..];
            eprintln!(
                "--- last {} log lines of the server at {} ---\n{}",
                tail.len(),
                self.url,
                tail.join("\n")
            );
        }
        if let Some(c) = &self.child {
            // A stopped process is killed just the same; SIGCONT first so it can be reaped.
            let _ = Command::new("kill")
                .arg("-CONT")
                .arg(c.id().to_string())
                .status();
        }
        self.kill9();
    }
}

/// The configuration of node `id` of a test cluster whose nodes' gRPC ports are `grpc` (node
/// `i` at index `i - 1`), with `shards` shards, the test token, and `extra` appended.
pub fn node_config(id: u64, grpc: &[u16], shards: u32, token: &str, extra: &str) -> String {
    let peers: Vec<String> = grpc
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{{ id = {}, grpc = \"127.0.0.1:{p}\" }}", i + 1))
        .collect();
    format!(
        r#"node_id = {id}
shards = {shards}
[session]
secret = "a-shared-cluster-secret-for-tests"
[tasks]
list_page_size = 5000
[auth.tokens]
"{token}" = "alice"
[cluster]
grpc_listen = "127.0.0.1:{}"
peers = [{}]
{extra}
"#,
        grpc[id as usize - 1],
        peers.join(", ")
    )
}

/// `n` free loopback ports (bound once and released: good enough on a test machine).
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("addr").port())
        .collect()
}

/// A raw HTTP answer.
pub struct Raw {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Raw {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// An MCP client over Streamable HTTP.
#[derive(Clone)]
pub struct Client {
    pub http: reqwest::Client,
    pub url: String,
    pub session: Option<String>,
    pub version: String,
    pub token: Option<String>,
    next_id: Arc<std::sync::atomic::AtomicI64>,
}

pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

impl Client {
    pub fn new(url: &str) -> Client {
        Client {
            http: http(),
            url: url.to_string(),
            session: None,
            version: V.to_string(),
            token: None,
            next_id: Arc::new(std::sync::atomic::AtomicI64::new(1)),
        }
    }

    pub fn with_token(mut self, token: &str) -> Client {
        self.token = Some(token.to_string());
        self
    }

    /// initialize + notifications/initialized.
    pub async fn connect(url: &str, token: Option<&str>, version: &str, caps: Value) -> Client {
        let mut c = Client::new(url);
        c.token = token.map(str::to_string);
        c.version = version.to_string();
        let r = c
            .post(
                &json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
                    "protocolVersion": version, "capabilities": caps,
                    "clientInfo": {"name":"test","version":"1"}}})
                .to_string(),
                &[],
            )
            .await;
        assert_eq!(r.status, 200, "initialize: {}", r.body);
        let sid = r
            .headers
            .get("mcp-session-id")
            .expect("session id")
            .to_str()
            .unwrap()
            .to_string();
        c.session = Some(sid);
        let n = c
            .post(
                &json!({"jsonrpc":"2.0","method":"notifications/initialized"}).to_string(),
                &[],
            )
            .await;
        assert_eq!(n.status, 202);
        c
    }

    pub async fn new_session(url: &str) -> Client {
        Client::connect(url, None, V, json!({"elicitation":{},"sampling":{}})).await
    }

    fn request(&self, body: String, extra: &[(&str, &str)]) -> reqwest::RequestBuilder {
        let mut rb = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body);
        if let Some(s) = &self.session {
            rb = rb
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", &self.version);
        }
        if let Some(t) = &self.token {
            rb = rb.header("authorization", format!("Bearer {t}"));
        }
        for (k, v) in extra {
            rb = rb.header(*k, *v);
        }
        rb
    }

    /// Call a method and return the JSON-RPC response, or why no response came (the node is
    /// down, the connection broke, the answer was no JSON-RPC response).
    pub async fn try_call(&self, method: &str, params: Value) -> Result<Value, String> {
        let id = self.id();
        let body = json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}).to_string();
        let r = self
            .request(body, &[])
            .send()
            .await
            .map_err(|e| format!("send: {e}"))?;
        let status = r.status().as_u16();
        let ct = r
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        if status != 200 {
            return Err(format!("HTTP {status}"));
        }
        if ct.starts_with("application/json") {
            return r.json().await.map_err(|e| format!("body: {e}"));
        }
        let mut sse = Sse::new(r);
        while let Some(msg) = sse.try_next().await? {
            if msg.get("id") == Some(&json!(id))
                && (msg.get("result").is_some() || msg.get("error").is_some())
            {
                return Ok(msg);
            }
        }
        Err("the stream ended without a response".into())
    }

    /// POST a raw body; reads the whole answer.
    pub async fn post(&self, body: &str, extra: &[(&str, &str)]) -> Raw {
        let r = self
            .request(body.to_string(), extra)
            .send()
            .await
            .expect("send");
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let body = r.text().await.unwrap_or_default();
        Raw {
            status,
            headers,
            body,
        }
    }

    pub fn id(&self) -> i64 {
        self.next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// Call a method; returns the JSON-RPC response object (with `result` or `error`), and every
    /// message that came before it on an SSE stream.
    pub async fn call_full(&self, method: &str, params: Value) -> (Value, Vec<Value>) {
        let id = self.id();
        let body = json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}).to_string();
        let r = self.request(body, &[]).send().await.expect("send");
        assert_eq!(r.status().as_u16(), 200, "{method}: HTTP {}", r.status());
        let ct = r
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        if ct.starts_with("application/json") {
            return (r.json().await.unwrap(), vec![]);
        }
        assert!(ct.starts_with("text/event-stream"), "content-type {ct}");
        let mut sse = Sse::new(r);
        let mut before = vec![];
        while let Some(msg) = sse.next().await {
            if msg.get("id") == Some(&json!(id))
                && (msg.get("result").is_some() || msg.get("error").is_some())
            {
                return (msg, before);
            }
            before.push(msg);
        }
        panic!("{method}: stream ended without a response; got {before:?}");
    }

    pub async fn call(&self, method: &str, params: Value) -> Value {
        self.call_full(method, params).await.0
    }

    /// `result` of a successful call (panics on a JSON-RPC error).
    pub async fn ok(&self, method: &str, params: Value) -> Value {
        let r = self.call(method, params).await;
        match r.get("result") {
            Some(v) => v.clone(),
            None => panic!("{method} failed: {r}"),
        }
    }

    /// `error.code` of a failed call (panics on success).
    pub async fn err_code(&self, method: &str, params: Value) -> i64 {
        let r = self.call(method, params).await;
        r["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("{method} did not fail: {r}"))
    }

    /// Start a task-augmented tools/call; returns the task id.
    pub async fn start_task(&self, tool: &str, args: Value) -> String {
        let r = self
            .ok(
                "tools/call",
                json!({"name": tool, "arguments": args, "task": {}}),
            )
            .await;
        r["task"]["taskId"].as_str().unwrap().to_string()
    }

    pub async fn status(&self, task_id: &str) -> String {
        self.ok("tasks/get", json!({"taskId": task_id})).await["status"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Poll until the task has `status` (bounded: 30 s).
    pub async fn wait_status(&self, task_id: &str, want: &str) -> Value {
        for _ in 0..600 {
            let t = self.ok("tasks/get", json!({"taskId": task_id})).await;
            if t["status"] == want {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("task {task_id} never reached {want}");
    }

    /// Open a streaming request (e.g. tasks/result) and return the raw SSE reader with its id.
    pub async fn open_stream(&self, method: &str, params: Value) -> (i64, Sse) {
        let id = self.id();
        let body = json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}).to_string();
        let r = self.request(body, &[]).send().await.expect("send");
        assert_eq!(r.status().as_u16(), 200);
        (id, Sse::new(r))
    }

    /// Open the session's GET stream.
    pub async fn open_get(&self) -> Sse {
        let mut rb = self
            .http
            .get(&self.url)
            .header("accept", "text/event-stream");
        if let Some(s) = &self.session {
            rb = rb
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", &self.version);
        }
        if let Some(t) = &self.token {
            rb = rb.header("authorization", format!("Bearer {t}"));
        }
        let r = rb.send().await.expect("get");
        assert_eq!(r.status().as_u16(), 200);
        Sse::new(r)
    }

    /// Answer a server request.
    pub async fn answer(&self, id: &Value, result: Value) {
        let body = json!({"jsonrpc":"2.0","id":id,"result":result}).to_string();
        let r = self.post(&body, &[]).await;
        assert_eq!(r.status, 202, "{}", r.body);
    }
}

/// A reader of JSON messages on an SSE response.
pub struct Sse {
    stream: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: String,
    pub content_type: String,
}

impl Sse {
    pub fn new(r: reqwest::Response) -> Sse {
        let content_type = r
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        Sse {
            stream: r.bytes_stream().boxed(),
            buf: String::new(),
            content_type,
        }
    }

    /// The next JSON message, `Ok(None)` when the stream ends, or why it broke (bounded by
    /// 60 s of silence). An `application/json` answer is one message: the whole body.
    pub async fn try_next(&mut self) -> Result<Option<Value>, String> {
        loop {
            if let Some(i) = self.buf.find("\n\n") {
                let event: String = self.buf.drain(..i + 2).collect();
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:").map(|d| d.trim_start()))
                    .collect();
                if data.is_empty() {
                    continue; // keep-alive comment
                }
                return serde_json::from_str(&data.join("\n"))
                    .map(Some)
                    .map_err(|e| format!("SSE data is not JSON: {e}"));
            }
            match tokio::time::timeout(Duration::from_secs(60), self.stream.next()).await {
                Ok(Some(Ok(chunk))) => self.buf.push_str(&String::from_utf8_lossy(&chunk)),
                Ok(end) => {
                    if self.content_type.starts_with("application/json")
                        && !self.buf.trim().is_empty()
                    {
                        let body = std::mem::take(&mut self.buf);
                        return serde_json::from_str(&body)
                            .map(Some)
                            .map_err(|e| format!("body is not JSON: {e}"));
                    }
                    return match end {
                        Some(Err(e)) => Err(format!("stream: {e}")),
                        _ => Ok(None),
                    };
                }
                Err(_) => return Err("SSE stream idle for 60 s".into()),
            }
        }
    }

    /// The next JSON message, or `None` when the stream ends or breaks. Panics after 60 s of
    /// silence.
    pub async fn next(&mut self) -> Option<Value> {
        match self.try_next().await {
            Ok(m) => m,
            Err(e) if e.starts_with("stream: ") => None,
            Err(e) => panic!("{e}"),
        }
    }
}

/// `tasks/get` through `c`, retried while the cluster answers with an internal error (no
/// leader yet, or a leader just died); bounded.
pub async fn get_eventually(c: &Client, id: &str) -> Value {
    for _ in 0..300 {
        let r = c.call("tasks/get", json!({"taskId": id})).await;
        if let Some(res) = r.get("result") {
            return res.clone();
        }
        assert_eq!(r["error"]["code"], -32603, "unexpected error: {r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("task {id} never became readable");
}

/// `GET /status` of a node.
pub async fn status_of(s: &Server, token: &str) -> Value {
    let url = s.url.replace("/mcp", "/status");
    http()
        .get(url)
        .header("authorization", format!("Bearer {token}"))
        .send()
        .await
        .expect("status")
        .json()
        .await
        .expect("status JSON")
}

/// Wait (bounded: 60 s) until every one of `shards` shards has a leader that some node's
/// `GET /status` names, and every node's view agrees on it: the cluster was created and its
/// groups elected.
pub async fn wait_cluster_ready(nodes: &[&Server], token: &str, shards: u32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut leaders: Vec<Option<u64>> = vec![None; shards as usize];
        let mut agree = true;
        for n in nodes {
            let st = status_of(n, token).await;
            for s in st["shards"].as_array().cloned().unwrap_or_default() {
                let (Some(shard), Some(leader)) = (s["shard"].as_u64(), s["leader"].as_u64())
                else {
                    agree = false;
                    continue;
                };
                let slot = &mut leaders[shard as usize];
                if slot.is_some_and(|l| l != leader) {
                    agree = false;
                }
                *slot = Some(leader);
            }
        }
        if agree && leaders.iter().all(Option::is_some) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "cluster never became ready: {leaders:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What clients observed, with when each poll started and ended, checked against the
/// invariants: an acknowledged create is always found, a terminal status never changes, and
/// no poll that started after another poll ended shows an older state than that one.
#[derive(Default)]
pub struct History {
    seen: std::collections::HashMap<String, Vec<(Instant, Instant, Value)>>,
}

pub fn is_terminal(t: &Value) -> bool {
    ["completed", "failed", "cancelled"].contains(&t["status"].as_str().unwrap_or(""))
}

impl History {
    /// Poll every task seen so far once more through each of `clients`, in turn.
    pub async fn poll_all(&mut self, clients: &[&Client]) {
        let mut ids: Vec<String> = self.seen.keys().cloned().collect();
        ids.sort();
        for id in ids {
            for c in clients {
                self.poll(c, &id).await;
            }
        }
    }

    /// Poll `id` through `c` (retrying while its shard elects) and record what was seen.
    pub async fn poll(&mut self, c: &Client, id: &str) -> Value {
        let t0 = Instant::now();
        let got = get_eventually(c, id).await;
        self.observe(id, t0, Instant::now(), &got);
        got
    }

    pub fn observe(&mut self, id: &str, start: Instant, end: Instant, task: &Value) {
        self.seen
            .entry(id.to_string())
            .or_default()
            .push((start, end, task.clone()));
    }

    pub fn check(&self) -> usize {
        let mut pairs = 0;
        for (id, obs) in &self.seen {
            for (_, end_a, a) in obs {
                for (start_b, _, b) in obs {
                    if start_b <= end_a {
                        continue;
                    }
                    pairs += 1;
                    if is_terminal(a) {
                        assert_eq!(a, b, "terminal task {id} changed");
                    }
                    let (ta, tb) = (
                        a["lastUpdatedAt"].as_str().unwrap_or(""),
                        b["lastUpdatedAt"].as_str().unwrap_or(""),
                    );
                    assert!(
                        tb >= ta,
                        "task {id}: a later poll showed an older state: {a} then {b}"
                    );
                }
            }
        }
        pairs
    }
}
