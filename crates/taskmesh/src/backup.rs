//! `taskmesh backup DIR` and `taskmesh restore DIR`: every task record of a cluster, copied
//! out through one node's cluster service into a directory, and written back into a cluster
//! (the same one, or a new one with the same shard count).
//!
//! A backup directory holds one file per shard, `shard-NNNNN.jsonl` (one record per line, in
//! the durable JSON form of `taskmesh_task::TaskRecord`), and `manifest.json`, written last:
//! a directory without it is an unfinished backup, which `restore` refuses. Each shard is read
//! in pages on its leader, each page a linearizable read, so the backup holds every task
//! acknowledged before it began (and not yet expired), each record as it stood when its page
//! was read.

use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde_json::{json, Value};
use taskmesh_node::cluster::{client_for_backup, export_page, fetch_metadata, import_page};
use taskmesh_router::convert::{record_from_pb, record_to_pb};
use taskmesh_rpc::dial::Dialer;
use taskmesh_rpc::v1::cluster_service_client::ClusterServiceClient;
use taskmesh_task::TaskRecord;
use tonic::transport::Channel;

/// What `manifest.json` says its format is.
pub const FORMAT: &str = "taskmesh-backup/1";
/// Records asked for per page.
const PAGE_RECORDS: u32 = 1_000;
/// Records written back per import call at most, and about how many bytes.
const IMPORT_RECORDS: usize = 1_000;
const IMPORT_BYTES: usize = 1 << 20;
/// Attempts at one page before the command gives up (a leader change, a node restart).
const PAGE_ATTEMPTS: u32 = 5;
/// The pause between two attempts at a page.
const PAGE_RETRY_PAUSE: Duration = Duration::from_secs(1);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn shard_file(dir: &Path, shard: u32) -> PathBuf {
    dir.join(format!("shard-{shard:05}.jsonl"))
}

/// Call `page` until it succeeds or a non-transient error (or [`PAGE_ATTEMPTS`]) ends it.
async fn with_retries<T, F, Fut>(what: &str, mut page: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    let mut attempt = 1;
    loop {
        match page().await {
            Ok(v) => return Ok(v),
            Err(s) => {
                let transient = matches!(
                    s.code(),
                    tonic::Code::Unavailable
                        | tonic::Code::DeadlineExceeded
                        | tonic::Code::Aborted
                        | tonic::Code::Unknown
                );
                if !transient || attempt >= PAGE_ATTEMPTS {
                    anyhow::bail!("{what}: {}", s.message());
                }
                attempt += 1;
                tokio::time::sleep(PAGE_RETRY_PAUSE).await;
            }
        }
    }
}

/// Copy every record of the cluster that the node at `peer` belongs to into `dir`, which must
/// not exist or be empty.
pub async fn backup(dialer: &Dialer, peer: &str, dir: &Path, as_json: bool) -> anyhow::Result<()> {
    if dir.exists() {
        let mut entries =
            std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
        anyhow::ensure!(
            entries.next().is_none(),
            "{} is not empty: a backup goes into a new or empty directory",
            dir.display()
        );
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let started_at_ms = now_ms();
    let meta = fetch_metadata(dialer, peer).await?;
    let mut client = client_for_backup(dialer, peer)?;
    let mut per_shard = Vec::new();
    let mut total = 0u64;
    for shard in 0..meta.shards {
        let n = backup_shard(&mut client, shard, &shard_file(dir, shard)).await?;
        if !as_json {
            println!("shard {shard}: {n} records");
        }
        per_shard.push(json!({"shard": shard, "records": n}));
        total += n;
    }
    let manifest = json!({
        "format": FORMAT,
        "version": env!("CARGO_PKG_VERSION"),
        "shards": meta.shards,
        "taskHash": taskmesh_node::HASH_NAME,
        "startedAtMs": started_at_ms,
        "finishedAtMs": now_ms(),
        "records": total,
        "perShard": per_shard,
    });
    write_durably(&dir.join("manifest.json"), |w| {
        serde_json::to_writer_pretty(&mut *w, &manifest)?;
        w.write_all(b"\n")?;
        Ok(())
    })?;
    sync_dir(dir)?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&manifest)?);
    } else {
        println!(
            "backed up {total} records of {} shards into {}",
            meta.shards,
            dir.display()
        );
    }
    Ok(())
}

/// Write a file and flush it to disk.
fn write_durably(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<&std::fs::File>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = BufWriter::new(&file);
    write(&mut w).with_context(|| format!("writing {}", path.display()))?;
    w.flush()
        .with_context(|| format!("writing {}", path.display()))?;
    drop(w);
    file.sync_all()
        .with_context(|| format!("flushing {}", path.display()))?;
    Ok(())
}

fn sync_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("flushing {}", dir.display()))
}

