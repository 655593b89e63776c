//! The leader's view of a partition's replication: each follower's log end offset (as its
//! fetches report it), the in-sync replica set, the high watermark, and when the ISR should
//! shrink or expand. A pure state machine: callers pass the time and the leader's own offsets,
//! and carry out the ISR proposals it returns (AlterPartition to the controller).
//!
//! A follower fetches from its log end offset only after it has synced what it appended, so
//! the offset a fetch names is durable on the follower: the high watermark, the minimum over
//! the ISR, counts only batches on the disk of every in-sync replica.

use std::collections::BTreeMap;

/// A follower's log end offset before its first fetch from this leader.
const UNKNOWN_OFFSET: i64 = -1;

/// What the leader knows of one follower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FollowerProgress {
    /// The offset of the follower's last fetch: its durable log end offset.
    log_end_offset: i64,
    /// When it last fetched, and the leader's log end offset then.
    last_fetch_ms: i64,
    leader_end_at_last_fetch: i64,
    /// The last time the follower was caught up with the leader's log end (Kafka's
    /// `lastCaughtUpTimeMs`): the ISR drops a follower when this is older than
    /// `replica.lag.time.max.ms`.
    last_caught_up_ms: i64,
}

impl FollowerProgress {
    /// When the follower was last caught up, given `leader_end` (the leader's log end offset
    /// now) and `last_fetch_ms`, when it last fetched in a session holding the partition. Such
    /// a fetch that names no new offset keeps the last one: if that is the log end now, it was
    /// the log end at that fetch too (a leader's log end only grows), so the follower was
    /// caught up then, as a fetch naming it would have recorded.
    fn caught_up_as_of(&self, leader_end: i64, last_fetch_ms: Option<i64>) -> i64 {
        match last_fetch_ms {
            Some(t) if self.log_end_offset >= leader_end && self.log_end_offset >= 0 => {
                self.last_caught_up_ms.max(t)
            }
            _ => self.last_caught_up_ms,
        }
    }
}

/// A proposed ISR, to send to the controller with the partition epoch it is based on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrProposal {
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub isr: Vec<i32>,
}

/// How a committed state changed the ISR of a partition this node leads (in the same leader
/// epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsrChange {
    Shrink,
    Expand,
}

/// The committed state of a partition, as the metadata log has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

/// Replication state of a partition this node leads.
#[derive(Debug, Clone)]
pub struct LeaderState {
    node_id: i32,
    state: PartitionState,
    /// An ISR change sent to the controller and not yet answered. While it is in flight the
    /// high watermark counts the union of the committed and the proposed ISR (Kafka's "maximal
    /// ISR"): a replica being added must already have the data, a replica being removed still
    /// holds the watermark until the removal is committed.
    pending: Option<IsrProposal>,
    followers: BTreeMap<i32, FollowerProgress>,
    /// The leader's own log end offset as far as it is durable.
    local_durable_end: i64,
    /// The log end offset when this node became leader: a follower joins the ISR only once
    /// it has everything up to there (the start of this leader epoch).
    epoch_start_offset: i64,
}

impl LeaderState {
    /// A new leader. Followers in the ISR count as caught up now, so that none is dropped
    /// before it had `replica.lag.time.max.ms` to fetch from this leader.
    pub fn new(node_id: i32, state: PartitionState, log_end_offset: i64, now_ms: i64) -> Self {
        let mut s = LeaderState {
            node_id,
            state: PartitionState {
                replicas: Vec::new(),
                ..state.clone()
            },
            pending: None,
            followers: BTreeMap::new(),
            local_durable_end: log_end_offset,
            epoch_start_offset: log_end_offset,
        };
        s.update(state, now_ms);
        s
    }

    pub fn state(&self) -> &PartitionState {
        &self.state
    }

    /// The committed ISR.
    pub fn isr(&self) -> &[i32] {
        &self.state.isr
    }

