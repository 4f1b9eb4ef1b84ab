//! Tasks in the other direction across a failover: a tool's sampling request runs as the
//! client's task; the leader of the server task's shard is killed (kill -9) while the client
//! task is pending; the new leader's execution (`ask_model` is run again by its resume policy)
//! follows the same client task, recorded through the shard's log, rather than ask again, and
//! the server task completes once the client's task does.

use serde_json::{json, Value};
use taskmesh_testkit::{Client, Sse, V};

use crate::{leader_of, ready_cluster_with_tasks, shards, TOKEN};

async fn next_request(get: &mut Sse) -> Value {
    loop {
        let m = get.next().await.expect("the GET stream stays open");
        if m.get("method").is_some() && m.get("id").is_some() {
            return m;
        }
    }
}

fn client_task(status: &str) -> Value {
    json!({
        "taskId": "client-sampling-1",
        "status": status,
        "ttl": 120000,
        "createdAt": "2026-12-06T10:00:00.000Z",
        "lastUpdatedAt": "2026-12-06T10:00:01.000Z",
        "pollInterval": 60,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_task_is_followed_by_the_new_leader_after_a_kill() {
    let mut nodes = ready_cluster_with_tasks("client_poll_min_ms = 50").await;
    let caps = json!({
        "sampling": {},
        "tasks": {"list": {}, "cancel": {}, "requests": {"sampling": {"createMessage": {}}}},
    });

    // A task whose shard another node than the client's leads (so the client's session and
    // its GET stream outlive the kill); each try is a new task id, hence likely another shard.
    let mut found = None;
    for _ in 0..20 {
        let home = &nodes[1];
        let c = Client::connect(&home.url, Some(TOKEN), V, caps.clone()).await;
        let get = c.open_get().await;
        let id = c.start_task("ask_model", json!({"prompt": "6 x 7?"})).await;
        let leader = leader_of(home, taskmesh_task::shard_of(&id, shards())).await;
        if leader != 2 {
            found = Some((c, get, id, leader));
            break;
        }
        c.ok("tasks/cancel", json!({"taskId": id})).await;
    }
    let (c, mut get, id, leader) = found.expect("a task led by another node than the client's");

    let ask = next_request(&mut get).await;
    assert_eq!(ask["method"], "sampling/createMessage", "{ask}");
    assert!(ask["params"]["task"]["ttl"].as_u64().is_some(), "{ask}");
    c.answer(&ask["id"], json!({"task": client_task("working")}))
        .await;
    // Followed (recorded first): a poll comes, the client task still works.
    let poll = next_request(&mut get).await;
    assert_eq!(poll["method"], "tasks/get", "{poll}");
    assert_eq!(poll["params"]["taskId"], "client-sampling-1");
    c.answer(&poll["id"], client_task("working")).await;

    nodes[usize::try_from(leader).unwrap() - 1].kill9();

    // The new leader follows the same client task: it polls it (never asks the model again),
    // then fetches its result once it completed.
    let mut asked_again = false;
    let mut fetched = false;
    for _ in 0..200 {
        let m = next_request(&mut get).await;
        match m["method"].as_str().unwrap() {
            "tasks/get" => {
                assert_eq!(m["params"]["taskId"], "client-sampling-1", "{m}");
                c.answer(&m["id"], client_task("completed")).await;
            }
            "tasks/result" => {
                assert_eq!(m["params"]["taskId"], "client-sampling-1", "{m}");
                c.answer(
                    &m["id"],
                    json!({"role": "assistant", "content": {"type": "text", "text": "42"},
                           "model": "test-model", "stopReason": "endTurn"}),
                )
                .await;
                fetched = true;
                break;
            }
            "sampling/createMessage" => asked_again = true,
            other => panic!("unexpected request {other}: {m}"),
        }
    }
    assert!(fetched, "the client task's result was never fetched");
    assert!(
        !asked_again,
        "the model was asked again instead of the client task followed"
    );
    let done = c.wait_status(&id, "completed").await;
    assert_eq!(done["status"], "completed");
    let r = c.ok("tasks/result", json!({"taskId": id})).await;
    assert_eq!(r["content"][0]["text"], "The model said: 42", "{r}");
}

/// The same through the Rust client library (`taskmesh-client` with
/// `Options::run_requests_as_tasks`): it declares the capabilities, answers `ask_model`'s
/// sampling request with a task of its own at once, and hands the request to the caller; the
/// leader of the server task's shard is killed before the caller answers; the new leader
/// follows the client's task and the server task completes with the caller's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_library_runs_a_sampling_request_as_its_task_across_a_kill() {
    use taskmesh_client::{CallEvent, Endpoint, HttpSpec, Options, Polling, Step};

    let mut nodes = ready_cluster_with_tasks("client_poll_min_ms = 50").await;
    let opts = Options {
        run_requests_as_tasks: true,
        ..Options::default()
    };
    let endpoint = Endpoint::Http(HttpSpec::new(nodes[1].url.clone()).with_bearer(TOKEN));
    let client = taskmesh_client::Client::connect(&endpoint, &opts)
        .await
        .expect("connect");
    let raw = Client::connect(&nodes[1].url, Some(TOKEN), V, json!({})).await;
    let polling = Polling {
        min: std::time::Duration::from_millis(50),
        ..Polling::default()
    };

    // A task led by another node than the client's (node 2).
    let mut found = None;
    for _ in 0..20 {
        let args = json!({"prompt": "6 x 7?"}).as_object().unwrap().clone();
        let call = client
            .call_tool_as_task("ask_model", args, None, &[], polling)
            .await
            .expect("a task");
        let id = call.task_id().to_string();
        let leader = leader_of(&nodes[1], taskmesh_task::shard_of(&id, shards())).await;
        if leader != 2 {
            found = Some((call, id, leader));
            break;
        }
        raw.ok("tasks/cancel", json!({"taskId": id})).await;
    }
    let (mut call, id, leader) = found.expect("a task led by another node than the client's");

    // The request reaches the caller as any other; the server meanwhile follows the task the
    // library made of it.
    let (params, reply) = loop {
        match call.next().await {
            Step::Event(CallEvent::Request {
                method,
                params,
                reply,
            }) => {
                assert_eq!(method, "sampling/createMessage");
                break (params, reply);
            }
            Step::Event(_) => {}
            Step::Done(r) => panic!("the task ended before it asked: {r:?}"),
        }
    };
    assert!(params["task"]["ttl"].as_u64().is_some(), "{params}");
    // Recorded with the server task before it is followed.
    let mut waiting = json!(null);
    for _ in 0..200 {
        waiting = raw.ok("tasks/get", json!({"taskId": id})).await;
        if waiting["statusMessage"]
            .as_str()
            .is_some_and(|m| m.contains("client's task"))
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(waiting["status"], "input_required", "{waiting}");
    assert!(
        waiting["statusMessage"]
            .as_str()
            .is_some_and(|m| m.contains("client's task")),
        "{waiting}"
    );

    nodes[usize::try_from(leader).unwrap() - 1].kill9();
    // The caller answers after the kill; the new leader takes the answer from the client task.
    reply
        .send(Ok(
            json!({"role": "assistant", "content": {"type": "text", "text": "42"},
                        "model": "rust-model", "stopReason": "endTurn"}),
        ))
        .unwrap();
    let outcome = loop {
        match call.next().await {
            Step::Event(CallEvent::Request { method, .. }) => {
                panic!("asked again ({method}) instead of following the client's task")
            }
            Step::Event(_) => {}
            Step::Done(r) => break r,
        }
    };
    let result = outcome.expect("the task's result");
    assert_eq!(
        result["content"][0]["text"], "The model said: 42",
        "{result}"
    );
    assert_eq!(
        raw.wait_status(&id, "completed").await["status"],
        "completed"
    );
}
