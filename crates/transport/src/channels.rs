//! One gRPC channel per peer node, shared by every Raft group of this node.
//!
//! A channel is an HTTP/2 connection (re-dialled when it breaks) that carries any number of
//! concurrent calls, so the groups of a node multiplex their traffic to a peer over one
//! connection instead of opening one per group. Channels are created lazily: asking for one
//! never blocks on the network, and the first call through it connects.
//!
//! Channels are kept per node and address. While every group records the same address for a
//! peer (the normal case) that is one channel per peer. While a peer's address change is
//! reaching the groups, those that know the new address and those that do not yet each use
//! their own channel instead of replacing each other's; the oldest addresses of a peer are
//! forgotten once it has more than [`MAX_ADDRS_PER_PEER`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use tonic::transport::{Channel, Endpoint};

use taskmesh_rpc::dial::Dialer;

use crate::error::TransportError;
use crate::heartbeat_queues::{Queues, DEFAULT_BATCH};

/// How many addresses of one peer the pool keeps channels for.
pub const MAX_ADDRS_PER_PEER: usize = 4;

/// The channels to one peer node, oldest address first.
#[derive(Default)]
struct Peer {
    channels: Vec<(String, Channel)>,
}

impl Peer {
    fn get(&self, addr: &str) -> Option<Channel> {
        self.channels
            .iter()
            .find(|(a, _)| a == addr)
            .map(|(_, c)| c.clone())
    }
}

pub(crate) struct Inner {
    connect_timeout: Duration,
    dialer: Dialer,
    peers: RwLock<HashMap<u64, Peer>>,
    /// The queues of coalesced heartbeats (see `heartbeats.rs`).
    heartbeats: Queues,
    /// Heartbeats one coalesced call carries at most.
    heartbeat_batch: usize,
}

/// The pool of channels to peer nodes. Cheap to clone: clones share the pool.
#[derive(Clone)]
pub struct PeerChannels {
    inner: Arc<Inner>,
}

impl PeerChannels {
    /// An empty pool of plaintext channels (see [`PeerChannels::with_dialer`]) that give up
    /// dialling a peer after `connect_timeout`.
    pub fn new(connect_timeout: Duration) -> Self {
        Self::with_dialer(connect_timeout, Dialer::plaintext())
    }

    /// An empty pool whose channels connect through `dialer` (mutual TLS or plain TCP) and
    /// give up dialling a peer after `connect_timeout`.
    pub fn with_dialer(connect_timeout: Duration, dialer: Dialer) -> Self {
        Self {
            inner: Arc::new(Inner {
                connect_timeout,
                dialer,
                peers: RwLock::new(HashMap::new()),
                heartbeats: Queues::default(),
                heartbeat_batch: DEFAULT_BATCH,
            }),
        }
    }

    /// The channel to node `node_id` at `addr` (`host:port`, or an `http://` URI), created on
    /// first use.
    ///
    /// Must be called within a tokio runtime (a new channel's worker task is spawned on it).
    pub fn channel(&self, node_id: u64, addr: &str) -> Result<Channel, TransportError> {
        if let Some(channel) = self
            .inner
            .peers
            .read()
            .get(&node_id)
            .and_then(|p| p.get(addr))
        {
            return Ok(channel);
        }
        let endpoint = self.endpoint(node_id, addr)?;
        let mut peers = self.inner.peers.write();
        let peer = peers.entry(node_id).or_default();
        if let Some(channel) = peer.get(addr) {
            return Ok(channel);
        }
        if peer.channels.is_empty() {
            tracing::debug!(node = node_id, addr = %addr, "new peer channel");
        } else {
            tracing::info!(node = node_id, addr = %addr, "new address for a peer");
        }
        let channel = self.inner.dialer.connect_lazy(&endpoint);
        peer.channels.push((addr.to_string(), channel.clone()));
        if peer.channels.len() > MAX_ADDRS_PER_PEER {
            let (old, _) = peer.channels.remove(0);
            tracing::debug!(node = node_id, addr = %old, "forgetting an old peer address");
        }
        Ok(channel)
    }

