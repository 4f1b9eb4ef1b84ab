//! The outbox rules applied through a shard's state: what a status change owes, what `Watch`
//! and `Settle` change, and what they leave alone.

use super::*;
use crate::{Applied, Command, Outcome, ShardState, TaskRecord};

fn state_with(id: &str) -> ShardState {
    let mut s = ShardState::new();
    let created = s.apply(
        &Command::Create {
            record: TaskRecord::sample(id),
        },
        1,
    );
    assert!(matches!(created, Applied::Created { fresh: true, .. }));
    s
}

fn watch(s: &mut ShardState, id: &str, sub: &str, index: u64) -> Applied {
    s.apply(
        &Command::Watch {
            task_id: id.into(),
            watcher: Watcher::every_change(sub),
        },
        index,
    )
}

fn settle(s: &mut ShardState, id: &str, pairs: &[(u64, &str)], unwatch: &[&str], index: u64) {
    let applied = s.apply(
        &Command::Settle {
            settled: vec![Settlement {
                task_id: id.into(),
                events: pairs.iter().map(|(i, s)| (*i, (*s).to_owned())).collect(),
                unwatch: unwatch.iter().map(|s| (*s).to_owned()).collect(),
            }],
        },
        index,
    );
    assert!(matches!(applied, Applied::Settled { .. }), "{applied:?}");
}

fn set_status(s: &mut ShardState, id: &str, status: TaskStatus, index: u64) -> Applied {
    s.apply(
        &Command::SetStatus {
            task_id: id.into(),
            term: 1,
            status,
            message: Some(format!("now {status:?}")),
            at_ms: 2_000 + index,
        },
        index,
    )
}

fn finish(s: &mut ShardState, id: &str, index: u64) -> Applied {
    s.apply(
        &Command::Finish {
            task_id: id.into(),
            term: 1,
            status: TaskStatus::Completed,
            message: None,
            outcome: Outcome::Result {
                json: "{\"content\":[]}".into(),
            },
            at_ms: 9_000,
        },
        index,
    )
}

fn events(s: &ShardState, id: &str) -> Vec<(u64, TaskStatus, Vec<String>)> {
    s.get(id)
        .and_then(|r| r.outbox.as_ref())
        .map(|o| {
            o.events
                .iter()
                .map(|e| (e.index, e.status, e.pending.clone()))
                .collect()
        })
        .unwrap_or_default()
}

fn unsettled_ids(s: &ShardState) -> Vec<String> {
    s.unsettled().map(|r| r.task_id.clone()).collect()
}

#[test]
fn an_unwatched_task_owes_nothing() {
    let mut s = state_with("t");
    set_status(&mut s, "t", TaskStatus::InputRequired, 2);
    finish(&mut s, "t", 3);
    assert!(s.get("t").unwrap().outbox.is_none());
    assert!(unsettled_ids(&s).is_empty());
}

#[test]
fn each_status_change_is_owed_to_the_watchers_of_its_moment() {
    let mut s = state_with("t");
    assert!(matches!(
        watch(&mut s, "t", "a", 2),
        Applied::Updated { .. }
    ));
    // A watch is not a change of the task: its index and time stay.
    assert_eq!(s.get("t").unwrap().updated_index, 1);
    set_status(&mut s, "t", TaskStatus::InputRequired, 3);
    watch(&mut s, "t", "b", 4);
    // A new status message without a new status owes nothing.
    set_status(&mut s, "t", TaskStatus::InputRequired, 5);
    finish(&mut s, "t", 6);
    assert_eq!(
        events(&s, "t"),
        vec![
            (3, TaskStatus::InputRequired, vec!["a".to_owned()]),
            (
                6,
                TaskStatus::Completed,
                vec!["a".to_owned(), "b".to_owned()]
            ),
        ]
    );
    let r = s.get("t").unwrap();
    let last = &r.outbox.as_ref().unwrap().events[1];
    assert_eq!(last.event_id("t"), "t-6");
    assert_eq!(last.at_ms, r.last_updated_at_ms);
    assert_eq!(unsettled_ids(&s), vec!["t".to_owned()]);
}

#[test]
fn a_watcher_of_ends_only_is_owed_the_last_change_alone() {
    let mut s = state_with("t");
    let ends = Watcher {
        id: "ends".into(),
        terminal_only: true,
    };
    let applied = s.apply(
        &Command::Watch {
            task_id: "t".into(),
            watcher: ends,
        },
        2,
    );
    assert!(matches!(applied, Applied::Updated { .. }));
    set_status(&mut s, "t", TaskStatus::InputRequired, 3);
    assert!(events(&s, "t").is_empty());
    assert!(unsettled_ids(&s).is_empty());
    watch(&mut s, "t", "all", 4);
    set_status(&mut s, "t", TaskStatus::Working, 5);
    finish(&mut s, "t", 6);
    assert_eq!(
        events(&s, "t"),
        vec![
            (5, TaskStatus::Working, vec!["all".to_owned()]),
            (
                6,
                TaskStatus::Completed,
                vec!["ends".to_owned(), "all".to_owned()]
            ),
        ]
    );
}