    /// Takes a newer committed state (an ISR change or a reassignment) from the metadata log.
    /// A state from another partition epoch ends any proposal in flight. Returns how the ISR
    /// changed: counted from what committed, not from the controller's answer, which a
    /// controller election can lose after the change committed.
    pub fn update(&mut self, state: PartitionState, now_ms: i64) -> Option<IsrChange> {
        // The controller elects a leader from the ISR and never removes it while it leads
        // (an unclean election makes the ISR the leader alone).
        debug_assert!(
            state.isr.contains(&self.node_id),
            "leader {} is not in its own ISR {:?}",
            self.node_id,
            state.isr
        );
        let change = match state.isr.len().cmp(&self.state.isr.len()) {
            std::cmp::Ordering::Less => Some(IsrChange::Shrink),
            std::cmp::Ordering::Greater => Some(IsrChange::Expand),
            std::cmp::Ordering::Equal => None,
        };
        if state.partition_epoch != self.state.partition_epoch {
            self.pending = None;
        }
        for &r in &state.replicas {
            if r != self.node_id {
                self.followers.entry(r).or_insert(FollowerProgress {
                    log_end_offset: UNKNOWN_OFFSET,
                    last_fetch_ms: now_ms,
                    leader_end_at_last_fetch: UNKNOWN_OFFSET,
                    last_caught_up_ms: now_ms,
                });
            }
        }
        self.followers.retain(|r, _| state.replicas.contains(r));
        self.state = state;
        change
    }

    /// Whether `p` is the proposal still in flight.
    pub fn is_pending(&self, p: &IsrProposal) -> bool {
        self.pending.as_ref() == Some(p)
    }

    /// The controller answered a proposal without committing a change (an error, or nothing
    /// to change): another may be sent.
    pub fn proposal_done(&mut self, based_on_partition_epoch: i32) {
        if self.state.partition_epoch == based_on_partition_epoch {
            self.pending = None;
        }
    }

    /// The committed ISR plus replicas a proposal in flight adds.
    fn maximal_isr(&self) -> Vec<i32> {
        let mut isr = self.state.isr.clone();
        if let Some(p) = &self.pending {
            for &r in &p.isr {
                if !isr.contains(&r) {
                    isr.push(r);
                }
            }
        }
        isr
    }

    /// The high watermark the replicas allow: the smallest durable log end offset over the
    /// maximal ISR (the leader included). A follower that has not fetched yet holds it back.
    pub fn high_watermark(&self) -> i64 {
        let mut hw = self.local_durable_end;
        for r in self.maximal_isr() {
            if r == self.node_id {
                continue;
            }
            let leo = self
                .followers
                .get(&r)
                .map_or(UNKNOWN_OFFSET, |f| f.log_end_offset);
            if planted!(HighWatermarkMaxOverIsr) {
                hw = hw.max(leo);
                continue;
            }
            hw = hw.min(leo);
        }
        hw
    }

    /// The leader's own appends are durable up to `end`.
    pub fn local_durable(&mut self, end: i64) {
        self.local_durable_end = self.local_durable_end.max(end);
    }

    /// A follower fetched from `fetch_offset` while the leader's log ended at `leader_end`.
    /// Returns an ISR expansion to propose when the follower has caught up and is not in the
    /// ISR. Fetches from replicas outside the replica set are ignored.
    pub fn follower_fetched(
        &mut self,
        replica: i32,
        fetch_offset: i64,
        leader_end: i64,
        high_watermark: i64,
        now_ms: i64,
    ) -> Option<IsrProposal> {
        let f = self.followers.get_mut(&replica)?;
        if fetch_offset >= leader_end {
            f.last_caught_up_ms = now_ms;
        } else if fetch_offset >= f.leader_end_at_last_fetch {
            // It has what the leader had at its previous fetch: caught up as of then.
            f.last_caught_up_ms = f.last_caught_up_ms.max(f.last_fetch_ms);
        }
        f.log_end_offset = fetch_offset;
        f.last_fetch_ms = now_ms;
        f.leader_end_at_last_fetch = leader_end;
        let joins = !self.state.isr.contains(&replica)
            && self.pending.is_none()
            && fetch_offset >= high_watermark
            && fetch_offset >= self.epoch_start_offset;
        if !joins {
            return None;
        }
        let mut isr = self.state.isr.clone();
        isr.push(replica);
        Some(self.propose(isr))
    }

