//! `tools/call` on protocol 2026-07-28, once the request passed its checks ([`super::check`]).
//!
//! The server decides how a call runs: with the tasks extension declared, a tool that may run
//! as a task becomes one (its questions to settle first asked in rounds, [`super::rounds`]),
//! created durably before the answer; without it, such a call is handed off when
//! `tasks.handoff_after_ms` is set ([`super::handoff`]): a task made the same way, whose
//! outcome answers the call when it ends in time; else the tool runs as a plain call, asking the client in
//! rounds, and answers its result, or with a progress token or a log level in `_meta` an SSE
//! stream of its notifications and then its result ([`progress_stream`]).

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};
use taskmesh_host::NewTask;
use taskmesh_mcp::jsonrpc::{self, ErrorObject};
use taskmesh_mcp::{params, LogLevel, TaskSupport};
use taskmesh_router::mint_task_id;
use taskmesh_tools::ToolContext;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use super::check::Declared;
use super::{
    complete, handoff, missing_extension, rounds, tasks, with_server_info, Answer, EXTENSION,
    META_LOG_LEVEL,
};
use crate::handoff::Offered;
use taskmesh_task::ToolRequest;

use crate::{wire, Gateway};

pub(super) async fn tools_call(
    gw: &Arc<Gateway>,
    principal: &str,
    p: &Map<String, Value>,
    declared: &Declared,
) -> Result<Answer, ErrorObject> {
    let name = params::req_str(p, "name")?;
    // A client without the tasks extension has its calls handed off, and the tools to follow.
    let handoff = !declared.tasks && gw.cfg.tasks.handoff_after_ms > 0;
    if handoff {
        if let Some(which) = Offered::named(gw, name) {
            return handoff::offered(gw, principal, which, p).await;
        }
    }
    let args = params::opt_obj(p, "arguments")?
        .cloned()
        .unwrap_or_default();
    let tool = gw.tools.get(name).ok_or_else(|| {
        ErrorObject::invalid_params(format!("Invalid params: unknown tool '{name}'"))
    })?;
    tool.validate(&args)?;
    let support = tool.spec().task_support;
    let as_task = declared.tasks && support != TaskSupport::Forbidden;
    // Workers run a tool only as a task: a plain call of one (that may be plain) runs a task
    // and answers at its end.
    let worker = tool.runs_on_workers() && !as_task && support != TaskSupport::Required;
    let handed_off = (handoff && crate::handoff::hands_off(support, false)) || worker;
    if as_task || handed_off {
        // The questions to settle first, in rounds, before the task is made with their answers.
        let first = tool.ask_first();
        let mut answers_json = None;
        if !first.is_empty() {
            let round = rounds::Round::of(gw, principal, name, &args, p)?;
            let mut kept = Map::new();
            let mut asked = Vec::new();
            for q in first {
                match round.answers.get(&q.key) {
                    Some(a) => {
                        kept.insert(q.key.clone(), a.clone());
                    }
                    None => {
                        rounds::may_ask(&declared.caps, q.method)?;
                        asked.push((q.key.clone(), q.method, q.params.clone()));
                    }
                }
            }
            if !asked.is_empty() {
                return Ok(Answer::Value(round.input_required(gw, &asked, kept)));
            }
            answers_json = Some(Value::Object(kept).to_string());
        }
        let task_id = mint_task_id().map_err(|e| wire::host_error(&e))?;
        tracing::Span::current().record("task_id", task_id.as_str());
        let new = NewTask {
            task_id,
            owner: principal.to_string(),
            session: None,
            ttl_ms: None,
            request: ToolRequest {
                client: declared.client,
                answers_json,
                traceparent: taskmesh_telemetry::current_traceparent(),
                ..ToolRequest::new(name, Value::Object(args).to_string())
            },
            worker_rerun: crate::dispatch::tools::worker_rerun(tool.as_ref()),
        };
        let created = gw.create_task(new).await?;
        if !as_task {
            crate::metrics::plain_call_as_task();
            return handoff::call(gw, principal, name, &created.task.task_id).await;
        }
        return Ok(Answer::Value(tasks::created(&created.task)));
    }
    if support == TaskSupport::Required {
        return Err(missing_extension(format!(
            "Tool '{name}' runs only as a task: declare the tasks extension ({EXTENSION}) in the request's client capabilities"
        )));
    }
    let meta = p.get("_meta");
    let token = match meta.and_then(|m| m.get("progressToken")) {
        None | Some(Value::Null) => None,
        Some(t @ (Value::String(_) | Value::Number(_))) => Some(t.clone()),
        Some(_) => {
            return Err(ErrorObject::invalid_params(
                "Invalid params: '_meta.progressToken' must be a string or an integer",
            ))
        }
    };
    let log_level = match meta.and_then(|m| m.get(META_LOG_LEVEL)) {
        None | Some(Value::Null) => None,
        Some(l) => Some(l.as_str().and_then(LogLevel::parse).ok_or_else(|| {
            ErrorObject::invalid_params(format!(
                "Invalid params: '_meta.{META_LOG_LEVEL}' must be one of debug, info, notice, warning, error, critical, alert, emergency"
            ))
        })?),
    };
    let round = rounds::Round::of(gw, principal, name, &args, p)?;
    let streamed = token.is_some() || log_level.is_some();
    let (notes_tx, notes) = mpsc::channel(PROGRESS_BUFFER);
    let io = Arc::new(rounds::RoundIo {
        stream: streamed.then_some(notes_tx),
        token: token.clone(),
        log_level,
        caps: declared.caps.clone(),
        reruns: tool.reruns_for_input(),
        answers: round.answers.clone(),
        asked: Default::default(),
        taken: Default::default(),
        unkeyed: Default::default(),
        refused: Default::default(),
    });
    let cancel = CancellationToken::new();
    let ctx = ToolContext {
        cancel: cancel.clone(),
        ended: cancel.clone(),
        io: io.clone(),
        has_progress_token: token.is_some(),
        client_elicitation: declared.client.elicitation,
        client_sampling: declared.client.sampling,
        principal: principal.to_string(),
        upstream_task: None,
        answers: Arc::default(),
        traceparent: taskmesh_telemetry::current_traceparent(),
    };
    let run = tool.call(args, ctx);
    let gw_round = gw.clone();
    let finish = async move {
        let _cancel_on_drop = cancel.drop_guard();
        match rounds::drive(run, io.clone()).await {
            rounds::Ran::Done(r) => match r? {
                Value::Object(m) => Ok(complete(m)),
                other => Err(ErrorObject::internal(format!(
                    "the tool answered with something that is not a result: {other}"
                ))),
            },
            rounds::Ran::Asked(asked) => {
                let kept = std::mem::take(&mut *io.taken.lock());
                Ok(round.input_required(&gw_round, &asked, kept))
            }
        }
    };
    if streamed {
        return Ok(Answer::Progress {
            notes,
            done: tokio::spawn(finish),
        });
    }
    finish.await.map(Answer::Value)
}

