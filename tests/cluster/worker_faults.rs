//! Workers that die or stall while they hold a lease, on a three-node cluster. A real worker
//! process (the Python worker of examples/worker-python, run by
//! `tests/interop/python_worker_faults.py`) leases a task and is killed with SIGKILL: under
//! resume policy `rerun` another worker gets the task as attempt 2 and its result is the
//! task's; under `fail` the task fails saying its worker was lost and is never offered again.
//! A worker that stalls past its lease finds its late completion refused, and the task keeps
//! the result of the worker that holds the current lease. Every task ends, and no terminal
//! status changes in what clients on every node observe.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{json, Value};
use taskmesh_client::worker::{Declaration, Lease, Worker};
use taskmesh_testkit::{free_ports, is_terminal, Client, History, Server, V};

use crate::workers::wait_listed;
use crate::{node_config_with, shards, TASKMESH, TOKEN};

const WORKER_TOKEN: &str = "fault-worker-token";

/// Short leases, so that a lost worker is noticed soon; two attempts at most, so that the
/// second worker's lease is the task's last chance.
const WORKERS: &str = r#"
[workers]
lease_ms = 3000
poll_wait_max_ms = 1000
max_attempts = 2
[workers.tokens]
"fault-worker-token" = "faults"
[workers.identities.faults]
tools = ["fault_*"]
"#;

/// Rounds of 100 ms a test waits for something the cluster or a worker process does.
const WAIT_ROUNDS: usize = 300;

async fn cluster() -> [Server; 3] {
    let grpc = free_ports(3);
    let config = |id| node_config_with(id, &grpc, WORKERS);
    let nodes = [
        Server::start_node(TASKMESH, &config(1), true),
        Server::start_node(TASKMESH, &config(2), false),
        Server::start_node(TASKMESH, &config(3), false),
    ];
    taskmesh_testkit::wait_cluster_ready(&[&nodes[0], &nodes[1], &nodes[2]], TOKEN, shards()).await;
    nodes
}

async fn clients(nodes: &[Server; 3]) -> [Client; 3] {
    let connect = |s: &Server| {
        let url = s.url.clone();
        async move {
            Client::connect(
                &url,
                Some(TOKEN),
                V,
                json!({"tasks": {"list": {}, "cancel": {}}}),
            )
            .await
        }
    };
    [
        connect(&nodes[0]).await,
        connect(&nodes[1]).await,
        connect(&nodes[2]).await,
    ]
}

fn result(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}]})
}

/// The Rust declaration of a tool the Python script serves: the same one, field for field.
fn declared(tool: &str) -> Declaration {
    let d = Declaration::new(tool, json!({"type": "object"}));
    if tool == "fault_fail" {
        d.failing_when_lost()
    } else {
        d
    }
}

