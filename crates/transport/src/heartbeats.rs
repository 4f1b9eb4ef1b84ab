//! Coalesced heartbeats: the AppendEntries calls without entries that the groups of a node send
//! to one peer travel together.
//!
//! Every awake group's leader sends each follower a heartbeat every heartbeat interval, and a
//! read that must confirm leadership sends a round of them; with hundreds of groups that is
//! hundreds of calls per interval to each peer. Instead, each (peer, address) has one queue and
//! one task: the task sends what has queued as one `AppendEntriesBatch` call, with up to
//! [`BATCHES_IN_FLIGHT`] such calls under way, and whatever queues while they are goes in the
//! next one. So a lone heartbeat leaves at once,
//! and under load one call carries the heartbeats of many groups. Each heartbeat keeps its own
//! deadline (the caller's), its own answer and its own failure, exactly as a single call would.
//!
//! A peer of an earlier version, which does not know the batch call, gets the same heartbeats
//! one call each.
//!
//! Calls with entries are not batched: they are larger, and one group's entries must not wait
//! for another's.

use std::sync::Weak;
use std::time::Duration;

use taskmesh_rpc::v1 as pb;
use taskmesh_rpc::v1::raft_transport_client::RaftTransportClient;
use tokio::sync::{mpsc, oneshot};
use tonic::Status;

use crate::channels::PeerChannels;
use crate::heartbeat_queues::Item;

/// How many batches' worth of heartbeats may wait for one peer; past it a heartbeat fails at
/// once (as unreachable).
const QUEUED_BATCHES: usize = 16;
/// How many batch calls to one peer may be under way at once: a batch is answered when its
/// slowest heartbeat is, and must not hold back the heartbeats queued behind it for long.
pub const BATCHES_IN_FLIGHT: usize = 4;

impl PeerChannels {
    /// Send `request` (an AppendEntries without entries) to node `target` at `addr` with the
    /// other heartbeats queued for it, within `ttl`: openraft's answer as JSON, or the status a
    /// single call would have failed with.
    pub(crate) async fn heartbeat(
        &self,
        target: u64,
        addr: &str,
        request: pb::AppendEntriesRequest,
        ttl: Duration,
    ) -> Result<Vec<u8>, Status> {
        let (reply, answer) = oneshot::channel();
        let item = Item {
            request,
            ttl,
            reply,
        };
        let sender = {
            let mut queues = self.heartbeat_queues().queues.lock();
            queues
                .entry((target, addr.to_string()))
                .or_insert_with(|| {
                    let batch = self.heartbeat_batch();
                    let (tx, rx) = mpsc::channel(batch * QUEUED_BATCHES);
                    tokio::spawn(run(self.downgrade(), target, addr.to_string(), rx, batch));
                    tx
                })
                .clone()
        };
        if sender.try_send(item).is_err() {
            return Err(Status::unavailable(format!(
                "too many heartbeats wait for node {target}"
            )));
        }
        match tokio::time::timeout(ttl, answer).await {
            Err(_) => Err(Status::deadline_exceeded(
                "the heartbeat was not answered in time",
            )),
            Ok(Err(_)) => Err(Status::unavailable("the heartbeat queue stopped")),
            Ok(Ok(answer)) => answer,
        }
    }
}

/// Send the heartbeats queued for `target` at `addr`, a batch at a time, until the pool is gone.
async fn run(
    pool: Weak<crate::channels::Inner>,
    target: u64,
    addr: String,
    mut queue: mpsc::Receiver<Item>,
    max: usize,
) {
    let in_flight = std::sync::Arc::new(tokio::sync::Semaphore::new(BATCHES_IN_FLIGHT));
    let mut items: Vec<Item> = Vec::with_capacity(max);
    loop {
        // A free slot first, so that what queues meanwhile joins this batch.
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        if queue.recv_many(&mut items, max).await == 0 {
            return;
        }
        let Some(pool) = PeerChannels::upgrade(&pool) else {
            return;
        };
        let batch = std::mem::take(&mut items);
        let addr = addr.clone();
        tokio::spawn(async move {
            send(&pool, target, &addr, batch).await;
            drop(permit);
        });
    }
}

