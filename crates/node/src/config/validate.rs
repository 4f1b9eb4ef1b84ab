//! [`Config::validate`]: every setting that cannot work is refused at start, with a message
//! naming it. Each section checks itself (`validate()` beside its fields, in the crate that
//! owns it); here are the checks of the node's own keys and those that span sections.

use anyhow::bail;

use super::*;

impl Config {
    /// Reject settings that cannot work, with a message naming the setting.
    pub fn validate(&self) -> anyhow::Result<()> {
        for checked in [
            self.http.validate(),
            self.auth.validate(),
            self.session.validate(),
            self.tasks.validate(),
            self.workers.validate(),
            self.events.validate(),
            taskmesh_host::outbox::validate_webhooks(&self.webhooks, &self.events),
            self.tools.validate(),
            self.limits.validate(),
            self.raft.validate(),
            self.cluster.validate(),
        ] {
            checked.map_err(anyhow::Error::msg)?;
        }
        taskmesh_upstream::validate_all(&self.upstream)?;
        self.tracing.validate()?;
        if self.shards == 0 || !self.shards.is_power_of_two() || self.shards > MAX_SHARDS {
            bail!(
                "shards must be a power of two between 1 and {MAX_SHARDS} (got {})",
                self.shards
            );
        }
        if let Some(token) = self
            .workers
            .tokens
            .keys()
            .find(|t| self.auth.tokens.contains_key(*t))
        {
            let shown: String = token.chars().take(4).collect();
            bail!("workers.tokens and auth.tokens share a token ('{shown}...'): a credential is a client's or a worker's, not both");
        }
        if self.node_id == 0 {
            bail!("node_id must be at least 1");
        }
        if self.worker_threads > MAX_WORKER_THREADS {
            bail!(
                "worker_threads must be between 0 (one per CPU core) and {MAX_WORKER_THREADS} (got {})",
                self.worker_threads
            );
        }
        if !matches!(self.log.format.as_str(), "text" | "json") {
            bail!("log.format must be 'text' or 'json'");
        }
        if !self.cluster.peers.is_empty() {
            self.validate_cluster_member()?;
        }
        Ok(())
    }

    /// The checks that hold only for a cluster member, across `[cluster]`, `[raft]`,
    /// `[session]` and `node_id`.
    fn validate_cluster_member(&self) -> anyhow::Result<()> {
        let c = &self.cluster;
        match (&c.tls, c.insecure) {
            (None, false) => bail!(
                "the internal port needs [cluster.tls] (ca_file, cert_file, key_file; \
                 `taskmesh certs` makes them) or, on a network nothing else can reach, \
                 cluster.insecure = true"
            ),
            (Some(_), true) => {
                bail!("cluster.insecure = true and [cluster.tls] exclude each other")
            }
            (Some(tls), false) => {
                if tls.reload_interval_ms < 100 || tls.handshake_timeout_ms < 100 {
                    bail!(
                        "cluster.tls.reload_interval_ms and cluster.tls.handshake_timeout_ms \
                         must be at least 100"
                    );
                }
            }
            (None, true) => {}
        }
        let me = c.peers.iter().filter(|p| p.id == self.node_id).count();
        if c.bootstrap && me != 1 {
            bail!(
                "with cluster.bootstrap, cluster.peers must list this node (node_id {}) exactly once",
                self.node_id
            );
        }
        if c.grpc_listen.is_none() {
            bail!("cluster.grpc_listen is required when cluster.peers is set");
        }
        let mut ids: Vec<u64> = c.peers.iter().map(|p| p.id).collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.len() != c.peers.len() || ids.contains(&0) {
            bail!("cluster.peers: node ids must be unique and at least 1");
        }
        if c.replication == 0 {
            bail!("cluster.replication must be at least 1");
        }
        if c.reconcile_interval_ms == 0 {
            bail!("cluster.reconcile_interval_ms must be at least 1");
        }
        if c.reconcile_shards_in_flight == 0 {
            bail!("cluster.reconcile_shards_in_flight must be at least 1");
        }
        self.raft.validate_transfers().map_err(anyhow::Error::msg)?;
        if self.session.secret.is_none() {
            bail!(
                "session.secret is required in a cluster (every node must validate every session)"
            );
        }
        Ok(())
    }
}

impl ClusterConfig {
    /// Refuse values of `[cluster]` that cannot work whether or not `peers` is set, naming
    /// the key as it is written (`cluster.<key>`); those that matter only in a cluster are
    /// checked with the other sections they involve (`Config::validate_cluster_member`).
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=taskmesh_router::MAX_GET_BATCH).contains(&self.get_batch_max) {
            return Err(format!(
                "cluster.get_batch_max must be between 1 and {} (got {})",
                taskmesh_router::MAX_GET_BATCH,
                self.get_batch_max
            ));
        }
        if self.get_batches_in_flight == 0 {
            return Err("cluster.get_batches_in_flight must be at least 1".into());
        }
        Ok(())
    }
}
