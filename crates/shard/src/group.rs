//! What a Raft group replicates, and the openraft type configuration made from it.
//!
//! A group's state is a [`GroupState`]: the task shards replicate a
//! [`taskmesh_task::ShardState`] (their log carries task [`taskmesh_task::Command`]s), the
//! metadata group a [`taskmesh_meta::ClusterMeta`] (its log carries
//! [`taskmesh_meta::MetaCommand`]s). [`Group<S>`] is the openraft type configuration of a group
//! of state `S`, so a task shard's log cannot carry a metadata command, nor the reverse: the
//! types differ. How each state is laid out on disk is in [`crate::storage`].

use std::cmp::Ordering;
use std::fmt;
use std::io;
use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::types::{LogId, StoredMembership};

/// The replicated state of one kind of group: its commands, what applying one answers, the
/// events it emits, and its snapshot form (which is also its durable form).
pub trait GroupState: Default + Send + Sync + 'static {
    /// What the group's log carries (printed in openraft's logs through `Display`).
    type Command: fmt::Debug
        + fmt::Display
        + Clone
        + PartialEq
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static;
    /// What applying a command answers its proposer.
    type Applied: fmt::Debug + Clone + Serialize + DeserializeOwned + Send + Sync + 'static;
    /// What the state machine broadcasts after a change is durable.
    type Event: fmt::Debug + Clone + Send + 'static;
    /// What a snapshot's bytes hold (as JSON): the log position and the state. A struct with
    /// named fields, never `#[serde(flatten)]`ed: a buffered form cannot turn JSON object keys
    /// back into integers.
    type Snapshot: Serialize + DeserializeOwned + Send + Sync + 'static;

    /// Apply one committed command at log index `index`. Pure and deterministic: every replica
    /// applying the same log reaches the same state.
    fn apply(&mut self, cmd: &Self::Command, index: u64) -> Self::Applied;

    /// The answer for a log entry that carries no command (blank and membership entries). Nobody
    /// waits for it; the value only has to exist.
    fn no_command() -> Self::Applied;

    /// How many items the state holds (for log lines).
    fn size(&self) -> usize;

    /// Rebuild the state from a state machine tree of an earlier version, which kept the
    /// state's own keys (it is then kept as a snapshot instead).
    fn load_legacy(tree: &sled::Tree) -> io::Result<Self>;

    /// Check the invariants that tie the state to the log position it reflects (after a load
    /// and after a snapshot install); a violation means the stored state is corrupt.
    fn verify(&self, _last_applied: Option<LogId>) -> Result<(), String> {
        Ok(())
    }

    /// Queue the events one applied command (`index` its log index) emits once its proposers
    /// are answered.
    fn events(applied: &Self::Applied, index: u64, events: &mut Vec<Self::Event>);

    /// A copy of the state for a snapshot, with the log position it reflects (kept in the
    /// snapshot's bytes too, beside the state), taken under the state machine's read lock.
    /// Keep it cheap: the ordering work belongs in [`GroupState::seal`].
    fn capture(&self, last_applied: Option<LogId>, membership: StoredMembership) -> Self::Snapshot;

    /// Put a captured copy in its canonical form before it is encoded (on a blocking thread).
    fn seal(_snapshot: &mut Self::Snapshot) {}

    /// The state a snapshot holds.
    fn restore(snapshot: Self::Snapshot) -> Self;
}

/// The openraft type configuration of a group whose state is `S`.
pub struct Group<S>(PhantomData<fn() -> S>);

// openraft wants its type configuration to be a plain value type; `S` itself need not be one.
impl<S> fmt::Debug for Group<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Group<{}>", std::any::type_name::<S>())
    }
}
impl<S> Clone for Group<S> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<S> Copy for Group<S> {}
impl<S> Default for Group<S> {
    fn default() -> Self {
        Group(PhantomData)
    }
}
impl<S> PartialEq for Group<S> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl<S> Eq for Group<S> {}
impl<S> PartialOrd for Group<S> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<S> Ord for Group<S> {
    fn cmp(&self, _: &Self) -> Ordering {
        Ordering::Equal
    }
}

/// The leader id of every group.
pub type LeaderId = openraft::impls::leader_id_adv::LeaderId<u64, u64>;

impl<S: GroupState> openraft::RaftTypeConfig for Group<S> {
    type D = S::Command;
    type R = S::Applied;
    type NodeId = u64;
    type Node = openraft::BasicNode;
    type Term = u64;
    type LeaderId = LeaderId;
    type Vote = openraft::impls::Vote<LeaderId>;
    type Payload = openraft::EntryPayload<S::Command, u64, openraft::BasicNode>;
    type Entry =
        openraft::Entry<<LeaderId as openraft::vote::RaftLeaderId>::Committed, Self::Payload>;
    type AsyncRuntime = openraft::TokioRuntime;
    type Responder<T>
        = openraft::impls::ProgressResponder<Self, T>
    where
        T: openraft::OptionalSend + 'static;
    type Batch<T>
        = openraft::impls::InlineBatch<T>
    where
        T: openraft::OptionalSend + 'static;
    type ErrorSource = openraft::impls::BoxedErrorSource;
}
