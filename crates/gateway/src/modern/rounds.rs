//! Input rounds of protocol 2026-07-28 plain calls (MRTR): the server asks nothing mid-call,
//! so a `tools/call` whose tool asks the client answers `InputRequiredResult`
//! (`{resultType: "input_required", inputRequests, requestState}`) and the client calls again
//! with `inputResponses` under the same keys and the `requestState` echoed.
//!
//! Each round is a new run of the tool from its start ([`RoundIo`]): an ask whose key the
//! round has an answer for gets it at once, the others are the round's `inputRequests` (every
//! one the tool had out when it stopped to wait, so questions asked at once come in one
//! round). A tool that asks without a key of its own gets `input-1`, `input-2`, … in the order
//! it asks. The answers of earlier rounds travel in `requestState`, signed with the cluster's
//! secret and bound to the principal, the tool and its arguments, for
//! `request_state_ttl_ms`: a state that was altered, made for another call or expired is
//! `-32602`. An answer for a key the tool does not ask is ignored.
//!
//! A request needs the client capability its method answers to (`elicitation`, `sampling`,
//! `roots`) declared in `_meta`; else the call is `-32021` with that capability in
//! `data.requiredCapabilities` (HTTP 400). An upstream's tool cannot be run again for an
//! answer ([`taskmesh_tools::Tool::reruns_for_input`]): one that asks is an error that says to
//! call it as a task.
//!
//! A tool's questions to settle before its task is created ([`taskmesh_tools::Tool::ask_first`])
//! are asked the same way; the task then starts with their answers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use taskmesh_mcp::jsonrpc::ErrorObject;
use taskmesh_mcp::notify::LogMessage;
use taskmesh_mcp::LogLevel;
use taskmesh_tools::{ToolFuture, ToolIo, ToolResult};
use tokio::sync::mpsc;

use super::{MISSING_CAPABILITY, VERSION};
use crate::Gateway;

/// The signing domain of `requestState` (a session id or cursor is not one).
const STATE_DOMAIN: &str = "request-state";

/// What `requestState` carries.
#[derive(Serialize, Deserialize)]
struct State {
    /// The tool called.
    tool: String,
    /// SHA-256 of the call's arguments (their JSON text), hex.
    args: String,
    /// The principal that called.
    principal: String,
    /// Until when the state is good, ms since the epoch.
    expires_ms: u64,
    /// The answers of earlier rounds that the tool took, by key.
    answers: Map<String, Value>,
}

/// One call's rounds: what binds them, and the answers it came with.
pub(super) struct Round {
    tool: String,
    args: String,
    principal: String,
    /// The answers this round has: those of earlier rounds, and this round's
    /// `inputResponses` over them.
    pub(super) answers: Map<String, Value>,
}

