//! Keyed deadlines. Scheduling a key replaces its previous deadline, as Kafka's coordinator timer
//! does, so a member has at most one session deadline and a group at most one join deadline and one
//! sync deadline at any time.

use std::collections::{BTreeSet, HashMap};

/// What a deadline is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum TimerKey {
    /// A member's (or pending member's) session: removed when it passes without contact.
    Heartbeat { group: String, member: String },
    /// The end of a group's join phase.
    Join { group: String },
    /// The end of a group's sync phase.
    Sync { group: String },
    /// A KIP-848 consumer group member's session.
    ConsumerSession { group: String, member: String },
    /// The deadline of a KIP-848 member's revocation (its rebalance timeout).
    ConsumerRevocation { group: String, member: String },
}

/// What to do when the deadline passes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TimerAction {
    /// Expire a member's session.
    Heartbeat,
    /// Complete the join phase (rebalance timeout).
    Join,
    /// The initial rebalance delay of a group that was empty (Kafka's `InitialDelayedJoin`).
    InitialJoin { delay_ms: i64, remaining_ms: i64 },
    /// Drop members that did not sync in this generation.
    Sync { generation: i32 },
}

#[derive(Debug, Default)]
pub(crate) struct Timers {
    entries: HashMap<TimerKey, (i64, u64, TimerAction)>,
    /// (deadline, insertion sequence, key): due timers fire in deadline order, ties in the order
    /// they were scheduled, so runs are deterministic.
    queue: BTreeSet<(i64, u64, TimerKey)>,
    seq: u64,
}

impl Timers {
    pub fn schedule(&mut self, key: TimerKey, at_ms: i64, action: TimerAction) {
        self.cancel(&key);
        self.seq += 1;
        self.queue.insert((at_ms, self.seq, key.clone()));
        self.entries.insert(key, (at_ms, self.seq, action));
    }

    pub fn cancel(&mut self, key: &TimerKey) {
        if let Some((at, seq, _)) = self.entries.remove(key) {
            self.queue.remove(&(at, seq, key.clone()));
        }
    }

    pub fn deadline(&self, key: &TimerKey) -> Option<i64> {
        self.entries.get(key).map(|(at, _, _)| *at)
    }

    pub fn next_deadline(&self) -> Option<i64> {
        self.queue.first().map(|(at, _, _)| *at)
    }

    /// Removes and returns the earliest timer due at `now_ms`, with its deadline.
    pub fn pop_due(&mut self, now_ms: i64) -> Option<(i64, TimerKey, TimerAction)> {
        let (at, _, _) = self.queue.first()?;
        if *at > now_ms {
            return None;
        }
        let (at, _, key) = self.queue.pop_first()?;
        let (_, _, action) = self
            .entries
            .remove(&key)
            .expect("queue and entries hold the same keys");
        Some((at, key, action))
    }

    pub fn clear(&mut self) {
        self.entries.clear();
        self.queue.clear();
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hb(m: &str) -> TimerKey {
        TimerKey::Heartbeat {
            group: "g".into(),
            member: m.into(),
        }
    }

    #[test]
    fn reschedule_replaces_and_pops_in_order() {
        let mut t = Timers::default();
        t.schedule(hb("a"), 100, TimerAction::Heartbeat);
        t.schedule(hb("b"), 50, TimerAction::Heartbeat);
        t.schedule(hb("a"), 200, TimerAction::Heartbeat);
        assert_eq!(t.len(), 2);
        assert_eq!(t.next_deadline(), Some(50));
        assert!(t.pop_due(49).is_none());
        assert_eq!(
            t.pop_due(300).map(|(at, k, _)| (at, k)),
            Some((50, hb("b")))
        );
        assert_eq!(
            t.pop_due(300).map(|(at, k, _)| (at, k)),
            Some((200, hb("a")))
        );
        assert!(t.pop_due(300).is_none());
    }

    #[test]
    fn cancel_removes() {
        let mut t = Timers::default();
        t.schedule(hb("a"), 10, TimerAction::Heartbeat);
        t.cancel(&hb("a"));
        assert_eq!(t.next_deadline(), None);
        assert!(t.pop_due(i64::MAX).is_none());
    }
}
