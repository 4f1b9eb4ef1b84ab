//! The tools the official conformance suite's server scenarios call, served when
//! `tools.conformance = true` (off by default): each answers exactly what its scenario checks.
//! They are plain tools (taskSupport `forbidden`) but for `multi_input` and
//! `test_tool_with_task`, listed before every other tool.
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
//! | `test_elicitation_sep1034_defaults` | `{}` | asks with a default for each primitive type (a string, an integer, a number, an enum, a boolean) |
//! | `test_elicitation_sep1330_enums` | `{}` | asks with the five enum forms (untitled and titled single-select, legacy `enumNames`, untitled and titled multi-select) |
//! | `multi_input` | `{}` | asks a name and a colour at once (taskSupport `required`); in place of the built-in tool of that name, which asks one after the other |
//! | `test_missing_capability` | `{}` | asks the client's model (key `question`); needs `sampling` declared, else `-32021` |
//! | `test_streaming_elicitation` | `{}` | reports progress 50 of 100, then asks the user to confirm (key `confirmation`) |
//! | `test_logging_tool` | `{}` | one `info` log message |
//! | `test_trigger_tool_change` | `{}` | adds `test_dynamic_tool` to the tools served, or takes it away (tool-list change) |
//! | `test_input_required_result_elicitation` | `{}` | asks the user's name (key `user_name`) |
//! | `test_input_required_result_sampling` | `{}` | asks the model the capital of France (key `capital_question`) |
//! | `test_input_required_result_list_roots` | `{}` | asks the client's roots (key `client_roots`) |
//! | `test_input_required_result_request_state` | `{}` | asks to confirm (key `confirm`) |
//! | `test_input_required_result_multiple_inputs` | `{}` | asks a name, a greeting from the model and the roots at once (keys `user_name`, `greeting`, `client_roots`) |
//! | `test_input_required_result_multi_round` | `{}` | asks a name (key `step1`), then a colour (key `step2`) |
//! | `test_input_required_result_tampered_state` | `{}` | asks a name (key `user_name`) |
//! | `test_input_required_result_capabilities` | `{}` | asks the user (key `user_name`) if the client declared elicitation and the model (key `greeting`) if it declared sampling |
//! | `test_reconnection` | `{}` | has the connection of its call closed on purpose, then answers (on the client's reconnection) |
//! | `test_header_param` | `{region, query}` | `region` is mirrored into the `Mcp-Param-Region` header (`x-mcp-header`); echoes both |
//! | `json_schema_2020_12_tool` | an object of the 2020-12 dialect (`$defs`, `$ref`, `allOf`, `if`/`then`/`else`) | echoes its arguments; its schema is listed as written |
//! | `test_tool_with_task` | `{}` | taskSupport `required`; asks the user's name (key `user_name`) before its task is created, then greets them from the task |
//!
//! The tools that ask do so by key ([`crate::ToolContext::ask`]): a protocol 2026-07-28 plain
//! call gets those keys in its `inputRequests` rounds, a 2025-11-25 client is asked as it runs.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use serde_json::{json, Value};
use taskmesh_mcp::{params, ErrorObject, LogLevel, TaskSupport};

use crate::builtin::{
    ask_name_and_colour, elicit, empty_schema, multi_input_asking, no_args, one_string, str_arg,
    Builtin, Run, Validate,
};
use crate::{text_result, Question, ResumePolicy, Tool, ToolContext, ToolRegistry, ToolSpec};

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

