//! The lease commands (`Grant`, `Renew`, `Complete`, `Release`) applied to a shard's state.

use super::*;
use crate::{Applied, Command, Outcome, Rejection, ShardState, TaskRecord, TaskStatus, WorkerJob};

fn worker_record(id: &str, rerun: bool) -> TaskRecord {
    TaskRecord {
        worker: Some(WorkerJob {
            rerun,
            attempts: 0,
            lease: None,
        }),
        ..TaskRecord::sample(id)
    }
}

fn lease(token: &str, attempt: u32, deadline_ms: u64) -> Lease {
    Lease {
        holder: "billing".into(),
        worker_id: "w1".into(),
        token: token.into(),
        attempt,
        deadline_ms,
    }
}

fn grant(id: &str, token: &str, attempt: u32, deadline_ms: u64) -> Command {
    Command::Grant {
        task_id: id.into(),
        term: 1,
        lease: lease(token, attempt, deadline_ms),
        at_ms: 1_500,
    }
}

fn complete(id: &str, token: &str, at_ms: u64) -> Command {
    Command::Complete {
        task_id: id.into(),
        token: token.into(),
        status: TaskStatus::Completed,
        message: None,
        outcome: Outcome::Result {
            json: "{\"content\":[]}".into(),
        },
        at_ms,
    }
}

fn release(id: &str, token: &str, at_ms: u64) -> Command {
    Command::Release {
        task_id: id.into(),
        term: 1,
        token: token.into(),
        message: Some("lost".into()),
        at_ms,
    }
}

fn state_with(id: &str) -> ShardState {
    let mut s = ShardState::new();
    s.apply(
        &Command::Create {
            record: worker_record(id, true),
        },
        1,
    );
    s
}

fn lease_of(s: &ShardState, id: &str) -> Option<Lease> {
    s.get(id).unwrap().worker.as_ref().unwrap().lease.clone()
}

#[test]
fn a_grant_records_the_lease_and_counts_the_attempt() {
    let mut s = state_with("a");
    assert!(matches!(
        s.apply(&grant("a", "t1", 1, 5_000), 2),
        Applied::Updated { .. }
    ));
    assert_eq!(lease_of(&s, "a").unwrap().token, "t1");
    assert_eq!(s.get("a").unwrap().worker.as_ref().unwrap().attempts, 1);
    // A second grant while leased, or out of attempt order, changes nothing.
    assert_eq!(
        s.apply(&grant("a", "t2", 2, 5_000), 3),
        Applied::Rejected(Rejection::StaleLease)
    );
    assert_eq!(lease_of(&s, "a").unwrap().token, "t1");
}

#[test]
fn grants_are_refused_on_tasks_no_worker_runs_and_out_of_order() {
    let mut s = ShardState::new();
    s.apply(
        &Command::Create {
            record: TaskRecord::sample("b"),
        },
        1,
    );
    assert!(matches!(
        s.apply(&grant("b", "t", 1, 5_000), 2),
        Applied::Rejected(Rejection::Invalid(_))
    ));
    let mut s = state_with("a");
    assert!(matches!(
        s.apply(&grant("a", "t", 2, 5_000), 2),
        Applied::Rejected(Rejection::Invalid(_))
    ));
    assert_eq!(lease_of(&s, "a"), None);
}

#[test]
fn only_the_live_lease_completes_and_only_once() {
    let mut s = state_with("a");
    s.apply(&grant("a", "t1", 1, 5_000), 2);
    // Wrong token, or past the deadline: refused, nothing changed.
    assert_eq!(
        s.apply(&complete("a", "other", 2_000), 3),
        Applied::Rejected(Rejection::StaleLease)
    );
    assert_eq!(
        s.apply(&complete("a", "t1", 5_001), 4),
        Applied::Rejected(Rejection::StaleLease)
    );
    assert_eq!(s.get("a").unwrap().status, TaskStatus::Working);
    match s.apply(&complete("a", "t1", 5_000), 5) {
        Applied::Updated { record } => {
            assert_eq!(record.status, TaskStatus::Completed);
            assert!(record.outcome.is_some());
            assert_eq!(record.worker.unwrap().lease, None);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        s.apply(&complete("a", "t1", 2_000), 6),
        Applied::Rejected(Rejection::Terminal(TaskStatus::Completed))
    );
}

#[test]
fn a_cancelled_task_refuses_its_workers_completion() {
    let mut s = state_with("a");
    s.apply(&grant("a", "t1", 1, 5_000), 2);
    let cancel = Command::Cancel {
        task_id: "a".into(),
        message: "cancelled".into(),
        at_ms: 2_000,
    };
    s.apply(&cancel, 3);
    assert_eq!(
        s.apply(&complete("a", "t1", 2_500), 4),
        Applied::Rejected(Rejection::Terminal(TaskStatus::Cancelled))
    );
    assert_eq!(s.get("a").unwrap().outcome, None);
}

#[test]
fn a_renewal_extends_and_never_shortens_the_lease() {
    let mut s = state_with("a");
    s.apply(&grant("a", "t1", 1, 5_000), 2);
    let renew = |deadline_ms, at_ms, token: &str| Command::Renew {
        task_id: "a".into(),
        token: token.into(),
        deadline_ms,
        message: Some("half way".into()),
        at_ms,
    };
    assert!(matches!(
        s.apply(&renew(9_000, 4_000, "t1"), 3),
        Applied::Updated { .. }
    ));
    assert_eq!(lease_of(&s, "a").unwrap().deadline_ms, 9_000);
    assert_eq!(
        s.get("a").unwrap().status_message.as_deref(),
        Some("half way")
    );
    assert!(matches!(
        s.apply(&renew(7_000, 4_500, "t1"), 4),
        Applied::Updated { .. }
    ));
    assert_eq!(lease_of(&s, "a").unwrap().deadline_ms, 9_000);
    // Too late, or another lease's token: refused.
    assert_eq!(
        s.apply(&renew(20_000, 9_001, "t1"), 5),
        Applied::Rejected(Rejection::StaleLease)
    );
    assert_eq!(
        s.apply(&renew(20_000, 5_000, "t0"), 6),
        Applied::Rejected(Rejection::StaleLease)
    );
    assert_eq!(lease_of(&s, "a").unwrap().deadline_ms, 9_000);
}

#[test]
fn a_release_takes_back_only_a_run_out_lease_and_fences_the_old_holder() {
    let mut s = state_with("a");
    s.apply(&grant("a", "t1", 1, 5_000), 2);
    // Not yet run out: a renewal that came first wins.
    assert_eq!(
        s.apply(&release("a", "t1", 5_000), 3),
        Applied::Rejected(Rejection::StaleLease)
    );
    assert!(matches!(
        s.apply(&release("a", "t1", 5_001), 4),
        Applied::Updated { .. }
    ));
    assert_eq!(lease_of(&s, "a"), None);
    // The next attempt's lease; the first holder's late completion is refused.
    assert!(matches!(
        s.apply(&grant("a", "t2", 2, 9_000), 5),
        Applied::Updated { .. }
    ));
    assert_eq!(
        s.apply(&complete("a", "t1", 5_002), 6),
        Applied::Rejected(Rejection::StaleLease)
    );
    assert!(matches!(
        s.apply(&complete("a", "t2", 6_000), 7),
        Applied::Updated { .. }
    ));
}
