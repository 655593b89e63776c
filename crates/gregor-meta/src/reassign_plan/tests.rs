use super::*;
use proptest::prelude::*;

type Assignment = BTreeMap<String, Vec<BrokerId>>;

fn brokers(ids: &[BrokerId]) -> Vec<PlanBroker> {
    ids.iter()
        .map(|&id| PlanBroker { id, rack: None })
        .collect()
}

fn racked(racks: &[(BrokerId, &str)]) -> Vec<PlanBroker> {
    racks
        .iter()
        .map(|(id, r)| PlanBroker {
            id: *id,
            rack: Some(r.to_string()),
        })
        .collect()
}

fn assignment(parts: &[(&str, &[BrokerId])]) -> Assignment {
    parts
        .iter()
        .map(|(p, r)| (p.to_string(), r.to_vec()))
        .collect()
}

fn plan(current: &Assignment, brokers: &[PlanBroker]) -> Plan<String> {
    plan_with(current, brokers, &BTreeMap::new(), false, None)
}

fn plan_with(
    current: &Assignment,
    brokers: &[PlanBroker],
    sizes: &BTreeMap<String, u64>,
    rack_aware: bool,
    max_moves: Option<usize>,
) -> Plan<String> {
    plan_reassignment(&PlanInput {
        current,
        brokers,
        sizes,
        rack_aware,
        max_moves,
    })
    .expect("valid input")
}

/// Checks what every plan must hold: same partitions, replication factors kept, no broker
/// twice, only allowed brokers (unless a `max_moves` cut left one), racks spread when asked,
/// and the moves list says exactly what changed.
fn assert_valid(current: &Assignment, brokers: &[PlanBroker], p: &Plan<String>, rack_aware: bool) {
    assert_eq!(
        p.target.keys().collect::<Vec<_>>(),
        current.keys().collect::<Vec<_>>()
    );
    let allowed: BTreeSet<BrokerId> = brokers.iter().map(|b| b.id).collect();
    let rack_of: BTreeMap<BrokerId, &str> = brokers
        .iter()
        .map(|b| (b.id, b.rack.as_deref().unwrap_or("")))
        .collect();
    let mut rack_sizes: BTreeMap<&str, usize> = BTreeMap::new();
    for r in rack_of.values() {
        *rack_sizes.entry(r).or_default() += 1;
    }
    let rack_sizes: Vec<usize> = rack_sizes.into_values().collect();
    for (part, target) in &p.target {
        let now = &current[part];
        assert_eq!(target.len(), now.len(), "{part}: replication factor kept");
        let distinct: BTreeSet<_> = target.iter().collect();
        assert_eq!(
            distinct.len(),
            target.len(),
            "{part}: {target:?} repeats a broker"
        );
        for b in target {
            assert!(
                allowed.contains(b) || now.contains(b),
                "{part}: {b} is neither allowed nor already there"
            );
        }
        if rack_aware && target.iter().all(|b| allowed.contains(b)) {
            let mut per_rack: BTreeMap<&str, usize> = BTreeMap::new();
            for b in target {
                *per_rack.entry(rack_of[b]).or_default() += 1;
            }
            let most = per_rack.values().max().copied().unwrap_or(0);
            assert!(
                most <= rack_cap(target.len(), &rack_sizes),
                "{part}: {target:?} crowds a rack"
            );
        }
    }
    let added: usize = p
        .target
        .iter()
        .map(|(k, t)| t.iter().filter(|b| !current[k].contains(b)).count())
        .sum();
    assert_eq!(p.moves.len(), added, "one move per replica added");
    for m in &p.moves {
        assert!(current[&m.partition].contains(&m.from));
        assert!(!current[&m.partition].contains(&m.to));
        assert!(p.target[&m.partition].contains(&m.to));
        assert!(!p.target[&m.partition].contains(&m.from));
    }
}

