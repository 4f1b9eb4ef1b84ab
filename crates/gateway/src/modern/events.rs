//! The events extension (`io.modelcontextprotocol/events`, SEP-3415, a draft) on protocol
//! 2026-07-28: `events/list`, `events/poll` and `events/stream` of the one event type,
//! `taskmesh.task.updated` (docs/events.md).
//!
//! An event is a status change of one of the caller's tasks. Every shard keeps its newest
//! changes in log order (`taskmesh_task::changes`), so a position in a shard is a log index
//! and means the same on every replica. A cursor is the position reached in each shard read
//! (`e1.` and the base64url of (shard, index) pairs): it names no node, so a poll or a stream
//! continues from it through any node and gets every event after it once. A read asks every
//! shard (or, for one task, its shard) on its leader and merges the pages: each shard's events
//! stay in log order, and among shards the older change comes first.
//!
//! A null cursor answers no event, only the cursor of now. `maxAgeMs` skips older changes, and
//! `truncated` says when changes after the cursor were skipped: older than asked, or no longer
//! kept (`events.retain_changes` per shard). Error codes are the draft's, provisional:
//! `-32023` for an event name that is not served (`data.kind: "event"`), `-32602` for bad
//! arguments or a cursor this server did not issue.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use taskmesh_host::ops::{EventPage, ReadEvent, ReadEvents};
use taskmesh_host::outbox::TASK_EVENT;
use taskmesh_host::HostError;
use taskmesh_mcp::jsonrpc::{self, ErrorObject, RequestId};
use tokio::sync::Notify;

use super::cursor::Cursor;
use super::listen::{give_place, sse_response, take_place, META_SUBSCRIPTION_ID};
use super::{complete, with_server_info};
use crate::Gateway;

/// The events extension's identifier.
pub const EVENTS_EXTENSION: &str = "io.modelcontextprotocol/events";
/// The draft's `NotFound` (provisional): an event name, or a subscription, that is not known.
pub const NOT_FOUND: i64 = -32023;

/// `events/list`: the one event type, its arguments and its payload.
pub(super) fn list(p: &Map<String, Value>) -> Result<Value, ErrorObject> {
    match p.get("cursor") {
        None | Some(Value::Null) => {}
        Some(_) => {
            return Err(ErrorObject::invalid_params(
                "Invalid params: the event list has one page; 'cursor' names none of its pages",
            ))
        }
    }
    Ok(complete(Map::from_iter([(
        "events".to_string(),
        json!([descriptor()]),
    )])))
}

fn descriptor() -> Value {
    json!({
        "name": TASK_EVENT,
        "description": "A task of the caller changed status: to input_required and back to working, \
    or to its end (completed, failed, cancelled). The data is the task as tasks/get shows it at \
    that change, with its result or error once it ended.",
        "delivery": ["webhook", "poll", "push"],
        "inputSchema": {
            "type": "object",
            "properties": {
                "taskId": {"type": "string", "description": "Only this task's events."},
                "terminalOnly": {"type": "boolean", "description": "Only the changes that end a task."}
            },
            "additionalProperties": false
        },
        "payloadSchema": {
            "type": "object",
            "properties": {
                "taskId": {"type": "string"},
                "status": {"type": "string", "enum": ["working", "input_required", "completed", "failed", "cancelled"]},
                "statusMessage": {"type": "string"},
                "createdAt": {"type": "string", "format": "date-time"},
                "lastUpdatedAt": {"type": "string", "format": "date-time"},
                "ttlMs": {"type": ["integer", "null"]},
                "pollIntervalMs": {"type": "integer"},
                "result": {"type": "object"},
                "error": {"type": "object"}
            },
            "required": ["taskId", "status", "createdAt", "lastUpdatedAt"]
        }
    })
}

/// What a poll or a stream reads: whose events, of which tasks, from where.
#[derive(Debug, Clone)]
pub(super) struct Subscription {
    task_id: Option<String>,
    terminal_only: bool,
    cursor: Option<Cursor>,
    max_age_ms: Option<u64>,
}

