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
