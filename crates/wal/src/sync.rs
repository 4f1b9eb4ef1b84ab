//! The log's sync thread: one `fdatasync` serves every request that queued up while the
//! previous one ran (group commit); after each, the segments that were dead before it go.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use parking_lot::Mutex;

use crate::state::{segment_path, stopped, sync_dir, State};

/// A request to learn when the log is durable up to a position.
pub(crate) struct Waiter {
    pub(crate) upto: u64,
    pub(crate) done: Box<dyn FnOnce(io::Result<()>) + Send>,
}

/// The sync thread: serve every request that queued up with one sync of the active segment,
/// then delete the segments that were dead when the sync started.
pub(crate) fn sync_loop(state: &Mutex<State>, synced: &AtomicU64, rx: &mpsc::Receiver<Waiter>) {
    let fsync = taskmesh_metrics::metrics::histogram!(taskmesh_metrics::names::STORAGE_FSYNC);
    let segments = taskmesh_metrics::metrics::gauge!(taskmesh_metrics::names::WAL_SEGMENTS);
    segments.set(state.lock().segments.len() as f64);
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        batch.extend(rx.try_iter());
        let (target, file, dead, failed) = {
            let st = state.lock();
            (
                st.written,
                st.active.clone(),
                st.dead_segments(),
                st.failed.clone(),
            )
        };
        let result: Result<(), (io::ErrorKind, String)> = match failed {
            Some(why) => Err((io::ErrorKind::Other, stopped(&why).to_string())),
            None if synced.load(Ordering::Acquire) >= target => Ok(()),
            None => {
                let started = std::time::Instant::now();
                let r = file.sync_data();
                fsync.record(started.elapsed().as_secs_f64());
                r.map_err(|e| {
                    let why = format!("syncing the log: {e}");
                    state.lock().failed = Some(why.clone());
                    (e.kind(), why)
                })
            }
        };
        if result.is_ok() {
            synced.fetch_max(target, Ordering::AcqRel);
            if !dead.is_empty() {
                delete_segments(state, &dead);
            }
        }
        segments.set(state.lock().segments.len() as f64);
        for w in batch {
            debug_assert!(w.upto <= target);
            (w.done)(
                result
                    .clone()
                    .map_err(|(kind, why)| io::Error::new(kind, why)),
            );
        }
    }
}

fn delete_segments(state: &Mutex<State>, dead: &[u64]) {
    let dir = {
        let mut st = state.lock();
        for id in dead {
            st.segments.remove(id);
        }
        st.dir.clone()
    };
    for id in dead {
        let path = segment_path(&dir, *id);
        if let Err(e) = std::fs::remove_file(&path) {
            tracing::warn!(segment = %path.display(), error = %e, "could not delete a dead log segment");
        }
    }
    if let Err(e) = sync_dir(&dir) {
        tracing::warn!(dir = %dir.display(), error = %e, "could not sync the log directory");
    }
}
