//! The stdio transport: a server process started by the client, one JSON-RPC message per line
//! on its stdin and stdout; what it writes to stderr goes to the log (at debug level).
//!
//! The process runs in a process group of its own, so that what it starts ends with it: to
//! stop it the client closes its stdin, and sends the group SIGTERM after [`GRACE`] and
//! SIGKILL after another (the shutdown the stdio transport describes), and SIGKILL to what
//! is left of the group once the process has exited.

use std::process::Stdio as Piped;
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

use crate::{ClientError, Inner, StdioSpec};

/// How long a stopping process gets after its stdin is closed, and again after SIGTERM.
const GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Send `sig` to the process group `pgid`.
fn signal_group(pgid: Option<u32>, sig: libc::c_int) {
    if let Some(pgid) = pgid.and_then(|p| libc::pid_t::try_from(p).ok()) {
        // SAFETY: kill(2) with a negative pid signals a process group; it reads no memory.
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}

/// The process and its stdin.
pub(crate) struct Stdio {
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    child: parking_lot::Mutex<Option<Child>>,
}

impl Stdio {
    pub(crate) fn unstarted() -> Self {
        Self {
            stdin: tokio::sync::Mutex::new(None),
            child: parking_lot::Mutex::new(None),
        }
    }

    /// Start the process with only the environment `spec` gives it, and read its output.
    pub(crate) fn start(&self, spec: &StdioSpec, inner: &Arc<Inner>) -> Result<(), ClientError> {
        let mut cmd = Command::new(&spec.command);
        cmd.args(&spec.args)
            .env_clear()
            .envs(&spec.env)
            .stdin(Piped::piped())
            .stdout(Piped::piped())
            .stderr(Piped::piped())
            .process_group(0)
            .kill_on_drop(true);
        if let Some(dir) = &spec.cwd {
            cmd.current_dir(dir);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| ClientError::Transport(format!("cannot start {:?}: {e}", spec.command)))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(ClientError::Transport("the process has no pipes".into()));
        };
        tracing::info!(upstream = %inner.name, command = %spec.command, pid = child.id(), "upstream process started");
        if let Ok(mut s) = self.stdin.try_lock() {
            *s = Some(stdin);
        }
        *self.child.lock() = Some(child);
        let weak = Arc::downgrade(inner);
        let max = inner.max_message_bytes;
        let name = inner.name.clone();
        tokio::spawn(async move {
            let mut out = BufReader::new(stdout);
            let why = loop {
                match read_line(&mut out, max).await {
                    Ok(Some(line)) => {
                        let Some(inner) = weak.upgrade() else { return };
                        if !line.iter().all(u8::is_ascii_whitespace) {
                            inner.handle(&line, None);
                        }
                    }
                    Ok(None) => break "the upstream process closed its output".to_string(),
                    Err(e) => break e,
                }
            };
            if let Some(inner) = weak.upgrade() {
                let status = inner.exit_status().await;
                inner.close(&format!("{why}{status}"));
            }
        });
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::debug!(upstream = %name, line = %line, "upstream stderr");
            }
        });
        Ok(())
    }

    /// Write one message and its newline.
    pub(crate) async fn send(&self, mut json: Vec<u8>) -> Result<(), ClientError> {
        json.push(b'\n');
        let mut stdin = self.stdin.lock().await;
        let Some(s) = stdin.as_mut() else {
            return Err(ClientError::Closed(
                "the upstream process is not running".into(),
            ));
        };
        let written = async {
            s.write_all(&json).await?;
            s.flush().await
        };
        written
            .await
            .map_err(|e| ClientError::Closed(format!("cannot write to the upstream process: {e}")))
    }

    /// Stop the process and its group (in the background: close stdin, then SIGTERM, then
    /// SIGKILL, each after [`GRACE`]).
    pub(crate) fn kill(&self) {
        let Some(mut child) = self.child.lock().take() else {
            return;
        };
        let stdin = self.stdin.try_lock().ok().and_then(|mut s| s.take());
        let pgid = child.id();
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            signal_group(pgid, libc::SIGKILL);
            let _ = child.start_kill();
            return;
        };
        rt.spawn(async move {
            drop(stdin);
            if tokio::time::timeout(GRACE, child.wait()).await.is_err() {
                signal_group(pgid, libc::SIGTERM);
                if tokio::time::timeout(GRACE, child.wait()).await.is_err() {
                    signal_group(pgid, libc::SIGKILL);
                    let _ = child.wait().await;
                }
            }
            signal_group(pgid, libc::SIGKILL);
        });
    }
}

impl Inner {
    /// ", exit status N" once the process has exited (waited for briefly), else "".
    async fn exit_status(&self) -> String {
        let crate::Link::Stdio(s) = &self.link else {
            return String::new();
        };
        let child = s.child.lock().take();
        let Some(mut child) = child else {
            return String::new();
        };
        let pgid = child.id();
        let status = match tokio::time::timeout(GRACE, child.wait()).await {
            Ok(Ok(status)) => format!(" ({status})"),
            _ => {
                signal_group(pgid, libc::SIGKILL);
                let _ = child.wait().await;
                String::new()
            }
        };
        signal_group(pgid, libc::SIGKILL);
        status
    }
}

/// The next line (without its newline); `None` at the end of the output. A line longer than
/// `max` bytes is an error.
async fn read_line<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
    max: usize,
) -> Result<Option<Vec<u8>>, String> {
    let mut line = Vec::new();
    loop {
        let buf = r
            .fill_buf()
            .await
            .map_err(|e| format!("cannot read the upstream process's output: {e}"))?;
        if buf.is_empty() {
            return Ok((!line.is_empty()).then_some(line));
        }
        match buf.iter().position(|b| *b == b'\n') {
            Some(i) => {
                line.extend_from_slice(&buf[..i]);
                r.consume(i + 1);
                if line.len() > max {
                    return Err(format!("the upstream sent a message over {max} bytes"));
                }
                return Ok(Some(line));
            }
            None => {
                let n = buf.len();
                line.extend_from_slice(buf);
                r.consume(n);
                if line.len() > max {
                    return Err(format!("the upstream sent a message over {max} bytes"));
                }
            }
        }
    }
}
