//! The taskmesh process: configuration, the shard replicas it hosts, the gateway, lifecycle.
//!
//! [`serve`] is the embedded single-node server: it opens the node's sled database, records
//! (or checks) the cluster identity (shard count and hash), opens one single-voter Raft group
//! per shard, starts the task host and serves MCP over HTTP until the shutdown signal; then it
//! drains streams for a bounded time, stops task actors and shard groups and flushes the data.

pub mod config;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use taskmesh_gateway::{Gateway, GatewayConfig};
use taskmesh_host::{Host, HostConfig};
use taskmesh_router::Router;
use taskmesh_shard::{ShardConfig, ShardReplica};
use taskmesh_tools::ToolRegistry;

pub use config::Config;

/// Name of the stable hash recorded in the cluster identity.
pub const HASH_NAME: &str = "fnv1a64";

/// Record the cluster identity on first start; refuse to start with a different one.
fn check_identity(db: &sled::Db, shards: u32) -> anyhow::Result<()> {
    let meta = db.open_tree("cluster/meta")?;
    match meta.get("shards")? {
        None => {
            meta.insert("shards", &shards.to_be_bytes())?;
            meta.insert("hash", HASH_NAME.as_bytes())?;
            db.flush()?;
        }
        Some(v) => {
            let stored = u32::from_be_bytes(
                v.as_ref()
                    .try_into()
                    .context("corrupt shard count in cluster metadata")?,
            );
            if stored != shards {
                bail!("this data directory belongs to a cluster with {stored} shards; refusing to start with shards = {shards} (the shard count is fixed at cluster creation)");
            }
            let hash = meta
                .get("hash")?
                .map(|h| String::from_utf8_lossy(&h).into_owned());
            if hash.as_deref() != Some(HASH_NAME) {
                bail!("this data directory uses task hash {hash:?}; this build uses {HASH_NAME}");
            }
        }
    }
    Ok(())
}

/// The secret that signs session ids and cursors: from the config, else a random one kept in
/// the data directory.
fn session_secret(cfg: &Config, data_dir: &Path) -> anyhow::Result<Vec<u8>> {
    if let Some(s) = &cfg.session.secret {
        if s.len() < 16 {
            bail!("session.secret must be at least 16 characters");
        }
        return Ok(s.as_bytes().to_vec());
    }
    let path = data_dir.join("session.key");
    match std::fs::read(&path) {
        Ok(k) if k.len() >= 32 => Ok(k),
        _ => {
            let mut k = [0u8; 32];
            getrandom::fill(&mut k).map_err(|e| anyhow::anyhow!("OS random source failed: {e}"))?;
            std::fs::write(&path, k).with_context(|| format!("writing {}", path.display()))?;
            Ok(k.to_vec())
        }
    }
}

/// Open this node's replica of every shard: single-voter groups without peers, groups over
/// the gRPC transport in a cluster (registered so that peers' Raft traffic reaches them).
async fn open_shards(
    cfg: &Config,
    db: &sled::Db,
    registry: &taskmesh_transport::ReplicaRegistry,
) -> anyhow::Result<Vec<ShardReplica>> {
    let clustered = !cfg.cluster.peers.is_empty();
    let pool = taskmesh_transport::PeerChannels::new(Duration::from_secs(1));
    let transport = taskmesh_transport::TransportConfig::default();
    let node_addr = cfg
        .cluster
        .grpc_listen
        .map(|a| a.to_string())
        .unwrap_or_default();
    let mut shards = Vec::with_capacity(cfg.shards as usize);
    for shard_id in 0..cfg.shards {
        let scfg = ShardConfig {
            shard_id,
            node_id: cfg.node_id,
            node_addr: node_addr.clone(),
            heartbeat_interval_ms: cfg.raft.heartbeat_interval_ms,
            election_timeout_min_ms: cfg.raft.election_timeout_min_ms,
            election_timeout_max_ms: cfg.raft.election_timeout_max_ms,
            snapshot_logs_since_last: cfg.raft.snapshot_logs_since_last,
            max_in_snapshot_log_to_keep: cfg.raft.max_in_snapshot_log_to_keep,
            ..ShardConfig::default()
        };
        let replica = if clustered {
            taskmesh_transport::open_replica(db.clone(), scfg, &pool, &transport).await
        } else {
            ShardReplica::open(db.clone(), scfg).await
        }
        .map_err(|e| anyhow::anyhow!("opening shard {shard_id}: {e}"))?;
        registry.insert(replica.clone());
        shards.push(replica);
    }
    Ok(shards)
}

