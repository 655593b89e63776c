//! Groups on which a local comparison against Kafka's own `StickyAssignor` /
//! `CooperativeStickyAssignor` (4.0 source, harness outside this repository; see
//! `BENCHMARKS.md`) found Gregor worse than Kafka on some count at no gain elsewhere: fewer
//! previously owned partitions kept at the same balance (identical subscriptions with racks:
//! partitions dropped for rack locality were dealt round-robin, where Kafka's round-robin order
//! happened to hand some back to their previous owner); a larger spread inside a class of
//! members with identical subscriptions at the same sizes and kept count; more partitions
//! withheld by the first cooperative round at the same sizes and kept count (partitions claimed
//! twice in one generation went to a third member).

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use gregor_assign::GroupSpec;

/// Partitions held by their valid previous owner: the unique claimant with the highest
/// generation.
fn kept(owners: &[(&str, &[&str], i32)], result: &BTreeMap<String, Vec<String>>) -> usize {
    let mut best: BTreeMap<&str, (i32, Option<&str>)> = BTreeMap::new();
    for (m, owned, generation) in owners {
        for p in owned.iter() {
            match best.get(p) {
                Some((g, _)) if *g > *generation => {}
                Some((g, _)) if *g == *generation => {
                    best.insert(p, (*g, None));
                }
                _ => {
                    best.insert(p, (*generation, Some(m)));
                }
            }
        }
    }
    result
        .iter()
        .map(|(m, ps)| {
            ps.iter()
                .filter(|p| best.get(p.as_str()).and_then(|x| x.1) == Some(m.as_str()))
                .count()
        })
        .sum()
}

/// Every partition exactly once, member sizes within one (identical subscriptions).
fn check_complete(s: &GroupSpec, result: &BTreeMap<String, Vec<String>>, partitions: usize) {
    let all: BTreeSet<&String> = result.values().flatten().collect();
    assert_eq!(all.len(), partitions);
    assert_eq!(result.values().map(Vec::len).sum::<usize>(), partitions);
    let sizes: Vec<usize> = result.values().map(Vec::len).collect();
    assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1);
    assert_eq!(s.members().len(), result.len());
}

fn target(s: &GroupSpec, strategy: &str) -> BTreeMap<String, Vec<String>> {
    let a = run(strategy, s);
    let mut now = named(s, &a);
    for (m, later) in pending(s, &a) {
        now.get_mut(&m).expect("member").extend(later);
    }
    now
}

/// Three members on two racks: consumer 1 owned topic0-2, which has no replica on its rack, and
/// the only member on a replica's rack is full; the rack pass fills consumer 1 with topic0-4
/// (fresh, on its rack), so the plain pass dealt topic0-2 to consumer 2. Swapping topic0-2 and
/// topic0-4 back costs no rack match and keeps one more partition.
#[test]
fn rack_mismatched_partition_swaps_back_to_its_owner() {
    let owners: [(&str, &[&str], i32); 2] = [
        ("consumer0", &["topic0-0", "topic0-1"], 1),
        ("consumer1", &["topic0-2", "topic0-3"], 1),
    ];
    let s = GroupSpec::builder()
        .topic_with_racks(
            "topic0",
            6,
            racks(&[&["r0"], &["r0"], &["r0"], &["r1"], &["r1"], &["r1"]]),
        )
        .member(owning(
            with_rack(member("consumer0", &["topic0"]), "r0"),
            owners[0].1,
            1,
        ))
        .member(owning(
            with_rack(member("consumer1", &["topic0"]), "r1"),
            owners[1].1,
            1,
        ))
        .member(with_rack(member("consumer2", &["topic0"]), "r1"))
        .build()
        .expect("valid");
    for strategy in ["sticky", "cooperative-sticky"] {
        let t = target(&s, strategy);
        check_complete(&s, &t, 6);
        assert_eq!(kept(&owners, &t), 4, "{strategy}: {t:?}");
        assert_eq!(
            t["consumer1"],
            vec!["topic0-2".to_string(), "topic0-3".to_string()],
            "{strategy}"
        );
    }
}

