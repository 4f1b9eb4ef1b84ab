//! The built-in tools. Their names and argument shapes are fixed: clients and tests rely on them.
//!
//! | tool | arguments | taskSupport | resume |
//! |---|---|---|---|
//! | `greet` | `{name}` | forbidden | rerun |
//! | `slow_compute` | `{seconds, label?}` | optional | rerun |
//! | `failing_job` | `{}` | required | rerun |
//! | `protocol_error_job` | `{}` | optional | rerun |
//! | `confirm_delete` | `{filename}` | required | fail |
//! | `multi_input` | `{}` | required | fail |
//! | `ask_model` | `{prompt}` | required | rerun |
//!
//! Each is a [`Builtin`]: a spec plus two plain functions, one that validates the arguments and
//! one that runs the call.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use serde_json::{json, Map, Value};
use taskmesh_mcp::jsonrpc::{ErrorObject, INTERNAL_ERROR};
use taskmesh_mcp::params;
use taskmesh_mcp::TaskSupport;

use crate::{first_text, text_result, ResumePolicy, Tool, ToolContext, ToolResult, ToolSpec};

/// Longest `slow_compute` run accepted, in seconds (one day).
pub const SLOW_COMPUTE_MAX_SECONDS: f64 = 86_400.0;

pub(crate) type Validate = fn(&Map<String, Value>) -> Result<(), ErrorObject>;
pub(crate) type Run = fn(Map<String, Value>, ToolContext) -> BoxFuture<'static, ToolResult>;

/// A tool made of a spec and two functions.
pub struct Builtin {
    pub(crate) spec: ToolSpec,
    pub(crate) validate: Validate,
    pub(crate) run: Run,
}

impl Tool for Builtin {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn validate(&self, args: &Map<String, Value>) -> Result<(), ErrorObject> {
        (self.validate)(args)
    }
    fn call(&self, args: Map<String, Value>, ctx: ToolContext) -> BoxFuture<'static, ToolResult> {
        (self.run)(args, ctx)
    }
}

/// Every built-in tool, in the order of the table above.
pub fn all() -> Vec<Arc<dyn Tool>> {
    [
        greet(),
        slow_compute(),
        failing_job(),
        protocol_error_job(),
        confirm_delete(),
        multi_input(),
        ask_model(),
    ]
    .into_iter()
    .map(|b| Arc::new(b) as Arc<dyn Tool>)
    .collect()
}

pub(crate) fn empty_schema() -> Value {
    json!({ "type": "object", "properties": {}, "additionalProperties": false })
}

/// An object schema with one required string property.
pub(crate) fn one_string(name: &str) -> Value {
    json!({
        "type": "object",
        "properties": { name: { "type": "string" } },
        "required": [name],
    })
}

pub(crate) fn no_args(args: &Map<String, Value>) -> Result<(), ErrorObject> {
    match args.keys().next() {
        None => Ok(()),
        Some(k) => Err(ErrorObject::invalid_params(format!(
            "Invalid params: unexpected argument '{k}'"
        ))),
    }
}

/// The string argument `name` (already validated).
pub(crate) fn str_arg(args: &Map<String, Value>, name: &str) -> String {
    args.get(name)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Sleep for `d`, or return `false` early when cancelled.
async fn sleep_or_cancel(ctx: &ToolContext, d: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => true,
        _ = ctx.cancel.cancelled() => false,
    }
}

fn cancelled() -> ErrorObject {
    ErrorObject::new(
        taskmesh_mcp::jsonrpc::REQUEST_CANCELLED,
        "Request cancelled",
    )
}

/// `greet {name}`: answers at once with `Hello, {name}!`; never runs as a task.
pub fn greet() -> Builtin {
    Builtin {
        spec: ToolSpec {
            name: "greet".into(),
            title: Some("Greet".into()),
            description: Some("Answers at once with a greeting for `name`.".into()),
            input_schema: one_string("name"),
            task_support: TaskSupport::Forbidden,
            resume: ResumePolicy::Rerun,
            output_schema: None,
            annotations: None,
        },
        validate: |args| params::req_str(args, "name").map(|_| ()),
        run: |args, _ctx| {
            let name = str_arg(&args, "name");
            async move { Ok(text_result(format!("Hello, {name}!"), false)) }.boxed()
        },
    }
}

