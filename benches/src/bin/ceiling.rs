//! `ceiling`: the fixed-answer HTTP server the load generator measures beside taskmesh.
//!
//!     ceiling --listen 127.0.0.1:9090 --body-bytes 257

use std::net::SocketAddr;

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "ceiling",
    about = "Fixed-answer HTTP server: the throughput ceiling"
)]
struct Args {
    #[arg(long, default_value = "127.0.0.1:9090")]
    listen: SocketAddr,
    /// Size of every answer; use the size of a taskmesh `tasks/get` answer.
    #[arg(long, default_value_t = 257)]
    body_bytes: usize,
    /// Runtime worker threads (default: one per core, like taskmesh).
    #[arg(long)]
    threads: Option<usize>,
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(t) = a.threads {
        rt.worker_threads(t);
    }
    rt.enable_all().build()?.block_on(async {
        let (listener, addr) = taskmesh_bench::ceiling::bind(a.listen).await?;
        println!("ceiling listening on http://{addr}/mcp");
        taskmesh_bench::ceiling::serve(listener, a.body_bytes).await?;
        Ok(())
    })
}
