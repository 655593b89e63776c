//! Large groups with mixed subscriptions (hundreds of thousands of member-topic pairs): the
//! result is valid, most balanced in Kafka's sense, no previously owned partition that moved
//! could be handed back to its owner without making the loads less balanced, and it keeps
//! exactly as many previously owned partitions as an upper bound computed here from the loads
//! alone allows, which proves it keeps the most.

use gregor_assign::synthetic::{Subscriptions, Synthetic};
use gregor_assign::{builtin, GroupSpec, TopicId};

/// 700 topics x 3 partitions, 400 members, each subscribing to about two thirds of the topics:
/// about 187,000 member-topic pairs; loads 5 and 6.
fn group(racks: u32) -> GroupSpec {
    synthetic(700, 3, 400, racks)
}

fn synthetic(topics: u32, partitions: u32, members: u32, racks: u32) -> GroupSpec {
    Synthetic {
        topics,
        partitions,
        members,
        subscriptions: Subscriptions::Nonuniform,
        owned_prev: true,
        racks,
    }
    .build()
    .expect("valid synthetic group")
}

/// Checks validity and balance; returns the partitions kept by their previous owner and an
/// upper bound on that number over every assignment with the same sorted loads: with loads `q`
/// and `q + 1` (`n1` members at `q + 1`), a member keeps at most `min(owned, load)`, so at most
/// `sum min(owned, q)` plus one for each of at most `n1` members owning more than `q`.
fn check(strategy: &str, spec: &GroupSpec) -> (usize, usize) {
    let a = builtin(strategy)
        .expect("builtin")
        .assign(spec)
        .expect("assigns");
    let members = spec.members();
    let mut holder = vec![usize::MAX; spec.total_partitions() as usize];
    let mut load = vec![0usize; members.len()];
    for (m, ma) in a.members.iter().enumerate() {
        for p in ma.partitions.iter().chain(&ma.pending) {
            assert_eq!(holder[p.0 as usize], usize::MAX, "{strategy}: {p:?} twice");
            holder[p.0 as usize] = m;
            load[m] += 1;
            let (t, _) = spec.partition(*p);
            assert!(
                members[m].subscribes(t),
                "{strategy}: {p:?} to a non-subscriber"
            );
        }
    }
    assert!(
        holder.iter().all(|h| *h != usize::MAX),
        "{strategy}: unassigned"
    );
    // Kafka's balance criterion: no partition could move to a subscriber of its topic with two
    // or more fewer partitions.
    for t in 0..spec.topics().len() as u32 {
        let t = TopicId(t);
        let least = (0..members.len())
            .filter(|m| members[*m].subscribes(t))
            .map(|m| load[m])
            .min()
            .expect("every topic has subscribers");
        for p in spec.partitions_of(t) {
            assert!(
                load[holder[p as usize]] < least + 2,
                "{strategy}: partition {p} on a member with {} while a subscriber has {least}",
                load[holder[p as usize]]
            );
        }
    }
    // A previous owner (one per partition, generation 1) that lost its partition is not below
    // the holder's level: handing it back would not keep the sorted loads.
    let mut kept = 0;
    for (o, m) in members.iter().enumerate() {
        for p in &m.owned {
            let h = holder[p.0 as usize];
            if h == o {
                kept += 1;
            } else {
                assert!(
                    load[o] >= load[h],
                    "{strategy}: {p:?} of member {o} ({}) held by {h} ({})",
                    load[o],
                    load[h]
                );
            }
        }
    }
    assert!(kept > 0, "{strategy}: kept nothing");
    let q = *load.iter().min().expect("members");
    let high = load.iter().filter(|l| **l > q).count();
    assert!(load.iter().all(|l| *l <= q + 1), "{strategy}: two levels");
    let owned: Vec<usize> = members.iter().map(|m| m.owned.len()).collect();
    let bound = owned.iter().map(|o| (*o).min(q)).sum::<usize>()
        + high.min(owned.iter().filter(|o| **o > q).count());
    (kept, bound)
}

/// Every partition keeps its owner except what the balance forces to move.
fn keeps_the_most(strategy: &str, spec: &GroupSpec) {
    let (kept, bound) = check(strategy, spec);
    assert_eq!(kept, bound, "{strategy}: kept {kept}, bound {bound}");
}

#[test]
fn keeps_the_most_with_two_load_levels_without_racks() {
    let spec = group(0);
    for s in ["sticky", "cooperative-sticky"] {
        keeps_the_most(s, &spec);
    }
}

#[test]
fn keeps_the_most_with_two_load_levels_with_racks() {
    let spec = group(3);
    for s in ["sticky", "cooperative-sticky"] {
        keeps_the_most(s, &spec);
    }
}

/// One load level (2,800 partitions, 400 members): 187,000 member-topic pairs.
#[test]
fn keeps_the_most_with_one_load_level() {
    for racks in [0, 3] {
        let spec = synthetic(700, 4, 400, racks);
        for s in ["sticky", "cooperative-sticky"] {
            keeps_the_most(s, &spec);
        }
    }
}

/// 100,000 partitions, 1,000 members on 1,000 topics: 667,000 member-topic pairs.
#[test]
fn keeps_the_most_with_a_thousand_members() {
    let spec = synthetic(1000, 100, 1000, 0);
    keeps_the_most("sticky", &spec);
}