#[test]
fn settling_removes_what_every_watcher_settled_and_nothing_else() {
    let mut s = state_with("t");
    watch(&mut s, "t", "a", 2);
    watch(&mut s, "t", "b", 3);
    set_status(&mut s, "t", TaskStatus::InputRequired, 4);
    finish(&mut s, "t", 5);
    // Settling on a terminal record, a pair twice, and a pair never owed.
    settle(
        &mut s,
        "t",
        &[(4, "a"), (4, "a"), (5, "zzz"), (99, "a")],
        &[],
        6,
    );
    assert_eq!(
        events(&s, "t"),
        vec![
            (4, TaskStatus::InputRequired, vec!["b".to_owned()]),
            (
                5,
                TaskStatus::Completed,
                vec!["a".to_owned(), "b".to_owned()]
            ),
        ]
    );
    settle(&mut s, "t", &[(4, "b"), (5, "a")], &[], 7);
    assert_eq!(
        events(&s, "t"),
        vec![(5, TaskStatus::Completed, vec!["b".to_owned()])]
    );
    // An ended subscription stops watching and is owed nothing more; the outbox then goes.
    settle(&mut s, "t", &[], &["b"], 8);
    let r = s.get("t").unwrap();
    assert!(r.outbox.as_ref().is_some_and(|o| o.events.is_empty()));
    assert!(unsettled_ids(&s).is_empty());
    settle(&mut s, "t", &[], &["a"], 9);
    let r = s.get("t").unwrap();
    assert!(r.outbox.is_none());
    assert_eq!((r.updated_index, r.status), (5, TaskStatus::Completed));
}

#[test]
fn a_watch_of_an_ended_task_owes_its_last_status_at_once() {
    let mut s = state_with("t");
    finish(&mut s, "t", 2);
    watch(&mut s, "t", "late", 3);
    assert_eq!(
        events(&s, "t"),
        vec![(2, TaskStatus::Completed, vec!["late".to_owned()])]
    );
    // A second late watcher is owed the same event, with the same id.
    watch(&mut s, "t", "later", 4);
    assert_eq!(
        events(&s, "t"),
        vec![(
            2,
            TaskStatus::Completed,
            vec!["late".to_owned(), "later".to_owned()]
        )]
    );
    // Watching twice changes nothing.
    watch(&mut s, "t", "late", 5);
    assert_eq!(events(&s, "t").len(), 1);
    assert_eq!(events(&s, "t")[0].2.len(), 2);
}

#[test]
fn watchers_and_unsettled_events_are_bounded() {
    let mut s = state_with("t");
    for i in 0..MAX_WATCHERS {
        watch(&mut s, "t", &format!("s{i}"), 2 + i as u64);
    }
    let refused = watch(&mut s, "t", "one-more", 100);
    assert!(matches!(refused, Applied::Rejected(Rejection::Invalid(_))));
    assert_eq!(
        s.get("t").unwrap().outbox.as_ref().unwrap().watchers.len(),
        MAX_WATCHERS
    );
    // Twice as many changes as the outbox keeps: the oldest go, the terminal one stays.
    let mut index = 200;
    for n in 0..MAX_UNSETTLED * 2 {
        let status = if n % 2 == 0 {
            TaskStatus::InputRequired
        } else {
            TaskStatus::Working
        };
        set_status(&mut s, "t", status, index);
        index += 1;
    }
    finish(&mut s, "t", index);
    let kept = events(&s, "t");
    assert_eq!(kept.len(), MAX_UNSETTLED);
    assert_eq!(kept.last().unwrap().0, index);
    assert_eq!(kept.last().unwrap().1, TaskStatus::Completed);
    assert_eq!(kept[0].0, index - MAX_UNSETTLED as u64 + 1);
}

#[test]
fn outbox_commands_of_a_missing_task_are_refused_and_the_index_survives_a_rebuild() {
    let mut s = state_with("t");
    assert!(matches!(
        watch(&mut s, "nope", "a", 2),
        Applied::Rejected(Rejection::NotFound)
    ));
    watch(&mut s, "t", "a", 3);
    finish(&mut s, "t", 4);
    let rebuilt = ShardState::from_records(s.records().cloned());
    assert_eq!(unsettled_ids(&rebuilt), vec!["t".to_owned()]);
    // Expiry deletes the record and its obligation with it.
    let expired = s.apply(
        &Command::Expire {
            task_ids: vec!["t".into()],
            now_ms: u64::MAX,
        },
        5,
    );
    assert!(matches!(expired, Applied::Expired { .. }));
    assert!(unsettled_ids(&s).is_empty());
}

#[test]
fn one_settle_settles_many_tasks_and_skips_those_gone() {
    let mut s = state_with("a");
    s.apply(
        &Command::Create {
            record: TaskRecord::sample("b"),
        },
        2,
    );
    watch(&mut s, "a", "x", 3);
    watch(&mut s, "b", "x", 4);
    finish(&mut s, "a", 5);
    finish(&mut s, "b", 6);
    assert_eq!(unsettled_ids(&s), vec!["a".to_owned(), "b".to_owned()]);
    let applied = s.apply(
        &Command::Settle {
            settled: vec![
                Settlement {
                    task_id: "a".into(),
                    events: vec![(5, "x".into())],
                    unwatch: Vec::new(),
                },
                Settlement {
                    task_id: "gone".into(),
                    events: vec![(1, "x".into())],
                    unwatch: Vec::new(),
                },
                Settlement {
                    task_id: "b".into(),
                    events: vec![(99, "x".into())],
                    unwatch: Vec::new(),
                },
            ],
        },
        7,
    );
    // "b" was owed its event at 6, not 99: unchanged.
    assert_eq!(applied, Applied::Settled { changed: 1 });
    assert_eq!(unsettled_ids(&s), vec!["b".to_owned()]);
    assert!(events(&s, "a").is_empty());
    assert_eq!(events(&s, "b").len(), 1);
}
