//! The `taskmesh.v1.ClusterService` server: other nodes and `taskmesh cluster` commands
//! propose metadata changes and read the metadata through it; the operator's commands also
//! read the shards' leaders, move a leadership and build snapshots through it, and back up and
//! restore task records through it (each page through the router, on the shard's leader).

use std::sync::Arc;
use std::time::Duration;

use taskmesh_host::Host;

use taskmesh_meta::{MetaApplied, MetaCommand};
use taskmesh_rpc::v1;
use taskmesh_shard::ShardError;
use tonic::{Request, Response, Status};

use super::Membership;

/// The `taskmesh.v1.ClusterService` server.
pub struct ClusterGrpc {
    membership: Arc<Membership>,
    host: Host,
    router: taskmesh_router::Router,
}

/// How long `MoveLeader` waits for the leadership to arrive at its target.
const MOVE_LEADER_WAIT: Duration = Duration::from_secs(5);

impl ClusterGrpc {
    /// The service answering for this node's `membership` and the replicas of `host`.
    pub fn new(membership: Arc<Membership>, host: Host, router: taskmesh_router::Router) -> Self {
        Self {
            membership,
            host,
            router,
        }
    }

    fn host_error(&self, e: &taskmesh_host::HostError) -> Status {
        taskmesh_router::convert::error_to_status(e, |id| self.membership.address(id))
    }

    /// This node's replica of `shard`, or NOT_FOUND.
    fn replica(&self, shard: u32) -> Result<taskmesh_shard::ShardReplica, Status> {
        self.host.replica(shard).ok_or_else(|| {
            Status::not_found(format!(
                "node {} hosts no replica of shard {shard}",
                self.membership.node_id
            ))
        })
    }

    /// The tonic server to mount on the node's gRPC listener.
    pub fn into_server(self) -> v1::cluster_service_server::ClusterServiceServer<Self> {
        v1::cluster_service_server::ClusterServiceServer::new(self)
    }
}

#[tonic::async_trait]
impl v1::cluster_service_server::ClusterService for ClusterGrpc {
    async fn propose_change(
        &self,
        request: Request<v1::ProposeChangeRequest>,
    ) -> Result<Response<v1::ProposeChangeResponse>, Status> {
        let change: MetaCommand = serde_json::from_str(&request.into_inner().change_json)
            .map_err(|e| Status::invalid_argument(format!("change_json: {e}")))?;
        let m = &self.membership;
        if !m.meta.is_leader() {
            let leader = m.meta.leadership().borrow().leader;
            let hint = leader.map(|id| v1::LeaderHint {
                node_id: id,
                address: m.address(id).unwrap_or_default(),
            });
            return Err(v1::TaskError::not_leader(hint, "not the metadata leader").into_status());
        }
        match m.meta.propose(change).await {
            Ok(MetaApplied {
                result: Ok(meta),
                changed,
            }) => Ok(Response::new(v1::ProposeChangeResponse {
                metadata_json: serde_json::to_string(&meta)
                    .map_err(|e| Status::internal(e.to_string()))?,
                changed,
            })),
            Ok(MetaApplied { result: Err(r), .. }) => {
                let details = serde_json::to_vec(&r).unwrap_or_default();
                Err(Status::with_details(
                    tonic::Code::FailedPrecondition,
                    r.to_string(),
                    details.into(),
                ))
            }
            Err(ShardError::NotLeader { leader_hint }) => Err(v1::TaskError::not_leader(
                leader_hint.map(|id| v1::LeaderHint {
                    node_id: id,
                    address: m.address(id).unwrap_or_default(),
                }),
                "not the metadata leader",
            )
            .into_status()),
            Err(e) if e.retryable() => Err(v1::TaskError::unavailable(e.to_string()).into_status()),
            Err(e) => Err(v1::TaskError::of_kind(
                v1::TaskErrorKind::Internal,
                format!("the metadata group failed: {e}"),
            )
            .into_status()),
        }
    }

