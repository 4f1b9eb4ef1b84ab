//! Resumable streams (2025-11-25, SEP-1699): every SSE event has an id, a stream starts with a
//! priming event and a `retry`, a client whose connection dropped comes back with `GET` and
//! `Last-Event-ID` and gets what followed that event, once; an id the server cannot continue
//! has a documented answer.

use serde_json::{json, Value};
use taskmesh_testkit::{Client, Server, Sse};

use crate::TASKMESH;

/// The (stream, position) of an event id `NODE.STREAM.SEQ[.ORIGIN]`.
fn position(id: &str) -> (String, u64) {
    let parts: Vec<&str> = id.split('.').collect();
    assert!(parts.len() >= 3, "not an event id: {id}");
    (
        format!("{}.{}", parts[0], parts[1]),
        parts[2].parse().expect("decimal position"),
    )
}

/// The event ids of `reads` (the connections of one stream, in order) follow each other without
/// a gap or a repeat: the first connection from position 1, each later one from the position
/// after the last event the one before it read.
fn assert_contiguous(reads: &[&Sse]) {
    let mut expect: Option<(String, u64)> = None;
    for (n, sse) in reads.iter().enumerate() {
        for id in &sse.message_ids {
            let id = id.as_deref().expect("every message event has an id");
            let (stream, seq) = position(id);
            match &expect {
                None => assert_eq!(seq, 1, "the first message is at position 1: {id}"),
                Some((s, next)) => {
                    assert_eq!(&stream, s, "connection {n} reads another stream: {id}");
                    assert_eq!(seq, *next, "connection {n}: a gap or a repeat at {id}");
                }
            }
            expect = Some((stream, seq + 1));
        }
    }
}

/// The next server request on `sse`, keeping every message read in `seen`.
async fn next_request(sse: &mut Sse, seen: &mut Vec<Value>) -> Value {
    loop {
        let m = sse.next().await.expect("stream open");
        seen.push(m.clone());
        if m.get("method").is_some() && m.get("id").is_some() {
            return m;
        }
    }
}

fn request_ids(seen: &[Value]) -> Vec<Value> {
    seen.iter()
        .filter(|m| m.get("method").is_some() && m.get("id").is_some())
        .map(|m| m["id"].clone())
        .collect()
}

/// A GET stream cut while its task waits: the request sent while nobody read the stream comes
/// on the reconnection, the one read before the cut does not come again.
#[tokio::test]
async fn a_get_stream_cut_mid_task_resumes_with_nothing_lost_or_repeated() {
    let s = Server::start(TASKMESH, "");
    let c = Client::new_session(&s.url).await;
    let mut get = c.open_get().await;
    let id = c.start_task("multi_input", json!({})).await;
    let mut seen = vec![];
    let q1 = next_request(&mut get, &mut seen).await;
    assert_eq!(get.retry_ms, Some(1000), "the priming event gives retry");
    assert_eq!(q1["method"], "elicitation/create");
    c.answer(
        &q1["id"],
        json!({"action":"accept","content":{"name":"Ada"}}),
    )
    .await;
    let last = get.last_event_id.clone().expect("events have ids");
    get.close();

    // The second request is sent while no client reads the stream: it waits in it.
    let mut again = c.resume(&last).await;
    let q2 = next_request(&mut again, &mut seen).await;
    assert_ne!(q1["id"], q2["id"]);
    c.answer(
        &q2["id"],
        json!({"action":"accept","content":{"colour":"green"}}),
    )
    .await;
    loop {
        let m = again.next().await.expect("stream open");
        seen.push(m.clone());
        if m["method"] == "notifications/tasks/status" && m["params"]["status"] == "completed" {
            assert_eq!(m["params"]["taskId"], json!(id));
            break;
        }
    }
    assert_eq!(request_ids(&seen), vec![q1["id"].clone(), q2["id"].clone()]);
    assert_contiguous(&[&get, &again]);
    let first = c.resume(&last).await; // a third connection takes the stream over
    drop(first);
    assert!(
        again.next().await.is_none(),
        "the newer reader took the stream"
    );
}

