//! Every worked example of the seed documents (000, 001 §6, 002), with its expected result.

mod common;

use common::*;
use gregor_assign::GroupSpec;

// ---------------------------------------------------------------- seed 000: range

#[test]
fn seed000_range_three_partitions_two_consumers() {
    let s = spec(
        &[("t", 3)],
        vec![
            member("consumer-test-group-1-uuid", &["t"]),
            member("consumer-test-group-2-uuid", &["t"]),
        ],
    );
    assert_eq!(
        named(&s, &run("range", &s)),
        expect(&[
            ("consumer-test-group-1-uuid", &["t-0", "t-1"]),
            ("consumer-test-group-2-uuid", &["t-2"]),
        ])
    );
}

#[test]
fn seed000_member_order_puts_instance_ids_first() {
    // "z" has a group.instance.id, so it sorts before "a" and takes the extra partition.
    let s = spec(
        &[("t", 3)],
        vec![
            member("a", &["t"]),
            with_instance(member("z", &["t"]), "static-1"),
        ],
    );
    assert_eq!(
        named(&s, &run("range", &s)),
        expect(&[("a", &["t-2"]), ("z", &["t-0", "t-1"])])
    );
    // Two instance ids compare with each other, not with member ids.
    let s = spec(
        &[("t", 3)],
        vec![
            with_instance(member("a", &["t"]), "i-2"),
            with_instance(member("b", &["t"]), "i-1"),
        ],
    );
    assert_eq!(
        named(&s, &run("range", &s)),
        expect(&[("a", &["t-2"]), ("b", &["t-0", "t-1"])])
    );
}

/// The rack-aware range walk-through: two co-partitioned topics of three partitions; consumer 1's
/// rack hosts partition 0 of both topics; partition 1 of topic 0 is on consumer 0's rack but
/// partition 1 of topic 1 is not, so neither consumer gets partition 1 in the rack pass; nor
/// partition 2, which is on a rack without consumers. The leftovers then go by range quotas.
#[test]
fn seed000_range_rack_aware_co_partitioned() {
    let racks0 = racks(&[&["rack0"], &["rack1"], &["rack2"]]);
    let racks1 = racks(&[&["rack0"], &["rack2"], &["rack2"]]);
    let s = GroupSpec::builder()
        .topic_with_racks("topic0", 3, racks0)
        .topic_with_racks("topic1", 3, racks1)
        .member(with_rack(
            member("consumer0", &["topic0", "topic1"]),
            "rack1",
        ))
        .member(with_rack(
            member("consumer1", &["topic0", "topic1"]),
            "rack0",
        ))
        .build()
        .expect("valid");
    assert_eq!(
        named(&s, &run("range", &s)),
        expect(&[
            (
                "consumer0",
                &["topic0-1", "topic0-2", "topic1-1", "topic1-2"]
            ),
            ("consumer1", &["topic0-0", "topic1-0"]),
        ])
    );
    // Without racks the same group is plain range.
    let plain = spec(
        &[("topic0", 3), ("topic1", 3)],
        vec![
            member("consumer0", &["topic0", "topic1"]),
            member("consumer1", &["topic0", "topic1"]),
        ],
    );
    assert_eq!(
        named(&plain, &run("range", &plain)),
        expect(&[
            (
                "consumer0",
                &["topic0-0", "topic0-1", "topic1-0", "topic1-1"]
            ),
            ("consumer1", &["topic0-2", "topic1-2"]),
        ])
    );
}

#[test]
fn seed000_range_rack_logic_off_when_every_partition_has_the_same_racks() {
    let same = racks(&[&["r0", "r1"], &["r1", "r0"], &["r0", "r1"]]);
    let s = GroupSpec::builder()
        .topic_with_racks("t", 3, same)
        .member(with_rack(member("c0", &["t"]), "r1"))
        .member(with_rack(member("c1", &["t"]), "r0"))
        .build()
        .expect("valid");
    assert_eq!(
        named(&s, &run("range", &s)),
        expect(&[("c0", &["t-0", "t-1"]), ("c1", &["t-2"])])
    );
}

// ---------------------------------------------------------------- seed 000: round-robin

#[test]
fn seed000_roundrobin_skips_non_subscribers() {
    let s = spec(
        &[("topic0", 3), ("topic1", 3)],
        vec![
            member("consumer0", &["topic0", "topic1"]),
            member("consumer1", &["topic0"]),
        ],
    );
    assert_eq!(
        named(&s, &run("roundrobin", &s)),
        expect(&[
            (
                "consumer0",
                &["topic0-0", "topic0-2", "topic1-0", "topic1-1", "topic1-2"]
            ),
            ("consumer1", &["topic0-1"]),
        ])
    );
}

// ---------------------------------------------------------------- seed 000: sticky

