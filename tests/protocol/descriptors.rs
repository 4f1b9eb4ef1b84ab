//! Open-file descriptors: a node started with a low soft limit raises it to the hard one, and
//! keeps `http.max_connections` within what its descriptors allow, so that a crowd of idle
//! connections never leaves a new client waiting in the listen queue behind them.
//!
//! The server here is started by hand (not through the test kit) because its limit is set in
//! the child before it runs (`setrlimit` between fork and exec).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use taskmesh_testkit::{Client, V};

use crate::TASKMESH;

/// Idle connections the tests open: more than a soft limit of 1024 descriptors.
const IDLE: usize = 1100;

/// A `taskmesh serve` process started with the open-file limit `(soft, hard)`; killed on drop.
struct Limited {
    child: Child,
    /// The MCP URL, from the log line that announces it.
    url: String,
    /// The metrics URL (`metrics.listen`, a port of its own).
    metrics: String,
    log: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl Limited {
    fn start(soft: libc::rlim_t, hard: libc::rlim_t) -> Limited {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("taskmesh.toml");
        // Idle connections are held for the whole test.
        std::fs::write(
            &config,
            "[http]\nheader_read_timeout_ms = 600000\n[metrics]\nlisten = \"127.0.0.1:0\"\n",
        )
        .unwrap();
        let mut cmd = Command::new(TASKMESH);
        cmd.arg("serve")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "info,openraft=warn")
            .env("NO_COLOR", "1")
            .env_remove("TASKMESH_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let limit = libc::rlimit {
            rlim_cur: soft,
            rlim_max: hard,
        };
        // SAFETY: between fork and exec the closure only calls setrlimit, which is
        // async-signal-safe, and builds an error from errno.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let lines = log.clone();
        std::thread::spawn(move || {
            let (mut mcp, mut metrics) = (None, None);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let url = |marker: &str| {
                    let at = line.find(marker)? + marker.len();
                    line[at..].split_whitespace().next().map(str::to_string)
                };
                mcp = mcp.or_else(|| url("listening on "));
                metrics = metrics.or_else(|| url("readiness on "));
                if let (Some(m), Some(o)) = (&mcp, &metrics) {
                    let _ = tx.send((m.clone(), o.clone()));
                }
                lines.lock().unwrap().push(line);
            }
        });
        let (url, metrics) = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(urls) => urls,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("server did not start:\n{}", log.lock().unwrap().join("\n"));
            }
        };
        Limited {
            child,
            url,
            metrics,
            log,
            _dir: dir,
        }
    }

    fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    fn addr(&self) -> String {
        self.url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .to_string()
    }
}

impl Drop for Limited {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- server log ---\n{}", self.log_text());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// This test process's open-file limit `(soft, hard)`, its soft limit raised to the hard one
/// first when it is too low for the connections the tests hold.
fn own_limit() -> (libc::rlim_t, libc::rlim_t) {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut l), 0);
        if l.rlim_cur < 4 * IDLE as libc::rlim_t && l.rlim_cur < l.rlim_max {
            l.rlim_cur = l.rlim_max;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &l), 0);
        }
    }
    (l.rlim_cur, l.rlim_max)
}

/// `n` connections to `addr` that send nothing.
async fn idle_connections(addr: String, n: usize) -> Vec<TcpStream> {
    tokio::task::spawn_blocking(move || {
        (0..n).map(|_| TcpStream::connect(&addr).unwrap()).collect()
    })
    .await
    .unwrap()
}

/// A client that gives up on an answer after a bound (a failure, not a measurement).
async fn initialize(url: &str) -> reqwest::Response {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    http.post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(crate::init_body(V))
        .send()
        .await
        .expect("an answer while idle connections are open")
}

/// Soft limit 1024 under a higher hard limit: the node raises its soft limit to the hard one
/// (and says so), so 1,100 connections that send nothing leave room, and a new client's
/// `initialize` is answered while they are all open.
#[tokio::test]
async fn idle_connections_past_a_low_soft_limit_leave_new_clients_served() {
    let (_, hard) = own_limit();
    assert!(
        hard >= 4 * IDLE as libc::rlim_t,
        "this test needs a hard open-file limit of at least {}, not {hard}",
        4 * IDLE
    );
    let s = Limited::start(1024, hard);
    let idle = idle_connections(s.addr(), IDLE).await;
    let r = initialize(&s.url).await;
    assert_eq!(r.status().as_u16(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["result"]["protocolVersion"], V, "{body}");
    // Every idle connection is still open, and the server still serves.
    let metrics = taskmesh_testkit::metrics::metrics_of(&s.metrics, None).await;
    let open = taskmesh_testkit::metrics::sample(&metrics, "taskmesh_http_connections");
    assert!(open.is_some_and(|n| n >= IDLE as f64), "{metrics}");
    drop(idle);
    Client::new_session(&s.url).await;
    let raised = s
        .log_text()
        .lines()
        .any(|l| l.contains("raised the open-file limit") && l.contains(&format!("to {hard}")));
    assert!(raised, "{}", s.log_text());
}

/// Soft and hard limit 1024: the node lowers `http.max_connections` to fit (a warning names
/// both values); connections past it are closed at once instead of waiting in the listen
/// queue, and once the idle ones go a new client is served.
#[tokio::test]
async fn max_connections_is_lowered_to_what_the_descriptors_allow() {
    own_limit();
    let s = Limited::start(1024, 1024);
    let log = s.log_text();
    let warning = log
        .lines()
        .find(|l| l.contains("WARN") && l.contains("http.max_connections"))
        .unwrap_or_else(|| panic!("no warning: {log}"));
    let field = |name: &str| -> u64 {
        let at = warning.find(&format!("{name}=")).unwrap() + name.len() + 1;
        let digits: String = warning[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().unwrap()
    };
    assert_eq!(field("configured"), 10_000, "{warning}");
    assert_eq!(field("open_files"), 1024, "{warning}");
    let effective = field("effective");
    assert!(effective > 0 && effective < 1024, "{warning}");
    let mut idle = idle_connections(s.addr(), IDLE).await;
    // One more connection, past every idle one: closed without an answer, not left waiting.
    let addr = s.addr();
    let surplus = tokio::task::spawn_blocking(move || {
        let mut tcp = TcpStream::connect(&addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut got = Vec::new();
        tcp.read_to_end(&mut got).map(|_| got)
    })
    .await
    .unwrap();
    match surplus {
        Ok(got) => assert!(got.is_empty(), "{}", String::from_utf8_lossy(&got)),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
    }
    let metrics = taskmesh_testkit::metrics::metrics_of(&s.metrics, None).await;
    let sample = |series: &str| taskmesh_testkit::metrics::sample(&metrics, series);
    assert_eq!(
        sample("taskmesh_http_connections"),
        Some(effective as f64),
        "{metrics}"
    );
    assert_eq!(
        sample("taskmesh_http_connections_closed_total{cause=\"max_connections\"}"),
        Some((IDLE + 1) as f64 - effective as f64),
        "{metrics}"
    );
    idle.clear();
    // The places free as the server sees the idle connections end.
    let mut served = false;
    for _ in 0..100 {
        let r = taskmesh_testkit::http()
            .post(&s.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(crate::init_body(V))
            .send()
            .await;
        if r.is_ok_and(|r| r.status().is_success()) {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(served, "a freed place serves again");
}
