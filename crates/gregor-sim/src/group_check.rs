//! The checker of a run's consumer group (`--groups`): what its members owned, read and
//! committed.

use std::collections::{BTreeMap, BTreeSet};

use crate::history::GroupHistory;
use crate::property::{Property, Violation};

pub fn check(g: &GroupHistory, out: &mut Vec<Violation>) {
    two_owners(g, out);
    // In a mixed group a classic member's generation is its member epoch too.
    if g.consumer_protocol || g.mixed_protocols {
        epochs_forward(g, out);
    }
    commits_forward(g, out);
    nothing_skipped(g, out);
    if let Some(detail) = &g.stuck {
        out.push(Violation::new(Property::Liveness, detail.clone()));
    }
}

/// Owner -> (incarnation, member id, when first seen owning).
type Owners<'a> = BTreeMap<&'a str, (&'a str, &'a str, u64)>;

/// No two members own a partition in one generation: a member owns what its consumer reports
/// as assigned after a `poll` in that generation, and every partition a `poll` in that
/// generation returned records of.
///
/// A static member's new incarnation replaces its predecessor's member id at the coordinator
/// and keeps its assignment in the same generation (its predecessor stopped first: the
/// incarnations of one member never overlap), so with static members the owner is the member
/// (its `group.instance.id`), not the member id. Two members, or two member ids of one dynamic
/// member, owning a partition in one generation is the violation.
fn two_owners(g: &GroupHistory, out: &mut Vec<Violation>) {
    let owner_of = |member_id, consumer| owner(g.static_members, member_id, consumer);
    let mut owners: BTreeMap<(i32, i32), Owners> = BTreeMap::new();
    let owned = g.owned.iter().filter(|o| o.generation >= 0).flat_map(|o| {
        o.partitions.iter().map(move |&p| {
            (
                o.generation,
                p,
                o.member_id.as_str(),
                o.consumer.as_str(),
                o.at_ms,
            )
        })
    });
    let read = g.reads.iter().filter(|r| r.generation >= 0).map(|r| {
        (
            r.generation,
            r.partition,
            r.member_id.as_str(),
            r.consumer.as_str(),
            r.at_ms,
        )
    });
    for (generation, partition, member, consumer, at) in owned.chain(read) {
        owners
            .entry((generation, partition))
            .or_default()
            .entry(owner_of(member, consumer))
            .or_insert((consumer, member, at));
    }
    for ((generation, partition), members) in owners {
        if members.len() > 1 {
            let who: Vec<String> = members
                .values()
                .map(|(c, m, at)| format!("{c} ({m}) at {at} ms"))
                .collect();
            out.push(Violation::new(
                Property::TwoOwnersInGeneration,
                format!(
                    "p{partition} in generation {generation}: owned by {}",
                    who.join(" and ")
                ),
            ));
        }
    }
}

/// `group.protocol=consumer`: an incarnation's member epoch never goes back while it is in
/// the group (-1, outside it, is skipped: a member fenced or past its poll interval joins
/// again at the group's current epoch, never below what it had). With [`two_owners`], which
/// then keys ownership by member epoch, a partition has one owner per epoch.
fn epochs_forward(g: &GroupHistory, out: &mut Vec<Violation>) {
    let mut last: BTreeMap<&str, (i32, u64)> = BTreeMap::new();
    for o in g.owned.iter().filter(|o| o.generation > 0) {
        if let Some(&(epoch, at)) = last.get(o.consumer.as_str()) {
            if o.generation < epoch {
                out.push(Violation::new(
                    Property::MemberEpochWentBack,
                    format!(
                        "{}: member epoch {epoch} at {at} ms, then {} at {} ms",
                        o.consumer, o.generation, o.at_ms
                    ),
                ));
            }
        }
        last.insert(&o.consumer, (o.generation, o.at_ms));
    }
}

/// Who owns what a member id (of the incarnation `consumer`) owns: see [`two_owners`].
fn owner<'a>(static_members: bool, member_id: &'a str, consumer: &'a str) -> &'a str {
    if static_members {
        // "m1.2": member 1, second incarnation.
        consumer.split('.').next().unwrap_or(consumer)
    } else {
        member_id
    }
}

