//! `taskmesh`: the server binary.
//!
//! `taskmesh serve` with no arguments runs the embedded default: a complete single-node server
//! on `127.0.0.1:8080/mcp` with its data under `./data`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use taskmesh_node::config::{Config, Overrides};

#[derive(Parser)]
#[command(
    name = "taskmesh",
    version,
    about = "A durable, sharded server for MCP tasks"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a complete single-node server.
    Serve {
        /// Listen address for MCP (served at /mcp).
        #[arg(long)]
        listen: Option<SocketAddr>,
        /// Data directory.
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// TOML configuration file (also TASKMESH_CONFIG).
        #[arg(long, env = "TASKMESH_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Run one node of a cluster (node id, addresses, peers and data dir from the config).
    Node {
        /// TOML configuration file (also TASKMESH_CONFIG).
        #[arg(long, env = "TASKMESH_CONFIG")]
        config: PathBuf,
        /// Create the cluster's shard groups with every configured peer as a voter. Run once,
        /// on one node; repeating it is harmless.
        #[arg(long)]
        bootstrap: bool,
        /// Listen address for MCP, overriding the config.
        #[arg(long)]
        listen: Option<SocketAddr>,
    },
}

fn init_logging(cfg: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&cfg.log.level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if cfg.log.format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Resolves on SIGTERM or SIGINT. The handlers are installed when this is called, before the
/// server announces its address, so a signal sent right after that line is never lost.
#[cfg(unix)]
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
    })
}

#[cfg(not(unix))]
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}

fn run(cfg: Config) -> anyhow::Result<()> {
    init_logging(&cfg);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let shutdown = shutdown_signal()?;
        taskmesh_node::serve(cfg, shutdown).await
    })
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve {
            listen,
            data_dir,
            config,
        } => run(Config::load(
            config.as_deref(),
            std::env::vars(),
            Overrides { listen, data_dir },
        )?),
        Command::Node {
            config,
            bootstrap,
            listen,
        } => {
            let mut cfg = Config::load(
                Some(&config),
                std::env::vars(),
                Overrides {
                    listen,
                    data_dir: None,
                },
            )?;
            if cfg.cluster.peers.is_empty() {
                anyhow::bail!(
                    "`taskmesh node` needs [cluster] peers in {}",
                    config.display()
                );
            }
            cfg.cluster.bootstrap |= bootstrap;
            run(cfg)
        }
    }
}
