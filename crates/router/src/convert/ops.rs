//! The wire form of the task operations (`taskmesh_host::ops`): an [`Op`] as a
//! `TaskService.Apply` request and an [`Answer`] as its response, both ways.
//!
//! The sending node encodes with [`op_to_pb`] and decodes the answer with [`answer_from_pb`];
//! the leader decodes with [`op_from_pb`] (which checks what a peer sent as the gateway checked
//! what its client sent) and encodes with [`answer_to_pb`].

use std::sync::Arc;

use taskmesh_host::ops::{
    Cancel, Claim, Deliver, EventPage, Export, ExportedPage, GroupMembers, Import, List, Listed,
    Members, Pending, ReadEvent, ReadEvents, ReadSubscription, Subscribe, SubscriptionRead,
    SubscriptionState, Unsubscribe,
};
use taskmesh_host::outbox::DeliveryStats;
use taskmesh_host::{Answer, Created, HostError, NewTask, Op};
use taskmesh_mcp::jsonrpc::{self, Message, RequestId};
use taskmesh_rpc::v1::{self, apply_request, apply_response};
use taskmesh_task::{TaskRecord, TaskView, ToolRequest};
use tonic::Status;

use super::{
    lease, record_from_pb, record_to_pb, request_from_pb, request_to_pb, view_from_pb, view_to_pb,
};

/// The `Apply` request that carries `op` to the leader of `shard`. The operation's strings are
/// copied: a retry sends it again.
pub fn op_to_pb(shard: u32, op: &Op) -> v1::ApplyRequest {
    use apply_request::Op as W;
    let op = match op {
        Op::Create(new) => W::Create(v1::CreateTaskRequest {
            shard,
            owner: new.owner.clone(),
            task_id: new.task_id.clone(),
            session: new.session.clone(),
            requested_ttl_ms: new.ttl_ms,
            request: Some(request_to_pb(new.request.clone())),
            worker_rerun: new.worker_rerun,
        }),
        Op::Cancel(c) => W::Cancel(v1::CancelTaskRequest {
            shard,
            owner: c.owner.clone(),
            task_id: c.task_id.clone(),
        }),
        Op::List(l) => W::List(v1::ListTasksRequest {
            shard,
            owner: l.owner.clone(),
            after_task_id: l.after.clone(),
            limit: l.limit.min(u32::MAX as usize) as u32,
        }),
        Op::Deliver(d) => {
            let rid = RequestId::String(d.request_id.clone());
            W::Deliver(v1::DeliverResponseRequest {
                shard,
                owner: d.owner.clone(),
                task_id: d.task_id.clone(),
                response_json: match &d.outcome {
                    Ok(v) => jsonrpc::response(&rid, v),
                    Err(e) => jsonrpc::error_response(Some(&rid), e),
                },
            })
        }
        Op::Claim(c) => W::Claim(v1::ClaimMessageRequest {
            shard,
            task_id: c.task_id.clone(),
            request_id: c.request_id.clone(),
            release: c.release,
        }),
        Op::Pending(p) => W::Pending(v1::PendingRequestsRequest {
            shard,
            task_id: p.task_id.clone(),
            owner: p.owner.clone(),
        }),
        Op::Members(_) => W::Members(v1::ShardMembersRequest { shard }),
        Op::Export(e) => {
            let (after_owner, after_task_id) = e.after.clone().unwrap_or_default();
            W::Export(v1::ExportTasksRequest {
                shard,
                after_owner,
                after_task_id,
                max_records: e.max_records.min(u32::MAX as usize) as u32,
            })
        }
        Op::Import(i) => W::Import(v1::ImportTasksRequest {
            shard,
            records: i.records.iter().cloned().map(record_to_pb).collect(),
        }),
        Op::LeaseBeat(b) => W::LeaseBeat(lease::beat_to_pb(shard, b)),
        Op::LeaseComplete(c) => W::LeaseComplete(lease::complete_to_pb(shard, c)),
        Op::LeaseAsk(a) => W::LeaseAsk(lease::ask_to_pb(shard, a)),
        Op::Subscribe(sub) => W::Subscribe(v1::SubscribeRequest {
            shard,
            subscription: Some(subscription_to_pb(&sub.subscription)),
        }),
        Op::Unsubscribe(u) => W::Unsubscribe(v1::UnsubscribeRequest {
            shard,
            ids: u.ids.clone(),
        }),
        Op::ReadSubscription(r) => W::ReadSubscription(v1::ReadSubscriptionRequest {
            shard,
            id: r.id.clone(),
            principal: r.principal.clone(),
        }),
        Op::ReadEvents(r) => W::ReadEvents(v1::ReadEventsRequest {
            shard,
            owner: r.owner.clone(),
            task_id: r.task_id.clone(),
            terminal_only: r.terminal_only,
            after: r.after,
            not_before_ms: r.not_before_ms,
            max: r.max.min(u32::MAX as usize) as u32,
        }),
    };
    v1::ApplyRequest { op: Some(op) }
}