#[test]
fn an_added_broker_receives_only_what_balance_needs() {
    // Seed 001's tp_re_01: five single-replica partitions on broker 0, broker 1 added.
    let current = assignment(&[
        ("p0", &[0]),
        ("p1", &[0]),
        ("p2", &[0]),
        ("p3", &[0]),
        ("p4", &[0]),
    ]);
    let p = plan(&current, &brokers(&[0, 1]));
    assert_valid(&current, &brokers(&[0, 1]), &p, false);
    assert_eq!(p.moves.len(), 2);
    assert_eq!(
        Balance::of(&p.target, &brokers(&[0, 1])).replicas,
        vec![3, 2]
    );

    // RF 2 over brokers 0 and 1; broker 2 joins: 6 partitions → 4 replicas each, 4 moves
    // (Kafka's generator re-places everything).
    let current: Assignment = (0..6)
        .map(|i| (format!("t-{i}"), vec![i % 2, 1 - i % 2]))
        .collect();
    let all = brokers(&[0, 1, 2]);
    let p = plan(&current, &all);
    assert_valid(&current, &all, &p, false);
    assert_eq!(p.moves.len(), 4);
    let balance = Balance::of(&p.target, &all);
    assert_eq!(balance.replicas, vec![4, 4, 4]);
    assert_eq!(balance.leaders, vec![2, 2, 2]);
    assert!(p.moves.iter().all(|m| m.to == 2));
}

#[test]
fn a_balanced_cluster_needs_nothing_and_leaders_move_by_reordering() {
    let current = assignment(&[("a", &[0, 1]), ("b", &[1, 2]), ("c", &[2, 0])]);
    let p = plan(&current, &brokers(&[0, 1, 2]));
    assert_eq!(p.target, current);
    assert!(p.moves.is_empty());
    assert_eq!(p.leader_changes, 0);

    // Replicas balanced, leaders all on 0: reordering fixes it without moving data.
    let current = assignment(&[
        ("a", &[0, 1]),
        ("b", &[0, 2]),
        ("c", &[1, 2]),
        ("d", &[0, 1]),
        ("e", &[0, 2]),
        ("f", &[1, 2]),
    ]);
    let all = brokers(&[0, 1, 2]);
    let p = plan(&current, &all);
    assert!(p.moves.is_empty());
    assert_eq!(Balance::of(&p.target, &all).leaders, vec![2, 2, 2]);
    assert_eq!(p.leader_changes, 2);
    for (k, t) in &p.target {
        let mut a = t.clone();
        let mut b = current[k].clone();
        a.sort();
        b.sort();
        assert_eq!(a, b, "{k}: same replicas");
    }
}

#[test]
fn a_removed_broker_is_emptied() {
    let current = assignment(&[
        ("a", &[2, 0]),
        ("b", &[1, 2]),
        ("c", &[0, 1]),
        ("d", &[2, 1]),
    ]);
    let left = brokers(&[0, 1]);
    let p = plan(&current, &left);
    assert_valid(&current, &left, &p, false);
    assert!(p.target.values().flatten().all(|b| *b != 2));
    assert_eq!(p.moves.len(), 3);
    assert!(p.moves.iter().all(|m| m.from == 2));
}

#[test]
fn bytes_break_ties_between_equal_move_counts() {
    // Two partitions on broker 0, broker 1 empty: one must move; the smaller one does.
    let current = assignment(&[("big", &[0]), ("small", &[0])]);
    let sizes: BTreeMap<String, u64> =
        [("big".to_string(), 1 << 30), ("small".to_string(), 10)].into();
    let p = plan_with(&current, &brokers(&[0, 1]), &sizes, false, None);
    assert_eq!(
        p.moves,
        vec![ReplicaMove {
            partition: "small".to_string(),
            from: 0,
            to: 1,
            bytes: Some(10)
        }]
    );
}

#[test]
fn racks_are_spread_even_when_that_costs_moves() {
    // Both replicas of each partition on rack r1; r2 has brokers 2 and 3.
    let current = assignment(&[
        ("a", &[0, 1]),
        ("b", &[1, 0]),
        ("c", &[0, 1]),
        ("d", &[1, 0]),
    ]);
    let all = racked(&[(0, "r1"), (1, "r1"), (2, "r2"), (3, "r2")]);
    let p = plan_with(&current, &all, &BTreeMap::new(), true, None);
    assert_valid(&current, &all, &p, true);
    assert_eq!(p.moves.len(), 4);
    assert_eq!(Balance::of(&p.target, &all).replicas, vec![2, 2, 2, 2]);
    // Without racks the same move count balances too, but racks are not checked.
    let plain = plan(&current, &brokers(&[0, 1, 2, 3]));
    assert_eq!(plain.moves.len(), 4);

    // One rack with one broker and RF 2 on two racks: that broker holds every partition, the
    // best balance racks allow.
    let current = assignment(&[("a", &[0, 1]), ("b", &[1, 2]), ("c", &[2, 0])]);
    let lopsided = racked(&[(0, "r1"), (1, "r1"), (2, "r2")]);
    let p = plan_with(&current, &lopsided, &BTreeMap::new(), true, None);
    assert_valid(&current, &lopsided, &p, true);
    assert!(p.target.values().all(|t| t.contains(&2)));
}

