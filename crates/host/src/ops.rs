//! The task operations a shard's leader applies, as data.
//!
//! An operation is a value: one struct per operation says what it addresses and carries its
//! arguments, [`Op`] holds any of them, and [`Answer`] any leader's answer. The router hands an
//! operation to the shard's leader whichever node that is: in-process to [`Host::apply`], or to
//! another node as one `Apply` call of `taskmesh.v1.TaskService` whose wire form is in the
//! router's `convert::ops`. [`Operation`] ties each struct to its typed answer, so a caller
//! writes `router.run(Cancel { .. })` and gets the cancelled task back.
//!
//! Adding an operation: its struct, its [`Operation`] impl, its variants of [`Op`] and
//! [`Answer`] and its arm of [`Host::apply`] here; its messages in `tasks.proto`'s `ApplyRequest`
//! and `ApplyResponse`; its wire form in the router's `convert::ops`. Reads that stream or that
//! are batched (a result attachment, forwarded polls, status watches) are not operations: they
//! keep their own calls.

use std::sync::Arc;

use serde_json::Value;
use taskmesh_mcp::ErrorObject;
use taskmesh_task::{shard_of, TaskRecord, TaskStatus, TaskView};
use taskmesh_tools::ToolResult;

pub use crate::workers::{LeaseAsk, LeaseBeat, LeaseComplete, LeaseRef, Renewed};

pub use crate::outbox::reads::{EventPage, ReadEvent, MAX_EVENT_PAGE};
pub use crate::outbox::subscriptions::{SubscriptionRead, SubscriptionState};
use crate::{Created, Host, HostError, NewTask};

/// Longest task id a leader is asked about; anything longer cannot be one of ours.
pub const MAX_TASK_ID_LEN: usize = 128;
/// The most tasks one [`List`] answers (a caller asking for more gets this many and `more`):
/// bounds the answer's size whatever the caller's page size.
pub const MAX_LIST_PAGE: usize = 10_000;

/// A task operation, addressed to the leader of one shard.
pub trait Operation: Into<Op> {
    /// What the leader answers.
    type Output;

    /// The shard whose leader applies the operation, among `shards`: the shard of the task it
    /// names, or the shard it names. An operation that no leader could apply (an id that
    /// cannot be a task's, a shard that does not exist) is refused here, before any node is
    /// asked.
    fn shard(&self, shards: u32) -> Result<u32, HostError>;

    /// The typed answer, from the leader's.
    fn output(answer: Answer) -> Result<Self::Output, HostError>;
}

/// Any task operation.
#[derive(Debug, Clone)]
pub enum Op {
    /// See [`NewTask`].
    Create(NewTask),
    /// See [`Cancel`].
    Cancel(Cancel),
    /// See [`List`].
    List(List),
    /// See [`Deliver`].
    Deliver(Deliver),
    /// See [`Claim`].
    Claim(Claim),
    /// See [`Pending`].
    Pending(Pending),
    /// See [`Members`].
    Members(Members),
    /// See [`Export`].
    Export(Export),
    /// See [`Import`].
    Import(Import),
    /// See [`LeaseBeat`].
    LeaseBeat(LeaseBeat),
    /// See [`LeaseComplete`].
    LeaseComplete(LeaseComplete),
    /// See [`LeaseAsk`].
    LeaseAsk(LeaseAsk),
    /// See [`ReadEvents`].
    ReadEvents(ReadEvents),
    /// See [`Subscribe`].
    Subscribe(Subscribe),
    /// See [`Unsubscribe`].
    Unsubscribe(Unsubscribe),
    /// See [`ReadSubscription`].
    ReadSubscription(ReadSubscription),
}

/// What a leader answers to an [`Op`]: the variant of the same name.
#[derive(Debug)]
pub enum Answer {
    /// To [`Op::Create`].
    Create(Created),
    /// To [`Op::Cancel`]: the task as cancelled.
    Cancel(TaskView),
    /// To [`Op::List`].
    List(Listed),
    /// To [`Op::Deliver`]: whether a live task took the answer.
    Deliver(bool),
    /// To [`Op::Claim`]: whether the claim was granted.
    Claim(bool),
    /// To [`Op::Pending`]: the requests the task waits on, serialised, in the order sent.
    Pending(Vec<Arc<Vec<u8>>>),
    /// To [`Op::Members`].
    Members(GroupMembers),
    /// To [`Op::Export`].
    Export(ExportedPage),
    /// To [`Op::Import`]: how many records were inserted.
    Import(u64),
    /// To [`Op::LeaseBeat`].
    LeaseBeat(Renewed),
    /// To [`Op::LeaseComplete`]: the status the task ended in.
    LeaseComplete(TaskStatus),
    /// To [`Op::LeaseAsk`]: the client's answer, or the error the request got; `None` when it
    /// did not come within the wait.
    LeaseAsk(Option<ToolResult>),
    /// To [`Op::ReadEvents`].
    ReadEvents(EventPage),
    /// To [`Op::Subscribe`]: how many of the shard's tasks the subscription started watching.
    Subscribe(usize),
    /// To [`Op::Unsubscribe`].
    Unsubscribe(()),
    /// To [`Op::ReadSubscription`].
    ReadSubscription(SubscriptionRead),
}

