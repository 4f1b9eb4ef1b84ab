//! Integration tests of the Raft transport: real gRPC servers on loopback ports, each node with
//! its own sled database, all in this one test process.

// A test binary: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

mod beat;
mod cluster;
mod common;
mod service;
