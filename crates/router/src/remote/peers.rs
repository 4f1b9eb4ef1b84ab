//! The peers: one lazily connected `TaskService` channel per other node, and the calls the
//! router makes on it for a shard that node leads.
//!
//! A task operation is one unary `Apply` request on the node's channel, an attachment one
//! server-streaming `AttachResult`; `get` joins the node's queue of forwarded reads (see
//! `reads`).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use parking_lot::RwLock;
use taskmesh_host::{Answer, Attachment, Ended, HostError, Op, Stamped, TaskRead};
use taskmesh_rpc::dial::Dialer;
use taskmesh_rpc::trace;
use taskmesh_rpc::v1::{self, task_service_client::TaskServiceClient};
use taskmesh_task::TaskView;
use tokio::sync::{mpsc, oneshot};
use tonic::transport::Channel;

use super::reads::{send_gets, GetBatching, PeerReads, MAX_GET_BATCH};
use crate::convert::ops::{answer_from_pb, op_to_pb, record_of, view_of};
use crate::convert::{error_from_status, record_from_pb};
use crate::traced::OPERATION_KEY;

/// Messages of a remote result attachment (elicitations, progress) that may wait for the
/// local session to take them, as the host's own `attach_buffer` does for a local one.
const ATTACH_BUFFER: usize = 64;

/// A peer's gRPC address that is not one (`host:port`).
#[derive(Debug, thiserror::Error)]
#[error("the gRPC address {addr:?} of node {id} is not usable")]
pub struct PeerAddressError {
    /// The node the address was given for.
    pub id: u64,
    /// The address as it was given.
    pub addr: String,
    /// Why the address cannot be dialled.
    #[source]
    pub source: taskmesh_rpc::dial::DialError,
}

/// How one other node is reached: its address, its task service, and the channel under it.
struct Peer {
    addr: String,
    client: TaskServiceClient<Channel>,
    channel: Channel,
}

/// The other nodes of the cluster, by node id. Nodes can be added (or re-addressed) and
/// removed while requests run.
pub struct Peers {
    dialer: Dialer,
    clients: RwLock<HashMap<u64, Peer>>,
    request_timeout: Duration,
    batching: GetBatching,
    gets: parking_lot::Mutex<HashMap<u64, Arc<PeerReads>>>,
}

impl Peers {
    /// `addrs`: node id -> gRPC address (`host:port`), this node included or not, over plain
    /// TCP (see [`Peers::with_dialer`]).
    pub fn new(
        addrs: HashMap<u64, String>,
        request_timeout: Duration,
    ) -> Result<Self, PeerAddressError> {
        Self::with_dialer(addrs, request_timeout, Dialer::plaintext())
    }

