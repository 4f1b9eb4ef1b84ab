//! The taskmesh process: configuration, the shard replicas it hosts, the gateway, lifecycle.
//!
//! [`serve`] is the embedded single-node server: it opens the node's sled database, records
//! (or checks) the cluster identity (shard count and hash), opens one single-voter Raft group
//! per shard, starts the task host and serves MCP over HTTP until the shutdown signal; then it
//! drains streams for a bounded time, stops task actors and shard groups and flushes the data.

pub mod cluster;
pub mod config;
pub mod descriptors;
pub mod listener;
mod start;

pub use start::HASH_NAME;
use start::{start_cluster, start_single, start_upstreams};

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use taskmesh_gateway::{Gateway, GatewayConfig};
use taskmesh_host::Host;
use taskmesh_shard::{MetaReplica, ShardReplica, Store};
use taskmesh_tools::ToolRegistry;
use tokio_util::sync::CancellationToken;

pub use config::Config;

/// How often recorded histogram samples are folded into their buckets.
const METRICS_UPKEEP: Duration = Duration::from_secs(5);
/// At shutdown: how long task actors get to stop after they were told to.
const ACTOR_STOP_WAIT: Duration = Duration::from_secs(2);
/// At shutdown: how long the internal gRPC server gets to close its connections.
const GRPC_STOP_WAIT: Duration = Duration::from_secs(2);

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
    // Its length was checked with `[session]` (`SessionSettings::validate`).
    if let Some(s) = &cfg.session.secret {
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

/// Run a node until `shutdown` resolves: the embedded single-node server when
/// `cluster.peers` is empty, a cluster member otherwise.
pub async fn serve(
    cfg: Config,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    cfg.validate()?;
    descriptors::raise_soft_limit();
    if cfg.metrics.enabled {
        // Before any handle is taken (the gateway's and the host's are taken on first use).
        taskmesh_metrics::install()?;
        taskmesh_metrics::spawn_upkeep(METRICS_UPKEEP);
    }
    let traces = taskmesh_telemetry::install(&cfg.tracing, cfg.node_id)?;
    if let Some(url) = cfg.tracing.traces_url().filter(|_| traces.is_some()) {
        tracing::info!(
            url,
            sample_ratio = cfg.tracing.sample_ratio,
            "exporting spans over OTLP/HTTP"
        );
    }
    let data_dir = cfg.data_dir.clone();
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("creating data dir {}", data_dir.display()))?;
    let db = sled::Config::new()
        .path(data_dir.join("db"))
        .open()
        .with_context(|| format!("opening the database in {}", data_dir.display()))?;
    check_identity(&db, cfg.shards)?;
    let wal = taskmesh_shard::storage::Wal::open(&data_dir.join("wal"), cfg.raft.wal_config())
        .with_context(|| format!("opening the write-ahead log in {}", data_dir.display()))?;
    let snapshots = taskmesh_shard::storage::SnapshotDir::open(&data_dir.join("snapshots"))
        .with_context(|| format!("opening the snapshot directory in {}", data_dir.display()))?;
    let store = Store::new(db.clone(), wal, snapshots);
    let clustered = !cfg.cluster.peers.is_empty();

    let tools = Arc::new(ToolRegistry::new());
    if cfg.tools.conformance {
        for t in taskmesh_fixtures::all(&tools) {
            tools.register(t);
        }
    }
    if cfg.tools.builtin {
        // A conformance tool of the same name (`multi_input`) takes the built-in one's place.
        for t in taskmesh_tools::builtin::all() {
            if tools.get(&t.spec().name).is_none() {
                tools.register(t);
            }
        }
    }
    let stop_upstreams = CancellationToken::new();
    let upstreams = start_upstreams(&cfg, &tools, &stop_upstreams).await;
    let host_cfg = taskmesh_host::HostConfig {
        workers: cfg.workers.clone(),
        events: cfg.events.clone(),
        webhooks: cfg.webhooks.clone(),
        ..cfg.tasks.host_config(cfg.node_id)
    };
    let host = Host::new(host_cfg, tools, cfg.shards);
    host.set_event_render(Arc::new(taskmesh_gateway::modern::tasks::event_data_json));
    // This node's SSE streams, served to the other nodes for reconnections that reach them.
    let gw_cfg = cfg.gateway_config(session_secret(&cfg, &data_dir)?);
    let hub = taskmesh_gateway::resume::Hub::new(cfg.node_id, gw_cfg.stream_settings());
    let mut running = if clustered {
        start_cluster(&cfg, &store, &host, &hub).await?
    } else {
        start_single(&cfg, &store, &host).await?
    };
    host.start();

    let gateway = Gateway::new(
        gw_cfg,
        running.router.clone(),
        db.open_tree("sessions/ended")?,
        db.open_tree("sessions/log_levels")?,
        hub,
    );
    let app = listener::App {
        router: taskmesh_gateway::http_router(gateway.clone()),
        gateway: gateway.clone(),
    };

    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("binding {}", cfg.listen))?;
    let local: SocketAddr = listener.local_addr()?;
    let bounds = listener::Bounds::of(&cfg.http);
    let tls = match &cfg.http.tls {
        None => None,
        Some(t) => {
            let tls =
                taskmesh_tls::ServerTls::load(&t.cert_file, &t.key_file, &[b"h2", b"http/1.1"])
                    .context("http.tls")?;
            tls.spawn_reload(Duration::from_millis(t.reload_interval_ms));
            Some(tls)
        }
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!(address = %local, data_dir = %data_dir.display(), shards = cfg.shards, node = cfg.node_id, "taskmesh listening on {scheme}://{local}/mcp");

    let ops = match cfg.metrics.listen {
        None => None,
        Some(addr) => {
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding metrics.listen {addr}"))?;
            tracing::info!(address = %l.local_addr()?, "metrics, health and readiness on http://{}/metrics", l.local_addr()?);
            let app = taskmesh_gateway::http::ops_router(gateway.clone());
            Some(tokio::spawn(async move {
                if let Err(e) = axum::serve(l, app).await {
                    tracing::warn!(error = %e, "the metrics listener stopped");
                }
            }))
        }
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(listener::serve(listener, app, bounds, tls, async move {
        let _ = stop_rx.await;
    }));
    // Run until asked to stop, or until the reconciler finds this node must not run.
    let mut fatal = None;
    match running.reconciler.as_mut() {
        Some(reconciler) => {
            tokio::select! {
                _ = shutdown => {}
                r = reconciler => {
                    let e = match r {
                        Ok(Err(e)) => e,
                        Ok(Ok(())) => anyhow::anyhow!("the cluster reconciler stopped"),
                        Err(e) => anyhow::anyhow!("the cluster reconciler failed: {e}"),
                    };
                    tracing::error!(error = %e, "stopping");
                    fatal = Some(e);
                }
            }
        }
        None => shutdown.await,
    }
    if let Some(r) = running.reconciler.take() {
        r.abort();
    }
    gateway.begin_stopping();
    if cfg.shutdown_unready_wait_ms > 0 {
        tracing::info!(
            wait_ms = cfg.shutdown_unready_wait_ms,
            "stopping: not ready any more; serving on while load balancers notice"
        );
        tokio::time::sleep(Duration::from_millis(cfg.shutdown_unready_wait_ms)).await;
    }
    if clustered && fatal.is_none() {
        hand_over_leadership(&cfg, &host.replicas(), running.meta.as_ref()).await;
    }
    tracing::info!("shutting down: draining open streams");
    // Subscriptions end with their response, so that clients know to listen elsewhere.
    gateway.end_subscriptions();
    let _ = stop_tx.send(());
    let drain = Duration::from_millis(cfg.shutdown_drain_ms);
    if tokio::time::timeout(drain, server).await.is_err() {
        tracing::info!(
            "drain time ({} ms) over; closing remaining streams",
            cfg.shutdown_drain_ms
        );
    }
    host.stop_all(ACTOR_STOP_WAIT).await;
    if let Some(ops) = ops {
        ops.abort();
    }
    stop_upstreams.cancel();
    for up in &upstreams {
        up.shutdown().await;
    }
    running.beats.abort();
    for s in host.replicas() {
        if let Err(e) = s.shutdown().await {
            tracing::warn!(shard = s.shard_id(), error = %e, "shard shutdown");
        }
    }
    if let Some(meta) = &running.meta {
        if let Err(e) = meta.shutdown().await {
            tracing::warn!(error = %e, "metadata group shutdown");
        }
    }
    if let Some((stop, server)) = running.grpc.take() {
        let _ = stop.send(());
        let _ = tokio::time::timeout(GRPC_STOP_WAIT, server).await;
    }
    store
        .flush()
        .await
        .context("flushing the database and the log")?;
    if let Some(traces) = traces {
        // The spans of the last requests, sent before the process ends.
        let _ = tokio::task::spawn_blocking(move || traces.shutdown()).await;
    }
    tracing::info!("taskmesh stopped; data flushed");
    match fatal {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Before a planned stop: hand the leadership of every shard this node leads to the most
/// up-to-date other voter and wait (bounded) until another leader is visible, so clients see
/// no unavailability.
async fn hand_over_leadership(cfg: &Config, shards: &[ShardReplica], meta: Option<&MetaReplica>) {
    let budget = Duration::from_millis(cfg.cluster.leader_transfer_ms);
    let moves: Vec<futures::future::BoxFuture<'_, _>> = shards
        .iter()
        .filter(|s| s.is_leader())
        .map(|s| Box::pin(async move { (s.shard_id(), s.step_down(budget).await) }) as _)
        .chain(
            meta.filter(|m| m.is_leader())
                .map(|m| Box::pin(async move { (m.shard_id(), m.step_down(budget).await) }) as _),
        )
        .collect();
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
    /// The gateway's settings: its own sections, the listing keys of `[tasks]`, and the
    /// readiness bounds taken from `[cluster]` and `[raft]`; `secret` signs session ids.
    pub fn gateway_config(&self, secret: Vec<u8>) -> GatewayConfig {
        GatewayConfig {
            http: self.http.clone(),
            auth: self.auth.clone(),
            session: self.session.clone(),
            limits: self.limits.clone(),
            tools: self.tools.clone(),
            tasks: self.tasks.clone(),
            events: self.events.clone(),
            readiness: taskmesh_gateway::settings::Readiness::of(
                self.cluster.catch_up_entries,
                self.raft.election_timeout_max_ms,
            ),
            secret,
        }
    }
}