/// Run a node until `shutdown` resolves: the embedded single-node server when
/// `cluster.peers` is empty, a cluster member otherwise.
pub async fn serve(
    cfg: Config,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    cfg.validate()?;
    let data_dir = cfg.data_dir.clone();
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("creating data dir {}", data_dir.display()))?;
    let db = sled::Config::new()
        .path(data_dir.join("db"))
        .open()
        .with_context(|| format!("opening the database in {}", data_dir.display()))?;
    check_identity(&db, cfg.shards)?;
    let clustered = !cfg.cluster.peers.is_empty();

    let registry = taskmesh_transport::ReplicaRegistry::new();
    let shards = open_shards(&cfg, &db, &registry).await?;

    let tools = if cfg.tools.builtin {
        ToolRegistry::with_builtins()
    } else {
        ToolRegistry::new()
    };
    let host = Host::new(cfg.host_config(), Arc::new(tools), shards.clone());

    // In a cluster the internal gRPC server must run before the groups can elect.
    let (grpc_stop_tx, grpc_stop_rx) = tokio::sync::oneshot::channel::<()>();
    let mut grpc_server = None;
    let router = if clustered {
        let addrs: std::collections::HashMap<u64, String> = cfg
            .cluster
            .peers
            .iter()
            .map(|p| (p.id, p.grpc.clone()))
            .collect();
        let peers = Arc::new(
            taskmesh_router::Peers::new(addrs.clone(), Duration::from_secs(30))
                .map_err(|e| anyhow::anyhow!("cluster.peers: {e}"))?,
        );
        let book_addrs = addrs.clone();
        let book: taskmesh_router::service::AddressBook =
            Arc::new(move |id| book_addrs.get(&id).cloned());
        let grpc_addr = cfg
            .cluster
            .grpc_listen
            .context("cluster.grpc_listen is required")?;
        let listener = tokio::net::TcpListener::bind(grpc_addr)
            .await
            .with_context(|| format!("binding {grpc_addr}"))?;
        let raft_svc =
            taskmesh_transport::RaftService::new(cfg.node_id, registry.clone()).into_server();
        let task_svc = taskmesh_router::service::TaskGrpc::new(host.clone(), book).into_server();
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        grpc_server = Some(tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(raft_svc)
                .add_service(task_svc)
                .serve_with_incoming_shutdown(incoming, async move {
                    let _ = grpc_stop_rx.await;
                })
                .await
        }));
        if cfg.cluster.bootstrap {
            let members: std::collections::BTreeMap<u64, String> = addrs.into_iter().collect();
            for s in &shards {
                s.bootstrap(members.clone())
                    .await
                    .map_err(|e| anyhow::anyhow!("bootstrapping shard {}: {e}", s.shard_id()))?;
            }
            tracing::info!(
                nodes = members.len(),
                shards = cfg.shards,
                "cluster bootstrapped"
            );
        }
        taskmesh_router::Router::with_peers(
            host.clone(),
            cfg.node_id,
            Some(peers),
            Duration::from_millis(cfg.cluster.request_retry_ms),
        )
    } else {
        for s in &shards {
            s.bootstrap_single()
                .await
                .map_err(|e| anyhow::anyhow!("initialising shard {}: {e}", s.shard_id()))?;
        }
        for s in &shards {
            s.wait_leader(Duration::from_secs(30))
                .await
                .map_err(|e| anyhow::anyhow!("shard {} has no leader: {e}", s.shard_id()))?;
        }
        Router::new(host.clone())
    };
    host.start();

    let gw_cfg = GatewayConfig {
        secret: session_secret(&cfg, &data_dir)?,
        ..cfg.gateway_config()
    };
    let gateway = Gateway::new(gw_cfg, router, db.open_tree("sessions/ended")?);
    let app = taskmesh_gateway::http_router(gateway);

    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("binding {}", cfg.listen))?;
    let local: SocketAddr = listener.local_addr()?;
    tracing::info!(address = %local, data_dir = %data_dir.display(), shards = cfg.shards, node = cfg.node_id, "taskmesh listening on http://{local}/mcp");

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stop_rx.await;
            })
            .await
    });
    shutdown.await;
    if clustered {
        hand_over_leadership(&cfg, &shards).await;
    }
    tracing::info!("shutting down: draining open streams");
    let _ = stop_tx.send(());
    let drain = Duration::from_millis(cfg.shutdown_drain_ms);
    if tokio::time::timeout(drain, server).await.is_err() {
        tracing::info!(
            "drain time ({} ms) over; closing remaining streams",
            cfg.shutdown_drain_ms
        );
    }
    host.stop_all(Duration::from_secs(2)).await;
    for s in &shards {
        if let Err(e) = s.shutdown().await {
            tracing::warn!(shard = s.shard_id(), error = %e, "shard shutdown");
        }
    }
    let _ = grpc_stop_tx.send(());
    if let Some(g) = grpc_server {
        let _ = tokio::time::timeout(Duration::from_secs(2), g).await;
    }
    let flushing = db.clone();
    tokio::task::spawn_blocking(move || flushing.flush())
        .await
        .context("flushing the database")?
        .context("flushing the database")?;
    tracing::info!("taskmesh stopped; data flushed");
    Ok(())
}

