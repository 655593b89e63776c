//! The checker of a run's consumer group (`--groups`): what its members owned, read and
//! committed.

use std::collections::{BTreeMap, BTreeSet};

use crate::checker::{Property, Violation};
use crate::group::GroupHistory;

pub fn check(g: &GroupHistory, out: &mut Vec<Violation>) {
    two_owners(g, out);
    commits_forward(g, out);
    nothing_skipped(g, out);
    if let Some(detail) = &g.stuck {
        out.push(Violation::new(Property::Liveness, detail.clone()));
    }
}

/// Member id -> (incarnation, when first seen owning).
type Owners<'a> = BTreeMap<&'a str, (&'a str, u64)>;

/// No two members own a partition in one generation: a member owns what its consumer reports
/// as assigned after a `poll` in that generation, and every partition a `poll` in that
/// generation returned records of.
fn two_owners(g: &GroupHistory, out: &mut Vec<Violation>) {
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
            .entry(member)
            .or_insert((consumer, at));
    }
    for ((generation, partition), members) in owners {
        if members.len() > 1 {
            let who: Vec<String> = members
                .iter()
                .map(|(m, (c, at))| format!("{c} ({m}) at {at} ms"))
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
