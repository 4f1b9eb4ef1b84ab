//! One delivery attempt against a real HTTP receiver on loopback: the headers and signature it
//! gets, the outcomes by answer, redirects not followed, and addresses the policy refuses
//! never reached.

// A test binary: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use parking_lot::Mutex;
use taskmesh_webhook::{Attempt, EgressError, EgressPolicy, Failure, Message, Sender};

mod common;
use common::{secret, send};

/// What the receiver saw: per request, its path, headers and raw body.
type Seen = Arc<Mutex<Vec<(String, HeaderMap, Bytes)>>>;

async fn receiver() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let record = |status: StatusCode, path: &'static str, seen: Seen| {
        move |headers: HeaderMap, body: Bytes| {
            let seen = seen.clone();
            async move {
                seen.lock().push((path.to_owned(), headers, body));
                status
            }
        }
    };
    let mut app = axum::Router::new().route(
        "/moved",
        post(|| async { (StatusCode::FOUND, [("location", "/target")]) }),
    );
    for (path, status) in [
        ("/ok", StatusCode::NO_CONTENT),
        ("/gone", StatusCode::GONE),
        ("/big", StatusCode::PAYLOAD_TOO_LARGE),
        ("/down", StatusCode::SERVICE_UNAVAILABLE),
        ("/who", StatusCode::UNAUTHORIZED),
        ("/target", StatusCode::OK),
    ] {
        app = app.route(path, post(record(status, path, seen.clone())));
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://127.0.0.1:{}", addr.port()), seen)
}

fn loopback_policy() -> EgressPolicy {
    EgressPolicy {
        allow: vec!["127.0.0.0/8".parse().unwrap()],
        http_hosts: vec!["127.0.0.1".into(), "localhost".into()],
    }
}

#[tokio::test]
async fn a_delivery_is_signed_over_its_raw_body_with_every_header() {
    let (base, seen) = receiver().await;
    let sender = Sender::new(loopback_policy(), Duration::from_secs(5), 4).unwrap();
    let (current, previous) = (secret(1), secret(2));
    let body = br#"{"eventId":"t-7","name":"taskmesh.task.updated"}"#;
    let to = sender.policy().check_url(&format!("{base}/ok")).unwrap();
    let m = Message {
        to: &to,
        id: "t-7",
        subscription: "sub_1",
        body,
        secrets: &[&current, &previous],
    };
    assert_eq!(sender.send(m).await, Attempt::Acked(204));
    let seen = seen.lock();
    let (_, headers, got) = &seen[0];
    assert_eq!(&got[..], &body[..]);
    let h = |n: &str| headers.get(n).unwrap().to_str().unwrap().to_owned();
    assert_eq!(h("webhook-id"), "t-7");
    assert_eq!(h("x-mcp-subscription-id"), "sub_1");
    assert_eq!(h("content-type"), "application/json");
    let ts: u64 = h("webhook-timestamp").parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(ts.abs_diff(now) < 300, "timestamp {ts} is not fresh");
    let sigs: Vec<String> = h("webhook-signature")
        .split(' ')
        .map(str::to_owned)
        .collect();
    assert_eq!(
        sigs,
        vec![
            current.sign("t-7", ts, body),
            previous.sign("t-7", ts, body)
        ]
    );
}

#[tokio::test]
async fn answers_map_to_outcomes_and_redirects_are_not_followed() {
    let (base, seen) = receiver().await;
    let sender = Sender::new(loopback_policy(), Duration::from_secs(5), 4).unwrap();
    let s = secret(3);
    let attempt = |path: &str| {
        let url = format!("{base}{path}");
        let (sender, s) = (sender.clone(), s.clone());
        async move { send(&sender, &url, &s).await }
    };
    assert_eq!(attempt("/gone").await, Attempt::Refused(410));
    assert_eq!(attempt("/big").await, Attempt::Refused(413));
    assert_eq!(
        attempt("/down").await,
        Attempt::Failed(Failure::Http5xx(503))
    );
    assert_eq!(
        attempt("/who").await,
        Attempt::Failed(Failure::Http4xx(401))
    );
    assert_eq!(
        attempt("/moved").await,
        Attempt::Failed(Failure::Http4xx(302))
    );
    assert_eq!(Failure::Http4xx(302).category(), "http_4xx");
    // The redirect's target was never asked.
    assert!(seen.lock().iter().all(|(p, _, _)| p != "/target"));
    // Nothing listens on a port just closed: a connection failure.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{closed}/x");
    let failed = send(&sender, &url, &s).await;
    assert_eq!(failed, Attempt::Failed(Failure::Connection));
    assert_eq!(Failure::Connection.category(), "connection_refused");
}

#[tokio::test]
async fn addresses_that_are_not_global_are_never_reached_unless_allowed() {
    let (base, seen) = receiver().await;
    let port = base.rsplit(':').next().unwrap().to_owned();
    // Plain http allowed to the hosts, but no address block: loopback is refused, by literal
    // address and by a name that resolves to it, when connecting.
    let strict = Sender::new(
        EgressPolicy {
            allow: Vec::new(),
            http_hosts: vec!["127.0.0.1".into(), "localhost".into(), "[::1]".into()],
        },
        Duration::from_secs(5),
        4,
    )
    .unwrap();
    let s = secret(4);
    for url in [
        format!("http://127.0.0.1:{port}/ok"),
        format!("http://localhost:{port}/ok"),
        format!("https://[::1]:{port}/ok"),
        "https://169.254.169.254/latest".to_owned(),
        "https://10.0.0.1/hook".to_owned(),
    ] {
        let got = send(&strict, &url, &s).await;
        assert_eq!(
            got,
            Attempt::Failed(Failure::Egress(EgressError::Refused)),
            "{url}"
        );
    }
    // Plain http to a host not listed is refused before anything else.
    let https_only = Sender::new(EgressPolicy::default(), Duration::from_secs(5), 4).unwrap();
    let got = send(&https_only, &format!("{base}/ok"), &s).await;
    assert_eq!(got, Attempt::Failed(Failure::Egress(EgressError::NotHttps)));
    assert!(seen.lock().is_empty(), "a refused address was reached");
    // Allowed by name once the block is allowed: the same name now reaches the receiver.
    let url = format!("http://localhost:{port}/ok");
    let open = Sender::new(loopback_policy(), Duration::from_secs(5), 4).unwrap();
    let got = send(&open, &url, &s).await;
    // localhost may resolve to ::1 first, which this policy does not allow: the client then
    // connects to the allowed 127.0.0.1.
    assert_eq!(got, Attempt::Acked(204));
    assert_eq!(seen.lock().len(), 1);
}
