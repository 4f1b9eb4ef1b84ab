//! The randomized run: kills, stops and restarts under load, then the recorded history is
//! checked, including that every acknowledged task finishes.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use taskmesh_testkit::{get_eventually, status_of, wait_cluster_ready, Client, Server};

use crate::{connect, shard_views, start_cluster, SERIAL, TOKEN};

/// A small deterministic generator (xorshift64*), seeded per run so that a failing run can be
/// repeated with `TEST_FAULT_SEED`.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// What the clients of the randomized test share: the address of every node that serves now
/// (`None` while it is down or stopped) and what they were told.
#[derive(Default)]
struct Shared {
    urls: Vec<Option<String>>,
    /// Acknowledged creates: task id → its label and seconds.
    created: std::collections::HashMap<String, (String, f64)>,
    /// Tasks a cancel was sent for (acknowledged or not).
    cancel_sent: std::collections::HashSet<String>,
    /// Cancels acknowledged with `cancelled`.
    cancelled: std::collections::HashSet<String>,
    history: taskmesh_testkit::History,
    /// Requests that got no JSON-RPC answer (a node died under them) or `-32603`.
    unavailable: usize,
    /// Answers that break a rule (an acknowledged task not found, an unexpected error).
    violations: Vec<String>,
    polls: usize,
}

