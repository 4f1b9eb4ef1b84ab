//! The receiving side: the `taskmesh.v1.RaftTransport` service of a node.
//!
//! Each call names the group (`shard`) and the node it is meant for (`target`). The service
//! checks that it is that node, finds the group's replica in the [`ReplicaRegistry`],
//! deserialises openraft's request, hands it to the replica's Raft and returns openraft's
//! answer serialised. A call that cannot reach a live group fails with a status (see the proto
//! file): `FAILED_PRECONDITION` for another node, `NOT_FOUND` for a shard not hosted here,
//! `INVALID_ARGUMENT` for an undecodable or inconsistent message, `UNAVAILABLE` when the
//! group's Raft has stopped, `RESOURCE_EXHAUSTED` for a snapshot over the size limit.

use std::future::Future;
use std::time::Duration;

use std::sync::Arc;

use serde::de::DeserializeOwned;
use taskmesh_rpc::v1 as pb;
use taskmesh_rpc::v1::raft_transport_server::{RaftTransport, RaftTransportServer};
use taskmesh_shard::types::{Snapshot, SnapshotMeta, Vote};
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;
use tonic::{Request, Response, Status, Streaming};

use crate::config::TransportConfig;
use crate::error::TransportError;
use crate::registry::{addressed_here, HostedGroup, ReplicaRegistry};

/// The most memory reserved up front for an arriving snapshot; beyond that it grows as the
/// chunks arrive, so a header announcing a huge size costs nothing until the data comes.
const SNAPSHOT_PREALLOC_BYTES: u64 = 64 * 1024 * 1024;

/// How often the server pings an idle peer connection, and how long it waits for the answer.
const KEEPALIVE: Duration = Duration::from_secs(2);

/// The Raft transport service of node `node_id`, delivering to the replicas of a registry.
#[derive(Clone)]
pub struct RaftService {
    node_id: u64,
    registry: ReplicaRegistry,
    cfg: TransportConfig,
}

fn decode<T: DeserializeOwned>(what: &str, payload: &[u8]) -> Result<T, Status> {
    serde_json::from_slice(payload)
        .map_err(|e| Status::invalid_argument(format!("undecodable {what}: {e}")))
}

impl RaftService {
    /// The service of node `node_id`, with the default [`TransportConfig`].
    pub fn new(node_id: u64, registry: ReplicaRegistry) -> Self {
        Self {
            node_id,
            registry,
            cfg: TransportConfig::default(),
        }
    }

    /// Use the limits of `cfg`.
    pub fn with_config(mut self, cfg: TransportConfig) -> Self {
        self.cfg = cfg;
        self
    }

    /// The id of the node this service delivers for, as given to [`RaftService::new`].
    pub fn node_id(&self) -> u64 {
        self.node_id
    }

    /// The service as a tonic service to add to a server, accepting messages up to
    /// [`TransportConfig::max_message_bytes`].
    pub fn into_server(self) -> RaftTransportServer<Self> {
        let max = self.cfg.max_message_bytes;
        RaftTransportServer::new(self).max_decoding_message_size(max)
    }

    /// The replica a call for (`shard`, `target`) goes to.
    fn replica(&self, shard: u32, target: u64) -> Result<Arc<dyn HostedGroup>, Status> {
        addressed_here(self.node_id, target)?;
        self.registry.get(shard).ok_or_else(|| {
            Status::not_found(format!(
                "node {} hosts no replica of shard {shard}",
                self.node_id
            ))
        })
    }

    /// Receive a whole snapshot from the chunk stream and check it against its header.
    async fn receive_snapshot(
        &self,
        stream: &mut Streaming<pb::InstallSnapshotChunk>,
    ) -> Result<(Arc<dyn HostedGroup>, Vote, Snapshot), Status> {
        let Some(mut chunk) = stream.message().await? else {
            return Err(Status::invalid_argument("empty snapshot stream"));
        };
        let (shard, target) = (chunk.shard, chunk.target);
        let replica = self.replica(shard, target)?;
        let Some(header) = chunk.header.take() else {
            return Err(Status::invalid_argument(
                "the first snapshot chunk has no header",
            ));
        };
        let vote: Vote = decode("snapshot vote", &header.vote)?;
        let meta: SnapshotMeta = decode("snapshot meta", &header.meta)?;
        let size = header.size_bytes;
        if size > self.cfg.max_snapshot_bytes {
            return Err(Status::resource_exhausted(format!(
                "a snapshot of {size} bytes exceeds the limit of {} bytes",
                self.cfg.max_snapshot_bytes
            )));
        }
        let prealloc = usize::try_from(size.min(SNAPSHOT_PREALLOC_BYTES)).unwrap_or(0);
        let mut data: Vec<u8> = Vec::with_capacity(prealloc);
        loop {
            if chunk.shard != shard || chunk.target != target {
                return Err(Status::invalid_argument(
                    "snapshot chunks of one stream name different groups or nodes",
                ));
            }
            if chunk.offset != data.len() as u64 {
                return Err(Status::invalid_argument(format!(
                    "snapshot chunk at offset {} where {} was expected",
                    chunk.offset,
                    data.len()
                )));
            }
            if data.len() as u64 + chunk.data.len() as u64 > size {
                return Err(Status::invalid_argument(format!(
                    "snapshot data exceeds its announced {size} bytes"
                )));
            }
            data.extend_from_slice(&chunk.data);
            if chunk.done {
                break;
            }
            chunk = match stream.message().await? {
                Some(next) => next,
                None => {
                    return Err(Status::cancelled(
                        "the snapshot stream ended before its last chunk; discarded",
                    ))
                }
            };
            if chunk.header.is_some() {
                return Err(Status::invalid_argument(
                    "only the first snapshot chunk may carry a header",
                ));
            }
        }
        if data.len() as u64 != size {
            return Err(Status::invalid_argument(format!(
                "received {} bytes of a {size}-byte snapshot",
                data.len()
            )));
        }
        Ok((
            replica,
            vote,
            Snapshot {
                meta,
                snapshot: data,
            },
        ))
    }
}

