//! The `sticky` and `cooperative-sticky` strategies: one algorithm, two protocols.
//!
//! Goals, in priority order:
//! 1. every partition of a subscribed topic goes to exactly one of its subscribers;
//! 2. balance: with identical subscriptions, sizes differ by at most one; otherwise no partition
//!    could move to a subscriber of its topic that has two or more fewer partitions;
//! 3. stickiness: among balanced results, keep as many previously owned partitions as possible;
//! 4. rack locality, when members and replicas have racks.
//!
//! Previous ownership comes from the members' subscriptions (`sticky`: its user data;
//! `cooperative-sticky`: owned partitions and generation). A partition claimed by several members
//! belongs to the highest generation; a tie at the highest generation leaves it unowned.
//!
//! `cooperative-sticky` then withholds every partition that changes owner: a partition assigned
//! to a member that does not claim it, while another member does, is left out of this round and
//! reported as `pending`, to be dealt again in the follow-up rebalance once its claimants have
//! revoked it. A member is given a partition now only if nobody claims it or it claims it
//! itself (then it may already consume it, and the assignment adds no owner to it), so the
//! assignment never makes two members own one partition. Before that, `claims` hands claimed
//! partitions to a claimant where that costs nothing, so that only what must change owner is
//! withheld.

mod claims;
mod constrained;
mod exact;
mod general;
mod prepare;
mod spread;
mod transfer;

use bytes::Bytes;

use crate::model::{GroupAssignment, GroupSpec, MemberAssignment, PartitionId};
use crate::protocol::{
    encode_cooperative_user_data, encode_sticky_user_data, group_by_topic, StickyUserData,
};
use crate::{AssignError, AssignmentInfo, Assignor, RebalanceProtocol};

use prepare::{OwnershipSource, Prepared, NONE};

pub const STICKY_NAME: &str = "sticky";
pub const COOPERATIVE_NAME: &str = "cooperative-sticky";

/// Kafka's `StickyAssignor` (eager protocol).
#[derive(Debug, Clone, Default)]
pub struct StickyAssignor {
    /// This member's last assignment and generation, sent back as subscription user data.
    last: Option<(Vec<(String, i32)>, i32)>,
}

impl Assignor for StickyAssignor {
    fn name(&self) -> &str {
        STICKY_NAME
    }

    fn subscription_user_data(&self, _topics: &[String]) -> Option<Bytes> {
        let (partitions, generation) = self.last.as_ref()?;
        Some(encode_sticky_user_data(&StickyUserData {
            partitions: group_by_topic(partitions.iter().map(|(t, p)| (t.as_str(), *p))),
            generation: Some(*generation),
        }))
    }

    fn assign(&self, group: &GroupSpec) -> Result<GroupAssignment, AssignError> {
        Ok(assign(group, Flavor::Sticky))
    }

    fn on_assignment(&mut self, assignment: &AssignmentInfo) {
        self.last = Some((assignment.partitions.clone(), assignment.generation));
    }
}

/// Kafka's `CooperativeStickyAssignor`: cooperative protocol, eager as a fallback.
#[derive(Debug, Clone)]
pub struct CooperativeStickyAssignor {
    generation: i32,
}

impl Default for CooperativeStickyAssignor {
    fn default() -> Self {
        CooperativeStickyAssignor {
            generation: prepare::DEFAULT_GENERATION,
        }
    }
}

impl Assignor for CooperativeStickyAssignor {
    fn name(&self) -> &str {
        COOPERATIVE_NAME
    }

    fn supported_protocols(&self) -> &[RebalanceProtocol] {
        &[RebalanceProtocol::Cooperative, RebalanceProtocol::Eager]
    }

    fn subscription_user_data(&self, _topics: &[String]) -> Option<Bytes> {
        Some(encode_cooperative_user_data(self.generation))
    }

    fn assign(&self, group: &GroupSpec) -> Result<GroupAssignment, AssignError> {
        Ok(assign(group, Flavor::Cooperative))
    }

    fn on_assignment(&mut self, assignment: &AssignmentInfo) {
        self.generation = assignment.generation;
    }
}

/// Which member of the family runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Sticky,
    Cooperative,
}

/// Runs the sticky algorithm; for [`Flavor::Cooperative`], partitions changing owner are withheld
/// into `pending`.
pub fn assign(group: &GroupSpec, flavor: Flavor) -> GroupAssignment {
    let members = group.members();
    if members.is_empty() {
        return GroupAssignment::default();
    }
    let source = match flavor {
        Flavor::Sticky => OwnershipSource::StickyUserData,
        Flavor::Cooperative => OwnershipSource::OwnedPartitions,
    };
    let prep = Prepared::new(group, source);
    let all_equal = members.windows(2).all(|w| w[0].topics == w[1].topics);
    let mut lists = if all_equal {
        constrained::assign(group, &prep)
    } else {
        general::assign(group, &prep)
    };
    for l in &mut lists {
        l.sort_unstable();
    }
    // The same target for both flavors: claimed partitions go to a claimant where that is free.
    claims::favour_claimants(group, &prep, &mut lists);
    let pending = match flavor {
        Flavor::Sticky => vec![Vec::new(); members.len()],
        Flavor::Cooperative => withhold_transfers(group, &prep, &mut lists),
    };
    GroupAssignment {
        members: lists
            .into_iter()
            .zip(pending)
            .map(|(partitions, pending)| MemberAssignment {
                partitions,
                pending,
                user_data: None,
            })
            .collect(),
    }
}

/// Removes from each member the partitions it did not claim but another member did; returns
/// them per member.
fn withhold_transfers(
    group: &GroupSpec,
    prep: &Prepared,
    lists: &mut [Vec<PartitionId>],
) -> Vec<Vec<PartitionId>> {
    if prep.claims.iter().all(Vec::is_empty) {
        // Nobody owned anything: nothing changes owner.
        return vec![Vec::new(); lists.len()];
    }
    let total = group.total_partitions() as usize;
    let mut new_owner = vec![NONE; total];
    for (m, l) in lists.iter().enumerate() {
        for p in l {
            new_owner[p.0 as usize] = m as u32;
        }
    }
    // claimed: someone claims it; kept: the new owner is among the claimants.
    let mut claimed = vec![false; total];
    let mut kept = vec![false; total];
    for (m, claims) in prep.claims.iter().enumerate() {
        for p in claims {
            claimed[p.0 as usize] = true;
            if new_owner[p.0 as usize] == m as u32 {
                kept[p.0 as usize] = true;
            }
        }
    }
    lists
        .iter_mut()
        .map(|l| {
            let (now, later): (Vec<PartitionId>, Vec<PartitionId>) = l
                .iter()
                .partition(|p| !claimed[p.0 as usize] || kept[p.0 as usize]);
            *l = now;
            later
        })
        .collect()
}
