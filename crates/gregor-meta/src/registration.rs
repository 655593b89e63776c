//! One partition's registration: its replicas, ISR, leader and epochs, and how a change record
//! moves it on. Below both the image (which holds registrations) and the delta (which records
//! them before and after), so neither has to import the other's file for this type.

use crate::record::{LeaderChange, LeaderRecoveryState, PartitionChangeRecord, PartitionRecord};
use crate::types::{BrokerId, NO_LEADER};
use uuid::Uuid;

#[cfg(feature = "simulation")]
thread_local! {
    /// A planted bug, for the deterministic simulator only (gregor-broker's
    /// `simulation::plant_on_this_thread` sets it, and only under a simulation): see
    /// [`plant_election_keeps_leader_epoch`].
    static ELECTION_KEEPS_LEADER_EPOCH: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Plants (or removes) a bug in the images this thread builds: a leader change that also sets
/// the ISR (an election that drops a fenced leader from it) keeps the leader epoch, so two
/// brokers lead one epoch. For the simulator only (the `simulation` feature).
#[cfg(feature = "simulation")]
#[doc(hidden)]
pub fn plant_election_keeps_leader_epoch(on: bool) {
    ELECTION_KEEPS_LEADER_EPOCH.with(|p| p.set(on));
}

/// Whether the planted bug above is on for this thread.
#[cfg(feature = "simulation")]
fn election_keeps_leader_epoch() -> bool {
    ELECTION_KEEPS_LEADER_EPOCH.with(|p| p.get())
}

/// Without the `simulation` feature no bug is planted (the branch compiles away).
#[cfg(not(feature = "simulation"))]
const fn election_keeps_leader_epoch() -> bool {
    false
}

/// The state of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRegistration {
    /// Replicas in preferred order; during a reassignment, target replicas first, then the ones
    /// being removed.
    pub replicas: Vec<BrokerId>,
    /// In-sync replicas.
    pub isr: Vec<BrokerId>,
    /// Replicas being removed by a reassignment.
    pub removing_replicas: Vec<BrokerId>,
    /// Replicas being added by a reassignment.
    pub adding_replicas: Vec<BrokerId>,
    /// Leader or [`NO_LEADER`].
    pub leader: BrokerId,
    /// Whether the leader came from an unclean election and is still recovering.
    pub leader_recovery_state: LeaderRecoveryState,
    /// Leader epoch.
    pub leader_epoch: i32,
    /// Partition epoch.
    pub partition_epoch: i32,
}

impl PartitionRegistration {
    /// From a full partition record.
    pub fn from_record(r: &PartitionRecord) -> Self {
        PartitionRegistration {
            replicas: r.replicas.clone(),
            isr: r.isr.clone(),
            removing_replicas: r.removing_replicas.clone(),
            adding_replicas: r.adding_replicas.clone(),
            leader: r.leader,
            leader_recovery_state: r.leader_recovery_state,
            leader_epoch: r.leader_epoch,
            partition_epoch: r.partition_epoch,
        }
    }

    /// As a full partition record (for snapshots).
    pub fn to_record(&self, topic_id: Uuid, partition: i32) -> PartitionRecord {
        PartitionRecord {
            topic_id,
            partition,
            replicas: self.replicas.clone(),
            isr: self.isr.clone(),
            removing_replicas: self.removing_replicas.clone(),
            adding_replicas: self.adding_replicas.clone(),
            leader: self.leader,
            leader_recovery_state: self.leader_recovery_state,
            leader_epoch: self.leader_epoch,
            partition_epoch: self.partition_epoch,
        }
    }

    /// The state after a change record: unset fields stay, the partition epoch always grows,
    /// the leader epoch grows when the leader field is set (even to the same broker, which is how
    /// followers of removed replicas are fenced).
    pub fn merge(&self, c: &PartitionChangeRecord) -> Self {
        let (leader, leader_epoch) = match c.leader {
            LeaderChange::Unchanged => (self.leader, self.leader_epoch),
            // Planted (simulation only): an election that also sets the ISR keeps the epoch.
            LeaderChange::To(l) if c.isr.is_some() && election_keeps_leader_epoch() => {
                (l, self.leader_epoch)
            }
            LeaderChange::To(l) => (l, self.leader_epoch + 1),
        };
        PartitionRegistration {
            replicas: c.replicas.clone().unwrap_or_else(|| self.replicas.clone()),
            isr: c.isr.clone().unwrap_or_else(|| self.isr.clone()),
            removing_replicas: c
                .removing_replicas
                .clone()
                .unwrap_or_else(|| self.removing_replicas.clone()),
            adding_replicas: c
                .adding_replicas
                .clone()
                .unwrap_or_else(|| self.adding_replicas.clone()),
            leader,
            leader_recovery_state: c
                .leader_recovery_state
                .unwrap_or(self.leader_recovery_state),
            leader_epoch,
            partition_epoch: self.partition_epoch + 1,
        }
    }

    /// Check the invariants every committed state keeps: replicas distinct and non-empty, ISR
    /// and adding/removing replicas within replicas, leader a replica (or none).
    pub fn validate(&self) -> Result<(), String> {
        if self.replicas.is_empty() {
            return Err("empty replica list".into());
        }
        if has_duplicates(&self.replicas) {
            return Err(format!("duplicate replicas {:?}", self.replicas));
        }
        if has_duplicates(&self.isr) {
            return Err(format!("duplicate ISR members {:?}", self.isr));
        }
        for (what, list) in [
            ("ISR", &self.isr),
            ("adding replicas", &self.adding_replicas),
            ("removing replicas", &self.removing_replicas),
        ] {
            if let Some(b) = list.iter().find(|b| !self.replicas.contains(b)) {
                return Err(format!(
                    "{what} {list:?} contains {b}, not a replica of {:?}",
                    self.replicas
                ));
            }
        }
        if self.leader != NO_LEADER && !self.replicas.contains(&self.leader) {
            return Err(format!(
                "leader {} is not a replica of {:?}",
                self.leader, self.replicas
            ));
        }
        Ok(())
    }

    /// The preferred leader: the first replica.
    pub fn preferred_leader(&self) -> BrokerId {
        self.replicas.first().copied().unwrap_or(NO_LEADER)
    }

    /// Whether a reassignment is in progress.
    pub fn is_reassigning(&self) -> bool {
        !self.adding_replicas.is_empty() || !self.removing_replicas.is_empty()
    }

    /// The replica set the partition will have once its reassignment completes.
    pub fn target_replicas(&self) -> Vec<BrokerId> {
        self.replicas
            .iter()
            .copied()
            .filter(|r| !self.removing_replicas.contains(r))
            .collect()
    }

    /// The replica set before the reassignment started (what a cancellation restores).
    pub fn original_replicas(&self) -> Vec<BrokerId> {
        self.replicas
            .iter()
            .copied()
            .filter(|r| !self.adding_replicas.contains(r))
            .collect()
    }
}

pub(crate) fn has_duplicates(ids: &[BrokerId]) -> bool {
    ids.iter()
        .enumerate()
        .any(|(i, a)| ids[..i].iter().any(|b| b == a))
}