#[tonic::async_trait]
impl RaftTransport for RaftService {
    async fn append_entries(
        &self,
        request: Request<pb::AppendEntriesRequest>,
    ) -> Result<Response<pb::AppendEntriesResponse>, Status> {
        let req = request.into_inner();
        let group = self.replica(req.shard, req.target)?;
        let payload = group.append_entries(req.payload).await?;
        Ok(Response::new(pb::AppendEntriesResponse { payload }))
    }

    async fn vote(
        &self,
        request: Request<pb::VoteRequest>,
    ) -> Result<Response<pb::VoteResponse>, Status> {
        let req = request.into_inner();
        let group = self.replica(req.shard, req.target)?;
        let payload = group.vote(req.payload, req.pre_vote).await?;
        Ok(Response::new(pb::VoteResponse { payload }))
    }

    async fn install_snapshot(
        &self,
        request: Request<Streaming<pb::InstallSnapshotChunk>>,
    ) -> Result<Response<pb::InstallSnapshotResponse>, Status> {
        let mut stream = request.into_inner();
        let (group, vote, snapshot) = self.receive_snapshot(&mut stream).await?;
        tracing::debug!(
            shard = group.group_id(),
            bytes = snapshot.snapshot.len(),
            last_log_id = ?snapshot.meta.last_log_id,
            "received a snapshot; installing"
        );
        let payload = group.install_snapshot(vote, snapshot).await?;
        Ok(Response::new(pb::InstallSnapshotResponse { payload }))
    }

    async fn append_entries_batch(
        &self,
        request: Request<pb::AppendEntriesBatchRequest>,
    ) -> Result<Response<pb::AppendEntriesBatchResponse>, Status> {
        let req = request.into_inner();
        addressed_here(self.node_id, req.target)?;
        let answers = req.requests.into_iter().map(|r| async move {
            let group = self.replica(r.shard, r.target)?;
            group.append_entries(r.payload).await
        });
        let answers = futures::future::join_all(answers)
            .await
            .into_iter()
            .map(crate::heartbeats::answer)
            .collect();
        Ok(Response::new(pb::AppendEntriesBatchResponse { answers }))
    }

    async fn beat(
        &self,
        request: Request<pb::BeatRequest>,
    ) -> Result<Response<pb::BeatResponse>, Status> {
        let req = request.into_inner();
        crate::beat::receive(self.node_id, &self.registry, &req).map(Response::new)
    }

    async fn transfer_leader(
        &self,
        request: Request<pb::TransferLeaderRequest>,
    ) -> Result<Response<pb::TransferLeaderResponse>, Status> {
        let req = request.into_inner();
        let group = self.replica(req.shard, req.target)?;
        let payload = group.transfer_leader(req.payload).await?;
        Ok(Response::new(pb::TransferLeaderResponse { payload }))
    }
}

/// Serve `service` alone on `listener` until `shutdown` resolves, then stop accepting and give
/// the open connections up to `drain` to finish their calls and close, and return.
///
/// The bound matters: a connection whose peer neither sends nor closes it can hold a graceful
/// shutdown open indefinitely. A connection still open when `drain` is over is abandoned: its
/// calls reach no replica once the node has removed them from the registry, and it ends when its
/// peer closes it or the runtime stops.
///
/// A node that serves other gRPC services on the same port adds
/// [`RaftService::into_server`] to its own server instead.
pub async fn serve(
    listener: tokio::net::TcpListener,
    service: RaftService,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) -> Result<(), TransportError> {
    service.cfg.validate()?;
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    let (signalled_tx, signalled) = tokio::sync::oneshot::channel::<()>();
    let server = Server::builder()
        .http2_keepalive_interval(Some(KEEPALIVE))
        .http2_keepalive_timeout(Some(KEEPALIVE))
        .http2_adaptive_window(Some(true))
        .add_service(service.into_server())
        .serve_with_incoming_shutdown(incoming, async move {
            shutdown.await;
            let _ = signalled_tx.send(());
        });
    tokio::pin!(server);
    tokio::select! {
        done = &mut server => return Ok(done?),
        _ = signalled => {}
    }
    match tokio::time::timeout(drain, server).await {
        Ok(done) => Ok(done?),
        Err(_) => {
            tracing::debug!(
                drain_ms = drain.as_millis() as u64,
                "drain time over; connections left open are abandoned"
            );
            Ok(())
        }
    }
}
