//! Following a call or a task to its end, showing how it goes: on a terminal a live progress
//! bar (indicatif) on standard error with the status, the progress and the status message;
//! when standard output or standard error is not a terminal, plain lines on standard error;
//! with `--json` nothing. The server's questions
//! are asked as they come ([`super::prompt`]), a log message is printed above the bar, and a
//! sampling request is refused (the command line has no model).
//!
//! Ctrl-C while a task is followed asks what to do: cancel the task (`tasks/cancel`), detach
//! (the task runs on, and its id is printed with the command that follows it again), or keep
//! following. A plain call has nothing to detach from: Ctrl-C gives it up, which cancels it.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;
use taskmesh_client::{CallEvent, ClientError, Step};

use super::conn::{refusal, Conn, Running};
use super::prompt;

/// How following ended.
pub enum Ended {
    /// The call's outcome.
    Outcome(Result<Value, ClientError>),
    /// The user detached from task `id`.
    Detached(String),
    /// The user cancelled task `id`; what `tasks/cancel` answered.
    Cancelled(String, Result<Value, ClientError>),
    /// The user gave up a plain call.
    Interrupted,
}

/// Where the progress goes.
pub struct Display {
    bar: Option<ProgressBar>,
    /// Plain lines on standard error (not a terminal, not `--json`).
    lines: bool,
    status: String,
    message: Option<String>,
    progress: Option<(f64, Option<f64>, Option<String>)>,
}

/// The scale of the bar: progress is a float, the bar counts in thousandths.
const SCALE: f64 = 1000.0;

