//! The lab's offline run: loads a scenario and replays its steps with each strategy, the way a
//! group would, into the report `render` prints and `run` (the live lab) compares against.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Context, Result};
use gregor_assign::{builtin, Member, RebalanceProtocol};
use serde::{Deserialize, Serialize};

use crate::group_json::{assigned, build_spec, pending, MemberJson, TopicJson};

use super::bound;

/// Scenarios shipped with the binary: every worked example of the seeds.
pub const BUNDLED: &[(&str, &str)] = &[
    ("seed-002", include_str!("../../scenarios/seed-002.json")),
    (
        "seed-002-multi-topic",
        include_str!("../../scenarios/seed-002-multi-topic.json"),
    ),
    (
        "seed-000-range",
        include_str!("../../scenarios/seed-000-range.json"),
    ),
    (
        "seed-000-range-rack",
        include_str!("../../scenarios/seed-000-range-rack.json"),
    ),
    (
        "seed-000-roundrobin",
        include_str!("../../scenarios/seed-000-roundrobin.json"),
    ),
    (
        "seed-000-sticky",
        include_str!("../../scenarios/seed-000-sticky.json"),
    ),
    (
        "seed-000-sticky-rack",
        include_str!("../../scenarios/seed-000-sticky-rack.json"),
    ),
    (
        "seed-000-sticky-rack-owners",
        include_str!("../../scenarios/seed-000-sticky-rack-owners.json"),
    ),
    (
        "seed-001-range",
        include_str!("../../scenarios/seed-001-range.json"),
    ),
    (
        "seed-001-roundrobin",
        include_str!("../../scenarios/seed-001-roundrobin.json"),
    ),
    (
        "seed-001-sticky",
        include_str!("../../scenarios/seed-001-sticky.json"),
    ),
    (
        "seed-001-sticky-unequal",
        include_str!("../../scenarios/seed-001-sticky-unequal.json"),
    ),
    (
        "seed-004-join",
        include_str!("../../scenarios/seed-004-join.json"),
    ),
    (
        "seed-004-stall",
        include_str!("../../scenarios/seed-004-stall.json"),
    ),
];

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub topics: BTreeMap<String, TopicJson>,
    pub steps: Vec<Step>,
}

/// One membership change; the group rebalances after each.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub label: String,
    #[serde(default)]
    pub join: Vec<MemberJson>,
    #[serde(default)]
    pub leave: Vec<String>,
    /// Members whose subscriptions change: `member_id` and the new `topics`.
    #[serde(default)]
    pub subscribe: Vec<Resubscribe>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resubscribe {
    pub member_id: String,
    pub topics: Vec<String>,
}

