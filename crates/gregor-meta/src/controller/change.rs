//! Builds the [`PartitionChangeRecord`] for a desired partition state: completes reassignments
//! whose new replicas are all in sync, elects a leader when the current one is no longer
//! eligible (or a preferred one on request), bumps the leader epoch when replicas are removed,
//! and leaves out everything that did not change.

use crate::image::PartitionRegistration;
use crate::record::{LeaderChange, LeaderRecoveryState, PartitionChangeRecord};
use crate::types::{BrokerId, NO_LEADER};
use uuid::Uuid;

/// How to pick a leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Election {
    /// Keep the current leader while it is eligible; otherwise the first eligible replica in
    /// the ISR.
    Online,
    /// Like `Online`, then fall back to any live replica outside the ISR (data may be lost):
    /// only where `unclean.leader.election.enable=true` or on an explicit unclean election.
    Unclean,
    /// Prefer the first replica when it is eligible.
    Preferred,
}

pub(crate) struct PartitionChangeBuilder<'a> {
    part: &'a PartitionRegistration,
    topic_id: Uuid,
    partition: i32,
    /// Whether a broker may lead or be in the ISR (registered, unfenced, not being fenced).
    is_active: &'a dyn Fn(BrokerId) -> bool,
    election: Election,
    target_isr: Vec<BrokerId>,
    target_replicas: Vec<BrokerId>,
    target_adding: Vec<BrokerId>,
    target_removing: Vec<BrokerId>,
    target_recovery: LeaderRecoveryState,
}

impl<'a> PartitionChangeBuilder<'a> {
    pub(crate) fn new(
        part: &'a PartitionRegistration,
        topic_id: Uuid,
        partition: i32,
        is_active: &'a dyn Fn(BrokerId) -> bool,
    ) -> Self {
        PartitionChangeBuilder {
            part,
            topic_id,
            partition,
            is_active,
            election: Election::Online,
            target_isr: part.isr.clone(),
            target_replicas: part.replicas.clone(),
            target_adding: part.adding_replicas.clone(),
            target_removing: part.removing_replicas.clone(),
            target_recovery: part.leader_recovery_state,
        }
    }

    pub(crate) fn election(mut self, e: Election) -> Self {
        self.election = e;
        self
    }

    pub(crate) fn target_isr(mut self, isr: Vec<BrokerId>) -> Self {
        self.target_isr = isr;
        self
    }

    pub(crate) fn target_assignment(
        mut self,
        replicas: Vec<BrokerId>,
        adding: Vec<BrokerId>,
        removing: Vec<BrokerId>,
    ) -> Self {
        self.target_replicas = replicas;
        self.target_adding = adding;
        self.target_removing = removing;
        self
    }

    pub(crate) fn target_recovery(mut self, s: LeaderRecoveryState) -> Self {
        self.target_recovery = s;
        self
    }

    fn is_valid_leader(&self, b: BrokerId) -> bool {
        b != NO_LEADER && self.target_isr.contains(&b) && (self.is_active)(b)
    }

    /// The chosen leader and whether the choice was unclean.
    fn elect(&self) -> (BrokerId, bool) {
        if self.election == Election::Preferred {
            let preferred = self.target_replicas.first().copied().unwrap_or(NO_LEADER);
            if self.is_valid_leader(preferred) {
                return (preferred, false);
            }
        }
        if self.is_valid_leader(self.part.leader) {
            return (self.part.leader, false);
        }
        if let Some(&b) = self
            .target_replicas
            .iter()
            .find(|&&b| self.is_valid_leader(b))
        {
            return (b, false);
        }
        if self.election == Election::Unclean {
            if let Some(&b) = self.target_replicas.iter().find(|&&b| (self.is_active)(b)) {
                return (b, true);
            }
        }
        (NO_LEADER, false)
    }

    /// A reassignment completes once every adding replica is in the ISR and some target
    /// replica stays in sync.
    fn complete_reassignment_if_possible(&mut self) {
        if self.target_adding.is_empty() && self.target_removing.is_empty() {
            return;
        }
        if !self
            .target_adding
            .iter()
            .all(|b| self.target_isr.contains(b))
        {
            return;
        }
        let isr: Vec<BrokerId> = self
            .target_isr
            .iter()
            .copied()
            .filter(|b| !self.target_removing.contains(b))
            .collect();
        if isr.is_empty() {
            return;
        }
        let removing = std::mem::take(&mut self.target_removing);
        self.target_replicas.retain(|b| !removing.contains(b));
        self.target_isr = isr;
        self.target_adding.clear();
    }

    pub(crate) fn build(mut self) -> Option<PartitionChangeRecord> {
        self.complete_reassignment_if_possible();
        let mut record = PartitionChangeRecord::new(self.topic_id, self.partition);
        let (leader, unclean) = self.elect();
        if leader != self.part.leader {
            record.leader = LeaderChange::To(leader);
            if unclean {
                // The new leader is the only replica known to have what it has.
                record.isr = Some(vec![leader]);
                record.leader_recovery_state = Some(LeaderRecoveryState::Recovering);
            }
        } else if self.target_replicas != self.part.replicas
            && self
                .part
                .replicas
                .iter()
                .any(|r| !self.target_replicas.contains(r))
        {
            // Replicas were removed: bump the leader epoch so the removed ones are fenced.
            record.leader = LeaderChange::To(leader);
        }
        // An empty ISR is never written: the last member stays so that it can lead again.
        if record.isr.is_none() && !self.target_isr.is_empty() && self.target_isr != self.part.isr {
            record.isr = Some(self.target_isr.clone());
        }
        if record.leader_recovery_state.is_none()
            && self.target_recovery != self.part.leader_recovery_state
        {
            record.leader_recovery_state = Some(self.target_recovery);
        }
        if self.target_replicas != self.part.replicas {
            record.replicas = Some(self.target_replicas.clone());
        }
        if self.target_adding != self.part.adding_replicas {
            record.adding_replicas = Some(self.target_adding.clone());
        }
        if self.target_removing != self.part.removing_replicas {
            record.removing_replicas = Some(self.target_removing.clone());
        }
        let no_op = record.leader == LeaderChange::Unchanged
            && record.isr.is_none()
            && record.replicas.is_none()
            && record.adding_replicas.is_none()
            && record.removing_replicas.is_none()
            && record.leader_recovery_state.is_none();
        (!no_op).then_some(record)
    }
}