impl Op {
    /// The operation's name, for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Create(_) => "create",
            Op::Cancel(_) => "cancel",
            Op::List(_) => "list",
            Op::Deliver(_) => "deliver",
            Op::Claim(_) => "claim",
            Op::Pending(_) => "pending",
            Op::Members(_) => "members",
            Op::Export(_) => "export",
            Op::Import(_) => "import",
            Op::LeaseBeat(_) => "lease_beat",
            Op::LeaseComplete(_) => "lease_complete",
            Op::LeaseAsk(_) => "lease_ask",
            Op::ReadEvents(_) => "read_events",
            Op::Subscribe(_) => "subscribe",
            Op::Unsubscribe(_) => "unsubscribe",
            Op::ReadSubscription(_) => "read_subscription",
        }
    }
}

impl Host {
    /// Apply `op` on this node, the leader of `shard` (a node that does not lead it answers
    /// [`HostError::NotLeader`]): the one place where an operation meets the host.
    pub async fn apply(&self, shard: u32, op: Op) -> Result<Answer, HostError> {
        Ok(match op {
            Op::Create(new) => Answer::Create(self.create(shard, new).await?),
            Op::Cancel(c) => Answer::Cancel(self.cancel(shard, &c.task_id, &c.owner).await?),
            Op::List(l) => {
                let limit = l.limit.clamp(1, MAX_LIST_PAGE);
                let mut tasks = self
                    .list(shard, &l.owner, l.after.as_deref(), limit + 1)
                    .await?;
                let more = tasks.len() > limit;
                tasks.truncate(limit);
                Answer::List(Listed { tasks, more })
            }
            Op::Deliver(d) => Answer::Deliver(self.deliver_response(
                shard,
                &d.task_id,
                &d.owner,
                d.request_id,
                d.outcome,
            )),
            Op::Claim(c) => Answer::Claim(self.claim(&c.task_id, c.request_id, c.release).await),
            Op::Pending(p) => {
                Answer::Pending(self.pending_requests(shard, &p.task_id, &p.owner).await?)
            }
            Op::Members(_) => {
                let (voters, learners) = self.members(shard)?;
                Answer::Members(GroupMembers { voters, learners })
            }
            Op::Export(e) => {
                let after = e.after.as_ref().map(|(o, t)| (o.as_str(), t.as_str()));
                let (records, last) = self.export_page(shard, after, e.max_records).await?;
                Answer::Export(ExportedPage { records, last })
            }
            Op::Import(i) => Answer::Import(self.import(shard, i.records).await?),
            Op::LeaseBeat(b) => Answer::LeaseBeat(self.lease_beat(shard, b).await?),
            Op::LeaseComplete(c) => Answer::LeaseComplete(self.lease_complete(shard, c).await?),
            Op::LeaseAsk(a) => Answer::LeaseAsk(self.lease_ask(shard, a).await?),
            Op::ReadEvents(r) => Answer::ReadEvents(self.read_events(r).await?),
            Op::Subscribe(s) => Answer::Subscribe(self.add_subscription(s).await?),
            Op::Unsubscribe(u) => Answer::Unsubscribe(self.remove_subscriptions(u).await?),
            Op::ReadSubscription(r) => Answer::ReadSubscription(self.read_subscription(r).await?),
        })
    }
}

/// `impl Operation for $ty` (its answer being the variant `$variant` of [`Answer`], of type
/// `$output`) and `impl From<$ty> for Op`; `|$op, $shards| $shard` names the shard.
macro_rules! operation {
    ($ty:ident as $variant:ident => $output:ty, |$op:ident, $shards:ident| $shard:expr) => {
        impl Operation for $ty {
            type Output = $output;
            fn shard(&self, $shards: u32) -> Result<u32, HostError> {
                let $op = self;
                $shard
            }
            fn output(answer: Answer) -> Result<$output, HostError> {
                match answer {
                    Answer::$variant(out) => Ok(out),
                    // A leader answered another operation than the one asked.
                    other => Err(HostError::Internal(format!(
                        "a leader answered {} with {other:?}",
                        stringify!($variant)
                    ))),
                }
            }
        }

        impl From<$ty> for Op {
            fn from(op: $ty) -> Op {
                Op::$variant(op)
            }
        }
    };
}