#[test]
fn max_moves_keeps_the_most_valuable_moves() {
    let current = assignment(&[
        ("a", &[9]),
        ("b", &[0]),
        ("c", &[0]),
        ("d", &[0]),
        ("e", &[0]),
        ("f", &[0]),
    ]);
    let all = brokers(&[0, 1, 2]);
    let full = plan(&current, &all);
    assert_eq!(full.moves.len(), 4);
    let cut = plan_with(&current, &all, &BTreeMap::new(), false, Some(2));
    assert_valid(&current, &all, &cut, false);
    assert_eq!(cut.moves.len(), 2);
    // The replica on broker 9 (not in the list) goes first, then one off the crowded broker 0.
    assert_eq!(
        (cut.moves[0].partition.as_str(), cut.moves[0].from),
        ("a", 9)
    );
    assert_eq!(cut.moves[1].from, 0);
    let zero = plan_with(&current, &all, &BTreeMap::new(), false, Some(0));
    assert!(zero.moves.is_empty());
    assert_eq!(zero.target, current);
}

#[test]
fn bad_input_is_refused() {
    let current = assignment(&[("a", &[0, 1])]);
    let err = |b: &[PlanBroker], rack_aware: bool| {
        plan_reassignment(&PlanInput {
            current: &current,
            brokers: b,
            sizes: &BTreeMap::new(),
            rack_aware,
            max_moves: None,
        })
        .unwrap_err()
        .to_string()
    };
    assert_eq!(err(&[], false), "the broker list is empty");
    assert_eq!(err(&brokers(&[0, 0]), false), "broker 0 is listed twice");
    assert_eq!(
        err(&brokers(&[3]), false),
        "partition a has replication factor 2, larger than the 1 broker(s) available"
    );
    assert_eq!(
        err(&brokers(&[0, 1]), true),
        "rack-aware placement needs a rack on every broker; broker(s) 0,1 have none"
    );
    let twice = assignment(&[("a", &[1, 1])]);
    let e = plan_reassignment(&PlanInput {
        current: &twice,
        brokers: &brokers(&[0, 1]),
        sizes: &BTreeMap::new(),
        rack_aware: false,
        max_moves: None,
    })
    .unwrap_err();
    assert_eq!(e.to_string(), "partition a lists broker 1 twice");
}

/// A small random case: allowed brokers 0..n (with racks when asked), current replicas on
/// brokers 0..6 (so some may be on brokers that are not allowed), optional sizes.
#[derive(Debug, Clone)]
struct Case {
    current: Assignment,
    brokers: Vec<PlanBroker>,
    sizes: BTreeMap<String, u64>,
    rack_aware: bool,
}

fn case() -> impl Strategy<Value = Case> {
    (
        2usize..=4,
        1usize..=4,
        any::<bool>(),
        any::<bool>(),
        1usize..=3,
    )
        .prop_flat_map(|(n, parts, rack_aware, sized, max_rf)| {
            let max_rf = max_rf.min(n);
            let partition = (
                1..=max_rf,
                Just((0..6).collect::<Vec<BrokerId>>()).prop_shuffle(),
                0u64..1000,
            );
            (
                Just(n),
                prop::collection::vec(partition, parts),
                Just(rack_aware),
                Just(sized),
                prop::collection::vec(0usize..3, n),
            )
        })
        .prop_map(|(n, parts, rack_aware, sized, racks)| {
            let mut current = Assignment::new();
            let mut sizes = BTreeMap::new();
            for (i, (rf, order, size)) in parts.into_iter().enumerate() {
                let name = format!("p{i}");
                current.insert(name.clone(), order[..rf].to_vec());
                if sized {
                    sizes.insert(name, size);
                }
            }
            let brokers = (0..n)
                .map(|j| PlanBroker {
                    id: j as BrokerId,
                    rack: Some(["ra", "rb", "rc"][racks[j]].to_string()),
                })
                .collect();
            Case {
                current,
                brokers,
                sizes,
                rack_aware,
            }
        })
}

