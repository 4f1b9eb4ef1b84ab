use proptest::prelude::*;

use super::*;
use crate::Outcome;

fn record(id: &str, owner: &str, ttl_ms: Option<u64>) -> TaskRecord {
    TaskRecord {
        owner: owner.into(),
        ttl_ms,
        ..TaskRecord::sample(id)
    }
}

fn finish(id: &str, term: u64, status: TaskStatus) -> Command {
    Command::Finish {
        task_id: id.into(),
        term,
        status,
        message: None,
        outcome: Outcome::Result {
            json: "{\"content\":[]}".into(),
        },
        at_ms: 2_000,
    }
}

fn cancel(id: &str) -> Command {
    Command::Cancel {
        task_id: id.into(),
        message: "cancelled".into(),
        at_ms: 2_000,
    }
}

#[test]
fn create_is_idempotent() {
    let mut s = ShardState::new();
    let a = s.apply(
        &Command::Create {
            record: record("a", "p", None),
        },
        1,
    );
    assert!(matches!(a, Applied::Created { fresh: true, .. }));
    s.apply(&finish("a", 1, TaskStatus::Completed), 2);
    let mut again = record("a", "p", None);
    again.request.tool = "other".into();
    match s.apply(&Command::Create { record: again }, 3) {
        Applied::Created { record, fresh } => {
            assert!(!fresh);
            assert_eq!(record.status, TaskStatus::Completed);
            assert_eq!(record.request.tool, "slow_compute");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(s.len(), 1);
}

#[test]
fn an_import_inserts_only_what_is_missing_and_frees_live_executions() {
    let mut s = ShardState::new();
    s.apply(
        &Command::Create {
            record: record("held", "p", None),
        },
        1,
    );
    let mut done = record("done", "q", Some(60_000));
    done.status = TaskStatus::Completed;
    done.exec_term = 7;
    done.outcome = Some(Outcome::Result {
        json: "{\"content\":[]}".into(),
    });
    let mut live = record("live", "p", None);
    live.exec_term = 9;
    live.status = TaskStatus::InputRequired;
    let mut other = record("held", "p", None);
    other.status = TaskStatus::Failed;
    let import = Command::Import {
        records: vec![done.clone(), live.clone(), other],
    };
    let Applied::Imported { records } = s.apply(&import, 5) else {
        panic!("not imported");
    };
    let ids: Vec<&str> = records.iter().map(|r| r.task_id.as_str()).collect();
    assert_eq!(ids, ["done", "live"], "the held record is left alone");
    // A terminal record keeps everything but its index; a live one can be taken over.
    let got = s.get("done").unwrap();
    assert_eq!(
        (got.status, got.exec_term, got.updated_index),
        (TaskStatus::Completed, 7, 5)
    );
    assert_eq!(got.outcome, done.outcome);
    let got = s.get("live").unwrap();
    assert_eq!((got.status, got.exec_term), (TaskStatus::InputRequired, 0));
    assert!(s.live().any(|r| r.task_id == "live"));
    assert_eq!(s.get("held").unwrap().status, TaskStatus::Working);
    // Expiry and listing know the imported records.
    assert_eq!(
        s.expired(done.created_at_ms + 60_000, 10),
        vec!["done".to_string()]
    );
    assert_eq!(s.list("q", None, 10, 0).len(), 1);
    // The same import again inserts nothing.
    assert_eq!(s.apply(&import, 6), Applied::Imported { records: vec![] });
}

#[test]
fn export_pages_cover_every_record_once_in_owner_and_id_order() {
    let mut s = ShardState::new();
    let mut want = Vec::new();
    for i in 0..57 {
        let owner = format!("p{}", i % 3);
        let id = format!("t{i:03}");
        s.apply(
            &Command::Create {
                record: record(&id, &owner, None),
            },
            i + 1,
        );
        want.push((owner, id));
    }
    want.sort();
    let mut got = Vec::new();
    let mut after: Option<(String, String)> = None;
    let mut pages = 0;
    loop {
        let cursor = after.as_ref().map(|(o, t)| (o.as_str(), t.as_str()));
        let (page, done) = s.export_page(cursor, 10, usize::MAX);
        pages += 1;
        assert!(page.len() <= 10);
        for r in &page {
            got.push((r.owner.clone(), r.task_id.clone()));
        }
        after = got.last().cloned();
        if done {
            break;
        }
    }
    assert_eq!(got, want);
    assert_eq!(pages, 6);
    // A byte bound ends a page early, but never before its first record.
    let (page, done) = s.export_page(None, 10, 1);
    assert_eq!((page.len(), done), (1, false));
    let (page, done) = ShardState::new().export_page(None, 10, usize::MAX);
    assert!(page.is_empty() && done);
}

#[test]
fn cancelled_beats_a_late_completion() {
    let mut s = ShardState::new();
    s.apply(
        &Command::Create {
            record: record("a", "p", None),
        },
        1,
    );
    assert!(matches!(s.apply(&cancel("a"), 2), Applied::Updated { .. }));
    assert_eq!(
        s.apply(&finish("a", 1, TaskStatus::Completed), 3),
        Applied::Rejected(Rejection::Terminal(TaskStatus::Cancelled))
    );
    assert_eq!(
        s.apply(&cancel("a"), 4),
        Applied::Rejected(Rejection::Terminal(TaskStatus::Cancelled))
    );
    assert_eq!(s.get("a").unwrap().status, TaskStatus::Cancelled);
    assert_eq!(s.get("a").unwrap().outcome, None);
}

#[test]
fn an_old_term_cannot_change_a_resumed_task() {
    let mut s = ShardState::new();
    s.apply(
        &Command::Create {
            record: record("a", "p", None),
        },
        1,
    );
    let resume = Command::Resume {
        task_id: "a".into(),
        term: 3,
        message: Some("resumed".into()),
        at_ms: 1_500,
    };
    assert!(matches!(s.apply(&resume, 2), Applied::Updated { .. }));
    assert_eq!(
        s.apply(&finish("a", 1, TaskStatus::Completed), 3),
        Applied::Rejected(Rejection::StaleTerm {
            proposed: 1,
            current: 3
        })
    );
    assert!(matches!(
        s.apply(&finish("a", 3, TaskStatus::Failed), 4),
        Applied::Updated { .. }
    ));
}

#[test]
fn the_upstream_task_is_recorded_by_the_current_execution_only() {
    let mut s = ShardState::new();
    s.apply(
        &Command::Create {
            record: record("a", "p", None),
        },
        1,
    );
    let follow = |term: u64, id: &str| Command::Follow {
        task_id: "a".into(),
        term,
        upstream_task: id.into(),
        message: Some("followed".into()),
        at_ms: 1_100,
    };
    let Applied::Updated { record } = s.apply(&follow(1, "up-1"), 2) else {
        panic!("the current execution records its upstream task");
    };
    assert_eq!(record.upstream_task.as_deref(), Some("up-1"));
    assert_eq!(record.status, TaskStatus::Working);
    assert_eq!(record.status_message.as_deref(), Some("followed"));
    let resume = Command::Resume {
        task_id: "a".into(),
        term: 2,
        message: None,
        at_ms: 1_200,
    };
    let Applied::Updated { record } = s.apply(&resume, 3) else {
        panic!("resumed");
    };
    assert_eq!(
        record.upstream_task.as_deref(),
        Some("up-1"),
        "a new execution finds the upstream task to follow"
    );
    assert_eq!(
        s.apply(&follow(1, "up-old"), 4),
        Applied::Rejected(Rejection::StaleTerm {
            proposed: 1,
            current: 2
        })
    );
    s.apply(&finish("a", 2, TaskStatus::Completed), 5);
    assert_eq!(
        s.apply(&follow(2, "up-late"), 6),
        Applied::Rejected(Rejection::Terminal(TaskStatus::Completed))
    );
    assert_eq!(s.get("a").unwrap().upstream_task.as_deref(), Some("up-1"));
}

#[test]
fn expiry_deletes_only_expired_records() {
    let mut s = ShardState::new();
    s.apply(
        &Command::Create {
            record: record("a", "p", Some(500)),
        },
        1,
    );
    s.apply(
        &Command::Create {
            record: record("b", "p", Some(5_000)),
        },
        2,
    );
    s.apply(
        &Command::Create {
            record: record("c", "p", None),
        },
        3,
    );
    assert_eq!(s.expired(1_499, 10), Vec::<String>::new());
    assert_eq!(s.expired(1_500, 10), vec!["a".to_string()]);
    let applied = s.apply(
        &Command::Expire {
            task_ids: vec!["a".into(), "b".into(), "c".into()],
            now_ms: 1_500,
        },
        4,
    );
    assert_eq!(
        applied,
        Applied::Expired {
            task_ids: vec!["a".into()]
        }
    );
    assert!(s.get("a").is_none());
    assert!(s.get("b").is_some() && s.get("c").is_some());
}

#[test]
fn list_is_scoped_paged_and_skips_expired() {
    let mut s = ShardState::new();
    for (i, id) in ["d", "a", "c", "b"].iter().enumerate() {
        s.apply(
            &Command::Create {
                record: record(id, "p", None),
            },
            i as u64 + 1,
        );
    }
    s.apply(
        &Command::Create {
            record: record("e", "q", None),
        },
        9,
    );
    s.apply(
        &Command::Create {
            record: record("f", "p", Some(1)),
        },
        10,
    );
    let ids = |v: Vec<&TaskRecord>| v.iter().map(|r| r.task_id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(s.list("p", None, 2, 5_000)), ["a", "b"]);
    assert_eq!(ids(s.list("p", Some("b"), 10, 5_000)), ["c", "d"]);
    assert_eq!(ids(s.list("q", None, 10, 5_000)), ["e"]);
    assert_eq!(ids(s.list("p", Some("e"), 10, 1_000)), ["f"]);
}

fn arb_command() -> impl Strategy<Value = Command> {
    let id = prop::sample::select(vec!["a", "b", "c"]);
    let live = prop::sample::select(vec![TaskStatus::Working, TaskStatus::InputRequired]);
    let done = prop::sample::select(vec![TaskStatus::Completed, TaskStatus::Failed]);
    prop_oneof![
        (id.clone(), prop::option::of(0u64..3_000)).prop_map(|(id, ttl)| Command::Create {
            record: record(id, "p", ttl)
        }),
        (id.clone(), 0u64..4, live, 0u64..5_000).prop_map(|(id, term, status, at_ms)| {
            Command::SetStatus {
                task_id: id.into(),
                term,
                status,
                message: None,
                at_ms,
            }
        }),
        (id.clone(), 0u64..4, done).prop_map(|(id, term, st)| finish(id, term, st)),
        id.clone().prop_map(cancel),
        (id.clone(), 0u64..4).prop_map(|(id, term)| Command::Resume {
            task_id: id.into(),
            term,
            message: None,
            at_ms: 1_200,
        }),
        (id.clone(), 0u64..4).prop_map(|(id, term)| Command::Follow {
            task_id: id.into(),
            term,
            upstream_task: format!("up-{term}"),
            message: None,
            at_ms: 1_300,
        }),
        (0u64..6_000).prop_map(|now_ms| Command::Expire {
            task_ids: vec!["a".into(), "b".into(), "c".into()],
            now_ms,
        }),
    ]
}

proptest! {
    /// Over any command sequence: terminal statuses and their outcomes never change while the
    /// record exists, `cancelled` is never overwritten, the change index only grows, records
    /// disappear only by expiry, and the indexes agree with the records.
    #[test]
    fn state_machine_invariants(cmds in prop::collection::vec(arb_command(), 1..60)) {
        let mut s = ShardState::new();
        for (i, cmd) in cmds.iter().enumerate() {
            let before = s.clone();
            let applied = s.apply(cmd, i as u64 + 1);
            for old in before.records() {
                match s.get(&old.task_id) {
                    None => {
                        let by_expiry = matches!(cmd, Command::Expire { now_ms, .. } if old.is_expired(*now_ms));
                        prop_assert!(by_expiry, "record vanished without expiry");
                    }
                    Some(new) => {
                        // A changed record carries this entry's index; an unchanged one its own.
                        if new != old {
                            prop_assert_eq!(new.updated_index, i as u64 + 1);
                        } else {
                            prop_assert_eq!(new.updated_index, old.updated_index);
                        }
                        prop_assert!(new.last_updated_at_ms >= old.last_updated_at_ms);
                        prop_assert_eq!(new.created_at_ms, old.created_at_ms);
                        if old.status.is_terminal() {
                            prop_assert_eq!(new, old);
                        }
                    }
                }
            }
            if let Applied::Rejected(_) = applied {
                prop_assert_eq!(s.len(), before.len());
                for old in before.records() {
                    prop_assert_eq!(Some(old), s.get(&old.task_id));
                }
            }
            prop_assert_eq!(s.by_owner.len(), s.tasks.len());
            let expiring = s.tasks.values().filter(|r| r.ttl_ms.is_some()).count();
            prop_assert_eq!(s.by_expiry.len(), expiring);
            let live: BTreeSet<&str> = s
                .tasks
                .values()
                .filter(|r| !r.status.is_terminal())
                .map(|r| r.task_id.as_str())
                .collect();
            prop_assert_eq!(s.live.iter().map(String::as_str).collect::<BTreeSet<_>>(), live);
        }
    }
}

#[test]
fn the_client_task_is_recorded_and_cleared_by_the_current_execution_only() {
    let mut s = ShardState::new();
    s.apply(
        &Command::Create {
            record: record("a", "p", None),
        },
        1,
    );
    let waiting = crate::ClientTask {
        key: "elicitation/create#1".into(),
        method: "elicitation/create".into(),
        task_id: "client-1".into(),
    };
    let follow = |term: u64, c: Option<crate::ClientTask>| Command::FollowClient {
        task_id: "a".into(),
        term,
        client_task: c,
        message: Some("waiting".into()),
        at_ms: 1_100,
    };
    let Applied::Updated { record } = s.apply(&follow(1, Some(waiting.clone())), 2) else {
        panic!("the current execution records its client task");
    };
    assert_eq!(record.client_task.as_ref(), Some(&waiting));
    assert_eq!(record.status_message.as_deref(), Some("waiting"));
    let resume = Command::Resume {
        task_id: "a".into(),
        term: 2,
        message: None,
        at_ms: 1_200,
    };
    let Applied::Updated { record } = s.apply(&resume, 3) else {
        panic!("resumed");
    };
    assert_eq!(
        record.client_task.as_ref(),
        Some(&waiting),
        "a new execution finds the client task to follow"
    );
    assert_eq!(
        s.apply(&follow(1, None), 4),
        Applied::Rejected(Rejection::StaleTerm {
            proposed: 1,
            current: 2
        })
    );
    let Applied::Updated { record } = s.apply(&follow(2, None), 5) else {
        panic!("cleared by the current execution");
    };
    assert_eq!(record.client_task, None);
}

mod events;
