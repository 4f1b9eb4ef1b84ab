//! How a task operation reaches its shard's leader, and what that leader answers.
//!
//! [`Router::run`] carries any [`Operation`] to the leader of its shard through `on_leader`,
//! the one loop that finds a shard's leader and retries: it picks a [`Target`] (this node's
//! [`Host`] in-process, or another node's `taskmesh.v1.TaskService` `Apply` call through
//! [`Peers`]) and hands it the operation as data ([`Op`]). A new operation is a new struct of
//! `taskmesh_host::ops` and its wire form; nothing here changes. Reads that are batched or
//! streamed (`get`, `attach`) take the same loop with calls of their own.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use taskmesh_host::ops::{task_shard, List, Listed};
use taskmesh_host::{Answer, Attachment, Host, HostError, Op, Operation, TaskRead};
use taskmesh_task::TaskView;

use crate::remote::Peers;
use crate::Router;

/// The first pause before asking again for a shard without a reachable leader; pauses double
/// up to [`RETRY_PAUSE_MAX`] within the retry budget. Short: an election takes a few hundred
/// milliseconds, and a request should see the new leader soon after.
const RETRY_PAUSE_FIRST: Duration = Duration::from_millis(50);
/// The longest pause between two attempts on one request.
const RETRY_PAUSE_MAX: Duration = Duration::from_millis(400);
/// Leader hints followed in a row before asking the placement instead: replicas that a
/// membership change left behind may name each other as leader.
const MAX_HINT_HOPS: usize = 3;
/// Hint-less `NotLeader` answers tried in a row (each at another replica) before a pause.
const MISSES_BEFORE_PAUSE: usize = 3;
/// The least time one attempt at a remote leader gets.
const MIN_ATTEMPT: Duration = Duration::from_millis(200);

/// Where a request for a shard goes.
enum Route {
    /// This node leads the shard, or the router has no peers.
    Local,
    /// Node `id` leads it, as far as this node knows.
    Remote(u64),
    /// No leader known yet.
    Unknown,
}

impl Router {
    /// Apply `op` on the leader of its shard, here or on a peer, and return the leader's answer.
    /// Every operation is safe to repeat (a create by its task id, the others change nothing
    /// twice), so an attempt that may or may not have reached the leader is retried within the
    /// retry budget.
    pub async fn run<O: Operation>(&self, op: O) -> Result<O::Output, HostError> {
        let shard = op.shard(self.shards)?;
        let op: Op = op.into();
        let op = &op;
        let answer = self
            .on_leader(shard, |t| async move { t.apply(shard, op).await })
            .await?;
        O::output(answer)
    }

    /// Read `owner`'s task on its shard's leader (a poll). An empty id, or one longer than
    /// [`MAX_TASK_ID_LEN`](crate::MAX_TASK_ID_LEN), is [`HostError::NotFound`] without asking
    /// any node. Not an [`Operation`]: polls forwarded to one peer travel together in batches.
    pub async fn get(&self, task_id: &str, owner: &str) -> Result<TaskView, HostError> {
        self.read(task_id, owner, false)
            .await
            .map(TaskRead::into_view)
    }

    /// Read `owner`'s task on its shard's leader with `detail` (see
    /// [`Host::read`](taskmesh_host::Host::read)): with it, a terminal task comes with its
    /// outcome and an `input_required` one with the requests it waits on, in one round trip.
    /// Batched with the polls, as [`Router::get`].
    pub async fn read(
        &self,
        task_id: &str,
        owner: &str,
        detail: bool,
    ) -> Result<TaskRead, HostError> {
        let shard = task_shard(task_id, self.shards)?;
        self.on_leader(shard, |t| async move {
            match t {
                Target::Local(host) => host.read(shard, task_id, owner, detail).await,
                Target::Remote { peers, id } => peers.read(id, shard, task_id, owner, detail).await,
            }
        })
        .await
    }

    /// Attach a `tasks/result` reader to `owner`'s task on its shard's leader, here or on a
    /// peer (a stream, not an [`Operation`]). Ids are checked as by [`Router::get`].
    pub async fn attach(&self, task_id: &str, owner: &str) -> Result<Attachment, HostError> {
        let shard = task_shard(task_id, self.shards)?;
        self.on_leader(shard, |t| async move {
            match t {
                Target::Local(host) => host.attach(shard, task_id, owner).await,
                Target::Remote { peers, id } => peers.attach(id, shard, task_id, owner).await,
            }
        })
        .await
    }

    /// One page of `owner`'s tasks with ids after `after`, merged over all shards in id order;
    /// the flag says whether more follow.
    pub async fn list(
        &self,
        owner: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<TaskView>, bool), HostError> {
        let limit = limit.max(1);
        let mut merged = Vec::new();
        let mut more = false;
        for shard in 0..self.shards {
            let page: Listed = self
                .run(List {
                    shard,
                    owner: owner.to_string(),
                    after: after.map(str::to_string),
                    limit,
                })
                .await?;
            more |= page.more;
            merged.extend(page.tasks);
        }
        merged.sort_by(|a, b| a.task_id.cmp(&b.task_id));
        more |= merged.len() > limit;
        merged.truncate(limit);
        Ok((merged, more))
    }

