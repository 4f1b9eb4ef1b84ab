//! The built-in tools that ask the client: `confirm_delete` and `multi_input` ask the user
//! (`elicitation/create`), `ask_model` asks the client's model (`sampling/createMessage`). Each
//! question goes out through the call's [`ToolContext`] (`io.request`), which a task's actor
//! or the gateway's plain call turns into a request to the client, and comes back as its
//! answer.

use futures::FutureExt;
use serde_json::{json, Map, Value};
use taskmesh_mcp::jsonrpc::ErrorObject;
use taskmesh_mcp::params;
use taskmesh_mcp::TaskSupport;

use super::{cancelled, empty_schema, no_args, one_string, str_arg, Builtin, Run};
use crate::{first_text, text_result, ResumePolicy, ToolContext, ToolResult, ToolSpec};

/// Ask the client for a form and return the accepted content (or `None` when declined).
pub async fn elicit(
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
        spec: ToolSpec::new(
            "confirm_delete",
            one_string("filename"),
            TaskSupport::Required,
            ResumePolicy::Fail,
        )
        .titled("Confirm delete")
        .described("Asks the user to confirm, then says whether it deleted `filename`."),
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
pub fn multi_input_asking(description: &str, run: Run) -> Builtin {
    Builtin {
        spec: ToolSpec::new(
            "multi_input",
            empty_schema(),
            TaskSupport::Required,
            ResumePolicy::Fail,
        )
        .titled("Multi input")
        .described(description),
        validate: no_args,
        run,
    }
}

/// Ask a name and a colour, one after the other or `at_once` (both out together, the name's
/// first), and say who likes which colour.
pub async fn ask_name_and_colour(ctx: ToolContext, at_once: bool) -> ToolResult {
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
        spec: ToolSpec::new(
            "ask_model",
            one_string("prompt"),
            TaskSupport::Required,
            ResumePolicy::Rerun,
        )
        .titled("Ask model")
        .described("Asks the client's model (sampling/createMessage) and returns its text."),
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
