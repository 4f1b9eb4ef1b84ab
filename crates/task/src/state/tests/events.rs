//! What the state keeps for task events: the change log, and clients' subscriptions watching
//! tasks.

use super::*;

#[test]
fn every_status_change_and_only_those_enter_the_change_log() {
    let mut s = ShardState::new();
    s.apply(
        &Command::Create {
            record: record("a", "p", None),
        },
        1,
    );
    assert!(s.changes().is_empty(), "a creation is not a change");
    let message_only = Command::SetStatus {
        task_id: "a".into(),
        term: 1,
        status: TaskStatus::Working,
        message: Some("halfway".into()),
        at_ms: 1_500,
    };
    s.apply(&message_only, 2);
    assert!(s.changes().is_empty(), "a new message without a new status");
    let asking = Command::SetStatus {
        task_id: "a".into(),
        term: 1,
        status: TaskStatus::InputRequired,
        message: Some("asking".into()),
        at_ms: 1_500,
    };
    s.apply(&asking, 3);
    s.apply(&finish("a", 1, TaskStatus::Completed), 4);
    s.apply(&cancel("a"), 5);
    let page = s.changes().read(crate::ChangeQuery {
        after: 0,
        not_before_ms: 0,
        max: 10,
        wanted: &|_| true,
    });
    let got: Vec<_> = page
        .changes
        .iter()
        .map(|c| (c.index, c.status, c.status_message.as_deref(), c.at_ms))
        .collect();
    assert_eq!(
        got,
        vec![
            (3, TaskStatus::InputRequired, Some("asking"), 1_500),
            (4, TaskStatus::Completed, None, 2_000)
        ],
        "a refused change (cancel after the end) is not one"
    );
    assert_eq!(s.changes().head(), 4);
}

fn subscription(id: &str, principal: &str, task_id: Option<&str>) -> Subscription {
    Subscription {
        id: id.into(),
        principal: principal.into(),
        url: "https://hooks.example.com/x".into(),
        secret: "whsec_x".into(),
        previous_secret: None,
        previous_until_ms: 0,
        task_id: task_id.map(Into::into),
        terminal_only: false,
        expires_at_ms: 10_000,
        refreshed_at_ms: 1_000,
    }
}

fn watchers(s: &ShardState, id: &str) -> Vec<String> {
    s.get(id)
        .and_then(|r| r.outbox.as_ref())
        .map(|o| o.watchers.iter().map(|w| w.id.clone()).collect())
        .unwrap_or_default()
}

#[test]
fn a_subscription_watches_its_principal_s_live_tasks_and_those_created_after_it() {
    let mut s = ShardState::new();
    for (i, (id, owner)) in [("a", "p"), ("b", "p"), ("c", "q")].iter().enumerate() {
        s.apply(
            &Command::Create {
                record: record(id, owner, None),
            },
            i as u64 + 1,
        );
    }
    s.apply(&finish("b", 1, TaskStatus::Completed), 4);
    let applied = s.apply(
        &Command::Subscribe {
            subscription: subscription("sub_1", "p", None),
        },
        5,
    );
    assert!(
        matches!(&applied, Applied::Subscribed { watching: 1, owing } if owing.is_empty()),
        "{applied:?}"
    );
    assert_eq!(watchers(&s, "a"), vec!["sub_1"], "p's live task");
    assert!(
        watchers(&s, "b").is_empty(),
        "p's ended task is not watched"
    );
    assert!(watchers(&s, "c").is_empty(), "q's task is not p's");
    s.apply(
        &Command::Create {
            record: record("d", "p", None),
        },
        6,
    );
    assert_eq!(watchers(&s, "d"), vec!["sub_1"]);
    // A subscription of one task, ended already: owed its end at once.
    let applied = s.apply(
        &Command::Subscribe {
            subscription: subscription("sub_2", "p", Some("b")),
        },
        7,
    );
    assert!(
        matches!(&applied, Applied::Subscribed { watching: 1, owing } if owing[0].task_id == "b"),
        "{applied:?}"
    );
    assert_eq!(watchers(&s, "b"), vec!["sub_2"]);
    assert!(s.get("b").unwrap().has_unsettled());
    // A refresh is the same subscription; a removal forgets it, and new tasks are not watched.
    s.apply(
        &Command::Subscribe {
            subscription: subscription("sub_1", "p", None),
        },
        8,
    );
    assert_eq!(watchers(&s, "a"), vec!["sub_1"]);
    assert_eq!(s.subscriptions().count(), 2);
    s.apply(
        &Command::Unsubscribe {
            ids: vec!["sub_1".into(), "nope".into()],
        },
        9,
    );
    assert!(s.subscription("sub_1").is_none() && s.subscription("sub_2").is_some());
    s.apply(
        &Command::Create {
            record: record("e", "p", None),
        },
        10,
    );
    assert!(watchers(&s, "e").is_empty());
}
