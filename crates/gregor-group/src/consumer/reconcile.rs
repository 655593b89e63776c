//! How one member moves toward its target assignment (KIP-848's reconciliation): it first gives
//! up what it must revoke, keeping its epoch; then it takes the target epoch with the partitions
//! of its target that nobody else holds, and picks up the rest as their holders release them.
//! A partition therefore never has two holders: the invariant the group's `holders` index
//! asserts.

use super::model::{Assignment, ConsumerMember, MemberState, TopicUuid};

/// The member after one reconciliation step toward `target` at `target_epoch`. `owned` is what
/// the member's heartbeat said it owns (`None` when the heartbeat did not say); `held_by_other`
/// tells whether another member still holds a partition.
pub fn reconcile(
    member: &ConsumerMember,
    target: &Assignment,
    target_epoch: i32,
    owned: Option<&Assignment>,
    held_by_other: impl Fn(TopicUuid, i32) -> bool,
) -> ConsumerMember {
    match member.state {
        MemberState::Stable if member.member_epoch == target_epoch => member.clone(),
        MemberState::UnrevokedPartitions if still_owns(owned, &member.pending_revocation) => {
            member.clone()
        }
        _ => next_assignment(member, target, target_epoch, owned, held_by_other),
    }
}

/// Whether the member may still hold any of `revoking`: it did not report what it owns, or
/// what it reported includes one of them.
fn still_owns(owned: Option<&Assignment>, revoking: &Assignment) -> bool {
    let Some(owned) = owned else {
        return true;
    };
    revoking.iter().any(|(topic, ps)| {
        owned
            .get(topic)
            .is_some_and(|o| ps.iter().any(|p| o.contains(p)))
    })
}

fn next_assignment(
    member: &ConsumerMember,
    target: &Assignment,
    target_epoch: i32,
    owned: Option<&Assignment>,
    held_by_other: impl Fn(TopicUuid, i32) -> bool,
) -> ConsumerMember {
    let (mut kept, mut revoke, mut wanted) =
        (Assignment::new(), Assignment::new(), Assignment::new());
    let mut unreleased = false;
    let topics = target.keys().chain(member.assigned.keys());
    for topic in topics.collect::<std::collections::BTreeSet<_>>() {
        let current = member.assigned.get(topic).cloned().unwrap_or_default();
        let goal = target.get(topic).cloned().unwrap_or_default();
        insert(&mut kept, *topic, current.intersection(&goal).copied());
        insert(&mut revoke, *topic, current.difference(&goal).copied());
        let (free, held): (Vec<i32>, Vec<i32>) = goal
            .difference(&current)
            .partition(|p| !held_by_other(*topic, **p));
        unreleased |= !held.is_empty();
        insert(&mut wanted, *topic, free);
    }
    let mut next = member.clone();
    if !revoke.is_empty() && still_owns(owned, &revoke) {
        // Revoke first, at the current epoch; nothing new until the member has let go.
        next.state = MemberState::UnrevokedPartitions;
        next.assigned = kept;
        next.pending_revocation = revoke;
        return next;
    }
    for (topic, ps) in wanted {
        kept.entry(topic).or_default().extend(ps);
    }
    if next.member_epoch != target_epoch {
        next.previous_member_epoch = next.member_epoch;
        next.member_epoch = target_epoch;
    }
    next.assigned = kept;
    next.pending_revocation = Assignment::new();
    next.state = match unreleased {
        true => MemberState::UnreleasedPartitions,
        false => MemberState::Stable,
    };
    next
}

fn insert(a: &mut Assignment, topic: TopicUuid, ps: impl IntoIterator<Item = i32>) {
    let set: std::collections::BTreeSet<i32> = ps.into_iter().collect();
    if !set.is_empty() {
        a.insert(topic, set);
    }
}
