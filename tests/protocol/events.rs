//! The events extension on protocol 2026-07-28: `events/list`, `events/poll` and
//! `events/stream` of `taskmesh.task.updated`, against a real server: every status change of
//! the caller's tasks once, in each task's order, page by page and through a stream resumed
//! by its cursor; the filters; another principal's tasks never; a gap told as `truncated`; the
//! draft's errors.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde_json::{json, Value};
use taskmesh_testkit::modern::Modern;
use taskmesh_testkit::{Server, Sse};

use super::{AUTH, TASKMESH};

const EVENT: &str = "taskmesh.task.updated";
const SUBSCRIPTION: &str = "io.modelcontextprotocol/subscriptionId";

fn client(url: &str, token: &str) -> Modern {
    let mut m = Modern::new(url, Some(token), true);
    m.elicitation = true;
    m
}

/// Run `confirm_delete` to its end, accepting its question: working, input_required,
/// working, completed.
async fn asked_and_answered(m: &Modern) -> String {
    let id = m
        .start("confirm_delete", json!({"filename": "a.txt"}))
        .await;
    for _ in 0..600 {
        let t = m.ok("tasks/get", json!({"taskId": id})).await;
        if t["status"] == "input_required" {
            let key = t["inputRequests"]
                .as_object()
                .and_then(|r| r.keys().next().cloned())
                .expect("a request");
            m.ok(
                "tasks/update",
                json!({"taskId": id, "inputResponses": {key: {"action": "accept", "content": {"confirm": true}}}}),
            )
            .await;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(m.until_terminal(&id).await["status"], "completed");
    id
}

/// Every event after `cursor`, `max` per poll, polling while `hasMore`; the events and the
/// cursor reached.
async fn drain(m: &Modern, args: Value, cursor: &str, max: u64) -> (Vec<Value>, String, bool) {
    let mut cursor = cursor.to_string();
    let mut events = Vec::new();
    let mut truncated = false;
    for _ in 0..1_000 {
        let r = m
            .ok(
                "events/poll",
                json!({"name": EVENT, "arguments": args, "cursor": cursor, "maxEvents": max}),
            )
            .await;
        assert_eq!(r["resultType"], "complete", "{r}");
        assert!(r["nextPollMs"].as_u64().is_some_and(|n| n > 0), "{r}");
        let page = r["events"].as_array().expect("events");
        assert!(page.len() as u64 <= max, "{r}");
        events.extend(page.iter().cloned());
        truncated |= r["truncated"] == true;
        cursor = r["cursor"].as_str().expect("a cursor").to_string();
        if r["hasMore"] != true {
            return (events, cursor, truncated);
        }
    }
    panic!("the poll never ran out of events");
}

/// A poll with a null cursor: no event, the cursor of now.
async fn now(m: &Modern, args: Value) -> String {
    let r = m
        .ok(
            "events/poll",
            json!({"name": EVENT, "arguments": args, "cursor": null}),
        )
        .await;
    assert_eq!(r["events"], json!([]), "{r}");
    assert_eq!(
        (&r["truncated"], &r["hasMore"]),
        (&json!(false), &json!(false)),
        "{r}"
    );
    r["cursor"].as_str().expect("a cursor").to_string()
}

/// (task id, status) of each event, checking its shape.
fn changes(events: &[Value]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| {
            assert_eq!(e["name"], EVENT, "{e}");
            let task = e["data"]["taskId"].as_str().expect("data.taskId");
            let id = e["eventId"].as_str().expect("eventId");
            assert!(id.starts_with(&format!("{task}-")), "{e}");
            assert!(
                e["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')),
                "{e}"
            );
            (
                task.to_string(),
                e["data"]["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn events_poll_gives_each_change_of_the_caller_s_tasks_once() {
    let s = Server::start(TASKMESH, &format!("[tools]\nconformance = true\n{AUTH}"));
    let alice = client(&s.url, "alice-token-1");
    let bob = client(&s.url, "bob-token-22");

    let d = alice.ok("server/discover", json!({})).await;
    assert_eq!(
        d["capabilities"]["extensions"]["io.modelcontextprotocol/events"],
        json!({}),
        "{d}"
    );
    let l = alice.ok("events/list", json!({})).await;
    assert_eq!(l["resultType"], "complete");
    let types = l["events"].as_array().unwrap();
    assert_eq!(types.len(), 1, "{l}");
    assert_eq!(types[0]["name"], EVENT);
    assert_eq!(types[0]["delivery"], json!(["webhook", "poll", "push"]));
    assert_eq!(
        types[0]["inputSchema"]["properties"]
            .as_object()
            .map(|p| p.keys().cloned().collect::<Vec<_>>()),
        Some(vec!["taskId".to_string(), "terminalOnly".to_string()])
    );

    let start = now(&alice, json!({})).await;
    let bob_start = now(&bob, json!({})).await;
    let ended = now(&alice, json!({"terminalOnly": true})).await;

    // Alice's tasks: one asks and is answered, eight complete, one ends in a tool error (read
    // `completed` on this generation), one fails, one is cancelled.
    let asked = asked_and_answered(&alice).await;
    let mut done = Vec::new();
    for _ in 0..8 {
        done.push(alice.start("slow_compute", json!({"seconds": 0})).await);
    }
    let tool_error = alice.start("failing_job", json!({})).await;
    let failed = alice.start("protocol_error_job", json!({})).await;
    let cancelled = alice.start("slow_compute", json!({"seconds": 30})).await;
    alice.ok("tasks/cancel", json!({"taskId": cancelled})).await;
    for id in done.iter().chain([&failed, &tool_error]) {
        alice.until_terminal(id).await;
    }
    // Bob's one task.
    let bobs = bob.start("slow_compute", json!({"seconds": 0})).await;
    bob.until_terminal(&bobs).await;

    // Two at a time, every change once.
    let (events, cursor, truncated) = drain(&alice, json!({}), &start, 2).await;
    assert!(!truncated);
    let got = changes(&events);
    let ids: HashSet<&str> = events
        .iter()
        .map(|e| e["eventId"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), events.len(), "an event twice: {got:?}");
    let mut by_task: HashMap<&str, Vec<&str>> = HashMap::new();
    for (t, st) in &got {
        by_task.entry(t).or_default().push(st);
    }
    assert_eq!(
        by_task.get(asked.as_str()),
        Some(&vec!["input_required", "working", "completed"]),
        "{got:?}"
    );
    for id in &done {
        assert_eq!(
            by_task.get(id.as_str()),
            Some(&vec!["completed"]),
            "{got:?}"
        );
    }
    assert_eq!(by_task.get(failed.as_str()), Some(&vec!["failed"]));
    assert_eq!(by_task.get(tool_error.as_str()), Some(&vec!["completed"]));
    assert_eq!(by_task.get(cancelled.as_str()), Some(&vec!["cancelled"]));
    assert_eq!(by_task.len(), 12, "only alice's tasks: {got:?}");

    // The data is the task as tasks/get shows it at that change; the outcome once ended.
    for e in &events {
        let (t, st) = (&e["data"]["taskId"], &e["data"]["status"]);
        if *st == "completed" {
            let now = alice.ok("tasks/get", json!({"taskId": t})).await;
            assert_eq!(e["data"]["result"], now["result"], "{e}");
            assert_eq!(e["data"]["createdAt"], now["createdAt"], "{e}");
        }
        if *t == json!(tool_error) {
            assert_eq!(e["data"]["result"]["isError"], true, "{e}");
        }
        if *st == "failed" {
            assert!(e["data"]["error"]["code"].is_i64(), "{e}");
        }
        if *t == json!(asked) && *st == "input_required" {
            assert!(e["data"].get("result").is_none(), "{e}");
        }
    }

    // Nothing more after the cursor reached; the same events again from the start.
    let (more, _, _) = drain(&alice, json!({}), &cursor, 5).await;
    assert!(more.is_empty(), "{more:?}");
    let (again, _, _) = drain(&alice, json!({}), &start, 100).await;
    assert_eq!(changes(&again).len(), got.len());

    // The filters: the ends only; one task.
    let (ends, _, _) = drain(&alice, json!({"terminalOnly": true}), &ended, 3).await;
    assert_eq!(ends.len(), 12, "{:?}", changes(&ends));
    assert!(changes(&ends)
        .iter()
        .all(|(_, st)| ["completed", "failed", "cancelled"].contains(&st.as_str())));
    let one = now(&alice, json!({"taskId": asked})).await;
    let (none, _, _) = drain(&alice, json!({"taskId": asked}), &one, 3).await;
    assert!(none.is_empty());
    let (only, _, _) = drain(&alice, json!({"taskId": asked}), &start, 1).await;
    assert_eq!(
        changes(&only),
        vec![
            (asked.clone(), "input_required".to_string()),
            (asked.clone(), "working".to_string()),
            (asked.clone(), "completed".to_string())
        ]
    );

    // Bob sees his task only, and a task id of alice's is nothing to him.
    let (bob_events, _, _) = drain(&bob, json!({}), &bob_start, 10).await;
    assert_eq!(
        changes(&bob_events),
        vec![(bobs.clone(), "completed".to_string())]
    );
    let (foreign, _, _) = drain(&bob, json!({"taskId": asked}), &bob_start, 10).await;
    assert!(foreign.is_empty());

    // maxAgeMs: changes older than asked are skipped, and the poll says so.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let r = alice
        .ok(
            "events/poll",
            json!({"name": EVENT, "arguments": {}, "cursor": start, "maxAgeMs": 1}),
        )
        .await;
    assert_eq!(
        (&r["events"], &r["truncated"]),
        (&json!([]), &json!(true)),
        "{r}"
    );

    // The draft's errors (provisional codes), and nothing else answered.
    let errors = [
        (json!({"name": "mcp.other", "cursor": null}), -32023),
        (json!({"cursor": null}), -32602),
        (
            json!({"name": EVENT, "arguments": {"owner": "bob"}}),
            -32602,
        ),
        (json!({"name": EVENT, "arguments": {"taskId": 7}}), -32602),
        (json!({"name": EVENT, "arguments": []}), -32602),
        (json!({"name": EVENT, "cursor": "not-a-cursor"}), -32602),
        (json!({"name": EVENT, "cursor": "e1.gA"}), -32602),
        (
            json!({"name": EVENT, "cursor": cursor, "maxEvents": 0}),
            -32602,
        ),
        (
            json!({"name": EVENT, "cursor": cursor, "maxAgeMs": -1}),
            -32602,
        ),
    ];
    for (params, code) in errors {
        let a = alice.send("events/poll", params.clone()).await;
        assert_eq!((a.status, a.code()), (200, code), "{params}: {}", a.body);
        if code == -32023 {
            assert_eq!(a.body["error"]["data"]["kind"], "event", "{}", a.body);
        }
    }
}

#[tokio::test]
async fn a_poll_behind_the_kept_changes_is_told_it_missed_some() {
    let s = Server::start(TASKMESH, "shards = 1\n[events]\nretain_changes = 1\n");
    let m = Modern::new(&s.url, None, true);
    let start = now(&m, json!({})).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let id = m.start("slow_compute", json!({"seconds": 0})).await;
        m.until_terminal(&id).await;
        ids.push(id);
    }
    let (events, cursor, truncated) = drain(&m, json!({}), &start, 10).await;
    assert!(truncated, "two of three changes are no longer kept");
    assert_eq!(
        changes(&events),
        vec![(ids[2].clone(), "completed".to_string())]
    );
    let (after, _, truncated) = drain(&m, json!({}), &cursor, 10).await;
    assert!(after.is_empty() && !truncated);
}

/// The next message of an event stream, checking that it belongs to the stream (request 7).
async fn next(sse: &mut Sse) -> Value {
    let n = sse.next().await.expect("a stream message");
    assert_eq!(n["params"]["_meta"][SUBSCRIPTION], 7, "{n}");
    n
}

/// Stream messages until an event; the heartbeats met on the way are counted.
async fn next_event(sse: &mut Sse, beats: &mut usize) -> Value {
    loop {
        let n = next(sse).await;
        match n["method"].as_str() {
            Some("notifications/events/event") => return n["params"].clone(),
            Some("notifications/events/heartbeat") => {
                assert!(n["params"]["cursor"].is_string(), "{n}");
                *beats += 1;
            }
            _ => panic!("unexpected: {n}"),
        }
    }
}

/// Open an event stream; a refusal for too many streams is tried again (bounded: 10 s), as
/// the server frees the place of a stream whose client went when it notices.
async fn open(m: &Modern, params: Value) -> Sse {
    for _ in 0..200 {
        match m.open("events/stream", params.clone()).await {
            Ok(sse) => return sse,
            Err(a) if a.status == 429 => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(a) => panic!("refused: {} {}", a.status, a.body),
        }
    }
    panic!("the stream's place was never freed");
}

#[tokio::test]
async fn events_stream_pushes_each_change_and_resumes_from_its_cursor() {
    let s = Server::start(
        TASKMESH,
        "[events]\nstream_heartbeat_ms = 200\nmax_streams_per_principal = 2\n",
    );
    let m = Modern::new(&s.url, None, true);
    let mut sse = open(&m, json!({"name": EVENT, "arguments": {}, "cursor": null})).await;
    let active = next(&mut sse).await;
    assert_eq!(active["method"], "notifications/events/active", "{active}");
    assert_eq!(active["params"]["truncated"], false);
    assert!(active["params"]["cursor"].is_string());

    // Each task's end arrives as an event carrying the cursor after it.
    let mut beats = 0;
    let first = m.start("slow_compute", json!({"seconds": 0})).await;
    let e = next_event(&mut sse, &mut beats).await;
    assert_eq!(
        (&e["data"]["taskId"], &e["data"]["status"]),
        (&json!(first), &json!("completed")),
        "{e}"
    );
    let cursor = e["cursor"]
        .as_str()
        .expect("the cursor after it")
        .to_string();
    // A quiet stream beats.
    while beats == 0 {
        let n = next(&mut sse).await;
        assert_eq!(n["method"], "notifications/events/heartbeat", "{n}");
        beats += 1;
    }

    // Streams per principal are bounded.
    let second = m
        .open("events/stream", json!({"name": EVENT, "cursor": null}))
        .await
        .unwrap_or_else(|a| panic!("refused: {} {}", a.status, a.body));
    let third = m
        .open("events/stream", json!({"name": EVENT, "cursor": null}))
        .await
        .err()
        .expect("a third stream is refused");
    assert_eq!(third.status, 429, "{}", third.body);
    drop(second);

    // The client goes; a task ends meanwhile; a stream from the cursor gets that end only.
    drop(sse);
    let missed = m.start("slow_compute", json!({"seconds": 0})).await;
    m.until_terminal(&missed).await;
    let mut resumed = open(&m, json!({"name": EVENT, "cursor": cursor})).await;
    let active = next(&mut resumed).await;
    assert_eq!(
        (
            &active["method"],
            &active["params"]["cursor"],
            &active["params"]["truncated"]
        ),
        (
            &json!("notifications/events/active"),
            &json!(cursor),
            &json!(false)
        ),
        "{active}"
    );
    let e = next_event(&mut resumed, &mut beats).await;
    assert_eq!(e["data"]["taskId"], json!(missed), "{e}");

    // A bad request gets its error at once, and no stream.
    let bad = m
        .open("events/stream", json!({"name": "nope", "cursor": null}))
        .await
        .err()
        .expect("refused");
    assert_eq!(bad.code(), -32023, "{}", bad.body);
}