/// Group g02777 of the comparison (seed 1): Kafka's `StickyAssignor` kept 32 partitions with
/// its previous owner, Gregor 28, both at member sizes 14 and 13. Several partitions are claimed
/// twice in the same generation (so nobody owns them).
#[test]
fn kafka_comparison_g02777_keeps_at_least_kafkas_count() {
    let s = kafka_comparison_group_g02777();
    let mut owners: Vec<(&str, &[&str], i32)> = Vec::new();
    for (id, owned) in G02777_OWNED {
        owners.push((id, owned, 4));
    }
    for strategy in ["sticky", "cooperative-sticky"] {
        let t = target(&s, strategy);
        check_complete(&s, &t, 67);
        let k = kept(&owners, &t);
        assert!(k >= 32, "{strategy}: kept {k}, Kafka keeps 32");
    }
}

const G02777_OWNED: [(&str, &[&str]); 5] = [
    (
        "c00",
        &[
            "t0-1", "t0-9", "t0-10", "t0-11", "t0-12", "t1-4", "t2-0", "t2-5", "t3-1", "t3-6",
            "t3-8", "t4-4", "t4-5", "t6-5", "t6-9", "t6-10",
        ],
    ),
    (
        "c02",
        &[
            "t0-4", "t0-7", "t1-2", "t1-3", "t1-8", "t2-2", "t3-2", "t3-3", "t3-4", "t3-11",
            "t5-0", "t6-3", "t6-8",
        ],
    ),
    (
        "c01",
        &[
            "t0-0", "t0-6", "t0-12", "t1-5", "t1-6", "t1-9", "t2-0", "t2-6", "t3-0", "t3-5",
            "t4-0", "t4-5", "t6-6", "t6-7", "t6-13",
        ],
    ),
    (
        "c04",
        &[
            "t0-2", "t0-10", "t1-1", "t1-7", "t2-1", "t2-3", "t2-7", "t3-7", "t3-9", "t4-1",
            "t6-0", "t6-9",
        ],
    ),
    (
        "c03",
        &[
            "t0-5", "t0-8", "t1-0", "t1-5", "t1-10", "t2-4", "t2-8", "t3-4", "t3-10", "t4-2",
            "t6-4", "t6-11", "t6-12",
        ],
    ),
];

fn kafka_comparison_group_g02777() -> GroupSpec {
    let mut b = GroupSpec::builder()
        .topic_with_racks(
            "t0",
            13,
            racks(&[
                &["r0"],
                &["r1"],
                &["r1"],
                &["r1"],
                &["r0"],
                &["r0"],
                &["r1"],
                &["r1"],
                &["r0"],
                &["r1"],
                &["r0"],
                &["r0"],
                &["r1"],
            ]),
        )
        .topic_with_racks(
            "t1",
            11,
            racks(&[
                &["r2"],
                &["r2"],
                &["r1"],
                &["r1"],
                &["r0"],
                &["r0"],
                &["r0"],
                &["r2"],
                &["r0"],
                &["r2"],
                &["r1"],
            ]),
        )
        .topic_with_racks(
            "t2",
            9,
            racks(&[
                &["r0"],
                &["r2"],
                &["r0"],
                &["r2"],
                &["r2"],
                &["r0"],
                &["r1"],
                &["r2"],
                &["r0"],
            ]),
        )
        .topic_with_racks(
            "t3",
            12,
            racks(&[
                &["r1"],
                &["r0"],
                &["r2"],
                &["r1"],
                &["r0"],
                &["r2"],
                &["r2"],
                &["r2"],
                &["r2"],
                &["r1"],
                &["r0"],
                &["r2"],
            ]),
        )
        .topic_with_racks(
            "t4",
            6,
            racks(&[&["r2"], &["r2"], &["r0"], &["r2"], &["r0"], &["r1"]]),
        )
        .topic_with_racks("t5", 2, racks(&[&["r0"], &["r1"]]))
        .topic_with_racks(
            "t6",
            14,
            racks(&[
                &["r1"],
                &["r1"],
                &["r0"],
                &["r2"],
                &["r2"],
                &["r1"],
                &["r0"],
                &["r1"],
                &["r1"],
                &["r2"],
                &["r0"],
                &["r2"],
                &["r1"],
                &["r0"],
            ]),
        );
    let member_racks = ["r0", "r1", "r1", "r2", "r1"];
    let topics = ["t0", "t1", "t2", "t3", "t4", "t5", "t6"];
    for ((id, owned), rack) in G02777_OWNED.iter().zip(member_racks) {
        b = b.member(owning(with_rack(member(id, &topics), rack), owned, 4));
    }
    b.build().expect("valid")
}