/// The operation an `Apply` request carries, with the shard it names. What a peer sent is
/// checked as the gateway checked its client's request (the arguments are one JSON object, a
/// client's answer is one JSON-RPC response); a malformed operation is `INVALID_ARGUMENT`.
pub fn op_from_pb(r: v1::ApplyRequest) -> Result<(u32, Op), Status> {
    use apply_request::Op as W;
    Ok(match r.op {
        None => {
            return Err(Status::invalid_argument(
                "no operation, or one this node does not know",
            ))
        }
        Some(W::Create(c)) => (c.shard, Op::Create(create_from_pb(c)?)),
        Some(W::Cancel(c)) => (
            c.shard,
            Op::Cancel(Cancel {
                task_id: c.task_id,
                owner: c.owner,
            }),
        ),
        Some(W::List(l)) => (
            l.shard,
            Op::List(List {
                shard: l.shard,
                owner: l.owner,
                after: l.after_task_id,
                limit: l.limit as usize,
            }),
        ),
        Some(W::Deliver(d)) => {
            let Ok(Message::Response { id, outcome }) = jsonrpc::parse_message(&d.response_json)
            else {
                return Err(Status::invalid_argument(
                    "response_json is not a JSON-RPC response",
                ));
            };
            let deliver = Deliver {
                task_id: d.task_id,
                owner: d.owner,
                request_id: id.to_string(),
                outcome,
            };
            (d.shard, Op::Deliver(deliver))
        }
        Some(W::Claim(c)) => (
            c.shard,
            Op::Claim(Claim {
                task_id: c.task_id,
                request_id: c.request_id,
                release: c.release,
            }),
        ),
        Some(W::Pending(p)) => (
            p.shard,
            Op::Pending(Pending {
                task_id: p.task_id,
                owner: p.owner,
            }),
        ),
        Some(W::Members(m)) => (m.shard, Op::Members(Members { shard: m.shard })),
        Some(W::Export(e)) => (e.shard, Op::Export(export_from_pb(e)?)),
        Some(W::Import(i)) => (i.shard, Op::Import(import_from_pb(i)?)),
        Some(W::LeaseBeat(b)) => {
            let (shard, b) = lease::beat_from_pb(b)?;
            (shard, Op::LeaseBeat(b))
        }
        Some(W::LeaseComplete(c)) => {
            let (shard, c) = lease::complete_from_pb(c)?;
            (shard, Op::LeaseComplete(c))
        }
        Some(W::Subscribe(sub)) => {
            let subscription = sub
                .subscription
                .ok_or_else(|| Status::invalid_argument("a subscribe without its subscription"))?;
            (
                sub.shard,
                Op::Subscribe(Subscribe {
                    shard: sub.shard,
                    subscription: subscription_from_pb(subscription),
                }),
            )
        }
        Some(W::Unsubscribe(u)) => (
            u.shard,
            Op::Unsubscribe(Unsubscribe {
                shard: u.shard,
                ids: u.ids,
            }),
        ),
        Some(W::ReadSubscription(r)) => (
            r.shard,
            Op::ReadSubscription(ReadSubscription {
                shard: r.shard,
                id: r.id,
                principal: r.principal,
            }),
        ),
        Some(W::ReadEvents(r)) => (
            r.shard,
            Op::ReadEvents(ReadEvents {
                shard: r.shard,
                owner: r.owner,
                task_id: r.task_id,
                terminal_only: r.terminal_only,
                after: r.after,
                not_before_ms: r.not_before_ms,
                max: r.max as usize,
            }),
        ),
        Some(W::LeaseAsk(a)) => {
            let (shard, a) = lease::ask_from_pb(a)?;
            (shard, Op::LeaseAsk(a))
        }
    })
}

