//! Microbenchmarks of the pure functions on the hot paths: parsing a `tasks/get` request,
//! serialising its answer (as the gateway does today: record -> `Task` -> JSON value -> bytes,
//! and directly), applying shard commands, and the routing hash.
//!
//!     cargo bench -p taskmesh-bench --bench hot_paths

// A bench binary: a failed unwrap is a failed run, with its location; and the entry function
// that `criterion_group!` generates cannot carry a doc comment.
#![allow(clippy::unwrap_used, missing_docs)]

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion};
use taskmesh_mcp::jsonrpc::{self, RequestId};
use taskmesh_task::{shard_of, Command, ShardState, TaskRecord, TaskStatus};

const ID: &str = "3f9a1c0e7b2d4a6f8e1c3b5d7f9a0c2e";

fn record(id: &str) -> TaskRecord {
    TaskRecord {
        session: Some("0123456789abcdef0123456789abcdef".into()),
        created_at_ms: 1_764_000_000_000,
        last_updated_at_ms: 1_764_000_000_500,
        poll_interval_ms: 1_000,
        updated_index: 7,
        upstream_task: None,
        ..TaskRecord::sample(id)
    }
}

fn wire(c: &mut Criterion) {
    let body =
        format!(r#"{{"jsonrpc":"2.0","id":42,"method":"tasks/get","params":{{"taskId":"{ID}"}}}}"#);
    c.bench_function("parse tasks/get request", |b| {
        b.iter(|| jsonrpc::parse_message(black_box(body.as_bytes())).expect("valid"))
    });
    let r = taskmesh_task::TaskView::from(&record(ID));
    let id = RequestId::Number(42);
    c.bench_function("serialise tasks/get answer via Value", |b| {
        b.iter(|| {
            let v =
                serde_json::to_value(taskmesh_gateway::wire::TaskObject::classic(black_box(&r)))
                    .unwrap();
            jsonrpc::response(&id, &v)
        })
    });
    c.bench_function("serialise tasks/get answer directly", |b| {
        b.iter(|| {
            jsonrpc::response(
                &id,
                &taskmesh_gateway::wire::TaskObject::classic(black_box(&r)),
            )
        })
    });
}

fn shard(c: &mut Criterion) {
    c.bench_function("apply create to a shard of 10k tasks", |b| {
        let mut base = ShardState::new();
        for i in 0..10_000u64 {
            base.apply(
                &Command::Create {
                    record: record(&format!("{i:032x}")),
                },
                i + 1,
            );
        }
        let mut n = 0u64;
        b.iter_batched(
            || {
                n += 1;
                let cmd = Command::Create {
                    record: record(&format!("{:032x}", 1_000_000 + n)),
                };
                (cmd, 20_000 + n)
            },
            |(cmd, index)| base.apply(&cmd, index),
            BatchSize::SmallInput,
        )
    });
    c.bench_function("apply set_status", |b| {
        let mut s = ShardState::new();
        s.apply(&Command::Create { record: record(ID) }, 1);
        let mut i = 1u64;
        b.iter(|| {
            i += 1;
            s.apply(
                &Command::SetStatus {
                    task_id: ID.into(),
                    term: 1,
                    status: TaskStatus::Working,
                    message: None,
                    at_ms: i,
                },
                i,
            )
        })
    });
    c.bench_function("routing hash (shard_of)", |b| {
        b.iter(|| shard_of(black_box(ID), 32))
    });
}

criterion_group!(benches, wire, shard);
criterion_main!(benches);