/// What happened in one step under one strategy.
#[derive(Debug, Clone, Serialize)]
pub struct StepResult {
    pub label: String,
    /// Final assignment after the step (after every round).
    pub assignment: BTreeMap<String, Vec<String>>,
    /// Partitions per member.
    pub sizes: BTreeMap<String, usize>,
    /// Largest minus smallest member size.
    pub skew: usize,
    /// Smallest skew any assignment could reach with these subscriptions, when computed.
    pub lower_bound: Option<usize>,
    /// Partitions whose owner changed (partitions without an owner before do not count).
    pub moved: usize,
    /// Partitions each member revoked during the step.
    pub revoked: BTreeMap<String, Vec<String>>,
    /// Rebalance rounds the step took.
    pub rounds: u32,
    /// For cooperative strategies with two rounds: the first round's assignment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_round: Option<BTreeMap<String, Vec<String>>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StrategyRun {
    pub strategy: String,
    pub protocol: &'static str,
    pub steps: Vec<StepResult>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LabReport {
    pub scenario: String,
    pub description: String,
    pub topics: BTreeMap<String, i64>,
    pub strategies: Vec<StrategyRun>,
}

/// Loads a bundled scenario by name, or a scenario file.
pub fn load(name_or_file: &str) -> Result<Scenario> {
    let text = match BUNDLED.iter().find(|(n, _)| *n == name_or_file) {
        Some((_, text)) => text.to_string(),
        None => {
            let path = std::path::Path::new(name_or_file);
            if !path.exists() {
                let names: Vec<&str> = BUNDLED.iter().map(|(n, _)| *n).collect();
                bail!(
                    "no bundled scenario or file named '{name_or_file}' (bundled: {})",
                    names.join(", ")
                );
            }
            crate::assign_cmd::read_input(path)?
        }
    };
    let scenario: Scenario = serde_json::from_str(&text)
        .with_context(|| format!("malformed scenario {name_or_file}"))?;
    if scenario.steps.is_empty() {
        bail!("scenario {} has no steps", scenario.name);
    }
    Ok(scenario)
}

pub fn run(scenario: &Scenario, strategies: &[String]) -> Result<LabReport> {
    let mut runs = Vec::new();
    for s in strategies {
        runs.push(simulate(scenario, s)?);
    }
    Ok(LabReport {
        scenario: scenario.name.clone(),
        description: scenario.description.clone(),
        topics: scenario
            .topics
            .iter()
            .map(|(t, spec)| (t.clone(), spec.partitions))
            .collect(),
        strategies: runs,
    })
}

/// Replays the scenario under one strategy.
pub fn simulate(scenario: &Scenario, strategy: &str) -> Result<StrategyRun> {
    let assignor = builtin(strategy)?;
    let cooperative = assignor.supported_protocols()[0] == RebalanceProtocol::Cooperative;
    let mut members: Vec<Member> = Vec::new();
    let mut owned: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut generation = 0;
    let mut steps = Vec::new();
    for step in &scenario.steps {
        apply(step, &mut members)?;
        let before = owned.clone();
        let mut rounds = 0;
        let mut revoked: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut first_round = None;
        loop {
            rounds += 1;
            generation += 1;
            let input: Vec<Member> = members
                .iter()
                .map(|m| with_ownership(m, owned.get(&m.member_id), generation - 1))
                .collect::<Result<_>>()?;
            let spec = build_spec(&scenario.topics, &input)?;
            let result = assignor.assign(&spec)?;
            let now = assigned(&spec, &result);
            let still_pending = pending(&spec, &result).values().any(|p| !p.is_empty());
            for m in &members {
                let had = owned.get(&m.member_id).cloned().unwrap_or_default();
                let keep: BTreeSet<&String> = now.get(&m.member_id).into_iter().flatten().collect();
                let gone: Vec<String> = if cooperative {
                    had.into_iter().filter(|p| !keep.contains(p)).collect()
                } else {
                    had
                };
                revoked.entry(m.member_id.clone()).or_default().extend(gone);
            }
            owned = now;
            if !(cooperative && still_pending) || rounds >= 3 {
                break;
            }
            first_round = Some(owned.clone());
        }
        let sizes: BTreeMap<String, usize> =
            owned.iter().map(|(m, ps)| (m.clone(), ps.len())).collect();
        let skew =
            sizes.values().max().copied().unwrap_or(0) - sizes.values().min().copied().unwrap_or(0);
        steps.push(StepResult {
            label: step.label.clone(),
            moved: moved(&before, &owned),
            lower_bound: bound::skew_lower_bound(&scenario.topics, &members),
            assignment: owned.clone(),
            sizes,
            skew,
            revoked,
            rounds,
            first_round,
        });
    }
    Ok(StrategyRun {
        strategy: strategy.to_string(),
        protocol: if cooperative { "COOPERATIVE" } else { "EAGER" },
        steps,
    })
}

fn apply(step: &Step, members: &mut Vec<Member>) -> Result<()> {
    for id in &step.leave {
        let before = members.len();
        members.retain(|m| &m.member_id != id);
        if members.len() == before {
            bail!(
                "step '{}': member {id} leaves but is not in the group",
                step.label
            );
        }
    }
    for r in &step.subscribe {
        let m = members
            .iter_mut()
            .find(|m| m.member_id == r.member_id)
            .with_context(|| {
                format!(
                    "step '{}': member {} is not in the group",
                    step.label, r.member_id
                )
            })?;
        m.topics = r.topics.clone();
    }
    for j in &step.join {
        if members.iter().any(|m| m.member_id == j.member_id) {
            bail!("step '{}': member {} joins twice", step.label, j.member_id);
        }
        members.push(j.to_member()?);
    }
    Ok(())
}

fn with_ownership(m: &Member, owned: Option<&Vec<String>>, generation: i32) -> Result<Member> {
    let mut m = m.clone();
    m.owned_partitions = owned
        .into_iter()
        .flatten()
        .map(|p| crate::group_json::parse_partition(p))
        .collect::<Result<_>>()?;
    m.generation = Some(generation);
    Ok(m)
}

/// Partitions whose owner differs between two assignments.
pub fn moved(
    before: &BTreeMap<String, Vec<String>>,
    after: &BTreeMap<String, Vec<String>>,
) -> usize {
    let owner: BTreeMap<&String, &String> = before
        .iter()
        .flat_map(|(m, ps)| ps.iter().map(move |p| (p, m)))
        .collect();
    after
        .iter()
        .flat_map(|(m, ps)| ps.iter().map(move |p| (p, m)))
        .filter(|(p, m)| owner.get(p).is_some_and(|o| o != m))
        .count()
}