/// The event a request names (the one served, else `-32023`) and its arguments: the task it
/// is limited to, and whether only ends are wanted.
pub(super) fn event_filter(p: &Map<String, Value>) -> Result<(Option<String>, bool), ErrorObject> {
    match p.get("name") {
        Some(Value::String(n)) if n == TASK_EVENT => {}
        Some(Value::String(n)) => {
            return Err(ErrorObject {
                code: NOT_FOUND,
                message: format!("No event named '{n}': this server has {TASK_EVENT}"),
                data: Some(json!({"kind": "event"})),
            })
        }
        _ => {
            return Err(ErrorObject::invalid_params(
                "Invalid params: 'name' must be the event's name (a string)",
            ))
        }
    }
    let mut task_id = None;
    let mut terminal_only = false;
    match p.get("arguments") {
        None | Some(Value::Null) => {}
        Some(Value::Object(args)) => {
            for (k, v) in args {
                match (k.as_str(), v) {
                    ("taskId", Value::String(t)) => task_id = Some(t.clone()),
                    ("terminalOnly", Value::Bool(b)) => terminal_only = *b,
                    ("taskId", _) => return Err(bad_argument("'arguments.taskId' must be a string")),
                    ("terminalOnly", _) => {
                        return Err(bad_argument("'arguments.terminalOnly' must be a boolean"))
                    }
                    (other, _) => {
                        return Err(bad_argument(&format!(
                            "'arguments.{other}' is not an argument of {TASK_EVENT} (taskId, terminalOnly)"
                        )))
                    }
                }
            }
        }
        Some(_) => return Err(bad_argument("'arguments' must be an object")),
    }
    if task_id
        .as_deref()
        .is_some_and(|t| t.is_empty() || t.len() > taskmesh_host::ops::MAX_TASK_ID_LEN)
    {
        return Err(bad_argument("'arguments.taskId' cannot name a task"));
    }
    Ok((task_id, terminal_only))
}

/// Read `name`, `arguments`, `cursor` and `maxAgeMs` of an `events/poll` or `events/stream`.
pub(super) fn subscription(
    gw: &Gateway,
    p: &Map<String, Value>,
) -> Result<Subscription, ErrorObject> {
    let (task_id, terminal_only) = event_filter(p)?;
    let cursor = match p.get("cursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) => Some(Cursor::decode(c, gw.router.shard_count())?),
        Some(_) => return Err(bad_argument("'cursor' must be a string or null")),
    };
    Ok(Subscription {
        task_id,
        terminal_only,
        cursor,
        max_age_ms: non_negative(p, "maxAgeMs")?,
    })
}

pub(super) fn bad_argument(what: &str) -> ErrorObject {
    ErrorObject::invalid_params(format!("Invalid params: {what}"))
}

/// An optional non-negative integer parameter.
fn non_negative(p: &Map<String, Value>, key: &str) -> Result<Option<u64>, ErrorObject> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| bad_argument(&format!("'{key}' must be a non-negative integer"))),
    }
}

/// `events/poll`: the events after the cursor, at most `maxEvents`.
pub(super) async fn poll(
    gw: &Arc<Gateway>,
    principal: &str,
    p: &Map<String, Value>,
) -> Result<Value, ErrorObject> {
    let sub = subscription(gw, p)?;
    let settings = &gw.cfg.events;
    let max = match non_negative(p, "maxEvents")? {
        None => settings.default_poll_events,
        Some(0) => return Err(bad_argument("'maxEvents' must be at least 1")),
        Some(n) => (n as usize).min(settings.max_poll_events),
    };
    let batch = read(gw, principal, &sub, None, max)
        .await
        .map_err(|e| crate::wire::host_error(&e))?;
    let events: Vec<Value> = batch
        .events
        .into_iter()
        .map(|(event, _)| Value::Object(event))
        .collect();
    Ok(complete(Map::from_iter([
        ("events".to_string(), Value::Array(events)),
        ("cursor".to_string(), json!(batch.cursor.encode())),
        ("truncated".to_string(), json!(batch.truncated)),
        ("hasMore".to_string(), json!(batch.more)),
        ("nextPollMs".to_string(), json!(settings.poll_interval_ms)),
    ])))
}

/// What one read of every shard gave: the events in order, each with the cursor after it,
/// and the cursor after all of them.
pub(super) struct Batch {
    events: Vec<(Map<String, Value>, Cursor)>,
    cursor: Cursor,
    truncated: bool,
    more: bool,
}