/// A create from a peer. The gateway that accepted the call validated the arguments; a peer's
/// text is only checked to be a JSON object (no value is built from it).
fn create_from_pb(r: v1::CreateTaskRequest) -> Result<NewTask, Status> {
    let Some(tool) = r.request.map(request_from_pb) else {
        return Err(Status::invalid_argument("request is required"));
    };
    if !is_json_object(&tool.arguments_json) {
        return Err(Status::invalid_argument(
            "arguments_json is not a JSON object",
        ));
    }
    if tool
        .answers_json
        .as_deref()
        .is_some_and(|a| !is_json_object(a))
    {
        return Err(Status::invalid_argument(
            "answers_json is not a JSON object",
        ));
    }
    if let Some(t) = &tool.progress_token_json {
        // Checked, not kept: the token travels as the text it is.
        serde_json::from_str::<serde::de::IgnoredAny>(t)
            .map_err(|e| Status::invalid_argument(format!("progress_token_json: {e}")))?;
    }
    // The span serving this call, under the gateway's: the task's executions follow it.
    let traceparent = taskmesh_telemetry::current_traceparent().or(tool
        .traceparent
        .filter(|t| taskmesh_telemetry::parse(t).is_some()));
    Ok(NewTask {
        task_id: r.task_id,
        owner: r.owner,
        session: r.session,
        ttl_ms: r.requested_ttl_ms,
        request: ToolRequest {
            traceparent,
            ..tool
        },
        worker_rerun: r.worker_rerun,
    })
}

/// Whether `text` is one JSON object (checked without building a value).
fn is_json_object(text: &str) -> bool {
    text.trim_start().starts_with('{')
        && serde_json::from_str::<&serde_json::value::RawValue>(text).is_ok()
}

/// An export page as asked on the wire: no cursor when both of its parts are empty, and
/// `max_records` 0 read as the most a page holds.
pub fn export_from_pb(r: v1::ExportTasksRequest) -> Result<Export, Status> {
    let after = match (r.after_owner.is_empty(), r.after_task_id.is_empty()) {
        (true, true) => None,
        (false, false) => Some((r.after_owner, r.after_task_id)),
        _ => {
            return Err(Status::invalid_argument(
                "after_owner and after_task_id are given together or not at all",
            ))
        }
    };
    let max_records = match r.max_records {
        0 => taskmesh_host::backup::MAX_PAGE_RECORDS,
        n => n as usize,
    };
    Ok(Export {
        shard: r.shard,
        after,
        max_records,
    })
}

