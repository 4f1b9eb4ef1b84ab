//! Where deliveries run: threads of their own, below the request path's priority.
//!
//! Rendering, signing, posting and settling events is background work: a create or a poll
//! must not wait behind it for a core. So every shard's delivery loop, and the attempts it
//! spawns, run on a runtime of `events.delivery_threads` threads whose scheduling priority is
//! lowered by `events.delivery_nice` (Linux: the threads' nice value; elsewhere the threads
//! run at the process's priority). Under a load that fills the cores, deliveries take the
//! time the request path leaves; the outbox holds what they owe meanwhile.

use std::future::Future;

use tokio::runtime::{Builder, Handle, Runtime};
use tokio::task::JoinHandle;

/// The runtime deliveries run on.
pub(crate) struct Lane {
    handle: Handle,
    /// Owned here; shut down without waiting when the lane is dropped.
    runtime: Option<Runtime>,
}

impl Lane {
    /// A runtime of `threads` worker threads, each lowered by `nice`.
    pub(crate) fn new(threads: usize, nice: i32) -> std::io::Result<Self> {
        let runtime = Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .max_blocking_threads(threads.max(1))
            .thread_name("taskmesh-delivery")
            .enable_all()
            .on_thread_start(move || lower_priority(nice))
            .build()?;
        Ok(Self {
            handle: runtime.handle().clone(),
            runtime: Some(runtime),
        })
    }

    /// Run `future` on the lane.
    pub(crate) fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(future)
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Lower the calling thread's scheduling priority by `nice` (Linux; a no-op elsewhere or for
/// 0). Raising a nice value needs no privilege; a failure leaves the thread as it was.
fn lower_priority(nice: i32) {
    #[cfg(target_os = "linux")]
    if nice > 0 {
        // SAFETY: `gettid` has no preconditions; `setpriority` on the calling thread's id only
        // changes that thread's nice value.
        unsafe {
            let tid = libc::gettid();
            let _ = libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What runs on the lane runs on its own threads, at the lowered priority.
    #[test]
    fn deliveries_run_on_lowered_threads_of_their_own() {
        let lane = Lane::new(1, 7).unwrap();
        let name = futures::executor::block_on(
            lane.spawn(async { std::thread::current().name().map(str::to_owned) }),
        )
        .unwrap();
        assert_eq!(name.as_deref(), Some("taskmesh-delivery"));
        #[cfg(target_os = "linux")]
        {
            let nice = futures::executor::block_on(lane.spawn(async {
                // SAFETY: `getpriority` reads the calling thread's nice value.
                unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
            }))
            .unwrap();
            assert_eq!(nice, 7);
        }
        let here = std::thread::current().id();
        let there =
            futures::executor::block_on(lane.spawn(async { std::thread::current().id() })).unwrap();
        assert_ne!(here, there);
    }
}
