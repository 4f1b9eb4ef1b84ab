//! [`Config::validate`]: every setting that cannot work is refused at start, with a message
//! naming it.

use anyhow::bail;

use super::*;

impl Config {
    /// Reject settings that cannot work, with a message naming the setting.
    pub fn validate(&self) -> anyhow::Result<()> {
        taskmesh_upstream::validate_all(&self.upstream)?;
        self.tracing.validate()?;
        if self.shards == 0 || !self.shards.is_power_of_two() || self.shards > MAX_SHARDS {
            bail!(
                "shards must be a power of two between 1 and {MAX_SHARDS} (got {})",
                self.shards
            );
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
        if self.limits.max_inflight_per_session == 0 {
            bail!("limits.max_inflight_per_session must be at least 1");
        }
        let segments = taskmesh_wal::MIN_SEGMENT_BYTES..=taskmesh_wal::MAX_SEGMENT_BYTES;
        if !segments.contains(&self.raft.log_segment_bytes) {
            bail!(
                "raft.log_segment_bytes must be between {} and {} (got {})",
                segments.start(),
                segments.end(),
                self.raft.log_segment_bytes
            );
        }
        if self.raft.log_cache_bytes > MAX_LOG_CACHE_BYTES {
            bail!(
                "raft.log_cache_bytes must be at most {MAX_LOG_CACHE_BYTES} (got {}): it is \
                 held per group",
                self.raft.log_cache_bytes
            );
        }
        if self.http.max_streams_per_session == 0 {
            bail!("http.max_streams_per_session must be at least 1");
        }
        if !(1..=MAX_LISTEN_TASK_IDS).contains(&self.http.max_listen_task_ids) {
            bail!(
                "http.max_listen_task_ids must be between 1 and {MAX_LISTEN_TASK_IDS} (got {})",
                self.http.max_listen_task_ids
            );
        }
        if self.http.max_sse_streams == 0 || self.http.max_sse_streams_per_principal == 0 {
            bail!("http.max_sse_streams and http.max_sse_streams_per_principal must be at least 1");
        }
        if self.http.max_connections == 0 {
            bail!("http.max_connections must be at least 1");
        }
        if self.http.header_read_timeout_ms < 100 {
            bail!(
                "http.header_read_timeout_ms must be at least 100 (got {})",
                self.http.header_read_timeout_ms
            );
        }
        if !(MIN_HEADER_BYTES..=MAX_HEADER_BYTES).contains(&self.http.max_header_bytes) {
            bail!(
                "http.max_header_bytes must be between {MIN_HEADER_BYTES} and {MAX_HEADER_BYTES} (got {})",
                self.http.max_header_bytes
            );
        }
        if let Some(tls) = &self.http.tls {
            if tls.reload_interval_ms < 100 {
                bail!("http.tls.reload_interval_ms must be at least 100");
            }
        }
        if self.http.body_read_timeout_ms < 100 {
            bail!(
                "http.body_read_timeout_ms must be at least 100 (got {})",
                self.http.body_read_timeout_ms
            );
        }
        if self.http.max_listen_streams_per_principal == 0 {
            bail!("http.max_listen_streams_per_principal must be at least 1");
        }
        if self.http.request_state_ttl_ms < 1000 {
            bail!(
                "http.request_state_ttl_ms must be at least 1000 (got {})",
                self.http.request_state_ttl_ms
            );
        }
        if !(1..=MAX_SSE_BUFFER_EVENTS).contains(&self.http.sse_buffer_events) {
            bail!(
                "http.sse_buffer_events must be between 1 and {MAX_SSE_BUFFER_EVENTS} (got {})",
                self.http.sse_buffer_events
            );
        }
        if self.http.sse_max_stream_ms != 0 && self.http.sse_max_stream_ms < 1000 {
            bail!(
                "http.sse_max_stream_ms must be 0 (never) or at least 1000 (got {})",
                self.http.sse_max_stream_ms
            );
        }
        if self.tasks.max_live_tasks == 0 {
            bail!("tasks.max_live_tasks must be at least 1");
        }
        if !(1..=taskmesh_router::MAX_GET_BATCH).contains(&self.cluster.get_batch_max) {
            bail!(
                "cluster.get_batch_max must be between 1 and {} (got {})",
                taskmesh_router::MAX_GET_BATCH,
                self.cluster.get_batch_max
            );
        }
        if !self.cluster.peers.is_empty() {
            match (&self.cluster.tls, self.cluster.insecure) {
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
        }
        if self.cluster.get_batches_in_flight == 0 {
            bail!("cluster.get_batches_in_flight must be at least 1");
        }
        if self.tasks.poll_interval_ms == 0 {
            bail!("tasks.poll_interval_ms must be at least 1");
        }
        if self.tasks.reconcile_interval_ms == 0 {
            bail!("tasks.reconcile_interval_ms must be at least 1");
        }
        if self.tasks.write_retry_min_ms == 0
            || self.tasks.write_retry_max_ms < self.tasks.write_retry_min_ms
        {
            bail!(
                "tasks.write_retry_min_ms must be at least 1 and at most tasks.write_retry_max_ms \
                 (got {} and {})",
                self.tasks.write_retry_min_ms,
                self.tasks.write_retry_max_ms
            );
        }
        if self.tasks.max_result_bytes < 1024 {
            bail!("tasks.max_result_bytes must be at least 1024");
        }
        if self.tasks.list_page_size == 0 || self.tools.page_size == 0 {
            bail!("tasks.list_page_size and tools.page_size must be at least 1");
        }
        if self.tasks.max_ttl_ms > 0 && self.tasks.default_ttl_ms > self.tasks.max_ttl_ms {
            bail!("tasks.default_ttl_ms must not exceed tasks.max_ttl_ms");
        }
        if self.http.max_body_bytes < 1024 {
            bail!("http.max_body_bytes must be at least 1024");
        }
        if self.raft.election_timeout_min_ms <= self.raft.heartbeat_interval_ms
            || self.raft.election_timeout_max_ms <= self.raft.election_timeout_min_ms
        {
            bail!("raft timeouts must satisfy heartbeat_interval_ms < election_timeout_min_ms < election_timeout_max_ms");
        }
        if self.raft.heartbeat_batch_max == 0 {
            bail!("raft.heartbeat_batch_max must be at least 1");
        }
        if self.raft.beat_interval_ms == 0
            || self.raft.beat_interval_ms.saturating_mul(2) > self.raft.election_timeout_min_ms
        {
            bail!(
                "raft.beat_interval_ms ({}) must be at least 1 and at most half of \
                 raft.election_timeout_min_ms ({})",
                self.raft.beat_interval_ms,
                self.raft.election_timeout_min_ms
            );
        }
        if self.raft.quiet_recheck_ms < self.raft.beat_interval_ms {
            bail!(
                "raft.quiet_recheck_ms ({}) must be at least raft.beat_interval_ms ({})",
                self.raft.quiet_recheck_ms,
                self.raft.beat_interval_ms
            );
        }
        if self.raft.quiesce_after_ms != 0
            && self.raft.quiesce_after_ms < 2 * self.raft.heartbeat_interval_ms
        {
            bail!(
                "raft.quiesce_after_ms ({}) must be 0 (never quiesce) or at least twice \
                 raft.heartbeat_interval_ms ({})",
                self.raft.quiesce_after_ms,
                self.raft.heartbeat_interval_ms
            );
        }
        if !matches!(self.log.format.as_str(), "text" | "json") {
            bail!("log.format must be 'text' or 'json'");
        }
        if !self.cluster.peers.is_empty() {
            let me = self
                .cluster
                .peers
                .iter()
                .filter(|p| p.id == self.node_id)
                .count();
            if self.cluster.bootstrap && me != 1 {
                bail!(
                    "with cluster.bootstrap, cluster.peers must list this node (node_id {}) exactly once",
                    self.node_id
                );
            }
            if self.cluster.grpc_listen.is_none() {
                bail!("cluster.grpc_listen is required when cluster.peers is set");
            }
            let mut ids: Vec<u64> = self.cluster.peers.iter().map(|p| p.id).collect();
            ids.sort_unstable();
            ids.dedup();
            if ids.len() != self.cluster.peers.len() || ids.contains(&0) {
                bail!("cluster.peers: node ids must be unique and at least 1");
            }
            if self.cluster.replication == 0 {
                bail!("cluster.replication must be at least 1");
            }
            if self.cluster.reconcile_interval_ms == 0 {
                bail!("cluster.reconcile_interval_ms must be at least 1");
            }
            if self.cluster.reconcile_shards_in_flight == 0 {
                bail!("cluster.reconcile_shards_in_flight must be at least 1");
            }
            if self.raft.snapshot_chunk_bytes == 0 || self.raft.install_snapshot_timeout_ms == 0 {
                bail!("raft.snapshot_chunk_bytes and raft.install_snapshot_timeout_ms must be at least 1");
            }
            if self.session.secret.is_none() {
                bail!("session.secret is required in a cluster (every node must validate every session)");
            }
        }
        if let Err(e) = self.auth.validate() {
            bail!("{e}");
        }
        Ok(())
    }
}
