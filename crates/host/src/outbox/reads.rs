//! Reading a shard's task events after a position, for `events/poll` and `events/stream`
//! (which ask every shard and merge): the shard's change log (`taskmesh_task::changes`),
//! owner-scoped and filtered, each change rendered as the event a webhook would get.

use taskmesh_task::{Change, ChangeQuery, TaskRecord};

use crate::ops::ReadEvents;
use crate::{now_ms, Host, HostError};

/// The most events one [`ReadEvents`] answers, whatever it asks for.
pub const MAX_EVENT_PAGE: usize = 1_000;

/// A shard's events after a position (the answer to [`ReadEvents`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventPage {
    /// The events, in the order of the shard's log.
    pub events: Vec<ReadEvent>,
    /// The position once these are read: the log index of the last change looked at (the
    /// caller's or none asked: the newest change's).
    pub through: u64,
    /// Whether some events after the caller's position were not given: no longer kept, or
    /// older than asked.
    pub truncated: bool,
    /// Whether more events may follow `through`.
    pub more: bool,
}

/// One event of a shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadEvent {
    /// The log index of its change.
    pub index: u64,
    /// The time of its change, ms since the Unix epoch.
    pub at_ms: u64,
    /// The event, a JSON object (`eventId`, `name`, `timestamp`, `data`).
    pub json: String,
}

impl Host {
    /// The events of `q.shard` after `q.after` that `q.owner` may read (see [`ReadEvents`]),
    /// read on its leader.
    pub(crate) async fn read_events(&self, q: ReadEvents) -> Result<EventPage, HostError> {
        let shard_id = q.shard;
        let shard = self.shard(shard_id)?;
        let render = self.inner.render.clone();
        let now = now_ms();
        shard
            .read(move |s| {
                let Some(after) = q.after else {
                    return EventPage {
                        through: s.changes().head(),
                        ..EventPage::default()
                    };
                };
                let visible = |c: &Change| -> Option<&TaskRecord> {
                    if q.task_id.as_ref().is_some_and(|t| *t != c.task_id)
                        || (q.terminal_only && !c.status.is_terminal())
                    {
                        return None;
                    }
                    s.get(&c.task_id)
                        .filter(|r| r.owner == q.owner && !r.is_expired(now))
                };
                let wanted = |c: &Change| visible(c).is_some();
                let page = s.changes().read(ChangeQuery {
                    after,
                    not_before_ms: q.not_before_ms,
                    max: q.max.clamp(1, MAX_EVENT_PAGE),
                    wanted: &wanted,
                });
                let events = page
                    .changes
                    .iter()
                    .filter_map(|c| {
                        let r = visible(c)?;
                        let json = render.occurrence(r, c);
                        Some(ReadEvent {
                            index: c.index,
                            at_ms: c.at_ms,
                            json,
                        })
                    })
                    .collect();
                EventPage {
                    events,
                    through: page.through,
                    truncated: page.truncated,
                    more: page.more,
                }
            })
            .await
            .map_err(|e| HostError::from_shard(shard_id, e))
    }
}
