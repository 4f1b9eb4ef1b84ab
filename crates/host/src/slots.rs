//! Live-task slots: how many task actors this node runs, in all and per principal, and the
//! admission of a new task within `tasks.max_live_tasks` and
//! `tasks.max_live_tasks_per_principal`.
//!
//! A create takes a slot before its `Create` is proposed ([`Slots::take`] with `admit`); a task
//! admitted earlier and resumed on this node (it became the shard's leader) takes one whatever
//! the limits, since refusing it would drop a task that was acknowledged. Every slot taken is
//! given back exactly once ([`Slots::give`]): when the task's actor stops (the task ended, or
//! this node stopped leading its shard), or when a create fails before an actor took it.
//!
//! The counts are per node and cover only the shards this node leads. Pure and synchronous;
//! the host holds one behind a lock.

use std::collections::HashMap;

/// Why a new task gets no slot. A refusal changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The node runs `tasks.max_live_tasks` live tasks.
    Node {
        /// `tasks.max_live_tasks`.
        limit: usize,
    },
    /// The principal has `tasks.max_live_tasks_per_principal` live tasks on this node.
    Principal {
        /// `tasks.max_live_tasks_per_principal`.
        limit: usize,
    },
}

impl Refused {
    /// The limit that refused.
    pub(crate) fn limit(self) -> usize {
        match self {
            Refused::Node { limit } | Refused::Principal { limit } => limit,
        }
    }
}

/// The live-task slots of one node (see the module doc).
#[derive(Debug)]
pub(crate) struct Slots {
    /// `tasks.max_live_tasks`.
    max_live: usize,
    /// `tasks.max_live_tasks_per_principal`; 0: only `max_live` bounds a principal.
    max_per_principal: usize,
    /// Slots held, the sum of `by_owner`.
    live: usize,
    /// Slots held by each principal that holds any (no zero entries).
    by_owner: HashMap<String, usize>,
}

impl Slots {
    /// No slot held, with these limits.
    pub(crate) fn new(max_live: usize, max_per_principal: usize) -> Self {
        Self {
            max_live,
            max_per_principal,
            live: 0,
            by_owner: HashMap::new(),
        }
    }

    /// Take a slot for a task of `owner`: with `admit` (a new task) only within both limits,
    /// else (a task admitted earlier, resumed here) whatever they are. A refusal changes
    /// nothing.
    pub(crate) fn take(&mut self, owner: &str, admit: bool) -> Result<(), Refused> {
        if admit {
            if self.live >= self.max_live {
                return Err(Refused::Node {
                    limit: self.max_live,
                });
            }
            if self.max_per_principal > 0 && self.of(owner) >= self.max_per_principal {
                return Err(Refused::Principal {
                    limit: self.max_per_principal,
                });
            }
        }
        self.live += 1;
        *self.by_owner.entry(owner.to_string()).or_default() += 1;
        self.check();
        Ok(())
    }

    /// Give back a slot taken for a task of `owner`. Returns whether `owner` held one; when it
    /// held none nothing changes (a slot is never given back twice, nor for another owner).
    pub(crate) fn give(&mut self, owner: &str) -> bool {
        let Some(n) = self.by_owner.get_mut(owner) else {
            return false;
        };
        *n -= 1;
        if *n == 0 {
            self.by_owner.remove(owner);
        }
        self.live -= 1;
        self.check();
        true
    }

    /// Slots held on this node.
    pub(crate) fn live(&self) -> usize {
        self.live
    }

    /// Slots `owner` holds on this node.
    pub(crate) fn of(&self, owner: &str) -> usize {
        self.by_owner.get(owner).copied().unwrap_or(0)
    }