/// The events of `sub` after its cursor (or after `from`, when given), at most `max`, read
/// from the leader of every shard concerned (only those of `only`, when given; the others
/// keep their positions). Without a cursor: none, and the cursor of now.
async fn read(
    gw: &Arc<Gateway>,
    principal: &str,
    sub: &Subscription,
    only: Option<&HashSet<u32>>,
    max: usize,
) -> Result<Batch, HostError> {
    let router = &gw.router;
    let shards: Vec<u32> = match &sub.task_id {
        Some(t) => vec![router.shard_of(t)],
        None => (0..router.shard_count()).collect(),
    };
    let start = sub.cursor.as_ref();
    let not_before_ms = match (start, sub.max_age_ms) {
        (Some(_), Some(age)) => taskmesh_mcp::time::now_ms().saturating_sub(age),
        _ => 0,
    };
    // A shard the cursor does not name is read from now on, and the batch says events may
    // have been missed there.
    let mut truncated = false;
    let reads = shards
        .iter()
        .filter(|s| only.is_none_or(|o| o.contains(s)))
        .map(|&shard| {
            let after = start.and_then(|c| c.0.get(&shard).copied());
            truncated |= start.is_some() && after.is_none();
            router.run(ReadEvents {
                shard,
                owner: principal.to_string(),
                task_id: sub.task_id.clone(),
                terminal_only: sub.terminal_only,
                after,
                not_before_ms,
                max,
            })
        })
        .collect::<Vec<_>>();
    let pages: Vec<EventPage> = futures::future::try_join_all(reads).await?;
    let read_shards = shards.iter().filter(|s| only.is_none_or(|o| o.contains(s)));
    let mut cursor = start.cloned().unwrap_or_default();
    // Shards of a cursor that named others (another task's) are kept as they were.
    let mut queues: Vec<(u32, std::collections::VecDeque<ReadEvent>, EventPage)> = Vec::new();
    for (&shard, mut page) in read_shards.zip(pages) {
        truncated |= page.truncated;
        let events = std::mem::take(&mut page.events).into();
        queues.push((shard, events, page));
    }
    if start.is_none() {
        for (shard, _, page) in &queues {
            cursor.0.insert(*shard, page.through);
        }
        return Ok(Batch {
            events: Vec::new(),
            cursor,
            truncated: false,
            more: false,
        });
    }
    // Merge: each shard's events in log order, the oldest change among the shards' next first.
    let mut events = Vec::new();
    while events.len() < max {
        let Some(q) = queues
            .iter_mut()
            .filter(|q| !q.1.is_empty())
            .min_by_key(|q| q.1.front().map(|e| (e.at_ms, q.0)))
        else {
            break;
        };
        let Some(e) = q.1.pop_front() else { break };
        cursor.0.insert(q.0, e.index);
        if let Ok(Value::Object(event)) = serde_json::from_str::<Value>(&e.json) {
            events.push((event, cursor.clone()));
        }
    }
    let mut more = false;
    for (shard, left, page) in &queues {
        more |= page.more;
        let position = match left.front() {
            // Everything before the first event not given is read.
            Some(next) => {
                more = true;
                next.index - 1
            }
            None => page.through,
        };
        let p = cursor.0.entry(*shard).or_insert(position);
        *p = (*p).max(position);
    }
    Ok(Batch {
        events,
        cursor,
        truncated,
        more,
    })
}

/// One open `events/stream` as the node's registry knows it: the shards changed since it last
/// read.
struct Reader {
    dirty: Mutex<HashSet<u32>>,
    wake: Notify,
}

/// The `events/stream` requests open on this node.
#[derive(Default)]
pub(crate) struct EventStreams {
    registry: Mutex<StreamRegistry>,
    /// Cancelled when the node ends its streams (shutdown).
    ending: tokio_util::sync::CancellationToken,
}

#[derive(Default)]
struct StreamRegistry {
    next: u64,
    readers: HashMap<u64, Arc<Reader>>,
    by_principal: HashMap<String, usize>,
}

impl EventStreams {
    /// A task of `shard` changed: every stream reads that shard again.
    pub(crate) fn shard_changed(&self, shard: u32) {
        let r = self.registry.lock();
        for reader in r.readers.values() {
            reader.dirty.lock().insert(shard);
            reader.wake.notify_one();
        }
    }

    /// End every stream with its response; streams opened later end at once.
    pub(crate) fn end_all(&self) {
        self.ending.cancel();
    }

    fn open(self: &Arc<Self>, principal: &str, limit: usize) -> Option<StreamSlot> {
        let mut r = self.registry.lock();
        if !take_place(&mut r.by_principal, principal, limit) {
            return None;
        }
        r.next += 1;
        let id = r.next;
        let reader = Arc::new(Reader {
            dirty: Mutex::new(HashSet::new()),
            wake: Notify::new(),
        });
        r.readers.insert(id, reader.clone());
        Some(StreamSlot {
            streams: self.clone(),
            id,
            principal: principal.to_string(),
            reader,
        })
    }
}

/// A stream's place in the registry, given back when it ends.
struct StreamSlot {
    streams: Arc<EventStreams>,
    id: u64,
    principal: String,
    reader: Arc<Reader>,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut r = self.streams.registry.lock();
        r.readers.remove(&self.id);
        give_place(&mut r.by_principal, &self.principal);
    }
}

/// An accepted `events/stream`, to be answered with its stream.
pub(crate) struct Stream {
    sub: Subscription,
    slot: StreamSlot,
}

