//! What the coordinator remembers of a group's rebalances, for metrics and the console: how many
//! there were and how long they took, and the last few in detail (who was in the group before and
//! after, who departed and why, why the rebalance started, when each phase ended, and the
//! assignment it produced).
//!
//! A rebalance starts when the group enters PreparingRebalance, its join phase ends when the
//! generation advances (CompletingRebalance, or Empty when no member is left), and it finishes
//! when the group is Stable (or Empty). A rebalance that restarts before it finished (a member
//! joined during the sync phase) is kept as abandoned and a new one begins.
//!
//! Departures are recorded where the coordinator removes a member; one that happens outside a
//! join phase (a member leaving a Stable group, which is what starts the next rebalance) is
//! attached to the next rebalance.

use std::collections::VecDeque;

use bytes::Bytes;

/// Rebalances kept in detail per group.
pub const RECENT_REBALANCES: usize = 16;

/// Departures kept while no rebalance is under way (a group that stays without a rebalance).
const PENDING_DEPARTURES: usize = 64;

/// A member as its client described itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRef {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
}

/// Why the coordinator removed a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DepartureCause {
    /// LeaveGroup from the member itself.
    Left,
    /// LeaveGroup naming a static member by its instance id (an admin tool).
    RemovedByAdmin,
    /// No heartbeat within `session.timeout.ms`.
    SessionTimeout,
    /// Did not rejoin within the rebalance timeout (`max.poll.interval.ms` for Java consumers:
    /// a consumer stuck between polls).
    RebalanceTimeout,
    /// Did not send SyncGroup before the sync deadline.
    SyncTimeout,
    /// Refused: the group was at `group.max.size`.
    GroupFull,
}

impl DepartureCause {
    pub fn name(self) -> &'static str {
        match self {
            DepartureCause::Left => "left",
            DepartureCause::RemovedByAdmin => "removed by admin",
            DepartureCause::SessionTimeout => "session timeout",
            DepartureCause::RebalanceTimeout => "rebalance timeout",
            DepartureCause::SyncTimeout => "sync timeout",
            DepartureCause::GroupFull => "group full",
        }
    }
}

/// A member the coordinator removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Departure {
    pub member: MemberRef,
    pub cause: DepartureCause,
    pub at_ms: i64,
}

/// One rebalance as the coordinator saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebalanceRecord {
    /// Why it started (the coordinator's reason: a member joined, left, its session expired...).
    pub reason: String,
    /// The generation before the rebalance.
    pub from_generation: i32,
    /// The generation it produced, once the join phase ended.
    pub generation: Option<i32>,
    /// The protocol (assignment strategy) the new generation chose.
    pub protocol: Option<String>,
    pub started_ms: i64,
    /// End of the join phase (the generation advanced).
    pub join_completed_ms: Option<i64>,
    /// The group became Stable (or Empty): every member has its assignment.
    pub completed_ms: Option<i64>,
    /// Members before the rebalance started.
    pub members_before: Vec<MemberRef>,
    /// Members of the new generation.
    pub members_after: Vec<MemberRef>,
    /// Members removed since the previous generation formed, up to the end of this join phase.
    pub departures: Vec<Departure>,
    /// The leader of the new generation.
    pub leader: Option<String>,
    /// Each member's assignment (as the leader sent it) once the rebalance finished.
    pub assignments: Vec<(String, Bytes)>,
}

impl RebalanceRecord {
    /// Members of the new generation that were not in the group before.
    pub fn joined(&self) -> Vec<&MemberRef> {
        self.members_after
            .iter()
            .filter(|m| !contains(&self.members_before, &m.member_id))
            .collect()
    }

    /// Members before that are not in the new generation.
    pub fn left(&self) -> Vec<&MemberRef> {
        self.members_before
            .iter()
            .filter(|m| !contains(&self.members_after, &m.member_id))
            .collect()
    }

    /// Members removed for not rejoining within the rebalance timeout.
    pub fn kicked(&self) -> Vec<&MemberRef> {
        self.departures
            .iter()
            .filter(|d| d.cause == DepartureCause::RebalanceTimeout)
            .map(|d| &d.member)
            .collect()
    }
}

