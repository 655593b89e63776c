//! Properties of the `load` assignor: complete and exclusive assignment, stickiness,
//! convergence, and the largest member load against a lower bound on the optimum.

use std::collections::{BTreeMap, BTreeSet};

use gregor_assign::load::{
    assign, LoadConfig, LoadInput, LoadMember, LoadOutcome, MoveReason, TopicPartition,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// A generated round: topics, members (ids `m0..`), loads (some missing), the current owner of
/// each partition (a member index, a member that left, or nobody), the threshold.
#[derive(Debug, Clone)]
struct Case {
    topics: Vec<i32>,
    /// Per member, the topics it subscribes to; `None`: every topic.
    subs: Vec<Option<Vec<usize>>>,
    loads: Vec<Option<f64>>,
    owners: Vec<Option<usize>>,
    threshold: f64,
}

fn case(identical: bool) -> impl Strategy<Value = Case> {
    (prop::collection::vec(0i32..8, 1..4), 1usize..7, 0.0f64..0.5)
        .prop_flat_map(move |(topics, members, threshold)| {
            let parts: usize = topics.iter().map(|&n| n as usize).sum();
            let sub = if identical {
                Just(None).boxed()
            } else {
                prop::option::weighted(
                    0.8,
                    prop::collection::vec(0..topics.len(), 0..topics.len() + 1),
                )
                .boxed()
            };
            (
                Just(topics),
                prop::collection::vec(sub, members),
                prop::collection::vec(prop::option::weighted(0.9, 0.0f64..1000.0), parts),
                prop::collection::vec(prop::option::of(0..members + 1), parts),
                Just(threshold),
            )
        })
        .prop_map(|(topics, subs, loads, owners, threshold)| Case {
            topics,
            subs,
            loads,
            owners,
            threshold,
        })
}

fn tps(case: &Case) -> Vec<TopicPartition> {
    case.topics
        .iter()
        .enumerate()
        .flat_map(|(t, &n)| (0..n).map(move |p| TopicPartition::new(format!("t{t}"), p)))
        .collect()
}

fn input(case: &Case) -> LoadInput {
    let members = case
        .subs
        .iter()
        .enumerate()
        .map(|(i, s)| LoadMember {
            member_id: format!("m{i}"),
            topics: match s {
                None => (0..case.topics.len()).map(|t| format!("t{t}")).collect(),
                Some(ts) => ts.iter().map(|t| format!("t{t}")).collect(),
            },
        })
        .collect();
    let all = tps(case);
    let mut current: BTreeMap<String, Vec<TopicPartition>> = BTreeMap::new();
    for (tp, owner) in all.iter().zip(&case.owners) {
        if let Some(o) = owner {
            // Index `members` stands for a member that left.
            current.entry(format!("m{o}")).or_default().push(tp.clone());
        }
    }
    LoadInput {
        members,
        topics: (0..case.topics.len())
            .map(|t| (format!("t{t}"), case.topics[t]))
            .collect(),
        loads: all
            .iter()
            .zip(&case.loads)
            .filter_map(|(tp, l)| l.map(|l| (tp.clone(), l)))
            .collect(),
        current,
    }
}

fn config(case: &Case) -> LoadConfig {
    LoadConfig {
        threshold: case.threshold,
        default_load: None,
    }
}

fn run(input: &LoadInput, config: &LoadConfig) -> Result<LoadOutcome, TestCaseError> {
    assign(input, config).map_err(|e| TestCaseError::fail(e.to_string()))
}

fn check_complete(input: &LoadInput, out: &LoadOutcome) -> Result<(), TestCaseError> {
    let subs: BTreeMap<&str, BTreeSet<&str>> = input
        .members
        .iter()
        .map(|m| {
            let ts = m.topics.iter().map(String::as_str).collect();
            (m.member_id.as_str(), ts)
        })
        .collect();
    prop_assert_eq!(out.assignment.len(), input.members.len());
    let mut seen = BTreeSet::new();
    for (m, ps) in &out.assignment {
        for tp in ps {
            prop_assert!(seen.insert(tp.clone()), "{} assigned twice", tp);
            prop_assert!(
                subs[m.as_str()].contains(tp.topic.as_str()),
                "{} to {}",
                tp,
                m
            );
        }
    }
    for (topic, &n) in &input.topics {
        let subscribed = subs.values().any(|ts| ts.contains(topic.as_str()));
        for p in 0..n {
            let tp = TopicPartition::new(topic.clone(), p);
            prop_assert_eq!(seen.contains(&tp), subscribed, "{}", tp);
        }
    }
    Ok(())
}

/// Partitions with a valid current owner change owner only through balance moves.
fn check_sticky(input: &LoadInput, out: &LoadOutcome) -> Result<(), TestCaseError> {
    let balance: BTreeSet<&TopicPartition> = out
        .moves
        .iter()
        .filter(|m| matches!(m.reason, MoveReason::Balance { .. }))
        .map(|m| &m.partition)
        .collect();
    for (m, ps) in &input.current {
        let Some(now) = out.assignment.get(m) else {
            continue;
        };
        for tp in ps {
            let subscribed = input
                .members
                .iter()
                .any(|x| &x.member_id == m && x.topics.contains(&tp.topic));
            if subscribed && !now.contains(tp) {
                prop_assert!(
                    balance.contains(tp),
                    "{} left {} without a balance move",
                    tp,
                    m
                );
            }
        }
    }
    Ok(())
}

fn check_threshold(out: &LoadOutcome, threshold: f64) -> Result<(), TestCaseError> {
    let b = out.balance;
    prop_assert_eq!(b.moves > 0, b.offered_cut > threshold, "{:?}", b);
    prop_assert!(b.max_after <= b.max_before);
    prop_assert!(out.lower_bound <= out.max_load() * (1.0 + 1e-9) + 1e-9);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn complete_exclusive_sticky_and_convergent(case in case(false)) {
        let input = input(&case);
        let out = run(&input, &config(&case))?;
        check_complete(&input, &out)?;
        check_sticky(&input, &out)?;
        check_threshold(&out, case.threshold)?;
        let again = LoadInput { current: out.assignment.clone(), ..input };
        let second = run(&again, &config(&case))?;
        prop_assert!(second.moves.is_empty(), "second round moved: {:?}", second.moves);
    }

    #[test]
    fn within_threshold_and_one_partition_of_the_bound(case in case(true)) {
        let input = input(&case);
        let out = run(&input, &config(&case))?;
        check_complete(&input, &out)?;
        let biggest = out
            .assignment
            .values()
            .flatten()
            .map(|tp| input.loads.get(tp).copied().unwrap_or(0.0))
            .fold(0.0, f64::max)
            .max(default_of(&input));
        let limit = (1.0 + case.threshold) * out.lower_bound + biggest;
        prop_assert!(out.max_load() <= limit * (1.0 + 1e-9) + 1e-9,
            "max {} over {} (bound {})", out.max_load(), limit, out.lower_bound);
    }

    /// Every member carrying the same load: nothing moves, whatever the threshold.
    #[test]
    fn balanced_input_moves_nothing(
        members in 1usize..6,
        per_member in prop::collection::vec(prop::collection::vec(1.0f64..100.0, 0..4), 6),
        threshold in 0.0f64..0.5,
    ) {
        let (input, _) = balanced(members, &per_member);
        let out = run(&input, &LoadConfig { threshold, default_load: None })?;
        prop_assert!(out.moves.is_empty(), "{:?}", out.moves);
    }
}

fn default_of(input: &LoadInput) -> f64 {
    if input.loads.is_empty() {
        1.0
    } else {
        input.loads.values().sum::<f64>() / input.loads.len() as f64
    }
}

/// One topic; member `i` owns the partitions of `per_member[i]` plus a filler partition that
/// brings its load to 1000.
fn balanced(members: usize, per_member: &[Vec<f64>]) -> (LoadInput, usize) {
    let mut input = LoadInput::default();
    let mut next = 0;
    for (i, loads) in per_member.iter().take(members).enumerate() {
        let id = format!("m{i}");
        input.members.push(LoadMember {
            member_id: id.clone(),
            topics: vec!["t".into()],
        });
        let filler = 1000.0 - loads.iter().sum::<f64>();
        for l in loads.iter().copied().chain([filler]) {
            let tp = TopicPartition::new("t", next);
            next += 1;
            input.loads.insert(tp.clone(), l);
            input.current.entry(id.clone()).or_default().push(tp);
        }
    }
    input.topics.insert("t".into(), next);
    (input, next as usize)
}

#[test]
fn a_joining_member_takes_load_and_the_moves_say_why() {
    // Two members at 300 and 300; a third joins: the plan brings the maximum to 200.
    let (mut input, _) = balanced(2, &[vec![100.0, 100.0, 50.0], vec![100.0, 100.0, 50.0]]);
    for l in input.loads.values_mut() {
        *l *= 0.3;
    }
    input.members.push(LoadMember {
        member_id: "m2".into(),
        topics: vec!["t".into()],
    });
    let out = assign(&input, &LoadConfig::default()).unwrap();
    assert!(out.max_load() < 300.0 * 0.9, "{:?}", out.member_loads);
    assert!(out.member_loads["m2"] > 0.0);
    let text = out.moves[0].to_string();
    assert!(text.contains("largest member load 300 -> "), "{text}");
    assert!(text.contains("-> m2"), "{text}");
}

#[test]
fn a_member_joining_a_large_group_gets_work() {
    // 20 members with 10 partitions of load 1 each: every member would hand the newcomer half a
    // partition's worth, far under the threshold, but the newcomer's rise is not.
    let per: Vec<Vec<f64>> = vec![vec![1.0; 9]; 20];
    let (mut input, _) = balanced(20, &per);
    for l in input.loads.values_mut() {
        *l = 1.0;
    }
    input.members.push(LoadMember {
        member_id: "new".into(),
        topics: vec!["t".into()],
    });
    let out = assign(&input, &LoadConfig::default()).unwrap();
    assert!(out.member_loads["new"] >= 9.0, "{:?}", out.member_loads);
    let again = LoadInput {
        current: out.assignment.clone(),
        ..input
    };
    assert!(assign(&again, &LoadConfig::default())
        .unwrap()
        .moves
        .is_empty());
}

#[test]
fn a_small_imbalance_within_the_threshold_is_kept() {
    // m0 carries 110 (100 + 10), m1 90: the best move cuts the maximum to 100, by 10% of the
    // fair share (100): not more than the threshold.
    let mut input = LoadInput::default();
    input.topics.insert("t".into(), 3);
    for (p, l, owner) in [(0, 100.0, "m0"), (1, 10.0, "m0"), (2, 90.0, "m1")] {
        let tp = TopicPartition::new("t", p);
        input.loads.insert(tp.clone(), l);
        input.current.entry(owner.into()).or_default().push(tp);
        input.members.push(LoadMember {
            member_id: owner.into(),
            topics: vec!["t".into()],
        });
    }
    input.members.dedup();
    let out = assign(&input, &LoadConfig::default()).unwrap();
    assert!(out.moves.is_empty(), "{:?}", out.moves);
    assert_eq!(out.balance.moves, 0);
    assert_eq!(out.balance.best_max, 100.0);
    let config = LoadConfig {
        threshold: 0.05,
        default_load: None,
    };
    let out = assign(&input, &config).unwrap();
    assert_eq!(out.moves.len(), 1);
    assert_eq!(out.moves[0].partition, TopicPartition::new("t", 1));
    assert_eq!(out.max_load(), 100.0);
}

#[test]
fn orphans_go_largest_first_to_the_least_loaded() {
    let mut input = LoadInput::default();
    input.topics.insert("t".into(), 3);
    for (p, l) in [(0, 10.0), (1, 30.0), (2, 20.0)] {
        input.loads.insert(TopicPartition::new("t", p), l);
    }
    for m in ["a", "b"] {
        input.members.push(LoadMember {
            member_id: m.into(),
            topics: vec!["t".into()],
        });
    }
    input
        .current
        .insert("gone".into(), vec![TopicPartition::new("t", 1)]);
    let out = assign(&input, &LoadConfig::default()).unwrap();
    let order: Vec<(i32, &str)> = out
        .moves
        .iter()
        .map(|m| (m.partition.partition, m.to.as_str()))
        .collect();
    assert_eq!(order, vec![(1, "a"), (2, "b"), (0, "b")]);
    assert_eq!(out.moves[0].reason, MoveReason::OwnerLeft);
    assert_eq!(out.moves[0].from.as_deref(), Some("gone"));
    assert_eq!(out.moves[1].reason, MoveReason::Unowned);
}

#[test]
fn bad_input_is_rejected() {
    let mut input = LoadInput::default();
    input.topics.insert("t".into(), 1);
    input.loads.insert(TopicPartition::new("t", 0), f64::NAN);
    assert!(assign(&input, &LoadConfig::default()).is_err());
    let config = LoadConfig {
        threshold: 1.0,
        default_load: None,
    };
    assert!(assign(&LoadInput::default(), &config).is_err());
    let twice = LoadMember {
        member_id: "a".into(),
        topics: vec![],
    };
    let input = LoadInput {
        members: vec![twice.clone(), twice],
        ..LoadInput::default()
    };
    assert!(assign(&input, &LoadConfig::default()).is_err());
}