/// `slow_compute {seconds, label?}`: works `seconds` seconds (0 to
/// [`SLOW_COMPUTE_MAX_SECONDS`]), reporting progress about every second when the call has a
/// progress token, then answers with the label and the seconds. Stops when cancelled.
pub fn slow_compute() -> Builtin {
    Builtin {
        spec: ToolSpec {
            name: "slow_compute".into(),
            title: Some("Slow compute".into()),
            description: Some("Works for `seconds` seconds, reporting progress about every second, then answers with the label and the seconds.".into()),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "seconds": { "type": "number", "minimum": 0, "maximum": SLOW_COMPUTE_MAX_SECONDS },
                    "label": { "type": "string" }
                },
                "required": ["seconds"],
            }),
            task_support: TaskSupport::Optional,
            resume: ResumePolicy::Rerun,
            output_schema: None,
            annotations: None,
        },
        validate: |args| {
            let s = params::req_f64(args, "seconds")?;
            if !(0.0..=SLOW_COMPUTE_MAX_SECONDS).contains(&s) {
                return Err(ErrorObject::invalid_params(format!(
                    "Invalid params: 'seconds' must be between 0 and {SLOW_COMPUTE_MAX_SECONDS}"
                )));
            }
            params::opt_str(args, "label").map(|_| ())
        },
        run: |args, ctx| {
            let seconds = args.get("seconds").and_then(Value::as_f64).unwrap_or(0.0);
            let label = args
                .get("label")
                .and_then(Value::as_str)
                .unwrap_or("slow_compute")
                .to_string();
            run_slow_compute(seconds, label, ctx).boxed()
        },
    }
}

async fn run_slow_compute(seconds: f64, label: String, ctx: ToolContext) -> ToolResult {
    let total = Duration::from_secs_f64(seconds);
    let start = tokio::time::Instant::now();
    let mut step = 0u64;
    loop {
        let elapsed = start.elapsed();
        if elapsed >= total {
            break;
        }
        let next = (total - elapsed).min(Duration::from_secs(1));
        if !sleep_or_cancel(&ctx, next).await {
            return Err(cancelled());
        }
        step += 1;
        let done = (step as f64).min(seconds);
        if ctx.has_progress_token && done < seconds {
            ctx.io.progress(
                done,
                Some(seconds),
                Some(format!("{label}: {step} s of {seconds} s")),
            );
        }
    }
    if ctx.has_progress_token {
        ctx.io
            .progress(seconds, Some(seconds), Some(format!("{label}: done")));
    }
    Ok(text_result(
        format!("{label}: computed for {seconds} seconds"),
        false,
    ))
}

/// `failing_job {}`: after about one second answers with a tool error (`isError: true`);
/// task only.
pub fn failing_job() -> Builtin {
    Builtin {
        spec: ToolSpec {
            name: "failing_job".into(),
            title: Some("Failing job".into()),
            description: Some(
                "Runs about one second, then answers with a tool error (isError: true).".into(),
            ),
            input_schema: empty_schema(),
            task_support: TaskSupport::Required,
            resume: ResumePolicy::Rerun,
            output_schema: None,
            annotations: None,
        },
        validate: no_args,
        run: |_args, ctx| {
            async move {
                if !sleep_or_cancel(&ctx, Duration::from_secs(1)).await {
                    return Err(cancelled());
                }
                Ok(text_result(
                    "failing_job: the job failed (disk quota exceeded while writing the report)",
                    true,
                ))
            }
            .boxed()
        },
    }
}

