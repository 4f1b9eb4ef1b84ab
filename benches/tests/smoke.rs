//! A short run of every scenario of the load generator against a real taskmesh server (in this
//! process, on a free loopback port) and against the ceiling: it works, counts operations, and
//! checks answers (a wrong one is a failure). Asserts nothing about speed.

use std::time::Duration;

use taskmesh_bench::{ceiling, create_task, get_task, run, Failure, RunConfig, Scenario, Session};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn cfg(url: &str, scenario: Scenario) -> RunConfig {
    RunConfig {
        urls: vec![url.to_string()],
        scenario,
        duration: Duration::from_millis(800),
        sessions: 2,
        concurrency: 4,
        tasks: 16,
        task_seconds: match scenario {
            Scenario::Create => 0.0,
            Scenario::Mixed => 0.02,
            _ => 3600.0,
        },
        cancel_share: 0.3,
        poll_gap: Duration::from_millis(5),
        shards: 4,
        // `task` runs a task of slow_compute; `call` the default (greet, plainly).
        tool: if scenario == Scenario::Task {
            "slow_compute".into()
        } else {
            "greet".into()
        },
        arguments: if scenario == Scenario::Task {
            serde_json::json!({"seconds": 0})
        } else {
            serde_json::json!({"name": "bench"})
        },
        ..RunConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_runs_against_taskmesh_and_the_ceiling() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let node_cfg = taskmesh_node::Config {
        listen: format!("127.0.0.1:{port}").parse().unwrap(),
        data_dir: dir.path().join("data"),
        shards: 4,
        ..taskmesh_node::Config::default()
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(taskmesh_node::serve(node_cfg, async move {
        let _ = stop_rx.await;
    }));
    let url = format!("http://127.0.0.1:{port}/mcp");
    let mut ready = false;
    for _ in 0..200 {
        if Session::open(&url, None).await.is_ok() {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ready, "taskmesh did not come up");

    for scenario in [
        Scenario::Poll,
        Scenario::Create,
        Scenario::Mixed,
        Scenario::Call,
        Scenario::Task,
    ] {
        let report = run(&cfg(&url, scenario)).await.expect("run");
        assert!(report.ok > 0, "{scenario:?}: {}", report.table());
        assert!(
            report.failures.is_empty(),
            "{scenario:?}: {}",
            report.table()
        );
        assert!(report.latency_ms.p50 > 0.0 && report.latency_ms.p50 <= report.latency_ms.p999);
        let json: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&report).unwrap()).unwrap();
        assert_eq!(json["scenario"], scenario.name());
    }
    let open = RunConfig {
        rate: Some(200.0),
        ..cfg(&url, Scenario::Poll)
    };
    let report = run(&open).await.expect("open loop");
    assert!(
        report.ok > 0 && report.failures.is_empty(),
        "{}",
        report.table()
    );
    assert_eq!(report.offered_per_s, Some(200.0));

    // A wrong answer is a failure, not an operation: asking for one task and getting another.
    let s = Session::open(&url, None).await.expect("session");
    let a = create_task(&s, 3600.0).await.expect("create");
    assert!(get_task(&s, &a, Some("working")).await.is_ok());
    assert_eq!(
        get_task(&s, &a, Some("completed")).await.unwrap_err(),
        Failure::BadBody("status")
    );

    // The ceiling passes the same checks for its one task, and fails them for any other.
    let (listener, addr) = ceiling::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let ceiling_server = tokio::spawn(ceiling::serve(listener, 257));
    let curl = format!("http://{addr}/mcp");
    let report = run(&RunConfig {
        target: "ceiling".into(),
        ..cfg(&curl, Scenario::Poll)
    })
    .await
    .expect("ceiling run");
    assert!(
        report.ok > 0 && report.failures.is_empty(),
        "{}",
        report.table()
    );
    let cs = Session::open(&curl, None).await.expect("ceiling session");
    assert!(matches!(
        get_task(&cs, &a, None).await,
        Err(Failure::BadBody("task"))
    ));
    ceiling_server.abort();

    let _ = stop_tx.send(());
    server.await.expect("join").expect("clean stop");
}
