//! The client half of the router: `taskmesh.v1.TaskService` calls to the node that leads a
//! shard. One lazily connected channel per peer, shared by every request to it; forwarded polls
//! travel in batches on one long-lived `ReadTasks` stream per peer.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use parking_lot::RwLock;
use serde_json::Value;
use taskmesh_host::{Attachment, Created, HostError, HostEvent, NewTask};
use taskmesh_mcp::jsonrpc::{self, ErrorObject, RequestId};
use taskmesh_rpc::v1::{self, task_service_client::TaskServiceClient};
use taskmesh_task::{TaskRecord, TaskView};
use tokio::sync::{broadcast, mpsc, oneshot};
use tonic::transport::Channel;

use crate::convert::{error_from_pb, error_from_status, record_from_pb, view_from_pb};

/// The most reads one `ReadTasks` batch may carry (the server refuses more).
pub const MAX_GET_BATCH: usize = 4096;

/// How forwarded polls are coalesced: reads waiting for the same node go out together as one
/// batch of at most `max_items` on the node's `ReadTasks` stream, with at most `in_flight`
/// batches to one node under way at once.
#[derive(Debug, Clone, Copy)]
pub struct GetBatching {
    pub max_items: usize,
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

type GetWaiter = (
    v1::GetTaskRequest,
    oneshot::Sender<Result<TaskView, HostError>>,
);

/// The reads waiting for one node, and how many batches to it are under way.
#[derive(Default)]
struct GetQueue {
    waiting: Vec<GetWaiter>,
    calls: usize,
}

/// Forwarded reads to one node: those waiting, and the `ReadTasks` stream they travel on
/// (opened through `client`, the node's channel when this was created; a re-addressed node
/// gets a new `PeerReads`).
struct PeerReads {
    client: TaskServiceClient<Channel>,
    queue: parking_lot::Mutex<GetQueue>,
    stream: tokio::sync::Mutex<Option<Arc<ReadStream>>>,
}

type BatchAnswer = Result<Vec<v1::GetTaskResult>, tonic::Status>;
/// The batches sent on a stream and not answered yet; `None` once the stream has ended.
type Unanswered = Arc<parking_lot::Mutex<Option<HashMap<u64, oneshot::Sender<BatchAnswer>>>>>;

/// Requests queued for a `ReadTasks` stream before the sender waits.
const READ_STREAM_QUEUE: usize = 16;

/// One open `ReadTasks` stream to a peer. Dropping it closes the caller's side; the peer then
/// answers what it was sent and ends the stream.
struct ReadStream {
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

/// A peer's gRPC address that is not one (`host:port`).
#[derive(Debug, thiserror::Error)]
#[error("the gRPC address {addr:?} of node {id} is not usable")]
pub struct PeerAddressError {
    pub id: u64,
    pub addr: String,
    #[source]
    pub source: taskmesh_rpc::dial::DialError,
}

/// The other nodes of the cluster, by node id. Nodes can be added (or re-addressed) and
/// removed while requests run.
pub struct Peers {
    clients: RwLock<HashMap<u64, (String, TaskServiceClient<Channel>)>>,
    request_timeout: Duration,
    batching: GetBatching,
    gets: parking_lot::Mutex<HashMap<u64, Arc<PeerReads>>>,
}

impl Peers {
    /// `addrs`: node id -> gRPC address (`host:port`), this node included or not.
    pub fn new(
        addrs: HashMap<u64, String>,
        request_timeout: Duration,
    ) -> Result<Self, PeerAddressError> {
        let peers = Self {
            clients: RwLock::new(HashMap::new()),
            request_timeout,
            batching: GetBatching::default(),
            gets: parking_lot::Mutex::new(HashMap::new()),
        };
        for (id, addr) in addrs {
            peers.set(id, addr)?;
        }
        Ok(peers)
    }

    /// Reach node `id` at `addr` from now on. Returns whether the node is new.
    pub fn set(&self, id: u64, addr: String) -> Result<bool, PeerAddressError> {
        if let Some((known, _)) = self.clients.read().get(&id) {
            if *known == addr {
                return Ok(false);
            }
        }
        let ep = taskmesh_rpc::dial::endpoint(&addr)
            .map_err(|source| PeerAddressError {
                id,
                addr: addr.clone(),
                source,
            })?
            .timeout(self.request_timeout);
        let client = TaskServiceClient::new(ep.connect_lazy());
        let new = self.clients.write().insert(id, (addr, client)).is_none();
        // Reads queued from now on go out through the new channel (calls under way finish on
        // the old one).
        self.gets.lock().remove(&id);
        Ok(new)
    }

    /// Coalesce forwarded reads as `b` says (at least one read per call and one call at once).
    pub fn with_get_batching(mut self, b: GetBatching) -> Self {
        self.batching = GetBatching {
            max_items: b.max_items.clamp(1, MAX_GET_BATCH),
            in_flight: b.in_flight.max(1),
        };
        self
    }

