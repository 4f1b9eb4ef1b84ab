//! Tasks whose work a worker runs: what the record keeps of them (the [`WorkerJob`] and its
//! [`Lease`]) and the rules of the lease commands ([`crate::Command::Grant`], `Renew`,
//! `Complete`, `Release`), pure like the rest of the state machine.
//!
//! A worker task waits in its shard leader's queue until a worker polls for its tool; the
//! grant writes the lease (holder, token, attempt, deadline) into the record through the log,
//! so that a new leader after a failover knows who holds the task and until when. Only the
//! lease's token completes or renews it, and only before its deadline (the proposer's clock):
//! a worker whose lease ran out, or a second worker holding a later lease, cannot complete
//! the task again. The execution on the leader releases a lease whose deadline passed and
//! decides by the tool's resume policy.

use serde::{Deserialize, Serialize};

use crate::{Rejection, TaskRecord};

/// What the record keeps of a task whose work a worker runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerJob {
    /// Whether a lease that runs out offers the task again (resume policy `rerun`); otherwise
    /// the task fails (`fail`).
    pub rerun: bool,
    /// How many leases were granted so far: the attempt number of the current (or last) lease.
    #[serde(default)]
    pub attempts: u32,
    /// The lease a worker holds now; `None` while the task waits for a worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Lease>,
}

/// A worker's hold on a task: only its token completes or renews it, and only before its
/// deadline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The worker identity (its credential's) that holds it: only that identity may use it.
    pub holder: String,
    /// The registration that took it (for operators; a worker that reconnects keeps its
    /// leases under a new registration).
    pub worker_id: String,
    /// The secret that fences the lease: at least 128 random bits, as lowercase hex.
    pub token: String,
    /// Which attempt this is, from 1.
    pub attempt: u32,
    /// When the lease runs out unless renewed, in ms since the Unix epoch.
    pub deadline_ms: u64,
}

/// The live lease of `r` with `token` at `at_ms`, or why there is none.
pub(crate) fn live_lease<'a>(
    r: &'a TaskRecord,
    token: &str,
    at_ms: u64,
) -> Result<&'a Lease, Rejection> {
    match r.worker.as_ref().and_then(|w| w.lease.as_ref()) {
        Some(l) if l.token == token && at_ms <= l.deadline_ms => Ok(l),
        _ => Err(Rejection::StaleLease),
    }
}

/// Whether `lease` may be granted on `r` now: a worker task without a lease, whose next attempt
/// the lease is.
pub(crate) fn check_grant(r: &TaskRecord, lease: &Lease) -> Result<(), Rejection> {
    let Some(job) = &r.worker else {
        return Err(Rejection::Invalid("the task is not run by a worker".into()));
    };
    if job.lease.is_some() {
        return Err(Rejection::StaleLease);
    }
    if lease.attempt != job.attempts.saturating_add(1) {
        return Err(Rejection::Invalid(format!(
            "lease for attempt {} granted after {} attempts",
            lease.attempt, job.attempts
        )));
    }
    Ok(())
}

/// Whether the lease with `token` may be released at `at_ms`: it is the current one and its
/// deadline has passed (a renewal that came first wins).
pub(crate) fn check_release(r: &TaskRecord, token: &str, at_ms: u64) -> Result<(), Rejection> {
    match r.worker.as_ref().and_then(|w| w.lease.as_ref()) {
        Some(l) if l.token == token && at_ms > l.deadline_ms => Ok(()),
        _ => Err(Rejection::StaleLease),
    }
}

#[cfg(test)]
mod tests;
