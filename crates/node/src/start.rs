//! Starting what a node runs besides the gateway: the embedded single node's one-voter groups
//! ([`start_single`]), or a cluster member's metadata replica, internal gRPC server (mutual
//! TLS), shard replicas and reconciler ([`start_cluster`]); the upstream servers' tools
//! ([`start_upstreams`]); and the settings each group and the transport take from the
//! configuration. [`serve`](crate::serve) calls them, then serves MCP.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use taskmesh_host::Host;
use taskmesh_meta::MetaCommand;
use taskmesh_router::Router;
use taskmesh_rpc::METADATA_GROUP;
use taskmesh_shard::{MetaReplica, ShardConfig, ShardReplica, Store};
use taskmesh_tools::ToolRegistry;
use tokio_util::sync::CancellationToken;

use crate::cluster;
use crate::config::Config;

/// Name of the stable hash recorded in the cluster identity.
pub const HASH_NAME: &str = "fnv1a64";
/// How long a single node waits at start for each of its one-voter shards to elect itself.
const SINGLE_ELECTION_WAIT: Duration = Duration::from_secs(30);
/// How long one call to a peer's task service may take (a result attachment is a stream and
/// is not bound by it).
const PEER_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The settings of this node's replica of group `shard_id`.
pub(crate) fn shard_config(cfg: &Config, shard_id: u32) -> ShardConfig {
    cfg.raft
        .shard_config(shard_id, cfg.node_id, advertised(cfg))
}

/// The gRPC address peers reach this node at.
pub(crate) fn advertised(cfg: &Config) -> String {
    cfg.cluster.advertise.clone().unwrap_or_else(|| {
        cfg.cluster
            .grpc_listen
            .map(|a| a.to_string())
            .unwrap_or_default()
    })
}

/// The internal gRPC server: its stop signal and its task.
pub(crate) type GrpcServer = (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
);

/// What a node runs besides the gateway: its replicas and, in a cluster, the internal gRPC
/// server and the reconciler.
pub(crate) struct Running {
    pub(crate) router: Router,
    /// The metadata group's replica (cluster only).
    pub(crate) meta: Option<MetaReplica>,
    pub(crate) grpc: Option<GrpcServer>,
    pub(crate) reconciler: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    /// The node beat, which quiets idle groups (see `taskmesh_transport::beat`).
    pub(crate) beats: tokio::task::JoinHandle<()>,
}

/// The embedded single-node server: one single-voter group per shard, all on this node.
pub(crate) async fn start_single(
    cfg: &Config,
    store: &Store,
    host: &Host,
) -> anyhow::Result<Running> {
    for shard_id in 0..cfg.shards {
        let replica = <ShardReplica>::open(store.clone(), shard_config(cfg, shard_id))
            .await
            .map_err(|e| anyhow::anyhow!("opening shard {shard_id}: {e}"))?;
        replica
            .bootstrap_single()
            .await
            .map_err(|e| anyhow::anyhow!("initialising shard {shard_id}: {e}"))?;
        host.add_shard(replica)
            .map_err(|e| anyhow::anyhow!("shard {shard_id}: {e}"))?;
    }
    let registry = taskmesh_transport::ReplicaRegistry::new();
    for s in host.replicas() {
        s.wait_leader(SINGLE_ELECTION_WAIT)
            .await
            .map_err(|e| anyhow::anyhow!("shard {} has no leader: {e}", s.shard_id()))?;
        registry.insert(s);
    }
    // Single-voter groups have no peers to beat; they quiesce all the same.
    let beats = tokio::spawn(taskmesh_transport::beat::run(
        cfg.node_id,
        registry,
        taskmesh_transport::PeerChannels::new(taskmesh_rpc::dial::CONNECT_TIMEOUT),
        taskmesh_transport::BeatConfig::from_settings(&cfg.raft),
    ));
    Ok(Running {
        router: Router::new(host.clone()),
        meta: None,
        grpc: None,
        reconciler: None,
        beats,
    })
}