/// Every combination of `k` out of `items`.
fn combinations(items: &[BrokerId], k: usize) -> Vec<Vec<BrokerId>> {
    if k == 0 {
        return vec![vec![]];
    }
    if items.len() < k {
        return vec![];
    }
    let mut with: Vec<Vec<BrokerId>> = combinations(&items[1..], k - 1)
        .into_iter()
        .map(|mut c| {
            c.insert(0, items[0]);
            c
        })
        .collect();
    with.extend(combinations(&items[1..], k));
    with
}

/// The brute-force optimum over every valid target (replica set and preferred leader per
/// partition), by (replica balance, leader balance, moves, bytes).
#[derive(Debug)]
struct Optimum {
    replicas: Vec<usize>,
    leaders: Vec<usize>,
    moves: usize,
    bytes: u64,
}

fn brute_force(c: &Case) -> Optimum {
    let ids: Vec<BrokerId> = c.brokers.iter().map(|b| b.id).collect();
    let rack_of: BTreeMap<BrokerId, &str> = c
        .brokers
        .iter()
        .map(|b| (b.id, b.rack.as_deref().unwrap_or("")))
        .collect();
    let mut sizes_per_rack: BTreeMap<&str, usize> = BTreeMap::new();
    for r in rack_of.values() {
        *sizes_per_rack.entry(r).or_default() += 1;
    }
    let rack_sizes: Vec<usize> = sizes_per_rack.into_values().collect();
    // Per partition: every (replica set, leader) allowed, with its moves and bytes.
    // (replica set, leader, moves, bytes)
    type Choice = (Vec<BrokerId>, BrokerId, usize, u64);
    let options: Vec<Vec<Choice>> = c
        .current
        .iter()
        .map(|(p, now)| {
            let cap = rack_cap(now.len(), &rack_sizes);
            combinations(&ids, now.len())
                .into_iter()
                .filter(|set| {
                    !c.rack_aware || {
                        let mut m: BTreeMap<&str, usize> = BTreeMap::new();
                        for b in set {
                            *m.entry(rack_of[b]).or_default() += 1;
                        }
                        m.values().all(|n| *n <= cap)
                    }
                })
                .flat_map(|set| {
                    let moves = set.iter().filter(|b| !now.contains(b)).count();
                    let bytes = moves as u64 * c.sizes.get(p).copied().unwrap_or(0);
                    set.clone()
                        .into_iter()
                        .map(move |l| (set.clone(), l, moves, bytes))
                })
                .collect()
        })
        .collect();
    let mut best: Option<Optimum> = None;
    let mut pick = vec![0usize; options.len()];
    let index: BTreeMap<BrokerId, usize> = ids.iter().enumerate().map(|(j, b)| (*b, j)).collect();
    loop {
        let mut replicas = vec![0usize; ids.len()];
        let mut leaders = vec![0usize; ids.len()];
        let (mut moves, mut bytes) = (0, 0);
        for (o, &k) in options.iter().zip(&pick) {
            let (set, l, m, b) = &o[k];
            for x in set {
                replicas[index[x]] += 1;
            }
            leaders[index[l]] += 1;
            moves += m;
            bytes += b;
        }
        replicas.sort_unstable_by(|a, b| b.cmp(a));
        leaders.sort_unstable_by(|a, b| b.cmp(a));
        let candidate = Optimum {
            replicas,
            leaders,
            moves,
            bytes,
        };
        let key = |o: &Optimum| (o.replicas.clone(), o.leaders.clone(), o.moves, o.bytes);
        if best.as_ref().is_none_or(|b| key(&candidate) < key(b)) {
            best = Some(candidate);
        }
        // Next combination.
        let mut i = 0;
        loop {
            if i == pick.len() {
                return best.expect("at least one option per partition");
            }
            pick[i] += 1;
            if pick[i] < options[i].len() {
                break;
            }
            pick[i] = 0;
            i += 1;
        }
    }
}