/// One `AppendEntriesBatch` call, and each of its answers to its heartbeat.
async fn send(pool: &PeerChannels, target: u64, addr: &str, batch: Vec<Item>) {
    let ttl = batch.iter().map(|i| i.ttl).max().unwrap_or_default();
    let mut replies = Vec::with_capacity(batch.len());
    let mut requests = Vec::with_capacity(batch.len());
    for item in batch {
        requests.push(item.request);
        replies.push(item.reply);
    }
    let fail_all = |replies: Vec<oneshot::Sender<Result<Vec<u8>, Status>>>, status: Status| {
        for reply in replies {
            let _ = reply.send(Err(status.clone()));
        }
    };
    let channel = match pool.channel(target, addr) {
        Ok(channel) => channel,
        Err(e) => return fail_all(replies, Status::unavailable(e.to_string())),
    };
    let mut client = RaftTransportClient::new(channel);
    let mut request = tonic::Request::new(pb::AppendEntriesBatchRequest {
        target,
        requests: requests.clone(),
    });
    request.set_timeout(ttl);
    let answers = match tokio::time::timeout(ttl, client.append_entries_batch(request)).await {
        Err(_) => {
            return fail_all(
                replies,
                Status::deadline_exceeded("heartbeat batch timed out"),
            )
        }
        Ok(Err(status)) if status.code() == tonic::Code::Unimplemented => {
            // A peer of an earlier version (during a rolling upgrade): one call each.
            return one_by_one(client, requests, replies, ttl).await;
        }
        Ok(Err(status)) => return fail_all(replies, status),
        Ok(Ok(answer)) => answer.into_inner().answers,
    };
    if answers.len() != replies.len() {
        let status = Status::internal(format!(
            "{} answers to a batch of {} heartbeats",
            answers.len(),
            replies.len()
        ));
        return fail_all(replies, status);
    }
    for (reply, answer) in replies.into_iter().zip(answers) {
        let result = if answer.code == 0 {
            Ok(answer.payload)
        } else {
            Err(Status::new(
                tonic::Code::from(answer.code as i32),
                answer.message,
            ))
        };
        let _ = reply.send(result);
    }
}

/// Send each heartbeat as its own `AppendEntries` call (all at once), for a peer that does not
/// know `AppendEntriesBatch`.
async fn one_by_one(
    client: RaftTransportClient<tonic::transport::Channel>,
    requests: Vec<pb::AppendEntriesRequest>,
    replies: Vec<oneshot::Sender<Result<Vec<u8>, Status>>>,
    ttl: Duration,
) {
    let calls = requests.into_iter().zip(replies).map(|(one, reply)| {
        let mut client = client.clone();
        async move {
            let mut request = tonic::Request::new(one);
            request.set_timeout(ttl);
            let answer = match tokio::time::timeout(ttl, client.append_entries(request)).await {
                Err(_) => Err(Status::deadline_exceeded("the heartbeat timed out")),
                Ok(Err(status)) => Err(status),
                Ok(Ok(answer)) => Ok(answer.into_inner().payload),
            };
            let _ = reply.send(answer);
        }
    });
    futures::future::join_all(calls).await;
}

/// The answer slot of one request of a batch, from what a single call would have answered.
pub(crate) fn answer(result: Result<Vec<u8>, Status>) -> pb::BatchedAnswer {
    match result {
        Ok(payload) => pb::BatchedAnswer {
            code: 0,
            message: String::new(),
            payload,
        },
        Err(status) => pb::BatchedAnswer {
            code: status.code() as u32,
            message: status.message().to_string(),
            payload: Vec::new(),
        },
    }
}
