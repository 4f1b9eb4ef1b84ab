//! The configuration's tests: precedence, refusals, the deploy example.

use super::*;

#[test]
fn precedence_file_env_flags() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(&file, "listen = \"127.0.0.1:9000\"\nshards = 8\n[tasks]\nmax_live_tasks = 7\npoll_interval_ms = 250\n").unwrap();
    let env = vec![
        (
            "TASKMESH_TASKS__MAX_LIVE_TASKS".to_string(),
            "9".to_string(),
        ),
        (
            "TASKMESH_AUTH__TOKENS".to_string(),
            "{ \"tok-12345\" = \"alice\" }".to_string(),
        ),
        ("TASKMESH_DATA_DIR".to_string(), "/var/lib/x".to_string()),
        ("OTHER".to_string(), "1".to_string()),
    ];
    let cfg = Config::load(
        Some(&file),
        env,
        Overrides {
            listen: Some("127.0.0.1:9100".parse().unwrap()),
            data_dir: None,
        },
    )
    .unwrap();
    assert_eq!(cfg.listen.port(), 9100);
    assert_eq!(cfg.shards, 8);
    assert_eq!(cfg.tasks.max_live_tasks, 9);
    assert_eq!(cfg.tasks.poll_interval_ms, 250);
    assert_eq!(
        cfg.auth.tokens.get("tok-12345").map(String::as_str),
        Some("alice")
    );
    assert_eq!(cfg.data_dir, PathBuf::from("/var/lib/x"));
    assert_eq!(cfg.worker_threads, 0, "one thread per core unless set");
    assert!(
        !cfg.transparent_huge_pages,
        "huge pages stay off unless set"
    );
    assert_eq!(cfg.raft.log_segment_bytes, 64 << 20);
}

#[test]
fn bad_settings_are_named() {
    let err = |env: Vec<(&str, &str)>| {
        Config::load(
            None,
            env.into_iter().map(|(a, b)| (a.to_string(), b.to_string())),
            Overrides::default(),
        )
        .unwrap_err()
        .to_string()
    };
    assert!(err(vec![("TASKMESH_SHARDS", "12")]).contains("shards"));
    assert!(format!(
        "{:#}",
        Config::load(
            None,
            vec![("TASKMESH_NOPE".to_string(), "1".to_string())],
            Overrides::default()
        )
        .unwrap_err()
    )
    .contains("nope"));
    assert!(err(vec![("TASKMESH_TASKS__MAX_LIVE_TASKS", "0")]).contains("max_live_tasks"));
    assert!(err(vec![("TASKMESH_WORKER_THREADS", "100000")]).contains("worker_threads"));
    assert!(err(vec![("TASKMESH_HTTP__SSE_BUFFER_EVENTS", "0")]).contains("sse_buffer_events"));
    assert!(err(vec![("TASKMESH_HTTP__SSE_MAX_STREAM_MS", "999")]).contains("sse_max_stream_ms"));
    assert!(err(vec![("TASKMESH_RAFT__QUIESCE_AFTER_MS", "150")]).contains("quiesce_after_ms"));
    assert!(err(vec![("TASKMESH_RAFT__BEAT_INTERVAL_MS", "151")]).contains("beat_interval_ms"));
    assert!(err(vec![("TASKMESH_RAFT__BEAT_INTERVAL_MS", "0")]).contains("beat_interval_ms"));
    assert!(err(vec![("TASKMESH_RAFT__QUIET_RECHECK_MS", "149")]).contains("quiet_recheck_ms"));
    assert!(err(vec![("TASKMESH_RAFT__HEARTBEAT_BATCH_MAX", "0")]).contains("heartbeat_batch_max"));
    assert!(err(vec![("TASKMESH_RAFT__LOG_CACHE_BYTES", "67108865")]).contains("log_cache_bytes"));
    for bytes in ["4095", "1073741825"] {
        assert!(
            err(vec![("TASKMESH_RAFT__LOG_SEGMENT_BYTES", bytes)]).contains("log_segment_bytes")
        );
    }
}

#[test]
fn a_cluster_node_needs_mutual_tls_or_says_insecure() {
    let check = |extra: &str| {
        let text = format!(
            "node_id = 1\n[session]\nsecret = \"a-long-cluster-secret\"\n[cluster]\n\
             grpc_listen = \"127.0.0.1:7101\"\n\
             peers = [{{ id = 1, grpc = \"127.0.0.1:7101\" }}]\n{extra}"
        );
        Config::parse(Some(&text), "test", Vec::new(), Overrides::default())
            .and_then(|c| c.validate().map(|()| c))
            .map_err(|e| format!("{e:#}"))
    };
    let tls = "[cluster.tls]\nca_file = \"ca.pem\"\ncert_file = \"n.pem\"\nkey_file = \"n.key\"\n";
    let e = check("").unwrap_err();
    assert!(
        e.contains("[cluster.tls]") && e.contains("cluster.insecure"),
        "{e}"
    );
    let cfg = check(tls).unwrap();
    let t = cfg.cluster.tls.unwrap();
    assert_eq!(
        (t.reload_interval_ms, t.handshake_timeout_ms),
        (10_000, 5_000)
    );
    assert!(check("insecure = true\n").unwrap().cluster.insecure);
    let e = check(&format!("insecure = true\n{tls}")).unwrap_err();
    assert!(e.contains("exclude each other"), "{e}");
    let e = check(&format!("{tls}reload_interval_ms = 10\n")).unwrap_err();
    assert!(e.contains("reload_interval_ms"), "{e}");
    let e = check("[cluster.tls]\nca_file = \"ca.pem\"\n").unwrap_err();
    assert!(e.contains("cert_file"), "{e}");
}

