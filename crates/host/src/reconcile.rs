//! The reconciler of a shard replica: on the shard's leader, every live task has exactly one
//! execution here (see "A reconciler checks the invariant" in docs/architecture.md).
//!
//! It compares the state machine's live tasks with the actors that run: all of them on every
//! leadership change and every `tasks.reconcile_full_interval_ms`, and whenever the host's
//! housekeeping nudges it (`events.rs`), those whose actor stopped or whose create ended since
//! the last pass (the suspects, [`Host::suspect`]), so that a pass costs what changed, not what
//! lives. A live task without an actor is taken over by its tool's resume policy, whatever its
//! term; an actor whose task is terminal, gone, or owned by a newer execution is stopped; on a
//! node that does not lead the shard, every actor of it is stopped.

use std::sync::Arc;
use std::time::Duration;

use ractor::ActorRef;
use taskmesh_shard::ShardReplica;
use taskmesh_task::{Applied, Command, Outcome, TaskStatus};
use taskmesh_tools::ResumePolicy;
use tokio::sync::Notify;

use crate::{actor, now_ms, Host, TaskMsg};

impl Host {
    /// Have the reconciler of `shard` check `task_id` at its next pass: its execution here
    /// ended, or may not have begun.
    pub(crate) fn suspect(&self, shard: u32, task_id: &str) {
        self.inner
            .suspects
            .lock()
            .entry(shard)
            .or_default()
            .insert(task_id.to_owned());
    }
}

/// The reconciler of one shard (see the module doc). A pass runs at once, then when the
/// leadership changes or the housekeeping nudges it; a pass that could not read the shard as its
/// leader (no quorum: the leader cannot confirm its leadership) is tried again after
/// `write_retry_min_ms`, doubling up to `write_retry_max_ms`, so a regained quorum is acted on
/// within that pause. Nothing else wakes it: an idle shard's reconciler only waits.
pub(crate) async fn reconcile_loop(host: Host, shard: ShardReplica, nudge: Arc<Notify>) {
    let cfg = &host.inner.cfg;
    let retry_min = Duration::from_millis(cfg.tasks.write_retry_min_ms.max(1));
    let retry_max = Duration::from_millis(cfg.tasks.write_retry_max_ms.max(1));
    let full_every = Duration::from_millis(cfg.tasks.reconcile_full_interval_ms.max(1));
    // When a pass last checked every live task of the shard (in the term of `caught_up`).
    let mut last_full: Option<tokio::time::Instant> = None;
    let mut leadership = shard.leadership();
    let mut retry: Option<Duration> = None;
    let mut next = tokio::time::Instant::now();
    // The term in which a pass read the shard linearizably (see `reconcile`).
    let mut caught_up: Option<u64> = None;
    let label = shard.shard_id().to_string();
    let changes = taskmesh_metrics::metrics::counter!(
        taskmesh_metrics::names::RAFT_LEADER_CHANGES, "shard" => label.clone());
    let won = taskmesh_metrics::metrics::counter!(
        taskmesh_metrics::names::RAFT_LEADERSHIPS_WON, "shard" => label);
    let (mut known, mut leading) = {
        let l = leadership.borrow();
        (l.leader, l.is_leader)
    };
    let mut first = true;
    loop {
        if !std::mem::take(&mut first) {
            tokio::select! {
                changed = leadership.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    retry = None;
                }
                _ = nudge.notified() => {}
                _ = tokio::time::sleep_until(next), if retry.is_some() => {}
            }
        }
        let now = leadership.borrow_and_update().clone();
        if let (Some(before), Some(after)) = (known, now.leader) {
            if before != after {
                changes.increment(1);
            }
        }
        if now.is_leader && !leading {
            won.increment(1);
        }
        (known, leading) = (now.leader.or(known), now.is_leader);
        if !now.is_leader {
            stop_shard_actors(&host, shard.shard_id());
            retry = None;
            continue;
        }
        let full =
            caught_up != Some(now.term) || last_full.is_none_or(|at| at.elapsed() >= full_every);
        if reconcile(&host, &shard, now.term, &mut caught_up, full).await {
            if full {
                last_full = Some(tokio::time::Instant::now());
            }
            retry = None;
        } else {
            let pause = retry.map_or(retry_min, |p| (p * 2).min(retry_max));
            retry = Some(pause);
            next = tokio::time::Instant::now() + pause;
        }
    }
}

