//! Test support for the integration tests of the `taskmesh` package (`tests/*.rs` at the
//! workspace root): run a real `taskmesh serve` process, or the nodes of a cluster, on free
//! loopback ports with their data in temporary directories, and talk to them over real HTTP
//! like an MCP client.
//!
//! - [`Server`] (`server`): spawning, signalling, restarting and killing node processes; the
//!   tail of a process's log is printed when a test panics.
//! - [`Client`] and [`Raw`] (`client`): the MCP client over Streamable HTTP, on the transport of
//!   `taskmesh-client` (its `wire` layer), with the assertions tests want.
//! - [`Sse`] (`sse`): the JSON-RPC messages of SSE answers, read with the client library's parser.
//! - `cluster`: node configurations, free ports, retried reads, `GET /status`, the wait for a
//!   ready cluster.
//! - [`metrics`]: a node's `GET /metrics` text and its samples.
//! - [`History`] (`history`): what clients observed, checked against the invariants.
//! - [`certs`]: the mutual TLS of test clusters (every node gets a certificate of one
//!   authority per test process).
//! - [`python`]: the virtualenv with the official MCP Python SDK.
//! - [`otlp`]: a receiver of OTLP/HTTP spans, for the traces nodes export.
//!
//! The crate cannot name the `taskmesh` executable itself (`CARGO_BIN_EXE_taskmesh` is set only
//! for the test targets of the package that builds it): each test passes
//! `env!("CARGO_BIN_EXE_taskmesh")` to [`Server`]'s constructors.

pub mod certs;
mod client;
mod cluster;
mod history;
pub mod metrics;
pub mod modern;
pub mod npm;
pub mod otlp;
mod process;
pub mod python;
mod server;
mod sse;
pub mod worker;

pub use client::{http, Client, Raw};
pub use cluster::{
    cluster_shards, free_ports, get_eventually, node_config, open_node_config, status_of,
    wait_cluster_ready, wait_upstreams_serving,
};
pub use history::{is_terminal, History};
pub use process::{run_bounded, Finished};
pub use server::Server;
pub use sse::Sse;

/// The protocol version a [`Client`] speaks unless told otherwise.
pub const V: &str = "2025-11-25";