    /// `addrs`: node id -> gRPC address (`host:port`), this node included or not, reached
    /// through `dialer` (mutual TLS or plain TCP).
    pub fn with_dialer(
        addrs: HashMap<u64, String>,
        request_timeout: Duration,
        dialer: Dialer,
    ) -> Result<Self, PeerAddressError> {
        let peers = Self {
            dialer,
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
        if let Some(known) = self.clients.read().get(&id) {
            if known.addr == addr {
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
        let channel = self.dialer.connect_lazy(&ep);
        let client = TaskServiceClient::new(channel.clone());
        let new = self
            .clients
            .write()
            .insert(
                id,
                Peer {
                    addr,
                    client,
                    channel,
                },
            )
            .is_none();
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

    /// The ids of the nodes that have an address here, in ascending order.
    pub fn ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.clients.read().keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    pub(super) fn client(&self, id: u64) -> Result<TaskServiceClient<Channel>, HostError> {
        self.clients
            .read()
            .get(&id)
            .map(|p| p.client.clone())
            .ok_or_else(|| HostError::Unavailable(format!("unknown node {id}")))
    }

    /// The channel to node `id`, for the other services a node serves (the gateway's stream
    /// service); `None` for a node without an address here.
    pub fn channel(&self, id: u64) -> Option<Channel> {
        self.clients.read().get(&id).map(|p| p.channel.clone())
    }

    /// One request to node `id` about `shard`: `rpc` is the client method to call. The
    /// request carries the current trace id, and a failure comes back as the [`HostError`]
    /// the node answered with (see [`error_from_status`]).
    async fn call<Req, Resp, F, Fut>(
        &self,
        id: u64,
        shard: u32,
        req: Req,
        rpc: F,
    ) -> Result<Resp, HostError>
    where
        F: FnOnce(TaskServiceClient<Channel>, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    {
        rpc(self.client(id)?, trace::request(req))
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| error_from_status(shard, &s))
    }
}

impl Peers {
    /// Send node `id` this node's worker digest.
    pub async fn exchange_workers(&self, id: u64, d: v1::WorkerDigest) -> Result<(), HostError> {
        self.call(
            id,
            0,
            d,
            |mut c, r| async move { c.exchange_workers(r).await },
        )
        .await
        .map(|_| ())
    }

    /// Lease tasks queued on node `id` (see `TaskService.TakeWork`).
    pub async fn take_work(
        &self,
        id: u64,
        req: v1::TakeWorkRequest,
    ) -> Result<Vec<v1::TaskLease>, HostError> {
        self.call(id, 0, req, |mut c, r| async move { c.take_work(r).await })
            .await
            .map(|r| r.leases)
    }

    /// Apply `op` on node `id`, the leader of `shard`: one `Apply` call. The node's error
    /// comes back as the matching [`HostError`]; an unknown node is
    /// [`HostError::Unavailable`].
    pub async fn apply(&self, id: u64, shard: u32, op: &Op) -> Result<Answer, HostError> {
        let req = op_to_pb(shard, op);
        let r = self
            .call(id, shard, req, |mut c, mut r| async move {
                // Named for the leader's span of the call (see `Traced`).
                r.metadata_mut().insert(
                    OPERATION_KEY,
                    tonic::metadata::MetadataValue::from_static(op.name()),
                );
                c.apply(r).await
            })
            .await?;
        answer_from_pb(r)
    }

    /// Read a task on node `id` (its view). Reads that wait for the same node at the same time
    /// go out together as one batch on the node's `ReadTasks` stream (see [`GetBatching`]);
    /// each gets its own answer.
    pub async fn get(
        &self,
        id: u64,
        shard: u32,
        task_id: &str,
        owner: &str,
    ) -> Result<TaskView, HostError> {
        self.read(id, shard, task_id, owner, false)
            .await
            .map(TaskRead::into_view)
    }

    /// Read a task on node `id`, with `detail` as [`Host::read`](taskmesh_host::Host::read)
    /// says, batched as [`Peers::get`].
    pub async fn read(
        &self,
        id: u64,
        shard: u32,
        task_id: &str,
        owner: &str,
        detail: bool,
    ) -> Result<TaskRead, HostError> {
        let reads = {
            let mut gets = self.gets.lock();
            match gets.get(&id) {
                Some(r) => r.clone(),
                None => {
                    let r = Arc::new(PeerReads {
                        client: self.client(id)?,
                        queue: Default::default(),
                        stream: Default::default(),
                        batch_size: taskmesh_metrics::metrics::histogram!(
                            taskmesh_metrics::names::READ_BATCH,
                            "node" => id.to_string()
                        ),
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
            trace_id: trace::current().unwrap_or(0),
            traceparent: taskmesh_telemetry::current_traceparent().unwrap_or_default(),
            detail,
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
            .call(id, shard, req, |mut c, r| async move {
                c.attach_result(r).await
            })
            .await?;
        let first = match stream.next().await {
            Some(Ok(ev)) => ev.event,
            Some(Err(s)) => return Err(error_from_status(shard, &s)),
            None => return Err(HostError::Unavailable("attachment closed".into())),
        };
        let task = match first {
            Some(Event::Terminal(r)) => {
                return Ok(Attachment::Terminal(Box::new(record_of(Some(r))?)))
            }
            Some(Event::Current(v)) => view_of(Some(v))?,
            _ => {
                return Err(HostError::Internal(
                    "unexpected first attachment event".into(),
                ))
            }
        };
        let (msg_tx, messages) = mpsc::channel(ATTACH_BUFFER);
        let (done_tx, done) = oneshot::channel();
        tokio::spawn(async move {
            while let Some(item) = stream.next().await {
                match item.map(|e| (e.event, e.at_unix_us)) {
                    Ok((Some(Event::MessageJson(m)), at_us)) => {
                        let m = Stamped {
                            json: Arc::new(m),
                            at_us,
                        };
                        if msg_tx.send(m).await.is_err() {
                            return;
                        }
                    }
                    Ok((Some(Event::Terminal(r)), at_us)) => {
                        if let Some(record) = record_from_pb(r) {
                            let _ = done_tx.send(Ended { record, at_us });
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
}
