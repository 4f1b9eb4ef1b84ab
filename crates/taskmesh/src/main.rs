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

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve {
            listen,
            data_dir,
            config,
        } => {
            let cfg = Config::load(
                config.as_deref(),
                std::env::vars(),
                Overrides { listen, data_dir },
            )?;
            init_logging(&cfg);
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            rt.block_on(taskmesh_node::serve(cfg, shutdown_signal()))
        }
    }
}
