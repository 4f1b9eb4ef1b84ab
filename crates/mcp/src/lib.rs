//! Everything wire-shaped about MCP lives here: the JSON-RPC 2.0 envelope, the protocol
//! versions this server speaks, the error codes, the `_meta` keys and the exact JSON shapes of
//! the 2025-11-25 tasks utility.
//!
//! The crate is pure data: no I/O, no async, no clock. The gateway parses a request body with
//! [`jsonrpc::parse_message`], reads typed parameters with the helpers in [`params`], and
//! serialises answers with [`jsonrpc::response`] / [`jsonrpc::error_response`]. The rest of the
//! system works with domain types, with two exceptions that build JSON-RPC with this crate: a
//! task actor's requests to the client (`elicitation/create`, `sampling/createMessage`) and
//! progress notifications, which travel to the gateway as ready JSON, and a client's answer to
//! such a request, which crosses between nodes as the JSON-RPC response it was. The id of such
//! a request ([`ServerRequestId`]) says where its answer goes.

pub mod jsonrpc;
pub mod notify;
pub mod params;
pub mod server_request;
pub mod time;
pub mod types;

pub use jsonrpc::{ErrorObject, Message, RequestId};
pub use server_request::{ParseServerRequestIdError, ServerRequestId};
pub use types::*;
