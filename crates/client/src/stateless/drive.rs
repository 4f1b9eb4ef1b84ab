//! How a 2026-07-28 call or task is followed to its outcome (see [`super`]): a plain call's
//! input rounds until it answers a result or a task, a task's polls with its input requests
//! asked once each and answered with `tasks/update`.

use std::collections::HashSet;

use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use taskmesh_mcp::jsonrpc::{self, ErrorObject};
use tokio::sync::{mpsc, oneshot};

use super::{created_task, Call, First, StatelessClient, MAX_ROUNDS};
use crate::{CallEvent, ClientError, Polling};

impl StatelessClient {
    /// A plain call's rounds, or the task it became, to its outcome.
    pub(super) async fn drive_call(
        &self,
        call: Call,
        first: First,
        events: &mpsc::Sender<CallEvent>,
        task_id: &Mutex<Option<String>>,
        polling: Polling,
    ) -> Result<Value, ClientError> {
        let mut answer = match first {
            First::Answer(a) => a,
            First::Stream(id, resp) => self.shared.answer(id, *resp, Some(events)).await?,
        };
        for _ in 0..MAX_ROUNDS {
            if let Some(id) = created_task(&answer) {
                *task_id.lock() = Some(id.clone());
                return self.follow(&id, events, polling).await;
            }
            if answer["resultType"] != "input_required" {
                return Ok(answer);
            }
            let mut asked = HashSet::new();
            let responses = ask(&answer["inputRequests"], &mut asked, events).await?;
            let mut params = json!({
                "name": call.name,
                "arguments": call.arguments,
                "inputResponses": responses,
                "_meta": { "progressToken": call.token },
            });
            if let Some(state) = answer.get("requestState") {
                params["requestState"] = state.clone();
            }
            answer = self
                .shared
                .request("tools/call", params, Some(events))
                .await?;
        }
        Err(ClientError::Protocol(format!(
            "the call still asked for input after {MAX_ROUNDS} rounds"
        )))
    }

    /// Poll task `task_id` to its outcome, asking its input requests on the way.
    pub(super) async fn follow(
        &self,
        task_id: &str,
        events: &mpsc::Sender<CallEvent>,
        polling: Polling,
    ) -> Result<Value, ClientError> {
        let mut last: Option<(String, Option<String>)> = None;
        let mut last_pause = None;
        let mut asked = HashSet::new();
        loop {
            let task = match self.get_task(task_id).await {
                Ok(t) => t,
                Err(ClientError::Rpc(e)) => {
                    return Err(ClientError::TaskLost(format!(
                        "tasks/get of task {task_id} answered error {}: {}",
                        e.code, e.message
                    )))
                }
                Err(e) => return Err(e),
            };
            let status = task["status"].as_str().unwrap_or_default().to_string();
            let message = task["statusMessage"].as_str().map(str::to_string);
            let now = (status.clone(), message.clone());
            if last.as_ref() != Some(&now) {
                let _ = events.try_send(CallEvent::Status {
                    status: status.clone(),
                    message: message.clone(),
                });
                last = Some(now);
            }
            match status.as_str() {
                "working" => {}
                "input_required" => {
                    let responses = ask(&task["inputRequests"], &mut asked, events).await?;
                    if !responses.is_empty() {
                        self.update_task(task_id, responses).await?;
                        continue;
                    }
                }
                "completed" => {
                    return task.get("result").cloned().ok_or_else(|| {
                        ClientError::Protocol(format!(
                            "task {task_id} is completed but tasks/get carries no result"
                        ))
                    })
                }
                "failed" => {
                    let error = serde_json::from_value::<ErrorObject>(task["error"].clone())
                        .unwrap_or_else(|_| ErrorObject {
                            code: jsonrpc::INTERNAL_ERROR,
                            message: message.unwrap_or_else(|| "the task failed".into()),
                            data: None,
                        });
                    return Err(ClientError::Rpc(error));
                }
                "cancelled" => {
                    return Err(ClientError::TaskCancelled(format!(
                        "task {task_id} was cancelled{}",
                        message.map(|m| format!(": {m}")).unwrap_or_default()
                    )))
                }
                other => {
                    return Err(ClientError::Protocol(format!(
                        "tasks/get of task {task_id} gave status {other:?}"
                    )))
                }
            }
            let pause = polling.next_pause(task["pollIntervalMs"].as_u64(), &mut last_pause);
            tokio::time::sleep(pause).await;
        }
    }
}

/// Ask the caller each request of `requests` (`inputRequests`: key → `{method, params}`)
/// whose key is not in `asked`; their answers by key. A request the caller answers with an
/// error ends the call with that error.
pub(super) async fn ask(
    requests: &Value,
    asked: &mut HashSet<String>,
    events: &mpsc::Sender<CallEvent>,
) -> Result<Map<String, Value>, ClientError> {
    let mut responses = Map::new();
    let Some(requests) = requests.as_object() else {
        return Ok(responses);
    };
    for (key, request) in requests {
        if !asked.insert(key.clone()) {
            continue;
        }
        let (reply, answer) = oneshot::channel();
        let event = CallEvent::Request {
            method: request["method"].as_str().unwrap_or_default().to_string(),
            params: request.get("params").cloned().unwrap_or(json!({})),
            reply,
        };
        if events.send(event).await.is_err() {
            return Err(ClientError::Closed("the call was given up".into()));
        }
        match answer.await {
            Ok(Ok(v)) => {
                responses.insert(key.clone(), v);
            }
            Ok(Err(e)) => return Err(ClientError::Rpc(e)),
            Err(_) => return Err(ClientError::Closed("the request was not answered".into())),
        }
    }
    Ok(responses)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn each_input_request_is_asked_once() {
        let (tx, mut rx) = mpsc::channel(4);
        let answering = tokio::spawn(async move {
            let mut asked = vec![];
            while let Some(CallEvent::Request { method, reply, .. }) = rx.recv().await {
                asked.push(method);
                let _ = reply.send(Ok(json!({"action": "decline"})));
            }
            asked
        });
        let requests = json!({
            "k1": {"method": "elicitation/create", "params": {"message": "one"}},
            "k2": {"method": "elicitation/create", "params": {"message": "two"}},
        });
        let mut asked = HashSet::new();
        let first = ask(&requests, &mut asked, &tx).await.unwrap();
        assert_eq!(first.len(), 2);
        let again = ask(&requests, &mut asked, &tx).await.unwrap();
        assert!(again.is_empty(), "the same keys are not asked again");
        drop(tx);
        assert_eq!(answering.await.unwrap().len(), 2);
    }
}