/// A `tasks/result` stream cut after its request was read: the reconnection carries the
/// result, and not the request again.
#[tokio::test]
async fn a_tasks_result_stream_cut_mid_task_resumes_with_its_result() {
    let s = Server::start(TASKMESH, "");
    let c = Client::new_session(&s.url).await;
    let id = c
        .start_task("confirm_delete", json!({"filename": "a"}))
        .await;
    c.wait_status(&id, "input_required").await;
    let (rid, mut first) = c.open_stream("tasks/result", json!({"taskId": id})).await;
    let q = first.next().await.expect("the request");
    assert_eq!(q["method"], "elicitation/create");
    let last = first.last_event_id.clone().expect("events have ids");
    first.close();
    c.answer(&q["id"], json!({"action":"decline"})).await;

    let mut second = c.resume(&last).await;
    let mut seen = vec![];
    let resp = loop {
        let m = second.next().await.expect("the result follows");
        seen.push(m.clone());
        if m["id"] == json!(rid) {
            break m;
        }
    };
    assert!(
        request_ids(&seen).is_empty(),
        "the request came again: {seen:?}"
    );
    let text = resp["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("Kept a"), "{resp}");
    assert!(
        second.next().await.is_none(),
        "the stream ends after its result"
    );
    assert_contiguous(&[&first, &second]);
}

/// With `sse_max_stream_ms`, the server ends a long `tasks/result` connection on purpose after
/// a `retry` field; a client that reconnects with `Last-Event-ID` each time gets the result.
#[tokio::test]
async fn a_long_stream_closed_on_purpose_is_continued_by_reconnections() {
    let s = Server::start(
        TASKMESH,
        "[http]\nsse_max_stream_ms = 1000\nsse_retry_ms = 250\n",
    );
    let c = Client::new_session(&s.url).await;
    let id = c.start_task("slow_compute", json!({"seconds": 4})).await;
    let (rid, mut sse) = c.open_stream("tasks/result", json!({"taskId": id})).await;
    let mut connections = 1;
    // As an EventSource does, the client keeps the last id it saw across connections.
    let mut last = None;
    let resp = loop {
        let m = sse.next().await;
        if sse.last_event_id.is_some() {
            last.clone_from(&sse.last_event_id);
        }
        match m {
            Some(m) if m["id"] == json!(rid) => break m,
            Some(m) => panic!("unexpected message {m}"),
            None => {
                assert_eq!(sse.retry_ms, Some(250), "the close says when to come back");
                assert!(connections < 20, "the result never came");
                let last = last.as_deref().expect("the priming event has an id");
                sse = c.resume(last).await;
                connections += 1;
            }
        }
    };
    assert!(connections >= 2, "a 4 s task outlives a 1 s connection");
    assert_eq!(
        resp["result"]["content"][0]["text"],
        "slow_compute: computed for 4 seconds"
    );
}

/// A tool may have the connection of its plain call closed on purpose mid-call (the
/// conformance set's `test_reconnection`): the stream primes, closes with its `retry`, and the
/// reconnection with the priming id gets the answer, once.
#[tokio::test]
async fn a_plain_call_s_connection_closed_mid_call_is_resumed_with_its_answer() {
    let s = Server::start(
        TASKMESH,
        "[tools]\nconformance = true\n[http]\nsse_retry_ms = 300\n",
    );
    let c = Client::new_session(&s.url).await;
    let (rid, mut sse) = c
        .open_stream(
            "tools/call",
            json!({"name": "test_reconnection", "arguments": {}}),
        )
        .await;
    assert_eq!(sse.next().await, None, "closed before the answer");
    assert_eq!(sse.retry_ms, Some(300), "the close says when to come back");
    let last = sse
        .last_event_id
        .clone()
        .expect("the priming event has an id");
    let mut again = c.resume(&last).await;
    let resp = again.next().await.expect("the answer");
    assert_eq!(resp["id"], json!(rid), "{resp}");
    assert_eq!(
        resp["result"]["content"][0]["text"],
        "Reconnection test completed"
    );
    assert_eq!(
        again.next().await,
        None,
        "nothing more, and no second close"
    );
}

/// A `Last-Event-ID` that is not an id this server sent is refused and changes nothing.
#[tokio::test]
async fn a_foreign_last_event_id_is_refused() {
    let s = Server::start(TASKMESH, "");
    let c = Client::new_session(&s.url).await;
    for bad in ["nonsense", "1.2", "1.2.x", "1.2.3.not-base64!"] {
        let (status, body) = c.try_resume(bad).await.err().expect("refused");
        assert_eq!(status, 400, "{bad}");
        assert!(body.contains("Last-Event-ID"), "{bad}: {body}");
    }
    // The session still works.
    assert!(c.ok("tools/list", json!({})).await["tools"].is_array());
}

/// A node that lost its streams (here: killed and restarted) answers a reconnection it cannot
/// continue: a `tasks/result` stream's id is answered with that request's result, a GET
/// stream's id with a new GET stream.
#[tokio::test]
async fn a_stream_lost_with_its_node_is_answered_again() {
    let mut s = Server::start(TASKMESH, "");
    let mut c = Client::new_session(&s.url).await;
    let id = c
        .start_task("confirm_delete", json!({"filename": "b"}))
        .await;
    c.wait_status(&id, "input_required").await;
    let (rid, mut sse) = c.open_stream("tasks/result", json!({"taskId": id})).await;
    let q = sse.next().await.expect("the request");
    let last = sse.last_event_id.clone().expect("events have ids");
    drop(sse);
    c.answer(
        &q["id"],
        json!({"action":"accept","content":{"confirm":true}}),
    )
    .await;
    c.wait_status(&id, "completed").await;

    s.kill9_and_restart();
    c.url = s.url.clone();
    let mut again = c.resume(&last).await;
    let resp = again.next().await.expect("the result");
    assert_eq!(resp["id"], json!(rid));
    assert_eq!(resp["result"]["content"][0]["text"], "Deleted b");

    // An id of a GET stream this node does not hold: a new GET stream, which carries requests.
    let (node, _) = position(&last);
    let node = node.split('.').next().unwrap().to_string();
    let mut get = c.resume(&format!("{node}.1.0")).await;
    let id = c
        .start_task("confirm_delete", json!({"filename": "c"}))
        .await;
    let q = next_request(&mut get, &mut vec![]).await;
    assert_eq!(
        q["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        json!(id)
    );
}