/// One client: creates, polls and cancels tasks through whichever nodes serve, until `stop`.
async fn client_loop(
    shared: std::sync::Arc<Mutex<Shared>>,
    session: Client,
    seed: u64,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    let mut rng = Rng(seed | 1);
    let mut n = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        n += 1;
        let (url, known) = {
            let s = shared.lock().expect("shared");
            let up: Vec<&String> = s.urls.iter().flatten().collect();
            if up.is_empty() {
                (None, None)
            } else {
                let url = up[rng.below(up.len())].clone();
                let known = (!s.created.is_empty()).then(|| {
                    let i = rng.below(s.created.len());
                    s.created.keys().nth(i).cloned().expect("a task")
                });
                (Some(url), known)
            }
        };
        let Some(url) = url else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let mut c = session.clone();
        c.url = url;
        let roll = rng.below(100);
        let target = known.filter(|_| roll >= 20);
        if let Some(id) = target.as_ref().filter(|_| roll < 26) {
            shared
                .lock()
                .expect("shared")
                .cancel_sent
                .insert(id.clone());
            let r = c.try_call("tasks/cancel", json!({"taskId": id})).await;
            let mut s = shared.lock().expect("shared");
            match r {
                Ok(r) if r["result"]["status"] == "cancelled" => {
                    s.cancelled.insert(id.clone());
                }
                // Already terminal: -32602 says so.
                Ok(r) if r["error"]["code"] == -32602 => {}
                Ok(r) if r["error"]["code"] == -32603 => s.unavailable += 1,
                Ok(r) => s.violations.push(format!("cancel {id}: {r}")),
                Err(_) => s.unavailable += 1,
            }
        } else if let Some(id) = target {
            let t0 = Instant::now();
            let r = c.try_call("tasks/get", json!({"taskId": id})).await;
            let t1 = Instant::now();
            let mut s = shared.lock().expect("shared");
            match r {
                Ok(r) => match r.get("result") {
                    Some(task) => {
                        s.polls += 1;
                        s.history.observe(&id, t0, t1, task);
                    }
                    None if r["error"]["code"] == -32603 => s.unavailable += 1,
                    None => s
                        .violations
                        .push(format!("poll of acknowledged task {id}: {r}")),
                },
                Err(_) => s.unavailable += 1,
            }
        } else {
            let seconds = [0.1, 0.5, 1.0, 2.0, 3.0][rng.below(5)];
            let label = format!("s{seed}-{n}");
            let params = json!({"name": "slow_compute", "task": {},
                "arguments": {"seconds": seconds, "label": label}});
            let r = c.try_call("tools/call", params).await;
            let mut s = shared.lock().expect("shared");
            match r {
                Ok(r) => match r["result"]["task"]["taskId"].as_str() {
                    Some(id) => {
                        s.created.insert(id.to_string(), (label, seconds));
                    }
                    None if r["error"]["code"] == -32603 => s.unavailable += 1,
                    None => s.violations.push(format!("create: {r}")),
                },
                Err(_) => s.unavailable += 1,
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The fault kinds of the randomized test.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// kill -9 of one node, started again a few seconds later.
    KillOne,
    /// kill -9 of both followers of one shard at once: its leader lives on without a quorum.
    KillTwo,
    /// SIGSTOP of the node that leads most shards for a few seconds, then SIGCONT.
    StopLeader,
    /// SIGTERM and start again, node after node.
    RollingRestart,
}

/// Both followers of a random shard (0-based node indexes).
async fn followers_of_a_shard(nodes: &[Server], shards: u32, rng: &mut Rng) -> Vec<usize> {
    let view = shard_views(nodes, shards)
        .await
        .swap_remove(rng.below(shards as usize));
    let leader = view.leader.expect("a leader");
    view.voters
        .iter()
        .filter(|v| **v != leader)
        .map(|v| *v as usize - 1)
        .collect()
}

/// The node that leads most shards, as the nodes that serve report it (1-based).
async fn busiest_leader(nodes: &[Server]) -> usize {
    let mut count = std::collections::HashMap::<u64, usize>::new();
    for n in nodes.iter().filter(|n| n.is_running()) {
        for s in status_of(n, TOKEN).await["shards"]
            .as_array()
            .expect("shards")
        {
            if s["isLeader"] == true {
                *count
                    .entry(s["leader"].as_u64().expect("leader"))
                    .or_default() += 1;
            }
        }
    }
    count
        .into_iter()
        .max_by_key(|(_, c)| *c)
        .map_or(1, |(n, _)| n as usize)
}

/// Five nodes, sixteen shards (or `TEST_CLUSTER_SHARDS`), eight clients creating, polling and cancelling for about a
/// minute and a half while the nodes are killed (one, then two at once), the busiest leader
/// is stopped (SIGSTOP) for a few seconds and every node is restarted in turn (SIGTERM).
/// Afterwards the recorded history must hold: no acknowledged create lost, no terminal status
/// changed, no poll older than an earlier one; a cancel acknowledged stays `cancelled`; every
/// completed result is its own task's; and every acknowledged task reaches a terminal status
/// within its tool's time plus `LIVENESS_BOUND` of the cluster's healing, with no execution
/// left running anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_nodes_under_random_faults_lose_nothing_and_leave_no_task_behind() {
    /// The liveness bound of docs/architecture.md ("Failure handling"), for this test's
    /// debug build on a small machine.
    const LIVENESS_BOUND: Duration = Duration::from_secs(20);
    const FAULT_TIME: Duration = Duration::from_secs(75);
    const CLIENTS: u64 = 8;
    let shards = taskmesh_testkit::cluster_shards(16);
    let _serial = SERIAL.lock().await;
    let seed = std::env::var("TEST_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(7, |d| d.as_nanos() as u64)
        });
    println!("fault seed {seed} (TEST_FAULT_SEED={seed} repeats this run's choices)");
    let mut rng = Rng(seed | 1);

    // Leaderships stay where elections put them: a leader whose followers return is not
    // replaced by a hand-over to a preferred leader (whose new term would start a new
    // execution of every live task and so hide one that nothing runs).
    let mut nodes = start_cluster(5, shards, "leader_settle_ms = 3600000").await;
    let session = connect(&nodes[0]).await;
    let shared = std::sync::Arc::new(Mutex::new(Shared {
        urls: nodes.iter().map(|n| Some(n.url.clone())).collect(),
        ..Shared::default()
    }));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..CLIENTS)
        .map(|i| {
            tokio::spawn(client_loop(
                shared.clone(),
                session.clone(),
                seed.wrapping_add(i * 0x9e37_79b9),
                stop.clone(),
            ))
        })
        .collect();
    let set_url = |i: usize, url: Option<String>| shared.lock().expect("shared").urls[i] = url;

    // Every kind once, in a random order, then random kinds until the time is up.
    let mut plan = [
        Fault::KillOne,
        Fault::KillTwo,
        Fault::StopLeader,
        Fault::RollingRestart,
    ];
    for i in (1..plan.len()).rev() {
        plan.swap(i, rng.below(i + 1));
    }
    let started = Instant::now();
    let mut done = vec![];
    let mut k = 0;
    while k < plan.len() || started.elapsed() < FAULT_TIME {
        let fault = plan
            .get(k)
            .copied()
            .unwrap_or_else(|| [Fault::KillOne, Fault::KillTwo, Fault::StopLeader][rng.below(3)]);
        k += 1;
        let refs: Vec<&Server> = nodes.iter().collect();
        wait_cluster_ready(&refs, TOKEN, shards).await;
        tokio::time::sleep(Duration::from_millis(500 + rng.below(1500) as u64)).await;
        match fault {
            Fault::KillOne | Fault::KillTwo => {
                let victims = match fault {
                    Fault::KillOne => vec![rng.below(5)],
                    _ => followers_of_a_shard(&nodes, shards, &mut rng).await,
                };
                for &v in &victims {
                    set_url(v, None);
                    nodes[v].kill9();
                }
                tokio::time::sleep(Duration::from_millis(2000 + rng.below(3000) as u64)).await;
                for &v in &victims {
                    tokio::task::block_in_place(|| nodes[v].start_again());
                    set_url(v, Some(nodes[v].url.clone()));
                }
                done.push(format!(
                    "{fault:?} {:?}",
                    victims.iter().map(|v| v + 1).collect::<Vec<_>>()
                ));
            }
            Fault::StopLeader => {
                let v = busiest_leader(&nodes).await - 1;
                set_url(v, None);
                nodes[v].signal("STOP");
                tokio::time::sleep(Duration::from_millis(2000 + rng.below(2000) as u64)).await;
                nodes[v].signal("CONT");
                set_url(v, Some(nodes[v].url.clone()));
                done.push(format!("{fault:?} {}", v + 1));
            }
            Fault::RollingRestart => {
                for v in 0..nodes.len() {
                    set_url(v, None);
                    let clean = tokio::task::block_in_place(|| nodes[v].terminate());
                    assert!(clean, "node {} did not stop cleanly on SIGTERM", v + 1);
                    tokio::task::block_in_place(|| nodes[v].start_again());
                    set_url(v, Some(nodes[v].url.clone()));
                    let refs: Vec<&Server> = nodes.iter().collect();
                    wait_cluster_ready(&refs, TOKEN, shards).await;
                }
                done.push(format!("{fault:?}"));
            }
        }
    }
    // Healed: every node up and every shard led. The clients stop.
    let refs: Vec<&Server> = nodes.iter().collect();
    wait_cluster_ready(&refs, TOKEN, shards).await;
    let healed = Instant::now();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in workers {
        w.await.expect("client");
    }
    let mut s = std::sync::Arc::try_unwrap(shared)
        .ok()
        .expect("clients ended")
        .into_inner()
        .expect("shared");
    println!(
        "faults {done:?} in {:?}; {} tasks acknowledged, {} polls, {} cancels acknowledged, \
         {} requests unanswered or -32603",
        started.elapsed(),
        s.created.len(),
        s.polls,
        s.cancelled.len(),
        s.unavailable
    );
    assert!(s.violations.is_empty(), "rules broken: {:#?}", s.violations);
    assert!(s.created.len() > 20, "too little load: {}", s.created.len());

    // Liveness: every acknowledged task ends within its time plus the bound. Polled in rounds
    // through every node, all tasks still open each round.
    let mut clients = vec![];
    for n in &nodes {
        clients.push(connect(n).await);
    }
    let mut open: Vec<String> = s.created.keys().cloned().collect();
    open.sort();
    let mut finals: Vec<(String, Value)> = vec![];
    let mut last_done = Duration::ZERO;
    while !open.is_empty() {
        let mut round = vec![];
        for chunk in open.chunks(64) {
            let polls = chunk.iter().enumerate().map(|(i, id)| {
                let c = &clients[i % clients.len()];
                async move {
                    let t0 = Instant::now();
                    let t = get_eventually(c, id).await;
                    (id.clone(), t0, Instant::now(), t)
                }
            });
            round.extend(futures::future::join_all(polls).await);
        }
        open.clear();
        for (id, t0, t1, t) in round {
            s.history.observe(&id, t0, t1, &t);
            if taskmesh_testkit::is_terminal(&t) {
                finals.push((id, t));
                last_done = healed.elapsed();
                continue;
            }
            let seconds = s.created[&id].1;
            assert!(
                healed.elapsed() < LIVENESS_BOUND + Duration::from_secs_f64(seconds),
                "task {id} ({seconds} s) not finished {:?} after the cluster healed: {t}",
                healed.elapsed()
            );
            open.push(id);
        }
        if !open.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    for (id, t) in &finals {
        let (label, seconds) = s.created[id].clone();
        match t["status"].as_str() {
            Some("completed") => {
                assert!(
                    !s.cancelled.contains(id),
                    "cancel of {id} acknowledged: {t}"
                );
                let r = clients[0].call("tasks/result", json!({"taskId": id})).await;
                assert_eq!(
                    r["result"]["content"][0]["text"],
                    format!("{label}: computed for {seconds} seconds"),
                    "task {id}: {r}"
                );
            }
            Some("cancelled") => {
                assert!(s.cancel_sent.contains(id), "{id} cancelled unasked: {t}");
            }
            _ => panic!("task {id} ended {t}"),
        }
    }
    // No execution is left running anywhere.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut live = vec![];
        for n in &nodes {
            live.push(status_of(n, TOKEN).await["liveTasks"].as_u64().unwrap_or(0));
        }
        if live.iter().all(|l| *l == 0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "executions still running: {live:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pairs = s.history.check();
    println!(
        "every task terminal {last_done:?} after healing; history: {pairs} ordered pairs of polls checked"
    );
    assert!(pairs > 0);
}