    /// Forget node `id` (it left the cluster).
    pub fn remove(&self, id: u64) {
        self.clients.write().remove(&id);
        self.gets.lock().remove(&id);
    }

    pub fn ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.clients.read().keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    fn client(&self, id: u64) -> Result<TaskServiceClient<Channel>, HostError> {
        self.clients
            .read()
            .get(&id)
            .map(|(_, c)| c.clone())
            .ok_or_else(|| HostError::Unavailable(format!("unknown node {id}")))
    }
}

fn record_of(r: Option<v1::TaskRecord>) -> Result<TaskRecord, HostError> {
    r.and_then(record_from_pb)
        .ok_or_else(|| HostError::Internal("malformed task record from a peer".into()))
}

fn view_of(v: Option<v1::TaskView>) -> Result<TaskView, HostError> {
    v.and_then(view_from_pb)
        .ok_or_else(|| HostError::Internal("malformed task from a peer".into()))
}

/// Send the reads waiting for a node in batches on its `ReadTasks` stream until none waits.
async fn send_gets(reads: Arc<PeerReads>, max_items: usize, timeout: Duration) {
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
        let (gets, waiters): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
        let shards: Vec<u32> = gets.iter().map(|g| g.shard).collect();
        match reads.read(gets, timeout).await {
            Ok(results) => {
                let mut results = results.into_iter();
                for (tx, shard) in waiters.into_iter().zip(shards) {
                    let answer = match results.next().and_then(|r| r.outcome) {
                        Some(v1::get_task_result::Outcome::Task(t)) => view_of(Some(t)),
                        Some(v1::get_task_result::Outcome::Error(e)) => {
                            Err(error_from_pb(shard, &e))
                        }
                        None => Err(HostError::Internal(
                            "a peer answered fewer reads than it was asked".into(),
                        )),
                    };
                    let _ = tx.send(answer);
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

impl Peers {
    pub async fn create(&self, id: u64, shard: u32, new: &NewTask) -> Result<Created, HostError> {
        let req = v1::CreateTaskRequest {
            shard,
            owner: new.owner.clone(),
            task_id: new.task_id.clone(),
            session: new.session.clone(),
            requested_ttl_ms: new.ttl_ms,
            request: Some(v1::ToolRequest {
                tool: new.tool.clone(),
                arguments_json: new.arguments_json.clone(),
                progress_token_json: new.progress_token.as_ref().map(|t| t.to_string()),
                client: Some(v1::ClientCaps {
                    elicitation: new.client.elicitation,
                    sampling: new.client.sampling,
                }),
            }),
        };
        let r = self
            .client(id)?
            .create_task(req)
            .await
            .map_err(|s| error_from_status(shard, &s))?
            .into_inner();
        Ok(Created {
            task: view_of(r.task)?,
            fresh: r.created,
        })
    }

    /// Read a task on node `id`. Reads that wait for the same node at the same time go out
    /// together as one batch on the node's `ReadTasks` stream (see [`GetBatching`]); each gets
    /// its own answer.
    pub async fn get(
        &self,
        id: u64,
        shard: u32,
        task_id: &str,
        owner: &str,
    ) -> Result<TaskView, HostError> {
        let reads = {
            let mut gets = self.gets.lock();
            match gets.get(&id) {
                Some(r) => r.clone(),
                None => {
                    let r = Arc::new(PeerReads {
                        client: self.client(id)?,
                        queue: Default::default(),
                        stream: Default::default(),
                    });
                    gets.insert(id, r.clone());
                    r
                }
            }
        };
        let req = v1::GetTaskRequest {
            shard,
            owner: owner.into(),
            task_id: task_id.into(),
        };
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut q = reads.queue.lock();
            q.waiting.push((req, tx));
            if q.calls < self.batching.in_flight {
                q.calls += 1;
                true
            } else {
                false
            }
        };
        if start {
            tokio::spawn(send_gets(
                reads,
                self.batching.max_items,
                self.request_timeout,
            ));
        }
        rx.await
            .unwrap_or_else(|_| Err(HostError::Unavailable("the read was dropped".into())))
    }

    pub async fn cancel(
        &self,
        id: u64,
        shard: u32,
        task_id: &str,
        owner: &str,
    ) -> Result<TaskView, HostError> {
        let req = v1::CancelTaskRequest {
            shard,
            owner: owner.into(),
            task_id: task_id.into(),
        };
        let r = self
            .client(id)?
            .cancel_task(req)
            .await
            .map_err(|s| error_from_status(shard, &s))?;
        view_of(r.into_inner().task)
    }

    pub async fn list(
        &self,
        id: u64,
        shard: u32,
        owner: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TaskView>, HostError> {
        let req = v1::ListTasksRequest {
            shard,
            owner: owner.into(),
            after_task_id: after.map(str::to_string),
            limit: limit.min(u32::MAX as usize) as u32,
        };
        let r = self
            .client(id)?
            .list_tasks(req)
            .await
            .map_err(|s| error_from_status(shard, &s))?;
        r.into_inner()
            .tasks
            .into_iter()
            .map(|t| view_of(Some(t)))
            .collect()
    }

    /// Attach to a task's result on its leader. A live attachment relays the peer's stream;
    /// when that stream breaks (the leader died or moved), `done` closes and the caller attaches
    /// again.
    pub async fn attach(
        &self,
        id: u64,
        shard: u32,
        task_id: &str,
        owner: &str,
    ) -> Result<Attachment, HostError> {
        use v1::attach_result_event::Event;
        let req = v1::AttachResultRequest {
            shard,
            owner: owner.into(),
            task_id: task_id.into(),
        };
        let mut stream = self
            .client(id)?
            .attach_result(req)
            .await
            .map_err(|s| error_from_status(shard, &s))?
            .into_inner();
        let first = match stream.next().await {
            Some(Ok(ev)) => ev.event,
            Some(Err(s)) => return Err(error_from_status(shard, &s)),
            None => return Err(HostError::Unavailable("attachment closed".into())),
        };
        let task = match first {
            Some(Event::Terminal(r)) => return Ok(Attachment::Terminal(record_of(Some(r))?)),
            Some(Event::Current(v)) => view_of(Some(v))?,
            _ => {
                return Err(HostError::Internal(
                    "unexpected first attachment event".into(),
                ))
            }
        };
        let (msg_tx, messages) = mpsc::channel(64);
        let (done_tx, done) = oneshot::channel();
        tokio::spawn(async move {
            while let Some(item) = stream.next().await {
                match item.map(|e| e.event) {
                    Ok(Some(Event::MessageJson(m))) => {
                        if msg_tx.send(Arc::new(m)).await.is_err() {
                            return;
                        }
                    }
                    Ok(Some(Event::Terminal(r))) => {
                        if let Some(r) = record_from_pb(r) {
                            let _ = done_tx.send(r);
                        }
                        return;
                    }
                    _ => return,
                }
            }
        });
        Ok(Attachment::Live {
            task,
            messages,
            done,
        })
    }

    pub async fn deliver_response(
        &self,
        id: u64,
        shard: u32,
        task_id: &str,
        owner: &str,
        request_id: &str,
        outcome: Result<Value, ErrorObject>,
    ) -> Result<bool, HostError> {
        let rid = RequestId::String(request_id.to_string());
        let response_json = match outcome {
            Ok(v) => jsonrpc::response(&rid, &v),
            Err(e) => jsonrpc::error_response(Some(&rid), &e),
        };
        let req = v1::DeliverResponseRequest {
            shard,
            owner: owner.into(),
            task_id: task_id.into(),
            response_json,
        };
        let r = self
            .client(id)?
            .deliver_response(req)
            .await
            .map_err(|s| error_from_status(shard, &s))?;
        Ok(r.into_inner().delivered)
    }
}

impl Peers {
    /// The voters and learners of `shard`'s group, asked of node `id` (its leader).
    pub async fn members(&self, id: u64, shard: u32) -> Result<(Vec<u64>, Vec<u64>), HostError> {
        let r = self
            .client(id)?
            .shard_members(v1::ShardMembersRequest { shard })
            .await
            .map_err(|s| error_from_status(shard, &s))?
            .into_inner();
        Ok((r.voters, r.learners))
    }
}

/// Follow one peer's stream of status changes and session messages (reconnecting while the
/// process runs) and publish them on `out`.
/// Ends when the peer is forgotten ([`Peers::remove`]).
pub(crate) async fn watch(peers: Arc<Peers>, id: u64, out: broadcast::Sender<HostEvent>) {
    use v1::watch_status_event::Event;
    {
        loop {
            let Ok(mut client) = peers.client(id) else {
                return;
            };
            let req = v1::WatchStatusRequest {
                shard: 0,
                owner: String::new(),
                all_sessions: true,
                sessions: vec![],
            };
            if let Ok(resp) = client.watch_status(req).await {
                let mut stream = resp.into_inner();
                while let Some(Ok(ev)) = stream.next().await {
                    let ev = match ev.event {
                        Some(Event::Status(v)) => match view_from_pb(v) {
                            Some(task) => HostEvent::Status { task },
                            None => continue,
                        },
                        Some(Event::Message(m)) => HostEvent::SessionMessage {
                            session: m.session,
                            task_id: m.task_id,
                            json: Arc::new(m.message_json),
                        },
                        None => continue,
                    };
                    let _ = out.send(ev);
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}
