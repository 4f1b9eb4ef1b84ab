//! Workers with OAuth credentials: a token of the real authorization server that grants the
//! worker scope (`workers.scope`) acts as a worker of its principal's identity and serves a
//! client's task; that token is refused on `/mcp`, and a client's token (without the scope)
//! is refused on the worker API.

use serde_json::json;
use taskmesh_client::worker::{Declaration, Worker};
use taskmesh_testkit::{free_ports, Client, Server, V};

use crate::{config, provision, AuthorizationServer, ALL_SCOPES, TASKMESH};

#[tokio::test]
async fn an_oauth_token_with_the_worker_scope_is_a_worker_and_only_a_worker() {
    let (node, dir) = tokio::task::spawn_blocking(provision).await.unwrap();
    let port = free_ports(1)[0];
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let issuer = AuthorizationServer::start(&node, &dir, &resource);
    let workers = "\n[workers.identities.cc-worker]\ntools = [\"oauth_*\"]\n";
    let server = Server::start_at(
        TASKMESH,
        &format!("127.0.0.1:{port}"),
        &(config(&resource, &issuer) + workers),
    );
    let worker_token = issuer
        .token("cc-worker", &resource, "taskmesh:worker")
        .await;
    let client_token = issuer.token("cc-rs256", &resource, ALL_SCOPES).await;

    // The worker token registers (its principal, the client id, is the identity) ...
    let decl = Declaration::new("oauth_echo", json!({"type": "object"}));
    let w = Worker::register(&server.url, &worker_token, vec![decl.clone()], 1, "oauth")
        .await
        .unwrap();
    // ... and is no client.
    let as_client = Client::new(&server.url).with_token(&worker_token);
    let r = as_client.post(&crate::init_body(), &[]).await;
    assert_eq!(r.status, 403, "{}", r.body);
    // A client's token is no worker.
    let refused = Worker::register(&server.url, &client_token, vec![decl], 1, "x")
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some("PERMISSION_DENIED"), "{refused}");

    // The client's task of the worker's tool is served by the worker.
    let c = Client::connect(&server.url, Some(&client_token), V, json!({"tasks": {}})).await;
    let id = c.start_task("oauth_echo", json!({"say": "hi"})).await;
    let lease = loop {
        if let Some(l) = w
            .poll(1, std::time::Duration::from_secs(2))
            .await
            .unwrap()
            .pop()
        {
            break l;
        }
    };
    assert_eq!(lease.task_id, id);
    assert_eq!(lease.principal, "cc-rs256");
    let done = json!({"content": [{"type": "text", "text": "hi back"}]});
    assert_eq!(w.complete(&lease, Ok(done)).await.unwrap(), "completed");
    let result = c.ok("tasks/result", json!({"taskId": id})).await;
    assert_eq!(result["content"][0]["text"], "hi back");
}
