//! The `load` assignor's periodic review of a settled group: membership changes are not the only
//! reason to move partitions when the assignor balances measured load, so the coordinator asks it
//! again every `group.consumer.load.review.interval.ms`. The assignor is sticky and moves only
//! when that cuts the most loaded member's load by more than its threshold; a review that moves
//! starts a new group epoch, its cause `load shifted`, its moves explained in the epoch history.
//! Pure: the topics and load figures come in through [`TopicsView`], the time as `now_ms`.

use super::epochs::{CauseKind, EpochCause};
use super::heartbeat::{new_target, pick_assignor, set_target, ConsumerGroupConfig, TopicsView};
use super::model::{Assignment, ConsumerGroup, ConsumerGroupState};
use super::target::ServerAssignor;

/// Why a review left a group as it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skipped {
    /// Its assignor is not `load`.
    OtherAssignor,
    /// It is not stable: a target is being computed or members are still reconciling toward it.
    NotStable,
    /// Classic members in it rebalance with the classic protocol; their load is left alone.
    ClassicMembers,
    /// The assignor kept every partition where it was.
    Balanced,
}

/// Reviews `group` at `now_ms`: a new group epoch and target when the `load` assignor moves
/// partitions, else why not.
pub fn review_load(
    group: &mut ConsumerGroup,
    cfg: &ConsumerGroupConfig,
    topics: &dyn TopicsView,
    now_ms: i64,
) -> Result<(), Skipped> {
    let assignor = pick_assignor(group, cfg);
    if assignor != ServerAssignor::Load {
        return Err(Skipped::OtherAssignor);
    }
    if group.state() != ConsumerGroupState::Stable {
        return Err(Skipped::NotStable);
    }
    if group.members.values().any(|m| m.classic.is_some()) {
        return Err(Skipped::ClassicMembers);
    }
    // An assignor error (only bad input can make one) changes nothing.
    let target = new_target(group, assignor, topics).map_err(|_| Skipped::Balanced)?;
    let moved = group.members.keys().any(|id| {
        let old = group.target.get(id).map(non_empty).unwrap_or_default();
        let new = target.assignment.get(id).map(non_empty).unwrap_or_default();
        old != new
    });
    if !moved {
        return Err(Skipped::Balanced);
    }
    group.bump_epoch(EpochCause::of_group(CauseKind::LoadShifted), now_ms);
    set_target(group, assignor, target, now_ms);
    Ok(())
}

/// An assignment without topics that have no partitions in it.
fn non_empty(a: &Assignment) -> Assignment {
    a.iter()
        .filter(|(_, ps)| !ps.is_empty())
        .map(|(t, ps)| (*t, ps.clone()))
        .collect()
}

#[cfg(test)]
#[path = "load_review_tests.rs"]
mod tests;
