//! The `taskmesh.v1.TaskService` server: what another node's router asks this node, answered
//! by the local [`Host`]. It is the remote half of the router: any task operation arrives in
//! one `Apply` call and goes to [`Host::apply`]; reads come batched on `ReadTasks`, and
//! result attachments and status watches are streams of their own. Errors are carried as
//! `TaskError`s so the caller can follow a `NotLeader` hint.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use taskmesh_host::{Attachment, Host, HostEvent};
use taskmesh_rpc::v1::{self, task_service_server::TaskService};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::convert::ops::{answer_to_pb, op_from_pb};
use crate::convert::{error_to_pb, error_to_status, read_to_pb, record_to_pb, view_to_pb};

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
        let read = host.read(g.shard, &g.task_id, &g.owner, g.detail);
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
                Ok(read) => read_to_pb(read),
                Err(e) => v1::get_task_result::Outcome::Error(error_to_pb(&e, |id| book(id))),
            }),
        })
        .collect()
}

type EventStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl TaskService for TaskGrpc {
    async fn apply(
        &self,
        request: Request<v1::ApplyRequest>,
    ) -> Result<Response<v1::ApplyResponse>, Status> {
        let (shard, op) = op_from_pb(request.into_inner())?;
        tracing::debug!(shard, op = op.name(), "apply");
        let answer = self.host.apply(shard, op).await.map_err(|e| self.err(&e))?;
        Ok(Response::new(answer_to_pb(answer)))
    }

    async fn exchange_workers(
        &self,
        request: Request<v1::WorkerDigest>,
    ) -> Result<Response<v1::WorkerDigestAck>, Status> {
        crate::workers::digest_received(&self.host, request.into_inner());
        Ok(Response::new(v1::WorkerDigestAck {}))
    }

    async fn take_work(
        &self,
        request: Request<v1::TakeWorkRequest>,
    ) -> Result<Response<v1::TakeWorkResponse>, Status> {
        let r = request.into_inner();
        let leases = self
            .host
            .take_work(&r.holder, &r.worker_id, &r.tools, r.max_tasks as usize)
            .await;
        Ok(Response::new(v1::TakeWorkResponse {
            leases: leases
                .into_iter()
                .map(crate::convert::leased_to_pb)
                .collect(),
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
                        event: Some(Event::Terminal(record_to_pb(*record))),
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
                let (out, session, at_unix_us) = match ev {
                    // A task without a session (protocol 2026-07-28) is watched by
                    // `subscriptions/listen` streams anywhere: reported to a watch of all.
                    HostEvent::Status {
                        task,
                        session,
                        at_us,
                    } => match &session {
                        Some(s) if !wanted(s) => continue,
                        None if !all => continue,
                        _ => (Event::Status(view_to_pb(task)), session, at_us),
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
                        None,
                        at_us,
                    ),
                    HostEvent::SessionMessage { .. } => continue,
                };
                if tx
                    .send(Ok(v1::WatchStatusEvent {
                        event: Some(out),
                        at_unix_us,
                        session,
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
}
