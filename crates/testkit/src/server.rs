//! Real `taskmesh` processes for the tests: [`Server`] spawns `taskmesh serve` or one
//! `taskmesh node` of a cluster on a fresh temporary data directory, learns its URL from the
//! log line that announces it, kills, stops, signals and restarts it, and on a panicking test
//! prints the last lines of its log.
//!
//! The tests pass the executable (`env!("CARGO_BIN_EXE_taskmesh")`, known only to the test
//! targets of the `taskmesh` package) to every constructor.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Which `taskmesh` subcommand a [`Server`] runs.
#[derive(Debug, Clone, Copy)]
enum Subcommand {
    /// `taskmesh serve`: one process on its own, its data under `--data-dir`.
    Serve,
    /// `taskmesh node`: one node of a cluster, its data under `TASKMESH_DATA_DIR`; with
    /// `bootstrap`, started with `--bootstrap` (the node that creates the cluster).
    Node { bootstrap: bool },
}

/// A running server process. Dropping it kills the process.
pub struct Server {
    child: Option<Child>,
    /// The URL from the process's `listening on http(s)://...` log line; set again at each
    /// start, as the port may change.
    pub url: String,
    /// The temporary directory of this server: its `taskmesh.toml` and, under `data`, its
    /// data. Kept across restarts.
    pub dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    /// The `taskmesh` executable (the test's `env!("CARGO_BIN_EXE_taskmesh")`).
    bin: PathBuf,
    config: String,
    subcommand: Subcommand,
    /// Run inside this network namespace (`ip netns exec`), listening on `listen`.
    netns: Option<(String, String)>,
    /// Listen on this address (else a free loopback port).
    listen: Option<String>,
    /// Every line the process wrote to stderr, across restarts, in order.
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// Start `taskmesh serve` (the executable `bin`) on a fresh data directory with the given
    /// TOML configuration.
    pub fn start(bin: impl AsRef<Path>, config: &str) -> Server {
        Self::launch(bin.as_ref(), config, Subcommand::Serve)
    }

    /// Start `taskmesh serve` listening on `listen` (a free port the test picked, when the
    /// configuration must name the server's own URL).
    pub fn start_at(bin: impl AsRef<Path>, listen: &str, config: &str) -> Server {
        let mut s = Self::unstarted(bin.as_ref(), config, Subcommand::Serve, None);
        s.listen = Some(listen.to_string());
        s.spawn();
        s
    }

    /// Start one cluster node (`taskmesh node`, optionally with `--bootstrap`; the executable
    /// `bin`) with the given configuration and a fresh temporary data directory.
    pub fn start_node(bin: impl AsRef<Path>, config: &str, bootstrap: bool) -> Server {
        Self::launch(bin.as_ref(), config, Subcommand::Node { bootstrap })
    }

    /// Start one cluster node listening for MCP on `listen` (a free port the test picked), so
    /// that its URL stays the same across restarts.
    pub fn start_node_at(
        bin: impl AsRef<Path>,
        listen: &str,
        config: &str,
        bootstrap: bool,
    ) -> Server {
        let mut s = Self::unstarted(bin.as_ref(), config, Subcommand::Node { bootstrap }, None);
        s.listen = Some(listen.to_string());
        s.spawn();
        s
    }

    /// Start one cluster node (the executable `bin`) inside network namespace `ns`, serving
    /// MCP on `listen`.
    pub fn start_node_in(
        bin: impl AsRef<Path>,
        ns: &str,
        listen: &str,
        config: &str,
        bootstrap: bool,
    ) -> Server {
        Self::launch_with(
            bin.as_ref(),
            config,
            Subcommand::Node { bootstrap },
            Some((ns.to_string(), listen.to_string())),
        )
    }

    fn launch(bin: &Path, config: &str, subcommand: Subcommand) -> Server {
        Self::launch_with(bin, config, subcommand, None)
    }

    fn launch_with(
        bin: &Path,
        config: &str,
        subcommand: Subcommand,
        netns: Option<(String, String)>,
    ) -> Server {
        let mut s = Self::unstarted(bin, config, subcommand, netns);
        s.spawn();
        s
    }

    fn unstarted(
        bin: &Path,
        config: &str,
        subcommand: Subcommand,
        netns: Option<(String, String)>,
    ) -> Server {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_path_buf();
        Server {
            child: None,
            url: String::new(),
            dir,
            _tmp: Some(tmp),
            bin: bin.to_path_buf(),
            config: config.to_string(),
            subcommand,
            netns,
            listen: None,
            log: Arc::new(Mutex::new(Vec::new())),
        }
    }

