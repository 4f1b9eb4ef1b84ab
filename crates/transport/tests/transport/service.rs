//! The RaftTransport service and the sending side one call at a time: routing by shard and
//! target, the statuses of calls that reach no group, pre-vote, chunked snapshots, and how
//! failures reach openraft.

use std::collections::BTreeMap;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::errors::{RPCError, ReplicationClosed, StreamingError};
use openraft::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, VoteRequest, VoteResponse};
use openraft::BasicNode;
use taskmesh_rpc::v1 as pb;
use taskmesh_rpc::v1::raft_transport_client::RaftTransportClient;
use taskmesh_shard::types::{SnapshotMeta, Vote};
use taskmesh_shard::TypeConfig;
use taskmesh_transport::{GrpcNetwork, PeerChannels};
use tempfile::TempDir;
use tonic::Code;

use crate::common::*;

async fn client(addr: &str) -> RaftTransportClient<tonic::transport::Channel> {
    RaftTransportClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

fn vote_request(term: u64, candidate: u64) -> Vec<u8> {
    let rpc = VoteRequest::<TypeConfig>::new(Vote::new(term, candidate), None);
    serde_json::to_vec(&rpc).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_that_reach_no_group_fail_with_their_status() {
    let dir = TempDir::new().unwrap();
    let n = TestNode::start(1, &dir.path().join("n1"), &base_config()).await;
    let mut c = client(&n.addr).await;

    let vote = |shard, target, payload| pb::VoteRequest {
        shard,
        target,
        pre_vote: true,
        payload,
    };
    let wrong_node = c
        .vote(vote(SHARD, 9, vote_request(1, 2)))
        .await
        .unwrap_err();
    assert_eq!(wrong_node.code(), Code::FailedPrecondition);
    let no_shard = c
        .vote(vote(SHARD + 1, 1, vote_request(1, 2)))
        .await
        .unwrap_err();
    assert_eq!(no_shard.code(), Code::NotFound);
    let garbage = c
        .vote(vote(SHARD, 1, b"{not json".to_vec()))
        .await
        .unwrap_err();
    assert_eq!(garbage.code(), Code::InvalidArgument);
    let ok = c.vote(vote(SHARD, 1, vote_request(1, 2))).await;
    assert!(ok.is_ok(), "{ok:?}");

    n.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_heartbeats_answers_each_in_its_own_slot() {
    let dir = TempDir::new().unwrap();
    let n = TestNode::start(1, &dir.path().join("n1"), &base_config()).await;
    let mut c = client(&n.addr).await;
    let heartbeat = serde_json::to_vec(&AppendEntriesRequest::<TypeConfig> {
        vote: Vote::new_committed(1, 2),
        prev_log_id: None,
        entries: vec![],
        leader_commit: None,
    })
    .unwrap();
    let one = |shard, target, payload: &[u8]| pb::AppendEntriesRequest {
        shard,
        target,
        payload: payload.to_vec(),
    };

    // A batch for another node is refused whole.
    let wrong = c
        .append_entries_batch(pb::AppendEntriesBatchRequest {
            target: 9,
            requests: vec![one(SHARD, 9, &heartbeat)],
        })
        .await
        .unwrap_err();
    assert_eq!(wrong.code(), Code::FailedPrecondition);

    // Otherwise each request gets the answer a single call would have had, in its own slot.
    let answers = c
        .append_entries_batch(pb::AppendEntriesBatchRequest {
            target: 1,
            requests: vec![
                one(SHARD + 1, 1, &heartbeat),
                one(SHARD, 1, &heartbeat),
                one(SHARD, 1, b"{not json"),
                one(SHARD, 9, &heartbeat),
            ],
        })
        .await
        .unwrap()
        .into_inner()
        .answers;
    let codes: Vec<Code> = answers.iter().map(|a| Code::from(a.code as i32)).collect();
    assert_eq!(
        codes,
        [
            Code::NotFound,
            Code::Ok,
            Code::InvalidArgument,
            Code::FailedPrecondition
        ]
    );
    let answered: AppendEntriesResponse<TypeConfig> =
        serde_json::from_slice(&answers[1].payload).unwrap();
    // The replica took the heartbeat as one from leader 2 in term 1 (its leadership watch
    // learns the term from the replica's metrics, a moment after the answer).
    assert!(
        matches!(answered, AppendEntriesResponse::Success),
        "{answered:?}"
    );
    let mut leadership = n.replica.leadership();
    let seen = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        leadership.wait_for(|l| l.term == 1),
    )
    .await;
    assert!(
        matches!(seen, Ok(Ok(_))),
        "the replica's term stays {}",
        n.term()
    );

    n.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_vote_leaves_the_term_alone_and_a_vote_does_not() {
    let dir = TempDir::new().unwrap();
    let n = TestNode::start(1, &dir.path().join("n1"), &base_config()).await;
    let mut c = client(&n.addr).await;
    assert_eq!(n.replica.current_term(), 0);

    let answer = c
        .vote(pb::VoteRequest {
            shard: SHARD,
            target: 1,
            pre_vote: true,
            payload: vote_request(5, 2),
        })
        .await
        .unwrap()
        .into_inner();
    let answer: VoteResponse<TypeConfig> = serde_json::from_slice(&answer.payload).unwrap();
    assert!(answer.vote_granted, "{answer:?}");
    assert_eq!(n.replica.current_term(), 0, "a pre-vote changed the term");

    let answer = c
        .vote(pb::VoteRequest {
            shard: SHARD,
            target: 1,
            pre_vote: false,
            payload: vote_request(5, 2),
        })
        .await
        .unwrap()
        .into_inner();
    let answer: VoteResponse<TypeConfig> = serde_json::from_slice(&answer.payload).unwrap();
    assert!(answer.vote_granted, "{answer:?}");
    eventually("the vote moves the term", || n.replica.current_term() == 5).await;

    n.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_sent_in_chunks_is_installed_whole() {
    let dir = TempDir::new().unwrap();
    // Node 2 leads a group of its own and snapshots it; node 1 has never been initialised.
    let source = TestNode::start(2, &dir.path().join("n2"), &base_config()).await;
    let sink = TestNode::start(1, &dir.path().join("n1"), &base_config()).await;
    source
        .replica
        .bootstrap(BTreeMap::from([(2, source.addr.clone())]))
        .await
        .unwrap();
    source.replica.wait_leader(WAIT).await.unwrap();
    for k in 0..20 {
        source
            .replica
            .propose(create(&format!("snap-{k}")))
            .await
            .unwrap();
    }
    source.replica.trigger_snapshot().await.unwrap();
    let snapshot = source.replica.raft().get_snapshot().await.unwrap().unwrap();
    let vote = source.replica.raft().metrics().borrow_watched().vote;
    assert!(
        snapshot.snapshot.len() > 3 * 1024,
        "several chunks of 1 KiB"
    );

    let mut network = GrpcNetwork::new(2, PeerChannels::new(Duration::from_secs(1)), SHARD)
        .with_snapshot_chunk_bytes(1024);
    let mut peer =
        RaftNetworkFactory::<TypeConfig>::new_client(&mut network, 1, &BasicNode::new(&sink.addr))
            .await;
    let answer = peer
        .full_snapshot(
            vote,
            snapshot,
            std::future::pending::<ReplicationClosed>(),
            RPCOption::new(Duration::from_secs(10)),
        )
        .await
        .unwrap();
    assert_eq!(answer.vote, vote);
    assert_eq!(sink.records(), source.records());
    assert!(sink.replica.snapshot_installs().borrow().is_some());

    // A cancelled transfer ends with `Closed`.
    let snapshot = source.replica.raft().get_snapshot().await.unwrap().unwrap();
    let cancelled = peer
        .full_snapshot(
            vote,
            snapshot,
            std::future::ready(ReplicationClosed::new("test")),
            RPCOption::new(Duration::from_secs(10)),
        )
        .await;
    assert!(
        matches!(cancelled, Err(StreamingError::Closed(_))),
        "{cancelled:?}"
    );

    source.stop().await;
    sink.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incomplete_or_inconsistent_snapshot_stream_is_discarded() {
    let dir = TempDir::new().unwrap();
    let n = TestNode::start(1, &dir.path().join("n1"), &base_config()).await;
    let mut c = client(&n.addr).await;
    let header = pb::SnapshotHeader {
        vote: serde_json::to_vec(&Vote::new(1, 2)).unwrap(),
        meta: serde_json::to_vec(&SnapshotMeta::default()).unwrap(),
        size_bytes: 8,
    };
    let chunk = |header: Option<pb::SnapshotHeader>, offset: u64, data: &[u8], done: bool| {
        pb::InstallSnapshotChunk {
            shard: SHARD,
            target: 1,
            header,
            offset,
            data: data.to_vec(),
            done,
        }
    };

    // The stream ends before its `done` chunk.
    let cut = c
        .install_snapshot(futures::stream::iter(vec![chunk(
            Some(header.clone()),
            0,
            b"1234",
            false,
        )]))
        .await
        .unwrap_err();
    assert_eq!(cut.code(), Code::Cancelled);

    // A gap between chunks.
    let gap = c
        .install_snapshot(futures::stream::iter(vec![
            chunk(Some(header.clone()), 0, b"1234", false),
            chunk(None, 5, b"678", true),
        ]))
        .await
        .unwrap_err();
    assert_eq!(gap.code(), Code::InvalidArgument);

    // More data than announced.
    let long = c
        .install_snapshot(futures::stream::iter(vec![chunk(
            Some(header.clone()),
            0,
            b"123456789",
            true,
        )]))
        .await
        .unwrap_err();
    assert_eq!(long.code(), Code::InvalidArgument);

    // No header.
    let headless = c
        .install_snapshot(futures::stream::iter(vec![chunk(
            None,
            0,
            b"12345678",
            true,
        )]))
        .await
        .unwrap_err();
    assert_eq!(headless.code(), Code::InvalidArgument);

    assert!(n.replica.snapshot_installs().borrow().is_none());
    assert_eq!(n.replica.current_term(), 0);
    n.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_reach_openraft_as_unreachable_peers() {
    let dir = TempDir::new().unwrap();
    let n = TestNode::start(1, &dir.path().join("n1"), &base_config()).await;
    // A port nobody listens on.
    let closed = {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().to_string()
    };
    let option = || RPCOption::new(Duration::from_secs(5));
    let rpc = || VoteRequest::<TypeConfig>::new(Vote::new(1, 2), None);

    let pool = PeerChannels::new(Duration::from_secs(1));
    let mut network = GrpcNetwork::new(2, pool.clone(), SHARD);
    for addr in [closed.as_str(), "", "https://127.0.0.1:1"] {
        let mut peer = network.new_client(1, &BasicNode::new(addr)).await;
        let res = peer.vote(rpc(), option()).await;
        assert!(
            matches!(res, Err(RPCError::Unreachable(_))),
            "{addr:?}: {res:?}"
        );
    }

    // A live node that does not host the shard.
    let mut other_shard = GrpcNetwork::new(2, pool.clone(), SHARD + 1);
    let mut peer = other_shard.new_client(1, &BasicNode::new(&n.addr)).await;
    let res = peer.pre_vote(rpc(), option()).await;
    assert!(matches!(res, Err(RPCError::Unreachable(_))), "{res:?}");

    // The same node under another id.
    let mut peer = network.new_client(3, &BasicNode::new(&n.addr)).await;
    let res = peer.vote(rpc(), option()).await;
    assert!(matches!(res, Err(RPCError::Unreachable(_))), "{res:?}");

    // And the right one answers.
    let mut peer = network.new_client(1, &BasicNode::new(&n.addr)).await;
    let res = peer.pre_vote(rpc(), option()).await;
    assert!(res.is_ok(), "{res:?}");
    assert_eq!(n.replica.current_term(), 0);

    n.stop().await;
}
