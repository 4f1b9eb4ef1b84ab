//! The node's log as a person reads it: written to a file or a pipe it is plain text, with no
//! terminal colour codes, even when `NO_COLOR` is not set.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::TASKMESH;

#[test]
fn a_log_written_to_a_pipe_has_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(TASKMESH)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR")
        .env_remove("TASKMESH_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    // Every line up to the one that announces the address (bounded, should the node never
    // get there).
    let mut seen = Vec::new();
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(60)) {
        let announced = line.contains("listening on");
        seen.push(line);
        if announced {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        seen.iter().any(|l| l.contains("listening on")),
        "the node did not start: {seen:?}"
    );
    let coloured: Vec<&String> = seen.iter().filter(|l| l.contains('\x1b')).collect();
    assert!(coloured.is_empty(), "escape codes in the log: {coloured:?}");
}