    fn spawn(&mut self) {
        let cfg_path = self.dir.join("taskmesh.toml");
        let config = match self.subcommand {
            Subcommand::Node { .. } => crate::certs::with_cluster_tls(&self.config, &self.dir),
            Subcommand::Serve => self.config.clone(),
        };
        std::fs::write(&cfg_path, config).expect("write config");
        let mut cmd = match &self.netns {
            None => Command::new(&self.bin),
            Some((ns, _)) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&self.bin);
                c
            }
        };
        let listen = self
            .netns
            .as_ref()
            .map(|(_, l)| l.clone())
            .or_else(|| self.listen.clone())
            .unwrap_or_else(|| "127.0.0.1:0".to_string());
        match self.subcommand {
            Subcommand::Serve => {
                cmd.arg("serve");
                cmd.arg("--data-dir").arg(self.dir.join("data"));
            }
            Subcommand::Node { bootstrap } => {
                cmd.arg("node");
                if bootstrap {
                    cmd.arg("--bootstrap");
                }
                cmd.env("TASKMESH_DATA_DIR", self.dir.join("data"));
            }
        }
        // The log filter: the configuration's `[log] level` when it has one, else ours.
        if self.config.contains("[log]") {
            cmd.env_remove("RUST_LOG");
        } else {
            cmd.env("RUST_LOG", "info,openraft=warn");
        }
        let mut child = cmd
            .arg("--listen")
            .arg(&listen)
            .arg("--config")
            .arg(&cfg_path)
            .env("NO_COLOR", "1")
            .env_remove("TASKMESH_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn taskmesh");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        let log = self.log.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(i) = line.find("listening on http") {
                    let rest = &line[i + "listening on ".len()..];
                    // Ends at white space, or at the quote of a JSON log line.
                    let url = rest
                        .split(|c: char| c.is_whitespace() || c == '"')
                        .next()
                        .unwrap_or_default()
                        .to_string();
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(url);
                    }
                }
                log.lock().expect("server log mutex poisoned").push(line);
            }
        });
        self.child = Some(child);
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(url) => self.url = url,
            Err(_) => {
                let log = self
                    .log
                    .lock()
                    .expect("server log mutex poisoned")
                    .join("\n");
                panic!("server did not start:\n{log}");
            }
        }
    }

    /// kill -9, then start again on the same data directory.
    pub fn kill9_and_restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    /// Kill the process (SIGKILL) and reap it; does nothing when it is not running. The
    /// data directory stays.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start the process again on the same data directory (after [`Server::kill9`] or
    /// [`Server::terminate`]). It listens on a new port: read [`Server::url`] again.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "the server is still running");
        self.spawn();
    }

    /// Whether the process runs (started and not killed or stopped by this handle).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The resident memory of the running process, in KiB (`VmRSS` of `/proc/PID/status`).
    pub fn rss_kib(&self) -> u64 {
        let c = self.child.as_ref().expect("the server runs");
        let status = std::fs::read_to_string(format!("/proc/{}/status", c.id()))
            .expect("read the process status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .expect("VmRSS in the process status")
    }

    /// Send a signal (`STOP`, `CONT`, ...) to the running process.
    pub fn signal(&self, name: &str) {
        let c = self.child.as_ref().expect("the server runs");
        let ok = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(c.id().to_string())
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -{name} failed");
    }

    /// SIGTERM and wait; returns whether it exited successfully.
    pub fn terminate(&mut self) -> bool {
        let Some(mut c) = self.child.take() else {
            return false;
        };
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(c.id().to_string())
            .status();
        for _ in 0..300 {
            if let Ok(Some(st)) = c.try_wait() {
                return st.success();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = c.kill();
        let _ = c.wait();
        false
    }

    /// Stop the process with SIGTERM, then start it again on the same data directory;
    /// panics if it was not running or did not exit successfully within about 15 s.
    pub fn restart(&mut self) {
        assert!(self.terminate(), "graceful stop failed");
        self.spawn();
    }

    /// The stderr lines of the process so far, joined with newlines.
    pub fn log_text(&self) -> String {
        self.log
            .lock()
            .expect("server log mutex poisoned")
            .join("\n")
    }

    /// The server's temporary directory, [`Server::dir`].
    pub fn data_dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.log.lock().map(|l| l.clone()).unwrap_or_default();
            let tail = &log[log.len().saturating_sub(40)..];
            eprintln!(
                "--- last {} log lines of the server at {} ---\n{}",
                tail.len(),
                self.url,
                tail.join("\n")
            );
        }
        if let Some(c) = &self.child {
            // A stopped process is killed just the same; SIGCONT first so it can be reaped.
            let _ = Command::new("kill")
                .arg("-CONT")
                .arg(c.id().to_string())
                .status();
        }
        self.kill9();
    }
}
