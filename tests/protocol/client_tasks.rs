//! Tasks in the other direction (2025-11-25): taskmesh as the requestor of its client's tasks.
//! A client that declared `tasks.requests.elicitation.create` gets the tool's elicitation
//! task-augmented; answered with a `CreateTaskResult`, the server task records the client's
//! task, stays `input_required` and follows it with `tasks/get` (at the client's
//! `pollInterval`), then takes the answer from `tasks/result`. The client here is the raw test
//! client answering on its GET stream as a task receiver would.

use serde_json::{json, Value};
use taskmesh_testkit::{Client, Server, Sse, V};

use crate::TASKMESH;

/// Client tasks polled at least every 50 ms; their TTL asked as 120 s.
const CONFIG: &str = "[tasks]\nclient_poll_min_ms = 50\nclient_task_ttl_ms = 120000\n";

/// A client that runs elicitations as its own tasks.
async fn receiver(s: &Server) -> Client {
    let caps = json!({
        "elicitation": {},
        "tasks": {"list": {}, "cancel": {}, "requests": {"elicitation": {"create": {}}}},
    });
    Client::connect(&s.url, None, V, caps).await
}

/// The next request of `method` the server sends on `get`.
async fn next_request(get: &mut Sse, method: &str) -> Value {
    loop {
        let m = get.next().await.expect("the GET stream stays open");
        if m["method"] == method {
            return m;
        }
    }
}

/// A client task as `tasks/get` and `CreateTaskResult` show it.
fn client_task(id: &str, status: &str, message: Option<&str>) -> Value {
    let mut t = json!({
        "taskId": id,
        "status": status,
        "ttl": 120000,
        "createdAt": "2026-12-06T10:00:00.000Z",
        "lastUpdatedAt": "2026-12-06T10:00:01.000Z",
        "pollInterval": 60,
    });
    if let Some(m) = message {
        t["statusMessage"] = json!(m);
    }
    t
}

