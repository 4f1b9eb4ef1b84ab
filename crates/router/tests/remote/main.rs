//! The router's remote half over real gRPC on loopback: a gateway's `Peers` against a node's
//! `TaskGrpc` server.

mod errors;
mod read_stream;
mod support;
