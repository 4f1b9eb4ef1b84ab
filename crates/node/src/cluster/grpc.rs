//! The `taskmesh.v1.ClusterService` server: other nodes and `taskmesh cluster` commands
//! propose metadata changes and read the metadata through it.

use std::sync::Arc;

use taskmesh_meta::{MetaApplied, MetaCommand};
use taskmesh_rpc::v1;
use taskmesh_shard::ShardError;
use tonic::{Request, Response, Status};

use super::Membership;

/// The `taskmesh.v1.ClusterService` server.
pub struct ClusterGrpc {
    membership: Arc<Membership>,
}

impl ClusterGrpc {
    /// The service answering for this node's `membership`.
    pub fn new(membership: Arc<Membership>) -> Self {
        Self { membership }
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
}