/// The shard of `task_id`; an id no task can have is [`HostError::NotFound`].
pub fn task_shard(task_id: &str, shards: u32) -> Result<u32, HostError> {
    if task_id.is_empty() || task_id.len() > MAX_TASK_ID_LEN {
        return Err(HostError::NotFound);
    }
    Ok(shard_of(task_id, shards))
}

/// `shard` when it is one of `shards`.
pub fn existing_shard(shard: u32, shards: u32) -> Result<u32, HostError> {
    if shard >= shards {
        return Err(HostError::Invalid(format!(
            "shard {shard} does not exist: shards are 0 to {}",
            shards.saturating_sub(1)
        )));
    }
    Ok(shard)
}

/// Cancel one of `owner`'s tasks (`tasks/cancel`): `cancelled` is committed before the answer.
#[derive(Debug, Clone)]
pub struct Cancel {
    /// The task.
    pub task_id: String,
    /// The principal asking; must own the task.
    pub owner: String,
}

/// One page of `owner`'s tasks on one shard, in id order (`tasks/list` asks every shard).
#[derive(Debug, Clone)]
pub struct List {
    /// The shard.
    pub shard: u32,
    /// The principal whose tasks are listed.
    pub owner: String,
    /// Only tasks with ids after this one.
    pub after: Option<String>,
    /// At most this many (at least 1, at most [`MAX_LIST_PAGE`]).
    pub limit: usize,
}

/// `owner`'s task events of one shard after a position, in log order (`events/poll` and
/// `events/stream` ask every shard, or the shard of the one task they follow).
#[derive(Debug, Clone)]
pub struct ReadEvents {
    /// The shard.
    pub shard: u32,
    /// The principal reading: only its tasks' events are given.
    pub owner: String,
    /// Only this task's events.
    pub task_id: Option<String>,
    /// Only the changes that end a task.
    pub terminal_only: bool,
    /// The position: events of changes after this log index. `None` asks for no event, only
    /// the shard's newest position (a reader starting now).
    pub after: Option<u64>,
    /// Events of changes older than this (ms since the epoch) are skipped, and the page says
    /// some were.
    pub not_before_ms: u64,
    /// At most this many (at least 1, at most [`MAX_EVENT_PAGE`]).
    pub max: usize,
}

/// Add or refresh a client's webhook subscription on one shard (the gateway writes it to
/// every shard): it watches the shard's live tasks it covers at once.
#[derive(Debug, Clone)]
pub struct Subscribe {
    /// The shard.
    pub shard: u32,
    /// The subscription as it is from now on.
    pub subscription: taskmesh_task::Subscription,
}

/// Remove clients' webhook subscriptions from one shard.
#[derive(Debug, Clone)]
pub struct Unsubscribe {
    /// The shard.
    pub shard: u32,
    /// Their ids; unknown ones are ignored.
    pub ids: Vec<String>,
}

/// A client's webhook subscription as one shard holds it, with the deliveries to it of the
/// shard's leader.
#[derive(Debug, Clone)]
pub struct ReadSubscription {
    /// The shard.
    pub shard: u32,
    /// Its id.
    pub id: String,
    /// The principal whose subscriptions are counted (the answer's `held`).
    pub principal: String,
}

/// A page of tasks, and whether more follow it on the shard.
#[derive(Debug, Clone)]
pub struct Listed {
    /// The tasks, in id order.
    pub tasks: Vec<TaskView>,
    /// Whether the shard holds more of the owner's tasks after the last.
    pub more: bool,
}

/// A client's answer to request `request_id` of one of `owner`'s tasks (an elicitation or
/// sampling request), for the task's execution.
#[derive(Debug, Clone)]
pub struct Deliver {
    /// The task that asked.
    pub task_id: String,
    /// The principal answering; must own the task.
    pub owner: String,
    /// The id of the request answered.
    pub request_id: String,
    /// The client's result, or its JSON-RPC error.
    pub outcome: Result<Value, ErrorObject>,
}

/// A GET stream of a task's session asks to be the one to send the task's request
/// `request_id`: granted to the first claim of a request no other stream carries. With
/// `release`, a granted claim is given back (answered `false`).
#[derive(Debug, Clone)]
pub struct Claim {
    /// The task whose request it is.
    pub task_id: String,
    /// The request's id.
    pub request_id: String,
    /// Give a granted claim back.
    pub release: bool,
}

