//! The command line (`taskmesh call`, `taskmesh tools`, `taskmesh tasks`) as its users run it:
//! the real binary against a real `taskmesh serve` process, and against a server on the
//! official Python SDK; under a real terminal (tmux) for the progress bar, the prompts and
//! Ctrl-C; with `--json` for scripts; its settings from flags, the environment and a profile
//! file; and both protocol generations.
//!
//! Every run of the command line gets an environment of its own (`Cli`): nothing of the test
//! process's, a home and a profile file in a temporary directory.

// A test binary: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

mod generations;
mod json;
mod python;
mod settings;
mod terminal;

/// The executable under test.
const TASKMESH: &str = env!("CARGO_BIN_EXE_taskmesh");

/// Static tokens: with authentication on, taskmesh offers `tasks/list`.
const AUTH: &str = r#"
[auth.tokens]
"alice-token-1" = "alice"
"#;
const ALICE: &str = "alice-token-1";

/// How to run the command line: an environment made from nothing.
struct Cli {
    home: tempfile::TempDir,
    env: Vec<(String, String)>,
}

/// What one run left.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Standard output as JSON; panics (with the run) when it is not.
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{self:?}"))
    }
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

impl Cli {
    fn new() -> Self {
        let home = tempfile::tempdir().unwrap();
        let env = vec![
            ("HOME".into(), home.path().display().to_string()),
            ("NO_COLOR".into(), "1".into()),
        ];
        Self { home, env }
    }

    /// The same, with `TASKMESH_URL` set.
    fn at(url: &str) -> Self {
        Self::new().with("TASKMESH_URL", url)
    }

    fn with(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Where the default profile file is for this environment.
    fn profile_file(&self) -> PathBuf {
        self.home.path().join(".config/taskmesh/profiles.toml")
    }

    /// Write the default profile file.
    fn profiles(self, toml: &str) -> Self {
        let p = self.profile_file();
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, toml).unwrap();
        self
    }

    fn home(&self) -> &Path {
        self.home.path()
    }

    /// The command line to run `args` in this environment.
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(TASKMESH);
        c.env_clear().args(args);
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }

    /// Run `args` to the end (bounded: 60 s).
    fn run(&self, args: &[&str]) -> Run {
        let done = taskmesh_testkit::run_bounded(
            &mut self.command(args),
            std::time::Duration::from_secs(60),
        );
        assert!(!done.timed_out, "taskmesh {args:?} ran past its time");
        Run {
            code: done.status.and_then(|s| s.code()).unwrap_or(-1),
            stdout: done.stdout,
            stderr: done.stderr,
        }
    }

    /// Run `args`, which must exit 0.
    fn ok(&self, args: &[&str]) -> Run {
        let r = self.run(args);
        assert_eq!(r.code, 0, "taskmesh {args:?}: {r:?}");
        r
    }
}

/// The text of a result's first content item.
fn first_text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}