impl Display {
    /// A display for following `what`: a bar when standard output and standard error are
    /// both terminals, plain lines otherwise (output sent to a file or a pipe gets no escape
    /// codes, nor does the log beside it), nothing with `quiet`.
    pub fn new(what: &str, quiet: bool) -> Self {
        let terminal = console::Term::stderr().is_term() && console::Term::stdout().is_term();
        let bar = (!quiet && terminal).then(|| {
            let bar = ProgressBar::with_draw_target(None, bar_target());
            bar.set_style(spinner_style());
            bar.set_prefix(what.to_string());
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Self {
            bar,
            lines: !quiet && !terminal,
            status: "starting".into(),
            message: None,
            progress: None,
        }
    }

    fn status(&mut self, status: String, message: Option<String>) {
        if self.lines {
            match &message {
                Some(m) => eprintln!("status: {status}: {m}"),
                None => eprintln!("status: {status}"),
            }
        }
        self.status = status;
        self.message = message;
        self.redraw();
    }

    fn progress(&mut self, progress: f64, total: Option<f64>, message: Option<String>) {
        if self.lines {
            eprintln!(
                "progress: {}{}",
                progress_text(progress, total),
                message
                    .as_deref()
                    .map(|m| format!(" {m}"))
                    .unwrap_or_default()
            );
        }
        self.progress = Some((progress, total, message));
        self.redraw();
    }

    fn log(&self, params: &Value) {
        let level = params["level"].as_str().unwrap_or("info");
        let text = match &params["data"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        match &self.bar {
            Some(bar) => bar.println(format!("{level}: {text}")),
            None if self.lines => eprintln!("{level}: {text}"),
            None => {}
        }
    }

    fn redraw(&self) {
        let Some(bar) = &self.bar else { return };
        let mut parts = vec![self.status.clone()];
        if let Some((p, total, m)) = &self.progress {
            parts.push(progress_text(*p, *total));
            if let Some(m) = m {
                parts.push(m.clone());
            }
            match total {
                Some(t) if *t > 0.0 => {
                    if bar.length().is_none() {
                        bar.set_style(bar_style());
                    }
                    bar.set_length((t * SCALE) as u64);
                    bar.set_position((p.min(*t) * SCALE) as u64);
                }
                _ => {}
            }
        }
        if let Some(m) = &self.message {
            parts.push(m.clone());
        }
        bar.set_message(shortened(&parts.join(" · "), MESSAGE_CHARS));
    }

    /// Run `f` (which asks in the terminal) with the bar out of the way.
    fn aside<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.bar {
            Some(bar) => tokio::task::block_in_place(|| bar.suspend(f)),
            None => tokio::task::block_in_place(f),
        }
    }

    /// Take the bar off the screen.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Standard error as the bar's terminal, a few columns narrower than it is: the bar's line,
/// padded to the width, then never reaches the last column, so the `^C` a terminal echoes
/// stays on that line (which the bar clears) instead of wrapping onto the next.
#[derive(Debug)]
struct Narrower(console::Term);

/// Columns kept free at the end of the bar's line.
const FREE_COLUMNS: u16 = 3;

impl indicatif::TermLike for Narrower {
    fn width(&self) -> u16 {
        self.0.size().1.saturating_sub(FREE_COLUMNS)
    }
    fn height(&self) -> u16 {
        self.0.size().0
    }
    fn move_cursor_up(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_up(n)
    }
    fn move_cursor_down(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_down(n)
    }
    fn move_cursor_right(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_right(n)
    }
    fn move_cursor_left(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_left(n)
    }
    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.0.write_line(s)
    }
    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.0.write_str(s)
    }
    fn clear_line(&self) -> std::io::Result<()> {
        self.0.clear_line()
    }
    fn flush(&self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// Where the bar is drawn (at most 20 times a second).
fn bar_target() -> ProgressDrawTarget {
    ProgressDrawTarget::term_like_with_hz(Box::new(Narrower(console::Term::stderr())), 20)
}

/// The longest message on the bar's line, in characters: the line stays shorter than a
/// terminal's width, so that nothing typed at it (Ctrl-C's `^C`) wraps it onto two lines,
/// which the bar could then not clear.
const MESSAGE_CHARS: usize = 100;

/// `s`, cut to `max` characters with an ellipsis.
fn shortened(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut cut: String = s.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

fn progress_text(progress: f64, total: Option<f64>) -> String {
    match total {
        Some(t) => format!("{progress}/{t}"),
        None => format!("{progress}"),
    }
}

fn spinner_style() -> ProgressStyle {
    ProgressStyle::with_template("{spinner:.cyan} {prefix:.bold} {elapsed} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
}

fn bar_style() -> ProgressStyle {
    ProgressStyle::with_template(
        "{spinner:.cyan} {prefix:.bold} [{bar:30.cyan/blue}] {percent:>3}% {msg}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ")
}

/// What Ctrl-C while following a task asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Choice {
    Cancel,
    Detach,
    Keep,
}

fn ask_choice(task_id: &str) -> Choice {
    if !prompt::can_ask() {
        return Choice::Detach;
    }
    let picked = dialoguer::Select::with_theme(&dialoguer::theme::ColorfulTheme::default())
        .with_prompt(format!("Interrupted. What about task {task_id}?"))
        .items([
            "Cancel the task",
            "Detach (the task runs on)",
            "Keep following",
        ])
        .default(0)
        .interact_on_opt(&console::Term::stderr());
    match picked {
        Ok(Some(0)) => Choice::Cancel,
        Ok(Some(2)) => Choice::Keep,
        _ => Choice::Detach,
    }
}

/// Ctrl-C, as a stream of signals.
struct Interrupts {
    #[cfg(unix)]
    sigint: tokio::signal::unix::Signal,
}

impl Interrupts {
    fn new() -> std::io::Result<Self> {
        Ok(Self {
            #[cfg(unix)]
            sigint: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?,
        })
    }

    async fn next(&mut self) {
        #[cfg(unix)]
        {
            self.sigint.recv().await;
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Follow `running` to its end.
pub async fn follow(conn: &Conn, mut running: Running, display: &mut Display) -> Ended {
    let mut interrupts = match Interrupts::new() {
        Ok(i) => Some(i),
        Err(e) => {
            eprintln!("Ctrl-C cannot be caught ({e}); it will end the command");
            None
        }
    };
    loop {
        let step = tokio::select! {
            s = running.next() => s,
            _ = async {
                match &mut interrupts {
                    Some(i) => i.next().await,
                    None => std::future::pending().await,
                }
            } => {
                let Some(id) = running.task_id() else {
                    display.finish();
                    running.give_up().await;
                    return Ended::Interrupted;
                };
                match display.aside(|| ask_choice(&id)) {
                    Choice::Cancel => {
                        display.finish();
                        let answer = conn.cancel(&id).await;
                        return Ended::Cancelled(id, answer);
                    }
                    Choice::Detach => {
                        display.finish();
                        return Ended::Detached(id);
                    }
                    Choice::Keep => continue,
                }
            }
        };
        match step {
            Step::Event(CallEvent::Progress {
                progress,
                total,
                message,
            }) => display.progress(progress, total, message),
            Step::Event(CallEvent::Status { status, message }) => display.status(status, message),
            Step::Event(CallEvent::Log(params)) => display.log(&params),
            Step::Event(CallEvent::Request {
                method,
                params,
                reply,
            }) => {
                let answer = if method == "elicitation/create" {
                    Ok(display.aside(|| prompt::elicit(&params)))
                } else {
                    Err(refusal(&format!("the command line cannot answer {method}")))
                };
                let _ = reply.send(answer);
            }
            Step::Done(outcome) => {
                display.finish();
                return Ended::Outcome(outcome);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut() {
        assert_eq!(shortened("working", 10), "working");
        assert_eq!(shortened("abcdefghijkl", 5), "abcd…");
        assert_eq!(shortened("ééééé", 5), "ééééé");
    }

    #[test]
    fn progress_reads_with_or_without_a_total() {
        assert_eq!(progress_text(3.0, Some(10.0)), "3/10");
        assert_eq!(progress_text(0.5, None), "0.5");
    }
}
