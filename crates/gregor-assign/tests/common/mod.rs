//! Helpers shared by the integration tests: compact group descriptions and named results.
#![allow(dead_code)]

use std::collections::BTreeMap;

use gregor_assign::{builtin, GroupAssignment, GroupSpec, Member};

pub fn member(id: &str, topics: &[&str]) -> Member {
    Member {
        member_id: id.to_string(),
        topics: topics.iter().map(|t| t.to_string()).collect(),
        ..Default::default()
    }
}

pub fn with_rack(mut m: Member, rack: &str) -> Member {
    m.rack = Some(rack.to_string());
    m
}

pub fn with_instance(mut m: Member, instance: &str) -> Member {
    m.group_instance_id = Some(instance.to_string());
    m
}

/// Sets owned partitions from `topic-N` names and a generation.
pub fn owning(mut m: Member, owned: &[&str], generation: i32) -> Member {
    m.owned_partitions = owned.iter().map(|s| split(s)).collect();
    m.generation = Some(generation);
    m
}

pub fn split(s: &str) -> (String, i32) {
    let (t, p) = s.rsplit_once('-').expect("topic-N");
    (t.to_string(), p.parse().expect("partition number"))
}

pub fn run(strategy: &str, spec: &GroupSpec) -> GroupAssignment {
    builtin(strategy)
        .expect("known strategy")
        .assign(spec)
        .expect("assignment succeeds")
}

/// member id -> assigned partitions as `topic-N`, sorted.
pub fn named(spec: &GroupSpec, a: &GroupAssignment) -> BTreeMap<String, Vec<String>> {
    spec.members()
        .iter()
        .zip(&a.members)
        .map(|(m, ma)| (m.member_id.clone(), spec.display_all(&ma.partitions)))
        .collect()
}

pub fn pending(spec: &GroupSpec, a: &GroupAssignment) -> BTreeMap<String, Vec<String>> {
    spec.members()
        .iter()
        .zip(&a.members)
        .map(|(m, ma)| (m.member_id.clone(), spec.display_all(&ma.pending)))
        .collect()
}

pub fn expect(pairs: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
    pairs
        .iter()
        .map(|(m, ps)| (m.to_string(), ps.iter().map(|p| p.to_string()).collect()))
        .collect()
}

/// Feeds an assignment back as the members' ownership for the next generation.
pub fn next_generation(
    members: &[Member],
    owned: &BTreeMap<String, Vec<String>>,
    generation: i32,
) -> Vec<Member> {
    members
        .iter()
        .map(|m| {
            let mine: Vec<&str> = owned
                .get(&m.member_id)
                .map(|v| v.iter().map(String::as_str).collect())
                .unwrap_or_default();
            owning(m.clone(), &mine, generation)
        })
        .collect()
}

pub fn spec(topics: &[(&str, i64)], members: Vec<Member>) -> GroupSpec {
    let mut b = GroupSpec::builder();
    for (t, n) in topics {
        b.add_topic(*t, *n, Vec::new());
    }
    for m in members {
        b.add_member(m);
    }
    b.build().expect("valid group")
}

pub fn racks(list: &[&[&str]]) -> Vec<Vec<String>> {
    list.iter()
        .map(|rs| rs.iter().map(|r| r.to_string()).collect())
        .collect()
}

/// Number of partitions whose owner differs between two named assignments (partitions absent
/// from `before` do not count).
pub fn moved(
    before: &BTreeMap<String, Vec<String>>,
    after: &BTreeMap<String, Vec<String>>,
) -> usize {
    let owner_before: BTreeMap<&String, &String> = before
        .iter()
        .flat_map(|(m, ps)| ps.iter().map(move |p| (p, m)))
        .collect();
    after
        .iter()
        .flat_map(|(m, ps)| ps.iter().map(move |p| (p, m)))
        .filter(|(p, m)| owner_before.get(p).is_some_and(|b| b != m))
        .count()
}

/// A group in the comparison harness's compact form, one line each:
/// `TOPIC name partitions [racks]` (racks: per partition, `.`-separated rack numbers, partitions
/// `;`-separated, rack `n` being `rn`) and
/// `MEMBER id rack|- generation|- topic,topic|- topic:n,topic:n|-`.
pub fn harness_group(text: &str) -> GroupSpec {
    let mut b = GroupSpec::builder();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let some = |s: &str| (s != "-").then(|| s.to_string());
        match f[0] {
            "TOPIC" => {
                let racks = f.get(3).map_or_else(Vec::new, |r| {
                    r.split(';')
                        .map(|p| p.split('.').map(|n| format!("r{n}")).collect())
                        .collect()
                });
                b.add_topic(f[1], f[2].parse().expect("partition count"), racks);
            }
            "MEMBER" => {
                let list = |s: &str| -> Vec<String> {
                    if s == "-" {
                        Vec::new()
                    } else {
                        s.split(',').map(str::to_string).collect()
                    }
                };
                b.add_member(Member {
                    member_id: f[1].to_string(),
                    rack: some(f[2]),
                    generation: some(f[3]).map(|g| g.parse().expect("generation")),
                    topics: list(f[4]),
                    owned_partitions: list(f[5])
                        .iter()
                        .map(|p| {
                            let (t, n) = p.split_once(':').expect("topic:n");
                            (t.to_string(), n.parse().expect("partition number"))
                        })
                        .collect(),
                    ..Default::default()
                });
            }
            other => panic!("unknown line {other}"),
        }
    }
    b.build().expect("valid group")
}

/// The unique highest-generation claimant of each partition (`topic-N`), as the harness counts
/// kept partitions.
pub fn valid_owners(spec: &GroupSpec) -> BTreeMap<String, String> {
    let mut best: BTreeMap<String, (i32, Option<String>)> = BTreeMap::new();
    for m in spec.members() {
        let g = m.generation.unwrap_or(-1);
        for p in spec.display_all(&m.owned) {
            match best.get(&p) {
                Some((bg, _)) if *bg > g => {}
                Some((bg, _)) if *bg == g => {
                    best.insert(p, (g, None));
                }
                _ => {
                    best.insert(p, (g, Some(m.member_id.clone())));
                }
            }
        }
    }
    best.into_iter()
        .filter_map(|(p, (_, m))| m.map(|m| (p, m)))
        .collect()
}

/// Partitions held by their valid previous owner.
pub fn kept_by_owner(spec: &GroupSpec, result: &BTreeMap<String, Vec<String>>) -> usize {
    let owners = valid_owners(spec);
    result
        .iter()
        .map(|(m, ps)| ps.iter().filter(|p| owners.get(*p) == Some(m)).count())
        .sum()
}

/// Member sizes, largest first.
pub fn sorted_sizes(result: &BTreeMap<String, Vec<String>>) -> Vec<usize> {
    let mut v: Vec<usize> = result.values().map(Vec::len).collect();
    v.sort_unstable_by(|a, b| b.cmp(a));
    v
}

/// Largest spread (max - min size) over the classes of members with identical subscriptions.
pub fn class_spread(spec: &GroupSpec, result: &BTreeMap<String, Vec<String>>) -> usize {
    let mut classes: BTreeMap<Vec<u32>, Vec<usize>> = BTreeMap::new();
    for m in spec.members() {
        classes
            .entry(m.topics.iter().map(|t| t.0).collect())
            .or_default()
            .push(result[&m.member_id].len());
    }
    classes
        .values()
        .map(|v| v.iter().max().unwrap_or(&0) - v.iter().min().unwrap_or(&0))
        .max()
        .unwrap_or(0)
}