/// The requests to the client that one of `owner`'s live tasks waits on, as sent, in order
/// (none for a task that waits on nothing).
#[derive(Debug, Clone)]
pub struct Pending {
    /// The task.
    pub task_id: String,
    /// The principal asking; must own the task.
    pub owner: String,
}

/// The voters and learners of one shard's group, as its leader knows them.
#[derive(Debug, Clone)]
pub struct Members {
    /// The shard.
    pub shard: u32,
}

/// A group's members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMembers {
    /// The voters.
    pub voters: Vec<u64>,
    /// The learners (members that do not vote).
    pub learners: Vec<u64>,
}

/// A page of one shard's records for a backup, in (owner, task id) order after `after`: a
/// linearizable read on the leader (see [`Host::export_page`]).
#[derive(Debug, Clone)]
pub struct Export {
    /// The shard.
    pub shard: u32,
    /// The (owner, task id) of the last record of the previous page; `None` for the first.
    pub after: Option<(String, String)>,
    /// At most this many records (capped at [`MAX_PAGE_RECORDS`](crate::backup::MAX_PAGE_RECORDS)).
    pub max_records: usize,
}

/// A page of a backup.
#[derive(Debug, Clone)]
pub struct ExportedPage {
    /// The records.
    pub records: Vec<TaskRecord>,
    /// Whether it is the shard's last page.
    pub last: bool,
}

/// Backed-up records written into one shard through its log (a restore); records whose id the
/// shard holds stay as they are.
#[derive(Debug, Clone)]
pub struct Import {
    /// The shard; every record's task id must hash to it.
    pub shard: u32,
    /// The records, at most [`MAX_PAGE_RECORDS`](crate::backup::MAX_PAGE_RECORDS).
    pub records: Vec<TaskRecord>,
}

impl Import {
    /// The shard, when every record could be its: refuses the whole import for an id that is
    /// not a task id, an id of another shard (a backup of a cluster with another shard count)
    /// or a record without an owner.
    fn checked_shard(&self, shards: u32) -> Result<u32, HostError> {
        let shard = existing_shard(self.shard, shards)?;
        for r in &self.records {
            if r.task_id.is_empty() || r.task_id.len() > MAX_TASK_ID_LEN {
                return Err(HostError::Invalid(format!(
                    "task id of {} characters: ids are 1 to {MAX_TASK_ID_LEN}",
                    r.task_id.len(),
                )));
            }
            let of = shard_of(&r.task_id, shards);
            if of != shard {
                return Err(HostError::Invalid(format!(
                    "task {} belongs to shard {of}, not {shard}: was the backup taken from a \
                     cluster with another shard count?",
                    r.task_id,
                )));
            }
            if r.owner.is_empty() {
                return Err(HostError::Invalid(format!(
                    "task {} has no owner",
                    r.task_id
                )));
            }
        }
        Ok(shard)
    }
}

operation!(NewTask as Create => Created, |o, n| task_shard(&o.task_id, n));
operation!(Cancel as Cancel => TaskView, |o, n| task_shard(&o.task_id, n));
operation!(List as List => Listed, |o, n| existing_shard(o.shard, n));
operation!(Deliver as Deliver => bool, |o, n| task_shard(&o.task_id, n));
operation!(Claim as Claim => bool, |o, n| task_shard(&o.task_id, n));
operation!(Pending as Pending => Vec<Arc<Vec<u8>>>, |o, n| task_shard(&o.task_id, n));
operation!(Members as Members => GroupMembers, |o, n| existing_shard(o.shard, n));
operation!(Export as Export => ExportedPage, |o, n| existing_shard(o.shard, n));
operation!(Import as Import => u64, |o, n| o.checked_shard(n));
operation!(LeaseBeat as LeaseBeat => Renewed, |o, n| task_shard(&o.lease.task_id, n));
operation!(LeaseComplete as LeaseComplete => TaskStatus, |o, n| task_shard(&o.lease.task_id, n));
operation!(Subscribe as Subscribe => usize, |o, n| existing_shard(o.shard, n));
operation!(Unsubscribe as Unsubscribe => (), |o, n| existing_shard(o.shard, n));
operation!(ReadSubscription as ReadSubscription => SubscriptionRead, |o, n| existing_shard(o.shard, n));
operation!(ReadEvents as ReadEvents => EventPage, |o, n| existing_shard(o.shard, n));
operation!(LeaseAsk as LeaseAsk => Option<ToolResult>, |o, n| task_shard(&o.lease.task_id, n));