/// Check an `events/stream` request and take its place among the principal's streams.
pub(super) fn open(
    gw: &Arc<Gateway>,
    principal: &str,
    p: &Map<String, Value>,
) -> Result<Result<Stream, Response>, ErrorObject> {
    let sub = subscription(gw, p)?;
    let limit = gw.cfg.events.max_streams_per_principal;
    let Some(slot) = gw.event_streams.open(principal, limit) else {
        return Ok(Err((
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, "1")],
            format!(
                "Too Many Requests: this principal holds {limit} events/stream streams on this node already"
            ),
        )
            .into_response()));
    };
    Ok(Ok(Stream { sub, slot }))
}

/// An `events/stream` message: `params._meta` carries the stream's request id.
fn notification(method: &str, mut params: Map<String, Value>, id: &RequestId) -> Bytes {
    jsonrpc::put_meta(&mut params, META_SUBSCRIPTION_ID, json!(id));
    let json = jsonrpc::notification(method, &Value::Object(params));
    let mut f = Vec::with_capacity(json.len() + 8);
    f.extend_from_slice(b"data: ");
    f.extend_from_slice(&json);
    f.extend_from_slice(b"\n\n");
    Bytes::from(f)
}

fn positioned(cursor: &Cursor, truncated: Option<bool>) -> Map<String, Value> {
    let mut m = Map::from_iter([("cursor".to_string(), json!(cursor.encode()))]);
    if let Some(t) = truncated {
        m.insert("truncated".into(), json!(t));
    }
    m
}

/// The SSE stream of an accepted `events/stream` request `id`: `notifications/events/active`
/// with the cursor it starts from, then each event as `notifications/events/event` with the
/// cursor after it, a `notifications/events/heartbeat` with the current cursor every
/// `events.stream_heartbeat_ms`, `active` again with `truncated: true` after a gap, and
/// `notifications/events/error` when the shards cannot be read (tried again at the next
/// heartbeat). It ends when the client goes, or with the request's response when the node
/// shuts down.
pub(super) fn stream(gw: &Arc<Gateway>, principal: &str, id: RequestId, s: Stream) -> Response {
    let heartbeat = Duration::from_millis(gw.cfg.events.stream_heartbeat_ms);
    let page = gw.cfg.events.max_poll_events;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, Infallible>>(8);
    let gw = gw.clone();
    let principal = principal.to_string();
    tokio::spawn(async move {
        let Stream { mut sub, slot } = s;
        let ending = gw.event_streams.ending.clone();
        let send = |b: Bytes| {
            let tx = tx.clone();
            async move { tx.send(Ok(b)).await.is_ok() }
        };
        // The position it starts from: the cursor given, or now.
        let mut first = true;
        let mut only: Option<HashSet<u32>> = None;
        loop {
            if ending.is_cancelled() {
                break;
            }
            // Read until no shard has more.
            loop {
                let fresh = sub.cursor.is_none();
                let batch = match read(&gw, &principal, &sub, only.as_ref(), page).await {
                    Ok(b) => b,
                    Err(e) => {
                        let error = crate::wire::host_error(&e);
                        let params = Map::from_iter([(
                            "error".to_string(),
                            serde_json::to_value(&error).unwrap_or(Value::Null),
                        )]);
                        if !send(notification("notifications/events/error", params, &id)).await {
                            return;
                        }
                        break;
                    }
                };
                let start = sub.cursor.clone().unwrap_or_else(|| batch.cursor.clone());
                if first || batch.truncated {
                    let active = positioned(&start, Some(batch.truncated && !fresh));
                    if !send(notification("notifications/events/active", active, &id)).await {
                        return;
                    }
                    first = false;
                }
                for (mut event, after) in batch.events {
                    event.insert("cursor".into(), json!(after.encode()));
                    if !send(notification("notifications/events/event", event, &id)).await {
                        return;
                    }
                }
                sub.cursor = Some(batch.cursor);
                sub.max_age_ms = None;
                if !batch.more {
                    break;
                }
            }
            tokio::select! {
                () = ending.cancelled() => break,
                () = slot.reader.wake.notified() => {
                    only = Some(std::mem::take(&mut *slot.reader.dirty.lock()));
                }
                () = tokio::time::sleep(heartbeat) => {
                    let cursor = sub.cursor.clone().unwrap_or_default();
                    let beat = notification("notifications/events/heartbeat", positioned(&cursor, None), &id);
                    if !send(beat).await {
                        return;
                    }
                    // A missed wake is caught here: every shard is read again.
                    only = None;
                }
                () = tx.closed() => return,
            }
        }
        drop(slot);
        let mut end = Map::new();
        jsonrpc::put_meta(&mut end, META_SUBSCRIPTION_ID, json!(id));
        let last = jsonrpc::response(&id, &with_server_info(complete(end)));
        let mut f = b"data: ".to_vec();
        f.extend_from_slice(&last);
        f.extend_from_slice(b"\n\n");
        let _ = tx.send(Ok(Bytes::from(f))).await;
    });
    sse_response(rx)
}
