//! `gregor lab load`'s replay: a load scenario played through the broker's server-side assignors
//! (`uniform`, `range`, the same gregor-assign calls as the group coordinator's target
//! computation) and `load`. After each step the assignor runs again on its own output until a
//! round changes nothing, as the coordinator recomputes a target: rounds to convergence.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use gregor_assign::load::{
    self, LoadConfig, LoadInput, LoadMember, TopicPartition, DEFAULT_BACKLOG_WEIGHT,
};
use gregor_assign::{range, sticky, GroupSpec, Member};
use serde::{Deserialize, Serialize};

/// Rounds after which a strategy that keeps changing its mind is cut off.
const MAX_ROUNDS: u32 = 10;

/// A strategy's assignment: member id to its partitions.
pub type Assignment = BTreeMap<String, Vec<TopicPartition>>;

/// The group as one step leaves it, before the strategies run.
#[derive(Debug, Clone)]
pub struct GroupState {
    pub topics: BTreeMap<String, i32>,
    pub members: Vec<LoadMember>,
    /// Load figure per partition (bytes/s in plus weight times backlog).
    pub loads: BTreeMap<TopicPartition, f64>,
}

/// What one step did under one strategy.
#[derive(Debug, Clone, Serialize)]
pub struct StepFigures {
    pub label: String,
    /// Each member's load after the step.
    pub member_loads: BTreeMap<String, f64>,
    pub total_load: f64,
    /// The most loaded member's share of the total load.
    pub max_share: f64,
    /// A lower bound on any assignment's largest member load, as a share of the total.
    pub bound_share: f64,
    /// Partitions whose owner changed (partitions without an owner before do not count).
    pub moved: usize,
    /// Rounds that changed the assignment before one changed nothing.
    pub rounds: u32,
    /// Time spent in the assignor over all rounds of the step, confirming round included.
    pub compute_micros: u128,
    /// For `load`: each move with its reason, by round.
    pub timeline: Vec<String>,
    pub assignment: BTreeMap<String, Vec<String>>,
}

/// One strategy's run over the scenario.
#[derive(Debug, Clone, Serialize)]
pub struct StrategyFigures {
    pub strategy: String,
    pub steps: Vec<StepFigures>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadScenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Partition count per topic.
    pub topics: BTreeMap<String, i32>,
    /// Backlog bytes count as this many bytes per second each.
    #[serde(default = "default_weight")]
    pub backlog_weight: f64,
    pub steps: Vec<LoadStep>,
}

