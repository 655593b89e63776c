//! `gregor lab load`: the broker's server-side assignors (`uniform`, `range`) and the load-aware
//! `load` side by side on a scenario of membership and load changes: the most loaded member's
//! share of the load, partitions moved, rounds to convergence, time computing.
//!
//! A load scenario has topics, a backlog weight, and steps: members join or leave, partitions'
//! byte rates and backlogs change (a key `topic` sets every partition of the topic, `topic-N`
//! one). Bundled: `seed-002-skew` (seed 002's multi-topic skew with byte rates) and
//! `hot-partitions` (generated, see `hot.rs`).

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use gregor_assign::load::{load_figure, LoadMember, TopicPartition};

use super::hot::{self, HotParams};
use super::load_sim::{
    self, Assignment, GroupState, LoadReport, LoadScenario, LoadStep, StepFigures, StrategyFigures,
};

const SEED_002_SKEW: &str = include_str!("../../scenarios/load-seed-002-skew.json");

/// `gregor lab load` arguments.
#[derive(Debug, clap::Args)]
pub struct LoadArgs {
    /// `seed-002-skew`, `hot-partitions` or a load scenario file.
    #[arg(default_value = "seed-002-skew")]
    pub scenario: String,
    /// Comma-separated server-side assignors: uniform, range, load.
    #[arg(long, default_value = "uniform,range,load", value_delimiter = ',')]
    pub strategies: Vec<String>,
    /// The `load` assignor's threshold: moves must cut the most loaded member's load by more
    /// than this fraction of it.
    #[arg(long, default_value_t = gregor_assign::load::DEFAULT_THRESHOLD)]
    pub threshold: f64,
    /// One JSON document for scripts.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub hot: HotParams,
}

/// Loads `seed-002-skew`, `hot-partitions` (shaped by `hot`) or a file.
pub fn load_scenario(name: &str, hot: &HotParams) -> Result<LoadScenario> {
    let text = match name {
        "seed-002-skew" => SEED_002_SKEW.to_string(),
        "hot-partitions" => return hot::scenario(hot),
        path => std::fs::read_to_string(path).with_context(|| {
            format!("no load scenario named '{path}' (bundled: seed-002-skew, hot-partitions)")
        })?,
    };
    let s: LoadScenario =
        serde_json::from_str(&text).with_context(|| format!("malformed load scenario {name}"))?;
    if s.steps.is_empty() {
        bail!("load scenario {} has no steps", s.name);
    }
    Ok(s)
}

/// Replays the scenario under every strategy, in the same process run.
pub fn run(s: &LoadScenario, strategies: &[String], threshold: f64) -> Result<LoadReport> {
    let groups = group_states(s)?;
    let mut runs = Vec::new();
    for strategy in strategies {
        runs.push(replay(s, &groups, strategy, threshold)?);
    }
    Ok(LoadReport {
        scenario: s.name.clone(),
        description: s.description.clone(),
        topics: s.topics.clone(),
        threshold,
        strategies: runs,
    })
}

fn replay(
    s: &LoadScenario,
    groups: &[GroupState],
    strategy: &str,
    threshold: f64,
) -> Result<StrategyFigures> {
    let mut current = Assignment::new();
    let mut epoch = 0;
    let mut steps = Vec::new();
    for (step, group) in s.steps.iter().zip(groups) {
        let (next, rounds, moved, spent, timeline) = load_sim::converge(
            strategy,
            group,
            &current,
            &mut epoch,
            threshold,
            &Instant::now,
        )
        .with_context(|| format!("step '{}' under {strategy}", step.label))?;
        let member_loads = load_sim::member_loads(group, &next);
        let (total_load, max_share, bound_share) = load_sim::shares(group, &member_loads);
        steps.push(StepFigures {
            label: step.label.clone(),
            member_loads,
            total_load,
            max_share,
            bound_share,
            moved,
            rounds,
            compute_micros: spent.as_micros(),
            timeline,
            assignment: next
                .iter()
                .map(|(m, ps)| (m.clone(), ps.iter().map(|p| p.to_string()).collect()))
                .collect(),
        });
        current = next;
    }
    Ok(StrategyFigures {
        strategy: strategy.to_string(),
        steps,
    })
}

/// The group after each step: members, and every partition's load figure.
pub fn group_states(s: &LoadScenario) -> Result<Vec<GroupState>> {
    let mut members: Vec<LoadMember> = Vec::new();
    let mut rates: BTreeMap<TopicPartition, f64> = BTreeMap::new();
    let mut backlog: BTreeMap<TopicPartition, f64> = BTreeMap::new();
    let mut out = Vec::new();
    for step in &s.steps {
        apply_members(step, &mut members)?;
        set_figures(s, &step.rates, &mut rates)?;
        set_figures(s, &step.backlog, &mut backlog)?;
        let loads = s
            .topics
            .iter()
            .flat_map(|(t, &n)| (0..n).map(move |p| TopicPartition::new(t.clone(), p)))
            .map(|tp| {
                let rate = rates.get(&tp).copied().unwrap_or(0.0);
                let back = backlog.get(&tp).copied().unwrap_or(0.0);
                let figure = load_figure(rate, back, s.backlog_weight);
                (tp, figure)
            })
            .collect();
        out.push(GroupState {
            topics: s.topics.clone(),
            members: members.clone(),
            loads,
        });
    }
    Ok(out)
}

