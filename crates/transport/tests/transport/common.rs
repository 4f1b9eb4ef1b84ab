//! A small in-process cluster for the tests: nodes that each have their own sled database, their
//! own peer channel pool and a real gRPC server on a loopback port, and host one replica of the
//! test shard group.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use taskmesh_shard::{RaftSettings, ShardConfig, ShardError, ShardReplica};
use taskmesh_task::{Applied, Command, TaskRecord};
use taskmesh_transport::{
    open_replica, serve, BeatConfig, PeerChannels, RaftService, ReplicaRegistry, TransportConfig,
    TransportError,
};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The shard group every test node hosts.
pub const SHARD: u32 = 7;
/// How long a test waits for something the cluster should do by itself (an election, a
/// catch-up). Generous: the machine may be busy; nothing asserts how fast it happens.
pub const WAIT: Duration = Duration::from_secs(60);
/// The pause between two looks at the cluster while waiting.
pub const POLL: Duration = Duration::from_millis(50);
/// How long a stopping node's server lets its connections finish before it abandons them.
pub const DRAIN: Duration = Duration::from_secs(2);

pub fn record(id: &str) -> TaskRecord {
    TaskRecord::sample(id)
}

pub fn create(id: &str) -> Command {
    Command::Create { record: record(id) }
}

/// The shard settings of the test nodes, before the node id and address are filled in.
pub fn base_config() -> ShardConfig {
    let raft = RaftSettings {
        heartbeat_interval_ms: 100,
        election_timeout_min_ms: 500,
        election_timeout_max_ms: 1_000,
        ..RaftSettings::default()
    };
    raft.shard_config(SHARD, 1, String::new())
}

/// One running node of the test cluster.
pub struct TestNode {
    pub id: u64,
    pub addr: String,
    pub replica: ShardReplica,
    path: PathBuf,
    cfg: ShardConfig,
    db: taskmesh_shard::Store,
    registry: ReplicaRegistry,
    /// The server, and what stops it; `None` while the node is cut off.
    server: Option<Server>,
    /// The beat, with its settings.
    beats: Option<(JoinHandle<()>, BeatConfig)>,
}

/// A running server: what stops it, and its task.
type Server = (oneshot::Sender<()>, JoinHandle<Result<(), TransportError>>);

/// Serve node `id`'s groups on `listener` until the sender is used or dropped.
fn serve_on(id: u64, listener: TcpListener, registry: &ReplicaRegistry) -> Server {
    let (stop, stopped) = oneshot::channel::<()>();
    let service = RaftService::new(id, registry.clone());
    let server = tokio::spawn(serve(
        listener,
        service,
        async move {
            let _ = stopped.await;
        },
        DRAIN,
    ));
    (stop, server)
}

impl TestNode {
    /// Start node `id` on its storage under `path` (created if new) and a fresh loopback port.
    pub async fn start(id: u64, path: &Path, base: &ShardConfig) -> TestNode {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let db = taskmesh_shard::fixtures::open_store(path, |c| c).await;
        let cfg = ShardConfig {
            node_id: id,
            node_addr: addr.clone(),
            ..base.clone()
        };
        let pool = PeerChannels::new(Duration::from_secs(1));
        // Small chunks, so that snapshots travel in many of them.
        let transport = TransportConfig {
            snapshot_chunk_bytes: 1024,
            ..TransportConfig::default()
        };
        let replica = open_replica(db.clone(), cfg, &pool, &transport)
            .await
            .unwrap();
        let registry = ReplicaRegistry::new();
        registry.insert(replica.clone());
        let server = Some(serve_on(id, listener, &registry));
        TestNode {
            id,
            addr,
            replica,
            path: path.to_path_buf(),
            cfg: base.clone(),
            db,
            registry,
            server,
            beats: None,
        }
    }

    /// Run the node beat (`taskmesh_transport::beat`) with `cfg` until the node stops.
    pub fn start_beating(&mut self, cfg: BeatConfig) {
        let beat = tokio::spawn(taskmesh_transport::beat::run(
            self.id,
            self.registry.clone(),
            PeerChannels::new(Duration::from_secs(1)),
            cfg,
        ));
        self.beats = Some((beat, cfg));
    }

    /// Cut the node off from its peers as a partition would, its replica running on: its
    /// server stops (nothing reaches it) and so does its beat (a quiescent replica sends
    /// nothing else). [`TestNode::reconnect`] ends the partition.
    pub async fn cut_off(&mut self) {
        if let Some((beat, _)) = &self.beats {
            beat.abort();
        }
        assert!(self.server.is_some(), "the node is connected");
        self.stop_serving().await;
    }

    /// Stop the server, if it runs, and wait until it has.
    async fn stop_serving(&mut self) {
        if let Some((stop, server)) = self.server.take() {
            let _ = stop.send(());
            tokio::time::timeout(WAIT, server)
                .await
                .expect("the server stops")
                .unwrap()
                .unwrap();
        }
    }

