//! Property tests of the four assignment strategies.
//!
//! Cases are generated as plain descriptions ([`reference::Case`]): topics (some with 0
//! partitions, some with replica racks), members with mixed or identical subscriptions (some to
//! topics that do not exist), with or without `client.rack` and `group.instance.id`, and prior
//! ownership with conflicting claims at equal and different generations. The properties compare
//! the strategies against the independent models of `reference/mod.rs`.

mod common;
mod reference;

use std::collections::{BTreeMap, BTreeSet};

use gregor_assign::{builtin, AssignError, GroupAssignment, GroupSpec, Member};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use common::{member, owning, racks, with_rack};
use reference::{Case, Named, TopicDef, Tp};

const STRATEGIES: [&str; 4] = ["range", "roundrobin", "sticky", "cooperative-sticky"];
const STICKY: [&str; 2] = ["sticky", "cooperative-sticky"];

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        // Failures are turned into named regression tests below instead of a persistence file.
        failure_persistence: None,
        // A failing case is minimized by `check` instead (structure-aware, far smaller).
        max_shrink_iters: 0,
        ..ProptestConfig::default()
    }
}

// ------------------------------------------------------------------------------ generators

/// Shape of the generated cases.
#[derive(Debug, Clone, Copy)]
struct Params {
    topics: (usize, usize),
    partitions: (u32, u32),
    members: (usize, usize),
    /// Members subscribe to different topic sets; otherwise all to the same existing topics.
    mixed: bool,
    /// Member racks and replica racks.
    racks: bool,
    /// Prior ownership.
    owners: bool,
    /// Partitions claimed by two or three members.
    conflicts: bool,
    /// Subscriptions to topics that do not exist, duplicate subscriptions, claims of partitions
    /// that do not exist.
    ghosts: bool,
    /// group.instance.id on some members.
    instances: bool,
}

const SMALL: Params = Params {
    topics: (1, 4),
    partitions: (0, 7),
    members: (1, 6),
    mixed: true,
    racks: true,
    owners: true,
    conflicts: true,
    ghosts: true,
    instances: true,
};

const LARGE: Params = Params {
    topics: (8, 16),
    partitions: (100, 300),
    members: (50, 200),
    ..SMALL
};

fn topic_names(n: usize) -> Vec<String> {
    // Non-ASCII names exercise Java (UTF-16) string order.
    let exotic = [
        "t0",
        "t1",
        "T2",
        "a",
        "b.c",
        "\u{FF61}x",
        "\u{1F600}y",
        "\u{e9}",
        "t10",
        "t9",
        "Z",
        "_u",
    ];
    (0..n)
        .map(|i| match exotic.get(i) {
            Some(s) => s.to_string(),
            None => format!("topic-{i}"),
        })
        .collect()
}

fn member_ids(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| match i % 5 {
            0 => format!("m{i}"),
            1 => format!("\u{FF61}{i}"),
            2 => format!("\u{1F600}{i}"),
            3 => format!("M{i}"),
            _ => format!("consumer-{i}-uuid"),
        })
        .collect()
}

const RACKS: [&str; 4] = ["r0", "r1", "r2", "r3"];

#[derive(Debug, Clone)]
struct RawMember {
    mask: u32,
    flags: u8,
    instance: u8,
    rack: u8,
    generation: u8,
}