    /// ISR members that have not been caught up for `lag_max_ms`; returns the shrunk ISR to
    /// propose, if any (never while another proposal is in flight). `leader_end` is the
    /// leader's log end offset now, `last_fetch` when a follower last fetched in a session
    /// holding the partition (see [`FollowerProgress::caught_up_as_of`]).
    pub fn shrink(
        &mut self,
        now_ms: i64,
        lag_max_ms: i64,
        leader_end: i64,
        last_fetch: impl Fn(i32) -> Option<i64>,
    ) -> Option<IsrProposal> {
        if self.pending.is_some() {
            return None;
        }
        let lagging: Vec<i32> = self
            .state
            .isr
            .iter()
            .copied()
            .filter(|&r| r != self.node_id)
            .filter(|r| {
                self.followers.get(r).is_some_and(|f| {
                    now_ms - f.caught_up_as_of(leader_end, last_fetch(*r)) > lag_max_ms
                })
            })
            .collect();
        if lagging.is_empty() {
            return None;
        }
        let isr: Vec<i32> = self
            .state
            .isr
            .iter()
            .copied()
            .filter(|r| !lagging.contains(r))
            .collect();
        let proposal = self.propose(isr);
        if planted!(IsrShrinkBeforeCommit) {
            self.state.isr = proposal.isr.clone();
        }
        Some(proposal)
    }

