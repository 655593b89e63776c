//! `gregor bench assign`: times one strategy's assignment call on a synthetic group
//! (`gregor_assign::synthetic` defines it precisely).
//!
//! Each call is timed twice: wall clock, and the calling thread's CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`; the assignors run on the calling thread). On a shared machine the
//! wall clock includes the time other processes held the cores; the CPU time does not, so it is
//! the figure to compare across loaded runs (it still grows somewhat with contention, through
//! caches).

use std::time::Instant;

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use gregor_assign::builtin;
use gregor_assign::synthetic::{Subscriptions, Synthetic};
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
    /// CPU time of the calling thread per call.
    pub cpu_median_ms: f64,
    pub cpu_min_ms: f64,
    pub cpu_max_ms: f64,
    pub peak_mib: f64,
    pub assigned_partitions: u64,
}

/// The synthetic group the arguments describe.
pub fn synthetic(a: &AssignBenchArgs) -> Result<Synthetic> {
    if a.topics == 0 || a.members == 0 {
        bail!("--topics and --members must be at least 1");
    }
    Ok(Synthetic {
        topics: a.topics,
        partitions: a.partitions,
        members: a.members,
        subscriptions: match a.subs {
            Subs::Uniform => Subscriptions::Uniform,
            Subs::Nonuniform => Subscriptions::Nonuniform,
        },
        owned_prev: a.owned == Owned::Prev,
        racks: a.racks,
    })
}

pub fn run(a: &AssignBenchArgs) -> Result<AssignBenchResult> {
    let assignor = builtin(&a.strategy)?;
    let spec = synthetic(a)?.build()?;
    let runs = a.runs.max(1);
    let mut times = Vec::with_capacity(runs as usize);
    let mut cpu = Vec::with_capacity(runs as usize);
    let mut peak = 0usize;
    let mut assigned = 0u64;
    for _ in 0..runs {
        let ((elapsed, cpu_ms, result), bytes) = crate::alloc::peak_during(|| {
            let cpu_start = thread_cpu_ms();
            let start = Instant::now();
            let result = assignor.assign(&spec);
            let elapsed = start.elapsed();
            (elapsed, thread_cpu_ms() - cpu_start, result)
        });
        let result = result?;
        assigned = result
            .members
            .iter()
            .map(|m| (m.partitions.len() + m.pending.len()) as u64)
            .sum();
        times.push(elapsed.as_secs_f64() * 1000.0);
        cpu.push(cpu_ms);
        peak = peak.max(bytes);
    }
    times.sort_by(|x, y| x.total_cmp(y));
    cpu.sort_by(|x, y| x.total_cmp(y));
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
        cpu_median_ms: cpu[cpu.len() / 2],
        cpu_min_ms: cpu[0],
        cpu_max_ms: cpu[cpu.len() - 1],
        peak_mib: peak as f64 / (1024.0 * 1024.0),
        assigned_partitions: assigned,
    })
}

/// CPU time consumed by the calling thread so far, in milliseconds.
pub(crate) fn thread_cpu_ms() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec that outlives the call; clock_gettime only
    // writes it. A failure (-1: no such clock) reports 0 CPU time rather than a bogus figure.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 * 1000.0 + ts.tv_nsec as f64 / 1e6
}

pub fn render(r: &AssignBenchResult) -> String {
    format!(
        "assign strategy={} topics={} partitions={} members={} subs={} owned={} racks={} runs={}\n  \
         median {:.1} ms  min {:.1} ms  max {:.1} ms  peak {:.1} MiB  ({} partitions assigned)\n  \
         thread CPU per call: median {:.1} ms  min {:.1} ms  max {:.1} ms",
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
        r.assigned_partitions,
        r.cpu_median_ms,
        r.cpu_min_ms,
        r.cpu_max_ms
    )
}