fn raw_member() -> impl Strategy<Value = RawMember> {
    (
        any::<u32>(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
    )
        .prop_map(|(mask, flags, instance, rack, generation)| RawMember {
            mask,
            flags,
            instance,
            rack,
            generation,
        })
}

type Shape = Vec<(String, u32, u8)>;

fn cases(p: Params) -> impl Strategy<Value = Case> {
    let shapes = prop::collection::vec(
        (p.partitions.0..=p.partitions.1, 0u8..4),
        p.topics.0..=p.topics.1,
    );
    (shapes, Just(topic_names(p.topics.1)).prop_shuffle())
        .prop_flat_map(move |(shapes, names)| {
            let topics: Shape = shapes
                .iter()
                .zip(names)
                .map(|((n, mode), name)| (name, *n, *mode))
                .collect();
            let total: usize = topics.iter().map(|t| t.1 as usize).sum();
            (
                Just(topics),
                prop::collection::vec(raw_member(), p.members.0..=p.members.1),
                Just(member_ids(p.members.1)).prop_shuffle(),
                Just((0..p.members.1).collect::<Vec<usize>>()).prop_shuffle(),
                prop::collection::vec(any::<u32>(), total),
                prop::collection::vec(any::<u32>(), total),
                any::<u32>(),
            )
        })
        .prop_map(
            move |(topics, raw, ids, instance_perm, owner_seeds, rack_seeds, common)| {
                materialize(
                    p,
                    Seeds {
                        topics,
                        raw,
                        ids,
                        instance_perm,
                        owner_seeds,
                        rack_seeds,
                        common,
                    },
                )
            },
        )
}

struct Seeds {
    topics: Shape,
    raw: Vec<RawMember>,
    ids: Vec<String>,
    instance_perm: Vec<usize>,
    owner_seeds: Vec<u32>,
    rack_seeds: Vec<u32>,
    common: u32,
}

fn materialize(p: Params, s: Seeds) -> Case {
    // Topics and their replica racks.
    let mut topics = Vec::new();
    let mut base = 0usize;
    for (name, n, mode) in &s.topics {
        let seeds = &s.rack_seeds[base..base + *n as usize];
        let replica_racks: Vec<Vec<String>> = if !p.racks || *mode == 0 {
            Vec::new()
        } else if *mode == 1 {
            // Every partition on the same racks: rack-awareness must stay off for this topic.
            let set = rack_subset(s.common);
            vec![set; *n as usize]
        } else {
            seeds.iter().map(|x| rack_subset(*x)).collect()
        };
        topics.push(TopicDef {
            name: name.clone(),
            partitions: *n as i64,
            replica_racks,
        });
        base += *n as usize;
    }

    // Members.
    let n = s.raw.len();
    let mut members: Vec<Member> = Vec::with_capacity(n);
    for (i, r) in s.raw.iter().enumerate() {
        let mask = if p.mixed { r.mask } else { s.common };
        let mut subs: Vec<String> = topics
            .iter()
            .enumerate()
            .filter(|(j, _)| mask & (1 << (j % 32)) != 0)
            .map(|(_, t)| t.name.clone())
            .collect();
        if p.ghosts && r.flags & 1 != 0 {
            subs.push("ghost".into());
        }
        if p.ghosts && r.flags & 2 != 0 {
            if let Some(first) = subs.first().cloned() {
                subs.push(first);
            }
        }
        if r.flags & 32 != 0 {
            subs.reverse();
        }
        let group_instance_id = (p.instances && r.instance % 3 == 0).then(|| {
            let k = s.instance_perm[i];
            if k.is_multiple_of(2) {
                format!("i{k}")
            } else {
                format!("\u{FF61}i{k}")
            }
        });
        let rack = if !p.racks {
            None
        } else {
            match r.rack % 6 {
                0 | 1 => None,
                // An empty client.rack counts as no rack.
                2 => Some(String::new()),
                _ => Some(RACKS[(r.rack as usize / 6) % 3].to_string()),
            }
        };
        let generation = if !p.owners {
            None
        } else {
            match r.generation % 8 {
                0 => None,
                1 => Some(-1),
                g => Some(((g as i32 + r.generation as i32 / 8) % 3) + 1),
            }
        };
        members.push(Member {
            member_id: s.ids[i].clone(),
            group_instance_id,
            rack,
            topics: subs,
            owned_partitions: Vec::new(),
            generation,
            user_data: None,
        });
    }

    // Prior ownership: per partition no claimant, one, or (with conflicts) two or three.
    if p.owners && n > 0 {
        let mut base = 0usize;
        for t in &topics {
            let subscribers: Vec<usize> = (0..n)
                .filter(|&m| members[m].topics.contains(&t.name))
                .collect();
            for part in 0..t.partitions as i32 {
                let seed = s.owner_seeds[base + part as usize];
                let claimants = match seed % 16 {
                    0..=4 => 0,
                    5..=12 => 1,
                    13 | 14 if p.conflicts => 2,
                    15 if p.conflicts => 3,
                    _ => 1,
                };
                let mut chosen: Vec<usize> = Vec::new();
                let mut x = seed >> 4;
                for _ in 0..claimants {
                    // Mostly a subscriber of the topic, sometimes any member.
                    let m = if !subscribers.is_empty() && !x.is_multiple_of(4) {
                        subscribers[(x as usize / 4) % subscribers.len()]
                    } else {
                        (x as usize / 4) % n
                    };
                    if !chosen.contains(&m) {
                        chosen.push(m);
                    }
                    x = x.rotate_right(7) ^ 0x9e37_79b9;
                }
                for m in chosen {
                    members[m].owned_partitions.push((t.name.clone(), part));
                }
            }
            base += t.partitions as usize;
        }
        for (m, r) in members.iter_mut().zip(&s.raw) {
            if p.ghosts && r.flags & 4 != 0 {
                let first = topics[0].name.clone();
                let count = topics[0].partitions as i32;
                m.owned_partitions.push(("ghost".into(), 0));
                m.owned_partitions.push((first.clone(), -1));
                m.owned_partitions.push((first, count));
            }
            if p.ghosts && r.flags & 8 != 0 {
                if let Some(first) = m.owned_partitions.first().cloned() {
                    m.owned_partitions.push(first);
                }
            }
            if r.flags & 16 != 0 {
                m.owned_partitions.reverse();
            }
        }
    }
    Case { topics, members }
}

/// 0 to 3 racks out of r0..r3 (r3 never has members), sometimes with a repeat.
fn rack_subset(x: u32) -> Vec<String> {
    let mut v: Vec<String> = (0..4)
        .filter(|i| x & (1 << i) != 0)
        .map(|i| RACKS[i].to_string())
        .collect();
    if x & 16 != 0 {
        if let Some(first) = v.first().cloned() {
            v.push(first);
        }
    }
    v
}

// --------------------------------------------------------------------------------- running

fn build(case: &Case) -> GroupSpec {
    let mut b = GroupSpec::builder();
    for t in &case.topics {
        b.add_topic(t.name.clone(), t.partitions, t.replica_racks.clone());
    }
    for m in &case.members {
        b.add_member(m.clone());
    }
    b.build().expect("generated cases are valid")
}

/// An assignment by member id: partitions of this round and (cooperative) pending ones.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    partitions: Named,
    pending: Named,
}

impl Outcome {
    /// The target assignment: partitions ∪ pending.
    fn target(&self) -> Named {
        let mut t = self.partitions.clone();
        for (m, ps) in &self.pending {
            t.entry(m.clone()).or_default().extend(ps.iter().cloned());
        }
        t
    }
}

fn tp(spec: &GroupSpec, id: gregor_assign::PartitionId) -> Tp {
    let (t, p) = spec.partition(id);
    (spec.topic(t).name.clone(), p)
}

fn run(strategy: &str, case: &Case) -> Result<Outcome, TestCaseError> {
    let spec = build(case);
    let a = builtin(strategy)
        .expect("builtin")
        .assign(&spec)
        .map_err(|e| TestCaseError::fail(format!("{strategy}: {e}")))?;
    outcome(strategy, &spec, &a)
}

/// Converts to names, checking the shape: one entry per member, sorted lists without repeats.
fn outcome(
    strategy: &str,
    spec: &GroupSpec,
    a: &GroupAssignment,
) -> Result<Outcome, TestCaseError> {
    prop_assert_eq!(
        a.members.len(),
        spec.members().len(),
        "{}: entry per member",
        strategy
    );
    let mut partitions = Named::new();
    let mut pending = Named::new();
    for (m, ma) in spec.members().iter().zip(&a.members) {
        prop_assert!(
            ma.partitions.windows(2).all(|w| w[0] < w[1]),
            "{}: {} partitions not sorted/unique: {:?}",
            strategy,
            m.member_id,
            ma.partitions
        );
        let mut pend = ma.pending.clone();
        pend.sort_unstable();
        prop_assert!(
            pend.windows(2).all(|w| w[0] < w[1]),
            "{}: {} pending repeats",
            strategy,
            m.member_id
        );
        if strategy != "cooperative-sticky" {
            prop_assert!(
                ma.pending.is_empty(),
                "{}: eager strategy with pending",
                strategy
            );
        }
        for p in ma.partitions.iter().chain(&ma.pending) {
            prop_assert!(
                p.0 < spec.total_partitions(),
                "{}: unknown partition id {}",
                strategy,
                p.0
            );
        }
        partitions.insert(
            m.member_id.clone(),
            ma.partitions.iter().map(|p| tp(spec, *p)).collect(),
        );
        pending.insert(
            m.member_id.clone(),
            ma.pending.iter().map(|p| tp(spec, *p)).collect(),
        );
    }
    Ok(Outcome {
        partitions,
        pending,
    })
}

