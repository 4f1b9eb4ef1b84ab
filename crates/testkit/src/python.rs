//! Python for the tests that run it: virtualenvs made once under the test target's temporary
//! directory and reused ([`venv`]); the official MCP Python SDK's is [`mcp_venv`].

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::run_bounded;

/// The SDK release the tests use.
pub const MCP_PACKAGE: &str = "mcp==1.30.0";
const VENV_TIMEOUT: Duration = Duration::from_secs(120);
const PIP_TIMEOUT: Duration = Duration::from_secs(600);

/// The virtualenv's interpreter, with `mcp==1.30.0` installed. A marker file written after
/// a verified install lets later runs skip the provisioning.
///
/// `tmp` is the test's `CARGO_TARGET_TMPDIR`. It needs `python3` with the `venv` module, and
/// PyPI the first time; when either is missing it panics with the output.
pub fn mcp_venv(tmp: &Path) -> PathBuf {
    venv(
        tmp,
        "py-mcp-1.30.0",
        &[MCP_PACKAGE],
        "import importlib.metadata as m, mcp.client.experimental; assert m.version('mcp') == '1.30.0'",
    )
}

/// A virtualenv `tmp/name` with `packages` (pip requirement strings) installed; its
/// interpreter. `check` is Python code that must run in it after the install (an import,
/// a version). A marker file written after a verified install lets later runs skip pip.
///
/// `tmp` is the test's `CARGO_TARGET_TMPDIR`. It needs `python3` with the `venv` module, and
/// PyPI the first time; when either is missing it panics with the output.
pub fn venv(tmp: &Path, name: &str, packages: &[&str], check: &str) -> PathBuf {
    // Tests of one binary run at once: one provisions, the others wait and reuse it.
    static PROVISION: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = PROVISION.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tmp.join(name);
    let marker = dir.join("taskmesh-test-installed");
    let wanted = packages.join(" ");
    let python = dir.join("bin").join("python");
    if python.exists() && std::fs::read_to_string(&marker).ok().as_deref() == Some(wanted.as_str())
    {
        return python;
    }
    let _ = std::fs::remove_dir_all(&dir);

    let venv = run_bounded(
        Command::new("python3").arg("-m").arg("venv").arg(&dir),
        VENV_TIMEOUT,
    );
    assert!(
        venv.ok(),
        "`python3 -m venv {}` failed:\n{}",
        dir.display(),
        venv.describe()
    );

    let pip = run_bounded(
        Command::new(dir.join("bin").join("pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .args(packages)
            .env("PIP_NO_INPUT", "1"),
        PIP_TIMEOUT,
    );
    assert!(
        pip.ok(),
        "`pip install {wanted}` failed:\n{}",
        pip.describe()
    );

    let checked = run_bounded(Command::new(&python).arg("-c").arg(check), VENV_TIMEOUT);
    assert!(
        checked.ok(),
        "the virtualenv {name} does not pass its check:\n{}",
        checked.describe()
    );
    std::fs::write(&marker, wanted).expect("write the virtualenv marker");
    python
}

/// `tests/upstream/server.py` (the upstream tests' MCP server on the Python SDK) serving
/// Streamable HTTP; the process is killed when this is dropped.
pub struct UpstreamHttp {
    child: std::process::Child,
    /// Its MCP endpoint.
    pub url: String,
}

impl Drop for UpstreamHttp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The upstream tests' server, run by `python`, on loopback `port`, once it listens (bounded:
/// 15 s).
pub async fn upstream_http(python: &Path, port: u16) -> UpstreamHttp {
    serve_http(python, "server.py", &["http", &port.to_string()], port).await
}

/// `tests/upstream/task_server.py` (a server on the Python SDK that runs calls as tasks
/// itself), serving Streamable HTTP on loopback `port`, once it listens (bounded: 15 s); it
/// appends a line to `starts` each time its `research` tool starts.
pub async fn task_upstream_http(python: &Path, port: u16, starts: &Path) -> UpstreamHttp {
    let starts = starts.display().to_string();
    serve_http(
        python,
        "task_server.py",
        &["http", &port.to_string(), &starts],
        port,
    )
    .await
}

async fn serve_http(python: &Path, script: &str, args: &[&str], port: u16) -> UpstreamHttp {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/upstream")
        .join(script);
    let child = Command::new(python)
        .arg(script)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the upstream server");
    let server = UpstreamHttp {
        child,
        url: format!("http://127.0.0.1:{port}/mcp"),
    };
    for _ in 0..300 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return server;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the upstream HTTP server never listened on {port}");
}

/// The Standard Webhooks library release the webhook tests verify deliveries with.
pub const STANDARD_WEBHOOKS: &str = "standardwebhooks==1.3.0";

/// The virtualenv's interpreter, with the Standard Webhooks library installed (see [`venv`]).
pub fn webhooks_venv(tmp: &Path) -> PathBuf {
    venv(
        tmp,
        "py-standardwebhooks-1.3.0",
        &[STANDARD_WEBHOOKS],
        "import standardwebhooks.webhooks",
    )
}

/// `examples/webhook-receiver/receiver.py`, the receiver that verifies every delivery with the
/// Standard Webhooks library, listening on a free loopback port; the process is killed when
/// this is dropped.
pub struct WebhookReceiver {
    child: std::process::Child,
    /// Its port (on 127.0.0.1 unless started with [`webhook_receiver_at`]).
    pub port: u16,
}

impl Drop for WebhookReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start the receiver with `python` (from [`webhooks_venv`]): it verifies with `secret`,
/// appends what arrives to `out` (JSON lines), and answers 500 while `fail_while` exists.
/// Returns once it listens (bounded: 15 s).
pub fn webhook_receiver(
    python: &Path,
    secret: &str,
    out: &Path,
    fail_while: Option<&Path>,
) -> WebhookReceiver {
    webhook_receiver_at(python, secret, out, fail_while, "127.0.0.1", 0)
}

/// [`webhook_receiver`] listening on `host` (a loopback address) and `port` (0: a free one).
pub fn webhook_receiver_at(
    python: &Path,
    secret: &str,
    out: &Path,
    fail_while: Option<&Path>,
    host: &str,
    port: u16,
) -> WebhookReceiver {
    use std::io::BufRead as _;
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/webhook-receiver/receiver.py");
    let mut cmd = Command::new(python);
    cmd.arg(script)
        .arg("--out")
        .arg(out)
        .arg("--host")
        .arg(host)
        .arg("--port")
        .arg(port.to_string())
        .env("WEBHOOK_SECRET", secret)
        .stdout(std::process::Stdio::piped());
    if let Some(f) = fail_while {
        cmd.arg("--fail-while").arg(f);
    }
    let mut child = cmd.spawn().expect("start the webhook receiver");
    let stdout = child.stdout.take().expect("the receiver's stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(15)).unwrap_or_default();
    let port = line
        .trim()
        .strip_prefix("listening ")
        .and_then(|p| p.parse().ok());
    let Some(port) = port else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the webhook receiver did not start: {line:?}");
    };
    WebhookReceiver { child, port }
}

/// What a [`WebhookReceiver`] wrote to its `out` file so far: one JSON value per line.
pub fn received(out: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}
