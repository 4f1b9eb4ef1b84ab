//! Forwarded reads: polls of tasks whose shard another node leads.
//!
//! [`Peers::get`](super::Peers::get) puts each read on the queue of its node (a `PeerReads`)
//! and, while fewer than `in_flight` batches to that node are under way, starts
//! [`send_gets`], which takes up to `max_items` waiting reads at a time and sends them as one
//! batch on the node's long-lived `ReadTasks` stream ([`ReadStream`]); the answers come back on
//! the same stream, matched to their batch by [`take_answers`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use taskmesh_host::{HostError, TaskRead};
use taskmesh_rpc::v1::{self, task_service_client::TaskServiceClient};
use tokio::sync::{mpsc, oneshot};
use tonic::transport::Channel;

use crate::convert::{error_from_status, read_from_pb};

/// The most reads one `ReadTasks` batch may carry (the server refuses more).
pub const MAX_GET_BATCH: usize = 4096;

/// How forwarded polls are coalesced: reads waiting for the same node go out together as one
/// batch of at most `max_items` on the node's `ReadTasks` stream, with at most `in_flight`
/// batches to one node under way at once.
#[derive(Debug, Clone, Copy)]
pub struct GetBatching {
    /// Most reads in one batch; 128 by default (kept within 1 ..= [`MAX_GET_BATCH`] once set
    /// through [`Peers::with_get_batching`](super::Peers::with_get_batching)).
    pub max_items: usize,
    /// Most batches under way to one node at once; 2 by default (at least 1 once set through
    /// [`Peers::with_get_batching`](super::Peers::with_get_batching)).
    pub in_flight: usize,
}

impl Default for GetBatching {
    fn default() -> Self {
        Self {
            max_items: 128,
            in_flight: 2,
        }
    }
}

pub(super) type GetWaiter = (
    v1::GetTaskRequest,
    oneshot::Sender<Result<TaskRead, HostError>>,
);

/// The reads waiting for one node, and how many batches to it are under way.
#[derive(Default)]
pub(super) struct GetQueue {
    pub(super) waiting: Vec<GetWaiter>,
    pub(super) calls: usize,
}

/// Forwarded reads to one node: those waiting, and the `ReadTasks` stream they travel on
/// (opened through `client`, the node's channel when this was created; a re-addressed node
/// gets a new `PeerReads`).
pub(super) struct PeerReads {
    pub(super) client: TaskServiceClient<Channel>,
    pub(super) queue: parking_lot::Mutex<GetQueue>,
    pub(super) stream: tokio::sync::Mutex<Option<Arc<ReadStream>>>,
    /// Reads per batch sent to this node.
    pub(super) batch_size: taskmesh_metrics::metrics::Histogram,
}

type BatchAnswer = Result<Vec<v1::GetTaskResult>, tonic::Status>;
/// The batches sent on a stream and not answered yet; `None` once the stream has ended.
type Unanswered = Arc<parking_lot::Mutex<Option<HashMap<u64, oneshot::Sender<BatchAnswer>>>>>;

/// Requests queued for a `ReadTasks` stream before the sender waits.
const READ_STREAM_QUEUE: usize = 16;

/// One open `ReadTasks` stream to a peer. Dropping it closes the caller's side; the peer then
/// answers what it was sent and ends the stream.
pub(super) struct ReadStream {
    requests: mpsc::Sender<v1::ReadTasksRequest>,
    next: std::sync::atomic::AtomicU64,
    unanswered: Unanswered,
}