/// `protocol_error_job {}`: fails at once with JSON-RPC error `-32603`.
pub fn protocol_error_job() -> Builtin {
    Builtin {
        spec: ToolSpec {
            name: "protocol_error_job".into(),
            title: Some("Protocol error job".into()),
            description: Some("Fails with JSON-RPC error -32603.".into()),
            input_schema: empty_schema(),
            task_support: TaskSupport::Optional,
            resume: ResumePolicy::Rerun,
            output_schema: None,
            annotations: None,
        },
        validate: no_args,
        run: |_args, _ctx| {
            async move {
                Err(ErrorObject::new(
                    INTERNAL_ERROR,
                    "protocol_error_job: the backend answered with a malformed reply",
                ))
            }
            .boxed()
        },
    }
}

/// Ask the client for a form and return the accepted content (or `None` when declined).
pub(crate) async fn elicit(
    ctx: &ToolContext,
    message: String,
    schema: Value,
) -> Result<Option<Map<String, Value>>, ErrorObject> {
    if !ctx.client_elicitation {
        return Err(ErrorObject::invalid_params(
            "the client did not declare the elicitation capability",
        ));
    }
    let answer = tokio::select! {
        a = ctx.io.request("elicitation/create", json!({
            "mode": "form",
            "message": message,
            "requestedSchema": schema,
        })) => a?,
        _ = ctx.cancel.cancelled() => return Err(cancelled()),
    };
    match answer.get("action").and_then(Value::as_str) {
        Some("accept") => Ok(Some(
            answer
                .get("content")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
        )),
        Some("decline") | Some("cancel") => Ok(None),
        _ => Err(ErrorObject::invalid_params(
            "elicitation answer has no valid 'action'",
        )),
    }
}

/// `confirm_delete {filename}`: asks the user to confirm (`elicitation/create`), then says
/// whether it deleted the file (it touches no file). With a progress token it reports progress
/// 1 of 1 as soon as the answer is in. Task only; needs the client's `elicitation`
/// capability; not rerun after a failover.
pub fn confirm_delete() -> Builtin {
    Builtin {
        spec: ToolSpec {
            name: "confirm_delete".into(),
            title: Some("Confirm delete".into()),
            description: Some(
                "Asks the user to confirm, then says whether it deleted `filename`.".into(),
            ),
            input_schema: one_string("filename"),
            task_support: TaskSupport::Required,
            resume: ResumePolicy::Fail,
            output_schema: None,
            annotations: None,
        },
        validate: |args| params::req_str(args, "filename").map(|_| ()),
        run: |args, ctx| {
            let filename = str_arg(&args, "filename");
            async move {
                let schema = json!({
                    "type": "object",
                    "properties": { "confirm": { "type": "boolean", "title": "Delete the file?" } },
                    "required": ["confirm"],
                });
                let answer = elicit(&ctx, format!("Delete {filename}?"), schema).await?;
                if ctx.has_progress_token {
                    ctx.io
                        .progress(1.0, Some(1.0), Some("answer received".into()));
                }
                let confirmed = answer
                    .as_ref()
                    .and_then(|c| c.get("confirm"))
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                Ok(if confirmed {
                    text_result(format!("Deleted {filename}"), false)
                } else {
                    text_result(format!("Kept {filename}: deletion not confirmed"), false)
                })
            }
            .boxed()
        },
    }
}

/// `multi_input {}`: asks two questions (`elicitation/create`: a name, then a colour) and
/// answers with both, or with a tool error when one was declined. Task only; needs the
/// client's `elicitation` capability; not rerun after a failover.
pub fn multi_input() -> Builtin {
    multi_input_asking(
        "Asks two questions (a name, then a colour) before it answers.",
        |_args, ctx| ask_name_and_colour(ctx, false).boxed(),
    )
}

/// A task-only `multi_input` described by `description`, running `run`.
pub(crate) fn multi_input_asking(description: &str, run: Run) -> Builtin {
    Builtin {
        spec: ToolSpec {
            name: "multi_input".into(),
            title: Some("Multi input".into()),
            description: Some(description.into()),
            input_schema: empty_schema(),
            task_support: TaskSupport::Required,
            resume: ResumePolicy::Fail,
            output_schema: None,
            annotations: None,
        },
        validate: no_args,
        run,
    }
}

