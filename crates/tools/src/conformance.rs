//! The tools the official conformance suite's server scenarios call, served when
//! `tools.conformance = true` (off by default): each answers exactly what its scenario checks.
//! They are plain tools (taskSupport `forbidden`) but for `multi_input`, listed before every
//! other tool.
//!
//! | tool | arguments | what it does |
//! |---|---|---|
//! | `test_simple_text` | `{}` | one text block |
//! | `test_image_content` | `{}` | a 1×1 PNG |
//! | `test_audio_content` | `{}` | a short WAV |
//! | `test_embedded_resource` | `{}` | an embedded text resource |
//! | `test_multiple_content_types` | `{}` | text, image and a JSON resource |
//! | `test_error_handling` | `{}` | a tool error (`isError: true`) |
//! | `test_tool_with_progress` | `{}` | progress 0, 50, 100 of 100, 50 ms apart |
//! | `test_tool_with_logging` | `{}` | three `info` log messages, 50 ms apart |
//! | `test_sampling` | `{prompt}` | asks the client's model (`sampling/createMessage`) |
//! | `test_elicitation` | `{message}` | asks the user for a username and an email |
//! | `multi_input` | `{}` | asks a name and a colour at once (taskSupport `required`); in place of the built-in tool of that name, which asks one after the other |

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use serde_json::{json, Value};
use taskmesh_mcp::{params, ErrorObject, LogLevel, TaskSupport};

use crate::builtin::{
    ask_name_and_colour, elicit, empty_schema, multi_input_asking, no_args, one_string, str_arg,
    Builtin, Run, Validate,
};
use crate::{text_result, ResumePolicy, Tool, ToolSpec};

/// A 1×1 red PNG.
const PNG_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC";
/// A WAV of eight silent 16-bit samples at 8 kHz.
const WAV_BASE64: &str =
    "UklGRjQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YRAAAAAAAAAAAAAAAAAAAAAAAAAA";
/// The pause between two progress reports or log messages.
const STEP: Duration = Duration::from_millis(50);

fn tool(
    name: &str,
    description: &str,
    input_schema: Value,
    validate: Validate,
    run: Run,
) -> Arc<dyn Tool> {
    Arc::new(Builtin {
        spec: ToolSpec {
            name: name.into(),
            title: None,
            description: Some(description.into()),
            input_schema,
            task_support: TaskSupport::Forbidden,
            resume: ResumePolicy::Rerun,
            output_schema: None,
            annotations: None,
        },
        validate,
        run,
    })
}

fn answer(v: Value) -> futures::future::BoxFuture<'static, crate::ToolResult> {
    async move { Ok(v) }.boxed()
}

/// Every conformance tool, in the order of the table above.
pub fn all() -> Vec<Arc<dyn Tool>> {
    vec![
        tool(
            "test_simple_text",
            "Answers with one text block.",
            empty_schema(),
            no_args,
            |_, _| {
                answer(
                    json!({"content": [{"type": "text", "text": "This is a simple text response for testing."}]}),
                )
            },
        ),
        tool(
            "test_image_content",
            "Answers with an image.",
            empty_schema(),
            no_args,
            |_, _| {
                answer(
                    json!({"content": [{"type": "image", "data": PNG_BASE64, "mimeType": "image/png"}]}),
                )
            },
        ),
        tool(
            "test_audio_content",
            "Answers with audio.",
            empty_schema(),
            no_args,
            |_, _| {
                answer(
                    json!({"content": [{"type": "audio", "data": WAV_BASE64, "mimeType": "audio/wav"}]}),
                )
            },
        ),
        tool(
            "test_embedded_resource",
            "Answers with an embedded resource.",
            empty_schema(),
            no_args,
            |_, _| {
                answer(json!({"content": [{"type": "resource", "resource": {
                "uri": "test://embedded-resource", "mimeType": "text/plain",
                "text": "This is an embedded resource content."}}]}))
            },
        ),
        tool(
            "test_multiple_content_types",
            "Answers with text, an image and a resource.",
            empty_schema(),
            no_args,
            |_, _| {
                answer(json!({"content": [
                    {"type": "text", "text": "Multiple content types test:"},
                    {"type": "image", "data": PNG_BASE64, "mimeType": "image/png"},
                    {"type": "resource", "resource": {"uri": "test://mixed-content-resource",
                        "mimeType": "application/json", "text": "{\"test\":\"data\",\"value\":123}"}},
                ]}))
            },
        ),
        tool(
            "test_error_handling",
            "Answers with a tool error.",
            empty_schema(),
            no_args,
            |_, _| {
                answer(text_result(
                    "This tool intentionally returns an error for testing",
                    true,
                ))
            },
        ),
        tool(
            "test_tool_with_progress",
            "Reports progress 0, 50 and 100 of 100.",
            empty_schema(),
            no_args,
            |_, ctx| {
                async move {
                    for (i, p) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                        if i > 0 {
                            tokio::time::sleep(STEP).await;
                        }
                        ctx.io.progress(p, Some(100.0), None);
                    }
                    Ok(text_result(
                        "Progress reported: 0, 50 and 100 of 100.",
                        false,
                    ))
                }
                .boxed()
            },
        ),
        tool(
            "test_tool_with_logging",
            "Logs three messages at info level.",
            empty_schema(),
            no_args,
            |_, ctx| {
                async move {
                    let lines = [
                        "Tool execution started",
                        "Tool processing data",
                        "Tool execution completed",
                    ];
                    for (i, line) in lines.into_iter().enumerate() {
                        if i > 0 {
                            tokio::time::sleep(STEP).await;
                        }
                        ctx.io.log(LogLevel::Info, None, json!(line)).await;
                    }
                    Ok(text_result("Logged three messages.", false))
                }
                .boxed()
            },
        ),
        tool(
            "test_sampling",
            "Asks the client's model the prompt.",
            one_string("prompt"),
            |a| params::req_str(a, "prompt").map(|_| ()),
            |args, ctx| {
                let prompt = str_arg(&args, "prompt");
                async move {
                    if !ctx.client_sampling {
                        return Err(ErrorObject::invalid_params(
                            "the client did not declare the sampling capability",
                        ));
                    }
                    let r = ctx.io.request("sampling/createMessage", json!({
                        "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
                        "maxTokens": 100,
                    })).await?;
                    let said = r["content"]["text"].as_str().unwrap_or_default();
                    Ok(text_result(format!("LLM response: {said}"), false))
                }
                .boxed()
            },
        ),
        tool(
            "test_elicitation",
            "Asks the user for a username and an email.",
            one_string("message"),
            |a| params::req_str(a, "message").map(|_| ()),
            |args, ctx| {
                let message = str_arg(&args, "message");
                async move {
                    let schema = json!({"type": "object", "properties": {
                        "username": {"type": "string", "description": "User's response"},
                        "email": {"type": "string", "description": "User's email address"},
                    }, "required": ["username", "email"]});
                    let content = elicit(&ctx, message, schema).await?;
                    let text = match content {
                        Some(c) => format!(
                            "User response: action: accept, content: {}",
                            Value::Object(c)
                        ),
                        None => "User response: action: decline".to_string(),
                    };
                    Ok(text_result(text, false))
                }
                .boxed()
            },
        ),
        Arc::new(multi_input_asking(
            "Asks two questions at once (a name and a colour) before it answers.",
            // Both questions are out at once (the suite answers them one at a time).
            |_args, ctx| ask_name_and_colour(ctx, true).boxed(),
        )),
    ]
}