/// Every conformance tool, in the order of the table above; `test_trigger_tool_change`
/// changes what `registry` serves.
pub fn all(registry: &Arc<ToolRegistry>) -> Vec<Arc<dyn Tool>> {
    let mut tools = vec![
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
        tool(
            "test_elicitation_sep1034_defaults",
            "Asks the user with a default value for every primitive type.",
            empty_schema(),
            no_args,
            |_, ctx| {
                let schema = json!({"type": "object", "properties": {
                    "name": {"type": "string", "description": "User name", "default": "John Doe"},
                    "age": {"type": "integer", "description": "User age", "default": 30},
                    "score": {"type": "number", "description": "User score", "default": 95.5},
                    "status": {"type": "string", "description": "User status",
                        "enum": ["active", "inactive", "pending"], "default": "active"},
                    "verified": {"type": "boolean", "description": "Verification status", "default": true},
                }});
                elicitation_completed(
                    ctx,
                    "Please review and update the form fields with defaults",
                    schema,
                )
                .boxed()
            },
        ),
        tool(
            "test_elicitation_sep1330_enums",
            "Asks the user with each of the five enum schema forms.",
            empty_schema(),
            no_args,
            |_, ctx| {
                let schema = json!({"type": "object", "properties": {
                    "untitledSingle": {"type": "string", "description": "Choose an option",
                        "enum": ["option1", "option2", "option3"]},
                    "titledSingle": {"type": "string", "description": "Choose a titled option", "oneOf": [
                        {"const": "value1", "title": "First Option"},
                        {"const": "value2", "title": "Second Option"},
                        {"const": "value3", "title": "Third Option"}]},
                    "legacyEnum": {"type": "string", "description": "Choose a legacy option",
                        "enum": ["opt1", "opt2", "opt3"],
                        "enumNames": ["Option One", "Option Two", "Option Three"]},
                    "untitledMulti": {"type": "array", "description": "Choose multiple options",
                        "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                    "titledMulti": {"type": "array", "description": "Choose multiple titled options",
                        "items": {"anyOf": [
                            {"const": "value1", "title": "First Choice"},
                            {"const": "value2", "title": "Second Choice"},
                            {"const": "value3", "title": "Third Choice"}]}},
                }});
                elicitation_completed(ctx, "Please select options from the enum fields", schema)
                    .boxed()
            },
        ),
        Arc::new(multi_input_asking(
            "Asks two questions at once (a name and a colour) before it answers.",
            // Both questions are out at once (the suite answers them one at a time).
            |_args, ctx| ask_name_and_colour(ctx, true).boxed(),
        )),
    ];
    tools.extend(asking());
    let after_logging = tools
        .iter()
        .position(|t| t.spec().name == "test_logging_tool")
        .map_or(tools.len(), |i| i + 1);
    tools.insert(
        after_logging,
        Arc::new(TriggerToolChange {
            registry: Arc::downgrade(registry),
        }),
    );
    tools
}

/// Ask the user with `schema`; the answer as `Elicitation completed: action=…, content={…}`.
async fn elicitation_completed(
    ctx: ToolContext,
    message: &str,
    schema: Value,
) -> crate::ToolResult {
    if !ctx.client_elicitation {
        return Err(ErrorObject::invalid_params(
            "the client did not declare the elicitation capability",
        ));
    }
    let a = ctx
        .ask(
            "form",
            "elicitation/create",
            json!({"mode": "form", "message": message, "requestedSchema": schema}),
        )
        .await?;
    let action = a.get("action").and_then(Value::as_str).unwrap_or("none");
    let content = a.get("content").cloned().unwrap_or_else(|| json!({}));
    Ok(text_result(
        format!("Elicitation completed: action={action}, content={content}"),
        false,
    ))
}

/// The elicitation of one required field named `field` of JSON type `kind`.
fn form(message: &str, field: &str, kind: &str) -> Value {
    json!({
        "mode": "form",
        "message": message,
        "requestedSchema": {
            "type": "object",
            "properties": { field: { "type": kind } },
            "required": [field],
        },
    })
}

/// The question of the user's name, under `key`.
fn name_question(key: &str, message: &str) -> Question {
    Question {
        key: key.into(),
        method: "elicitation/create",
        params: form(message, "name", "string"),
    }
}

/// A sampling request of one user message.
fn sampling(text: &str, max_tokens: u64) -> Value {
    json!({
        "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
        "maxTokens": max_tokens,
    })
}

/// Ask `q`; for an elicitation the accepted value of its one field (`None`: declined), for
/// another request its answer.
async fn ask(ctx: &ToolContext, q: Question) -> Result<Option<Value>, ErrorObject> {
    let field = q.params["requestedSchema"]["required"][0]
        .as_str()
        .map(str::to_string);
    let a = ctx.ask(&q.key, q.method, q.params).await?;
    let Some(field) = field else {
        return Ok(Some(a));
    };
    match a.get("action").and_then(Value::as_str) {
        Some("accept") => Ok(a.get("content").and_then(|c| c.get(&field)).cloned()),
        Some("decline") | Some("cancel") => Ok(None),
        _ => Err(ErrorObject::invalid_params(format!(
            "Invalid params: the answer to '{}' is not an elicitation result (no valid 'action')",
            q.key
        ))),
    }
}