/// Poll `id` (bounded) through each client in turn until it is terminal; its last state.
async fn wait_terminal(history: &mut History, clients: &[Client; 3], id: &str) -> Value {
    let mut last = Value::Null;
    for round in 0..WAIT_ROUNDS {
        last = history.poll(&clients[round % 3], id).await;
        if is_terminal(&last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("task {id} never ended: {last}");
}

/// Poll `id` (bounded) through each client in turn until its status message is `want`; the
/// task's state then, which must not be terminal.
async fn wait_status_message(
    history: &mut History,
    clients: &[Client; 3],
    id: &str,
    want: &str,
) -> Value {
    let mut last = Value::Null;
    for round in 0..WAIT_ROUNDS {
        last = history.poll(&clients[round % 3], id).await;
        assert!(!is_terminal(&last), "task {id} ended early: {last}");
        if last["statusMessage"] == want {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("task {id} never showed the status message {want:?}: {last}");
}

/// Poll with `w` (bounded) until it is leased a task; that lease.
async fn lease_one(w: &Worker) -> Lease {
    for _ in 0..60 {
        if let Some(l) = w.poll(1, Duration::from_secs(1)).await.unwrap().pop() {
            return l;
        }
    }
    panic!("worker {} was never leased a task", w.worker_id);
}

/// The text of the first content item of `id`'s result as the node of `c` answers it.
async fn result_text(c: &Client, id: &str) -> Value {
    c.ok("tasks/result", json!({"taskId": id})).await["content"][0]["text"].clone()
}

/// Lines a child process writes to one of its pipes, collected as they come.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<String>>>);

impl Lines {
    /// Read `pipe` line by line into these lines until it closes (the process ended).
    fn collect(&self, pipe: impl Read + Send + 'static) -> JoinHandle<()> {
        let lines = self.0.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                lines.lock().unwrap_or_else(|p| p.into_inner()).push(line);
            }
        })
    }

    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The Python worker process: killed (SIGKILL) and reaped when dropped, whatever happened;
/// what it wrote is shown when the test fails.
struct PythonWorker {
    child: Child,
    /// Held open: the script exits by itself once it closes (should this process vanish).
    _stdin: Option<ChildStdin>,
    stdout: Lines,
    stderr: Lines,
    readers: Vec<JoinHandle<()>>,
}

impl PythonWorker {
    /// Start the script with the system `python3`, registering at `server`.
    fn start(server: &Server) -> PythonWorker {
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/interop")
            .join("python_worker_faults.py");
        let mut child = Command::new("python3")
            .arg("-B")
            .arg(script)
            .arg(&server.url)
            .arg(WORKER_TOKEN)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONUNBUFFERED", "1")
            .env_remove("PYTHONPATH")
            // It talks to 127.0.0.1 only: no proxy in between.
            .env_remove("http_proxy")
            .env_remove("HTTP_PROXY")
            .env_remove("all_proxy")
            .env_remove("ALL_PROXY")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the Python worker with python3");
        let (stdout, stderr) = (Lines::default(), Lines::default());
        let readers = vec![
            stdout.collect(child.stdout.take().unwrap()),
            stderr.collect(child.stderr.take().unwrap()),
        ];
        PythonWorker {
            _stdin: child.stdin.take(),
            child,
            stdout,
            stderr,
            readers,
        }
    }

    /// The `started` events the handlers printed so far.
    fn starts(&self) -> Vec<Value> {
        self.stdout
            .all()
            .iter()
            .map(|l| {
                serde_json::from_str::<Value>(l)
                    .unwrap_or_else(|e| panic!("not JSON ({e}): {l}\n{}", self.describe()))
            })
            .filter(|e| e["event"] == "started")
            .collect()
    }

    /// Wait (bounded) until a handler printed that it started on task `id`; that event.
    async fn started(&mut self, id: &str) -> Value {
        for _ in 0..WAIT_ROUNDS {
            if let Some(e) = self.starts().into_iter().find(|e| e["taskId"] == id) {
                return e;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the Python worker exited: {status:?}\n{}", self.describe());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "the Python worker never started task {id}\n{}",
            self.describe()
        );
    }

    /// SIGKILL the process and reap it; how it ended.
    fn kill9(&mut self) -> ExitStatus {
        let _ = self.child.kill();
        let status = self.child.wait().expect("reap the Python worker");
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        status
    }

    fn describe(&self) -> String {
        format!(
            "--- Python worker stdout ---\n{}\n--- Python worker stderr ---\n{}",
            self.stdout.all().join("\n"),
            self.stderr.all().join("\n")
        )
    }
}

impl Drop for PythonWorker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("{}", self.describe());
        }
    }
}