/// The annotated example in deploy/ stays a valid configuration.
#[test]
fn deploy_example_loads() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/taskmesh.toml");
    let cfg = Config::load(Some(&path), Vec::new(), Overrides::default()).unwrap();
    assert_eq!(cfg.shards, 32);
    assert_eq!(cfg.log.format, "json");
}

/// Every section's own check runs when the whole configuration is checked.
#[test]
fn each_section_checks_its_keys() {
    let refused = |key: &str, value: &str| {
        let var = format!("TASKMESH_{}", key.to_ascii_uppercase().replace('.', "__"));
        let e = Config::load(None, vec![(var, value.to_string())], Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains(key), "{key} = {value}: {e}");
    };
    refused("http.max_body_bytes", "1023");
    refused("session.secret", "short");
    refused("tasks.list_page_size", "0");
    refused("tools.page_size", "0");
    refused("limits.max_inflight_per_session", "0");
    refused("raft.log_segment_bytes", "4095");
    refused("cluster.get_batch_max", "0");
    refused("log.format", "xml");
}

/// The defaults the runtime structs get are those the sections document.
#[test]
fn defaults_reach_the_runtime_settings() {
    let cfg = Config::default();
    cfg.validate().unwrap();
    let g = cfg.gateway_config(Vec::new());
    assert_eq!(
        (
            g.http.max_body_bytes,
            g.tools.page_size,
            g.tasks.list_page_size
        ),
        (1 << 20, 50, 50)
    );
    assert_eq!(
        (g.http.sse_buffer_events, g.session.verified_cache),
        (256, 65_536)
    );
    assert_eq!(g.limits.max_inflight_per_session, 256);
    assert_eq!(g.readiness.max_lag_entries, 100);
    assert_eq!(
        g.readiness.max_leader_silence_ms, 1_200,
        "two of the longest election timeouts"
    );
    let h = cfg.tasks.host_config(cfg.node_id);
    assert_eq!(h.node_id, 1);
    assert_eq!(h.grant_ttl(None), Some(3_600_000));
    assert_eq!(h.grant_ttl(Some(u64::MAX)), Some(86_400_000));
    assert_eq!(h.tasks.max_live_tasks, 10_000);
}

/// A check that spans sections stays with the node: a cluster member needs `session.secret`.
#[test]
fn a_cluster_member_needs_a_shared_secret() {
    let text = "[cluster]\ngrpc_listen = \"127.0.0.1:7101\"\ninsecure = true\n\
                peers = [{ id = 1, grpc = \"127.0.0.1:7101\" }]\n";
    let e = Config::parse(Some(text), "test", Vec::new(), Overrides::default()).unwrap_err();
    assert!(e.to_string().contains("session.secret"), "{e}");
}

#[test]
fn webhooks_that_cannot_work_are_refused_with_their_name() {
    let check = |text: &str| {
        Config::parse(Some(text), "test", Vec::new(), Overrides::default())
            .and_then(|c| c.validate().map(|()| c))
            .map(|_| ())
            .map_err(|e| format!("{e:#}"))
    };
    let secret = "whsec_KioqKioqKioqKioqKioqKioqKioqKioq";
    let hook = |url: &str, secret: &str| {
        format!("[[webhooks]]\nname = \"ci\"\nurl = \"{url}\"\nsecret = \"{secret}\"\n")
    };
    assert_eq!(check(&hook("https://hooks.example.com/x", secret)), Ok(()));
    for (text, says) in [
        (
            hook("http://hooks.example.com/x", secret),
            "webhooks.ci.url",
        ),
        (
            hook("https://169.254.169.254/", secret),
            "globally routable",
        ),
        (
            hook("https://hooks.example.com/x", "hunter2"),
            "webhooks.ci.secret",
        ),
        (
            format!(
                "[events]\nallow_addresses = [\"10.0.0.0/40\"]\n{}",
                hook("https://h.example.com/", secret)
            ),
            "events.allow_addresses",
        ),
        (
            "[events]\nmax_attempts = 0\n".to_owned(),
            "events.max_attempts",
        ),
    ] {
        let e = check(&text).unwrap_err();
        assert!(e.contains(says), "{text}: {e}");
    }
}