#[tokio::test]
async fn an_elicitation_runs_as_the_client_s_task_and_its_result_resumes_the_tool() {
    let s = Server::start(TASKMESH, CONFIG);
    let c = receiver(&s).await;
    let mut get = c.open_get().await;
    let id = c
        .start_task("confirm_delete", json!({"filename": "report.pdf"}))
        .await;

    // The elicitation comes task-augmented, with the TTL the server chose.
    let ask = next_request(&mut get, "elicitation/create").await;
    assert_eq!(ask["params"]["task"], json!({"ttl": 120000}), "{ask}");
    assert_eq!(
        ask["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id.as_str()
    );
    c.answer(
        &ask["id"],
        json!({"task": client_task("client-1", "working", None)}),
    )
    .await;

    // Followed: the server task waits, naming the client's task, and polls it.
    let poll = next_request(&mut get, "tasks/get").await;
    assert_eq!(poll["params"]["taskId"], "client-1", "{poll}");
    let waiting = c.ok("tasks/get", json!({"taskId": id})).await;
    assert_eq!(waiting["status"], "input_required", "{waiting}");
    assert!(
        waiting["statusMessage"]
            .as_str()
            .unwrap()
            .contains("client-1"),
        "{waiting}"
    );
    c.answer(
        &poll["id"],
        json!(client_task(
            "client-1",
            "input_required",
            Some("asking the user")
        )),
    )
    .await;
    let poll = next_request(&mut get, "tasks/get").await;
    c.answer(&poll["id"], client_task("client-1", "completed", None))
        .await;

    // Once terminal: its result is the elicitation's answer.
    let fetch = next_request(&mut get, "tasks/result").await;
    assert_eq!(fetch["params"]["taskId"], "client-1", "{fetch}");
    c.answer(
        &fetch["id"],
        json!({
            "action": "accept",
            "content": {"confirm": true},
            "_meta": {"io.modelcontextprotocol/related-task": {"taskId": "client-1"}},
        }),
    )
    .await;
    let done = c.wait_status(&id, "completed").await;
    assert_eq!(done["status"], "completed");
    let r = c.ok("tasks/result", json!({"taskId": id})).await;
    assert!(
        r["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("report.pdf"),
        "{r}"
    );
    let metrics = taskmesh_testkit::metrics::metrics_of(&s.url, None).await;
    for event in ["created", "completed"] {
        let series = format!("taskmesh_client_tasks_total{{event=\"{event}\"}}");
        assert_eq!(
            taskmesh_testkit::metrics::sample(&metrics, &series),
            Some(1.0),
            "{series}: {metrics}"
        );
    }
}

#[tokio::test]
async fn a_failed_client_task_fails_the_server_task_with_a_message_that_says_so() {
    let s = Server::start(TASKMESH, CONFIG);
    let c = receiver(&s).await;
    let mut get = c.open_get().await;
    let id = c
        .start_task("confirm_delete", json!({"filename": "x"}))
        .await;
    let ask = next_request(&mut get, "elicitation/create").await;
    c.answer(
        &ask["id"],
        json!({"task": client_task("client-2", "working", None)}),
    )
    .await;
    let poll = next_request(&mut get, "tasks/get").await;
    c.answer(
        &poll["id"],
        client_task("client-2", "failed", Some("the user closed the form")),
    )
    .await;
    // Its result is read for the reason.
    let fetch = next_request(&mut get, "tasks/result").await;
    assert_eq!(fetch["params"]["taskId"], "client-2", "{fetch}");
    let body = json!({"jsonrpc": "2.0", "id": fetch["id"], "error": {"code": -32603, "message": "form closed"}});
    assert_eq!(c.post(&body.to_string(), &[]).await.status, 202);
    let failed = c.wait_status(&id, "failed").await;
    let message = failed["statusMessage"].as_str().unwrap();
    assert!(
        message.contains("client-2")
            && message.contains("failed")
            && message.contains("the user closed the form")
            && message.contains("form closed"),
        "{failed}"
    );
}

#[tokio::test]
async fn a_client_task_the_client_no_longer_knows_fails_the_server_task() {
    let s = Server::start(TASKMESH, CONFIG);
    let c = receiver(&s).await;
    let mut get = c.open_get().await;
    let id = c
        .start_task("confirm_delete", json!({"filename": "y"}))
        .await;
    let ask = next_request(&mut get, "elicitation/create").await;
    c.answer(
        &ask["id"],
        json!({"task": client_task("client-3", "working", None)}),
    )
    .await;
    let poll = next_request(&mut get, "tasks/get").await;
    let body = json!({"jsonrpc": "2.0", "id": poll["id"], "error": {"code": -32602, "message": "Task not found"}});
    assert_eq!(c.post(&body.to_string(), &[]).await.status, 202);
    let failed = c.wait_status(&id, "failed").await;
    let message = failed["statusMessage"].as_str().unwrap();
    assert!(
        message.contains("client-3") && message.contains("no longer knows"),
        "{failed}"
    );
}

#[tokio::test]
async fn a_client_that_does_not_run_tasks_gets_a_plain_request_and_may_answer_plainly() {
    let s = Server::start(TASKMESH, CONFIG);
    // Without tasks.requests: a plain request.
    let c = Client::new_session(&s.url).await;
    let mut get = c.open_get().await;
    let id = c
        .start_task("confirm_delete", json!({"filename": "z"}))
        .await;
    let ask = next_request(&mut get, "elicitation/create").await;
    assert!(ask["params"].get("task").is_none(), "{ask}");
    c.answer(
        &ask["id"],
        json!({"action": "accept", "content": {"confirm": false}}),
    )
    .await;
    c.wait_status(&id, "completed").await;

    // A receiver may still answer a task-augmented request with the plain result.
    let c = receiver(&s).await;
    let mut get = c.open_get().await;
    let id = c
        .start_task("confirm_delete", json!({"filename": "w"}))
        .await;
    let ask = next_request(&mut get, "elicitation/create").await;
    assert!(ask["params"].get("task").is_some(), "{ask}");
    c.answer(
        &ask["id"],
        json!({"action": "accept", "content": {"confirm": false}}),
    )
    .await;
    c.wait_status(&id, "completed").await;
}

/// The Rust client library as the receiver (`Options::run_requests_as_tasks`): `confirm_delete`'s
/// elicitation comes task-augmented, the library answers it with a task of its own and hands
/// the request to the caller, whose answer completes that task and then the server's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_library_runs_an_elicitation_as_its_task() {
    use taskmesh_client::{CallEvent, Endpoint, HttpSpec, Options, Polling, Step};

    let s = Server::start(TASKMESH, CONFIG);
    let opts = Options {
        run_requests_as_tasks: true,
        ..Options::default()
    };
    let client =
        taskmesh_client::Client::connect(&Endpoint::Http(HttpSpec::new(s.url.clone())), &opts)
            .await
            .expect("connect");
    let args = json!({"filename": "lib.txt"}).as_object().unwrap().clone();
    let mut call = client
        .call_tool_as_task("confirm_delete", args, None, &[], Polling::default())
        .await
        .expect("a task");
    let outcome = loop {
        match call.next().await {
            Step::Event(CallEvent::Request {
                method,
                params,
                reply,
            }) => {
                assert_eq!(method, "elicitation/create");
                assert_eq!(params["task"], json!({"ttl": 120000}), "{params}");
                reply
                    .send(Ok(
                        json!({"action": "accept", "content": {"confirm": true}}),
                    ))
                    .unwrap();
            }
            Step::Event(_) => {}
            Step::Done(r) => break r,
        }
    };
    let result = outcome.expect("the task's result");
    assert_eq!(result["content"][0]["text"], "Deleted lib.txt", "{result}");
}

/// The client library's request callback (`Client::on_request`) answers the server's requests,
/// plain and run as the client's tasks alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_library_answers_requests_by_callback() {
    use futures::FutureExt;
    use taskmesh_client::{Endpoint, HttpSpec, Options, Polling, Step};

    let s = Server::start(TASKMESH, CONFIG);
    for as_tasks in [false, true] {
        let opts = Options {
            run_requests_as_tasks: as_tasks,
            ..Options::default()
        };
        let client =
            taskmesh_client::Client::connect(&Endpoint::Http(HttpSpec::new(s.url.clone())), &opts)
                .await
                .expect("connect");
        let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
        let seen = asked.clone();
        client.on_request(std::sync::Arc::new(move |method, params| {
            seen.lock()
                .unwrap()
                .push(json!({"method": method, "task": params.get("task")}));
            async move { Ok(json!({"action": "accept", "content": {"confirm": true}})) }.boxed()
        }));
        let args = json!({"filename": "cb.txt"}).as_object().unwrap().clone();
        let mut call = client
            .call_tool_as_task("confirm_delete", args, None, &[], Polling::default())
            .await
            .expect("a task");
        let outcome = loop {
            if let Step::Done(r) = call.next().await {
                break r;
            }
        };
        let result = outcome.expect("the task's result");
        assert_eq!(result["content"][0]["text"], "Deleted cb.txt", "{result}");
        let asked = asked.lock().unwrap().clone();
        assert_eq!(asked.len(), 1, "{asked:?}");
        assert_eq!(asked[0]["method"], "elicitation/create");
        assert_eq!(asked[0]["task"].is_object(), as_tasks, "{asked:?}");
    }
}

