//! Child processes a test runs to completion (an SDK client script, a package installer),
//! each bounded in time.

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What a finished (or killed) child process left behind.
pub struct Finished {
    /// How the process exited (`None` if waiting for it failed).
    pub status: Option<ExitStatus>,
    /// Whether it was killed for running past its time limit.
    pub timed_out: bool,
    /// Everything it wrote to standard output.
    pub stdout: String,
    /// Everything it wrote to standard error.
    pub stderr: String,
}

impl Finished {
    /// Whether it ran to the end and exited with success.
    pub fn ok(&self) -> bool {
        !self.timed_out && self.status.is_some_and(|s| s.success())
    }

    /// How it exited, with its output, for a failure message.
    pub fn describe(&self) -> String {
        format!(
            "exit: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            if self.timed_out {
                "killed after time-out".to_string()
            } else {
                format!("{:?}", self.status)
            },
            self.stdout,
            self.stderr
        )
    }

    /// What a client script observed: it must have run to the end and printed one JSON value
    /// per line, the last `{"done": true}`; the lines before that one. Panics (with the
    /// output) otherwise.
    pub fn observations(&self) -> Vec<serde_json::Value> {
        assert!(self.ok(), "the client failed:\n{}", self.describe());
        let mut lines: Vec<serde_json::Value> = self
            .stdout
            .lines()
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("not JSON ({e}): {l}\n{}", self.describe()))
            })
            .collect();
        assert_eq!(
            lines.pop(),
            Some(serde_json::json!({"done": true})),
            "{}",
            self.describe()
        );
        lines
    }
}

/// Run `cmd` to completion, killing it once `limit` has passed.
pub fn run_bounded(cmd: &mut Command, limit: Duration) -> Finished {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("stdout")));
    let err = drain(Box::new(child.stderr.take().expect("stderr")));
    let start = Instant::now();
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if start.elapsed() >= limit => {
                timed_out = true;
                let _ = child.kill();
                break child.wait().ok();
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("waiting for {what}: {e}"),
        }
    };
    Finished {
        status,
        timed_out,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}
