//! The task domain.
//!
//! A task is a deferred `tools/call`. Its durable form is a [`TaskRecord`]; its lifecycle is the
//! status state machine in [`status`]; everything that changes a record is a [`Command`] carried
//! by a shard's Raft log and applied by [`ShardState::apply`], a pure function of (state,
//! command, log index). Time is always passed in, never read here, so that every replica
//! applying the same log reaches the same state.

pub mod command;
pub mod record;
pub mod state;
pub mod status;

pub use command::{Applied, Command, Rejection};
pub use record::{Outcome, TaskRecord, ToolRequest};
pub use state::ShardState;
pub use status::TaskStatus;

/// A task id: at least 128 bits from the OS CSPRNG, rendered as lowercase hex.
pub type TaskId = String;