#[test]
fn seed000_sticky_constrained_round_robin() {
    for strategy in ["sticky", "cooperative-sticky"] {
        let s = spec(
            &[("topic0", 3), ("topic1", 2)],
            vec![
                member("consumer0", &["topic0", "topic1"]),
                member("consumer1", &["topic0", "topic1"]),
            ],
        );
        assert_eq!(
            named(&s, &run(strategy, &s)),
            expect(&[
                ("consumer0", &["topic0-0", "topic0-2", "topic1-1"]),
                ("consumer1", &["topic0-1", "topic1-0"]),
            ]),
            "{strategy}"
        );
    }
}

/// Rack-aware constrained assignment without previous owners: partitions sorted by how many
/// consumers share a rack with them (topic0-2, topic1-1 on a rack without consumers first), the
/// rack pass gives topic0-0 and topic1-0 to consumer 1 and topic0-1 to consumer 0, and the plain
/// pass finishes with topic0-2 to consumer 0 and topic1-1 to consumer 1.
#[test]
fn seed000_sticky_constrained_rack_aware() {
    let s = GroupSpec::builder()
        .topic_with_racks("topic0", 3, racks(&[&["rack1"], &["rack0"], &["rack2"]]))
        .topic_with_racks("topic1", 2, racks(&[&["rack1"], &["rack2"]]))
        .member(with_rack(
            member("consumer0", &["topic0", "topic1"]),
            "rack0",
        ))
        .member(with_rack(
            member("consumer1", &["topic0", "topic1"]),
            "rack1",
        ))
        .build()
        .expect("valid");
    for strategy in ["sticky", "cooperative-sticky"] {
        assert_eq!(
            named(&s, &run(strategy, &s)),
            expect(&[
                ("consumer0", &["topic0-1", "topic0-2"]),
                ("consumer1", &["topic0-0", "topic1-0", "topic1-1"]),
            ]),
            "{strategy}"
        );
    }
}

/// Rack-aware with previous owners: consumer 0 owned topic0-0, topic0-1 and topic1-0; topic0-1
/// has no replica on its rack and is dropped; it keeps the other two (its max quota) and
/// topic0-1 goes to consumer 1, whose rack hosts it.
#[test]
fn seed000_sticky_constrained_rack_aware_with_owners() {
    let s = GroupSpec::builder()
        .topic_with_racks("topic0", 2, racks(&[&["rack0"], &["rack1"]]))
        .topic_with_racks("topic1", 1, racks(&[&["rack0"]]))
        .member(owning(
            with_rack(member("consumer0", &["topic0", "topic1"]), "rack0"),
            &["topic0-0", "topic0-1", "topic1-0"],
            1,
        ))
        .member(with_rack(
            member("consumer1", &["topic0", "topic1"]),
            "rack1",
        ))
        .build()
        .expect("valid");
    let expected = expect(&[
        ("consumer0", &["topic0-0", "topic1-0"]),
        ("consumer1", &["topic0-1"]),
    ]);
    assert_eq!(named(&s, &run("sticky", &s)), expected);
    // Cooperative: topic0-1 changes owner, so consumer 1 gets it only in the follow-up round.
    let a = run("cooperative-sticky", &s);
    assert_eq!(
        named(&s, &a),
        expect(&[("consumer0", &["topic0-0", "topic1-0"]), ("consumer1", &[])])
    );
    assert_eq!(
        pending(&s, &a),
        expect(&[("consumer0", &[]), ("consumer1", &["topic0-1"])])
    );
}

/// General builder (different subscriptions), rack preference among equally loaded members.
#[test]
fn seed000_sticky_general_prefers_rack_among_least_loaded() {
    let s = GroupSpec::builder()
        .topic_with_racks("a", 2, racks(&[&["r1"], &["r0"]]))
        .topic_with_racks("b", 1, racks(&[&["r0"]]))
        .member(with_rack(member("c0", &["a", "b"]), "r0"))
        .member(with_rack(member("c1", &["a"]), "r1"))
        .build()
        .expect("valid");
    assert_eq!(
        named(&s, &run("sticky", &s)),
        expect(&[("c0", &["a-1", "b-0"]), ("c1", &["a-0"])])
    );
}

// ---------------------------------------------------------------- seed 001 §6

#[test]
fn seed001_range_extra_partitions_accumulate_per_topic() {
    let s = spec(
        &[("t0", 4)],
        vec![
            member("C0", &["t0"]),
            member("C1", &["t0"]),
            member("C2", &["t0"]),
        ],
    );
    assert_eq!(
        named(&s, &run("range", &s)),
        expect(&[
            ("C0", &["t0-0", "t0-1"]),
            ("C1", &["t0-2"]),
            ("C2", &["t0-3"])
        ])
    );
    let s = spec(
        &[("t0", 4), ("t1", 4)],
        vec![
            member("C0", &["t0", "t1"]),
            member("C1", &["t0", "t1"]),
            member("C2", &["t0", "t1"]),
        ],
    );
    assert_eq!(
        named(&s, &run("range", &s)),
        expect(&[
            ("C0", &["t0-0", "t0-1", "t1-0", "t1-1"]),
            ("C1", &["t0-2", "t1-2"]),
            ("C2", &["t0-3", "t1-3"]),
        ])
    );
}

