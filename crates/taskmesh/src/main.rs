//! `taskmesh`: the server binary, and a command line for MCP servers.
//!
//! `taskmesh serve` with no arguments runs the embedded default: a complete single-node server
//! on `127.0.0.1:8080/mcp` with its data under `./data`. `taskmesh call`, `taskmesh tools` and
//! `taskmesh tasks` are clients of any MCP server over Streamable HTTP ([`cli`],
//! docs/cli.md).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

mod admin;
mod backup;
mod cli;
use taskmesh_node::config::{Config, Overrides};

// The request path allocates and frees many small objects on every worker thread; mimalloc's
// thread-local free lists cost a fraction of the system allocator's (see docs/benchmarks.md).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "taskmesh",
    version,
    about = "A durable, sharded server for MCP tasks, and a command line for MCP servers"
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
    /// Run one node of a cluster (node id, addresses, peers and data dir from the config file
    /// and the TASKMESH_* environment variables).
    Node {
        /// TOML configuration file (also TASKMESH_CONFIG); without it, the environment alone.
        #[arg(long, env = "TASKMESH_CONFIG")]
        config: Option<PathBuf>,
        /// Create the cluster with the configured peers as its first members (its metadata
        /// group, identity and shard groups). Run once, on one node; repeating it is harmless.
        #[arg(long)]
        bootstrap: bool,
        /// Listen address for MCP, overriding the config.
        #[arg(long)]
        listen: Option<SocketAddr>,
    },
    /// Make a throwaway certificate authority (in DIR, reused when there) and certificates
    /// for nodes: `node-ID.pem`/`node-ID.key`, naming `node-ID.taskmesh`, `taskmesh-node` and
    /// each --host; with --admin, `admin.pem`/`admin.key` for the `taskmesh cluster` commands.
    Certs {
        /// Where the files are written.
        #[arg(long)]
        out: PathBuf,
        /// A node id to make a certificate for (repeat for several).
        #[arg(long = "node", required_unless_present = "admin")]
        nodes: Vec<u64>,
        /// A host name or IP address clients reach the nodes' listeners at (repeatable).
        #[arg(long = "host")]
        hosts: Vec<String>,
        /// Also make the operator's certificate (`admin.taskmesh`).
        #[arg(long)]
        admin: bool,
    },
    /// Call a tool of an MCP server (as a task when the server offers one), following it with
    /// a progress bar and asking its questions; exit 0 on a result, 1 on a tool error or a
    /// failed or cancelled task, 2 on a usage or connection error.
    Call(cli::CallArgs),
    /// The tools of an MCP server: name, title, description and task support.
    Tools(cli::ToolsArgs),
    /// The tasks of an MCP server: list, get, result, cancel, watch.
    Tasks(cli::TasksArgs),
    /// The live workers of a taskmesh cluster and the tools they serve, per node (from a
    /// node's GET /status).
    Workers(cli::WorkersArgs),
    /// The operator's webhooks of a taskmesh node and what its deliveries to each came to
    /// (from the node's GET /status).
    Webhooks(cli::WebhooksArgs),
    /// Inspect or change the cluster's membership through any node's internal gRPC address.
    Cluster {
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// Copy every task record of the cluster into DIR (new or empty) while it serves: each
    /// shard is read on its leader, so the backup holds every task acknowledged before it began.
    Backup {
        /// The directory to write (one file per shard, then manifest.json).
        dir: PathBuf,
        #[command(flatten)]
        conn: ClusterConn,
        /// Print JSON instead of a line per shard.
        #[arg(long)]
        json: bool,
    },
    /// Write the records of the backup in DIR into the cluster (same shard count; records it
    /// holds already are left as they are). Live tasks are taken over by their shards' leaders.
    Restore {
        /// A directory written by `taskmesh backup`.
        dir: PathBuf,
        #[command(flatten)]
        conn: ClusterConn,
        /// Print JSON instead of a line per shard.
        #[arg(long)]
        json: bool,
    },
}

/// How a `taskmesh cluster` command reaches a node's internal port.
#[derive(clap::Args)]
struct ClusterConn {
    /// A node's internal gRPC address (host:port).
    #[arg(long)]
    peer: String,
    /// A folder with `ca.pem`, `admin.pem` and `admin.key` (what `taskmesh certs --admin`
    /// writes); also TASKMESH_CLUSTER_CERTS.
    #[arg(long, env = "TASKMESH_CLUSTER_CERTS", conflicts_with_all = ["ca", "insecure"])]
    certs: Option<PathBuf>,
    /// The cluster's certificate authority (PEM), with --cert and --key.
    #[arg(long, requires_all = ["cert", "key"], conflicts_with = "insecure")]
    ca: Option<PathBuf>,
    /// The operator's (or a member node's) certificate (PEM).
    #[arg(long, requires = "ca")]
    cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[arg(long, requires = "ca")]
    key: Option<PathBuf>,
    /// Plain gRPC, for a cluster that runs with cluster.insecure = true.
    #[arg(long)]
    insecure: bool,
}