pub(crate) fn stop_shard_actors(host: &Host, shard_id: u32) {
    let actors: Vec<_> = host
        .inner
        .actors
        .lock()
        .values()
        .filter(|r| r.shard == shard_id)
        .map(|r| r.actor.clone())
        .collect();
    for a in actors {
        a.stop(Some("leadership moved".into()));
    }
}

/// One reconciler pass as the shard's leader in `term`. Returns false when it could not finish
/// (the shard could not be read or written as its leader): the next pass comes sooner. A
/// `full` pass (the first of a term, then every `tasks.reconcile_full_interval_ms`) checks
/// every live task and every execution of the shard here; the others only the suspects, the
/// tasks whose execution here ended or never began since the last pass.
///
/// The first pass of a term reads through the linearizable read, which waits until everything
/// committed before this leadership (the previous leader's last creates among it) is applied
/// here, and records the term in `caught_up`; later passes of that term read the leader's
/// memory, which holds every later write (the leader applies each before acknowledging it), so
/// they neither cost a round trip nor wake a quiescent group.
async fn reconcile(
    host: &Host,
    shard: &ShardReplica,
    term: u64,
    caught_up: &mut Option<u64>,
    full: bool,
) -> bool {
    // The tasks whose execution here ended or never began since the last pass: a full pass
    // looks at them with the others, a light one at them alone.
    let suspects: Vec<String> = host
        .inner
        .suspects
        .lock()
        .remove(&shard.shard_id())
        .map(|s| s.into_iter().collect())
        .unwrap_or_default();
    if !full {
        return reconcile_suspects(host, shard, term, suspects).await;
    }
    let live_of = |s: &taskmesh_task::ShardState| -> Vec<(String, u64)> {
        s.live().map(|r| (r.task_id.clone(), r.exec_term)).collect()
    };
    let live = if *caught_up == Some(term) {
        shard.read_local(live_of)
    } else {
        match shard.read(live_of).await {
            Ok(live) => {
                *caught_up = Some(term);
                live
            }
            Err(e) => {
                tracing::debug!(shard = shard.shard_id(), error = %e, "reconcile skipped: not readable as leader");
                give_back(host, shard.shard_id(), suspects);
                return false;
            }
        }
    };
    let mut count = Counts::default();
    for (task_id, exec_term) in live {
        if !run_if_missing(host, shard, &task_id, exec_term, term, &mut count).await {
            return false;
        }
    }
    count.log(shard.shard_id(), term);
    // Actors whose task is no longer live here.
    let ours: Vec<(String, ActorRef<TaskMsg>)> = host
        .inner
        .actors
        .lock()
        .iter()
        .filter(|(_, r)| r.shard == shard.shard_id())
        .map(|(id, r)| (id.clone(), r.actor.clone()))
        .collect();
    let mut stopped = 0usize;
    for (task_id, actor) in ours {
        let live = shard.read_local(|s| s.get(&task_id).is_some_and(|r| !r.status.is_terminal()));
        if !live {
            stop_not_live(shard, &task_id, &actor);
            stopped += 1;
        }
    }
    if stopped > 0 {
        tracing::info!(
            shard = shard.shard_id(),
            stopped,
            "executions of tasks no longer live stopped"
        );
    }
    true
}

