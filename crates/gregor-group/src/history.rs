//! What the coordinator remembers of a group's rebalances, for metrics and the console: how many
//! there were and how long they took, and the last few in detail (who was in the group before and
//! after, who was removed for not rejoining, why the rebalance started, when each phase ended).
//!
//! A rebalance starts when the group enters PreparingRebalance, its join phase ends when the
//! generation advances (CompletingRebalance, or Empty when no member is left), and it finishes
//! when the group is Stable (or Empty). A rebalance that restarts before it finished (a member
//! joined during the sync phase) is kept as unfinished and a new one begins.

use std::collections::VecDeque;

/// Rebalances kept in detail per group.
pub const RECENT_REBALANCES: usize = 16;

/// One rebalance as the coordinator saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebalanceRecord {
    /// Why it started (the coordinator's reason: a member joined, left, its session expired...).
    pub reason: String,
    /// The generation before the rebalance.
    pub from_generation: i32,
    /// The generation it produced, once the join phase ended.
    pub generation: Option<i32>,
    pub started_ms: i64,
    /// End of the join phase (the generation advanced).
    pub join_completed_ms: Option<i64>,
    /// The group became Stable (or Empty): every member has its assignment.
    pub completed_ms: Option<i64>,
    /// Members before the rebalance started.
    pub members_before: Vec<String>,
    /// Members of the new generation.
    pub members_after: Vec<String>,
    /// Members removed at the end of the join phase for not rejoining within the rebalance
    /// timeout (`max.poll.interval.ms` for Java consumers).
    pub removed_not_rejoined: Vec<String>,
    /// The leader of the new generation.
    pub leader: Option<String>,
}

impl RebalanceRecord {
    /// Members of the new generation that were not in the group before.
    pub fn joined(&self) -> Vec<&str> {
        self.members_after
            .iter()
            .filter(|m| !self.members_before.contains(m))
            .map(String::as_str)
            .collect()
    }

    /// Members before that are not in the new generation.
    pub fn left(&self) -> Vec<&str> {
        self.members_before
            .iter()
            .filter(|m| !self.members_after.contains(m))
            .map(String::as_str)
            .collect()
    }
}

/// Counters and recent rebalances of one group since this coordinator loaded it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RebalanceHistory {
    /// Join phases completed: generations this coordinator started.
    pub generations: u64,
    /// Rebalances that finished (Stable or Empty).
    pub completed: u64,
    /// Their total duration, start to finish.
    pub completed_ms_total: u64,
    /// The last rebalances, oldest first, the one in progress (if any) last.
    pub recent: VecDeque<RebalanceRecord>,
    in_progress: bool,
}

impl RebalanceHistory {
    fn current(&mut self) -> Option<&mut RebalanceRecord> {
        if self.in_progress {
            self.recent.back_mut()
        } else {
            None
        }
    }

    /// Whether a rebalance is under way.
    pub fn in_progress(&self) -> Option<&RebalanceRecord> {
        self.in_progress.then(|| self.recent.back()).flatten()
    }

    /// A rebalance starts. `members` are the group's members now; the members before are those
    /// of the last generation this coordinator formed (a member that left has already been
    /// removed when the rebalance starts), or `members` for a group without history here.
    pub(crate) fn start(&mut self, now_ms: i64, generation: i32, members: Vec<String>) {
        let members = match self.recent.back() {
            Some(last) if last.generation.is_some() => last.members_after.clone(),
            _ => members,
        };
        self.in_progress = true;
        if self.recent.len() == RECENT_REBALANCES {
            self.recent.pop_front();
        }
        self.recent.push_back(RebalanceRecord {
            reason: String::new(),
            from_generation: generation,
            generation: None,
            started_ms: now_ms,
            join_completed_ms: None,
            completed_ms: None,
            members_before: members,
            members_after: Vec::new(),
            removed_not_rejoined: Vec::new(),
            leader: None,
        });
    }

    pub(crate) fn set_reason(&mut self, reason: &str) {
        if let Some(r) = self.current() {
            if r.reason.is_empty() {
                r.reason = reason.to_string();
            }
        }
    }

    pub(crate) fn removed_not_rejoined(&mut self, members: &[String]) {
        if let Some(r) = self.current() {
            r.removed_not_rejoined.extend(members.iter().cloned());
        }
    }

    pub(crate) fn join_completed(
        &mut self,
        now_ms: i64,
        generation: i32,
        members: Vec<String>,
        leader: Option<String>,
    ) {
        if let Some(r) = self.current() {
            r.generation = Some(generation);
            r.join_completed_ms = Some(now_ms);
            r.members_after = members;
            r.leader = leader;
            self.generations += 1;
        }
    }

    pub(crate) fn finish(&mut self, now_ms: i64) {
        let Some(r) = self.current() else { return };
        r.completed_ms = Some(now_ms);
        let took = u64::try_from(now_ms - r.started_ms).unwrap_or(0);
        self.in_progress = false;
        self.completed += 1;
        self.completed_ms_total += took;
    }

    /// The rebalance in progress stops without finishing (restarted, or the group died).
    pub(crate) fn abandon(&mut self) {
        self.in_progress = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_rebalance_is_counted_and_timed_from_start_to_stable() {
        let mut h = RebalanceHistory::default();
        h.start(1_000, 1, ids(&["a", "b"]));
        h.set_reason("member left");
        h.set_reason("ignored: the first reason stays");
        h.join_completed(1_300, 2, ids(&["a", "c"]), Some("a".into()));
        assert_eq!(h.generations, 1);
        assert_eq!(h.completed, 0);
        h.finish(1_500);
        assert_eq!(h.completed, 1);
        assert_eq!(h.completed_ms_total, 500);
        let r = h.recent.back().expect("recorded");
        assert_eq!(r.reason, "member left");
        assert_eq!(r.generation, Some(2));
        assert_eq!(r.joined(), vec!["c"]);
        assert_eq!(r.left(), vec!["b"]);
        assert!(h.in_progress().is_none());
        // Finishing again (a later Stable transition without a rebalance) changes nothing.
        h.finish(9_000);
        assert_eq!((h.completed, h.completed_ms_total), (1, 500));
    }

    #[test]
    fn an_abandoned_rebalance_is_kept_but_not_counted_as_completed() {
        let mut h = RebalanceHistory::default();
        h.start(0, 0, Vec::new());
        h.join_completed(10, 1, ids(&["a"]), Some("a".into()));
        h.abandon();
        h.start(20, 1, ids(&["a"]));
        h.join_completed(30, 2, ids(&["a", "b"]), Some("a".into()));
        h.finish(40);
        assert_eq!(h.generations, 2);
        assert_eq!(h.completed, 1);
        assert_eq!(h.completed_ms_total, 20);
        assert_eq!(h.recent.len(), 2);
        assert_eq!(h.recent[0].completed_ms, None);
    }

    #[test]
    fn only_the_last_rebalances_are_kept_in_detail() {
        let mut h = RebalanceHistory::default();
        for i in 0..(RECENT_REBALANCES as i64 + 5) {
            h.start(i * 10, i as i32, Vec::new());
            h.join_completed(i * 10 + 1, i as i32 + 1, Vec::new(), None);
            h.finish(i * 10 + 2);
        }
        assert_eq!(h.recent.len(), RECENT_REBALANCES);
        assert_eq!(h.completed, RECENT_REBALANCES as u64 + 5);
        assert_eq!(h.recent[0].from_generation, 5);
    }
}