    /// Run `op` against the shard's leader, following hints and retrying while the shard has
    /// no reachable leader, within the retry budget: the one place a request finds its leader.
    async fn on_leader<'a, T, F, Fut>(&'a self, shard: u32, op: F) -> Result<T, HostError>
    where
        F: Fn(Target<'a>) -> Fut,
        Fut: std::future::Future<Output = Result<T, HostError>>,
    {
        let mut retry =
            taskmesh_shard::Retry::new(self.retry_budget, RETRY_PAUSE_FIRST, RETRY_PAUSE_MAX);
        let mut hint = None;
        let misses = AtomicUsize::new(0);
        let mut hops = 0usize;
        let mut unpaused = 0usize;
        loop {
            let route = self.route(shard, hint.take(), misses.load(Ordering::Relaxed));
            let remote_id = match route {
                Route::Remote(id) => Some(id),
                _ => None,
            };
            let result = match (route, self.peers.as_deref()) {
                (Route::Remote(id), Some(peers)) => {
                    tracing::debug!(shard, node = id, "forwarding to the shard's leader");
                    // One attempt gets at most half of what is left of the retry budget: a
                    // leader that stopped answering (cut off, or dead before its connection
                    // noticed) must neither hold the request for the transport's full
                    // timeout nor spend the whole budget, so that a retry can still reach the
                    // leader elected meanwhile.
                    let attempt = (retry.left() / 2).max(MIN_ATTEMPT);
                    tokio::time::timeout(attempt, op(Target::Remote { peers, id }))
                        .await
                        .unwrap_or_else(|_| {
                            Err(HostError::Unavailable(format!(
                                "node {id} did not answer for shard {shard}"
                            )))
                        })
                }
                (Route::Local, _) | (Route::Remote(_), None) => {
                    tracing::debug!(shard, "this node leads the shard");
                    op(Target::Local(&self.host)).await
                }
                (Route::Unknown, _) => Err(HostError::Unavailable(format!(
                    "shard {shard} has no leader"
                ))),
            };
            if let Some(id) = remote_id {
                self.forwarded.count(id, &result);
            }
            match result {
                // Only errors that say "nothing changed, ask again" are retried: a peer's
                // internal or configuration error is final, and reported as it is.
                Err(e) if e.retryable() && !retry.expired() => match e {
                    HostError::NotLeader { leader_hint, .. } => {
                        hint = leader_hint
                            .filter(|h| Some(*h) != Some(self.node_id) || self.host.leads(shard));
                        hops += 1;
                        if hops > MAX_HINT_HOPS {
                            hops = 0;
                            hint = None;
                        }
                        if let Some(h) = hint {
                            self.remember_leader(shard, h);
                            retry.reset();
                        } else {
                            self.remember_leader(shard, 0);
                            misses.fetch_add(1, Ordering::Relaxed);
                            unpaused += 1;
                            if unpaused == MISSES_BEFORE_PAUSE {
                                unpaused = 0;
                                retry.pause().await;
                            }
                        }
                    }
                    // Unavailable: a single node has nowhere else to ask.
                    e if self.peers.is_none() => return Err(e),
                    _ => {
                        self.remember_leader(shard, 0);
                        misses.fetch_add(1, Ordering::Relaxed);
                        retry.pause().await;
                    }
                },
                other => {
                    if let (Some(id), Ok(_)) = (remote_id, &other) {
                        self.remember_leader(shard, id);
                    }
                    return other;
                }
            }
        }
    }

    /// Where to send a request for `shard`: here when this node leads it; else the hinted
    /// node, the leader this node's replica knows, the last leader seen, or (after `misses`
    /// answers that named no leader) the shard's replicas from the placement in turn.
    fn route(&self, shard: u32, hint: Option<u64>, misses: usize) -> Route {
        if self.peers.is_none() || self.host.leads(shard) {
            return Route::Local;
        }
        let known = hint.or_else(|| self.host.shard_leader(shard)).or_else(|| {
            let cached = self.leaders.get(shard as usize)?.load(Ordering::Relaxed);
            (cached != 0).then_some(cached)
        });
        match known {
            Some(id) if id == self.node_id => Route::Local,
            Some(id) if misses == 0 => Route::Remote(id),
            _ => {
                let replicas: Vec<u64> = self
                    .placement
                    .read()
                    .as_ref()
                    .map(|p| p(shard))
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|id| *id != self.node_id)
                    .collect();
                match (known, replicas.is_empty()) {
                    (_, false) => Route::Remote(replicas[misses % replicas.len()]),
                    (Some(id), true) => Route::Remote(id),
                    (None, true) => Route::Unknown,
                }
            }
        }
    }
}

/// Where the router sends one attempt of a request.
#[derive(Clone, Copy)]
pub enum Target<'a> {
    /// This node leads the shard (or the router has no peers).
    Local(&'a Host),
    /// Node `id` leads it (as far as the router knows), reached through `peers`.
    Remote {
        /// The channels to the other nodes.
        peers: &'a Peers,
        /// The node believed to lead the shard.
        id: u64,
    },
}

impl Target<'_> {
    /// Apply `op` on this target, the leader of `shard`.
    pub async fn apply(self, shard: u32, op: &Op) -> Result<Answer, HostError> {
        match self {
            Target::Local(host) => host.apply(shard, op.clone()).await,
            Target::Remote { peers, id } => peers.apply(id, shard, op).await,
        }
    }
}
