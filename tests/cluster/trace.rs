//! Following requests across nodes: by the trace id in the logs, and by the OpenTelemetry
//! spans the nodes export to an OTLP/HTTP receiver.

use std::time::{Duration, Instant};

use serde_json::json;
use taskmesh_testkit::otlp::{Receiver, Span};
use taskmesh_testkit::{free_ports, wait_cluster_ready, Server};

use crate::{connect, node_config_with, TASKMESH, TOKEN};

/// The hex trace id in a log line's `trace_id=` field (quoted or not).
fn trace_id_in(line: &str) -> Option<String> {
    let rest = &line[line.find("trace_id=")? + "trace_id=".len()..];
    let id: String = rest
        .trim_start_matches('"')
        .chars()
        .take_while(|c| c.is_ascii_hexdigit())
        .collect();
    (id.len() == 16).then_some(id)
}

/// With the request spans asked for in the log filter, a poll that node 1 forwards to the
/// shard's leader can be followed: node 1 logs it with a trace id, and the leader logs the
/// forwarded read with the same id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_poll_is_followed_across_nodes_by_its_trace_id() {
    let grpc = free_ports(3);
    let traced =
        "[log]\nlevel = \"info,openraft=warn,taskmesh_gateway=debug,taskmesh_router=debug\"";
    let n2 = Server::start_node(TASKMESH, &node_config_with(2, &grpc, traced), false);
    let n3 = Server::start_node(TASKMESH, &node_config_with(3, &grpc, traced), false);
    let n1 = Server::start_node(TASKMESH, &node_config_with(1, &grpc, traced), true);
    wait_cluster_ready(&[&n1, &n2, &n3], TOKEN, crate::shards()).await;
    let c1 = connect(&n1).await;

    // Polls through node 1 until one was forwarded (8 shards on 3 nodes: node 1 leads only
    // some of them).
    let mut followed = None;
    for i in 0..32 {
        let id = c1
            .start_task(
                "slow_compute",
                json!({"seconds": 0.1, "label": format!("t{i}")}),
            )
            .await;
        let polled = c1.call("tasks/get", json!({"taskId": id})).await;
        assert_eq!(polled["result"]["taskId"], id.as_str(), "{polled}");
        let log = n1.log_text();
        let forwarded = log.lines().find(|l| {
            l.contains("forwarding to the shard's leader")
                && l.contains("tasks/get")
                && l.contains(&id)
        });
        if let Some(line) = forwarded {
            let trace = trace_id_in(line).unwrap_or_else(|| panic!("no trace id in: {line}"));
            println!("gateway node: {line}");
            followed = Some((id, trace));
            break;
        }
    }
    let (task_id, trace) = followed.expect("no poll through node 1 was forwarded");

    // The leader's log names the same trace id for the read of that task.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let on_leader = [&n2, &n3].iter().find_map(|n| {
            n.log_text()
                .lines()
                .find(|l| {
                    l.contains("forwarded read") && l.contains(&task_id) && l.contains(&trace)
                })
                .map(str::to_string)
        });
        if let Some(line) = on_leader {
            println!("leader: {line}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no node logged the forwarded read of {task_id} with trace id {trace}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The span named `name` exported by `instance` (any node when `None`) in `spans`.
fn find<'a>(spans: &'a [Span], name: &str, instance: Option<&str>) -> Option<&'a Span> {
    spans
        .iter()
        .find(|s| s.name == name && instance.is_none_or(|i| s.instance == i))
}