    async fn get_metadata(
        &self,
        _request: Request<v1::GetMetadataRequest>,
    ) -> Result<Response<v1::GetMetadataResponse>, Status> {
        let meta = self.membership.current();
        Ok(Response::new(v1::GetMetadataResponse {
            metadata_json: serde_json::to_string(&meta)
                .map_err(|e| Status::internal(e.to_string()))?,
        }))
    }

    async fn shard_leaders(
        &self,
        _request: Request<v1::ShardLeadersRequest>,
    ) -> Result<Response<v1::ShardLeadersResponse>, Status> {
        let shards = self
            .host
            .shard_status()
            .into_iter()
            .map(|s| v1::ShardView {
                shard: s.shard,
                leader: s.leader.unwrap_or(0),
                term: s.term,
                is_leader: s.is_leader,
                applied_index: s.last_applied_index.unwrap_or(0),
                voters: s.voters,
            })
            .collect();
        Ok(Response::new(v1::ShardLeadersResponse {
            node_id: self.membership.node_id,
            shards,
        }))
    }

    async fn move_leader(
        &self,
        request: Request<v1::MoveLeaderRequest>,
    ) -> Result<Response<v1::MoveLeaderResponse>, Status> {
        let v1::MoveLeaderRequest { shard, to_node } = request.into_inner();
        let replica = self.replica(shard)?;
        match replica.transfer_leader(to_node).await {
            Ok(()) => {}
            Err(ShardError::NotLeader { leader_hint }) => {
                let m = &self.membership;
                return Err(v1::TaskError::not_leader(
                    leader_hint.map(|id| v1::LeaderHint {
                        node_id: id,
                        address: m.address(id).unwrap_or_default(),
                    }),
                    format!("not the leader of shard {shard}"),
                )
                .into_status());
            }
            Err(ShardError::Invalid(why)) => return Err(Status::failed_precondition(why)),
            Err(e) => return Err(Status::unavailable(e.to_string())),
        }
        let mut leadership = replica.leadership();
        let _ = tokio::time::timeout(MOVE_LEADER_WAIT, async {
            loop {
                if leadership.borrow_and_update().leader == Some(to_node) {
                    return;
                }
                if leadership.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        let now = leadership.borrow().clone();
        Ok(Response::new(v1::MoveLeaderResponse {
            leader: now.leader.unwrap_or(0),
            term: now.term,
        }))
    }

    async fn export_tasks(
        &self,
        request: Request<v1::ExportTasksRequest>,
    ) -> Result<Response<v1::ExportTasksResponse>, Status> {
        use taskmesh_router::convert::ops::{export_from_pb, exported_to_pb};
        let export = export_from_pb(request.into_inner())?;
        let page = self
            .router
            .run(export)
            .await
            .map_err(|e| self.host_error(&e))?;
        Ok(Response::new(exported_to_pb(page)))
    }

    async fn import_tasks(
        &self,
        request: Request<v1::ImportTasksRequest>,
    ) -> Result<Response<v1::ImportTasksResponse>, Status> {
        let import = taskmesh_router::convert::ops::import_from_pb(request.into_inner())?;
        let inserted = self
            .router
            .run(import)
            .await
            .map_err(|e| self.host_error(&e))?;
        Ok(Response::new(v1::ImportTasksResponse { inserted }))
    }

    async fn build_snapshot(
        &self,
        request: Request<v1::BuildSnapshotRequest>,
    ) -> Result<Response<v1::BuildSnapshotResponse>, Status> {
        let shard = request.into_inner().shard;
        let replica = self.replica(shard)?;
        let covers = replica.last_applied().map_or(0, |l| l.index);
        replica.trigger_snapshot().await.map_err(|e| {
            Status::unavailable(format!("building the snapshot of shard {shard}: {e}"))
        })?;
        let first = replica.log_index_range().ok().and_then(|(first, _)| first);
        Ok(Response::new(v1::BuildSnapshotResponse {
            covers_index: covers,
            first_log_index: first.unwrap_or(0),
            log_empty: first.is_none(),
        }))
    }
}