/// Kill `a` with SIGKILL, checking that it was still running its handler (it did not end on
/// its own: the signal ended it).
fn kill_mid_task(a: &mut PythonWorker) {
    use std::os::unix::process::ExitStatusExt;
    let status = a.kill9();
    assert_eq!(
        status.signal(),
        Some(9),
        "the Python worker ended before the kill: {status:?}\n{}",
        a.describe()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_task_has_its_task_rerun_by_another_worker() {
    let nodes = cluster().await;
    let cs = clients(&nodes).await;
    let mut a = PythonWorker::start(&nodes[0]);
    wait_listed(&cs[1], "fault_rerun").await;

    let mut history = History::default();
    let id = cs[1].start_task("fault_rerun", json!({"n": 1})).await;
    let started = a.started(&id).await;
    assert_eq!(started["attempt"], 1);
    assert_eq!(started["tool"], "fault_rerun");
    // The handler's status message shows on every node: A holds a live lease.
    let leased = wait_status_message(
        &mut history,
        &cs,
        &id,
        "attempt 1 running in the Python worker",
    )
    .await;
    assert_eq!(leased["status"], "working");

    kill_mid_task(&mut a);

    // B, a worker on another node, registered once A is gone: it gets the task as attempt 2.
    let b = Worker::register(
        &nodes[2].url,
        WORKER_TOKEN,
        vec![declared("fault_rerun")],
        1,
        "b",
    )
    .await
    .unwrap();
    let lease = lease_one(&b).await;
    assert_eq!(lease.task_id, id);
    assert_eq!(lease.attempt, 2);
    assert_eq!(lease.arguments, json!({"n": 1}));
    let before = history.poll(&cs[0], &id).await;
    assert_eq!(before["status"], "working", "{before}");
    assert_eq!(
        b.complete(&lease, Ok(result("done by B"))).await.unwrap(),
        "completed"
    );

    let done = wait_terminal(&mut history, &cs, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    for c in &cs {
        assert_eq!(result_text(c, &id).await, "done by B");
    }
    // A started the task once, and nobody else is offered it.
    assert_eq!(a.starts().len(), 1, "{}", a.describe());
    assert!(b
        .poll(1, Duration::from_millis(500))
        .await
        .unwrap()
        .is_empty());
    history.poll_all(&[&cs[0], &cs[1], &cs[2]]).await;
    assert!(history.check() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_task_fails_its_task_by_policy() {
    let nodes = cluster().await;
    let cs = clients(&nodes).await;
    let mut a = PythonWorker::start(&nodes[1]);
    wait_listed(&cs[0], "fault_fail").await;

    let mut history = History::default();
    let id = cs[0].start_task("fault_fail", json!({"n": 2})).await;
    let started = a.started(&id).await;
    assert_eq!(started["attempt"], 1);
    assert_eq!(started["tool"], "fault_fail");
    wait_status_message(
        &mut history,
        &cs,
        &id,
        "attempt 1 running in the Python worker",
    )
    .await;

    // R serves the tool on another node and polls all along: it must never get the task.
    let r = Worker::register(
        &nodes[2].url,
        WORKER_TOKEN,
        vec![declared("fault_fail")],
        4,
        "r",
    )
    .await
    .unwrap();
    kill_mid_task(&mut a);

    let mut last = Value::Null;
    for round in 0..120 {
        let offered = r.poll(4, Duration::from_millis(500)).await.unwrap();
        assert!(offered.is_empty(), "a lost task was offered: {offered:?}");
        last = history.poll(&cs[round % 3], &id).await;
        if is_terminal(&last) {
            break;
        }
    }
    assert_eq!(last["status"], "failed", "{last}");
    let message = last["statusMessage"].as_str().unwrap_or_default();
    assert!(message.contains("was lost"), "{last}");
    assert!(message.contains("resume policy 'fail'"), "{last}");
    for c in &cs {
        let answer = c.call("tasks/result", json!({"taskId": id})).await;
        let error = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(error.contains("was lost"), "{answer}");
    }
    // Still never offered, now that it has failed.
    for _ in 0..3 {
        let offered = r.poll(4, Duration::from_millis(500)).await.unwrap();
        assert!(offered.is_empty(), "a failed task was offered: {offered:?}");
    }
    assert_eq!(a.starts().len(), 1, "{}", a.describe());
    history.poll_all(&[&cs[0], &cs[1], &cs[2]]).await;
    assert!(history.check() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_workers_late_completion_is_refused() {
    let nodes = cluster().await;
    let cs = clients(&nodes).await;
    let mut history = History::default();
    // W1 on node 1 leases the task, made on node 2, and renews its lease once.
    let w1 = Worker::register(
        &nodes[0].url,
        WORKER_TOKEN,
        vec![declared("fault_stale")],
        1,
        "w1",
    )
    .await
    .unwrap();
    wait_listed(&cs[1], "fault_stale").await;
    let id = cs[1].start_task("fault_stale", json!({"n": 3})).await;
    let l1 = lease_one(&w1).await;
    assert_eq!((l1.task_id.as_str(), l1.attempt), (id.as_str(), 1));
    let beat = w1.heartbeat(&l1, None, Some("W1 working")).await.unwrap();
    assert!(!beat.cancelled);
    wait_status_message(&mut history, &cs, &id, "W1 working").await;

    // W1 stalls (no more heartbeats): once its lease runs out, W2 on node 3 gets the task.
    let w2 = Worker::register(
        &nodes[2].url,
        WORKER_TOKEN,
        vec![declared("fault_stale")],
        1,
        "w2",
    )
    .await
    .unwrap();
    let l2 = lease_one(&w2).await;
    assert_eq!((l2.task_id.as_str(), l2.attempt), (id.as_str(), 2));
    assert_ne!(l2.token, l1.token);
    assert!(!w2.heartbeat(&l2, None, None).await.unwrap().cancelled);

    // W1 wakes up: its completion is refused through every node, and so is its heartbeat.
    for n in &nodes {
        let late = w1
            .via(&n.url)
            .complete(&l1, Ok(result("late from W1")))
            .await;
        assert_eq!(
            late.as_ref().unwrap_err().code(),
            Some("FAILED_PRECONDITION"),
            "{late:?}"
        );
    }
    match w1.heartbeat(&l1, None, Some("W1 is back")).await {
        Ok(beat) => assert!(beat.cancelled, "a stale lease was renewed: {beat:?}"),
        Err(e) => assert_eq!(e.code(), Some("FAILED_PRECONDITION"), "{e}"),
    }
    // Nothing changed: the task still runs under W2's lease, which W2 renews.
    let still = history.poll(&cs[1], &id).await;
    assert_eq!(still["status"], "working", "{still}");
    assert_ne!(still["statusMessage"], "W1 is back", "{still}");
    assert!(!w2.heartbeat(&l2, None, None).await.unwrap().cancelled);

    assert_eq!(
        w2.complete(&l2, Ok(result("done by W2"))).await.unwrap(),
        "completed"
    );
    let done = wait_terminal(&mut history, &cs, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    // Too late for good: W1's completion is still refused, and the result stays W2's.
    let again = w1.complete(&l1, Ok(result("late from W1"))).await;
    assert_eq!(
        again.as_ref().unwrap_err().code(),
        Some("FAILED_PRECONDITION"),
        "{again:?}"
    );
    for c in &cs {
        assert_eq!(result_text(c, &id).await, "done by W2");
    }
    history.poll_all(&[&cs[0], &cs[1], &cs[2]]).await;
    assert!(history.check() > 0);
}