#[test]
fn seed001_roundrobin_unequal_subscriptions() {
    let s = spec(
        &[("T1", 3), ("T2", 2)],
        vec![member("C0", &["T1", "T2"]), member("C1", &["T2"])],
    );
    assert_eq!(
        named(&s, &run("roundrobin", &s)),
        expect(&[("C0", &["T1-0", "T1-1", "T1-2", "T2-1"]), ("C1", &["T2-0"])])
    );
}

#[test]
fn seed001_sticky_example_one_and_consumer_failure() {
    let topics = [("t0", 2), ("t1", 2), ("t2", 2), ("t3", 2)];
    let all = ["t0", "t1", "t2", "t3"];
    let members = vec![member("C0", &all), member("C1", &all), member("C2", &all)];
    let s = spec(&topics, members.clone());
    let first = named(&s, &run("sticky", &s));
    assert_eq!(
        first,
        expect(&[
            ("C0", &["t0-0", "t1-1", "t3-0"]),
            ("C1", &["t0-1", "t2-0", "t3-1"]),
            ("C2", &["t1-0", "t2-1"]),
        ])
    );
    // Round-robin gives the same initial layout...
    assert_eq!(named(&s, &run("roundrobin", &s)).get("C2"), first.get("C2"));
    // ...but when C1 leaves, only sticky keeps C0's and C2's partitions in place.
    let survivors: Vec<_> = next_generation(&members, &first, 1)
        .into_iter()
        .filter(|m| m.member_id != "C1")
        .collect();
    let s2 = spec(&topics, survivors);
    let after = named(&s2, &run("sticky", &s2));
    for m in ["C0", "C2"] {
        for p in &first[m] {
            assert!(after[m].contains(p), "{m} lost {p}: {after:?}");
        }
        assert_eq!(after[m].len(), 4);
    }
    assert_eq!(moved(&first, &after), 3, "only C1's partitions move");
    let rr = spec(&topics, vec![member("C0", &all), member("C2", &all)]);
    assert!(moved(&first, &named(&rr, &run("roundrobin", &rr))) > 3);
}

#[test]
fn seed001_sticky_example_two_unequal_subscriptions() {
    let topics = [("t0", 1), ("t1", 2), ("t2", 3)];
    let members = vec![
        member("C0", &["t0"]),
        member("C1", &["t0", "t1"]),
        member("C2", &["t0", "t1", "t2"]),
    ];
    let s = spec(&topics, members.clone());
    assert_eq!(
        named(&s, &run("roundrobin", &s)),
        expect(&[
            ("C0", &["t0-0"]),
            ("C1", &["t1-0"]),
            ("C2", &["t1-1", "t2-0", "t2-1", "t2-2"]),
        ])
    );
    let first = named(&s, &run("sticky", &s));
    assert_eq!(
        first,
        expect(&[
            ("C0", &["t0-0"]),
            ("C1", &["t1-0", "t1-1"]),
            ("C2", &["t2-0", "t2-1", "t2-2"]),
        ])
    );
    let survivors: Vec<_> = next_generation(&members, &first, 1)
        .into_iter()
        .filter(|m| m.member_id != "C0")
        .collect();
    let s2 = spec(&topics, survivors);
    assert_eq!(
        named(&s2, &run("sticky", &s2)),
        expect(&[
            ("C1", &["t0-0", "t1-0", "t1-1"]),
            ("C2", &["t2-0", "t2-1", "t2-2"])
        ])
    );
}

// ---------------------------------------------------------------- seed 002

fn p(ps: &[u32]) -> Vec<String> {
    ps.iter().map(|p| format!("v2c4.assign-{p}")).collect()
}

/// Runs A alone, then A+B, then A+B+C with each strategy feeding ownership forward; for
/// cooperative-sticky each change takes two rounds. Returns the final assignment of each step.
fn seed002_steps(strategy: &str) -> Vec<std::collections::BTreeMap<String, Vec<String>>> {
    let topic = [("v2c4.assign", 7)];
    let all = ["A", "B", "C"];
    let mut owned = std::collections::BTreeMap::new();
    let mut generation = 0;
    let mut steps = Vec::new();
    for n in 1..=3 {
        let rounds = if strategy == "cooperative-sticky" && n > 1 {
            2
        } else {
            1
        };
        for _ in 0..rounds {
            generation += 1;
            let members: Vec<_> = all[..n]
                .iter()
                .map(|m| member(m, &["v2c4.assign"]))
                .collect();
            let s = spec(&topic, next_generation(&members, &owned, generation - 1));
            owned = named(&s, &run(strategy, &s));
        }
        steps.push(owned.clone());
    }
    steps
}

