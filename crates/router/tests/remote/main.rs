//! The router's remote half over real gRPC on loopback: a gateway's `Peers` against a node's
//! `TaskGrpc` server.

// A test binary: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

mod errors;
mod read_stream;
mod support;