// -------------------------------------------------------------------------------- checks

/// (a): every partition of a subscribed topic is assigned exactly once, to a subscriber of its
/// topic; nothing else is assigned. For cooperative-sticky on partitions ∪ pending, with
/// `partitions` and `pending` disjoint and `partitions` never holding a partition twice.
fn check_valid(strategy: &str, case: &Case, o: &Outcome) -> Result<(), TestCaseError> {
    let mut seen: BTreeMap<Tp, String> = BTreeMap::new();
    for (m, ps) in o.partitions.iter().chain(&o.pending) {
        for p in ps {
            if let Some(other) = seen.insert(p.clone(), m.clone()) {
                prop_assert!(
                    false,
                    "{}: {}-{} given to both {:?} and {:?}",
                    strategy,
                    p.0,
                    p.1,
                    other,
                    m
                );
            }
            let member = case
                .members
                .iter()
                .find(|x| x.member_id == *m)
                .expect("member");
            prop_assert!(
                member.topics.contains(&p.0),
                "{}: {}-{} given to {:?}, which does not subscribe to {}",
                strategy,
                p.0,
                p.1,
                m,
                p.0
            );
        }
    }
    let expected = case.subscribed_partitions();
    let got: BTreeSet<Tp> = seen.keys().cloned().collect();
    let missing: Vec<&Tp> = expected.difference(&got).collect();
    let extra: Vec<&Tp> = got.difference(&expected).collect();
    prop_assert!(
        missing.is_empty() && extra.is_empty(),
        "{}: unassigned {:?}, assigned outside subscriptions {:?}",
        strategy,
        missing,
        extra
    );
    Ok(())
}

/// (b) on the target assignment.
fn check_balanced(strategy: &str, case: &Case, o: &Outcome) -> Result<(), TestCaseError> {
    if let Some(why) = reference::balance_violation(case, &o.target()) {
        prop_assert!(false, "{}: unbalanced: {}", strategy, why);
    }
    Ok(())
}

/// (f), first part: a partition in a member's `partitions` is claimed by no other member, unless
/// the member claims it too (conflicting claims that resolve to one of the claimants); and a
/// partition is `pending` exactly when its target owner does not claim it and someone else does.
fn check_cooperative_withholding(case: &Case, o: &Outcome) -> Result<(), TestCaseError> {
    let claimants = case.claimants();
    let nobody = BTreeSet::new();
    for (m, ps) in &o.partitions {
        for p in ps {
            let c = claimants.get(p).unwrap_or(&nobody);
            prop_assert!(
                c.is_empty() || c.contains(m),
                "{}-{} given to {:?} now while {:?} still own it",
                p.0,
                p.1,
                m,
                c
            );
        }
    }
    for (m, ps) in &o.target() {
        for p in ps {
            let c = claimants.get(p).unwrap_or(&nobody);
            let should_wait = !c.is_empty() && !c.contains(m);
            prop_assert_eq!(
                o.pending[m].contains(p),
                should_wait,
                "{}-{} for {:?}: claimants {:?}",
                &p.0,
                p.1,
                m,
                c
            );
        }
    }
    Ok(())
}

/// Identical subscriptions: every member keeps at least `min(owned, floor(P/n))` of the
/// partitions it validly owned; in particular a member owning no more than its quota keeps all.
fn check_keeps_within_quota(strategy: &str, case: &Case, o: &Outcome) -> Result<(), TestCaseError> {
    let n = case.members.len();
    let floor = case.subscribed_partitions().len() / n.max(1);
    let prev = case.valid_previous_owners();
    let target = o.target();
    for m in &case.members {
        let mine: Vec<&Tp> = prev
            .iter()
            .filter(|(_, o)| **o == m.member_id)
            .map(|(p, _)| p)
            .collect();
        let kept = mine
            .iter()
            .filter(|p| target[&m.member_id].contains(**p))
            .count();
        prop_assert!(
            kept >= mine.len().min(floor),
            "{}: {:?} validly owned {:?} (quota {}), kept only {}",
            strategy,
            m.member_id,
            mine,
            floor,
            kept
        );
    }
    Ok(())
}

/// Members given in a different order (and topics and subscription lists too).
fn permuted(case: &Case, perm: &[usize], topic_perm: &[usize]) -> Case {
    let mut members: Vec<Member> = perm
        .iter()
        .filter(|i| **i < case.members.len())
        .map(|i| case.members[*i].clone())
        .collect();
    for m in &mut members {
        m.topics.reverse();
    }
    let topics = topic_perm
        .iter()
        .filter(|i| **i < case.topics.len())
        .map(|i| case.topics[*i].clone())
        .collect();
    Case { topics, members }
}

/// The follow-up round: every member owns exactly what it was given in `partitions`, all in the
/// next generation.
fn next_round(case: &Case, o: &Outcome) -> Case {
    let generation = case
        .members
        .iter()
        .filter_map(|m| m.generation)
        .max()
        .unwrap_or(-1)
        .max(-1)
        + 1;
    let mut next = case.clone();
    for m in &mut next.members {
        m.owned_partitions = o.partitions[&m.member_id].iter().cloned().collect();
        m.generation = Some(generation);
    }
    next
}

fn without_racks(mut p: Params) -> Params {
    p.racks = false;
    p
}

fn identical(mut p: Params) -> Params {
    p.mixed = false;
    p
}

// ------------------------------------------------------------------------------ harness

type Prop<'a> = &'a dyn Fn(&Case) -> Result<(), TestCaseError>;

fn outcome_of(prop: Prop, case: &Case) -> Result<(), String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| prop(case))) {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(payload) => Err(payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .map_or_else(|| "panic".to_string(), |s| format!("panic: {s}"))),
    }
}