/// Ask a name and a colour, one after the other or `at_once` (both out together, the name's
/// first), and say who likes which colour.
pub(crate) async fn ask_name_and_colour(ctx: ToolContext, at_once: bool) -> ToolResult {
    let ask_name = elicit(&ctx, "Your name?".into(), one_string("name"));
    let ask_colour = elicit(&ctx, "Your favourite colour?".into(), one_string("colour"));
    let (name, colour) = if at_once {
        let (n, c) = futures::join!(ask_name, ask_colour);
        (n?, c?)
    } else {
        let n = ask_name.await?;
        (n, ask_colour.await?)
    };
    let read = |c: Option<Map<String, Value>>, key: &str| {
        c.and_then(|c| c.get(key).and_then(Value::as_str).map(str::to_string))
    };
    match (read(name, "name"), read(colour, "colour")) {
        (Some(n), Some(c)) => Ok(text_result(format!("{n} likes {c}"), false)),
        _ => Ok(text_result("multi_input: an answer was declined", true)),
    }
}

/// `ask_model {prompt}`: sends `prompt` to the client's model (`sampling/createMessage`,
/// at most 256 tokens) and answers with its text. Task only; needs the client's `sampling`
/// capability.
pub fn ask_model() -> Builtin {
    Builtin {
        spec: ToolSpec {
            name: "ask_model".into(),
            title: Some("Ask model".into()),
            description: Some(
                "Asks the client's model (sampling/createMessage) and returns its text.".into(),
            ),
            input_schema: one_string("prompt"),
            task_support: TaskSupport::Required,
            resume: ResumePolicy::Rerun,
            output_schema: None,
            annotations: None,
        },
        validate: |args| params::req_str(args, "prompt").map(|_| ()),
        run: |args, ctx| {
            let prompt = str_arg(&args, "prompt");
            async move {
                if !ctx.client_sampling {
                    return Err(ErrorObject::invalid_params(
                        "the client did not declare the sampling capability",
                    ));
                }
                let answer = tokio::select! {
                    a = ctx.io.request("sampling/createMessage", json!({
                        "messages": [{ "role": "user", "content": { "type": "text", "text": prompt } }],
                        "maxTokens": 256,
                    })) => a?,
                    _ = ctx.cancel.cancelled() => return Err(cancelled()),
                };
                let text = answer
                    .get("content")
                    .and_then(|c| {
                        if c.is_array() {
                            first_text(&json!({ "content": c })).map(str::to_string)
                        } else {
                            c.get("text").and_then(Value::as_str).map(str::to_string)
                        }
                    })
                    .ok_or_else(|| {
                        ErrorObject::invalid_params("sampling answer has no text content")
                    })?;
                Ok(text_result(format!("The model said: {text}"), false))
            }
            .boxed()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ToolIo, ToolRegistry};
    use std::sync::Mutex;
    use tokio_util::sync::CancellationToken;

    struct Scripted {
        answers: Mutex<Vec<Value>>,
        asked: Mutex<Vec<(String, Value)>>,
        progress: Mutex<Vec<f64>>,
    }

    impl ToolIo for Scripted {
        fn progress(&self, p: f64, _t: Option<f64>, _m: Option<String>) {
            self.progress.lock().unwrap().push(p);
        }
        fn log(
            &self,
            _level: taskmesh_mcp::LogLevel,
            _logger: Option<String>,
            _data: Value,
        ) -> BoxFuture<'static, ()> {
            Box::pin(async {})
        }
        fn request(&self, method: &'static str, params: Value) -> BoxFuture<'static, ToolResult> {
            self.asked
                .lock()
                .unwrap()
                .push((method.to_string(), params));
            let a = self.answers.lock().unwrap().remove(0);
            async move { Ok(a) }.boxed()
        }
    }

    fn ctx(answers: Vec<Value>) -> (ToolContext, Arc<Scripted>) {
        let io = Arc::new(Scripted {
            answers: Mutex::new(answers),
            asked: Mutex::new(vec![]),
            progress: Mutex::new(vec![]),
        });
        (
            ToolContext {
                cancel: CancellationToken::new(),
                ended: CancellationToken::new(),
                io: io.clone(),
                has_progress_token: true,
                client_elicitation: true,
                client_sampling: true,
                principal: "alice".into(),
                upstream_task: None,
                answers: Arc::default(),
                traceparent: None,
            },
            io,
        )
    }

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[tokio::test]
    async fn greet_and_validation() {
        let r = ToolRegistry::with_builtins();
        let g = r.get("greet").unwrap();
        let (c, _) = ctx(vec![]);
        let out = g.call(obj(json!({"name":"Ada"})), c).await.unwrap();
        assert_eq!(first_text(&out), Some("Hello, Ada!"));
        assert!(g
            .validate(&obj(json!({"name": 3})))
            .unwrap_err()
            .message
            .contains("name"));
        let s = r.get("slow_compute").unwrap();
        assert!(s
            .validate(&obj(json!({"seconds": "x"})))
            .unwrap_err()
            .message
            .contains("seconds"));
        assert!(s.validate(&obj(json!({"seconds": -1}))).is_err());
        assert!(s
            .validate(&obj(json!({"seconds": 1, "label": 2})))
            .unwrap_err()
            .message
            .contains("label"));
        assert!(r
            .get("failing_job")
            .unwrap()
            .validate(&obj(json!({"x":1})))
            .is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn slow_compute_reports_progress_and_stops_when_cancelled() {
        let t = slow_compute();
        let (c, io) = ctx(vec![]);
        let out = t
            .call(obj(json!({"seconds": 3, "label": "L"})), c)
            .await
            .unwrap();
        assert!(first_text(&out).unwrap().contains("L"));
        assert_eq!(*io.progress.lock().unwrap(), vec![1.0, 2.0, 3.0]);

        let (c, _) = ctx(vec![]);
        let cancel = c.cancel.clone();
        let run = tokio::spawn(t.call(obj(json!({"seconds": 100})), c));
        tokio::time::sleep(Duration::from_millis(1500)).await;
        cancel.cancel();
        assert!(run.await.unwrap().is_err());
    }

    #[tokio::test]
    async fn confirm_delete_and_multi_input_and_ask_model() {
        let (c, io) = ctx(vec![json!({"action":"accept","content":{"confirm":true}})]);
        let out = confirm_delete()
            .call(obj(json!({"filename":"a.txt"})), c)
            .await
            .unwrap();
        assert_eq!(first_text(&out), Some("Deleted a.txt"));
        assert_eq!(io.asked.lock().unwrap()[0].0, "elicitation/create");
        assert_eq!(
            *io.progress.lock().unwrap(),
            vec![1.0],
            "progress once answered"
        );

        let (c, _) = ctx(vec![json!({"action":"decline"})]);
        let out = confirm_delete()
            .call(obj(json!({"filename":"a.txt"})), c)
            .await
            .unwrap();
        assert!(first_text(&out).unwrap().starts_with("Kept"));

        let (c, io) = ctx(vec![
            json!({"action":"accept","content":{"name":"Ada"}}),
            json!({"action":"accept","content":{"colour":"green"}}),
        ]);
        let out = multi_input().call(obj(json!({})), c).await.unwrap();
        assert_eq!(first_text(&out), Some("Ada likes green"));
        assert_eq!(io.asked.lock().unwrap().len(), 2);

        let (c, _) = ctx(vec![
            json!({"role":"assistant","content":{"type":"text","text":"42"},"model":"m"}),
        ]);
        let out = ask_model()
            .call(obj(json!({"prompt":"q"})), c)
            .await
            .unwrap();
        assert_eq!(first_text(&out), Some("The model said: 42"));
    }

    #[tokio::test]
    async fn failing_tools() {
        let (c, _) = ctx(vec![]);
        let out = failing_job().call(obj(json!({})), c).await.unwrap();
        assert_eq!(out["isError"], json!(true));
        let (c, _) = ctx(vec![]);
        let e = protocol_error_job()
            .call(obj(json!({})), c)
            .await
            .unwrap_err();
        assert_eq!(e.code, -32603);
    }
}