/// A light pass: only `suspects`, each run by its resume policy if it is live without an
/// execution here, its execution stopped if it is not live. Their cost is that of the tasks
/// that ended or began since the last pass, not of the shard's live tasks.
async fn reconcile_suspects(
    host: &Host,
    shard: &ShardReplica,
    term: u64,
    suspects: Vec<String>,
) -> bool {
    if suspects.is_empty() {
        return true;
    }
    let found: Vec<(String, Option<u64>)> = shard.read_local(|s| {
        suspects
            .into_iter()
            .map(|id| {
                let live = s
                    .get(&id)
                    .filter(|r| !r.status.is_terminal())
                    .map(|r| r.exec_term);
                (id, live)
            })
            .collect()
    });
    let mut count = Counts::default();
    let mut left = found.into_iter();
    while let Some((task_id, live)) = left.next() {
        match live {
            Some(exec_term) => {
                if !run_if_missing(host, shard, &task_id, exec_term, term, &mut count).await {
                    let rest = std::iter::once(task_id).chain(left.map(|(id, _)| id));
                    give_back(host, shard.shard_id(), rest.collect());
                    return false;
                }
            }
            None => {
                let ours = host
                    .inner
                    .actors
                    .lock()
                    .get(&task_id)
                    .filter(|r| r.shard == shard.shard_id())
                    .map(|r| r.actor.clone());
                if let Some(actor) = ours {
                    stop_not_live(shard, &task_id, &actor);
                }
            }
        }
    }
    count.log(shard.shard_id(), term);
    true
}

/// Put `suspects` back for the next pass (this one could not finish).
fn give_back(host: &Host, shard: u32, suspects: Vec<String>) {
    if !suspects.is_empty() {
        host.inner
            .suspects
            .lock()
            .entry(shard)
            .or_default()
            .extend(suspects);
    }
}

fn stop_not_live(shard: &ShardReplica, task_id: &str, actor: &ActorRef<TaskMsg>) {
    tracing::debug!(task_id = %task_id, shard = shard.shard_id(), "stopping the execution of a task that is no longer live");
    actor.stop(Some("the task is no longer live".into()));
}

/// Take-overs of one pass, logged once for the shard: a restart may resume many thousands of
/// tasks.
#[derive(Default)]
struct Counts {
    resumed: usize,
    failed: usize,
}

impl Counts {
    fn log(&self, shard: u32, term: u64) {
        if self.resumed + self.failed > 0 {
            tracing::info!(
                shard,
                term,
                resumed = self.resumed,
                failed = self.failed,
                "task executions taken over (resumed, or failed by their resume policy)"
            );
        }
    }
}

/// Run the live task `task_id` (of execution term `exec_term`) by its resume policy unless an
/// execution of that term or a newer one runs here or its create is spawning one; an older
/// execution is stopped first. `false` when the shard refused the write (the pass stops).
async fn run_if_missing(
    host: &Host,
    shard: &ShardReplica,
    task_id: &str,
    exec_term: u64,
    term: u64,
    count: &mut Counts,
) -> bool {
    if host.inner.starting.lock().contains(task_id) {
        return true; // its create spawns the actor
    }
    let running = host
        .inner
        .actors
        .lock()
        .get(task_id)
        .map(|r| (r.term, r.actor.clone()));
    match running {
        Some((actor_term, _)) if actor_term >= exec_term => return true,
        // An execution of an older term than the record's: a newer one took it over.
        Some((_, stale)) => stale.stop(Some("a newer execution owns the task".into())),
        None => {}
    }
    match take_over(host, shard, task_id, term).await {
        TakenOver::Resumed => count.resumed += 1,
        TakenOver::Failed => count.failed += 1,
        TakenOver::Nothing => {}
        TakenOver::Refused => return false,
    }
    true
}

/// What a take-over did.
enum TakenOver {
    /// The execution runs again (or follows its upstream task again).
    Resumed,
    /// The task failed by its resume policy (or its tool is gone).
    Failed,
    /// Nothing to do: the task expired, or changed meanwhile.
    Nothing,
    /// The shard refused the write; the next pass tries again.
    Refused,
}

