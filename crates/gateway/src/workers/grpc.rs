//! The worker API as the gRPC service `taskmesh.v1.WorkerService`, on the public listener
//! beside `/mcp` (HTTP/2).

use std::sync::Arc;

use taskmesh_host::WorkerError;
use taskmesh_rpc::v1;
use taskmesh_rpc::v1::worker_service_server::{WorkerService, WorkerServiceServer};
use tonic::{Request, Response, Status};

use crate::Gateway;

/// The service, to be served at `/taskmesh.v1.WorkerService/*`.
pub fn service(gw: Arc<Gateway>) -> WorkerServiceServer<Workers> {
    WorkerServiceServer::new(Workers { gw })
}

/// The gRPC face of the worker API.
pub struct Workers {
    gw: Arc<Gateway>,
}

fn status(e: WorkerError) -> Status {
    let message = e.to_string();
    match e {
        WorkerError::Invalid(_) => Status::invalid_argument(message),
        WorkerError::Forbidden(_) => Status::permission_denied(message),
        WorkerError::NotFound(_) => Status::not_found(message),
        WorkerError::Conflict(_) => Status::already_exists(message),
        WorkerError::StaleLease | WorkerError::Ended(_) => Status::failed_precondition(message),
        WorkerError::Exhausted(_) => Status::resource_exhausted(message),
        WorkerError::Unavailable(_) => Status::unavailable(message),
        WorkerError::Unauthenticated(_) => Status::unauthenticated(message),
        WorkerError::Internal(_) => Status::internal(message),
    }
}

impl Workers {
    /// The worker identity of a call, from its `authorization` metadata.
    async fn identity<T>(&self, r: &Request<T>) -> Result<String, Status> {
        let header = r
            .metadata()
            .get("authorization")
            .and_then(|v| axum::http::HeaderValue::from_bytes(v.as_bytes()).ok());
        super::identify(&self.gw, header.as_ref())
            .await
            .map_err(status)
    }
}

#[tonic::async_trait]
impl WorkerService for Workers {
    async fn register(
        &self,
        r: Request<v1::RegisterRequest>,
    ) -> Result<Response<v1::RegisterResponse>, Status> {
        let id = self.identity(&r).await?;
        super::register(&self.gw, &id, r.into_inner())
            .map(Response::new)
            .map_err(status)
    }

    async fn poll(
        &self,
        r: Request<v1::PollRequest>,
    ) -> Result<Response<v1::PollResponse>, Status> {
        let id = self.identity(&r).await?;
        super::poll(&self.gw, &id, r.into_inner())
            .await
            .map(Response::new)
            .map_err(status)
    }

    async fn heartbeat(
        &self,
        r: Request<v1::HeartbeatRequest>,
    ) -> Result<Response<v1::HeartbeatResponse>, Status> {
        let id = self.identity(&r).await?;
        super::heartbeat(&self.gw, &id, r.into_inner())
            .await
            .map(Response::new)
            .map_err(status)
    }

    async fn request_input(
        &self,
        r: Request<v1::RequestInputRequest>,
    ) -> Result<Response<v1::RequestInputResponse>, Status> {
        let id = self.identity(&r).await?;
        super::request_input(&self.gw, &id, r.into_inner())
            .await
            .map(Response::new)
            .map_err(status)
    }

    async fn complete(
        &self,
        r: Request<v1::CompleteRequest>,
    ) -> Result<Response<v1::CompleteResponse>, Status> {
        let id = self.identity(&r).await?;
        super::complete(&self.gw, &id, r.into_inner())
            .await
            .map(Response::new)
            .map_err(status)
    }

    async fn deregister(
        &self,
        r: Request<v1::DeregisterRequest>,
    ) -> Result<Response<v1::DeregisterResponse>, Status> {
        let id = self.identity(&r).await?;
        super::deregister(&self.gw, &id, r.into_inner())
            .map(Response::new)
            .map_err(status)
    }
}