fn contains(members: &[MemberRef], id: &str) -> bool {
    members.iter().any(|m| m.member_id == id)
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
    /// Departures outside a join phase, for the next rebalance.
    pending_departures: Vec<Departure>,
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
    pub(crate) fn start(&mut self, now_ms: i64, generation: i32, members: Vec<MemberRef>) {
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
            protocol: None,
            started_ms: now_ms,
            join_completed_ms: None,
            completed_ms: None,
            members_before: members,
            members_after: Vec::new(),
            departures: std::mem::take(&mut self.pending_departures),
            leader: None,
            assignments: Vec::new(),
        });
    }

    pub(crate) fn set_reason(&mut self, reason: &str) {
        if let Some(r) = self.current() {
            if r.reason.is_empty() {
                r.reason = reason.to_string();
            }
        }
    }

    /// The coordinator removed a member: part of the rebalance in its join phase, or of the
    /// next one.
    pub(crate) fn departed(&mut self, member: MemberRef, cause: DepartureCause, now_ms: i64) {
        let d = Departure {
            member,
            cause,
            at_ms: now_ms,
        };
        match self.current() {
            Some(r) if r.generation.is_none() => r.departures.push(d),
            _ => {
                if self.pending_departures.len() == PENDING_DEPARTURES {
                    self.pending_departures.remove(0);
                }
                self.pending_departures.push(d);
            }
        }
    }

    pub(crate) fn join_completed(
        &mut self,
        now_ms: i64,
        generation: i32,
        members: Vec<MemberRef>,
        leader: Option<String>,
        protocol: Option<String>,
    ) {
        if let Some(r) = self.current() {
            r.generation = Some(generation);
            r.join_completed_ms = Some(now_ms);
            r.members_after = members;
            r.leader = leader;
            r.protocol = protocol;
            self.generations += 1;
        }
    }

    /// The rebalance finished with these assignments.
    pub(crate) fn finish(&mut self, now_ms: i64, assignments: Vec<(String, Bytes)>) {
        let Some(r) = self.current() else { return };
        r.completed_ms = Some(now_ms);
        r.assignments = assignments;
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

    fn refs(v: &[&str]) -> Vec<MemberRef> {
        v.iter()
            .map(|s| MemberRef {
                member_id: s.to_string(),
                group_instance_id: None,
                client_id: format!("client-{s}"),
                client_host: "/127.0.0.1".into(),
            })
            .collect()
    }

    fn ids(v: &[&MemberRef]) -> Vec<String> {
        v.iter().map(|m| m.member_id.clone()).collect()
    }

    #[test]
    fn a_rebalance_is_counted_and_timed_from_start_to_stable() {
        let mut h = RebalanceHistory::default();
        h.start(1_000, 1, refs(&["a", "b"]));
        h.set_reason("member left");
        h.set_reason("ignored: the first reason stays");
        h.join_completed(1_300, 2, refs(&["a", "c"]), Some("a".into()), None);
        assert_eq!(h.generations, 1);
        assert_eq!(h.completed, 0);
        h.finish(1_500, vec![("a".into(), Bytes::from_static(b"x"))]);
        assert_eq!(h.completed, 1);
        assert_eq!(h.completed_ms_total, 500);
        let r = h.recent.back().expect("recorded");
        assert_eq!(r.reason, "member left");
        assert_eq!(r.generation, Some(2));
        assert_eq!(ids(&r.joined()), vec!["c"]);
        assert_eq!(ids(&r.left()), vec!["b"]);
        assert_eq!(r.assignments.len(), 1);
        assert!(h.in_progress().is_none());
        // Finishing again (a later Stable transition without a rebalance) changes nothing.
        h.finish(9_000, Vec::new());
        assert_eq!((h.completed, h.completed_ms_total), (1, 500));
    }

    #[test]
    fn departures_attach_to_the_rebalance_they_cause_or_happen_in() {
        let mut h = RebalanceHistory::default();
        h.start(0, 0, Vec::new());
        h.join_completed(10, 1, refs(&["a", "b", "c"]), Some("a".into()), None);
        h.finish(20, Vec::new());
        // b leaves the Stable group: the removal comes before the rebalance it starts.
        h.departed(refs(&["b"])[0].clone(), DepartureCause::Left, 30);
        h.start(30, 1, refs(&["a", "c"]));
        // c does not rejoin in time: removed at the end of this join phase.
        h.departed(
            refs(&["c"])[0].clone(),
            DepartureCause::RebalanceTimeout,
            90,
        );
        h.join_completed(90, 2, refs(&["a"]), Some("a".into()), None);
        // A departure after the join phase belongs to the next rebalance.
        h.departed(refs(&["a"])[0].clone(), DepartureCause::SyncTimeout, 95);
        let r = h.recent.back().expect("recorded");
        assert_eq!(
            ids(&r.members_before.iter().collect::<Vec<_>>()),
            vec!["a", "b", "c"]
        );
        let causes: Vec<_> = r
            .departures
            .iter()
            .map(|d| (d.member.member_id.as_str(), d.cause))
            .collect();
        assert_eq!(
            causes,
            vec![
                ("b", DepartureCause::Left),
                ("c", DepartureCause::RebalanceTimeout)
            ]
        );
        assert_eq!(ids(&r.kicked()), vec!["c"]);
        h.abandon();
        h.start(95, 2, Vec::new());
        assert_eq!(h.recent.back().expect("recorded").departures.len(), 1);
    }

    #[test]
    fn an_abandoned_rebalance_is_kept_but_not_counted_as_completed() {
        let mut h = RebalanceHistory::default();
        h.start(0, 0, Vec::new());
        h.join_completed(10, 1, refs(&["a"]), Some("a".into()), None);
        h.abandon();
        h.start(20, 1, refs(&["a"]));
        h.join_completed(30, 2, refs(&["a", "b"]), Some("a".into()), None);
        h.finish(40, Vec::new());
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
            h.join_completed(i * 10 + 1, i as i32 + 1, Vec::new(), None, None);
            h.finish(i * 10 + 2, Vec::new());
        }
        assert_eq!(h.recent.len(), RECENT_REBALANCES);
        assert_eq!(h.completed, RECENT_REBALANCES as u64 + 5);
        assert_eq!(h.recent[0].from_generation, 5);
    }
}