/// Run the live task `task_id`, whose execution does not run here, by its tool's resume
/// policy: `rerun` proposes `Resume` under `term` and spawns its actor, `fail` (or a tool that
/// is no longer configured) finishes it as `failed` with a message that says why. A task whose
/// call an upstream server runs as its own task (`upstream_task`) is resumed whatever the
/// policy: its new execution follows that task. A resumed
/// task takes a live-task slot even past `tasks.max_live_tasks`: it was admitted when it was
/// created, and refusing it would leave it without an execution.
async fn take_over(host: &Host, shard: &ShardReplica, task_id: &str, term: u64) -> TakenOver {
    let Some(record) = shard.read_local(|s| s.get(task_id).cloned()) else {
        return TakenOver::Nothing; // expired meanwhile
    };
    if record.status.is_terminal() {
        return TakenOver::Nothing;
    }
    let tool = match &record.worker {
        // Its execution waits for a worker whether or not one serves the tool now.
        Some(job) => Some(
            host.inner
                .tools
                .get(&record.request.tool)
                .filter(|t| t.runs_on_workers())
                .unwrap_or_else(|| crate::workers::placeholder(&record.request.tool, job.rerun)),
        ),
        None => host.inner.tools.get(&record.request.tool),
    };
    let policy = tool.as_ref().map(|t| t.spec().resume);
    let cmd = match policy {
        // A worker runs it: a held lease stays held (the new execution watches its deadline),
        // a queued task is queued here again; the resume policy applies when a lease runs out.
        Some(_) if record.worker.is_some() => Command::Resume {
            task_id: record.task_id.clone(),
            term,
            message: record.status_message.clone(),
            at_ms: now_ms(),
        },
        // The upstream runs the call as its own task: follow it again, whatever the policy
        // (nothing runs twice).
        Some(_) if record.upstream_task.is_some() => Command::Resume {
            task_id: record.task_id.clone(),
            term,
            message: Some(
                "The execution was interrupted (node restart or failover); following the upstream task again."
                    .into(),
            ),
            at_ms: now_ms(),
        },
        Some(ResumePolicy::Rerun) => Command::Resume {
            task_id: record.task_id.clone(),
            term,
            message: Some(
                "The execution was interrupted (node restart or failover) and started again."
                    .into(),
            ),
            at_ms: now_ms(),
        },
        _ => {
            let why = match policy {
                Some(_) => {
                    let waited = record.client_task.as_ref().map_or(String::new(), |c| {
                        format!(
                            " It was waiting on the client's task {} ({}), which stays with the client.",
                            c.task_id, c.method
                        )
                    });
                    format!(
                        "The execution was interrupted by a node restart or failover; tool '{}' has resume policy 'fail', so it was not run again.{waited}",
                        record.request.tool
                    )
                }
                None => format!(
                    "The execution was interrupted and tool '{}' is no longer configured.",
                    record.request.tool
                ),
            };
            Command::Finish {
                task_id: record.task_id.clone(),
                term,
                status: TaskStatus::Failed,
                message: Some(why.clone()),
                outcome: Outcome::Error {
                    code: taskmesh_mcp::jsonrpc::INTERNAL_ERROR,
                    message: why,
                    data_json: None,
                },
                at_ms: now_ms(),
            }
        }
    };
    match shard.propose(cmd).await {
        Ok(Applied::Updated { record }) if !record.status.is_terminal() => {
            let Some(tool) = tool else {
                return TakenOver::Nothing;
            };
            tracing::debug!(task_id = %record.task_id, shard = shard.shard_id(), term, "task execution resumed");
            actor::spawn(host.clone(), shard.shard_id(), record, term, tool, false).await;
            TakenOver::Resumed
        }
        Ok(Applied::Updated { record }) => {
            crate::audit_terminal(host, &record, "task failed by its resume policy");
            TakenOver::Failed
        }
        Ok(other) => {
            tracing::debug!(task_id = %record.task_id, result = ?other, "take-over skipped");
            TakenOver::Nothing
        }
        Err(e) => {
            tracing::warn!(shard = shard.shard_id(), task_id = %record.task_id, error = %e, "take-over refused; the reconciler tries again");
            TakenOver::Refused
        }
    }
}
