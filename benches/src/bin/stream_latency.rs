//! How soon the streams carry what a task does, as a client sees it.
//!
//! One MCP session (declaring elicitation) keeps its GET stream open on `--get-url` (default:
//! `--url`) and sends everything else to `--url`. Each round starts a `confirm_delete` task,
//! waits for its `elicitation/create` on the GET stream, opens `tasks/result` and then answers
//! the request. From the moment the answer is sent it measures: the answer's own HTTP round
//! trip; the `notifications/tasks/status` that says `working` again, on the GET stream; and the
//! task's result, on the open `tasks/result` stream. The last two include the durable writes
//! of the status changes (`working`, then `completed`) on the task's shard, and across nodes
//! the hops to and from the shard's leader.
//!
//! The call carries a progress token, and `confirm_delete` reports progress the moment it has
//! the answer: that notification, on the open `tasks/result` stream, follows the answer with
//! no durable write between (the answer's request, its way to the task's actor, the tool, and
//! back to the stream).
//!
//! Each round then starts a `slow_compute` task of 50 ms with a progress token and takes its
//! one progress notification from the GET stream. The tool reports it 50 ms after it starts (a
//! timer that never fires early and may fire up to 1 ms late), and it starts after the call
//! was sent and about when its `CreateTaskResult` is sent back; so the notification's arrival
//! minus (call sent + 50 ms) bounds the delay from above, and minus (`CreateTaskResult`
//! received + 50 ms) estimates it.
//!
//!     stream_latency --url http://127.0.0.1:8080/mcp --rounds 200

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use hdrhistogram::Histogram;
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION};
use serde_json::{json, Value};
use taskmesh_client::wire::{self, HttpTransport, Response};
use tokio::sync::mpsc;

/// Most rounds one run may ask for.
const MAX_ROUNDS: u64 = 10_000;
/// How long the progress round's tool works before it reports.
const PROGRESS_AFTER: Duration = Duration::from_millis(50);
/// How long one awaited message may take before the run fails.
const WAIT: Duration = Duration::from_secs(10);

#[derive(Parser)]
struct Args {
    /// MCP endpoint the requests go to.
    #[arg(long)]
    url: String,
    /// MCP endpoint the session's GET stream is opened on (another node of a cluster, say).
    #[arg(long)]
    get_url: Option<String>,
    /// Bearer token, when the server requires one.
    #[arg(long)]
    token: Option<String>,
    /// Rounds (tasks) to measure, at most 10,000.
    #[arg(long, default_value_t = 200)]
    rounds: u64,
}

/// The session: the transport (which keeps the session's headers) and the request ids.
struct Client {
    wire: HttpTransport,
    next_id: i64,
}

impl Client {
    async fn post(&self, body: &Value) -> anyhow::Result<Response> {
        Ok(self.wire.post(body.to_string(), &[]).await?)
    }

    /// POST `body`; its answer, a JSON body.
    async fn post_json(&self, body: &Value) -> anyhow::Result<Value> {
        let r = self.post(body).await?;
        Ok(serde_json::from_slice(&r.bytes(usize::MAX).await?)?)
    }

    fn request(&mut self, method: &str, params: Value) -> (i64, Value) {
        self.next_id += 1;
        let id = self.next_id;
        (
            id,
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
    }
}

/// The transport of `url`, with the bearer `token` when there is one.
fn transport(url: &str, token: Option<&str>) -> anyhow::Result<HttpTransport> {
    let mut headers = HeaderMap::new();
    if let Some(t) = token {
        headers.insert(
            AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {t}"))?,
        );
    }
    Ok(HttpTransport::new(wire::default_http(), url, headers))
}

/// The JSON-RPC messages of an SSE body, as they arrive.
fn sse_messages(r: Response) -> mpsc::UnboundedReceiver<(Instant, Value)> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut events = r.events(usize::MAX);
        while let Some(Ok(event)) = events.next().await {
            let at = Instant::now();
            if let Ok(v) = serde_json::from_slice::<Value>(&event.data) {
                if tx.send((at, v)).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

async fn next_matching(
    rx: &mut mpsc::UnboundedReceiver<(Instant, Value)>,
    what: &str,
    matches: impl Fn(&Value) -> bool,
) -> anyhow::Result<(Instant, Value)> {
    loop {
        let got = tokio::time::timeout(WAIT, rx.recv())
            .await
            .with_context(|| format!("waiting for {what}"))?;
        let Some((at, v)) = got else {
            bail!("stream ended while waiting for {what}");
        };
        if matches(&v) {
            return Ok((at, v));
        }
    }
}

async fn connect(args: &Args) -> anyhow::Result<Client> {
    let wire = transport(&args.url, args.token.as_deref())?;
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},
        "clientInfo":{"name":"stream_latency","version":"1"}}});
    wire.post(init.to_string(), &[]).await?;
    if wire.session().id.is_none() {
        bail!("no session id");
    }
    wire.set_protocol_version("2025-11-25");
    let c = Client { wire, next_id: 0 };
    let r = c
        .post(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
        .await?;
    if r.status() != 202 {
        bail!("notifications/initialized: HTTP {}", r.status());
    }
    Ok(c)
}

