//! The `taskmesh.v1.TaskService` server: what another node's router asks this node, answered
//! by the local [`Host`]. It is the remote half of the router: the same operations, with
//! errors carried as `TaskError`s so the caller can follow a `NotLeader` hint.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use taskmesh_host::{Attachment, Host, HostEvent, NewTask};
use taskmesh_mcp::jsonrpc::{self, Message};
use taskmesh_rpc::v1::{self, task_service_server::TaskService};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::convert::{
    error_to_pb, error_to_status, record_from_pb, record_to_pb, request_from_pb, view_to_pb,
};
use taskmesh_task::TaskRecord;

/// Resolves a node id to the MCP-independent gRPC address peers can reach it at.
pub type AddressBook = Arc<dyn Fn(u64) -> Option<String> + Send + Sync>;

/// The `TaskService` that other nodes' routers call, answered by this node's [`Host`];
/// a `NotLeader` error names the leader's address from the [`AddressBook`].
pub struct TaskGrpc {
    host: Host,
    book: AddressBook,
}

impl TaskGrpc {
    /// A service answering from `host`, resolving leader hints to addresses through `book`.
    pub fn new(host: Host, book: AddressBook) -> Self {
        Self { host, book }
    }

    /// The service as a tonic server, to add to a gRPC server.
    pub fn into_server(self) -> v1::task_service_server::TaskServiceServer<Self> {
        v1::task_service_server::TaskServiceServer::new(self)
    }

    fn err(&self, e: &taskmesh_host::HostError) -> Status {
        error_to_status(e, |id| (self.book)(id))
    }
}

/// Answers of a ReadTasks stream that may wait to be sent while the caller reads slowly.
const READ_STREAM_BUFFER: usize = 64;

/// The most tasks one ListTasks call answers (a caller asking for more gets this many and a
/// cursor): bounds the answer's size whatever the caller's page size.
pub const MAX_LIST_PAGE: usize = 10_000;
/// Messages of an attachment (elicitations, progress) waiting for the calling node to read.
const ATTACH_STREAM_BUFFER: usize = 64;
/// Status changes waiting for a watching node to read; a watcher further behind misses the
/// changes it could not take (its sessions learn the status at their next poll).
const WATCH_STREAM_BUFFER: usize = 1024;

/// Refuse a batch of more reads than a call may carry.
fn check_batch(n: usize) -> Result<(), Status> {
    if n > crate::remote::MAX_GET_BATCH {
        return Err(Status::invalid_argument(format!(
            "at most {} reads per batch",
            crate::remote::MAX_GET_BATCH
        )));
    }
    Ok(())
}

/// Read every task of `gets` (each as GetTask would), in their order.
async fn answer_reads(
    host: &Host,
    book: &AddressBook,
    gets: &[v1::GetTaskRequest],
) -> Vec<v1::GetTaskResult> {
    let reads = gets.iter().map(|g| {
        if g.trace_id != 0 {
            tracing::debug!(
                trace_id = %taskmesh_rpc::trace::format(g.trace_id),
                shard = g.shard,
                task_id = %g.task_id,
                "forwarded read"
            );
        }
        // A sampled request's read gets its own span here (the stream outlives any request).
        let span = (!g.traceparent.is_empty())
            .then(|| {
                taskmesh_telemetry::Span::start_under(
                    taskmesh_telemetry::SpanKind::Server,
                    Some(&g.traceparent),
                    || {
                        use taskmesh_telemetry::KeyValue;
                        (
                            "taskmesh.v1.TaskService/ReadTasks",
                            vec![
                                KeyValue::new("taskmesh.shard", i64::from(g.shard)),
                                KeyValue::new("taskmesh.task_id", g.task_id.clone()),
                            ],
                        )
                    },
                )
            })
            .flatten();
        let read = host.get(g.shard, &g.task_id, &g.owner);
        async move {
            let read = read.await;
            drop(span);
            read
        }
    });
    futures::future::join_all(reads)
        .await
        .into_iter()
        .map(|r| v1::GetTaskResult {
            outcome: Some(match r {
                Ok(task) => v1::get_task_result::Outcome::Task(view_to_pb(task)),
                Err(e) => v1::get_task_result::Outcome::Error(error_to_pb(&e, |id| book(id))),
            }),
        })
        .collect()
}