impl ReadStream {
    async fn open(client: &mut TaskServiceClient<Channel>) -> Result<Self, tonic::Status> {
        let (requests, rx) = mpsc::channel(READ_STREAM_QUEUE);
        let answers = client
            .read_tasks(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await?
            .into_inner();
        let unanswered: Unanswered = Arc::new(parking_lot::Mutex::new(Some(HashMap::new())));
        tokio::spawn(take_answers(answers, unanswered.clone()));
        Ok(Self {
            requests,
            next: std::sync::atomic::AtomicU64::new(0),
            unanswered,
        })
    }

    fn ended(&self) -> bool {
        self.unanswered.lock().is_none()
    }

    /// Send one batch and wait, at most `timeout`, for its answer.
    async fn read(&self, gets: Vec<v1::GetTaskRequest>, timeout: Duration) -> BatchAnswer {
        let batch = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        match self.unanswered.lock().as_mut() {
            Some(u) => u.insert(batch, tx),
            None => return Err(stream_ended()),
        };
        let forget = || {
            if let Some(u) = self.unanswered.lock().as_mut() {
                u.remove(&batch);
            }
        };
        // The wait covers sending too: a peer that stops reading fills the stream's window.
        let exchange = async {
            if self
                .requests
                .send(v1::ReadTasksRequest { batch, gets })
                .await
                .is_err()
            {
                return Err(stream_ended());
            }
            rx.await.unwrap_or_else(|_| Err(stream_ended()))
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => {
                forget();
                Err(e)
            }
            Err(_) => {
                forget();
                Err(tonic::Status::deadline_exceeded(
                    "the peer did not answer the reads in time",
                ))
            }
        }
    }
}

fn stream_ended() -> tonic::Status {
    tonic::Status::unavailable("the read stream to the peer ended")
}

/// Hand each answer of a `ReadTasks` stream to its batch; when the stream ends, fail the
/// batches still unanswered with the reason.
async fn take_answers(
    mut answers: tonic::Streaming<v1::ReadTasksResponse>,
    unanswered: Unanswered,
) {
    let end = loop {
        match answers.message().await {
            Ok(Some(a)) => {
                let waiter = unanswered.lock().as_mut().and_then(|u| u.remove(&a.batch));
                if let Some(w) = waiter {
                    let _ = w.send(Ok(a.results));
                }
            }
            Ok(None) => break stream_ended(),
            Err(status) => break status,
        }
    };
    let left = unanswered.lock().take();
    for (_, w) in left.into_iter().flatten() {
        let _ = w.send(Err(end.clone()));
    }
}

impl PeerReads {
    /// Send `gets` on the stream to the peer, opening one when there is none (or it ended).
    async fn read(&self, gets: Vec<v1::GetTaskRequest>, timeout: Duration) -> BatchAnswer {
        let stream = {
            let mut slot = self.stream.lock().await;
            match slot.as_ref() {
                Some(s) if !s.ended() => s.clone(),
                _ => {
                    let s = Arc::new(ReadStream::open(&mut self.client.clone()).await?);
                    *slot = Some(s.clone());
                    s
                }
            }
        };
        // Sending and waiting happen without the lock, so batches overlap on the stream.
        stream.read(gets, timeout).await
    }
}

/// Send the reads waiting for a node in batches on its `ReadTasks` stream until none waits.
pub(super) async fn send_gets(reads: Arc<PeerReads>, max_items: usize, timeout: Duration) {
    loop {
        let batch: Vec<GetWaiter> = {
            let mut q = reads.queue.lock();
            if q.waiting.is_empty() {
                q.calls -= 1;
                return;
            }
            let n = q.waiting.len().min(max_items);
            q.waiting.drain(..n).collect()
        };
        reads.batch_size.record(batch.len() as f64);
        let (gets, waiters): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
        let shards: Vec<u32> = gets.iter().map(|g| g.shard).collect();
        match reads.read(gets, timeout).await {
            Ok(results) => {
                let mut results = results.into_iter();
                for (tx, shard) in waiters.into_iter().zip(shards) {
                    let _ = tx.send(read_from_pb(shard, results.next().and_then(|r| r.outcome)));
                }
            }
            Err(status) => {
                for (tx, shard) in waiters.into_iter().zip(shards) {
                    let _ = tx.send(Err(error_from_status(shard, &status)));
                }
            }
        }
    }
}