    fn propose(&mut self, isr: Vec<i32>) -> IsrProposal {
        debug_assert!(
            isr.contains(&self.node_id),
            "leader {} proposes an ISR without itself: {isr:?}",
            self.node_id
        );
        let p = IsrProposal {
            leader_epoch: self.state.leader_epoch,
            partition_epoch: self.state.partition_epoch,
            isr,
        };
        self.pending = Some(p.clone());
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(isr: &[i32], partition_epoch: i32) -> PartitionState {
        PartitionState {
            leader_epoch: 1,
            partition_epoch,
            replicas: vec![0, 1, 2],
            isr: isr.to_vec(),
        }
    }

    #[test]
    fn high_watermark_is_the_smallest_durable_end_over_the_isr() {
        let mut l = LeaderState::new(0, state(&[0, 1, 2], 0), 0, 0);
        l.local_durable(10);
        assert_eq!(l.high_watermark(), -1, "followers not heard from hold it");
        l.follower_fetched(1, 10, 10, 0, 5);
        assert_eq!(l.high_watermark(), -1);
        l.follower_fetched(2, 7, 10, 0, 5);
        assert_eq!(l.high_watermark(), 7);
        l.follower_fetched(2, 10, 10, 7, 6);
        assert_eq!(l.high_watermark(), 10);
        // The leader's own durability bounds it too.
        l.follower_fetched(1, 12, 12, 10, 7);
        l.follower_fetched(2, 12, 12, 10, 7);
        assert_eq!(l.high_watermark(), 10);
        l.local_durable(12);
        assert_eq!(l.high_watermark(), 12);
    }

    #[test]
    fn a_replica_outside_the_isr_does_not_hold_the_high_watermark() {
        let mut l = LeaderState::new(0, state(&[0, 1], 0), 0, 0);
        l.local_durable(5);
        l.follower_fetched(1, 5, 5, 0, 1);
        assert_eq!(l.high_watermark(), 5);
    }

    #[test]
    fn a_caught_up_follower_is_proposed_for_the_isr_once() {
        let mut l = LeaderState::new(0, state(&[0, 1], 3), 4, 0);
        l.local_durable(8);
        l.follower_fetched(1, 8, 8, 4, 1);
        // Below the high watermark: not yet.
        assert_eq!(l.follower_fetched(2, 3, 8, 8, 1), None);
        let p = l.follower_fetched(2, 8, 8, 8, 2).expect("expansion");
        assert_eq!(p.isr, vec![0, 1, 2]);
        assert_eq!(p.partition_epoch, 3);
        // In flight: the proposed member counts for the high watermark, no second proposal.
        assert_eq!(l.follower_fetched(2, 8, 9, 8, 3), None);
        l.local_durable(9);
        l.follower_fetched(1, 9, 9, 8, 3);
        assert_eq!(l.high_watermark(), 8, "the joining replica holds it");
        // The controller commits it.
        assert_eq!(l.update(state(&[0, 1, 2], 4), 4), Some(IsrChange::Expand));
        assert_eq!(l.isr(), &[0, 1, 2]);
    }

    #[test]
    fn committed_isr_changes_are_reported_whoever_made_them() {
        let mut l = LeaderState::new(0, state(&[0, 1, 2], 0), 0, 0);
        // The answer to the leader's own proposal may be lost (a controller election): what
        // the metadata log applies tells the change.
        let p = l.shrink(40_000, 30_000, 0, |_| None).expect("shrink");
        assert_eq!(p.isr, vec![0]);
        assert_eq!(l.update(state(&[0, 2], 1), 40_001), Some(IsrChange::Shrink));
        // The controller removed a fenced broker itself.
        assert_eq!(l.update(state(&[0], 2), 40_002), Some(IsrChange::Shrink));
        // A replica set change with the same ISR is no ISR change.
        let mut moved = state(&[0], 3);
        moved.replicas = vec![0, 1, 2, 3];
        assert_eq!(l.update(moved, 40_003), None);
        assert_eq!(l.update(state(&[0, 1], 4), 40_004), Some(IsrChange::Expand));
    }

    #[test]
    fn a_follower_joins_only_with_the_whole_current_epoch() {
        // Became leader with 10 records; the high watermark is still 4.
        let mut l = LeaderState::new(0, state(&[0], 0), 10, 0);
        assert_eq!(l.follower_fetched(1, 6, 10, 4, 1), None);
        assert!(l.follower_fetched(1, 10, 10, 4, 2).is_some());
    }

    #[test]
    fn a_follower_not_caught_up_for_the_lag_time_is_dropped() {
        let mut l = LeaderState::new(0, state(&[0, 1, 2], 0), 0, 0);
        l.local_durable(5);
        l.follower_fetched(1, 5, 5, 0, 100);
        l.follower_fetched(2, 2, 5, 0, 100);
        assert_eq!(l.shrink(20_000, 30_000, 0, |_| None), None);
        // Follower 1 keeps up; follower 2 fetches but never reaches the end.
        for t in (1_000..40_000).step_by(1_000) {
            l.local_durable(5 + t);
            l.follower_fetched(1, 5 + t, 5 + t, 0, t);
            l.follower_fetched(2, 2, 5 + t, 0, t);
        }
        let p = l.shrink(40_000, 30_000, 0, |_| None).expect("shrink");
        assert_eq!(p.isr, vec![0, 1]);
        assert_eq!(
            l.shrink(41_000, 30_000, 0, |_| None),
            None,
            "one proposal at a time"
        );
        l.proposal_done(0);
        assert!(
            l.shrink(41_000, 30_000, 0, |_| None).is_some(),
            "retried after a refusal"
        );
    }

    #[test]
    fn a_slow_but_steady_follower_stays_in_sync() {
        // Each fetch reaches what the leader had at the previous fetch: caught up as of then.
        let mut l = LeaderState::new(0, state(&[0, 1], 0), 0, 0);
        let mut leader_end = 0;
        for t in (0..100_000).step_by(1_000) {
            let follower_at = leader_end;
            leader_end += 10;
            l.local_durable(leader_end);
            l.follower_fetched(1, follower_at, leader_end, 0, t);
        }
        assert_eq!(l.shrink(100_000, 30_000, 0, |_| None), None);
    }

    #[test]
    fn an_idle_caught_up_follower_stays_in_sync_through_its_sessions_fetches() {
        // Followers 1 and 2 named offset 5, the log end, at t=100 and never again: their
        // incremental fetches name only partitions that moved.
        let mut l = LeaderState::new(0, state(&[0, 1, 2], 0), 0, 0);
        l.local_durable(5);
        l.follower_fetched(1, 5, 5, 0, 100);
        l.follower_fetched(2, 5, 5, 0, 100);
        // Follower 1's session fetched at 39,000; follower 2's session is gone.
        let last_fetch = |r: i32| (r == 1).then_some(39_000);
        let p = l.shrink(40_000, 30_000, 5, last_fetch).expect("shrink");
        assert_eq!(
            p.isr,
            vec![0, 1],
            "only the follower no session speaks for is dropped"
        );
        // A follower behind the log end is not caught up however recently it fetched.
        let mut l = LeaderState::new(0, state(&[0, 1], 0), 0, 0);
        l.local_durable(5);
        l.follower_fetched(1, 5, 5, 0, 100);
        l.local_durable(6);
        let p = l
            .shrink(40_000, 30_000, 6, |_| Some(39_000))
            .expect("shrink");
        assert_eq!(p.isr, vec![0]);
    }

    use proptest::prelude::*;

    /// One step of a leader's life: its own durable end grows, a follower fetches (from at most
    /// what it could have copied), time passes and the ISR shrinks, or the controller commits
    /// (or refuses) the proposal in flight.
    #[derive(Debug, Clone)]
    enum Step {
        Append(i64),
        Fetch { replica: i32, behind: i64 },
        Tick(i64),
        Commit,
        Refuse,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (1i64..50).prop_map(Step::Append),
            (1i32..3, 0i64..60).prop_map(|(replica, behind)| Step::Fetch { replica, behind }),
            (0i64..20_000).prop_map(Step::Tick),
            Just(Step::Commit),
            Just(Step::Refuse),
        ]
    }