/// Before a planned stop: hand the leadership of every shard this node leads to the most
/// up-to-date other voter and wait (bounded) until another leader is visible, so clients see
/// no unavailability.
async fn hand_over_leadership(cfg: &Config, shards: &[ShardReplica]) {
    let budget = Duration::from_millis(cfg.cluster.leader_transfer_ms);
    let led: Vec<&ShardReplica> = shards.iter().filter(|s| s.is_leader()).collect();
    let moves = led
        .iter()
        .map(|s| async move { (s.shard_id(), s.step_down(budget).await) });
    let mut moved = 0usize;
    for (shard, result) in futures::future::join_all(moves).await {
        match result {
            Ok(_) => moved += 1,
            Err(e) => tracing::warn!(shard, error = %e, "leadership hand-over failed"),
        }
    }
    let still = shards.iter().filter(|s| s.is_leader()).count();
    tracing::info!(moved, still_leading = still, "leadership handed over");
}

impl Config {
    pub fn host_config(&self) -> HostConfig {
        let ms = |v: u64| (v > 0).then_some(v);
        HostConfig {
            default_ttl_ms: ms(self.tasks.default_ttl_ms),
            max_ttl_ms: ms(self.tasks.max_ttl_ms),
            poll_interval_ms: self.tasks.poll_interval_ms,
            max_live_tasks: self.tasks.max_live_tasks,
            expiry_sweep_interval_ms: self.tasks.expiry_sweep_interval_ms,
            ..HostConfig::default()
        }
    }

    pub fn gateway_config(&self) -> GatewayConfig {
        GatewayConfig {
            allowed_origins: self.http.allowed_origins.clone(),
            auth_tokens: self.auth.tokens.clone(),
            max_body_bytes: self.http.max_body_bytes,
            tools_page_size: self.tools.page_size,
            tasks_page_size: self.tasks.list_page_size,
            cursor_ttl_ms: self.tasks.cursor_ttl_ms,
            sse_keepalive_ms: self.http.sse_keepalive_ms,
            rate_limit_per_second: self.limits.requests_per_second,
            rate_limit_burst: self.limits.burst,
            failed_lookup_alert_per_minute: self.limits.failed_lookup_alert_per_minute,
            ..GatewayConfig::default()
        }
    }
}