/// Acknowledged commits of a partition never move its committed offset back (no member here
/// resets or seeks).
fn commits_forward(g: &GroupHistory, out: &mut Vec<Violation>) {
    let mut last: BTreeMap<i32, (i64, &str, i32, u64)> = BTreeMap::new();
    for c in &g.commits {
        if let Some(&(offset, consumer, generation, at)) = last.get(&c.partition) {
            if c.offset < offset {
                out.push(Violation::new(
                    Property::CommittedOffsetWentBack,
                    format!(
                        "p{}: {consumer} committed {offset} in generation {generation} at {at} ms, then {} committed {} in generation {} at {} ms",
                        c.partition, c.consumer, c.offset, c.generation, c.at_ms
                    ),
                ));
            }
        }
        let e = last
            .entry(c.partition)
            .or_insert((c.offset, &c.consumer, c.generation, c.at_ms));
        if c.offset >= e.0 {
            *e = (c.offset, &c.consumer, c.generation, c.at_ms);
        }
    }
}

/// At least once: every offset below the highest committed one was returned to some member
/// (the log has no gaps here: no compaction, no transactions).
fn nothing_skipped(g: &GroupHistory, out: &mut Vec<Violation>) {
    let mut committed: BTreeMap<i32, i64> = BTreeMap::new();
    for c in &g.commits {
        let e = committed.entry(c.partition).or_insert(c.offset);
        *e = (*e).max(c.offset);
    }
    let mut read: BTreeMap<i32, BTreeSet<i64>> = BTreeMap::new();
    for r in &g.reads {
        read.entry(r.partition).or_default().insert(r.offset);
    }
    for (p, c) in committed {
        let seen = read.remove(&p).unwrap_or_default();
        if let Some(missing) = (0..c).find(|o| !seen.contains(o)) {
            out.push(Violation::new(
                Property::GroupSkippedRecords,
                format!(
                    "p{p}: offset {c} was committed, but no member was ever given offset {missing}"
                ),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Owned;

    fn owned(consumer: &str, member_id: &str, generation: i32, p: i32, at_ms: u64) -> Owned {
        Owned {
            consumer: consumer.into(),
            member_id: member_id.into(),
            generation,
            partitions: BTreeSet::from([p]),
            at_ms,
        }
    }

    fn two_owner_violations(static_members: bool, owned: Vec<Owned>) -> Vec<String> {
        let g = GroupHistory {
            static_members,
            owned,
            ..GroupHistory::default()
        };
        let mut out = Vec::new();
        two_owners(&g, &mut out);
        out.into_iter().map(|v| v.detail).collect()
    }

    #[test]
    fn a_member_epoch_going_back_within_an_incarnation_is_a_violation() {
        let g = GroupHistory {
            consumer_protocol: true,
            owned: vec![
                owned("m0.1", "a", 4, 0, 100),
                owned("m0.1", "a", -1, 0, 200),
                owned("m0.1", "a", 6, 0, 300),
                owned("m1.1", "b", 2, 1, 350),
                owned("m0.1", "a", 5, 0, 400),
            ],
            ..GroupHistory::default()
        };
        let mut out = Vec::new();
        epochs_forward(&g, &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(
            out[0].detail.contains("epoch 6 at 300 ms, then 5"),
            "{out:?}"
        );
    }

    #[test]
    fn a_static_members_restart_may_keep_its_assignment_in_the_generation() {
        let takeover = vec![owned("m0.1", "a", 3, 0, 100), owned("m0.2", "b", 3, 0, 900)];
        assert!(two_owner_violations(true, takeover.clone()).is_empty());
        // A dynamic member's new incarnation is a new member: it cannot own anything in the
        // generation its predecessor owned it in.
        assert_eq!(two_owner_violations(false, takeover).len(), 1);
    }

    #[test]
    fn two_static_members_owning_a_partition_in_one_generation_is_a_violation() {
        let v = two_owner_violations(
            true,
            vec![owned("m0.1", "a", 3, 0, 100), owned("m1.1", "c", 3, 0, 200)],
        );
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].contains("m0.1 (a)") && v[0].contains("m1.1 (c)"),
            "{v:?}"
        );
    }
}
