//! The operations' wire form: every operation and answer crosses it unchanged, and what a
//! peer sends is checked.

use serde_json::json;
use taskmesh_mcp::ErrorObject;
use taskmesh_task::{ClientCaps, TaskStatus, ToolRequest};

use super::*;

fn view(id: &str) -> TaskView {
    TaskView {
        task_id: id.into(),
        status: TaskStatus::Working,
        status_message: None,
        created_at_ms: 1,
        last_updated_at_ms: 2,
        ttl_ms: Some(3),
        poll_interval_ms: 4,
        updated_index: 5,
    }
}

fn record(id: &str) -> TaskRecord {
    TaskRecord {
        task_id: id.into(),
        owner: "alice".into(),
        session: None,
        status: TaskStatus::Completed,
        status_message: None,
        created_at_ms: 1,
        last_updated_at_ms: 2,
        ttl_ms: None,
        poll_interval_ms: 3,
        request: ToolRequest {
            tool: "t".into(),
            arguments_json: "{}".into(),
            progress_token_json: None,
            client: ClientCaps::default(),
            answers_json: None,
            traceparent: None,
        },
        outcome: None,
        exec_term: 4,
        updated_index: 5,
        upstream_task: None,
        client_task: None,
        worker: None,
        outbox: None,
    }
}