/// Groups of the comparison (seed 1) in the harness's text form, with Kafka's figures: sizes
/// largest first, kept partitions, and (cooperative) partitions withheld by round 1.
struct KafkaCase {
    id: &'static str,
    group: &'static str,
    sizes: &'static [usize],
    kept: usize,
    withheld: usize,
}

/// g00497: Kafka's `StickyAssignor` gives the two members subscribing to all five topics 6 and 6
/// partitions, Gregor gave them 6 and 5 (another member taking the sixth), at the same sizes and
/// kept count.
const G00497: KafkaCase = KafkaCase {
    id: "g00497",
    group: "
        TOPIC t0 2
        TOPIC t1 5
        TOPIC t2 6
        TOPIC t3 3
        TOPIC t4 6
        MEMBER c03 - 8 t1,t3 t1:1,t3:0,t3:1,t3:2
        MEMBER c02 - 8 t0,t1,t2,t3,t4 t0:1,t1:3,t2:2,t2:3,t4:0,t4:5
        MEMBER c00 - 8 t0,t1,t2,t3,t4 t0:0,t1:4,t2:0,t2:4,t4:2,t4:4
        MEMBER c01 - 8 t1,t2,t4 t1:0,t1:2,t2:1,t2:5,t4:1,t4:3
    ",
    sizes: &[6, 6, 5, 5],
    kept: 21,
    withheld: 1,
};

/// g02943: two members with all six topics at 3 and 2 in Gregor, 3 and 3 in Kafka.
const G02943: KafkaCase = KafkaCase {
    id: "g02943",
    group: "
        TOPIC t0 3
        TOPIC t1 4
        TOPIC t2 1
        TOPIC t3 4
        TOPIC t4 5
        TOPIC t5 3
        MEMBER c05 - 8 t0,t1,t2,t3,t4,t5 t1:1,t1:3,t2:0,t3:1
        MEMBER c01 - 8 t0,t1,t3,t5 t1:0,t5:0,t5:2
        MEMBER c06 - 8 t4,t5 t0:0,t1:2,t3:3
        MEMBER c04 - 8 t0,t1,t3,t5 t0:2,t3:0
        MEMBER c00 - 8 t4 t4:0,t4:1
        MEMBER c03 - 8 t0,t1,t2,t3,t4,t5 t4:2,t5:1
        MEMBER c02 - 8 t3 t3:2
        MEMBER c07 - 8 t0,t1 t0:1,t4:4
    ",
    sizes: &[3, 3, 3, 3, 2, 2, 2, 2],
    kept: 14,
    withheld: 5,
};

/// g02155: t1-3 is claimed by c01 and c02 in generation 6; Gregor dealt it to a third member
/// and so withheld it (4 withheld), Kafka withholds 3.
const G02155: KafkaCase = KafkaCase {
    id: "g02155",
    group: "
        TOPIC t0 4
        TOPIC t1 5
        MEMBER c04 - - t0,t1 -
        MEMBER c05 - - t0,t1 -
        MEMBER c07 - 5 t0 t0:0,t0:1,t0:2,t0:3
        MEMBER c02 - 6 t1 t1:3
        MEMBER c00 - - t1 -
        MEMBER c06 - 6 t0,t1 t1:1
        MEMBER c01 - 6 t0,t1 t1:0,t1:3,t1:4
        MEMBER c03 - - t0,t1 -
    ",
    sizes: &[2, 1, 1, 1, 1, 1, 1, 1],
    kept: 4,
    withheld: 3,
};

/// g02735: t4-0 is claimed by c07 and c03 in generation 7 (Gregor withheld 4, Kafka 3).
const G02735: KafkaCase = KafkaCase {
    id: "g02735",
    group: "
        TOPIC t0 1
        TOPIC t1 5
        TOPIC t2 4
        TOPIC t3 4
        TOPIC t4 6
        TOPIC t5 2
        MEMBER c01 - 6 t0,t1,t4,t5 t0:0,t3:3,t4:2,t4:5
        MEMBER c06 - 6 t0,t2,t3 t2:2,t2:3
        MEMBER c07 - 7 t3,t4 t1:1,t1:4,t4:0,t4:1,t4:4
        MEMBER c04 - 7 t0,t2 t2:1
        MEMBER n00 - - t1,t2,t3,t4,t5 -
        MEMBER c00 - 7 t0,t1,t2,t3 t1:2,t3:2
        MEMBER n01 - - t0,t1,t2,t4,t5 -
        MEMBER c03 - 7 t1,t4 t1:0,t1:3,t4:0
        MEMBER c05 - 7 t5 t5:0,t5:1
    ",
    sizes: &[3, 3, 3, 3, 2, 2, 2, 2, 2],
    kept: 14,
    withheld: 3,
};

