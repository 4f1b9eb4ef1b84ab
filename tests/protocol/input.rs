//! input_required round trips: a task that asks its client (elicitation, sampling) through
//! tasks/result or the session's GET stream.

use serde_json::{json, Value};
use taskmesh_testkit::{Client, Server, V};

use crate::TASKMESH;

/// Drive a task that asks the client: poll until input_required, open tasks/result, answer each
/// request with `answers` in order, and return (requests seen, final response).
pub(crate) async fn drive_interactive(
    c: &Client,
    id: &str,
    answers: Vec<Value>,
) -> (Vec<Value>, Value) {
    c.wait_status(id, "input_required").await;
    let (rid, mut stream) = c.open_stream("tasks/result", json!({"taskId": id})).await;
    let mut answers = answers.into_iter();
    let mut requests = vec![];
    while let Some(m) = stream.next().await {
        if m["id"] == json!(rid) {
            return (requests, m);
        }
        if m.get("method").is_some() && m.get("id").is_some() {
            requests.push(m.clone());
            let a = answers.next().expect("more requests than answers");
            c.answer(&m["id"], a).await;
        }
    }
    panic!("tasks/result stream ended without a response");
}

#[tokio::test]
async fn input_required_round_trip_elicitation() {
    let s = Server::start(TASKMESH, "");
    let c = Client::new_session(&s.url).await;
    let id = c
        .start_task("confirm_delete", json!({"filename": "report.pdf"}))
        .await;
    let (reqs, resp) = drive_interactive(
        &c,
        &id,
        vec![json!({"action":"accept","content":{"confirm":true}})],
    )
    .await;
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0]["method"], "elicitation/create");
    assert_eq!(
        reqs[0]["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id
    );
    assert_eq!(
        reqs[0]["params"]["requestedSchema"]["properties"]["confirm"]["type"],
        "boolean"
    );
    assert_eq!(resp["result"]["content"][0]["text"], "Deleted report.pdf");
    assert_eq!(c.status(&id).await, "completed");
    // The wait for the answer is measured.
    let metrics = taskmesh_testkit::metrics::metrics_of(&s.url, None).await;
    assert!(
        metrics.contains("taskmesh_input_required_wait_seconds_count 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("taskmesh_inflight_requests 0\n"),
        "{metrics}"
    );

    // Two elicitations; the task returns to working between them.
    let id = c.start_task("multi_input", json!({})).await;
    c.wait_status(&id, "input_required").await;
    let (rid, mut stream) = c.open_stream("tasks/result", json!({"taskId": id})).await;
    let q1 = stream.next().await.unwrap();
    assert_eq!(q1["method"], "elicitation/create");
    c.answer(
        &q1["id"],
        json!({"action":"accept","content":{"name":"Ada"}}),
    )
    .await;
    let q2 = stream.next().await.unwrap();
    assert_eq!(q2["method"], "elicitation/create");
    assert_ne!(q1["id"], q2["id"]);
    c.answer(
        &q2["id"],
        json!({"action":"accept","content":{"colour":"green"}}),
    )
    .await;
    let fin = stream.next().await.unwrap();
    assert_eq!(fin["id"], json!(rid));
    assert_eq!(fin["result"]["content"][0]["text"], "Ada likes green");

    // A request still unanswered is delivered again to a new tasks/result reader.
    let id = c
        .start_task("confirm_delete", json!({"filename": "x"}))
        .await;
    c.wait_status(&id, "input_required").await;
    let (_, mut s1) = c.open_stream("tasks/result", json!({"taskId": id})).await;
    let q = s1.next().await.unwrap();
    drop(s1);
    let (reqs, resp) = drive_interactive(&c, &id, vec![json!({"action":"decline"})]).await;
    assert_eq!(reqs[0]["id"], q["id"]);
    assert!(resp["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("Kept"));
}

#[tokio::test]
async fn input_required_round_trip_sampling() {
    let s = Server::start(TASKMESH, "");
    let c = Client::new_session(&s.url).await;
    let id = c
        .start_task("ask_model", json!({"prompt": "What is 6 x 7?"}))
        .await;
    let (reqs, resp) = drive_interactive(
        &c,
        &id,
        vec![json!({"role":"assistant","content":{"type":"text","text":"42"},"model":"test-model","stopReason":"endTurn"})],
    )
    .await;
    assert_eq!(reqs[0]["method"], "sampling/createMessage");
    assert_eq!(
        reqs[0]["params"]["messages"][0]["content"]["text"],
        "What is 6 x 7?"
    );
    assert_eq!(
        reqs[0]["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id
    );
    assert_eq!(resp["result"]["content"][0]["text"], "The model said: 42");

    // A client without the sampling capability: the task fails with a statusMessage saying why.
    let plain = Client::connect(&s.url, None, V, json!({})).await;
    let id = plain.start_task("ask_model", json!({"prompt": "q"})).await;
    let g = plain.wait_status(&id, "failed").await;
    assert!(
        g["statusMessage"].as_str().unwrap().contains("sampling"),
        "{g}"
    );
}

#[tokio::test]
async fn input_required_request_reaches_the_get_stream() {
    let s = Server::start(TASKMESH, "");
    let c = Client::new_session(&s.url).await;
    let mut get = c.open_get().await;
    let id = c
        .start_task("confirm_delete", json!({"filename": "g"}))
        .await;
    let req = loop {
        let m = get.next().await.expect("GET stream open");
        if m["method"] == "elicitation/create" {
            break m;
        }
    };
    assert_eq!(
        req["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id
    );
    c.answer(
        &req["id"],
        json!({"action":"accept","content":{"confirm":false}}),
    )
    .await;
    let r = c.call("tasks/result", json!({"taskId": id})).await;
    assert!(r["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("Kept g"));
}

/// Read `stream` up to the response to `rid`, answering nothing; the server requests seen on the
/// way and the response.
async fn read_to_response(stream: &mut taskmesh_testkit::Sse, rid: i64) -> (Vec<Value>, Value) {
    let mut requests = vec![];
    while let Some(m) = stream.next().await {
        if m["id"] == json!(rid) {
            return (requests, m);
        }
        if m.get("method").is_some() && m.get("id").is_some() {
            requests.push(m);
        }
    }
    panic!("tasks/result stream ended without a response");
}

/// Each server request goes out on one stream only: a client with its GET stream open gets the
/// task's request there, and the `tasks/result` stream it opens on `input_required` does not
/// repeat it. Without a GET stream the `tasks/result` stream gets it (the round trips above).
#[tokio::test]
async fn a_server_request_goes_out_on_one_stream_only() {
    let s = Server::start(TASKMESH, "");
    let c = Client::new_session(&s.url).await;
    let mut get = c.open_get().await;
    let id = c
        .start_task("confirm_delete", json!({"filename": "h"}))
        .await;
    let req = loop {
        let m = get.next().await.expect("GET stream open");
        if m["method"] == "elicitation/create" {
            break m;
        }
    };
    c.wait_status(&id, "input_required").await;
    let (rid, mut stream) = c.open_stream("tasks/result", json!({"taskId": id})).await;
    c.answer(
        &req["id"],
        json!({"action":"accept","content":{"confirm":false}}),
    )
    .await;
    let (again, resp) = read_to_response(&mut stream, rid).await;
    assert!(
        again.is_empty(),
        "the request came again on tasks/result: {again:?}"
    );
    assert!(resp["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("Kept h"));
}

/// A request whose GET stream ended before it was answered is not lost: it goes out on the
/// task's `tasks/result` stream (the client may not have read it).
#[tokio::test]
async fn a_request_on_a_closed_get_stream_goes_to_tasks_result() {
    let s = Server::start(TASKMESH, "");
    let c = Client::new_session(&s.url).await;
    let mut get = c.open_get().await;
    let id = c
        .start_task("confirm_delete", json!({"filename": "k"}))
        .await;
    let first = loop {
        let m = get.next().await.expect("GET stream open");
        if m["method"] == "elicitation/create" {
            break m;
        }
    };
    drop(get);
    let (rid, mut stream) = c.open_stream("tasks/result", json!({"taskId": id})).await;
    let again = stream.next().await.expect("the request again");
    assert_eq!(again["id"], first["id"], "{again}");
    assert_eq!(again["method"], "elicitation/create");
    c.answer(
        &again["id"],
        json!({"action":"accept","content":{"confirm":false}}),
    )
    .await;
    let (more, resp) = read_to_response(&mut stream, rid).await;
    assert!(more.is_empty(), "{more:?}");
    assert!(resp["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("Kept k"));
}