    /// Serve again on the same address, and beat again if the node did.
    pub async fn reconnect(&mut self) {
        assert!(self.server.is_none(), "the node is connected");
        let listener = TcpListener::bind(&self.addr).await.unwrap();
        self.server = Some(serve_on(self.id, listener, &self.registry));
        if let Some((_, cfg)) = self.beats.take() {
            self.start_beating(cfg);
        }
    }

    /// Stop the node as a process exit would: its Raft, then its server; release its database.
    /// Returns what [`TestNode::start`] needs to start it again.
    pub async fn stop(mut self) -> (u64, PathBuf, ShardConfig) {
        if let Some((beat, _)) = &self.beats {
            beat.abort();
        }
        self.registry.remove(SHARD);
        self.replica.shutdown().await.unwrap();
        self.stop_serving().await;
        drop(self.replica);
        drop(self.db);
        (self.id, self.path, self.cfg)
    }

    /// Whether this node leads the group, by its own account.
    pub fn leads(&self) -> bool {
        let l = self.replica.leadership().borrow().clone();
        self.replica.is_leader() && l.is_leader && l.leader == Some(self.id)
    }

    pub fn term(&self) -> u64 {
        self.replica.leadership().borrow().term
    }

    /// Every record of the node's state, in task id order.
    pub fn records(&self) -> Vec<TaskRecord> {
        let mut records: Vec<TaskRecord> =
            self.replica.read_local(|s| s.records().cloned().collect());
        records.sort_by(|a, b| a.task_id.cmp(&b.task_id));
        records
    }

    pub fn has(&self, task_id: &str) -> bool {
        self.replica.read_local(|s| s.get(task_id).is_some())
    }
}

/// Start nodes `ids` in directories under `root`.
pub async fn start_cluster(root: &Path, ids: &[u64], base: &ShardConfig) -> Vec<TestNode> {
    let mut nodes = Vec::new();
    for id in ids {
        nodes.push(TestNode::start(*id, &root.join(format!("node-{id}")), base).await);
    }
    nodes
}

/// The voters and their addresses.
pub fn members(nodes: &[TestNode]) -> BTreeMap<u64, String> {
    nodes.iter().map(|n| (n.id, n.addr.clone())).collect()
}

/// Bootstrap the group on every node with all of them as voters.
pub async fn bootstrap(nodes: &[TestNode]) {
    let members = members(nodes);
    for n in nodes {
        n.replica.bootstrap(members.clone()).await.unwrap();
    }
}

pub fn node(nodes: &[TestNode], id: u64) -> &TestNode {
    nodes.iter().find(|n| n.id == id).unwrap()
}

/// The node that leads the group now with the highest term, if any.
pub fn current_leader(nodes: &[TestNode]) -> Option<&TestNode> {
    nodes.iter().filter(|n| n.leads()).max_by_key(|n| n.term())
}

/// Wait until one node leads and every node in `nodes` knows it as leader in the same term;
/// returns the leader's id.
pub async fn stable_leader(nodes: &[TestNode]) -> u64 {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(leader) = current_leader(nodes) {
            let term = leader.term();
            let agreed = nodes.iter().all(|n| {
                let l = n.replica.leadership().borrow().clone();
                l.leader == Some(leader.id) && l.term == term && l.is_leader == (n.id == leader.id)
            });
            if agreed {
                return leader.id;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no leader that every node agrees on within {WAIT:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Propose `cmd` at whichever node leads, retrying through elections (proposals are idempotent
/// by task id, so a retry of one that did commit changes nothing).
pub async fn propose(nodes: &[TestNode], cmd: Command) -> Applied {
    let deadline = Instant::now() + WAIT;
    loop {
        let last: Option<ShardError> = match current_leader(nodes) {
            Some(leader) => match leader.replica.propose(cmd.clone()).await {
                Ok(applied) => return applied,
                Err(e) => Some(e),
            },
            None => None,
        };
        assert!(
            Instant::now() < deadline,
            "proposal not accepted within {WAIT:?}; last error: {last:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Wait until `check` holds, failing with `what` after [`WAIT`].
pub async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !check() {
        assert!(Instant::now() < deadline, "not within {WAIT:?}: {what}");
        tokio::time::sleep(POLL).await;
    }
}

/// Point the group's membership at node `id`'s new address, through whichever node leads.
pub async fn set_addr(nodes: &[TestNode], id: u64, addr: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let last = match current_leader(nodes) {
            Some(leader) => match leader.replica.set_node_addr(id, addr.to_string()).await {
                Ok(()) => return,
                Err(e) => Some(e),
            },
            None => None,
        };
        assert!(
            Instant::now() < deadline,
            "address change not committed within {WAIT:?}; last error: {last:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}
