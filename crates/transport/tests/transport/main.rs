//! Integration tests of the Raft transport: real gRPC servers on loopback ports, each node with
//! its own sled database, all in this one test process.

mod cluster;
mod common;
mod service;