    /// Carry at most `max` heartbeats (at least 1) in one coalesced call; up to 16 times as
    /// many may wait for one peer. Call before the pool is shared.
    pub fn with_heartbeat_batch(mut self, max: usize) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.heartbeat_batch = max.max(1);
        }
        self
    }

    /// Heartbeats one coalesced call carries at most.
    pub(crate) fn heartbeat_batch(&self) -> usize {
        self.inner.heartbeat_batch
    }

    pub(crate) fn heartbeat_queues(&self) -> &Queues {
        &self.inner.heartbeats
    }

    /// A handle that does not keep the pool alive (for the tasks the pool itself starts).
    pub(crate) fn downgrade(&self) -> std::sync::Weak<Inner> {
        Arc::downgrade(&self.inner)
    }

    /// The pool of a handle from [`PeerChannels::downgrade`], while it exists.
    pub(crate) fn upgrade(weak: &std::sync::Weak<Inner>) -> Option<Self> {
        weak.upgrade().map(|inner| Self { inner })
    }

    /// Forget the channels to `node_id` (a node that left the cluster); `true` if there were.
    pub fn remove(&self, node_id: u64) -> bool {
        self.inner.peers.write().remove(&node_id).is_some()
    }

    /// The addresses of `node_id` the pool holds channels for, oldest first.
    pub fn addrs_of(&self, node_id: u64) -> Vec<String> {
        self.inner
            .peers
            .read()
            .get(&node_id)
            .map(|p| p.channels.iter().map(|(a, _)| a.clone()).collect())
            .unwrap_or_default()
    }

    /// How many peer nodes the pool holds channels to.
    pub fn len(&self) -> usize {
        self.inner.peers.read().len()
    }

    /// Whether the pool holds channels to no peer node.
    pub fn is_empty(&self) -> bool {
        self.inner.peers.read().is_empty()
    }

    fn endpoint(&self, node_id: u64, addr: &str) -> Result<Endpoint, TransportError> {
        let endpoint =
            taskmesh_rpc::dial::endpoint(addr).map_err(|e| TransportError::InvalidAddress {
                node_id,
                addr: addr.to_string(),
                reason: e.to_string(),
            })?;
        // Snapshots are streamed in large chunks: let the flow-control window grow for them.
        Ok(endpoint
            .connect_timeout(self.inner.connect_timeout)
            .http2_adaptive_window(true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_channel_per_node_and_address() {
        let pool = PeerChannels::new(Duration::from_millis(100));
        pool.channel(1, "127.0.0.1:7001").unwrap();
        pool.channel(1, "127.0.0.1:7001").unwrap();
        pool.channel(2, "http://127.0.0.1:7002").unwrap();
        assert_eq!(pool.len(), 2);
        assert_eq!(pool.addrs_of(1), vec!["127.0.0.1:7001".to_string()]);

        // A moved peer: both addresses stay usable until the old one ages out.
        pool.channel(1, "127.0.0.1:7101").unwrap();
        pool.channel(1, "127.0.0.1:7001").unwrap();
        assert_eq!(pool.len(), 2);
        assert_eq!(pool.addrs_of(1), vec!["127.0.0.1:7001", "127.0.0.1:7101"]);
        for port in 7201..7201 + MAX_ADDRS_PER_PEER {
            pool.channel(1, &format!("127.0.0.1:{port}")).unwrap();
        }
        let kept = pool.addrs_of(1);
        assert_eq!(kept.len(), MAX_ADDRS_PER_PEER);
        assert!(!kept.contains(&"127.0.0.1:7001".to_string()));

        assert!(pool.remove(2));
        assert!(!pool.remove(2));
        assert_eq!(pool.len(), 1);
        assert!(pool.addrs_of(2).is_empty());
    }

    #[tokio::test]
    async fn unusable_addresses_are_rejected() {
        let pool = PeerChannels::new(Duration::from_millis(100));
        for addr in ["", "  ", "https://127.0.0.1:7001", "127.0.0.1:7001/a b"] {
            assert!(
                matches!(
                    pool.channel(1, addr),
                    Err(TransportError::InvalidAddress { .. })
                ),
                "{addr:?} was accepted"
            );
        }
        assert!(pool.is_empty());
    }
}