/// Runs a property; on failure, minimizes the case greedily and reports the minimized case with
/// its failure.
fn check(case: &Case, prop: Prop) -> Result<(), TestCaseError> {
    let Err(first) = outcome_of(prop, case) else {
        return Ok(());
    };
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let min = reference::minimize(case.clone(), &|c| outcome_of(prop, c).is_err());
    std::panic::set_hook(hook);
    let why = outcome_of(prop, &min).err().unwrap_or(first);
    Err(TestCaseError::fail(format!("{why}\nminimized: {min:?}")))
}

/// Large cases are too slow to minimize: report them as they are.
fn check_large(case: &Case, prop: Prop) -> Result<(), TestCaseError> {
    outcome_of(prop, case).map_err(TestCaseError::fail)
}

// ------------------------------------------------------------------------------ properties

/// (a) for all four strategies.
fn p_valid(case: &Case) -> Result<(), TestCaseError> {
    for s in STRATEGIES {
        let o = run(s, case)?;
        check_valid(s, case, &o)?;
    }
    Ok(())
}

/// (a) and (b) for sticky and cooperative-sticky.
fn p_balanced(case: &Case) -> Result<(), TestCaseError> {
    for s in STICKY {
        let o = run(s, case)?;
        check_valid(s, case, &o)?;
        check_balanced(s, case, &o)?;
    }
    Ok(())
}

/// (c)(i) and (d): identical subscriptions, no racks: exactly the theoretical minimum of validly
/// owned partitions changes owner, and every member keeps min(owned, floor(P/n)) of them.
fn p_minimal_movement_identical(case: &Case) -> Result<(), TestCaseError> {
    let prev = case.valid_previous_owners();
    let min = reference::min_moves_identical(case);
    for s in STICKY {
        let o = run(s, case)?;
        check_valid(s, case, &o)?;
        check_balanced(s, case, &o)?;
        let moved = reference::moved(&prev, &o.target());
        prop_assert_eq!(
            moved,
            min,
            "{}: moved {} of {:?}, minimum {}",
            s,
            moved,
            prev,
            min
        );
        check_keeps_within_quota(s, case, &o)?;
    }
    Ok(())
}

/// (c)(ii): no balanced valid assignment moves fewer validly owned partitions than sticky does.
/// "Balanced" is the most balanced: with identical subscriptions sizes within one of each other
/// (the brute force of the weak criterion, which then means the same); with mixed ones the
/// lexicographically smallest sorted load vector, which the sticky strategies reach first. (Under
/// the weaker criterion alone, an assignment keeping more can exist: see
/// `known_sticky_fill_forces_a_needless_move`.)
fn p_brute_force_stickiness(case: &Case) -> Result<(), TestCaseError> {
    let prev = case.valid_previous_owners();
    let min = if case.identical_subscriptions() {
        let min = reference::min_moves_brute_force(case);
        // The closed form of (c)(i) agrees with the brute force.
        prop_assert_eq!(
            reference::min_moves_identical(case),
            min,
            "oracles disagree"
        );
        min
    } else {
        prev.len() - reference::optimum_brute_force(case).kept
    };
    for s in STICKY {
        let o = run(s, case)?;
        let moved = reference::moved(&prev, &o.target());
        prop_assert!(
            moved <= min,
            "{}: moved {} of {:?}, a most balanced assignment moves only {}; got {:?}",
            s,
            moved,
            prev,
            min,
            o.target()
        );
    }
    Ok(())
}

/// The optimum by brute force, mixed subscriptions: the sticky result has the lexicographically
/// smallest sorted load vector of all valid assignments and, among those, keeps the most
/// partitions with their (keepable) previous owner.
fn p_brute_force_optimum(case: &Case) -> Result<(), TestCaseError> {
    if case.identical_subscriptions() {
        return Ok(());
    }
    let best = reference::optimum_brute_force(case);
    let prev = case.valid_previous_owners();
    for s in STICKY {
        let o = run(s, case)?;
        check_valid(s, case, &o)?;
        let got = reference::optimum_measures(case, &o.target());
        prop_assert_eq!(&got, &best, "{}: got {:?}", s, o.target());
        if s == "cooperative-sticky" {
            // The first round withholds exactly the partitions changing owner under that
            // optimal target (to a member that does not claim them too): of the validly owned
            // ones at most the fewest that any most balanced assignment must move.
            check_cooperative_withholding(case, &o)?;
            let withheld_owned = o
                .pending
                .values()
                .flatten()
                .filter(|p| prev.contains_key(*p))
                .count();
            prop_assert!(
                withheld_owned <= prev.len() - best.kept,
                "withheld {:?}, a most balanced assignment moves {}",
                &o.pending,
                prev.len() - best.kept
            );
        }
    }
    Ok(())
}

/// Local stickiness, checkable at any size: no partition whose valid previous owner lost it
/// could simply be handed back (the result would stay balanced).
fn p_no_needless_move(case: &Case) -> Result<(), TestCaseError> {
    let prev = case.valid_previous_owners();
    for s in STICKY {
        let t = run(s, case)?.target();
        for (p, o) in &prev {
            if t[o].contains(p) {
                continue;
            }
            let mut back = t.clone();
            for set in back.values_mut() {
                set.remove(p);
            }
            back.get_mut(o).expect("member").insert(p.clone());
            prop_assert!(
                reference::balance_violation(case, &back).is_some(),
                "{}: {}-{} could go back to {:?} and stay balanced; got {:?}",
                s,
                &p.0,
                p.1,
                o,
                t
            );
        }
    }
    Ok(())
}