/// Ask the user's name (key `user_name`) and greet them.
fn say_hello(
    _args: serde_json::Map<String, Value>,
    ctx: ToolContext,
) -> futures::future::BoxFuture<'static, crate::ToolResult> {
    async move {
        let name = ask(&ctx, name_question("user_name", "What is your name?")).await?;
        Ok(text_result(format!("Hello, {}!", text_of(name)), false))
    }
    .boxed()
}

/// A value's text: a string as it is, anything else as JSON.
fn text_of(v: Option<Value>) -> String {
    match v {
        Some(Value::String(s)) => s,
        Some(v) => v.to_string(),
        None => "(declined)".into(),
    }
}

/// What a sampling answer says.
fn model_text(v: Option<Value>) -> String {
    v.as_ref()
        .and_then(|v| v["content"]["text"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// The URIs of a `roots/list` answer.
fn roots_text(v: Option<Value>) -> String {
    let uris: Vec<&str> = v
        .as_ref()
        .and_then(|v| v["roots"].as_array())
        .map(|r| r.iter().filter_map(|r| r["uri"].as_str()).collect())
        .unwrap_or_default();
    uris.join(", ")
}

/// The tools that ask the client by key.
fn asking() -> Vec<Arc<dyn Tool>> {
    vec![
        tool(
            "test_missing_capability",
            "Asks the client's model a question: needs the sampling capability.",
            empty_schema(),
            no_args,
            |_, ctx| {
                async move {
                    if !ctx.client_sampling {
                        return Err(ErrorObject {
                            code: MISSING_CAPABILITY,
                            message: "Missing required client capability: this tool needs 'sampling'".into(),
                            data: Some(json!({"requiredCapabilities": {"sampling": {}}})),
                        });
                    }
                    let q = Question { key: "question".into(), method: "sampling/createMessage", params: sampling("Say hello.", 50) };
                    let said = model_text(ask(&ctx, q).await?);
                    Ok(text_result(format!("Success: the model said {said:?}"), false))
                }
                .boxed()
            },
        ),
        tool(
            "test_streaming_elicitation",
            "Reports progress, then asks the user to confirm.",
            empty_schema(),
            no_args,
            |_, ctx| {
                async move {
                    ctx.io.progress(50.0, Some(100.0), None);
                    let q = Question { key: "confirmation".into(), method: "elicitation/create", params: form("Carry on?", "ok", "boolean") };
                    let ok = ask(&ctx, q).await?;
                    Ok(text_result(format!("Streaming complete (confirmed: {})", text_of(ok)), false))
                }
                .boxed()
            },
        ),
        tool(
            "test_logging_tool",
            "Logs one message at info level.",
            empty_schema(),
            no_args,
            |_, ctx| {
                async move {
                    ctx.io.log(LogLevel::Info, None, json!("Diagnostic trace logging activated")).await;
                    Ok(text_result("Logging evaluated", false))
                }
                .boxed()
            },
        ),
        tool(
            "test_input_required_result_elicitation",
            "Asks the user's name.",
            empty_schema(),
            no_args,
            say_hello,
        ),
        tool(
            "test_input_required_result_sampling",
            "Asks the client's model the capital of France.",
            empty_schema(),
            no_args,
            |_, ctx| {
                async move {
                    let q = Question { key: "capital_question".into(), method: "sampling/createMessage", params: sampling("What is the capital of France?", 100) };
                    let said = model_text(ask(&ctx, q).await?);
                    Ok(text_result(format!("The model said: {said}"), false))
                }
                .boxed()
            },
        ),
        tool(
            "test_input_required_result_list_roots",
            "Asks the client's roots.",
            empty_schema(),
            no_args,
            |_, ctx| {
                async move {
                    let q = Question { key: "client_roots".into(), method: "roots/list", params: json!({}) };
                    let roots = roots_text(ask(&ctx, q).await?);
                    Ok(text_result(format!("Client roots: {roots}"), false))
                }
                .boxed()
            },
        ),
        tool(
            "test_input_required_result_request_state",
            "Asks the user to confirm; the answer comes back with the request's state.",
            empty_schema(),
            no_args,
            |_, ctx| {
                async move {
                    let q = Question { key: "confirm".into(), method: "elicitation/create", params: form("Please confirm", "ok", "boolean") };
                    let ok = ask(&ctx, q).await?;
                    Ok(text_result(format!("state-ok: confirmed {}", text_of(ok)), false))
                }
                .boxed()
            },
        ),
        tool(
            "test_input_required_result_multiple_inputs",
            "Asks a name, a greeting from the model and the client's roots at once.",
            empty_schema(),
            no_args,
            |_, ctx| {
                async move {
                    let roots = Question { key: "client_roots".into(), method: "roots/list", params: json!({}) };
                    let greeting = Question { key: "greeting".into(), method: "sampling/createMessage", params: sampling("Generate a greeting", 50) };
                    let (name, greeting, roots) = futures::join!(
                        ask(&ctx, name_question("user_name", "What is your name?")),
                        ask(&ctx, greeting),
                        ask(&ctx, roots),
                    );
                    Ok(text_result(
                        format!("{} for {}; roots: {}", model_text(greeting?), text_of(name?), roots_text(roots?)),
                        false,
                    ))
                }
                .boxed()
            },
        ),
        tool(
            "test_input_required_result_multi_round",
            "Asks a name, then a favourite colour.",
            empty_schema(),
            no_args,
            |_, ctx| {
                async move {
                    let name = ask(&ctx, name_question("step1", "Step 1: What is your name?")).await?;
                    let q = Question { key: "step2".into(), method: "elicitation/create", params: form("Step 2: What is your favorite color?", "color", "string") };
                    let colour = ask(&ctx, q).await?;
                    Ok(text_result(format!("{} likes {}", text_of(name), text_of(colour)), false))
                }
                .boxed()
            },
        ),
        tool(
            "test_input_required_result_tampered_state",
            "Asks the user's name; its request state is signed.",
            empty_schema(),
            no_args,
            say_hello,
        ),
        tool(
            "test_input_required_result_capabilities",
            "Asks the user if the client can be asked, and the model if the client has one.",
            empty_schema(),
            no_args,
            |_, ctx| {
                async move {
                    let mut said = Vec::new();
                    if ctx.client_elicitation {
                        let name = ask(&ctx, name_question("user_name", "What is your name?"));
                        said.push(format!("name: {}", text_of(name.await?)));
                    }
                    if ctx.client_sampling {
                        let q = Question { key: "greeting".into(), method: "sampling/createMessage", params: sampling("Generate a greeting", 50) };
                        said.push(format!("model: {}", model_text(ask(&ctx, q).await?)));
                    }
                    Ok(text_result(format!("Asked what the client can answer. {}", said.join("; ")), false))
                }
                .boxed()
            },
        ),
        tool(
            "test_reconnection",
            "Has the connection carrying its call closed on purpose, then answers.",
            empty_schema(),
            no_args,
            |_, ctx| {
                async move {
                    ctx.io.close_connection();
                    tokio::time::sleep(STEP * 2).await;
                    Ok(text_result("Reconnection test completed", false))
                }
                .boxed()
            },
        ),
        tool(
            "test_header_param",
            "Echoes its arguments; its region is mirrored into the Mcp-Param-Region header.",
            json!({"type": "object", "properties": {
                "region": {"type": "string", "description": "Where to run", "x-mcp-header": "Region"},
                "query": {"type": "string", "description": "What to run"},
            }, "required": ["region", "query"]}),
            |a| {
                params::req_str(a, "region")?;
                params::req_str(a, "query").map(|_| ())
            },
            |args, _| {
                answer(text_result(
                    format!("{} in {}", str_arg(&args, "query"), str_arg(&args, "region")),
                    false,
                ))
            },
        ),
        tool(
            "json_schema_2020_12_tool",
            "Echoes its arguments; its input schema uses JSON Schema 2020-12 keywords.",
            json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "$defs": {"address": {"$anchor": "addressDef", "type": "object",
                    "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
                "properties": {
                    "name": {"type": "string"},
                    "address": {"$ref": "#/$defs/address"},
                    "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                    "phone": {"type": "string"},
                    "email": {"type": "string"},
                },
                "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
                "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
                "then": {"required": ["phone"]},
                "else": {"required": ["email"]},
                "additionalProperties": false,
            }),
            |_| Ok(()),
            |args, _| answer(text_result(Value::Object(args).to_string(), false)),
        ),
        Arc::new(AskingFirst {
            inner: Builtin {
                spec: ToolSpec {
                    name: "test_tool_with_task".into(),
                    title: None,
                    description: Some("Asks the user's name before its task is created, then greets them from the task.".into()),
                    input_schema: empty_schema(),
                    task_support: TaskSupport::Required,
                    resume: ResumePolicy::Rerun,
                    output_schema: None,
                    annotations: None,
                },
                validate: no_args,
                run: |_, ctx| {
                    async move {
                        let name = ask(&ctx, name_question("user_name", "What is your name?")).await?;
                        tokio::time::sleep(STEP).await;
                        Ok(text_result(format!("Hello, {}! (from the task)", text_of(name)), false))
                    }
                    .boxed()
                },
            },
            first: vec![name_question("user_name", "What is your name?")],
        }),
    ]
}

/// The `-32021` code (a capability the client did not declare).
const MISSING_CAPABILITY: i64 = -32021;

/// A built-in tool with questions to settle before its task is created.
struct AskingFirst {
    inner: Builtin,
    first: Vec<Question>,
}

impl Tool for AskingFirst {
    fn spec(&self) -> &ToolSpec {
        self.inner.spec()
    }
    fn validate(&self, args: &serde_json::Map<String, Value>) -> Result<(), ErrorObject> {
        self.inner.validate(args)
    }
    fn call(
        &self,
        args: serde_json::Map<String, Value>,
        ctx: ToolContext,
    ) -> futures::future::BoxFuture<'static, crate::ToolResult> {
        self.inner.call(args, ctx)
    }
    fn ask_first(&self) -> &[Question] {
        &self.first
    }
}

/// The source under which `test_trigger_tool_change` serves `test_dynamic_tool`.
const DYNAMIC_SOURCE: &str = "conformance-dynamic";

/// `test_trigger_tool_change`: each call adds `test_dynamic_tool` to the tools served, or
/// takes it away again, so that the tool list changes.
struct TriggerToolChange {
    registry: std::sync::Weak<ToolRegistry>,
}

static TRIGGER_SPEC: std::sync::LazyLock<ToolSpec> = std::sync::LazyLock::new(|| ToolSpec {
    name: "test_trigger_tool_change".into(),
    title: None,
    description: Some("Adds test_dynamic_tool to the tools served, or takes it away.".into()),
    input_schema: empty_schema(),
    task_support: TaskSupport::Forbidden,
    resume: ResumePolicy::Rerun,
    output_schema: None,
    annotations: None,
});

impl Tool for TriggerToolChange {
    fn spec(&self) -> &ToolSpec {
        &TRIGGER_SPEC
    }
    fn validate(&self, args: &serde_json::Map<String, Value>) -> Result<(), ErrorObject> {
        no_args(args)
    }
    fn call(
        &self,
        _args: serde_json::Map<String, Value>,
        _ctx: ToolContext,
    ) -> futures::future::BoxFuture<'static, crate::ToolResult> {
        let Some(registry) = self.registry.upgrade() else {
            return answer(text_result("the server is stopping", true));
        };
        let text = if registry.get("test_dynamic_tool").is_some() {
            registry.set_source(DYNAMIC_SOURCE, vec![]);
            "test_dynamic_tool is no longer served"
        } else {
            registry.set_source(
                DYNAMIC_SOURCE,
                vec![tool(
                    "test_dynamic_tool",
                    "Served after test_trigger_tool_change was called.",
                    empty_schema(),
                    no_args,
                    |_, _| answer(text_result("dynamic", false)),
                )],
            );
            "test_dynamic_tool is served"
        };
        answer(text_result(text, false))
    }
}