/// An import as sent on the wire; a malformed record refuses the whole import.
pub fn import_from_pb(r: v1::ImportTasksRequest) -> Result<Import, Status> {
    let records = r
        .records
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            record_from_pb(p)
                .ok_or_else(|| Status::invalid_argument(format!("record {i} is malformed")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Import {
        shard: r.shard,
        records,
    })
}

/// The wire form of an export page.
pub fn exported_to_pb(page: ExportedPage) -> v1::ExportTasksResponse {
    v1::ExportTasksResponse {
        records: page.records.into_iter().map(record_to_pb).collect(),
        done: page.last,
    }
}

/// The `Apply` response that carries a leader's answer; its strings move into it.
pub fn answer_to_pb(a: Answer) -> v1::ApplyResponse {
    use apply_response::Answer as W;
    let answer = match a {
        Answer::Create(c) => W::Create(v1::CreateTaskResponse {
            task: Some(view_to_pb(c.task)),
            created: c.fresh,
        }),
        Answer::Cancel(task) => W::Cancel(v1::CancelTaskResponse {
            task: Some(view_to_pb(task)),
        }),
        Answer::List(l) => W::List(v1::ListTasksResponse {
            tasks: l.tasks.into_iter().map(view_to_pb).collect(),
            more: l.more,
        }),
        Answer::Deliver(delivered) => W::Deliver(v1::DeliverResponseResponse { delivered }),
        Answer::Claim(claimed) => W::Claim(v1::ClaimMessageResponse { claimed }),
        Answer::Pending(requests) => W::Pending(v1::PendingRequestsResponse {
            requests_json: requests.iter().map(|j| j.to_vec()).collect(),
        }),
        Answer::Members(m) => W::Members(v1::ShardMembersResponse {
            voters: m.voters,
            learners: m.learners,
        }),
        Answer::Export(page) => W::Export(exported_to_pb(page)),
        Answer::Import(inserted) => W::Import(v1::ImportTasksResponse { inserted }),
        Answer::LeaseBeat(r) => W::LeaseBeat(lease::renewed_to_pb(r)),
        Answer::LeaseComplete(s) => W::LeaseComplete(lease::completed_to_pb(s)),
        Answer::LeaseAsk(r) => W::LeaseAsk(lease::answered_to_pb(&r)),
        Answer::Subscribe(watching) => W::Subscribe(v1::SubscribeResponse {
            watching: watching as u64,
        }),
        Answer::Unsubscribe(()) => W::Unsubscribe(v1::UnsubscribeResponse {}),
        Answer::ReadSubscription(read) => W::ReadSubscription(match read.state {
            Some(s) => v1::ReadSubscriptionResponse {
                subscription: Some(subscription_to_pb(&s.subscription)),
                deliveries: Some(stats_to_pb(&s.deliveries)),
                held: read.held,
            },
            None => v1::ReadSubscriptionResponse {
                held: read.held,
                ..Default::default()
            },
        }),
        Answer::ReadEvents(p) => W::ReadEvents(v1::ReadEventsResponse {
            events: p
                .events
                .into_iter()
                .map(|e| v1::ReadEvent {
                    index: e.index,
                    at_ms: e.at_ms,
                    json: e.json,
                })
                .collect(),
            through: p.through,
            truncated: p.truncated,
            more: p.more,
        }),
    };
    v1::ApplyResponse {
        answer: Some(answer),
    }
}

/// A leader's answer from the wire; a malformed one (a task without a status, a record that
/// does not decode, no answer) is [`HostError::Internal`].
pub fn answer_from_pb(r: v1::ApplyResponse) -> Result<Answer, HostError> {
    use apply_response::Answer as W;
    Ok(match r.answer {
        None => return Err(malformed("an answer without its operation's")),
        Some(W::Create(c)) => Answer::Create(Created {
            task: view_of(c.task)?,
            fresh: c.created,
        }),
        Some(W::Cancel(c)) => Answer::Cancel(view_of(c.task)?),
        Some(W::List(l)) => Answer::List(Listed {
            tasks: each(l.tasks, view_of)?,
            more: l.more,
        }),
        Some(W::Deliver(d)) => Answer::Deliver(d.delivered),
        Some(W::Claim(c)) => Answer::Claim(c.claimed),
        Some(W::Pending(p)) => Answer::Pending(p.requests_json.into_iter().map(Arc::new).collect()),
        Some(W::Members(m)) => Answer::Members(GroupMembers {
            voters: m.voters,
            learners: m.learners,
        }),
        Some(W::Export(e)) => Answer::Export(ExportedPage {
            records: each(e.records, record_of)?,
            last: e.done,
        }),
        Some(W::Import(i)) => Answer::Import(i.inserted),
        Some(W::LeaseBeat(r)) => Answer::LeaseBeat(lease::renewed_from_pb(r)),
        Some(W::LeaseComplete(r)) => Answer::LeaseComplete(lease::completed_from_pb(r)?),
        Some(W::LeaseAsk(r)) => Answer::LeaseAsk(lease::answered_from_pb(r)?),
        Some(W::Subscribe(s)) => Answer::Subscribe(s.watching as usize),
        Some(W::Unsubscribe(_)) => Answer::Unsubscribe(()),
        Some(W::ReadSubscription(r)) => Answer::ReadSubscription(SubscriptionRead {
            state: r.subscription.map(|s| SubscriptionState {
                subscription: subscription_from_pb(s),
                deliveries: stats_from_pb(r.deliveries.unwrap_or_default()),
            }),
            held: r.held,
        }),
        Some(W::ReadEvents(p)) => Answer::ReadEvents(EventPage {
            events: p
                .events
                .into_iter()
                .map(|e| ReadEvent {
                    index: e.index,
                    at_ms: e.at_ms,
                    json: e.json,
                })
                .collect(),
            through: p.through,
            truncated: p.truncated,
            more: p.more,
        }),
    })
}

fn subscription_to_pb(s: &taskmesh_task::Subscription) -> v1::ClientSubscription {
    v1::ClientSubscription {
        id: s.id.clone(),
        principal: s.principal.clone(),
        url: s.url.clone(),
        secret: s.secret.clone(),
        previous_secret: s.previous_secret.clone(),
        previous_until_ms: s.previous_until_ms,
        task_id: s.task_id.clone(),
        terminal_only: s.terminal_only,
        expires_at_ms: s.expires_at_ms,
        refreshed_at_ms: s.refreshed_at_ms,
    }
}

fn subscription_from_pb(s: v1::ClientSubscription) -> taskmesh_task::Subscription {
    taskmesh_task::Subscription {
        id: s.id,
        principal: s.principal,
        url: s.url,
        secret: s.secret,
        previous_secret: s.previous_secret,
        previous_until_ms: s.previous_until_ms,
        task_id: s.task_id,
        terminal_only: s.terminal_only,
        expires_at_ms: s.expires_at_ms,
        refreshed_at_ms: s.refreshed_at_ms,
    }
}

fn stats_to_pb(s: &DeliveryStats) -> v1::DeliveryStatus {
    v1::DeliveryStatus {
        attempts: s.attempts,
        acked: s.acked,
        refused: s.refused,
        abandoned: s.abandoned,
        suspended_since_ms: s.suspended_since_ms,
        last_delivery_at_ms: s.last_delivery_at_ms,
        last_error: s.last_error.map(str::to_string),
        failing_since_ms: s.failing_since_ms,
    }
}

fn stats_from_pb(s: v1::DeliveryStatus) -> DeliveryStats {
    DeliveryStats {
        attempts: s.attempts,
        acked: s.acked,
        refused: s.refused,
        abandoned: s.abandoned,
        suspended_since_ms: s.suspended_since_ms,
        last_delivery_at_ms: s.last_delivery_at_ms,
        // Only the categories are shown; anything else a peer sent is not one.
        last_error: s
            .last_error
            .as_deref()
            .and_then(taskmesh_host::outbox::error_category),
        failing_since_ms: s.failing_since_ms,
    }
}

/// Every item of a list a peer sent, read by `read`; the first malformed one fails the whole.
fn each<T, U>(
    items: Vec<T>,
    read: fn(Option<T>) -> Result<U, HostError>,
) -> Result<Vec<U>, HostError> {
    items.into_iter().map(|i| read(Some(i))).collect()
}

fn malformed(what: &str) -> HostError {
    HostError::Internal(format!("malformed answer from a peer: {what}"))
}

/// A record a peer sent; one that does not decode is [`HostError::Internal`].
pub fn record_of(r: Option<v1::TaskRecord>) -> Result<TaskRecord, HostError> {
    r.and_then(record_from_pb)
        .ok_or_else(|| malformed("a task record"))
}

/// A task a peer sent; one that does not decode is [`HostError::Internal`].
pub fn view_of(v: Option<v1::TaskView>) -> Result<TaskView, HostError> {
    v.and_then(view_from_pb).ok_or_else(|| malformed("a task"))
}

#[cfg(test)]
mod tests;