/// (d): with conflicting claims the result is valid and balanced, the unique highest generation
/// keeps within quota (identical subscriptions), and losing and tied claims are only a
/// tie-break: dropping them changes neither the sorted member sizes nor any size by more than
/// one, and keeps no more partitions (they only decide which claimant gets a partition nobody
/// validly owns, or that a lower generation claimed, where that is free: by a swap, sizes
/// unchanged, or handed outright from a member one partition above the claimant, which trades
/// the two members' sizes).
fn p_conflicts(case: &Case) -> Result<(), TestCaseError> {
    for s in STICKY {
        let o = run(s, case)?;
        check_valid(s, case, &o)?;
        check_balanced(s, case, &o)?;
        if case.identical_subscriptions() && !has_racks(case) {
            check_keeps_within_quota(s, case, &o)?;
        }
    }
    let resolved = only_valid_claims(case);
    let full = run("sticky", case)?.target();
    let without = run("sticky", &resolved)?.target();
    let sorted = |n: &Named| -> Vec<usize> {
        let mut v: Vec<usize> = n.values().map(|ps| ps.len()).collect();
        v.sort_unstable();
        v
    };
    prop_assert_eq!(
        sorted(&full),
        sorted(&without),
        "losing/tied claims changed the sorted sizes"
    );
    for (m, ps) in &full {
        prop_assert!(
            ps.len().abs_diff(without[m].len()) <= 1,
            "losing/tied claims changed {}'s size by more than one: {:?} vs {:?}",
            m,
            full,
            without
        );
    }
    let prev = case.valid_previous_owners();
    let kept = |n: &Named| prev.iter().filter(|(p, o)| n[*o].contains(*p)).count();
    prop_assert!(
        kept(&full) >= kept(&without),
        "losing/tied claims cost kept partitions: {:?} vs {:?}",
        full,
        without
    );
    Ok(())
}

/// (f) round 1: nothing is handed over before its owner revoked it, only changes of owner are
/// withheld, and the target equals sticky's. Round 2 (ownership = what round 1 gave, next
/// generation, same members): valid and balanced.
fn p_cooperative(case: &Case) -> Result<(), TestCaseError> {
    let r1 = run("cooperative-sticky", case)?;
    check_valid("cooperative-sticky", case, &r1)?;
    check_cooperative_withholding(case, &r1)?;
    prop_assert_eq!(
        r1.target(),
        run("sticky", case)?.partitions,
        "cooperative target != sticky"
    );
    let case2 = next_round(case, &r1);
    let r2 = run("cooperative-sticky", &case2)?;
    check_valid("cooperative-sticky", &case2, &r2)?;
    check_balanced("cooperative-sticky", &case2, &r2)?;
    check_cooperative_withholding(&case2, &r2)?;
    Ok(())
}

/// (f) round 2 withholds nothing: no member has to revoke again.
fn p_cooperative_settles(case: &Case) -> Result<(), TestCaseError> {
    let r1 = run("cooperative-sticky", case)?;
    let r2 = run("cooperative-sticky", &next_round(case, &r1))?;
    let pending: Vec<(&String, &BTreeSet<Tp>)> =
        r2.pending.iter().filter(|(_, p)| !p.is_empty()).collect();
    prop_assert!(
        pending.is_empty(),
        "round 2 still withholds {:?}; round 1 gave {:?} pending {:?}",
        pending,
        r1.partitions,
        r1.pending
    );
    Ok(())
}

/// (f) as far as the protocol allows: round 2 withholds nothing, every member keeps all that
/// round 1 gave it, and the sizes are those of round 1's target. (That the pending partitions
/// land on exactly the promised members is not implied: round 2 sees them as unowned, and when
/// several members could take them equally well it picks by its own tie-breaks; Kafka's
/// constrained builder, which identical subscriptions keep, deals them round-robin.)
fn p_cooperative_promise(case: &Case) -> Result<(), TestCaseError> {
    let r1 = run("cooperative-sticky", case)?;
    let r2 = run("cooperative-sticky", &next_round(case, &r1))?;
    for (m, ps) in &r1.partitions {
        prop_assert!(
            ps.is_subset(&r2.partitions[m]),
            "{:?} lost {:?} in round 2; round 1 pending {:?}",
            m,
            ps.difference(&r2.partitions[m]).collect::<Vec<_>>(),
            r1.pending
        );
        prop_assert!(
            r2.pending[m].is_empty(),
            "round 2 withholds {:?}",
            r2.pending
        );
    }
    let sizes = |n: &Named| {
        let mut v: Vec<usize> = n.values().map(BTreeSet::len).collect();
        v.sort_unstable();
        v
    };
    prop_assert_eq!(sizes(&r2.partitions), sizes(&r1.target()), "sizes changed");
    Ok(())
}

fn p_range_reference(case: &Case) -> Result<(), TestCaseError> {
    let o = run("range", case)?;
    prop_assert_eq!(o.partitions, reference::range(case));
    Ok(())
}

fn p_roundrobin_reference(case: &Case) -> Result<(), TestCaseError> {
    let o = run("roundrobin", case)?;
    prop_assert_eq!(o.partitions, reference::roundrobin(case));
    Ok(())
}

fn has_racks(case: &Case) -> bool {
    case.members
        .iter()
        .any(|m| m.rack.as_deref().is_some_and(|r| !r.is_empty()))
}

/// Identical subscriptions with member racks: Kafka's constrained builder and its rack rule.
fn constrained_with_racks(case: &Case) -> bool {
    case.identical_subscriptions() && has_racks(case)
}

/// Every partition claimed by 2-3 members, generations 1..=3.
fn all_conflicting(mut case: Case) -> Case {
    let n = case.members.len();
    let parts: Vec<Tp> = case
        .topics
        .iter()
        .flat_map(|t| (0..t.partitions as i32).map(move |p| (t.name.clone(), p)))
        .collect();
    for m in &mut case.members {
        m.owned_partitions.clear();
    }
    for (i, p) in parts.iter().enumerate() {
        let k = 2 + i % 2;
        for j in 0..k.min(n) {
            let m = (i * 7 + j * 3 + p.0.len()) % n;
            if !case.members[m].owned_partitions.contains(p) {
                case.members[m].owned_partitions.push(p.clone());
            }
        }
    }
    for (i, m) in case.members.iter_mut().enumerate() {
        m.generation = Some(1 + (i as i32 * 5 + m.member_id.len() as i32) % 3);
    }
    case
}

/// The same case where each member claims only the partitions it validly owns.
fn only_valid_claims(case: &Case) -> Case {
    let prev = case.valid_previous_owners();
    let mut c = case.clone();
    for m in &mut c.members {
        m.owned_partitions = prev
            .iter()
            .filter(|(_, o)| **o == m.member_id)
            .map(|(p, _)| p.clone())
            .collect();
    }
    c
}

