//! The built-in tools. Their names and argument shapes are fixed: clients and tests rely on them.
//!
//! | tool | arguments | taskSupport | resume |
//! |---|---|---|---|
//! | `greet` | `{name}` | forbidden | rerun |
//! | `slow_compute` | `{seconds, label?}` | optional | rerun |
//! | `failing_job` | `{}` | required | rerun |
//! | `protocol_error_job` | `{}` | optional | rerun |
//! | `confirm_delete` | `{filename}` | required | fail |
//! | `multi_input` | `{}` | required | fail |
//! | `ask_model` | `{prompt}` | required | rerun |
//!
//! Each is a [`Builtin`]: a spec plus two plain functions, one that validates the arguments and
//! one that runs the call.
//!
//! The tools that ask the client nothing are in `simple.rs`, those that ask it in `asking.rs`;
//! [`Builtin`] and the helpers they share are here, public so that the conformance suite's
//! test fixtures (`taskmesh-fixtures`) make their tools the same way.

mod asking;
mod simple;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};
use taskmesh_mcp::jsonrpc::ErrorObject;

use crate::{Tool, ToolContext, ToolFuture, ToolSpec};

pub use asking::{ask_model, confirm_delete, multi_input};
pub use asking::{ask_name_and_colour, elicit, multi_input_asking};
pub use simple::{failing_job, greet, protocol_error_job, slow_compute};

/// Longest `slow_compute` run accepted, in seconds (one day).
pub const SLOW_COMPUTE_MAX_SECONDS: f64 = 86_400.0;

/// Checks a call's arguments: `Ok` when they fit the tool's input schema.
pub type Validate = fn(&Map<String, Value>) -> Result<(), ErrorObject>;
/// Runs a call, with arguments its [`Validate`] accepted.
pub type Run = fn(Map<String, Value>, ToolContext) -> ToolFuture;

/// A tool made of a spec and two functions.
pub struct Builtin {
    /// What the tool declares.
    pub spec: ToolSpec,
    /// Checks a call's arguments.
    pub validate: Validate,
    /// Runs a call.
    pub run: Run,
}

impl Tool for Builtin {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn validate(&self, args: &Map<String, Value>) -> Result<(), ErrorObject> {
        (self.validate)(args)
    }
    fn call(&self, args: Map<String, Value>, ctx: ToolContext) -> ToolFuture {
        (self.run)(args, ctx)
    }
}

/// Every built-in tool, in the order of the table above.
pub fn all() -> Vec<Arc<dyn Tool>> {
    [
        greet(),
        slow_compute(),
        failing_job(),
        protocol_error_job(),
        confirm_delete(),
        multi_input(),
        ask_model(),
    ]
    .into_iter()
    .map(|b| Arc::new(b) as Arc<dyn Tool>)
    .collect()
}

/// The schema of a call without arguments: an object with no properties.
pub fn empty_schema() -> Value {
    json!({ "type": "object", "properties": {}, "additionalProperties": false })
}

/// An object schema with one required string property.
pub fn one_string(name: &str) -> Value {
    json!({
        "type": "object",
        "properties": { name: { "type": "string" } },
        "required": [name],
    })
}

/// Accepts only a call without arguments.
pub fn no_args(args: &Map<String, Value>) -> Result<(), ErrorObject> {
    match args.keys().next() {
        None => Ok(()),
        Some(k) => Err(ErrorObject::invalid_params(format!(
            "Invalid params: unexpected argument '{k}'"
        ))),
    }
}

/// The string argument `name` (already validated).
pub fn str_arg(args: &Map<String, Value>, name: &str) -> String {
    args.get(name)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Sleep for `d`, or return `false` early when cancelled.
async fn sleep_or_cancel(ctx: &ToolContext, d: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => true,
        _ = ctx.cancel.cancelled() => false,
    }
}

fn cancelled() -> ErrorObject {
    ErrorObject::new(
        taskmesh_mcp::jsonrpc::REQUEST_CANCELLED,
        "Request cancelled",
    )
}