fn default_weight() -> f64 {
    DEFAULT_BACKLOG_WEIGHT
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadStep {
    pub label: String,
    #[serde(default)]
    pub join: Vec<JoinJson>,
    #[serde(default)]
    pub leave: Vec<String>,
    /// Bytes per second in, by `topic` or `topic-N`.
    #[serde(default)]
    pub rates: BTreeMap<String, f64>,
    /// Backlog bytes, by `topic` or `topic-N`.
    #[serde(default)]
    pub backlog: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JoinJson {
    pub member_id: String,
    pub topics: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    pub scenario: String,
    pub description: String,
    pub topics: BTreeMap<String, i32>,
    pub threshold: f64,
    pub strategies: Vec<StrategyFigures>,
}

/// One round of `strategy` on `group` from `current`: the new assignment and, for `load`, the
/// moves explained.
pub fn round(
    strategy: &str,
    group: &GroupState,
    current: &Assignment,
    epoch: i32,
    threshold: f64,
) -> Result<(Assignment, Vec<String>)> {
    match strategy {
        "uniform" | "range" => Ok((server_side(strategy, group, current, epoch)?, Vec::new())),
        load::NAME => {
            let input = LoadInput {
                members: group.members.clone(),
                topics: group.topics.clone(),
                loads: group.loads.clone(),
                current: current.clone(),
            };
            let config = LoadConfig {
                threshold,
                default_load: None,
            };
            let out = load::assign(&input, &config)?;
            Ok((out.assignment, explain(&out.moves)))
        }
        other => bail!("unknown server-side assignor '{other}' (known: uniform, range, load)"),
    }
}

/// The moves for the timeline; placements of partitions nobody owned are only counted.
fn explain(moves: &[load::Move]) -> Vec<String> {
    let unowned = moves
        .iter()
        .filter(|m| m.reason == load::MoveReason::Unowned)
        .count();
    let placed = (unowned > 0).then(|| {
        format!("{unowned} unowned partitions placed, largest first, on the least loaded")
    });
    placed
        .into_iter()
        .chain(
            moves
                .iter()
                .filter(|m| m.reason != load::MoveReason::Unowned)
                .map(|m| m.to_string()),
        )
        .collect()
}

/// `uniform` / `range` as the coordinator runs them: the previous target stands for what each
/// member owns, at the target epoch.
fn server_side(
    strategy: &str,
    group: &GroupState,
    current: &Assignment,
    epoch: i32,
) -> Result<Assignment> {
    let mut builder = GroupSpec::builder();
    for (name, &n) in &group.topics {
        builder.add_topic(name, i64::from(n), Vec::new());
    }
    for m in &group.members {
        let owned = current.get(&m.member_id).into_iter().flatten();
        builder.add_member(Member {
            member_id: m.member_id.clone(),
            topics: m.topics.clone(),
            owned_partitions: owned.map(|tp| (tp.topic.clone(), tp.partition)).collect(),
            generation: Some(epoch),
            ..Member::default()
        });
    }
    let spec = builder.build().context("building the group")?;
    let result = if strategy == "uniform" {
        sticky::assign(&spec, sticky::Flavor::Sticky)
    } else {
        range::assign(&spec)
    };
    let mut out = Assignment::new();
    for (member, got) in spec.members().iter().zip(&result.members) {
        let tps = got.partitions.iter().map(|&pid| {
            let (topic, partition) = spec.partition(pid);
            TopicPartition::new(spec.topic(topic).name.clone(), partition)
        });
        out.insert(member.member_id.clone(), tps.collect());
    }
    Ok(out)
}

/// Runs rounds until one changes nothing: the final assignment and the step's figures.
pub fn converge(
    strategy: &str,
    group: &GroupState,
    current: &Assignment,
    epoch: &mut i32,
    threshold: f64,
    clock: &dyn Fn() -> Instant,
) -> Result<(Assignment, u32, usize, Duration, Vec<String>)> {
    let mut now = current.clone();
    let (mut rounds, mut moved, mut spent) = (0, 0, Duration::ZERO);
    let mut timeline = Vec::new();
    loop {
        let start = clock();
        let (next, explained) = round(strategy, group, &now, *epoch, threshold)?;
        spent += clock().saturating_duration_since(start);
        *epoch += 1;
        if same(&next, &now) || rounds >= MAX_ROUNDS {
            return Ok((now, rounds, moved, spent, timeline));
        }
        rounds += 1;
        moved += moved_between(&now, &next);
        timeline.extend(
            explained
                .into_iter()
                .map(|e| format!("round {rounds}: {e}")),
        );
        now = next;
    }
}

/// Equal as sets of (member, partition), members without partitions ignored.
fn same(a: &Assignment, b: &Assignment) -> bool {
    let set = |x: &Assignment| -> BTreeSet<(String, TopicPartition)> {
        x.iter()
            .flat_map(|(m, ps)| ps.iter().map(move |p| (m.clone(), p.clone())))
            .collect()
    };
    set(a) == set(b)
}

/// Partitions whose owner differs between two assignments (unowned before: not counted).
pub fn moved_between(before: &Assignment, after: &Assignment) -> usize {
    let owner: BTreeMap<&TopicPartition, &String> = before
        .iter()
        .flat_map(|(m, ps)| ps.iter().map(move |p| (p, m)))
        .collect();
    after
        .iter()
        .flat_map(|(m, ps)| ps.iter().map(move |p| (p, m)))
        .filter(|(p, m)| owner.get(p).is_some_and(|o| o != m))
        .count()
}

/// Each member's load under `assignment` (every group member listed).
pub fn member_loads(group: &GroupState, assignment: &Assignment) -> BTreeMap<String, f64> {
    group
        .members
        .iter()
        .map(|m| {
            let held = assignment.get(&m.member_id).into_iter().flatten();
            // `+ 0.0`: an empty sum is -0.0.
            let sum = held.map(|tp| load_of(group, tp)).sum::<f64>() + 0.0;
            (m.member_id.clone(), sum)
        })
        .collect()
}

/// A partition's figure (the lab gives every partition one).
pub fn load_of(group: &GroupState, tp: &TopicPartition) -> f64 {
    group.loads.get(tp).copied().unwrap_or(0.0)
}

/// The share figures of one step: the most loaded member's share and the bound's share.
pub fn shares(group: &GroupState, loads: &BTreeMap<String, f64>) -> (f64, f64, f64) {
    let total: f64 = loads.values().sum();
    let max = loads.values().copied().fold(0.0, f64::max);
    let input = LoadInput {
        members: group.members.clone(),
        topics: group.topics.clone(),
        loads: group.loads.clone(),
        current: BTreeMap::new(),
    };
    let bound = load::lower_bound(&input, &LoadConfig::default()).unwrap_or(0.0);
    if total > 0.0 {
        (total, max / total, bound / total)
    } else {
        (total, 0.0, 0.0)
    }
}