/// Tiny cases for the brute force: ≤ 7 partitions of subscribed topics, ≤ 4 members, no racks.
const TINY: Params = Params {
    topics: (1, 3),
    partitions: (0, 3),
    members: (1, 4),
    racks: false,
    ..SMALL
};

fn tiny(c: &Case) -> bool {
    c.subscribed_partitions().len() <= 7
}

proptest! {
    #![proptest_config(config(2000))]

    /// (a) for all four strategies, small mixed cases.
    #[test]
    fn every_partition_assigned_once_to_a_subscriber(case in cases(SMALL)) {
        check(&case, &p_valid)?;
    }

    /// (a) with identical subscriptions (the sticky "constrained" builder).
    #[test]
    fn every_partition_assigned_once_identical_subscriptions(case in cases(identical(SMALL))) {
        check(&case, &p_valid)?;
    }

    /// (b) for sticky and cooperative-sticky, mixed and identical subscriptions, with racks.
    #[test]
    fn sticky_is_balanced(case in prop_oneof![cases(SMALL), cases(identical(SMALL))]) {
        check(&case, &p_balanced)?;
    }

    /// (c)(i) and (d), identical subscriptions without racks.
    #[test]
    fn sticky_moves_the_minimum_with_identical_subscriptions(
        case in cases(without_racks(identical(SMALL)))
    ) {
        check(&case, &p_minimal_movement_identical)?;
    }

    /// (c)(ii) by brute force, identical subscriptions (and the (c)(i) oracle against it).
    #[test]
    fn sticky_brute_force_minimum_identical_subscriptions(
        case in cases(identical(TINY)).prop_filter("tiny", tiny)
    ) {
        check(&case, &p_brute_force_stickiness)?;
    }

    /// (d) every partition claimed by two or three members, generations 1..=3 with frequent ties.
    #[test]
    fn conflicting_claims(
        case in prop_oneof![cases(SMALL), cases(without_racks(identical(SMALL)))]
            .prop_map(all_conflicting)
    ) {
        check(&case, &p_conflicts)?;
    }
}

proptest! {
    #![proptest_config(config(1000))]

    /// Exactly the brute-force optimum (balance, then kept partitions, then rack-matched kept
    /// ones), mixed subscriptions, without and with racks, with conflicting claims and
    /// generations; cooperative-sticky withholds exactly what that optimum moves.
    #[test]
    fn sticky_matches_brute_force_optimum(
        case in prop_oneof![
            cases(TINY),
            cases(Params { racks: true, ..TINY }),
        ].prop_filter("tiny", tiny)
    ) {
        check(&case, &p_brute_force_optimum)?;
    }
}

proptest! {
    #![proptest_config(config(1500))]

    /// (f) cooperative-sticky, two rounds: withholding exactly the transfers; round 2 valid and
    /// balanced.
    #[test]
    fn cooperative_withholds_transfers(
        case in prop_oneof![cases(SMALL), cases(identical(SMALL))]
    ) {
        check(&case, &p_cooperative)?;
    }

    /// (f) round 2 withholds nothing, identical subscriptions without racks.
    #[test]
    fn cooperative_second_round_settles_identical_subscriptions(
        case in cases(without_racks(identical(SMALL)))
    ) {
        check(&case, &p_cooperative_settles)?;
    }

    /// Same input, same output; and the order members (and topics, and subscription lists) are
    /// given in does not change who gets what, for all four strategies.
    #[test]
    fn deterministic_and_independent_of_member_order(
        case in cases(SMALL),
        perm in Just((0..SMALL.members.1).collect::<Vec<usize>>()).prop_shuffle(),
        topic_perm in Just((0..SMALL.topics.1).collect::<Vec<usize>>()).prop_shuffle(),
    ) {
        check(&case, &|case: &Case| {
            let shuffled = permuted(case, &perm, &topic_perm);
            for s in STRATEGIES {
                let a = run(s, case)?;
                prop_assert_eq!(&a, &run(s, case)?, "{}: not deterministic", s);
                prop_assert_eq!(&a, &run(s, &shuffled)?, "{}: depends on member order", s);
            }
            Ok(())
        })?;
    }

    /// range equals the reference range (plain and rack-aware branches).
    #[test]
    fn range_matches_reference(case in prop_oneof![
        cases(SMALL),
        cases(identical(SMALL)),
        // Few partition counts: many co-partitioned topics.
        cases(Params { partitions: (0, 3), topics: (2, 5), ..identical(SMALL) }),
        cases(Params { partitions: (1, 3), topics: (2, 5), members: (1, 3), ..SMALL }),
    ]) {
        check(&case, &p_range_reference)?;
    }

    /// roundrobin equals the reference roundrobin.
    #[test]
    fn roundrobin_matches_reference(case in prop_oneof![cases(SMALL), cases(identical(SMALL))]) {
        check(&case, &p_roundrobin_reference)?;
    }
}

proptest! {
    #![proptest_config(config(16))]

    /// Large groups (1000-5000 partitions, 50-200 members), mixed subscriptions with racks and
    /// conflicts: (a) for all strategies, (b) and (f, both rounds) for the sticky ones, equality
    /// with the references for range and roundrobin, and independence of member order.
    #[test]
    fn large_groups(
        case in cases(LARGE),
        perm in Just((0..LARGE.members.1).collect::<Vec<usize>>()).prop_shuffle(),
    ) {
        check_large(&case, &|case: &Case| {
            let topic_perm: Vec<usize> = (0..case.topics.len()).rev().collect();
            let shuffled = permuted(case, &perm, &topic_perm);
            for s in STRATEGIES {
                let o = run(s, case)?;
                check_valid(s, case, &o)?;
                prop_assert_eq!(&o, &run(s, &shuffled)?, "{}: depends on member order", s);
                match s {
                    "range" => prop_assert_eq!(&o.partitions, &reference::range(case)),
                    "roundrobin" => prop_assert_eq!(&o.partitions, &reference::roundrobin(case)),
                    _ => check_balanced(s, case, &o)?,
                }
            }
            p_cooperative(case)
        })?;
    }

    /// Large groups, identical subscriptions, no racks: (a), (b), (c)(i), (d), and the
    /// cooperative follow-up round (valid, balanced, nothing withheld).
    #[test]
    fn large_groups_identical_subscriptions(case in cases(without_racks(identical(LARGE)))) {
        check_large(&case, &|case: &Case| {
            p_minimal_movement_identical(case)?;
            p_cooperative(case)?;
            p_cooperative_settles(case)?;
            for s in ["range", "roundrobin"] {
                check_valid(s, case, &run(s, case)?)?;
            }
            Ok(())
        })?;
    }
}