/// The harness was rebuilt on another machine (same Kafka commit, same shapes of groups, but its
/// own random generator), so the groups below are numbered by that harness's seed and index.
/// In each, a partition claimed by several members (a tie in one generation, or a stale claim)
/// went to a member that does not claim it while a claimant of it sat one partition lower, with
/// no free partition to swap: handing it over outright keeps the sorted sizes, the kept count
/// and every class's spread, and round 1 withholds it no longer.
///
/// Seed 2, g02811: t1-5 is claimed by c01 and c03 (generation 6) and c00 (8, the valid owner),
/// t1-3 and t1-1 by c03 (6) and c04 (8); Kafka withholds nothing, Gregor withheld one.
const S2_G02811: KafkaCase = KafkaCase {
    id: "s2-g02811",
    group: "
        TOPIC t0 3
        TOPIC t1 7
        MEMBER c01 - 6 t0,t1 t1:5
        MEMBER c02 - 6 t1 t1:0
        MEMBER c03 - 6 t1 t1:1,t1:2,t1:3,t1:5
        MEMBER c04 - 8 t1 t1:6,t1:3,t1:1
        MEMBER c00 - 8 t1 t1:4,t1:5
    ",
    sizes: &[3, 2, 2, 2, 1],
    kept: 6,
    withheld: 0,
};

/// Seed 1, g01683: t1-2 is claimed by c03 and c04 in generation 2 (Kafka withholds 1, Gregor
/// withheld 2).
const S1_G01683: KafkaCase = KafkaCase {
    id: "s1-g01683",
    group: "
        TOPIC t0 1
        TOPIC t1 3
        MEMBER c03 - 2 t0,t1 t1:2,t1:1
        MEMBER c01 - 2 t0 -
        MEMBER c02 - 1 t0 -
        MEMBER n01 - - t0,t1 -
        MEMBER c06 - 2 t1 t1:0,t1:1
        MEMBER n00 - - t0 -
        MEMBER c00 - 2 t0,t1 -
        MEMBER c08 - 1 t0,t1 t0:0
        MEMBER c04 - 2 t0,t1 t0:0,t1:2
        MEMBER c07 - 2 t0 -
    ",
    sizes: &[1, 1, 1, 1, 0, 0, 0, 0, 0, 0],
    kept: 2,
    withheld: 1,
};

/// Seed 3, g00906: t0-2 and t1-3 are claimed by two members of generation 2 each (Kafka
/// withholds 1, Gregor withheld 2).
const S3_G00906: KafkaCase = KafkaCase {
    id: "s3-g00906",
    group: "
        TOPIC t0 7
        TOPIC t1 4
        MEMBER c07 - 2 t0,t1 t0:4
        MEMBER c08 - 2 t0,t1 t1:3
        MEMBER c09 - 1 t0,t1 t1:2
        MEMBER c02 - 2 t0,t1 t0:6,t0:2,t1:3
        MEMBER c04 - 0 t0,t1 t1:1
        MEMBER n00 - - t0,t1 -
        MEMBER n02 - - t1 -
        MEMBER c10 - 2 t0,t1 t1:0
        MEMBER c00 - 2 t0,t1 t0:0
        MEMBER c03 - 2 t0,t1 t0:2
        MEMBER c05 - 2 t0,t1 t0:5,t1:2
        MEMBER c01 - 0 t0,t1 t0:3
        MEMBER n01 - - t0,t1 -
        MEMBER c06 - 2 t0,t1 t0:1
    ",
    sizes: &[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0],
    kept: 8,
    withheld: 1,
};