/// Whether `text` is one JSON object (checked without building a value).
fn is_json_object(text: &str) -> bool {
    text.trim_start().starts_with('{')
        && serde_json::from_str::<&serde_json::value::RawValue>(text).is_ok()
}

type EventStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl TaskService for TaskGrpc {
    async fn create_task(
        &self,
        request: Request<v1::CreateTaskRequest>,
    ) -> Result<Response<v1::CreateTaskResponse>, Status> {
        let r = request.into_inner();
        tracing::debug!(shard = r.shard, task_id = %r.task_id, "create task");
        let Some(tool) = r.request.map(request_from_pb) else {
            return Err(Status::invalid_argument("request is required"));
        };
        // The gateway that accepted the call validated the arguments; a peer's text is only
        // checked to be a JSON object (no value is built from it).
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
        let progress_token = match &tool.progress_token_json {
            None => None,
            Some(t) => Some(
                serde_json::from_str(t)
                    .map_err(|e| Status::invalid_argument(format!("progress_token_json: {e}")))?,
            ),
        };
        let new = NewTask {
            task_id: r.task_id,
            owner: r.owner,
            session: r.session,
            tool: tool.tool,
            arguments_json: tool.arguments_json,
            progress_token,
            ttl_ms: r.requested_ttl_ms,
            client: tool.client,
            answers_json: tool.answers_json,
            // The span serving this call, under the gateway's: the task's executions follow it.
            traceparent: taskmesh_telemetry::current_traceparent().or(tool
                .traceparent
                .filter(|t| taskmesh_telemetry::parse(t).is_some())),
        };
        let created = self
            .host
            .create(r.shard, new)
            .await
            .map_err(|e| self.err(&e))?;
        Ok(Response::new(v1::CreateTaskResponse {
            task: Some(view_to_pb(created.task)),
            created: created.fresh,
        }))
    }

    type ReadTasksStream = EventStream<v1::ReadTasksResponse>;

    async fn read_tasks(
        &self,
        request: Request<tonic::Streaming<v1::ReadTasksRequest>>,
    ) -> Result<Response<Self::ReadTasksStream>, Status> {
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(READ_STREAM_BUFFER);
        let host = self.host.clone();
        let book = self.book.clone();
        tokio::spawn(async move {
            // Batches in progress, answered in the order they complete.
            let mut reading = futures::stream::FuturesUnordered::new();
            let mut open = true;
            loop {
                tokio::select! {
                    m = inbound.message(), if open => match m {
                        Ok(Some(m)) => {
                            if let Err(status) = check_batch(m.gets.len()) {
                                let _ = tx.send(Err(status)).await;
                                return;
                            }
                            let (host, book) = (host.clone(), book.clone());
                            reading.push(async move {
                                let results = answer_reads(&host, &book, &m.gets).await;
                                v1::ReadTasksResponse { batch: m.batch, results }
                            });
                        }
                        // The caller closed its side (or went away): finish what was asked.
                        Ok(None) | Err(_) => open = false,
                    },
                    Some(answer) = futures::StreamExt::next(&mut reading), if !reading.is_empty() => {
                        if tx.send(Ok(answer)).await.is_err() {
                            return;
                        }
                    }
                    else => return,
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn list_tasks(
        &self,
        request: Request<v1::ListTasksRequest>,
    ) -> Result<Response<v1::ListTasksResponse>, Status> {
        let r = request.into_inner();
        let limit = (r.limit as usize).clamp(1, MAX_LIST_PAGE);
        let mut tasks = self
            .host
            .list(r.shard, &r.owner, r.after_task_id.as_deref(), limit + 1)
            .await
            .map_err(|e| self.err(&e))?;
        let more = tasks.len() > limit;
        tasks.truncate(limit);
        Ok(Response::new(v1::ListTasksResponse {
            tasks: tasks.into_iter().map(view_to_pb).collect(),
            more,
        }))
    }

    async fn cancel_task(
        &self,
        request: Request<v1::CancelTaskRequest>,
    ) -> Result<Response<v1::CancelTaskResponse>, Status> {
        let r = request.into_inner();
        tracing::debug!(shard = r.shard, task_id = %r.task_id, "cancel task");
        let task = self
            .host
            .cancel(r.shard, &r.task_id, &r.owner)
            .await
            .map_err(|e| self.err(&e))?;
        Ok(Response::new(v1::CancelTaskResponse {
            task: Some(view_to_pb(task)),
        }))
    }

    type AttachResultStream = EventStream<v1::AttachResultEvent>;

    async fn attach_result(
        &self,
        request: Request<v1::AttachResultRequest>,
    ) -> Result<Response<Self::AttachResultStream>, Status> {
        use v1::attach_result_event::Event;
        let r = request.into_inner();
        tracing::debug!(shard = r.shard, task_id = %r.task_id, "attach result");
        let attachment = self
            .host
            .attach(r.shard, &r.task_id, &r.owner)
            .await
            .map_err(|e| self.err(&e))?;
        let (tx, rx) = mpsc::channel(ATTACH_STREAM_BUFFER);
        match attachment {
            Attachment::Terminal(record) => {
                let _ = tx
                    .send(Ok(v1::AttachResultEvent {
                        event: Some(Event::Terminal(record_to_pb(record))),
                        at_unix_us: 0,
                    }))
                    .await;
            }
            Attachment::Live {
                task: current,
                mut messages,
                mut done,
            } => {
                tokio::spawn(async move {
                    let send = |e: Event, at_unix_us: u64| {
                        let tx = tx.clone();
                        async move {
                            tx.send(Ok(v1::AttachResultEvent {
                                event: Some(e),
                                at_unix_us,
                            }))
                            .await
                            .is_ok()
                        }
                    };
                    if !send(Event::Current(view_to_pb(current)), 0).await {
                        return;
                    }
                    let mut open = true;
                    loop {
                        tokio::select! {
                            m = messages.recv(), if open => match m {
                                Some(m) => {
                                    if !send(Event::MessageJson(m.json.to_vec()), m.at_us).await {
                                        return;
                                    }
                                }
                                None => open = false,
                            },
                            d = &mut done => {
                                match d {
                                    Ok(ended) => {
                                        let _ = send(Event::Terminal(record_to_pb(ended.record)), ended.at_us).await;
                                    }
                                    Err(_) => {
                                        // Expired or the shard moved: the caller attaches again.
                                        let _ = tx.send(Err(Status::unavailable("attachment ended; attach again"))).await;
                                    }
                                }
                                return;
                            }
                            _ = tx.closed() => return,
                        }
                    }
                });
            }
        }
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    type WatchStatusStream = EventStream<v1::WatchStatusEvent>;

    async fn watch_status(
        &self,
        request: Request<v1::WatchStatusRequest>,
    ) -> Result<Response<Self::WatchStatusStream>, Status> {
        use v1::watch_status_event::Event;
        let r = request.into_inner();
        let sessions: std::collections::HashSet<String> = r.sessions.into_iter().collect();
        let all = r.all_sessions;
        let wanted = move |s: &str| all || sessions.contains(s);
        let mut events = self.host.subscribe();
        let (tx, rx) = mpsc::channel(WATCH_STREAM_BUFFER);
        tokio::spawn(async move {
            loop {
                let ev = match events.recv().await {
                    Ok(ev) => ev,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(_) => return,
                };
                let (out, at_unix_us) = match ev {
                    // A task without a session (protocol 2026-07-28) is watched by
                    // `subscriptions/listen` streams anywhere: reported to a watch of all.
                    HostEvent::Status { task, at_us } => match &task.session {
                        Some(s) if wanted(s) => (Event::Status(view_to_pb(task)), at_us),
                        None if all => (Event::Status(view_to_pb(task)), at_us),
                        _ => continue,
                    },
                    HostEvent::SessionMessage {
                        session,
                        task_id,
                        request_id,
                        json,
                        at_us,
                    } if wanted(&session) => (
                        Event::Message(v1::SessionMessage {
                            session,
                            task_id,
                            message_json: json.to_vec(),
                            request_id: request_id.unwrap_or_default(),
                        }),
                        at_us,
                    ),
                    HostEvent::SessionMessage { .. } => continue,
                };
                if tx
                    .send(Ok(v1::WatchStatusEvent {
                        event: Some(out),
                        at_unix_us,
                    }))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn deliver_response(
        &self,
        request: Request<v1::DeliverResponseRequest>,
    ) -> Result<Response<v1::DeliverResponseResponse>, Status> {
        let r = request.into_inner();
        tracing::debug!(shard = r.shard, task_id = %r.task_id, "deliver response");
        let Ok(Message::Response { id, outcome }) = jsonrpc::parse_message(&r.response_json) else {
            return Err(Status::invalid_argument(
                "response_json is not a JSON-RPC response",
            ));
        };
        let delivered =
            self.host
                .deliver_response(r.shard, &r.task_id, &r.owner, id.to_string(), outcome);
        Ok(Response::new(v1::DeliverResponseResponse { delivered }))
    }

    async fn claim_message(
        &self,
        request: Request<v1::ClaimMessageRequest>,
    ) -> Result<Response<v1::ClaimMessageResponse>, Status> {
        let r = request.into_inner();
        tracing::debug!(shard = r.shard, task_id = %r.task_id, request_id = %r.request_id, "claim message");
        let claimed = self.host.claim(&r.task_id, r.request_id, r.release).await;
        Ok(Response::new(v1::ClaimMessageResponse { claimed }))
    }

    async fn pending_requests(
        &self,
        request: Request<v1::PendingRequestsRequest>,
    ) -> Result<Response<v1::PendingRequestsResponse>, Status> {
        let r = request.into_inner();
        let pending = self
            .host
            .pending_requests(r.shard, &r.task_id, &r.owner)
            .await
            .map_err(|e| self.err(&e))?;
        Ok(Response::new(v1::PendingRequestsResponse {
            requests_json: pending.iter().map(|j| j.to_vec()).collect(),
        }))
    }

    async fn shard_members(
        &self,
        request: Request<v1::ShardMembersRequest>,
    ) -> Result<Response<v1::ShardMembersResponse>, Status> {
        let shard = request.into_inner().shard;
        let (voters, learners) = self.host.members(shard).map_err(|e| self.err(&e))?;
        Ok(Response::new(v1::ShardMembersResponse { voters, learners }))
    }

    async fn export_tasks(
        &self,
        request: Request<v1::ExportTasksRequest>,
    ) -> Result<Response<v1::ExportTasksResponse>, Status> {
        let r = request.into_inner();
        let after = export_cursor(&r)?;
        let page = self
            .host
            .export_page(r.shard, after, export_max(r.max_records))
            .await
            .map_err(|e| self.err(&e))?;
        Ok(Response::new(export_response(page)))
    }

    async fn import_tasks(
        &self,
        request: Request<v1::ImportTasksRequest>,
    ) -> Result<Response<v1::ImportTasksResponse>, Status> {
        let r = request.into_inner();
        let records = import_records(r.records)?;
        let inserted = self
            .host
            .import(r.shard, records)
            .await
            .map_err(|e| self.err(&e))?;
        Ok(Response::new(v1::ImportTasksResponse { inserted }))
    }
}

/// The cursor of an `ExportTasks` request: `None` for the first page (both parts empty).
pub fn export_cursor(r: &v1::ExportTasksRequest) -> Result<Option<(&str, &str)>, Status> {
    match (r.after_owner.is_empty(), r.after_task_id.is_empty()) {
        (true, true) => Ok(None),
        (false, false) => Ok(Some((r.after_owner.as_str(), r.after_task_id.as_str()))),
        _ => Err(Status::invalid_argument(
            "after_owner and after_task_id are given together or not at all",
        )),
    }
}

/// The answer to an `ExportTasks` request: a page and whether it is the last.
pub fn export_response((records, done): (Vec<TaskRecord>, bool)) -> v1::ExportTasksResponse {
    v1::ExportTasksResponse {
        records: records.into_iter().map(record_to_pb).collect(),
        done,
    }
}

/// The page size an `ExportTasks` request asks for (0: the most).
pub fn export_max(max_records: u32) -> usize {
    match max_records {
        0 => taskmesh_host::backup::MAX_PAGE_RECORDS,
        n => n as usize,
    }
}

/// The records of an `ImportTasks` request; a malformed one refuses the whole request.
pub fn import_records(records: Vec<v1::TaskRecord>) -> Result<Vec<TaskRecord>, Status> {
    records
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            record_from_pb(p)
                .ok_or_else(|| Status::invalid_argument(format!("record {i} is malformed")))
        })
        .collect()
}
