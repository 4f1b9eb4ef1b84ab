//! The built-in tools that ask the client nothing: `greet`, `slow_compute`, `failing_job` and
//! `protocol_error_job` (see the table in [`super`]). Each is a [`Builtin`] that the registry
//! serves ([`super::all`]); a call reaches its `run` with the arguments its `validate` accepted.

use std::time::Duration;

use futures::FutureExt;
use serde_json::{json, Value};
use taskmesh_mcp::jsonrpc::{ErrorObject, INTERNAL_ERROR};
use taskmesh_mcp::params;
use taskmesh_mcp::TaskSupport;

use super::{
    cancelled, empty_schema, no_args, one_string, sleep_or_cancel, str_arg, Builtin,
    SLOW_COMPUTE_MAX_SECONDS,
};
use crate::{text_result, ResumePolicy, ToolContext, ToolResult, ToolSpec};

/// `greet {name}`: answers at once with `Hello, {name}!`; never runs as a task.
pub fn greet() -> Builtin {
    Builtin {
        spec: ToolSpec::new(
            "greet",
            one_string("name"),
            TaskSupport::Forbidden,
            ResumePolicy::Rerun,
        )
        .titled("Greet")
        .described("Answers at once with a greeting for `name`."),
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
        spec: ToolSpec::new(
            "slow_compute",
            json!({
                "type": "object",
                "properties": {
                    "seconds": { "type": "number", "minimum": 0, "maximum": SLOW_COMPUTE_MAX_SECONDS },
                    "label": { "type": "string" }
                },
                "required": ["seconds"],
            }),
            TaskSupport::Optional,
            ResumePolicy::Rerun,
        )
        .titled("Slow compute")
        .described("Works for `seconds` seconds, reporting progress about every second, then answers with the label and the seconds."),
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
        // A step a second when there is progress to tell; otherwise one wait to the end, so
        // that a task of an hour nobody watches does not wake every second.
        let next = if ctx.has_progress_token {
            (total - elapsed).min(Duration::from_secs(1))
        } else {
            total - elapsed
        };
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
        spec: ToolSpec::new(
            "failing_job",
            empty_schema(),
            TaskSupport::Required,
            ResumePolicy::Rerun,
        )
        .titled("Failing job")
        .described("Runs about one second, then answers with a tool error (isError: true)."),
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
        spec: ToolSpec::new(
            "protocol_error_job",
            empty_schema(),
            TaskSupport::Optional,
            ResumePolicy::Rerun,
        )
        .titled("Protocol error job")
        .described("Fails with JSON-RPC error -32603."),
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