/// Every operation reaches the leader as it was sent, with its shard.
#[test]
fn every_operation_crosses_the_wire_unchanged() {
    let ops: Vec<Op> = vec![
        Op::Create(NewTask {
            task_id: "t1".into(),
            owner: "alice".into(),
            session: Some("s".into()),
            ttl_ms: Some(60_000),
            request: ToolRequest {
                progress_token_json: Some(r#""p1""#.into()),
                client: ClientCaps {
                    elicitation: true,
                    sampling: false,
                    elicitation_tasks: true,
                    sampling_tasks: false,
                },
                answers_json: Some(r#"{"k":{"action":"accept"}}"#.into()),
                ..ToolRequest::new("slow_compute", r#"{"seconds":1}"#)
            },
            worker_rerun: Some(false),
        }),
        Op::Cancel(Cancel {
            task_id: "t1".into(),
            owner: "alice".into(),
        }),
        Op::List(List {
            shard: 7,
            owner: "alice".into(),
            after: Some("t0".into()),
            limit: 50,
        }),
        Op::Deliver(Deliver {
            task_id: "t1".into(),
            owner: "alice".into(),
            request_id: "tm-t1-1".into(),
            outcome: Ok(json!({"action": "accept"})),
        }),
        Op::Deliver(Deliver {
            task_id: "t1".into(),
            owner: "alice".into(),
            request_id: "tm-t1-2".into(),
            outcome: Err(ErrorObject::new(-1, "declined")),
        }),
        Op::Claim(Claim {
            task_id: "t1".into(),
            request_id: "tm-t1-1".into(),
            release: true,
        }),
        Op::Pending(Pending {
            task_id: "t1".into(),
            owner: "alice".into(),
        }),
        Op::Members(Members { shard: 7 }),
        Op::Export(Export {
            shard: 7,
            after: Some(("alice".into(), "t0".into())),
            max_records: 10,
        }),
        Op::Import(Import {
            shard: 7,
            records: vec![record("t2")],
        }),
        Op::Subscribe(Subscribe {
            shard: 7,
            subscription: subscription(),
        }),
        Op::Unsubscribe(Unsubscribe {
            shard: 7,
            ids: vec!["sub_1".into(), "sub_2".into()],
        }),
        Op::ReadSubscription(ReadSubscription {
            shard: 7,
            id: "sub_1".into(),
            principal: "alice".into(),
        }),
        Op::ReadEvents(ReadEvents {
            shard: 7,
            owner: "alice".into(),
            task_id: Some("t1".into()),
            terminal_only: true,
            after: Some(42),
            not_before_ms: 1_000,
            max: 100,
        }),
        Op::ReadEvents(ReadEvents {
            shard: 7,
            owner: "alice".into(),
            task_id: None,
            terminal_only: false,
            after: None,
            not_before_ms: 0,
            max: 1,
        }),
    ];
    for op in ops {
        let (shard, back) = op_from_pb(op_to_pb(7, &op)).unwrap();
        assert_eq!(shard, 7);
        assert_eq!(format!("{back:?}"), format!("{op:?}"));
    }
}

fn subscription() -> taskmesh_task::Subscription {
    taskmesh_task::Subscription {
        id: "sub_1".into(),
        principal: "alice".into(),
        url: "https://hooks.example.com/a".into(),
        secret: "whsec_x".into(),
        previous_secret: Some("whsec_y".into()),
        previous_until_ms: 5,
        task_id: Some("t1".into()),
        terminal_only: true,
        expires_at_ms: 9,
        refreshed_at_ms: 2,
    }
}

/// Every answer reaches the caller as the leader gave it.
#[test]
fn every_answer_crosses_the_wire_unchanged() {
    let answers = vec![
        Answer::Create(Created {
            task: view("t1"),
            fresh: true,
        }),
        Answer::Cancel(view("t1")),
        Answer::List(Listed {
            tasks: vec![view("t1"), view("t2")],
            more: true,
        }),
        Answer::Deliver(true),
        Answer::Claim(false),
        Answer::Pending(vec![Arc::new(b"{}".to_vec())]),
        Answer::Members(GroupMembers {
            voters: vec![1, 2],
            learners: vec![3],
        }),
        Answer::Export(ExportedPage {
            records: vec![record("t3")],
            last: true,
        }),
        Answer::Import(4),
        Answer::Subscribe(3),
        Answer::Unsubscribe(()),
        Answer::ReadSubscription(SubscriptionRead {
            state: None,
            held: 2,
        }),
        Answer::ReadSubscription(SubscriptionRead {
            held: 1,
            state: Some(SubscriptionState {
                subscription: subscription(),
                deliveries: DeliveryStats {
                    attempts: 4,
                    acked: 2,
                    refused: 1,
                    abandoned: 1,
                    suspended_since_ms: Some(3),
                    last_delivery_at_ms: Some(4),
                    last_error: Some("http_5xx"),
                    failing_since_ms: Some(5),
                },
            }),
        }),
        Answer::ReadEvents(EventPage {
            events: vec![ReadEvent {
                index: 9,
                at_ms: 1_000,
                json: r#"{"eventId":"t1-9"}"#.into(),
            }],
            through: 12,
            truncated: true,
            more: false,
        }),
    ];
    for a in answers {
        let shown = format!("{a:?}");
        let back = answer_from_pb(answer_to_pb(a)).unwrap();
        assert_eq!(format!("{back:?}"), shown);
    }
}

/// What a peer sends is checked as a client's request is: nothing malformed is applied.
#[test]
fn malformed_operations_are_refused() {
    let refused = |op: apply_request::Op| {
        let s = op_from_pb(v1::ApplyRequest { op: Some(op) }).unwrap_err();
        assert_eq!(s.code(), tonic::Code::InvalidArgument, "{s:?}");
    };
    let create = |args: &str| v1::CreateTaskRequest {
        task_id: "t".into(),
        request: Some(v1::ToolRequest {
            tool: "x".into(),
            arguments_json: args.into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    refused(apply_request::Op::Create(create("[1, 2")));
    refused(apply_request::Op::Create(create("[]")));
    refused(apply_request::Op::Create(v1::CreateTaskRequest::default()));
    refused(apply_request::Op::Deliver(v1::DeliverResponseRequest {
        response_json: b"{\"jsonrpc\":\"2.0\",\"method\":\"x\"}".to_vec(),
        ..Default::default()
    }));
    refused(apply_request::Op::Export(v1::ExportTasksRequest {
        after_owner: "alice".into(),
        ..Default::default()
    }));
    refused(apply_request::Op::Import(v1::ImportTasksRequest {
        shard: 0,
        records: vec![v1::TaskRecord::default()],
    }));
    let none = op_from_pb(v1::ApplyRequest { op: None }).unwrap_err();
    assert_eq!(none.code(), tonic::Code::InvalidArgument);
    assert!(op_from_pb(v1::ApplyRequest {
        op: Some(apply_request::Op::Create(create(" {\"a\": 1}"))),
    })
    .is_ok());
}