/// With `[tracing]` on and `sample_ratio = 0`, a request that carries a sampled W3C
/// `traceparent` is traced across the cluster: node 1's server span continues the client's
/// trace, the shard leader's `Apply` span of the create is its child, the task's execution on the leader
/// is a span under that, and a forwarded poll's batched read is a span under the poll's. A
/// request without a `traceparent`, or with an unsampled one, makes no span anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sampled_request_is_traced_across_nodes_into_its_task() {
    let receiver = Receiver::start().await;
    let traced = format!(
        "[tracing]\notlp_endpoint = \"{}\"\nsample_ratio = 0.0\nexport_delay_ms = 100",
        receiver.url
    );
    let grpc = free_ports(3);
    let n2 = Server::start_node(TASKMESH, &node_config_with(2, &grpc, &traced), false);
    let n3 = Server::start_node(TASKMESH, &node_config_with(3, &grpc, &traced), false);
    let n1 = Server::start_node(TASKMESH, &node_config_with(1, &grpc, &traced), true);
    wait_cluster_ready(&[&n1, &n2, &n3], TOKEN, crate::shards()).await;
    let c1 = connect(&n1).await;
    let task_call = |label: String| json!({"name": "slow_compute", "arguments": {"seconds": 0.1, "label": label}, "task": {}});

    // Not traced: no context, and a context whose sampled flag is off.
    let quiet = c1.start_task("slow_compute", json!({"seconds": 0.1})).await;
    let unsampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
    let r = c1
        .call_with(
            "tools/call",
            task_call("quiet".into()),
            &[("traceparent", unsampled)],
        )
        .await;
    let quiet2 = r["result"]["task"]["taskId"].as_str().unwrap().to_owned();
    for id in [&quiet, &quiet2] {
        c1.wait_status(id, "completed").await;
        c1.call_with(
            "tasks/get",
            json!({"taskId": id}),
            &[("traceparent", unsampled)],
        )
        .await;
    }

    // Traced creates through node 1 until one lands on a shard another node leads (8 shards
    // on 3 nodes: node 1 leads only some).
    let mut traced_ids = Vec::new();
    let mut followed = None;
    for i in 0..32u128 {
        let trace = format!("{:032x}", 0x7a5c_e000_0000_0000u128 + i);
        traced_ids.push(trace.clone());
        let (create_parent, get_parent) = ("c0ffee0000000001", "c0ffee0000000002");
        let create = format!("00-{trace}-{create_parent}-01");
        let r = c1
            .call_with(
                "tools/call",
                task_call(format!("t{i}")),
                &[("traceparent", &create)],
            )
            .await;
        let id = r["result"]["task"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("{r}"));
        let id = id.to_owned();
        c1.wait_status(&id, "completed").await;
        let get = format!("00-{trace}-{get_parent}-01");
        let polled = c1
            .call_with("tasks/get", json!({"taskId": id}), &[("traceparent", &get)])
            .await;
        assert_eq!(polled["result"]["taskId"], id.as_str(), "{polled}");

        let spans = receiver
            .wait_for(Duration::from_secs(30), |all| {
                let t: Vec<Span> = all
                    .iter()
                    .filter(|s| s.trace_id == trace)
                    .cloned()
                    .collect();
                find(&t, "tools/call slow_compute", Some("node-1")).is_some()
                    && find(&t, "tasks/get", Some("node-1")).is_some()
                    && t.iter().any(|s| {
                        s.name == "execute_tool slow_compute"
                            && s.attr("taskmesh.task_id") == Some(id.as_str())
                    })
            })
            .await
            .unwrap_or_else(|| {
                panic!(
                    "the spans of task {id} never came: {:#?}",
                    receiver.trace(&trace)
                )
            });
        let t: Vec<Span> = spans.into_iter().filter(|s| s.trace_id == trace).collect();
        let gateway = find(&t, "tools/call slow_compute", Some("node-1")).unwrap();
        assert_eq!(gateway.parent_span_id, create_parent, "{gateway:?}");
        assert_eq!(gateway.kind, 2, "a server span: {gateway:?}");
        assert_eq!(gateway.service, "taskmesh");
        assert_eq!(gateway.attr("mcp.method.name"), Some("tools/call"));
        assert_eq!(gateway.attr("gen_ai.tool.name"), Some("slow_compute"));
        assert_eq!(gateway.attr("http.response.status_code"), Some("200"));
        let exec = find(&t, "execute_tool slow_compute", None).unwrap();
        let forwarded = t.iter().find(|s| {
            s.name == "taskmesh.v1.TaskService/Apply"
                && s.attr("taskmesh.operation") == Some("create")
        });
        let Some(leader_create) = forwarded else {
            // Node 1 leads this task's shard: its execution is under node 1's span directly.
            assert_eq!(exec.instance, "node-1", "{t:#?}");
            assert_eq!(exec.parent_span_id, gateway.span_id, "{t:#?}");
            continue;
        };
        let leader = leader_create.instance.clone();
        assert_ne!(leader, "node-1", "{t:#?}");
        assert_eq!(leader_create.parent_span_id, gateway.span_id, "{t:#?}");
        assert_eq!(leader_create.kind, 2);
        assert_eq!(
            exec.instance, leader,
            "the task runs on its shard's leader: {t:#?}"
        );
        assert_eq!(exec.parent_span_id, leader_create.span_id, "{t:#?}");
        assert_eq!(exec.kind, 1, "an internal span: {exec:?}");
        let poll = find(&t, "tasks/get", Some("node-1")).unwrap();
        assert_eq!(poll.parent_span_id, get_parent);
        let read = receiver
            .wait_for(Duration::from_secs(30), |all| {
                all.iter().any(|s| {
                    s.trace_id == poll.trace_id
                        && s.name == "taskmesh.v1.TaskService/ReadTasks"
                        && s.parent_span_id == poll.span_id
                })
            })
            .await
            .unwrap_or_else(|| panic!("the forwarded read has no span under {poll:?}"));
        let read = read
            .into_iter()
            .find(|s| s.name == "taskmesh.v1.TaskService/ReadTasks" && s.trace_id == poll.trace_id)
            .unwrap();
        assert_eq!(
            read.instance, leader,
            "the read is served by the leader: {read:?}"
        );
        assert_eq!(read.attr("taskmesh.task_id"), poll.attr("taskmesh.task_id"));
        followed = Some((id, trace));
        break;
    }
    let (task_id, trace) = followed.expect("no create through node 1 was forwarded");
    println!("followed task {task_id} in trace {trace}");

    // Everything exported belongs to the traced requests: the others made no span.
    let all = receiver.spans();
    let strays: Vec<&Span> = all
        .iter()
        .filter(|s| !traced_ids.contains(&s.trace_id))
        .collect();
    assert!(strays.is_empty(), "spans of untraced requests: {strays:#?}");
    assert!(!all
        .iter()
        .any(|s| s.trace_id == "0af7651916cd43dd8448eb211c80319c"));
}