fn args_digest(args: &Map<String, Value>) -> String {
    let text = serde_json::to_vec(args).unwrap_or_default();
    Sha256::digest(&text)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Round {
    /// The round of a call of `tool` with `args` by `principal`, from the request's
    /// `inputResponses` and `requestState` (checked; see the module doc).
    pub(super) fn of(
        gw: &Gateway,
        principal: &str,
        tool: &str,
        args: &Map<String, Value>,
        p: &Map<String, Value>,
    ) -> Result<Round, ErrorObject> {
        let digest = args_digest(args);
        let mut answers = match p.get("requestState") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::String(token)) => {
                let s: State = gw.signer.verify(STATE_DOMAIN, token).ok_or_else(|| {
                    ErrorObject::invalid_params(
                        "Invalid params: 'requestState' was altered or was not made by this server",
                    )
                })?;
                if s.tool != tool || s.args != digest || s.principal != principal {
                    return Err(ErrorObject::invalid_params(
                        "Invalid params: 'requestState' belongs to another call (tool, arguments or caller differ)",
                    ));
                }
                if s.expires_ms < taskmesh_mcp::time::now_ms() {
                    return Err(ErrorObject::invalid_params(
                        "Invalid params: 'requestState' has expired; call again without it",
                    ));
                }
                s.answers
            }
            Some(_) => {
                return Err(ErrorObject::invalid_params(
                    "Invalid params: 'requestState' must be a string",
                ))
            }
        };
        match p.get("inputResponses") {
            None | Some(Value::Null) => {}
            Some(Value::Object(given)) => {
                for (key, answer) in given {
                    if !answer.is_object() {
                        return Err(ErrorObject::invalid_params(format!(
                            "Invalid params: 'inputResponses.{key}' must be an object (the answer to that request)"
                        )));
                    }
                    answers.insert(key.clone(), answer.clone());
                }
            }
            Some(_) => {
                return Err(ErrorObject::invalid_params(
                    "Invalid params: 'inputResponses' must be an object",
                ))
            }
        }
        Ok(Round {
            tool: tool.to_string(),
            args: digest,
            principal: principal.to_string(),
            answers,
        })
    }

    /// `InputRequiredResult` asking `asked` (key, method, params), with a `requestState` that
    /// keeps `kept` (the answers taken so far).
    pub(super) fn input_required(
        &self,
        gw: &Gateway,
        asked: &[(String, &'static str, Value)],
        kept: Map<String, Value>,
    ) -> Value {
        let mut requests = Map::new();
        for (key, method, params) in asked {
            requests.insert(key.clone(), json!({ "method": method, "params": params }));
        }
        self.answer(gw, Value::Object(requests), kept)
    }

    /// The `InputRequiredResult` that asks `requests` (`inputRequests` as they are sent),
    /// with a state that carries no earlier answers: a round of the hand-off result tool,
    /// whose answers go to a task rather than to a new run of a tool.
    pub(super) fn input_required_of(&self, gw: &Gateway, requests: Value) -> Value {
        self.answer(gw, requests, Map::new())
    }

    fn answer(&self, gw: &Gateway, requests: Value, kept: Map<String, Value>) -> Value {
        let state = State {
            tool: self.tool.clone(),
            args: self.args.clone(),
            principal: self.principal.clone(),
            expires_ms: taskmesh_mcp::time::now_ms()
                .saturating_add(gw.cfg.http.request_state_ttl_ms),
            answers: kept,
        };
        json!({
            "resultType": "input_required",
            "inputRequests": requests,
            "requestState": gw.signer.sign(STATE_DOMAIN, &state),
        })
    }
}

/// The client capability that answers `method`, when the server may ask it.
fn capability_of(method: &str) -> Option<&'static str> {
    match method {
        "elicitation/create" => Some("elicitation"),
        "sampling/createMessage" => Some("sampling"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

/// Whether a request of `method` may go to a client that declared `caps`: `Ok`, or the error
/// the call ends with.
pub(super) fn may_ask(caps: &Map<String, Value>, method: &str) -> Result<(), ErrorObject> {
    let Some(cap) = capability_of(method) else {
        return Err(ErrorObject::internal(format!(
            "{method} cannot be asked of a client"
        )));
    };
    if caps.get(cap).is_some_and(Value::is_object) {
        return Ok(());
    }
    Err(ErrorObject {
        code: MISSING_CAPABILITY,
        message: format!(
            "Missing required client capability: the call asks {method}, which needs '{cap}' declared in the request's client capabilities"
        ),
        data: Some(json!({ "requiredCapabilities": { cap: {} } })),
    })
}

/// A plain call's side channel on this generation: asks are answered from the round's
/// answers or become its `inputRequests`; progress (on the call's token) and log messages (at
/// the request's `logLevel` and above) go on its answer stream when it has one.
pub(super) struct RoundIo {
    /// The answer stream's sender, when the call has one.
    pub(super) stream: Option<mpsc::Sender<Vec<u8>>>,
    /// The call's progress token.
    pub(super) token: Option<Value>,
    /// The deprecated per-request `_meta` log level: messages below it are not sent, none
    /// without it.
    pub(super) log_level: Option<LogLevel>,
    /// The client capabilities declared.
    pub(super) caps: Map<String, Value>,
    /// Whether the tool may be run again for answers.
    pub(super) reruns: bool,
    /// The round's answers.
    pub(super) answers: Map<String, Value>,
    /// What the tool asks and this round has no answer for.
    pub(super) asked: Mutex<Vec<(String, &'static str, Value)>>,
    /// The answers the tool took.
    pub(super) taken: Mutex<Map<String, Value>>,
    /// Asks without a key of the tool's so far.
    pub(super) unkeyed: AtomicUsize,
    /// The first ask refused (its capability not declared, or the tool cannot be run again):
    /// the call's answer once the tool waits on anything.
    pub(super) refused: Mutex<Option<ErrorObject>>,
}

impl RoundIo {
    fn send(&self, json: Vec<u8>) {
        if let Some(tx) = &self.stream {
            let _ = tx.try_send(json);
        }
    }
}

impl ToolIo for RoundIo {
    fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        let Some(token) = &self.token else { return };
        self.send(taskmesh_mcp::notify::progress(
            token,
            progress,
            total,
            message.as_deref(),
            None,
        ));
    }

    fn request(&self, method: &'static str, params: Value) -> ToolFuture {
        let n = self.unkeyed.fetch_add(1, Ordering::Relaxed) + 1;
        self.ask(&format!("input-{n}"), method, params)
    }

    fn ask(&self, key: &str, method: &'static str, params: Value) -> ToolFuture {
        if let Some(a) = self.answers.get(key) {
            self.taken.lock().insert(key.to_string(), a.clone());
            let a = a.clone();
            return Box::pin(async move { Ok(a) });
        }
        let refusal = match may_ask(&self.caps, method) {
            Err(e) => Some(e),
            Ok(()) if !self.reruns => Some(ErrorObject::internal(format!(
                "the tool asks the client ({method}) while it runs, which a plain call of protocol {VERSION} cannot wait for: call it as a task (declare the tasks extension)"
            ))),
            Ok(()) => None,
        };
        if let Some(e) = refusal {
            self.refused.lock().get_or_insert_with(|| e.clone());
            return Box::pin(async move { Err(e) });
        }
        self.asked.lock().push((key.to_string(), method, params));
        Box::pin(futures::future::pending())
    }

    fn log(&self, message: LogMessage) -> BoxFuture<'static, ()> {
        if self.log_level.is_some_and(|min| message.level >= min) {
            self.send(taskmesh_mcp::notify::message(&message, None));
        }
        Box::pin(async {})
    }
}

/// How one run of a round ended.
pub(super) enum Ran {
    /// The tool finished.
    Done(ToolResult),
    /// The tool waits on these asks (key, method, params); it was stopped.
    Asked(Vec<(String, &'static str, Value)>),
}

/// Run the tool until it finishes or waits on an ask the round has no answer for (or on
/// anything after an ask was refused: the refusal).
pub(super) async fn drive(run: ToolFuture, io: Arc<RoundIo>) -> Ran {
    let mut run = run;
    futures::future::poll_fn(move |cx| match run.as_mut().poll(cx) {
        Poll::Ready(r) => Poll::Ready(Ran::Done(r)),
        Poll::Pending => {
            // Waiting, with an ask refused: the refusal is the answer (it would be in a later
            // round anyway).
            if let Some(e) = io.refused.lock().take() {
                return Poll::Ready(Ran::Done(Err(e)));
            }
            let asked = std::mem::take(&mut *io.asked.lock());
            if asked.is_empty() {
                Poll::Pending
            } else {
                Poll::Ready(Ran::Asked(asked))
            }
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_needs_the_capability_that_answers_it() {
        let caps = json!({"sampling": {}}).as_object().cloned().unwrap();
        assert!(may_ask(&caps, "sampling/createMessage").is_ok());
        let e = may_ask(&caps, "elicitation/create").unwrap_err();
        assert_eq!(e.code, MISSING_CAPABILITY);
        assert_eq!(
            e.data,
            Some(json!({"requiredCapabilities": {"elicitation": {}}}))
        );
        assert_eq!(
            may_ask(&caps, "roots/list").unwrap_err().code,
            MISSING_CAPABILITY
        );
        assert_eq!(may_ask(&caps, "tools/call").unwrap_err().code, -32603);
    }

    #[test]
    fn the_arguments_digest_is_stable_and_tells_arguments_apart() {
        let a = json!({"x": 1}).as_object().cloned().unwrap();
        let b = json!({"x": 2}).as_object().cloned().unwrap();
        assert_eq!(args_digest(&a), args_digest(&a.clone()));
        assert_ne!(args_digest(&a), args_digest(&b));
        assert_eq!(args_digest(&a).len(), 64);
    }
}
