//! `gregor bench assign`: times one strategy's assignment call on a synthetic group defined
//! precisely enough that other implementations can be run on identical input (see the CLI
//! reference in docs/cli.md).

use std::time::Instant;

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use gregor_assign::{builtin, GroupSpec, Member};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Subs {
    Uniform,
    Nonuniform,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Owned {
    None,
    Prev,
}

#[derive(Debug, Clone, Args)]
pub struct AssignBenchArgs {
    /// range, roundrobin, sticky or cooperative-sticky.
    #[arg(long)]
    pub strategy: String,
    /// Number of topics (topic0 ..).
    #[arg(long)]
    pub topics: u32,
    /// Partitions per topic.
    #[arg(long)]
    pub partitions: u32,
    /// Number of members (consumer-00000 ..).
    #[arg(long)]
    pub members: u32,
    #[arg(long, value_enum, default_value = "uniform")]
    pub subs: Subs,
    #[arg(long, value_enum, default_value = "none")]
    pub owned: Owned,
    /// Number of racks; 0 for no rack information.
    #[arg(long, default_value_t = 0)]
    pub racks: u32,
    /// Timed runs (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub runs: u32,
    /// One JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
pub struct AssignBenchResult {
    pub strategy: String,
    pub topics: u32,
    pub partitions: u32,
    pub members: u32,
    pub subs: Subs,
    pub owned: Owned,
    pub racks: u32,
    pub runs: u32,
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub peak_mib: f64,
    pub assigned_partitions: u64,
}

/// Member `i` subscribes to topic `j`.
pub fn subscribes(subs: Subs, i: u32, j: u32, topics: u32) -> bool {
    match subs {
        Subs::Uniform => true,
        Subs::Nonuniform => (i + j) % 3 != 0 || j == i % topics,
    }
}

/// Builds the benchmark group.
pub fn build_group(a: &AssignBenchArgs) -> Result<GroupSpec> {
    if a.topics == 0 || a.members == 0 {
        bail!("--topics and --members must be at least 1");
    }
    let names: Vec<String> = (0..a.topics).map(|t| format!("topic{t}")).collect();
    let mut b = GroupSpec::builder();
    for (t, name) in names.iter().enumerate() {
        let racks = if a.racks > 0 {
            (0..a.partitions)
                .map(|p| {
                    let r = (t as u32 + p) % a.racks;
                    vec![format!("r{r}"), format!("r{}", (r + 1) % a.racks)]
                })
                .collect()
        } else {
            Vec::new()
        };
        b.add_topic(name.clone(), a.partitions as i64, racks);
    }
    let mut owned: Vec<Vec<(String, i32)>> = vec![Vec::new(); a.members as usize];
    if a.owned == Owned::Prev && a.members > 1 {
        let prev = a.members - 1;
        let mut k = 0u32;
        for (t, name) in names.iter().enumerate() {
            for p in 0..a.partitions {
                let owner = (0..prev)
                    .map(|tries| (k + tries) % prev)
                    .find(|mi| subscribes(a.subs, *mi, t as u32, a.topics));
                if let Some(mi) = owner {
                    owned[mi as usize].push((name.clone(), p as i32));
                    k = mi + 1;
                }
            }
        }
    }
    for (i, owned) in owned.into_iter().enumerate() {
        let i = i as u32;
        let is_prev_owner = a.owned == Owned::Prev && i + 1 < a.members;
        b.add_member(Member {
            member_id: format!("consumer-{i:05}"),
            rack: (a.racks > 0).then(|| format!("r{}", i % a.racks)),
            topics: (0..a.topics)
                .filter(|j| subscribes(a.subs, i, *j, a.topics))
                .map(|j| names[j as usize].clone())
                .collect(),
            owned_partitions: owned,
            generation: is_prev_owner.then_some(1),
            ..Default::default()
        });
    }
    Ok(b.build()?)
}

pub fn run(a: &AssignBenchArgs) -> Result<AssignBenchResult> {
    let assignor = builtin(&a.strategy)?;
    let spec = build_group(a)?;
    let runs = a.runs.max(1);
    let mut times = Vec::with_capacity(runs as usize);
    let mut peak = 0usize;
    let mut assigned = 0u64;
    for _ in 0..runs {
        let ((elapsed, result), bytes) = crate::alloc::peak_during(|| {
            let start = Instant::now();
            let result = assignor.assign(&spec);
            (start.elapsed(), result)
        });
        let result = result?;
        assigned = result
            .members
            .iter()
            .map(|m| (m.partitions.len() + m.pending.len()) as u64)
            .sum();
        times.push(elapsed.as_secs_f64() * 1000.0);
        peak = peak.max(bytes);
    }
    times.sort_by(|x, y| x.total_cmp(y));
    Ok(AssignBenchResult {
        strategy: a.strategy.clone(),
        topics: a.topics,
        partitions: a.partitions,
        members: a.members,
        subs: a.subs,
        owned: a.owned,
        racks: a.racks,
        runs,
        median_ms: times[times.len() / 2],
        min_ms: times[0],
        max_ms: times[times.len() - 1],
        peak_mib: peak as f64 / (1024.0 * 1024.0),
        assigned_partitions: assigned,
    })
}

pub fn render(r: &AssignBenchResult) -> String {
    format!(
        "assign strategy={} topics={} partitions={} members={} subs={} owned={} racks={} runs={}\n  \
         median {:.1} ms  min {:.1} ms  max {:.1} ms  peak {:.1} MiB  ({} partitions assigned)",
        r.strategy,
        r.topics,
        r.partitions,
        r.members,
        match r.subs {
            Subs::Uniform => "uniform",
            Subs::Nonuniform => "nonuniform",
        },
        match r.owned {
            Owned::None => "none",
            Owned::Prev => "prev",
        },
        r.racks,
        r.runs,
        r.median_ms,
        r.min_ms,
        r.max_ms,
        r.peak_mib,
        r.assigned_partitions
    )
}