fn apply_members(step: &LoadStep, members: &mut Vec<LoadMember>) -> Result<()> {
    for id in &step.leave {
        let before = members.len();
        members.retain(|m| &m.member_id != id);
        if members.len() == before {
            bail!("step '{}': {id} leaves but is not in the group", step.label);
        }
    }
    for j in &step.join {
        if members.iter().any(|m| m.member_id == j.member_id) {
            bail!("step '{}': {} joins twice", step.label, j.member_id);
        }
        members.push(LoadMember {
            member_id: j.member_id.clone(),
            topics: j.topics.clone(),
        });
    }
    Ok(())
}

/// Applies `topic` / `topic-N` keyed figures.
fn set_figures(
    s: &LoadScenario,
    figures: &BTreeMap<String, f64>,
    into: &mut BTreeMap<TopicPartition, f64>,
) -> Result<()> {
    for (key, &value) in figures {
        if !value.is_finite() || value < 0.0 {
            bail!("{key}: {value} is not a finite non-negative figure");
        }
        for tp in resolve(s, key)? {
            into.insert(tp, value);
        }
    }
    Ok(())
}

fn resolve(s: &LoadScenario, key: &str) -> Result<Vec<TopicPartition>> {
    if let Some(&n) = s.topics.get(key) {
        return Ok((0..n).map(|p| TopicPartition::new(key, p)).collect());
    }
    let parsed = key
        .rsplit_once('-')
        .and_then(|(t, p)| Some((t, p.parse::<i32>().ok()?)));
    match parsed {
        Some((t, p)) if s.topics.get(t).is_some_and(|&n| (0..n).contains(&p)) => {
            Ok(vec![TopicPartition::new(t, p)])
        }
        _ => bail!("'{key}' names no topic or partition of the scenario"),
    }
}

/// `gregor lab load`: the report as text or JSON.
pub fn main(args: &LoadArgs) -> Result<String> {
    let scenario = load_scenario(&args.scenario, &args.hot)?;
    let report = run(&scenario, &args.strategies, args.threshold)?;
    if args.json {
        Ok(serde_json::to_string_pretty(&report)? + "\n")
    } else {
        Ok(super::load_render::render(&report))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hot_defaults() -> HotParams {
        HotParams {
            topics: 4,
            partitions: 16,
            members: 8,
            hot: 3,
            hot_factor: 10.0,
            seed: 1,
        }
    }

    fn seed_002() -> LoadScenario {
        load_scenario("seed-002-skew", &hot_defaults()).unwrap()
    }

    #[test]
    fn keys_name_a_topic_or_one_partition() {
        let s = seed_002();
        assert_eq!(resolve(&s, "v2c4.ta").unwrap().len(), 4);
        assert_eq!(
            resolve(&s, "v2c4.tb-3").unwrap(),
            vec![TopicPartition::new("v2c4.tb", 3)]
        );
        assert!(resolve(&s, "v2c4.tb-4").is_err());
        assert!(resolve(&s, "nope").is_err());
    }

    #[test]
    fn figures_are_rate_plus_weighted_backlog() {
        let groups = group_states(&seed_002()).unwrap();
        let at = |g: &GroupState, t: &str, p| g.loads[&TopicPartition::new(t, p)];
        assert_eq!(at(&groups[0], "v2c4.tb", 1), 500_000.0);
        assert_eq!(at(&groups[1], "v2c4.tb", 1), 2_500_000.0);
        // 120 MB of backlog at the default weight (a minute to drain) adds 2 MB/s.
        assert_eq!(at(&groups[2], "v2c4.ta", 3), 4_000_000.0);
        assert_eq!(groups[3].members.len(), 4);
        assert_eq!(groups[4].members.len(), 3);
    }

    #[test]
    fn seed_002_side_by_side() {
        let strategies: Vec<String> = ["uniform", "range", "load"].map(String::from).to_vec();
        let report = run(&seed_002(), &strategies, 0.1).unwrap();
        let by = |name: &str| {
            report
                .strategies
                .iter()
                .find(|s| s.strategy == name)
                .unwrap()
        };
        // Range's per-topic remainders both land on multi-A (seed 002's 4-2-2): half the load.
        assert!((by("range").steps[0].max_share - 0.5).abs() < 1e-9);
        for run in &report.strategies {
            for step in &run.steps {
                let mut all: Vec<&String> = step.assignment.values().flatten().collect();
                let n = all.len();
                all.sort();
                all.dedup();
                assert_eq!((n, all.len()), (8, 8), "{} {}", run.strategy, step.label);
            }
        }
        let worst = |name: &str| {
            by(name)
                .steps
                .iter()
                .map(|s| s.max_share)
                .fold(0.0, f64::max)
        };
        assert!(worst("load") < worst("uniform"));
        assert!(worst("load") < worst("range"));
        assert!(by("load").steps.iter().all(|s| s.rounds <= 1));
    }

    #[test]
    fn hot_partitions_are_reproducible_and_checked() {
        let a = hot::scenario(&hot_defaults()).unwrap();
        let b = hot::scenario(&hot_defaults()).unwrap();
        assert_eq!(a.steps[1].label, b.steps[1].label);
        assert_eq!(a.steps[4].rates, b.steps[4].rates);
        let hot_in = |step: &LoadStep| {
            let base = &a.steps[0].rates;
            step.rates
                .iter()
                .filter(|(k, v)| **v > base[*k] * 5.0)
                .count()
        };
        assert_eq!(hot_in(&a.steps[1]), 3);
        assert_eq!(hot_in(&a.steps[4]), 3);
        assert_eq!(a.steps[4].backlog.len(), 3);
        let too_hot = HotParams {
            hot: 40,
            ..hot_defaults()
        };
        assert!(hot::scenario(&too_hot).is_err());
    }
}