impl ClusterConn {
    fn dialer(&self) -> anyhow::Result<taskmesh_rpc::dial::Dialer> {
        use taskmesh_tls::cluster::{Admission, ClusterTls, TlsFiles};
        let files = match (&self.certs, &self.ca, &self.cert, &self.key) {
            (Some(dir), ..) => TlsFiles {
                ca: dir.join("ca.pem"),
                cert: dir.join("admin.pem"),
                key: dir.join("admin.key"),
            },
            (None, Some(ca), Some(cert), Some(key)) => TlsFiles {
                ca: ca.clone(),
                cert: cert.clone(),
                key: key.clone(),
            },
            _ if self.insecure => return Ok(taskmesh_rpc::dial::Dialer::plaintext()),
            _ => anyhow::bail!(
                "the internal port takes mutual TLS: give --certs DIR (or --ca, --cert and --key), \
                 or --insecure for a cluster with cluster.insecure = true"
            ),
        };
        // This side only dials: it admits no one.
        let tls = ClusterTls::load(files, None, Admission::new(|_| false))?;
        Ok(taskmesh_rpc::dial::Dialer::mtls(tls))
    }
}

#[derive(Subcommand)]
enum ClusterCommand {
    /// Print the cluster metadata (nodes, placement, version) as the node knows it, as JSON.
    Status {
        #[command(flatten)]
        conn: ClusterConn,
    },
    /// Admit a node before its first start: with mutual TLS a node that is not a member is
    /// refused, so a new node is added here, then started with the cluster's peers as seeds.
    Add {
        #[command(flatten)]
        conn: ClusterConn,
        /// The id of the node to add (never used in this cluster before).
        #[arg(long)]
        node: u64,
        /// Its internal gRPC address (host:port), as the other nodes reach it.
        #[arg(long)]
        addr: String,
    },
    /// Remove a node: its replicas move to the others. Stop the node once `status` shows it
    /// in no shard's placement and its /status lists no replica.
    Remove {
        #[command(flatten)]
        conn: ClusterConn,
        /// The id of the node to remove.
        #[arg(long)]
        node: u64,
    },
    /// Where each shard is led: every member node's view, as a table (or JSON).
    Leaders {
        #[command(flatten)]
        conn: ClusterConn,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Hand the leadership of a shard to one of its voters and wait until it has moved.
    TransferLeader {
        #[command(flatten)]
        conn: ClusterConn,
        /// The shard.
        #[arg(long)]
        shard: u32,
        /// The voter to lead it.
        #[arg(long)]
        node: u64,
        /// Print JSON instead of a sentence.
        #[arg(long)]
        json: bool,
    },
    /// Build a snapshot of a shard on every node that holds a replica of it (its log is then
    /// purged up to the snapshot, keeping raft.max_in_snapshot_log_to_keep entries).
    Snapshot {
        #[command(flatten)]
        conn: ClusterConn,
        /// The shard.
        #[arg(long)]
        shard: u32,
        /// Print JSON instead of a sentence per replica.
        #[arg(long)]
        json: bool,
    },
}

/// The runtime an operator's command runs on.
fn admin_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

fn cluster_command(cmd: ClusterCommand) -> anyhow::Result<()> {
    use taskmesh_meta::MetaCommand;
    use taskmesh_node::cluster::{fetch_metadata, propose_via};
    let rt = admin_runtime()?;
    rt.block_on(async {
        let meta = match cmd {
            ClusterCommand::Leaders { conn, json } => {
                return admin::leaders(&conn.dialer()?, &conn.peer, json).await;
            }
            ClusterCommand::TransferLeader {
                conn,
                shard,
                node,
                json,
            } => {
                return admin::transfer_leader(&conn.dialer()?, &conn.peer, shard, node, json)
                    .await;
            }
            ClusterCommand::Snapshot { conn, shard, json } => {
                return admin::snapshot(&conn.dialer()?, &conn.peer, shard, json).await;
            }
            ClusterCommand::Status { conn } => fetch_metadata(&conn.dialer()?, &conn.peer).await?,
            ClusterCommand::Add { conn, node, addr } => {
                let change = MetaCommand::Join {
                    node_id: node,
                    addr,
                };
                propose_via(&conn.dialer()?, &conn.peer, change).await?.0
            }
            ClusterCommand::Remove { conn, node } => {
                let change = MetaCommand::Remove { node_id: node };
                propose_via(&conn.dialer()?, &conn.peer, change).await?.0
            }
        };
        println!("{}", serde_json::to_string_pretty(&meta)?);
        Ok(())
    })
}

fn init_logging(cfg: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&cfg.log.level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colours(
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
            std::env::var_os("NO_COLOR").as_deref(),
        ))
        .with_writer(std::io::stderr);
    if cfg.log.format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Whether the log is written with terminal colours: only to a terminal, and not when
/// `NO_COLOR` is set to anything but the empty string (<https://no-color.org>). A log sent to a
/// file or a pipe stays plain text.
fn colours(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
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
    if !cfg.transparent_huge_pages {
        disable_transparent_huge_pages();
    }
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if cfg.worker_threads > 0 {
        rt.worker_threads(cfg.worker_threads);
    }
    let rt = rt.enable_all().build()?;
    rt.block_on(async {
        let shutdown = shutdown_signal()?;
        taskmesh_node::serve(cfg, shutdown).await
    })
}

/// Keep the kernel from backing this process's memory with transparent huge pages from now on.
///
/// The allocator maps its arenas asking for huge pages where the kernel allows them. A huge
/// page is made resident whole (2 MiB) at its first touch, and each shard replica's buffers are
/// large and mostly untouched (an idle replica uses a few hundred KiB of them), so with huge
/// pages every idle replica cost about 3.3 MiB of RSS; without, about 0.4 MiB
/// (docs/benchmarks.md). The flag applies to every later page fault, in every mapping.
#[cfg(target_os = "linux")]
fn disable_transparent_huge_pages() {
    // SAFETY: prctl(PR_SET_THP_DISABLE) sets a flag on this process; it reads no memory.
    let rc = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    if rc != 0 {
        tracing::warn!(
            error = %std::io::Error::last_os_error(),
            "could not turn transparent huge pages off; idle shards will cost more memory"
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn disable_transparent_huge_pages() {}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let client = match cli.command {
        Command::Call(a) => cli::Command::Call(a),
        Command::Tools(a) => cli::Command::Tools(a),
        Command::Tasks(a) => cli::Command::Tasks(a),
        Command::Workers(a) => cli::Command::Workers(a),
        Command::Webhooks(a) => cli::Command::Webhooks(a),
        other => return serve_or_operate(other),
    };
    std::process::exit(i32::from(cli::run(client)));
}

/// The server's and the operator's commands.
fn serve_or_operate(command: Command) -> anyhow::Result<()> {
    match command {
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
                config.as_deref(),
                std::env::vars(),
                Overrides {
                    listen,
                    data_dir: None,
                },
            )?;
            if cfg.cluster.peers.is_empty() {
                anyhow::bail!(
                    "`taskmesh node` needs cluster.peers (in {} or TASKMESH_CLUSTER__PEERS)",
                    config
                        .as_deref()
                        .map_or("the config file".into(), |c| c.display().to_string())
                );
            }
            cfg.cluster.bootstrap |= bootstrap;
            run(cfg)
        }
        Command::Cluster { command } => cluster_command(command),
        Command::Backup { dir, conn, json } => admin_runtime()?
            .block_on(async { backup::backup(&conn.dialer()?, &conn.peer, &dir, json).await }),
        Command::Restore { dir, conn, json } => admin_runtime()?
            .block_on(async { backup::restore(&conn.dialer()?, &conn.peer, &dir, json).await }),
        Command::Certs {
            out,
            nodes,
            hosts,
            admin,
        } => {
            for path in taskmesh_tls::certs::generate(&out, &nodes, &hosts, admin)? {
                println!("{}", path.display());
            }
            Ok(())
        }
        Command::Call(_)
        | Command::Tools(_)
        | Command::Tasks(_)
        | Command::Workers(_)
        | Command::Webhooks(_) => {
            unreachable!("client commands are run by cli::run")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::colours;

    #[test]
    fn colours_only_on_a_terminal_and_never_with_no_color() {
        let set = Some(std::ffi::OsStr::new("1"));
        let empty = Some(std::ffi::OsStr::new(""));
        assert!(colours(true, None));
        assert!(colours(true, empty), "an empty NO_COLOR does not count");
        assert!(!colours(true, set));
        assert!(!colours(false, None), "a file or a pipe gets plain text");
    }
}