fn micros(h: &mut Histogram<u64>, d: Duration) {
    let _ = h.record(d.as_micros().max(1) as u64);
}

fn line(name: &str, h: &Histogram<u64>) -> String {
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    format!(
        "{name:<34}{:>9.3}{:>9.3}{:>9.3}{:>9.3}",
        ms(0.5),
        ms(0.9),
        ms(0.99),
        h.max() as f64 / 1000.0
    )
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.rounds == 0 || args.rounds > MAX_ROUNDS {
        bail!("--rounds must be 1 to {MAX_ROUNDS}");
    }
    let mut c = connect(&args).await?;
    let get_url = args.get_url.as_deref().unwrap_or(&args.url);
    let get_wire = transport(get_url, args.token.as_deref())?;
    get_wire.set_session(c.wire.session());
    let r = get_wire.get(&[]).await?;
    if r.status() != 200 {
        bail!("GET stream: HTTP {}", r.status());
    }
    let mut get = sse_messages(r);

    let mut answer_rtt = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut status = answer_rtt.clone();
    let mut result = answer_rtt.clone();
    let mut progress_bound = answer_rtt.clone();
    let mut progress = answer_rtt.clone();
    let mut answered_progress = answer_rtt.clone();
    for round in 0..args.rounds {
        let (_, call) = c.request(
            "tools/call",
            json!({"name":"confirm_delete","arguments":{"filename": format!("r{round}")},
                   "task":{"ttl":60000},"_meta":{"progressToken": format!("a{round}")}}),
        );
        let created = c.post_json(&call).await?;
        let task_id = created["result"]["task"]["taskId"]
            .as_str()
            .with_context(|| format!("create: {created}"))?
            .to_string();
        let related = |v: &Value| {
            v["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"] == task_id
        };
        let (_, req) = next_matching(&mut get, "the elicitation", |v| {
            v["method"] == "elicitation/create" && related(v)
        })
        .await?;
        let (rid, call) = c.request("tasks/result", json!({"taskId": task_id}));
        let r = c.post(&call).await?;
        let mut held = sse_messages(r);

        let answer = json!({"jsonrpc":"2.0","id":req["id"],
            "result":{"action":"accept","content":{"confirm":false}}});
        let t0 = Instant::now();
        let r = c.post(&answer).await?;
        let t_answer = Instant::now();
        if r.status() != 202 {
            bail!("answer: HTTP {}", r.status());
        }
        let (t_status, _) = next_matching(&mut get, "the status working", |v| {
            v["method"] == "notifications/tasks/status"
                && v["params"]["taskId"] == task_id
                && v["params"]["status"] == "working"
        })
        .await?;
        // The tool reports progress as soon as it has the answer (no durable write between):
        // it comes on the open tasks/result stream, before the result.
        let (t_answered, _) = next_matching(&mut held, "the progress after the answer", |v| {
            v["method"] == "notifications/progress"
                && v["params"]["progressToken"] == format!("a{round}")
        })
        .await?;
        let (t_result, resp) = next_matching(&mut held, "the result", |v| v["id"] == rid).await?;
        if resp.get("result").is_none() {
            bail!("tasks/result: {resp}");
        }
        micros(&mut answer_rtt, t_answer - t0);
        micros(&mut status, t_status - t0);
        micros(&mut result, t_result - t0);
        micros(&mut answered_progress, t_answered - t0);

        let token = format!("p{round}");
        let (_, call) = c.request(
            "tools/call",
            json!({"name":"slow_compute","arguments":{"seconds": PROGRESS_AFTER.as_secs_f64()},
                   "task":{"ttl":60000},"_meta":{"progressToken": token}}),
        );
        let t_sent = Instant::now();
        let created = c.post_json(&call).await?;
        let t_created = Instant::now();
        if created["result"]["task"]["taskId"].as_str().is_none() {
            bail!("create: {created}");
        }
        let (t_progress, _) = next_matching(&mut get, "the progress", |v| {
            v["method"] == "notifications/progress" && v["params"]["progressToken"] == token
        })
        .await?;
        micros(
            &mut progress_bound,
            t_progress.saturating_duration_since(t_sent + PROGRESS_AFTER),
        );
        micros(
            &mut progress,
            t_progress.saturating_duration_since(t_created + PROGRESS_AFTER),
        );
    }
    println!(
        "{} rounds; ms after the client's answer was sent",
        args.rounds
    );
    println!("{:<34}{:>9}{:>9}{:>9}{:>9}", "", "p50", "p90", "p99", "max");
    println!("{}", line("answer acknowledged (HTTP 202)", &answer_rtt));
    println!("{}", line("status `working` on the GET stream", &status));
    println!("{}", line("result on the tasks/result stream", &result));
    println!(
        "{}",
        line("progress on tasks/result (answer in)", &answered_progress)
    );
    println!("ms after the progress was due (50 ms after the call)");
    println!("{}", line("progress, from the call sent", &progress_bound));
    println!("{}", line("progress, from its CreateTaskResult", &progress));
    Ok(())
}
