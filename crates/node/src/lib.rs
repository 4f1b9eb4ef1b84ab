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

/// Run the single-node server until `shutdown` resolves.
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

    let mut shards = Vec::with_capacity(cfg.shards as usize);
    for shard_id in 0..cfg.shards {
        let scfg = ShardConfig {
            shard_id,
            node_id: cfg.node_id,
            heartbeat_interval_ms: cfg.raft.heartbeat_interval_ms,
            election_timeout_min_ms: cfg.raft.election_timeout_min_ms,
            election_timeout_max_ms: cfg.raft.election_timeout_max_ms,
            snapshot_logs_since_last: cfg.raft.snapshot_logs_since_last,
            max_in_snapshot_log_to_keep: cfg.raft.max_in_snapshot_log_to_keep,
            ..ShardConfig::default()
        };
        let replica = ShardReplica::open(db.clone(), scfg)
            .await
            .map_err(|e| anyhow::anyhow!("opening shard {shard_id}: {e}"))?;
        replica
            .bootstrap_single()
            .await
            .map_err(|e| anyhow::anyhow!("initialising shard {shard_id}: {e}"))?;
        shards.push(replica);
    }
    for s in &shards {
        s.wait_leader(Duration::from_secs(30))
            .await
            .map_err(|e| anyhow::anyhow!("shard {} has no leader: {e}", s.shard_id()))?;
    }

    let tools = if cfg.tools.builtin {
        ToolRegistry::with_builtins()
    } else {
        ToolRegistry::new()
    };
    let host = Host::new(cfg.host_config(), Arc::new(tools), shards.clone());
    host.start();
    let router = Router::new(host.clone());
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
    tracing::info!(address = %local, data_dir = %data_dir.display(), shards = cfg.shards, "taskmesh listening on http://{local}/mcp");

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stop_rx.await;
            })
            .await
    });
    shutdown.await;
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
    let flushing = db.clone();
    tokio::task::spawn_blocking(move || flushing.flush())
        .await
        .context("flushing the database")?
        .context("flushing the database")?;
    tracing::info!("taskmesh stopped; data flushed");
    Ok(())
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