/// Seed 2, g00460 (racks): t1-2 is claimed by c01 and c06 in generation 5, both on rack r1
/// where it has a replica (Kafka withholds 3, Gregor withheld 4).
const S2_G00460: KafkaCase = KafkaCase {
    id: "s2-g00460",
    group: "
        TOPIC t0 1 0.1
        TOPIC t1 10 0;0.1;0.1;0.1;0.1;0.1;0.1;0;0.1;0.1
        MEMBER c01 r1 5 t1 t1:2,t1:9,t1:6
        MEMBER c03 r1 3 t0,t1 -
        MEMBER c00 - 5 t1 -
        MEMBER c06 r1 5 t0,t1 t1:2
        MEMBER c02 r0 5 t0,t1 t1:0,t1:4,t1:5,t1:6,t1:1
        MEMBER c04 r0 5 t1 t1:7,t1:9
        MEMBER c05 r1 4 t0,t1 t0:0,t1:1
        MEMBER c07 r0 4 t0,t1 t1:3,t1:8
    ",
    sizes: &[2, 2, 2, 1, 1, 1, 1, 1],
    kept: 6,
    withheld: 3,
};

/// Seed 3, g02229: the classes {t1} (c03, c07, c01) and {t0} (c06, c02, c00) were each left
/// with one member at 2, because levelling either needed a member of the level class {t0, t1}
/// (c05, c04, both at 1) to rise, which splits that class. Both of c05 and c04 can rise
/// (c05 then keeps t1-3 as well, c07 gives up t1-1, c00 the fresh t0-0): every class level,
/// same sizes and kept count. Kafka's final assignment leaves two classes split.
const S3_G02229: KafkaCase = KafkaCase {
    id: "s3-g02229",
    group: "
        TOPIC t0 6
        TOPIC t1 4
        MEMBER c05 - 4 t0,t1 t0:2,t1:3,t0:4
        MEMBER c06 - 2 t0 t0:1
        MEMBER c03 - 2 t1 t0:0
        MEMBER c04 - 4 t0,t1 t0:4
        MEMBER c07 - 4 t1 t1:1,t1:2
        MEMBER c01 - 4 t1 t1:0
        MEMBER c02 - 4 t0 t0:5
        MEMBER c00 - 4 t0 t0:3
    ",
    sizes: &[2, 2, 1, 1, 1, 1, 1, 1],
    kept: 7,
    withheld: 3,
};

/// The cooperative target (round 1 plus pending) and round 1's withheld count.
fn cooperative(s: &GroupSpec) -> (BTreeMap<String, Vec<String>>, usize) {
    let a = run("cooperative-sticky", s);
    let withheld = a.members.iter().map(|m| m.pending.len()).sum();
    (target(s, "cooperative-sticky"), withheld)
}

/// Sizes as Kafka's, at least Kafka's kept count; returns the result.
fn check_against_kafka(
    case: &KafkaCase,
    s: &GroupSpec,
    strategy: &str,
) -> BTreeMap<String, Vec<String>> {
    let t = target(s, strategy);
    assert_eq!(
        sorted_sizes(&t),
        case.sizes,
        "{} {strategy}: sizes",
        case.id
    );
    let k = kept_by_owner(s, &t);
    assert!(
        k >= case.kept,
        "{} {strategy}: kept {k}, Kafka {}",
        case.id,
        case.kept
    );
    t
}

#[test]
fn classes_with_identical_subscriptions_are_level_where_kafkas_are() {
    for case in [&G00497, &G02943] {
        let s = harness_group(case.group);
        for strategy in ["sticky", "cooperative-sticky"] {
            let t = check_against_kafka(case, &s, strategy);
            // Kafka's result has every class level here.
            assert_eq!(class_spread(&s, &t), 0, "{} {strategy}: {t:?}", case.id);
        }
    }
}

#[test]
fn a_class_levels_when_a_level_class_can_move_whole() {
    let s = harness_group(S3_G02229.group);
    for strategy in ["sticky", "cooperative-sticky"] {
        let t = check_against_kafka(&S3_G02229, &s, strategy);
        assert_eq!(class_spread(&s, &t), 0, "{strategy}: {t:?}");
    }
}