    proptest! {
        /// Whatever the interleaving of appends, fetches, shrinks and controller answers: the
        /// high watermark never passes the leader's durable end nor the durable end of any
        /// replica of the maximal ISR, and the ISR always keeps the leader.
        #[test]
        fn high_watermark_never_passes_an_isr_member(steps in proptest::collection::vec(step(), 1..200)) {
            let mut l = LeaderState::new(0, state(&[0, 1, 2], 0), 0, 0);
            let (mut now, mut end) = (0i64, 0i64);
            let mut durable = std::collections::BTreeMap::from([(1, 0i64), (2, 0i64)]);
            let mut pending: Option<IsrProposal> = None;
            for s in steps {
                match s {
                    Step::Append(n) => {
                        end += n;
                        l.local_durable(end);
                    }
                    Step::Fetch { replica, behind } => {
                        let at = (end - behind).max(durable[&replica]);
                        durable.insert(replica, at);
                        let hw = l.high_watermark().max(0);
                        if let Some(p) = l.follower_fetched(replica, at, end, hw, now) {
                            pending = Some(p);
                        }
                    }
                    Step::Tick(ms) => {
                        now += ms;
                        if let Some(p) = l.shrink(now, 30_000, 0, |_| None) {
                            pending = Some(p);
                        }
                    }
                    Step::Commit => {
                        if let Some(p) = pending.take() {
                            let mut next = l.state().clone();
                            next.isr = p.isr;
                            next.partition_epoch += 1;
                            l.update(next, now);
                        }
                    }
                    Step::Refuse => {
                        if let Some(p) = pending.take() {
                            l.proposal_done(p.partition_epoch);
                        }
                    }
                }
                let hw = l.high_watermark();
                prop_assert!(hw <= end);
                for r in l.maximal_isr() {
                    if r != 0 {
                        prop_assert!(hw <= durable[&r], "hw {} past replica {} at {}", hw, r, durable[&r]);
                    }
                }
                prop_assert!(l.isr().contains(&0));
            }
        }
    }

    #[test]
    fn fetches_from_non_replicas_are_ignored() {
        let mut l = LeaderState::new(0, state(&[0], 0), 0, 0);
        assert_eq!(l.follower_fetched(7, 0, 0, 0, 1), None);
        assert_eq!(l.high_watermark(), 0);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "leader 0 is not in its own ISR [1]")]
    fn a_committed_isr_without_its_leader_is_a_bug() {
        let mut l = LeaderState::new(0, state(&[0, 1], 0), 0, 0);
        l.update(state(&[1], 1), 1);
    }
}