/// A cluster member: the metadata group, the replicas stored here, the internal gRPC server,
/// and the reconciler that creates or joins the cluster and follows its placement.
pub(crate) async fn start_cluster(
    cfg: &Config,
    store: &Store,
    host: &Host,
    hub: &Arc<taskmesh_gateway::resume::Hub>,
) -> anyhow::Result<Running> {
    let registry = taskmesh_transport::ReplicaRegistry::new();
    let seed_ids: std::collections::BTreeSet<u64> =
        cfg.cluster.peers.iter().map(|p| p.id).collect();
    // Until the metadata is known, the seeds are the members; see `admits` for after.
    let admission = {
        let seeds = seed_ids.clone();
        taskmesh_tls::cluster::Admission::new(move |id| seeds.contains(&id))
    };
    let (dialer, tls) = internal_tls(cfg, &admission)?;
    let pool = taskmesh_transport::PeerChannels::with_dialer(
        taskmesh_rpc::dial::CONNECT_TIMEOUT,
        dialer.clone(),
    )
    .with_heartbeat_batch(cfg.raft.heartbeat_batch_max);
    let transport = taskmesh_transport::TransportConfig::from_settings(&cfg.raft);
    transport
        .validate()
        .map_err(|e| anyhow::anyhow!("raft settings: {e}"))?;
    let open: cluster::OpenGroup = {
        let (store, cfg, pool, transport) =
            (store.clone(), cfg.clone(), pool.clone(), transport.clone());
        Arc::new(move |shard_id| {
            let (store, scfg, pool, transport) = (
                store.clone(),
                shard_config(&cfg, shard_id),
                pool.clone(),
                transport.clone(),
            );
            Box::pin(async move {
                taskmesh_transport::open_replica(store, scfg, &pool, &transport).await
            })
        })
    };
    let meta: MetaReplica = taskmesh_transport::open_replica(
        store.clone(),
        shard_config(cfg, METADATA_GROUP),
        &pool,
        &transport,
    )
    .await
    .map_err(|e| anyhow::anyhow!("opening the metadata group: {e}"))?;
    registry.insert(meta.clone());
    for shard_id in taskmesh_shard::stored_groups(store) {
        if shard_id >= cfg.shards {
            continue;
        }
        let replica = open(shard_id)
            .await
            .map_err(|e| anyhow::anyhow!("opening shard {shard_id}: {e}"))?;
        registry.insert(replica.clone());
        host.add_shard(replica)
            .map_err(|e| anyhow::anyhow!("shard {shard_id}: {e}"))?;
    }
    let seeds: BTreeMap<u64, String> = cfg
        .cluster
        .peers
        .iter()
        .map(|p| (p.id, p.grpc.clone()))
        .collect();
    let membership = Arc::new(cluster::Membership::new(
        cfg.node_id,
        meta.clone(),
        seeds.clone(),
        Duration::from_millis(cfg.cluster.request_retry_ms),
        dialer.clone(),
    ));
    {
        let (meta, host) = (meta.clone(), host.clone());
        admission.set(move |id| admits(&meta, &host, &seed_ids, id));
    }
    let mut create = None;
    if cfg.cluster.bootstrap {
        // The metadata group starts with this node and the lowest other peer ids as voters;
        // the reconciler adds the rest.
        let want = cfg.cluster.replication.max(1) as usize;
        let mut voters: BTreeMap<u64, String> = BTreeMap::new();
        voters.insert(cfg.node_id, advertised(cfg));
        for (id, addr) in &seeds {
            if voters.len() >= want {
                break;
            }
            voters.entry(*id).or_insert_with(|| addr.clone());
        }
        meta.bootstrap(voters)
            .await
            .map_err(|e| anyhow::anyhow!("bootstrapping the metadata group: {e}"))?;
        let mut nodes = seeds.clone();
        nodes.insert(cfg.node_id, advertised(cfg));
        create = Some(MetaCommand::Create {
            shards: cfg.shards,
            hash: HASH_NAME.into(),
            replication: cfg.cluster.replication,
            nodes: nodes.into_iter().collect(),
        });
    }

    let others: std::collections::HashMap<u64, String> = seeds
        .iter()
        .filter(|(id, _)| **id != cfg.node_id)
        .map(|(id, a)| (*id, a.clone()))
        .collect();
    let peers = Arc::new(
        taskmesh_router::Peers::with_dialer(others, PEER_REQUEST_TIMEOUT, dialer.clone())
            .context("cluster.peers")?
            .with_get_batching(taskmesh_router::GetBatching {
                max_items: cfg.cluster.get_batch_max,
                in_flight: cfg.cluster.get_batches_in_flight,
            }),
    );
    let book: taskmesh_router::service::AddressBook = {
        let m = membership.clone();
        Arc::new(move |id| m.address(id))
    };
    let grpc_addr = cfg
        .cluster
        .grpc_listen
        .context("cluster.grpc_listen is required")?;
    let listener = tokio::net::TcpListener::bind(grpc_addr)
        .await
        .with_context(|| format!("binding {grpc_addr}"))?;
    let router = Router::with_peers(
        host.clone(),
        cfg.node_id,
        Some(peers),
        Duration::from_millis(cfg.cluster.request_retry_ms),
    );
    // Every node lists the tools of the workers registered anywhere, and serves polls with
    // the tasks queued anywhere.
    router.spawn_worker_exchange();
    let raft_svc = taskmesh_transport::RaftService::new(cfg.node_id, registry.clone())
        .with_config(transport.clone())
        .into_server();
    let task_svc = taskmesh_router::service::TaskGrpc::new(host.clone(), book).into_server();
    let cluster_svc =
        cluster::ClusterGrpc::new(membership.clone(), host.clone(), router.clone()).into_server();
    let stream_svc = taskmesh_gateway::relay::StreamGrpc::new(hub.clone()).into_server();
    let handshake = Duration::from_millis(
        cfg.cluster
            .tls
            .as_ref()
            .map_or(0, |t| t.handshake_timeout_ms),
    );
    let incoming = taskmesh_rpc::peer::incoming(listener, tls, handshake);
    let (grpc_stop_tx, grpc_stop_rx) = tokio::sync::oneshot::channel::<()>();
    let grpc_server = tokio::spawn(async move {
        tonic::transport::Server::builder()
            .layer(tower::layer::layer_fn(taskmesh_router::Traced::new))
            .layer(tower::layer::layer_fn(taskmesh_rpc::peer::Access::new))
            .add_service(raft_svc)
            .add_service(task_svc)
            .add_service(cluster_svc)
            .add_service(stream_svc)
            .serve_with_incoming_shutdown(incoming, async move {
                let _ = grpc_stop_rx.await;
            })
            .await
    });

    let view = Arc::new(parking_lot::RwLock::new(membership.current()));
    {
        let view = view.clone();
        router.set_placement(Arc::new(move |shard| view.read().replicas(shard).to_vec()));
    }
    let beats = tokio::spawn(taskmesh_transport::beat::run(
        cfg.node_id,
        registry.clone(),
        pool.clone(),
        taskmesh_transport::BeatConfig::from_settings(&cfg.raft),
    ));
    let reconciler = cluster::Reconciler::new(
        cluster::ReconcileConfig {
            node_id: cfg.node_id,
            grpc_addr: advertised(cfg),
            create,
            shards: cfg.shards,
            interval: Duration::from_millis(cfg.cluster.reconcile_interval_ms),
            catch_up_entries: cfg.cluster.catch_up_entries,
            shards_in_flight: cfg.cluster.reconcile_shards_in_flight,
            leader_settle: Duration::from_millis(cfg.cluster.leader_settle_ms),
        },
        cluster::NodeHandles {
            membership,
            host: host.clone(),
            router: router.clone(),
            registry,
            open,
            view,
        },
    );
    Ok(Running {
        router,
        meta: Some(meta),
        grpc: Some((grpc_stop_tx, grpc_server)),
        reconciler: Some(tokio::spawn(reconciler.run())),
        beats,
    })
}

