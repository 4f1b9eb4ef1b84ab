//! Reconnections that reach another node than the one holding their stream.
//!
//! An SSE event id names the node whose [`Hub`] holds the stream (see [`crate::resume`]). A
//! `GET` with a `Last-Event-ID` of another node is relayed: this node calls that node's
//! `StreamService.ResumeStream` and passes the frames on, under their own ids, so a later
//! reconnection can again reach any node. A `GET` without one, for a session whose home is
//! another node, is opened there (`OpenStream`) and relayed the same way, so that all of a
//! session's GET streams are on one node, which sends each of the session's messages on one
//! of them. [`StreamGrpc`] is the serving half.

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use taskmesh_rpc::v1::{
    self, stream_frame::Frame, stream_service_client::StreamServiceClient,
    stream_service_server::StreamService,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::delivery::{JsonMessage, Kind};
use crate::resume::{EventId, Hub, Out, Reader, ResumeError};

/// Frames of a relayed stream that may wait for the calling node to read them.
const RELAY_BUFFER: usize = 16;

/// The `taskmesh.v1.StreamService` server: the streams of this node's [`Hub`], read by the
/// nodes that reconnections reached.
pub struct StreamGrpc {
    hub: Arc<Hub>,
}

impl StreamGrpc {
    /// A service over `hub`.
    pub fn new(hub: Arc<Hub>) -> Self {
        Self { hub }
    }

    /// The service as a tonic server, to add to a gRPC server.
    pub fn into_server(self) -> v1::stream_service_server::StreamServiceServer<Self> {
        v1::stream_service_server::StreamServiceServer::new(self)
    }
}

type FrameStream = Pin<Box<dyn Stream<Item = Result<v1::StreamFrame, Status>> + Send>>;

#[tonic::async_trait]
impl StreamService for StreamGrpc {
    type ResumeStreamStream = FrameStream;

    async fn resume_stream(
        &self,
        request: Request<v1::ResumeStreamRequest>,
    ) -> Result<Response<FrameStream>, Status> {
        let r = request.into_inner();
        let id = EventId {
            node: self.hub.node(),
            stream: r.stream,
            seq: r.after,
            origin: None,
        };
        let reader = self.hub.resume(&r.session, &id).map_err(|e| match e {
            ResumeError::Unknown => Status::not_found(e.to_string()),
            ResumeError::TooOld => Status::out_of_range(e.to_string()),
        })?;
        Ok(Response::new(forward(reader)))
    }

    type OpenStreamStream = FrameStream;

    async fn open_stream(
        &self,
        request: Request<v1::OpenStreamRequest>,
    ) -> Result<Response<FrameStream>, Status> {
        let session = request.into_inner().session;
        let gw = self
            .hub
            .gateway()
            .ok_or_else(|| Status::unavailable("the gateway is not serving yet"))?;
        let claims = gw
            .sessions
            .check(&session)
            .ok_or_else(|| Status::not_found("no such live session"))?;
        let reader = crate::resume::open_get_reader(&gw, &session, &claims).ok_or_else(|| {
            Status::resource_exhausted("the session holds its limit of GET streams")
        })?;
        Ok(Response::new(forward(reader)))
    }

    async fn session_log_level(
        &self,
        request: Request<v1::SessionLogLevelRequest>,
    ) -> Result<Response<v1::SessionLogLevelResponse>, Status> {
        let gw = self
            .hub
            .gateway()
            .ok_or_else(|| Status::unavailable("the gateway is not serving yet"))?;
        crate::logging::serve_level(&gw, request.into_inner()).map(Response::new)
    }
}

/// The frames of `reader`, until it ends or the caller goes away (which ends the reader at
/// once: the stream's window starts).
fn forward(mut reader: Reader) -> FrameStream {
    let (tx, rx) = mpsc::channel(RELAY_BUFFER);
    tokio::spawn(async move {
        loop {
            let out = tokio::select! {
                out = reader.next() => out,
                _ = tx.closed() => return,
            };
            let frame = match out {
                None => return,
                Some(Out::Prime(id)) => Frame::Prime(id),
                Some(Out::Message(id, m)) => Frame::Event(v1::StreamEvent {
                    id,
                    json: m.json.to_vec(),
                    at_unix_us: m.stamp.map_or(0, |s| s.at_us),
                    kind: m.stamp.map_or(0, |s| s.kind.to_wire()),
                }),
                Some(Out::Closing) => Frame::Closing(true),
            };
            let frame = v1::StreamFrame { frame: Some(frame) };
            if tx.send(Ok(frame)).await.is_err() {
                return;
            }
        }
    });
    Box::pin(ReceiverStream::new(rx))
}

/// A stream read from the node holding it.
pub struct Relayed {
    frames: tonic::Streaming<v1::StreamFrame>,
    done: bool,
}

impl Relayed {
    /// The next item; `None` when the holder ended the stream or the connection to it broke
    /// (the client reconnects again). Cancel-safe.
    pub async fn next(&mut self) -> Option<Out> {
        if self.done {
            return None;
        }
        loop {
            let frame = match self.frames.next().await {
                Some(Ok(f)) => f.frame,
                _ => return None,
            };
            match frame {
                Some(Frame::Event(e)) => {
                    let json = Arc::new(e.json);
                    let m = match Kind::from_wire(e.kind) {
                        Some(kind) => JsonMessage::stamped(json, kind, e.at_unix_us),
                        None => JsonMessage::plain(json),
                    };
                    return Some(Out::Message(e.id, m));
                }
                Some(Frame::Prime(id)) => return Some(Out::Prime(id)),
                Some(Frame::Closing(_)) => {
                    self.done = true;
                    return Some(Out::Closing);
                }
                None => {}
            }
        }
    }
}

/// Read the stream `id` names from the node holding it, for `session`. A node that cannot be
/// reached, or does not know the stream, is [`ResumeError::Unknown`].
pub async fn resume(
    channel: Option<tonic::transport::Channel>,
    id: &EventId,
    session: &str,
) -> Result<Relayed, ResumeError> {
    let channel = channel.ok_or(ResumeError::Unknown)?;
    let req = v1::ResumeStreamRequest {
        stream: id.stream,
        after: id.seq,
        session: session.to_string(),
    };
    match StreamServiceClient::new(channel).resume_stream(req).await {
        Ok(r) => Ok(Relayed {
            frames: r.into_inner(),
            done: false,
        }),
        Err(s) if s.code() == tonic::Code::OutOfRange => Err(ResumeError::TooOld),
        Err(s) => {
            tracing::debug!(node = id.node, status = %s, "stream not resumed on its node");
            Err(ResumeError::Unknown)
        }
    }
}

/// A new GET stream of `session` on its home node, read from there; the status code the home
/// refused it with (`Unavailable` when there is no channel to it).
pub async fn open(
    channel: Option<tonic::transport::Channel>,
    session: &str,
) -> Result<Relayed, tonic::Code> {
    let channel = channel.ok_or(tonic::Code::Unavailable)?;
    let req = v1::OpenStreamRequest {
        session: session.to_string(),
    };
    match StreamServiceClient::new(channel).open_stream(req).await {
        Ok(r) => Ok(Relayed {
            frames: r.into_inner(),
            done: false,
        }),
        Err(s) => Err(s.code()),
    }
}