/// Every record of `shard`, page by page, into `path` (each page written as it arrives, the
/// file flushed to disk at the end); how many.
async fn backup_shard(
    client: &mut ClusterServiceClient<Channel>,
    shard: u32,
    path: &Path,
) -> anyhow::Result<u64> {
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut out = BufWriter::new(&file);
    let mut count = 0u64;
    let mut after: Option<(String, String)> = None;
    loop {
        let page = with_retries(&format!("reading shard {shard}"), || {
            let mut c = client.clone();
            let after = after.clone();
            async move {
                let cursor = after.as_ref().map(|(o, t)| (o.as_str(), t.as_str()));
                export_page(&mut c, shard, cursor, PAGE_RECORDS).await
            }
        })
        .await?;
        for p in page.records {
            let record = record_from_pb(p)
                .with_context(|| format!("shard {shard}: a malformed record came back"))?;
            after = Some((record.owner.clone(), record.task_id.clone()));
            serde_json::to_writer(&mut out, &record)
                .map_err(std::io::Error::from)
                .and_then(|()| out.write_all(b"\n"))
                .with_context(|| format!("writing {}", path.display()))?;
            count += 1;
        }
        if page.done {
            break;
        }
        anyhow::ensure!(
            after.is_some(),
            "shard {shard}: an empty page that is not the last"
        );
    }
    out.flush()
        .with_context(|| format!("writing {}", path.display()))?;
    drop(out);
    file.sync_all()
        .with_context(|| format!("flushing {}", path.display()))?;
    Ok(count)
}

/// Write the records of the backup in `dir` into the cluster of the node at `peer`, which must
/// have the backup's shard count. Records the cluster holds already are left as they are.
pub async fn restore(dialer: &Dialer, peer: &str, dir: &Path, as_json: bool) -> anyhow::Result<()> {
    let manifest_path = dir.join("manifest.json");
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(&manifest_path).with_context(|| {
            format!(
                "reading {} (a backup without it did not finish)",
                manifest_path.display()
            )
        })?)
        .with_context(|| format!("parsing {}", manifest_path.display()))?;
    anyhow::ensure!(
        manifest["format"] == FORMAT,
        "{} is not a taskmesh backup of format {FORMAT} (format {})",
        dir.display(),
        manifest["format"]
    );
    let shards = manifest["shards"]
        .as_u64()
        .and_then(|s| u32::try_from(s).ok())
        .context("the manifest has no shard count")?;
    let meta = fetch_metadata(dialer, peer).await?;
    anyhow::ensure!(
        meta.shards == shards,
        "the backup has {shards} shards and the cluster {}: a backup restores only into a \
         cluster with the same shard count",
        meta.shards
    );
    let mut client = client_for_backup(dialer, peer)?;
    let (mut read, mut inserted) = (0u64, 0u64);
    let mut per_shard = Vec::new();
    for shard in 0..shards {
        let (r, i) = restore_shard(&mut client, shard, &shard_file(dir, shard)).await?;
        if !as_json {
            println!("shard {shard}: {r} records, {i} inserted");
        }
        per_shard.push(json!({"shard": shard, "records": r, "inserted": i}));
        read += r;
        inserted += i;
    }
    if as_json {
        let out = json!({"records": read, "inserted": inserted, "perShard": per_shard});
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "restored {read} records from {}: {inserted} inserted, {} held already",
            dir.display(),
            read - inserted
        );
    }
    Ok(())
}

/// The records of one shard's file into the cluster; (records read, inserted).
async fn restore_shard(
    client: &mut ClusterServiceClient<Channel>,
    shard: u32,
    path: &Path,
) -> anyhow::Result<(u64, u64)> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let (mut read, mut inserted) = (0u64, 0u64);
    let mut batch: Vec<TaskRecord> = Vec::new();
    let mut bytes = 0;
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        if line.is_empty() {
            continue;
        }
        let record: TaskRecord = serde_json::from_str(&line)
            .with_context(|| format!("{} line {}: not a task record", path.display(), n + 1))?;
        bytes += line.len();
        batch.push(record);
        read += 1;
        if batch.len() >= IMPORT_RECORDS || bytes >= IMPORT_BYTES {
            inserted += send(client, shard, std::mem::take(&mut batch)).await?;
            bytes = 0;
        }
    }
    if !batch.is_empty() {
        inserted += send(client, shard, batch).await?;
    }
    Ok((read, inserted))
}

async fn send(
    client: &mut ClusterServiceClient<Channel>,
    shard: u32,
    batch: Vec<TaskRecord>,
) -> anyhow::Result<u64> {
    let records: Vec<_> = batch.into_iter().map(record_to_pb).collect();
    with_retries(&format!("writing shard {shard}"), || {
        let mut c = client.clone();
        let records = records.clone();
        async move { import_page(&mut c, shard, records).await }
    })
    .await
}
