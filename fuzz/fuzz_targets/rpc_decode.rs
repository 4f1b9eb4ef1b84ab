//! Any bytes as the body of an internal RPC: the first byte picks the request message (every
//! request of the Raft, task, cluster and stream services), the rest is decoded as its
//! protobuf, and what the service then decodes from it (the JSON payloads of Raft calls and
//! cluster changes, task records and views) is decoded too. Nothing panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use taskmesh_rpc::v1;
use taskmesh_shard::TypeConfig;

fn json<T: serde::de::DeserializeOwned>(bytes: &[u8]) {
    let _ = serde_json::from_slice::<T>(bytes);
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    match which % 19 {
        0 => {
            if let Ok(m) = v1::AppendEntriesRequest::decode(bytes) {
                json::<openraft::raft::AppendEntriesRequest<TypeConfig>>(&m.payload);
            }
        }
        1 => {
            if let Ok(m) = v1::VoteRequest::decode(bytes) {
                json::<openraft::raft::VoteRequest<TypeConfig>>(&m.payload);
            }
        }
        2 => {
            if let Ok(m) = v1::InstallSnapshotChunk::decode(bytes) {
                if let Some(h) = m.header {
                    json::<taskmesh_shard::types::Vote>(&h.vote);
                    json::<taskmesh_shard::types::SnapshotMeta>(&h.meta);
                }
            }
        }
        3 => {
            if let Ok(m) = v1::TransferLeaderRequest::decode(bytes) {
                json::<openraft::raft::TransferLeaderRequest<TypeConfig>>(&m.payload);
            }
        }
        4 => {
            if let Ok(m) = v1::CreateTaskRequest::decode(bytes) {
                if let Some(r) = m.request {
                    let tool = taskmesh_router::convert::request_from_pb(r);
                    json::<serde_json::Value>(tool.arguments_json.as_bytes());
                }
            }
        }
        5 => {
            if let Ok(m) = v1::ReadTasksRequest::decode(bytes) {
                let _ = m.gets.len();
            }
        }
        6 => {
            let _ = v1::ListTasksRequest::decode(bytes);
        }
        7 => {
            let _ = v1::CancelTaskRequest::decode(bytes);
        }
        8 => {
            let _ = v1::AttachResultRequest::decode(bytes);
        }
        9 => {
            let _ = v1::WatchStatusRequest::decode(bytes);
        }
        10 => {
            if let Ok(m) = v1::DeliverResponseRequest::decode(bytes) {
                json::<serde_json::Value>(&m.response_json);
            }
        }
        11 => {
            let _ = v1::ClaimMessageRequest::decode(bytes);
        }
        12 => {
            let _ = v1::PendingRequestsRequest::decode(bytes);
        }
        13 => {
            let _ = v1::ShardMembersRequest::decode(bytes);
        }
        14 => {
            if let Ok(m) = v1::ProposeChangeRequest::decode(bytes) {
                json::<taskmesh_meta::MetaCommand>(m.change_json.as_bytes());
            }
        }
        15 => {
            let _ = v1::GetMetadataRequest::decode(bytes);
        }
        16 => {
            let _ = v1::ResumeStreamRequest::decode(bytes);
        }
        17 => {
            let _ = v1::OpenStreamRequest::decode(bytes);
        }
        _ => {
            // What task services answer, as a forwarding node reads it.
            if let Ok(r) = v1::TaskRecord::decode(bytes) {
                let _ = taskmesh_router::convert::record_from_pb(r);
            }
            if let Ok(v) = v1::TaskView::decode(bytes) {
                let _ = taskmesh_router::convert::view_from_pb(v);
            }
            let _ = v1::SessionLogLevelRequest::decode(bytes);
        }
    }
});