/// A server task cancelled while it waits on the client's task: the client is asked to cancel
/// that task (`tasks/cancel`), and the server task stays cancelled.
#[tokio::test]
async fn a_cancelled_server_task_cancels_the_client_s_task() {
    let s = Server::start(TASKMESH, CONFIG);
    let c = receiver(&s).await;
    let mut get = c.open_get().await;
    let id = c
        .start_task("confirm_delete", json!({"filename": "q"}))
        .await;
    let ask = next_request(&mut get, "elicitation/create").await;
    c.answer(
        &ask["id"],
        json!({"task": client_task("client-4", "working", None)}),
    )
    .await;
    // Followed.
    let poll = next_request(&mut get, "tasks/get").await;
    assert_eq!(poll["params"]["taskId"], "client-4");
    let cancelled = c.ok("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(cancelled["status"], "cancelled");
    let cancel = next_request(&mut get, "tasks/cancel").await;
    assert_eq!(cancel["params"]["taskId"], "client-4", "{cancel}");
    c.answer(&cancel["id"], client_task("client-4", "cancelled", None))
        .await;
    assert_eq!(c.status(&id).await, "cancelled");
}

/// The client library follows a task by polling, and a `notifications/tasks/status` on its
/// GET stream cuts the pause short: with a poll every 30 s, a one-second task's result comes
/// long before the second poll would have been sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_notification_wakes_the_client_library_s_poll() {
    use taskmesh_client::{Endpoint, HttpSpec, Options, Polling, Step};

    let s = Server::start(TASKMESH, CONFIG);
    let client = taskmesh_client::Client::connect(
        &Endpoint::Http(HttpSpec::new(s.url.clone())),
        &Options::default(),
    )
    .await
    .expect("connect");
    let slow = std::time::Duration::from_secs(30);
    let polling = Polling {
        min: slow,
        max: slow,
        default: slow,
    };
    let args = json!({"seconds": 1, "label": "woken"})
        .as_object()
        .unwrap()
        .clone();
    let mut call = client
        .call_tool_as_task("slow_compute", args, None, &[], polling)
        .await
        .expect("a task");
    let outcome = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        loop {
            if let Step::Done(r) = call.next().await {
                break r;
            }
        }
    })
    .await
    .expect("the status notification made the follower poll before its 30 s pause ended");
    let result = outcome.expect("the task's result");
    assert_eq!(
        result["content"][0]["text"],
        "woken: computed for 1 seconds"
    );
}