#[test]
fn partitions_claimed_twice_go_to_a_claimant_and_are_not_withheld() {
    for case in [
        &G02155, &G02735, &S2_G02811, &S1_G01683, &S3_G00906, &S2_G00460,
    ] {
        let s = harness_group(case.group);
        check_against_kafka(case, &s, "sticky");
        check_against_kafka(case, &s, "cooperative-sticky");
        let (_, withheld) = cooperative(&s);
        assert!(
            withheld <= case.withheld,
            "{}: round 1 withholds {withheld}, Kafka {}",
            case.id,
            case.withheld
        );
        // Safety: whatever round 1 gives that somebody claims goes to one of its claimants.
        let a = run("cooperative-sticky", &s);
        let now = named(&s, &a);
        for (m, ps) in &now {
            for p in ps {
                let claimants: Vec<&str> = s
                    .members()
                    .iter()
                    .filter(|x| s.display_all(&x.owned).contains(p))
                    .map(|x| x.member_id.as_str())
                    .collect();
                assert!(
                    claimants.is_empty() || claimants.contains(&m.as_str()),
                    "{}: {p} given to {m} now, claimed by {claimants:?}",
                    case.id
                );
            }
        }
    }
}

/// g00394 (identical subscriptions, racks): the swap towards claimants once gave c08 a
/// partition with no replica on its rack; owning it in the follow-up round, c08 had to give it
/// up again for rack locality (a third round, where Kafka needs two). Round 2 must withhold
/// nothing.
const G00394: &str = "
    TOPIC t0 11 2;0;1;3;3;2;3;3;1;0;3
    TOPIC t1 3 1;1;0
    TOPIC t2 7 3;0;2;3;3;2;0
    TOPIC t3 2 2;1
    TOPIC t4 10 0;0;0;1;1;0;3;2;3;0
    TOPIC t5 13 0;2;2;2;3;0;1;1;2;0;3;0;2
    MEMBER c03 - 3 t0,t1,t2,t3,t4,t5 t0:10,t2:3,t5:4
    MEMBER c12 r1 3 t0,t1,t2,t3,t4,t5 t0:0,t4:7,t5:12
    MEMBER c06 r3 3 t0,t1,t2,t3,t4,t5 t0:6,t4:3,t5:1
    MEMBER c00 r0 3 t0,t1,t2,t3,t4,t5 t0:1,t2:4,t5:9
    MEMBER c10 r3 3 t0,t1,t2,t3,t4,t5 t2:1,t2:6,t5:2
    MEMBER c11 - 3 t0,t1,t2,t3,t4,t5 t0:9,t2:5,t4:8
    MEMBER c08 r2 3 t0,t1,t2,t3,t4,t5 t0:2,t4:0,t5:3
    MEMBER c14 r1 3 t0,t1,t2,t3,t4,t5 t0:3,t2:2,t5:10
    MEMBER c13 r1 3 t0,t1,t2,t3,t4,t5 t1:1,t3:0,t5:7
    MEMBER c07 r2 3 t0,t1,t2,t3,t4,t5 t0:8,t4:6,t5:5
    MEMBER c01 r1 3 t0,t1,t2,t3,t4,t5 t0:5,t4:4,t4:9
    MEMBER c02 r3 3 t0,t1,t2,t3,t4,t5 t0:4,t4:2,t5:8
";

/// The harness text with every member owning what `now` gave it, in generation `generation`.
fn follow_up(text: &str, now: &BTreeMap<String, Vec<String>>, generation: i32) -> String {
    text.lines()
        .map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.first() != Some(&"MEMBER") {
                return line.to_string();
            }
            let owned: Vec<String> = now[f[1]]
                .iter()
                .map(|p| {
                    p.rsplit_once('-')
                        .map(|(t, n)| format!("{t}:{n}"))
                        .expect("topic-N")
                })
                .collect();
            let owned = if owned.is_empty() {
                "-".to_string()
            } else {
                owned.join(",")
            };
            format!("MEMBER {} {} {generation} {} {owned}", f[1], f[2], f[4])
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn swaps_towards_claimants_place_nothing_off_rack_that_the_next_round_drops() {
    let s = harness_group(G00394);
    let r1 = run("cooperative-sticky", &s);
    let now = named(&s, &r1);
    let s2 = harness_group(&follow_up(G00394, &now, 4));
    let r2 = run("cooperative-sticky", &s2);
    let withheld: Vec<(String, Vec<String>)> = pending(&s2, &r2)
        .into_iter()
        .filter(|(_, ps)| !ps.is_empty())
        .collect();
    assert!(
        withheld.is_empty(),
        "round 2 withholds {withheld:?}; round 1 gave {now:?}"
    );
}