/// How this node's internal port is secured: mutual TLS from `[cluster.tls]` (the files
/// checked for changes from now on), or plain TCP with `cluster.insecure`, said loudly.
pub(crate) fn internal_tls(
    cfg: &Config,
    admission: &Arc<taskmesh_tls::cluster::Admission>,
) -> anyhow::Result<(
    taskmesh_rpc::dial::Dialer,
    Option<Arc<taskmesh_tls::cluster::ClusterTls>>,
)> {
    use taskmesh_tls::cluster::{ClusterTls, Identity, TlsFiles};
    let Some(t) = &cfg.cluster.tls else {
        tracing::warn!(
            "cluster.insecure = true: the internal gRPC port is plaintext and unauthenticated; \
             anyone who reaches it can read and forge every task and vote in every Raft group"
        );
        return Ok((taskmesh_rpc::dial::Dialer::plaintext(), None));
    };
    let files = TlsFiles {
        ca: t.ca_file.clone(),
        cert: t.cert_file.clone(),
        key: t.key_file.clone(),
    };
    let tls = ClusterTls::load(files, Some(Identity::Node(cfg.node_id)), admission.clone())
        .context("cluster.tls")?;
    tls.spawn_reload(Duration::from_millis(t.reload_interval_ms));
    Ok((taskmesh_rpc::dial::Dialer::mtls(tls.clone()), Some(tls)))
}

/// Whether node `id` may connect to this node's internal port: a member of the cluster
/// metadata; before this node knows the metadata, a configured peer; and, so that a removed
/// node can hand over what it leads, any node a Raft group hosted here still lists.
pub(crate) fn admits(
    meta: &MetaReplica,
    host: &Host,
    seeds: &std::collections::BTreeSet<u64>,
    id: u64,
) -> bool {
    let (known, member) = meta.read_local(|m| (!m.nodes.is_empty(), m.nodes.contains_key(&id)));
    member
        || (!known && seeds.contains(&id))
        || meta.members_watch().borrow().contains_key(&id)
        || host
            .replicas()
            .iter()
            .any(|r| r.members_watch().borrow().contains_key(&id))
}

/// The configured upstreams, each listed once (so that the node serves their tools from its
/// first request when they answer) and then kept up to date by its supervisor until `stop`.
pub(crate) async fn start_upstreams(
    cfg: &Config,
    tools: &Arc<ToolRegistry>,
    stop: &CancellationToken,
) -> Vec<Arc<taskmesh_upstream::Upstream>> {
    let mut upstreams = Vec::new();
    for u in &cfg.upstream {
        let up = taskmesh_upstream::Upstream::new(u.clone());
        let listed = match up.refresh(tools, 0).await {
            Ok(served) => {
                tracing::info!(upstream = %up.name(), tools = served, "upstream tools served");
                true
            }
            Err(e) => {
                tracing::warn!(upstream = %up.name(), error = %e,
                    "upstream not reached; its tools are absent until it answers");
                false
            }
        };
        tokio::spawn(up.clone().supervise(tools.clone(), listed, stop.clone()));
        upstreams.push(up);
    }
    upstreams
}