#[test]
fn seed002_seven_partitions_three_joins() {
    let range = seed002_steps("range");
    assert_eq!(
        range[1],
        expect_p(&[("A", &[0, 1, 2, 3]), ("B", &[4, 5, 6])])
    );
    assert_eq!(
        range[2],
        expect_p(&[("A", &[0, 1, 2]), ("B", &[3, 4]), ("C", &[5, 6])])
    );
    assert_eq!(moved(&range[1], &range[2]), 3);

    let rr = seed002_steps("roundrobin");
    assert_eq!(rr[1], expect_p(&[("A", &[0, 2, 4, 6]), ("B", &[1, 3, 5])]));
    assert_eq!(
        rr[2],
        expect_p(&[("A", &[0, 3, 6]), ("B", &[1, 4]), ("C", &[2, 5])])
    );
    assert_eq!(moved(&rr[1], &rr[2]), 4);

    for strategy in ["sticky", "cooperative-sticky"] {
        let st = seed002_steps(strategy);
        assert_eq!(
            st[0],
            expect_p(&[("A", &[0, 1, 2, 3, 4, 5, 6])]),
            "{strategy}"
        );
        assert_eq!(
            st[1],
            expect_p(&[("A", &[0, 1, 2, 3]), ("B", &[4, 5, 6])]),
            "{strategy}"
        );
        // B keeps 4,5,6; A gives up 2 and 3 to C.
        assert_eq!(
            st[2],
            expect_p(&[("A", &[0, 1]), ("B", &[4, 5, 6]), ("C", &[2, 3])]),
            "{strategy}"
        );
        assert_eq!(moved(&st[1], &st[2]), 2, "{strategy}");
    }
}

/// Cooperative-sticky when C joins: the first round gives C nothing and withholds p2, p3, which
/// A revokes while B revokes nothing; the second round hands p2, p3 to C.
#[test]
fn seed002_cooperative_two_rounds_when_c_joins() {
    let topic = [("v2c4.assign", 7)];
    let mk = |id: &str, owned: &[u32]| {
        let names = p(owned);
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        owning(member(id, &["v2c4.assign"]), &refs, 3)
    };
    let s = spec(
        &topic,
        vec![mk("A", &[0, 1, 2, 3]), mk("B", &[4, 5, 6]), mk("C", &[])],
    );
    let round1 = run("cooperative-sticky", &s);
    assert_eq!(
        named(&s, &round1),
        expect_p(&[("A", &[0, 1]), ("B", &[4, 5, 6]), ("C", &[])])
    );
    assert_eq!(
        pending(&s, &round1),
        expect_p(&[("A", &[]), ("B", &[]), ("C", &[2, 3])])
    );
    let s = spec(
        &topic,
        vec![mk("A", &[0, 1]), mk("B", &[4, 5, 6]), mk("C", &[])],
    );
    let round2 = run("cooperative-sticky", &s);
    assert_eq!(
        named(&s, &round2),
        expect_p(&[("A", &[0, 1]), ("B", &[4, 5, 6]), ("C", &[2, 3])])
    );
    assert!(round2.members.iter().all(|m| m.pending.is_empty()));
}

#[test]
fn seed002_multi_topic_skew() {
    let topics = [("v2c4.ta", 4), ("v2c4.tb", 4)];
    let members: Vec<_> = ["multi-A", "multi-B", "multi-C"]
        .iter()
        .map(|m| member(m, &["v2c4.ta", "v2c4.tb"]))
        .collect();
    let s = spec(&topics, members);
    assert_eq!(
        named(&s, &run("range", &s)),
        expect(&[
            (
                "multi-A",
                &["v2c4.ta-0", "v2c4.ta-1", "v2c4.tb-0", "v2c4.tb-1"]
            ),
            ("multi-B", &["v2c4.ta-2", "v2c4.tb-2"]),
            ("multi-C", &["v2c4.ta-3", "v2c4.tb-3"]),
        ])
    );
    assert_eq!(
        named(&s, &run("roundrobin", &s)),
        expect(&[
            ("multi-A", &["v2c4.ta-0", "v2c4.ta-3", "v2c4.tb-2"]),
            ("multi-B", &["v2c4.ta-1", "v2c4.tb-0", "v2c4.tb-3"]),
            ("multi-C", &["v2c4.ta-2", "v2c4.tb-1"]),
        ])
    );
}

fn expect_p(pairs: &[(&str, &[u32])]) -> std::collections::BTreeMap<String, Vec<String>> {
    pairs.iter().map(|(m, ps)| (m.to_string(), p(ps))).collect()
}