// ----------------------------------------------------------- strict stickiness and settling
//
// The strict forms of (c)(ii) and (f), which the greedy general builder used to miss; the exact
// phase of the general builder (most balanced, then most kept) meets them. Where the original
// statement was wrong the property and the `known_*` case say what holds instead.

proptest! {
    #![proptest_config(config(400))]

    /// (c)(ii) by brute force, mixed subscriptions (minimum over the most balanced assignments).
    #[test]
    fn sticky_moves_no_more_than_brute_force_minimum(
        case in cases(TINY).prop_filter("tiny", tiny)
    ) {
        check(&case, &p_brute_force_stickiness)?;
    }

    /// Local stickiness at larger sizes, mixed subscriptions, no racks.
    #[test]
    fn sticky_moves_nothing_that_could_go_back(
        case in cases(Params { members: (5, 20), topics: (3, 8), partitions: (0, 30), ..without_racks(SMALL) })
    ) {
        check(&case, &p_no_needless_move)?;
    }

    /// (f) round 2 withholds nothing: mixed subscriptions with racks, identical ones without.
    /// (With identical subscriptions and racks, Kafka's constrained builder, kept unchanged, drops
    /// an ownership without a replica on the owner's rack and moves the partition again.)
    #[test]
    fn cooperative_second_round_settles(
        case in prop_oneof![cases(SMALL), cases(without_racks(identical(SMALL)))]
    ) {
        check(&case, &|c: &Case| if constrained_with_racks(c) { Ok(()) } else { p_cooperative_settles(c) })?;
    }

    /// (f): round 2 settles on round 1's partitions with round 1's sizes (see
    /// `p_cooperative_promise` for why not on exactly the promised members).
    #[test]
    fn cooperative_pending_lands_where_promised(
        case in prop_oneof![cases(SMALL), cases(without_racks(identical(SMALL)))]
    ) {
        check(&case, &|c: &Case| if constrained_with_racks(c) { Ok(()) } else { p_cooperative_promise(c) })?;
    }
}

/// Runs a property on a fixed case, panicking with the failure.
fn holds(case: &Case, prop: Prop) {
    if let Err(e) = outcome_of(prop, case) {
        panic!("{e}\ncase: {case:?}");
    }
}

fn topics(list: &[(&str, i64)]) -> Vec<TopicDef> {
    list.iter()
        .map(|(name, partitions)| TopicDef {
            name: name.to_string(),
            partitions: *partitions,
            replica_racks: Vec::new(),
        })
        .collect()
}

/// Fixed at 36f35d9; at ab8c447 the constrained sticky builder treated a claim of a partition of
/// a topic nobody subscribes to as ownership: it panicked (`unreachable!`) on the first case and
/// assigned b-0 to m0 on the second.
#[test]
fn regression_claims_of_unsubscribed_topics_are_not_ownership() {
    let one = Case {
        topics: topics(&[("a", 1), ("T2", 1)]),
        members: vec![owning(member("m0", &["a"]), &["T2-0"], -1)],
    };
    holds(&one, &p_valid);
    let two = Case {
        topics: topics(&[("a", 2), ("b", 2)]),
        members: vec![
            owning(member("m0", &["a"]), &["b-0", "b-1"], 1),
            member("m1", &["a"]),
        ],
    };
    holds(&two, &p_valid);
    holds(&two, &p_balanced);
}

/// (c)(ii) as first stated ("keeping t0-0 is balanced") is wrong once balance means the most
/// balanced: 😀2 validly owns t0-0; keeping it gives sizes (2, 1, 0) (😀2 {t0-0}, m0 {T2-0,
/// T2-1}, M3 {}), which meets the weak criterion, but (1, 1, 1) is reachable only by handing
/// t0-0 to M3, its only other subscriber. The sticky strategies take the more balanced one and
/// move exactly that partition, which is the minimum among the most balanced assignments.
#[test]
fn known_sticky_fill_forces_a_needless_move() {
    let case = Case {
        topics: topics(&[("t0", 1), ("T2", 2)]),
        members: vec![
            owning(member("\u{1F600}2", &["T2", "t0"]), &["t0-0"], 1),
            member("M3", &["t0"]),
            member("m0", &["T2"]),
        ],
    };
    holds(&case, &p_brute_force_stickiness);
    holds(&case, &p_brute_force_optimum);
    for s in STICKY {
        let t = run(s, &case).expect("runs").target();
        let sizes: Vec<usize> = t.values().map(BTreeSet::len).collect();
        assert_eq!(sizes, vec![1, 1, 1], "{s}: {t:?}");
        assert!(t["M3"].contains(&("t0".to_string(), 0)), "{s}: {t:?}");
    }
}

/// m5 validly owns t0-0, t0-3, t0-5, t0-6 and T2-0; only T2-0 has to move (to M3). The greedy
/// balance loop settled t0 first (moving t0-6 to consumer-4-uuid), then T2 (T2-0 to M3), which
/// alone would have been enough; the exact phase hands t0-6 back.
#[test]
fn known_sticky_balance_order_moves_a_kept_partition() {
    let case = Case {
        topics: topics(&[("t0", 7), ("T2", 1)]),
        members: vec![
            member("consumer-4-uuid", &["T2", "t0"]),
            member("M3", &["T2"]),
            owning(
                member("m5", &["t0", "T2"]),
                &["t0-0", "t0-3", "t0-5", "t0-6", "T2-0"],
                -1,
            ),
        ],
    };
    holds(&case, &p_no_needless_move);
}

