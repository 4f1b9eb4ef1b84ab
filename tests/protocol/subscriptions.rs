//! Webhook subscriptions that clients make (`events/subscribe`, `events/unsubscribe` on
//! protocol 2026-07-28), delivered to the example receiver, which verifies every message with
//! the Standard Webhooks library and answers the verification handshake: a new subscription
//! is verified first; it covers the principal's live tasks and those created after it, and no
//! other principal's; a refresh keeps the id, replaces the secret (the old one still signs
//! meanwhile) and grants the life again; an unsubscribe stops it; egress to addresses that are
//! not allowed is refused without anything sent; and the draft's errors. The receiver's
//! destination is held to 5 attempts a second: events wait their turn, none is lost.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};
use taskmesh_testkit::modern::Modern;
use taskmesh_testkit::python::{received, webhook_receiver, webhooks_venv};
use taskmesh_testkit::Server;

use crate::{AUTH, TASKMESH};

const EVENT: &str = "taskmesh.task.updated";

fn secret(byte: u8) -> String {
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode([byte; 32])
    )
}

/// The ends (task id, status) the receiver recorded for subscription `sub`, each verified by
/// the library (a refused message is a failure).
fn ends(out: &Path, sub: &str) -> BTreeSet<(String, String)> {
    received(out)
        .iter()
        .inspect(|l| assert!(l.get("refused").is_none(), "a message did not verify: {l}"))
        .filter(|l| l["subscription"] == sub && l.get("event").is_some())
        .map(|l| {
            let e = &l["event"];
            assert_eq!(e["name"], EVENT, "{l}");
            assert_eq!(l["id"], e["eventId"], "{l}");
            (
                e["data"]["taskId"].as_str().unwrap().to_string(),
                e["data"]["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Wait (bounded: 30 s) until `sub` got the end of each of `tasks`.
async fn until_ended(out: &Path, sub: &str, tasks: &[&String]) -> BTreeSet<(String, String)> {
    for _ in 0..600 {
        let got = ends(out, sub);
        let ended: BTreeSet<&String> = got.iter().map(|(t, _)| t).collect();
        if tasks.iter().all(|t| ended.contains(t)) {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "{sub} never got the ends of {tasks:?}: {:?}",
        ends(out, sub)
    );
}

fn subscribe_params(url: &str, secret: &str, arguments: Value) -> Value {
    json!({"name": EVENT, "arguments": arguments,
           "delivery": {"mode": "webhook", "url": url, "secret": secret}})
}

#[tokio::test]
async fn clients_subscribe_webhooks_that_are_verified_refreshed_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let python = webhooks_venv(Path::new(env!("CARGO_TARGET_TMPDIR")));
    let out = dir.path().join("events.jsonl");
    let receiver = webhook_receiver(&python, &secret(1), &out, None);
    let other_out = dir.path().join("other.jsonl");
    let other = webhook_receiver(&python, &secret(9), &other_out, None);
    let s = Server::start(
        TASKMESH,
        &format!(
            "[auth]\nstatus_principals = [\"alice\"]\n{AUTH}\n[events]\nallow_addresses = [\"127.0.0.0/8\"]\nhttp_hosts = [\"127.0.0.1\"]\nretry_base_ms = 200\nmax_subscriptions_per_principal = 3\nper_destination_per_second = 5\n"
        ),
    );
    let alice = Modern::new(&s.url, Some("alice-token-1"), true);
    let bob = Modern::new(&s.url, Some("bob-token-22"), true);
    let url = format!("http://127.0.0.1:{}/hooks", receiver.port);

    // A task of alice's that is under way when she subscribes.
    let before = alice.start("slow_compute", json!({"seconds": 2})).await;
    let r = alice
        .ok(
            "events/subscribe",
            subscribe_params(&url, &secret(1), json!({})),
        )
        .await;
    assert_eq!(r["resultType"], "complete", "{r}");
    let sub = r["id"].as_str().expect("an id").to_string();
    assert!(sub.starts_with("sub_"), "{r}");
    assert_eq!(
        (&r["cursor"], &r["truncated"]),
        (&Value::Null, &json!(false)),
        "{r}"
    );
    assert_eq!(r["deliveryStatus"]["active"], true, "{r}");
    assert!(
        r["refreshBefore"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{r}"
    );
    let verifications = |o: &Path| {
        received(o)
            .iter()
            .filter(|l| l.get("verification").is_some())
            .map(|l| l["subscription"].clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        verifications(&out),
        vec![json!(sub)],
        "verified once, under its id"
    );

    // Alice's tasks reach it, bob's do not.
    let mut tasks = vec![before];
    for _ in 0..3 {
        tasks.push(alice.start("slow_compute", json!({"seconds": 0})).await);
    }
    let bobs = bob.start("slow_compute", json!({"seconds": 0})).await;
    bob.until_terminal(&bobs).await;
    let got = until_ended(&out, &sub, &tasks.iter().collect::<Vec<_>>()).await;
    for t in &tasks {
        assert!(got.contains(&(t.clone(), "completed".into())), "{got:?}");
    }
    assert!(got.iter().all(|(t, _)| *t != bobs), "bob's task: {got:?}");

    // A refresh: the same id, no new verification, a new secret (the receiver still holds the
    // old one, which signs too for a while), the life granted again (null: the longest).
    let r = alice
        .ok(
            "events/subscribe",
            subscribe_params(&url, &secret(2), json!({})),
        )
        .await;
    assert_eq!(r["id"], json!(sub), "{r}");
    assert!(r["deliveryStatus"]["lastDeliveryAt"].is_string(), "{r}");
    assert_eq!(r["deliveryStatus"]["lastError"], Value::Null, "{r}");
    let refresh_before = r["refreshBefore"].as_str().unwrap().to_string();
    assert_eq!(
        verifications(&out).len(),
        1,
        "a refresh is not verified again"
    );
    let mut p = subscribe_params(&url, &secret(2), json!({}));
    p["ttlMs"] = Value::Null;
    let r = alice.ok("events/subscribe", p).await;
    assert!(
        r["refreshBefore"].as_str().unwrap() > refresh_before.as_str(),
        "{r}"
    );
    let after_refresh = alice.start("slow_compute", json!({"seconds": 0})).await;
    until_ended(&out, &sub, &[&after_refresh]).await;

    // One task's subscription, made after it ended: it is owed that end.
    let one = tasks[1].clone();
    let r = alice
        .ok(
            "events/subscribe",
            subscribe_params(
                &url,
                &secret(1),
                json!({"taskId": one, "terminalOnly": true}),
            ),
        )
        .await;
    let sub_one = r["id"].as_str().unwrap().to_string();
    assert_ne!(sub_one, sub);
    let got = until_ended(&out, &sub_one, &[&one]).await;
    assert_eq!(got.len(), 1, "{got:?}");

    // Refusals, none of which registers anything; then the principal's limit (3).
    let errors = [
        (
            subscribe_params(&url, "whsec_short", json!({})),
            -32602,
            None,
        ),
        (
            subscribe_params("http://example.com/hooks", &secret(1), json!({})),
            -32602,
            None,
        ),
        (
            json!({"name": "mcp.other", "delivery": {"url": url, "secret": secret(1)}}),
            -32023,
            None,
        ),
        (
            json!({"name": EVENT, "delivery": {"mode": "push", "url": url, "secret": secret(1)}}),
            -32026,
            None,
        ),
        (
            // The endpoint answers with another secret: it does not verify the handshake.
            subscribe_params(
                &format!("http://127.0.0.1:{}/hooks", other.port),
                &secret(1),
                json!({"terminalOnly": true}),
            ),
            -32027,
            Some("challenge_failed"),
        ),
    ];
    for (params, code, reason) in errors {
        let a = alice.send("events/subscribe", params.clone()).await;
        assert_eq!((a.status, a.code()), (200, code), "{params}: {}", a.body);
        if let Some(reason) = reason {
            assert_eq!(a.body["error"]["data"]["reason"], reason, "{}", a.body);
        }
    }
    alice
        .ok(
            "events/subscribe",
            subscribe_params(&url, &secret(1), json!({"taskId": "x"})),
        )
        .await;
    let a = alice
        .send(
            "events/subscribe",
            subscribe_params(&url, &secret(1), json!({"taskId": "y"})),
        )
        .await;
    assert_eq!(a.code(), -32025, "{}", a.body);
    assert_eq!(a.body["error"]["data"]["max"], 3, "{}", a.body);
    alice
        .ok(
            "events/unsubscribe",
            json!({"name": EVENT, "arguments": {"taskId": "x"}, "delivery": {"url": url}}),
        )
        .await;
    assert!(
        received(&other_out)
            .iter()
            .all(|l| l.get("event").is_none()),
        "nothing but the handshake reached the endpoint that failed it"
    );

    // `taskmesh webhooks` lists the subscriptions, with what this node delivered, never a
    // secret.
    let listed = crate::webhooks_listed(&s.url);
    let main = listed["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["subscription"] == json!(sub))
        .cloned()
        .expect("the subscription is listed");
    assert_eq!(
        (&main["kind"], &main["principals"], &main["url"]),
        (&json!("client"), &json!(["alice"]), &json!(url)),
        "{main}"
    );
    assert!(main["deliveries"]["acked"].as_u64().unwrap() >= 5, "{main}");
    assert!(main["expiresAtMs"].as_u64().is_some(), "{main}");

    // Unsubscribed: a task created after it is not delivered; the per-task one still is.
    alice
        .ok(
            "events/unsubscribe",
            json!({"name": EVENT, "arguments": {}, "delivery": {"url": url}}),
        )
        .await;
    let unwatched = alice.start("slow_compute", json!({"seconds": 0})).await;
    alice.until_terminal(&unwatched).await;
    let last = alice.start("slow_compute", json!({"seconds": 0})).await;
    alice
        .ok(
            "events/subscribe",
            subscribe_params(&url, &secret(1), json!({"taskId": last})),
        )
        .await;
    alice.until_terminal(&last).await;
    let r = alice
        .ok(
            "events/subscribe",
            subscribe_params(&url, &secret(1), json!({"taskId": last})),
        )
        .await;
    until_ended(&out, r["id"].as_str().unwrap(), &[&last]).await;
    assert!(
        ends(&out, &sub).iter().all(|(t, _)| *t != unwatched),
        "a task created after the unsubscribe was delivered"
    );
    let a = alice
        .send(
            "events/unsubscribe",
            json!({"name": EVENT, "arguments": {}, "delivery": {"url": url}}),
        )
        .await;
    assert_eq!(a.code(), -32023, "{}", a.body);
    assert_eq!(
        a.body["error"]["data"]["kind"], "subscription",
        "{}",
        a.body
    );
    // Bob cannot remove alice's subscription: its identity includes the principal.
    let a = bob
        .send(
            "events/unsubscribe",
            json!({"name": EVENT, "arguments": {"taskId": one, "terminalOnly": true}, "delivery": {"url": url}}),
        )
        .await;
    assert_eq!(a.code(), -32023, "{}", a.body);
}

#[tokio::test]
async fn webhook_mode_needs_a_principal_and_a_routable_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let python = webhooks_venv(Path::new(env!("CARGO_TARGET_TMPDIR")));
    let out = dir.path().join("events.jsonl");
    let receiver = webhook_receiver(&python, &secret(1), &out, None);

    let open = Server::start(TASKMESH, "");
    let m = Modern::new(&open.url, None, true);
    let a = m
        .send(
            "events/subscribe",
            subscribe_params("https://hooks.example.com/x", &secret(1), json!({})),
        )
        .await;
    assert_eq!(a.code(), -32024, "{}", a.body);

    // No address is allowed: an address that is not globally routable is refused as given,
    // and a name that resolves to one when connecting, before anything is sent.
    let s = Server::start(
        TASKMESH,
        &format!("{AUTH}\n[events]\nhttp_hosts = [\"127.0.0.1\"]\n"),
    );
    let alice = Modern::new(&s.url, Some("alice-token-1"), true);
    for url in [
        format!("http://127.0.0.1:{}/hooks", receiver.port),
        "https://10.1.2.3/hooks".to_string(),
        "https://169.254.169.254/latest".to_string(),
        format!("https://[::1]:{}/hooks", receiver.port),
    ] {
        let a = alice
            .send(
                "events/subscribe",
                subscribe_params(&url, &secret(1), json!({})),
            )
            .await;
        assert_eq!(a.code(), -32602, "{url}: {}", a.body);
        assert!(
            a.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("delivery.url"),
            "{}",
            a.body
        );
    }
    let a = alice
        .send(
            "events/subscribe",
            subscribe_params(
                &format!("https://localhost:{}/hooks", receiver.port),
                &secret(1),
                json!({}),
            ),
        )
        .await;
    assert_eq!(a.code(), -32027, "{}", a.body);
    assert_eq!(
        a.body["error"]["data"]["reason"], "connection_refused",
        "{}",
        a.body
    );
    assert!(received(&out).is_empty(), "nothing reached the receiver");
}

/// A node remembers that a principal's endpoint passed verification: another subscription of
/// that principal to that URL is not verified again, another principal's is. And it sends one
/// host at most `events.verifications_per_host_per_minute` verifications: one more fails
/// (-32025) with nothing sent and nothing registered.
#[tokio::test]
async fn verifications_are_remembered_per_principal_and_limited_per_host() {
    let dir = tempfile::tempdir().unwrap();
    let python = webhooks_venv(Path::new(env!("CARGO_TARGET_TMPDIR")));
    let out = dir.path().join("events.jsonl");
    let receiver = webhook_receiver(&python, &secret(1), &out, None);
    let s = Server::start(
        TASKMESH,
        &format!(
            "{AUTH}\n[events]\nallow_addresses = [\"127.0.0.0/8\"]\nhttp_hosts = [\"127.0.0.1\"]\nverifications_per_host_per_minute = 3\n"
        ),
    );
    let alice = Modern::new(&s.url, Some("alice-token-1"), true);
    let bob = Modern::new(&s.url, Some("bob-token-22"), true);
    let url = |path: &str| format!("http://127.0.0.1:{}/{path}", receiver.port);
    let verified = || {
        received(&out)
            .iter()
            .filter(|l| l.get("verification").is_some())
            .count()
    };
    alice
        .ok(
            "events/subscribe",
            subscribe_params(&url("a"), &secret(1), json!({})),
        )
        .await;
    assert_eq!(verified(), 1);
    // The same principal and URL, other arguments: a new subscription, not verified again.
    alice
        .ok(
            "events/subscribe",
            subscribe_params(&url("a"), &secret(1), json!({"terminalOnly": true})),
        )
        .await;
    assert_eq!(verified(), 1, "alice's endpoint was verified twice");
    // Another principal, and another URL: each verified.
    bob.ok(
        "events/subscribe",
        subscribe_params(&url("a"), &secret(1), json!({})),
    )
    .await;
    alice
        .ok(
            "events/subscribe",
            subscribe_params(&url("b"), &secret(1), json!({})),
        )
        .await;
    assert_eq!(verified(), 3);
    // A fourth verification to that host within the minute: refused, nothing sent or held.
    let a = alice
        .send(
            "events/subscribe",
            subscribe_params(&url("c"), &secret(1), json!({})),
        )
        .await;
    assert_eq!(a.code(), -32025, "{}", a.body);
    assert_eq!(
        a.body["error"]["data"]["limit"], "verifications",
        "{}",
        a.body
    );
    assert_eq!(a.body["error"]["data"]["max"], 3, "{}", a.body);
    assert_eq!(verified(), 3, "a verification past the limit was sent");
    let a = alice
        .send(
            "events/unsubscribe",
            json!({"name": EVENT, "arguments": {}, "delivery": {"url": url("c")}}),
        )
        .await;
    assert_eq!(
        a.code(),
        -32023,
        "the refused subscription was registered: {}",
        a.body
    );
    // A refresh needs no verification: still served at the limit.
    alice
        .ok(
            "events/subscribe",
            subscribe_params(&url("b"), &secret(2), json!({})),
        )
        .await;
}

/// A name's address is checked at every delivery, not once: a webhook whose host name resolved
/// to an allowed address when it was subscribed, and resolves to one that is not allowed when
/// an event is delivered, is refused then (`connection_refused`), nothing reaching the
/// listener at the new address; once the name resolves to the allowed address again, the
/// event is delivered. The server runs in a mount namespace of its own whose `/etc/hosts` the
/// test rewrites (needs root and `unshare`, as the partition test does).
#[tokio::test]
async fn a_name_that_resolves_elsewhere_when_delivering_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let python = webhooks_venv(Path::new(env!("CARGO_TARGET_TMPDIR")));
    let (out, elsewhere_out) = (
        dir.path().join("events.jsonl"),
        dir.path().join("elsewhere.jsonl"),
    );
    let receiver = webhook_receiver(&python, &secret(1), &out, None);
    let _elsewhere = taskmesh_testkit::python::webhook_receiver_at(
        &python,
        &secret(1),
        &elsewhere_out,
        None,
        "127.0.0.2",
        receiver.port,
    );
    let hosts = dir.path().join("hosts");
    let resolve_to = |ip: &str| {
        // In place: the server's bind mount follows the file, not a new one.
        std::fs::write(&hosts, format!("127.0.0.1 localhost\n{ip} hooks.test\n")).unwrap();
    };
    resolve_to("127.0.0.1");
    let wrapper = dir.path().join("taskmesh-with-hosts");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec unshare --mount -- sh -c 'mount --bind \"$1\" /etc/hosts && shift && exec \"$@\"' sh {} {} \"$@\"\n",
            hosts.display(),
            TASKMESH
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let s = Server::start(
        &wrapper,
        &format!(
            "[auth]\nstatus_principals = [\"alice\"]\n{AUTH}\n[events]\nallow_addresses = [\"127.0.0.1/32\"]\nhttp_hosts = [\"hooks.test\"]\nretry_base_ms = 100\nretry_max_ms = 200\nmax_attempts = 10000\n"
        ),
    );
    let alice = Modern::new(&s.url, Some("alice-token-1"), true);
    let url = format!("http://hooks.test:{}/hooks", receiver.port);
    let r = alice
        .ok(
            "events/subscribe",
            subscribe_params(&url, &secret(1), json!({"terminalOnly": true})),
        )
        .await;
    let sub = r["id"].as_str().unwrap().to_string();
    let first = alice.start("slow_compute", json!({"seconds": 0})).await;
    until_ended(&out, &sub, &[&first]).await;

    // The name now resolves to an address that is not allowed.
    resolve_to("127.0.0.2");
    let attempts = || async {
        crate::webhooks_listed(&s.url)["webhooks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["subscription"] == json!(sub))
            .map(|h| h["deliveries"].clone())
            .unwrap()
    };
    let second = alice.start("slow_compute", json!({"seconds": 0})).await;
    alice.until_terminal(&second).await;
    let mut refused = false;
    for _ in 0..300 {
        let d = attempts().await;
        if d["lastError"] == "connection_refused" && d["attempts"].as_u64().unwrap() >= 3 {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        refused,
        "the delivery was not refused: {}",
        attempts().await
    );
    assert!(
        received(&elsewhere_out).is_empty(),
        "something reached the address the name resolves to now"
    );
    assert!(!ends(&out, &sub).iter().any(|(t, _)| *t == second));

    // Back to the allowed address: the event is delivered.
    resolve_to("127.0.0.1");
    until_ended(&out, &sub, &[&second]).await;
    assert!(received(&elsewhere_out).is_empty());
}