    /// The invariant the admission relies on: `live` counts exactly the slots held by owners.
    fn check(&self) {
        debug_assert_eq!(self.live, self.by_owner.values().sum::<usize>());
        debug_assert!(self.by_owner.values().all(|n| *n > 0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_refusal_takes_nothing_and_gives_nothing_back() {
        let mut s = Slots::new(100, 3);
        let mut outcomes = String::new();
        for _ in 0..40 {
            outcomes.push(if s.take("alice", true).is_ok() {
                '+'
            } else {
                '-'
            });
        }
        assert_eq!(outcomes, format!("+++{}", "-".repeat(37)));
        assert_eq!((s.live(), s.of("alice")), (3, 3));
        assert_eq!(
            s.take("alice", true),
            Err(Refused::Principal { limit: 3 }),
            "the refusal names the principal's limit"
        );
        assert!(s.take("bob", true).is_ok(), "another principal has room");
    }

    #[test]
    fn the_node_limit_refuses_before_the_principal_s() {
        let mut s = Slots::new(2, 5);
        assert!(s.take("a", true).is_ok());
        assert!(s.take("b", true).is_ok());
        assert_eq!(s.take("c", true), Err(Refused::Node { limit: 2 }));
        assert_eq!(s.live(), 2);
        // A resumed task is taken in whatever the limits.
        assert!(s.take("c", false).is_ok());
        assert_eq!((s.live(), s.of("c")), (3, 1));
    }

    #[test]
    fn a_slot_is_given_back_once_and_only_by_its_owner() {
        let mut s = Slots::new(10, 0);
        assert!(s.take("a", true).is_ok());
        assert!(!s.give("b"));
        assert_eq!(s.live(), 1);
        assert!(s.give("a"));
        assert!(!s.give("a"));
        assert_eq!((s.live(), s.of("a")), (0, 0));
    }

    /// What happens to a node's slots.
    #[derive(Debug, Clone)]
    enum Op {
        /// A create of `owner`'s on shard `shard` asks for a slot.
        Admit { owner: usize, shard: usize },
        /// A task of `owner`'s, admitted on an earlier leader, is resumed here (failover).
        Resume { owner: usize, shard: usize },
        /// The live task at this position (modulo their number) ends.
        Finish { at: usize },
        /// This node stops leading `shard`: each of its tasks' actors stops.
        LoseShard { shard: usize },
        /// A slot is given back for `owner`: as one of its tasks ending when it has any here,
        /// else nothing must change.
        Stray { owner: usize },
    }

    const OWNERS: usize = 3;
    const SHARDS: usize = 4;

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..OWNERS, 0..SHARDS).prop_map(|(owner, shard)| Op::Admit { owner, shard }),
            1 => (0..OWNERS, 0..SHARDS).prop_map(|(owner, shard)| Op::Resume { owner, shard }),
            2 => any::<usize>().prop_map(|at| Op::Finish { at }),
            1 => (0..SHARDS).prop_map(|shard| Op::LoseShard { shard }),
            1 => (0..OWNERS).prop_map(|owner| Op::Stray { owner }),
        ]
    }

    fn name(owner: usize) -> String {
        format!("principal-{owner}")
    }

    proptest! {
        /// Against a model (the list of live tasks, each with its owner and shard): every count
        /// matches it after every step, an admission succeeds exactly when both limits leave
        /// room, and an admitted task never puts its principal or the node past a limit. With
        /// no resumed tasks, the limits hold at every step.
        #[test]
        fn the_caps_hold_under_any_sequence(
            max_live in 1usize..8,
            max_per in 0usize..4,
            ops in proptest::collection::vec(op(), 0..200),
        ) {
            let mut slots = Slots::new(max_live, max_per);
            // The live tasks: (owner, shard).
            let mut model: Vec<(usize, usize)> = Vec::new();
            let mut resumed = false;
            for op in ops {
                let count = |model: &[(usize, usize)], o: usize| {
                    model.iter().filter(|(owner, _)| *owner == o).count()
                };
                match op {
                    Op::Admit { owner, shard } => {
                        let room = model.len() < max_live
                            && (max_per == 0 || count(&model, owner) < max_per);
                        let took = slots.take(&name(owner), true);
                        prop_assert_eq!(took.is_ok(), room, "{:?} with {:?}", took, model);
                        if took.is_ok() {
                            model.push((owner, shard));
                            prop_assert!(model.len() <= max_live);
                            prop_assert!(max_per == 0 || count(&model, owner) <= max_per);
                        }
                    }
                    Op::Resume { owner, shard } => {
                        prop_assert!(slots.take(&name(owner), false).is_ok());
                        model.push((owner, shard));
                        resumed = true;
                    }
                    Op::Finish { at } => {
                        if !model.is_empty() {
                            let (owner, _) = model.remove(at % model.len());
                            prop_assert!(slots.give(&name(owner)));
                        }
                    }
                    Op::LoseShard { shard } => {
                        let (lost, kept) = model.into_iter().partition(|(_, s)| *s == shard);
                        model = kept;
                        for (owner, _) in lost {
                            prop_assert!(slots.give(&name(owner)));
                        }
                    }
                    Op::Stray { owner } => {
                        prop_assert_eq!(slots.give(&name(owner)), count(&model, owner) > 0);
                        if let Some(i) = model.iter().position(|(o, _)| *o == owner) {
                            model.remove(i);
                        }
                    }
                }
                prop_assert_eq!(slots.live(), model.len());
                for o in 0..OWNERS {
                    prop_assert_eq!(slots.of(&name(o)), count(&model, o));
                    if !resumed && max_per > 0 {
                        prop_assert!(count(&model, o) <= max_per);
                    }
                }
                if !resumed {
                    prop_assert!(model.len() <= max_live);
                }
            }
        }
    }
}