/// Progress notifications and log messages a plain call may queue before its stream takes
/// them; more are dropped.
const PROGRESS_BUFFER: usize = 64;

/// The SSE answer of a plain call with a progress token: its progress notifications as they
/// come, then its response. A client that closes the stream cancels the call (the tool's
/// future is dropped).
pub(super) fn progress_stream(
    id: jsonrpc::RequestId,
    mut notes: mpsc::Receiver<Vec<u8>>,
    done: tokio::task::JoinHandle<Result<Value, ErrorObject>>,
) -> Response {
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(16);
    tokio::spawn(async move {
        let abort = done.abort_handle();
        let frame = |json: &[u8]| -> Result<Bytes, Infallible> {
            let mut f = Vec::with_capacity(json.len() + 8);
            f.extend_from_slice(b"data: ");
            f.extend_from_slice(json);
            f.extend_from_slice(b"\n\n");
            Ok(Bytes::from(f))
        };
        while let Some(n) = notes.recv().await {
            if tx.send(frame(&n)).await.is_err() {
                abort.abort();
                return;
            }
        }
        let outcome = done
            .await
            .unwrap_or_else(|_| Err(ErrorObject::internal("the call stopped")));
        let last = match outcome {
            Ok(v @ Value::Object(_)) => jsonrpc::response(&id, &with_server_info(v)),
            Ok(other) => jsonrpc::error_response(
                Some(&id),
                &ErrorObject::internal(format!(
                    "the tool answered with something that is not a result: {other}"
                )),
            ),
            Err(e) => jsonrpc::error_response(Some(&id), &e),
        };
        let _ = tx.send(frame(&last)).await;
    });
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        [(
            axum::http::HeaderName::from_static("x-accel-buffering"),
            "no",
        )],
        Body::from_stream(ReceiverStream::new(rx)),
    )
        .into_response()
}
