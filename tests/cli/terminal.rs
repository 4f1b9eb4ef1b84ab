//! The command line under a real terminal: tmux runs it in a detached session of its own
//! server (a socket named for this test), the test types into it (`send-keys`) and reads the
//! screen (`capture-pane`) until what it waits for shows, within a bound. The progress bar
//! moves, the server's questions are answered at the prompt (on both generations, and for a
//! task left running and watched later), and Ctrl-C offers to cancel the task, which then ends
//! `cancelled`. The tmux server is killed when the test ends, passed or not.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use taskmesh_testkit::Server;

use super::{Cli, TASKMESH};

/// How long a screen may take to show what a test waits for.
const SCREEN_WAIT: Duration = Duration::from_secs(30);

/// A tmux server with one session running one command; killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// Run `cli`'s `args` in a 200×50 terminal; when it exits, the screen shows
    /// `EXIT=<code>` and stays.
    fn run(cli: &Cli, args: &[&str]) -> Tmux {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let socket = format!(
            "taskmesh-cli-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
        let mut line = vec!["env".to_string(), "-i".into(), quote("TERM=xterm-256color")];
        for (k, v) in &cli.env {
            line.push(quote(&format!("{k}={v}")));
        }
        line.push(quote(TASKMESH));
        line.extend(args.iter().map(|a| quote(a)));
        let shell = format!("{}; echo EXIT=$?; sleep 600", line.join(" "));
        let t = Tmux { socket };
        t.tmux(&[
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-x",
            "200",
            "-y",
            "50",
            &shell,
        ]);
        t
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux runs (the tests need it: see tests/run.sh)");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p"])
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys"];
        args.extend_from_slice(keys);
        self.tmux(&args);
    }

    /// Type `text` as it is (no key names).
    fn type_text(&self, text: &str) {
        self.tmux(&["send-keys", "-l", text]);
    }

    /// The screen, once `found` holds of it; panics with the last screen after
    /// [`SCREEN_WAIT`].
    fn wait_for(&self, what: &str, found: impl Fn(&str) -> bool) -> String {
        let start = std::time::Instant::now();
        loop {
            let screen = self.screen();
            if found(&screen) {
                return screen;
            }
            assert!(
                start.elapsed() < SCREEN_WAIT,
                "the screen never showed {what}:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn wait_text(&self, text: &str) -> String {
        self.wait_for(text, |s| s.contains(text))
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

/// The progress the bar shows as `N/of`, when it shows one.
fn progress_on(screen: &str, of: &str) -> Option<u64> {
    let end = screen.find(&format!("/{of} "))?;
    let digits: String = screen[..end]
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.chars().rev().collect::<String>().parse().ok()
}

#[test]
fn the_progress_bar_moves_and_ctrl_c_cancels_the_task() {
    let s = Server::start(TASKMESH, "");
    let cli = Cli::at(&s.url);
    let t = Tmux::run(&cli, &["call", "slow_compute", "seconds=60", "label=bar"]);

    let first = t.wait_for("progress", |s| progress_on(s, "60").is_some());
    let at_first = progress_on(&first, "60").unwrap();
    assert!(first.contains('%') && first.contains("working"), "{first}");
    let later = t.wait_for("progress past the first", |s| {
        progress_on(s, "60").is_some_and(|p| p > at_first)
    });
    assert_ne!(first, later);

    t.keys(&["C-c"]);
    let asked = t.wait_text("What about task");
    let id: String = asked
        .split("What about task ")
        .nth(1)
        .unwrap()
        .chars()
        .take_while(|c| *c != '?')
        .collect();
    assert!(
        asked.contains("Cancel the task") && asked.contains("Detach"),
        "{asked}"
    );
    t.keys(&["Enter"]);
    let end = t.wait_text("EXIT=");
    assert!(end.contains(&format!("task {id} cancelled")), "{end}");
    assert!(end.contains("EXIT=1"), "a cancelled task exits 1: {end}");

    let task = cli.ok(&["tasks", "get", &id, "--json"]).json();
    assert_eq!(task["status"], "cancelled", "{task}");
}

#[test]
fn questions_are_answered_at_the_prompt() {
    let s = Server::start(TASKMESH, "");
    let cli = Cli::at(&s.url);

    // 2025-11-25: confirm_delete asks a yes/no question.
    let t = Tmux::run(&cli, &["call", "confirm_delete", "filename=report.txt"]);
    t.wait_for("the question", |s| {
        s.contains("Delete report.txt?") && s.contains("Decline")
    });
    t.keys(&["Enter"]);
    t.wait_text("Delete the file?");
    t.keys(&["y"]);
    let end = t.wait_text("EXIT=");
    assert!(
        end.contains("Deleted report.txt") && end.contains("EXIT=0"),
        "{end}"
    );
    drop(t);

    // A task left running asks when it is watched, from another process.
    let id = cli
        .ok(&["call", "confirm_delete", "filename=notes.txt", "--detach"])
        .stdout
        .trim()
        .to_string();
    let t = Tmux::run(&cli, &["tasks", "watch", &id]);
    t.wait_for("the question", |s| {
        s.contains("Delete notes.txt?") && s.contains("Decline")
    });
    t.keys(&["Enter"]);
    t.wait_text("Delete the file?");
    t.keys(&["n"]);
    let end = t.wait_text("EXIT=");
    assert!(
        end.contains("Kept notes.txt") && end.contains("EXIT=0"),
        "{end}"
    );
    drop(t);

    // 2026-07-28: multi_input asks a name (typed), then a colour (declined).
    let t = Tmux::run(&cli, &["call", "multi_input", "--protocol", "2026-07-28"]);
    t.wait_for("the first question", |s| {
        s.contains("Your name?") && s.contains("Answer")
    });
    t.keys(&["Enter"]);
    t.wait_text("name");
    t.type_text("Ada");
    t.keys(&["Enter"]);
    t.wait_for("the second question", |s| {
        s.contains("Your favourite colour?") && s.contains("Decline")
    });
    t.keys(&["Down"]);
    t.keys(&["Enter"]);
    let end = t.wait_text("EXIT=");
    assert!(end.contains("an answer was declined"), "{end}");
    assert!(end.contains("EXIT=1"), "a tool error exits 1: {end}");
}

#[test]
fn progress_is_read_off_the_screen() {
    assert_eq!(
        progress_on("[==>  ]  5% working · 3/60 · bar", "60"),
        Some(3)
    );
    assert_eq!(progress_on("working · 12/60 ·", "60"), Some(12));
    assert_eq!(progress_on("working", "60"), None);
}