/// The best leader balance reachable by reordering `target`'s replica sets.
fn best_reordering(target: &Assignment, brokers: &[PlanBroker]) -> Vec<usize> {
    let parts: Vec<&Vec<BrokerId>> = target.values().collect();
    let mut pick = vec![0usize; parts.len()];
    let mut best: Option<Vec<usize>> = None;
    loop {
        let chosen: Assignment = parts
            .iter()
            .zip(&pick)
            .enumerate()
            .map(|(i, (r, &k))| (format!("{i}"), vec![r[k]]))
            .collect();
        let l = Balance::of(&chosen, brokers).leaders;
        if best.as_ref().is_none_or(|b| l < *b) {
            best = Some(l);
        }
        let mut i = 0;
        loop {
            if i == pick.len() {
                return best.expect("one ordering at least");
            }
            pick[i] += 1;
            if pick[i] < parts[i].len() {
                break;
            }
            pick[i] = 0;
            i += 1;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn the_plan_is_valid_balanced_and_moves_no_more_than_the_brute_force_optimum(c in case()) {
        let p = plan_with(&c.current, &c.brokers, &c.sizes, c.rack_aware, None);
        assert_valid(&c.current, &c.brokers, &p, c.rack_aware);
        let opt = brute_force(&c);
        let got = Balance::of(&p.target, &c.brokers);
        let bytes: u64 = p.moves.iter().map(|m| m.bytes.unwrap_or(0)).sum();
        prop_assert_eq!(&got.replicas, &opt.replicas, "replica balance");
        // Leaders are the best any reordering of the chosen replicas gives.
        prop_assert_eq!(&got.leaders, &best_reordering(&p.target, &c.brokers), "leaders by reordering");
        // Never better than the optimum (the brute force really is one).
        prop_assert!((&got.leaders, p.moves.len(), bytes) >= (&opt.leaders, opt.moves, opt.bytes));
        // One replication factor, no racks: the optimum exactly.
        let factors: BTreeSet<usize> = c.current.values().map(Vec::len).collect();
        if factors.len() == 1 && !c.rack_aware {
            prop_assert_eq!(&got.leaders, &opt.leaders, "leader balance");
            prop_assert_eq!((p.moves.len(), bytes), (opt.moves, opt.bytes), "moves and bytes");
        }
    }

    #[test]
    fn a_cut_plan_is_valid_and_never_exceeds_its_budget(c in case(), limit in 0usize..4) {
        let full = plan_with(&c.current, &c.brokers, &c.sizes, c.rack_aware, None);
        let cut = plan_with(&c.current, &c.brokers, &c.sizes, c.rack_aware, Some(limit));
        assert_valid(&c.current, &c.brokers, &cut, false);
        // With racks a move can wait for another that frees its rack, so a cut may use less.
        if c.rack_aware {
            prop_assert!(cut.moves.len() <= full.moves.len().min(limit));
        } else {
            prop_assert_eq!(cut.moves.len(), full.moves.len().min(limit));
        }
        for m in &cut.moves {
            prop_assert!(full.moves.iter().any(|f| f.partition == m.partition && f.to == m.to),
                "{:?} is one of the full plan's moves", m);
        }
        if limit >= full.moves.len() {
            prop_assert_eq!(cut.target, full.target);
        }
    }
}

/// Mixed replication factors and racks, where the planner uses a heuristic for leader balance
/// and moves together: on 2000 fixed random inputs it matches the brute-force optimum (leader
/// balance, then moves, then bytes) on at least 99.5% (on 1999 of the 2000 when written; the
/// miss reached the optimum's balance with one move more).
#[test]
fn mixed_inputs_match_the_brute_force_optimum_almost_always() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
    );
    let (mut cases, mut exact) = (0, 0);
    let mut misses = Vec::new();
    while cases < 2000 {
        let c = case()
            .new_tree(&mut runner)
            .expect("the strategy always generates")
            .current();
        let factors: BTreeSet<usize> = c.current.values().map(Vec::len).collect();
        if factors.len() == 1 && !c.rack_aware {
            continue; // exact by construction, checked by the property above
        }
        cases += 1;
        let p = plan_with(&c.current, &c.brokers, &c.sizes, c.rack_aware, None);
        let opt = brute_force(&c);
        let got = Balance::of(&p.target, &c.brokers);
        let bytes: u64 = p.moves.iter().map(|m| m.bytes.unwrap_or(0)).sum();
        assert_eq!(got.replicas, opt.replicas, "{c:?}");
        if (&got.leaders, p.moves.len(), bytes) == (&opt.leaders, opt.moves, opt.bytes) {
            exact += 1;
        } else {
            misses.push(format!(
                "{:?} racks {}: leaders {:?} moves {} bytes {}; optimum {:?}",
                c.current,
                c.rack_aware,
                got.leaders,
                p.moves.len(),
                bytes,
                opt
            ));
        }
    }
    println!("exact on {exact} of {cases} mixed inputs");
    for m in &misses {
        println!("  {m}");
    }
    assert!(exact * 1000 >= cases * 995, "exact on {exact} of {cases}");
}