/// (f) without racks, mixed subscriptions (claims in round 1 are not valid ownership: m0 and 😀2
/// do not subscribe to what they claim). At 36f35d9 round 2 revoked T2-4 from m5 again; settles
/// since the fresh-first balancing of 9c96563.
#[test]
fn regression_cooperative_second_round_settles_without_racks() {
    let case = Case {
        topics: topics(&[("T2", 6), ("a", 2)]),
        members: vec![
            owning(member("m0", &[]), &["T2-0"], 1),
            owning(member("\u{1F600}2", &["T2"]), &["a-1"], 1),
            member("m5", &["T2", "a"]),
        ],
    };
    holds(&case, &p_cooperative_settles);
}

/// (f) with racks, no prior owners: round 1 gives T2-2 (no replica racks) to consumer-4-uuid
/// (rack r0). Kafka's rule would drop that ownership in round 2 as rack-mismatched and move
/// T2-2 to M3, revoking it again; since no subscriber can read T2-2 locally, it now stays.
#[test]
fn regression_cooperative_second_round_keeps_partitions_no_rack_can_host() {
    let mut case = Case {
        topics: topics(&[("T2", 3)]),
        members: vec![
            member("M3", &["T2"]),
            with_rack(member("consumer-4-uuid", &["T2"]), "r0"),
        ],
    };
    case.topics[0].replica_racks = racks(&[&["r0"], &[], &[]]);
    holds(&case, &p_cooperative_settles);
}

/// (f), identical subscriptions, no racks: A keeps 0 and 1 and must give up 3 and 5; round 1
/// deals 2..7 round-robin to B, C, D (B 2,5  C 3,6  D 4,7), so C waits for 3 and B for 5. In
/// round 2 only 3 and 5 are unassigned and Kafka's constrained builder (kept unchanged for
/// identical subscriptions) deals 3 to B and 5 to C: "pending lands where promised" is wrong as
/// first stated. What holds: round 2 keeps everything round 1 gave, withholds nothing, and every
/// member ends with its promised size.
#[test]
fn known_cooperative_pending_not_where_promised_identical() {
    let case = Case {
        topics: topics(&[("t", 8)]),
        members: vec![
            owning(member("A", &["t"]), &["t-0", "t-1", "t-3", "t-5"], 1),
            member("B", &["t"]),
            member("C", &["t"]),
            member("D", &["t"]),
        ],
    };
    holds(&case, &p_cooperative_promise);
    let r1 = run("cooperative-sticky", &case).expect("runs");
    let r2 = run("cooperative-sticky", &next_round(&case, &r1)).expect("runs");
    assert!(r2.partitions["B"].contains(&("t".to_string(), 3)));
    assert!(r1.pending["C"].contains(&("t".to_string(), 3)));
}

// ------------------------------------------------------------------------------ bad input

#[derive(Debug, Clone)]
enum Bad {
    NegativePartitions(i64),
    DuplicateMember,
    DuplicateTopic,
    RackLengthMismatch(usize),
}

fn bad() -> impl Strategy<Value = Bad> {
    prop_oneof![
        (i64::MIN..0).prop_map(Bad::NegativePartitions),
        Just(Bad::DuplicateMember),
        Just(Bad::DuplicateTopic),
        (0usize..20).prop_map(Bad::RackLengthMismatch),
    ]
}

proptest! {
    #![proptest_config(config(200))]

    /// The builder rejects negative partition counts, duplicate members, duplicate topics and
    /// replica_racks whose length is not the partition count, whatever else the group holds.
    #[test]
    fn builder_rejects_bad_input(case in cases(SMALL), bad in bad()) {
        let mut b = GroupSpec::builder();
        for t in &case.topics {
            b.add_topic(t.name.clone(), t.partitions, t.replica_racks.clone());
        }
        for m in &case.members {
            b.add_member(m.clone());
        }
        let first = &case.topics[0];
        match &bad {
            Bad::NegativePartitions(n) => b.add_topic("negative", *n, Vec::new()),
            Bad::DuplicateMember => b.add_member(Member {
                topics: vec![first.name.clone()],
                ..case.members[0].clone()
            }),
            Bad::DuplicateTopic => b.add_topic(first.name.clone(), 1, Vec::new()),
            Bad::RackLengthMismatch(k) => {
                // 0..=4 partitions, 1..=10 rack entries, never equal.
                let n = *k % 5;
                let len = if *k % 10 + 1 == n { n + 1 } else { *k % 10 + 1 };
                b.add_topic("racked", n as i64, vec![vec!["r0".to_string()]; len]);
            }
        }
        match b.build() {
            Err(AssignError::InvalidInput(_)) => {}
            other => prop_assert!(false, "{:?} accepted: {:?}", bad, other.map(|_| ())),
        }
    }
}

#[test]
fn builder_rejects_each_bad_input() {
    let m = |id: &str| Member {
        member_id: id.into(),
        topics: vec!["t".into()],
        ..Default::default()
    };
    let ok = GroupSpec::builder().topic("t", 2).member(m("a"));
    assert!(ok.clone().build().is_ok());
    assert!(ok.clone().topic("n", -1).build().is_err());
    assert!(ok.clone().topic("n", i64::MIN).build().is_err());
    assert!(ok.clone().member(m("a")).build().is_err());
    assert!(ok.clone().topic("t", 2).build().is_err());
    assert!(ok.clone().topic("t", 3).build().is_err());
    let racks = |n: usize| vec![vec!["r0".to_string()]; n];
    assert!(ok
        .clone()
        .topic_with_racks("r", 2, racks(1))
        .build()
        .is_err());
    assert!(ok
        .clone()
        .topic_with_racks("r", 2, racks(3))
        .build()
        .is_err());
    assert!(ok
        .clone()
        .topic_with_racks("r", 0, racks(1))
        .build()
        .is_err());
    assert!(ok
        .clone()
        .topic_with_racks("r", 2, racks(2))
        .build()
        .is_ok());
    // Empty racks mean "unknown", valid for any count.
    assert!(ok.topic_with_racks("r", 2, Vec::new()).build().is_ok());
}

#[test]
fn empty_group_assigns_nothing() {
    let case = Case {
        topics: vec![TopicDef {
            name: "t".into(),
            partitions: 3,
            replica_racks: Vec::new(),
        }],
        members: Vec::new(),
    };
    for s in STRATEGIES {
        let spec = build(&case);
        let a = builtin(s).expect("builtin").assign(&spec).expect("assigns");
        assert!(a.members.is_empty(), "{s}");
    }
}
