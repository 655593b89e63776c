//! The `hot-partitions` load scenario: a synthetic workload where a few partitions carry many
//! times the byte rate of the others, then a member leaves, one joins, and the heat moves to
//! other partitions, which also have a backlog to catch up on.
//!
//! Exact definition (so other implementations can replay it): topics `hot0..`, members `c00..`
//! subscribing to every topic; partition `i` (topic-major) has a base rate of
//! `1 MB/s * (0.5 + u_i)`, `u_i` the i-th draw of splitmix64 from `seed` mapped to [0, 1); the
//! hot partitions are the first `hot` distinct indices of the next draws modulo the partition
//! count, their rate multiplied by `hot_factor`.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Result};

use super::load_sim::{JoinJson, LoadScenario, LoadStep};

const BASE_RATE: f64 = 1_000_000.0;

/// Shape of the `hot-partitions` scenario.
#[derive(Debug, Clone, clap::Args)]
pub struct HotParams {
    /// hot-partitions: topics.
    #[arg(long, default_value_t = 4)]
    pub topics: u32,
    /// hot-partitions: partitions per topic.
    #[arg(long, default_value_t = 16)]
    pub partitions: u32,
    /// hot-partitions: members at the start.
    #[arg(long, default_value_t = 8)]
    pub members: u32,
    /// hot-partitions: partitions that turn hot.
    #[arg(long, default_value_t = 3)]
    pub hot: u32,
    /// hot-partitions: a hot partition's rate over its base rate.
    #[arg(long, default_value_t = 10.0)]
    pub hot_factor: f64,
    /// hot-partitions: seed of the rates and of the choice of hot partitions.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub fn scenario(p: &HotParams) -> Result<LoadScenario> {
    let total = u64::from(p.topics) * u64::from(p.partitions);
    if p.topics == 0 || p.partitions == 0 || p.members < 2 {
        bail!("hot-partitions needs a topic, a partition and two members");
    }
    if u64::from(p.hot) * 2 > total || !(p.hot_factor.is_finite() && p.hot_factor >= 1.0) {
        bail!("hot-partitions needs at most half the partitions hot and a hot factor >= 1");
    }
    let mut rng = SplitMix(p.seed);
    let names: Vec<String> = (0..p.topics).map(|t| format!("hot{t}")).collect();
    let key = |i: u64| {
        let t = (i / u64::from(p.partitions)) as usize;
        format!("{}-{}", names[t], i % u64::from(p.partitions))
    };
    let base: Vec<f64> = (0..total).map(|_| BASE_RATE * (0.5 + rng.unit())).collect();
    let first = pick(&mut rng, total, p.hot, &BTreeSet::new());
    let second = pick(&mut rng, total, p.hot, &first);
    let rates = |hot: &BTreeSet<u64>| -> BTreeMap<String, f64> {
        (0..total)
            .map(|i| {
                let f = if hot.contains(&i) { p.hot_factor } else { 1.0 };
                (key(i), base[i as usize] * f)
            })
            .collect()
    };
    let member = |i: u32| JoinJson {
        member_id: format!("c{i:02}"),
        topics: names.clone(),
    };
    let hot_names = |s: &BTreeSet<u64>| s.iter().map(|&i| key(i)).collect::<Vec<_>>().join(", ");
    let steps = vec![
        LoadStep {
            label: format!("{} consumers start", p.members),
            join: (0..p.members).map(member).collect(),
            rates: rates(&BTreeSet::new()),
            ..LoadStep::default()
        },
        LoadStep {
            label: format!("{} turn hot", hot_names(&first)),
            rates: rates(&first),
            ..LoadStep::default()
        },
        LoadStep {
            label: format!("c{:02} leaves", p.members - 1),
            leave: vec![format!("c{:02}", p.members - 1)],
            ..LoadStep::default()
        },
        LoadStep {
            label: format!("c{:02} joins", p.members),
            join: vec![member(p.members)],
            ..LoadStep::default()
        },
        LoadStep {
            label: format!("heat moves to {} (with a backlog)", hot_names(&second)),
            rates: rates(&second),
            backlog: second
                .iter()
                .map(|&i| (key(i), base[i as usize] * 60.0))
                .collect(),
            ..LoadStep::default()
        },
    ];
    Ok(LoadScenario {
        name: "hot-partitions".into(),
        description: format!(
            "{} topics x {} partitions at 0.5-1.5 MB/s each, {} members; {} partitions at {}x",
            p.topics, p.partitions, p.members, p.hot, p.hot_factor
        ),
        topics: names
            .iter()
            .map(|n| (n.clone(), p.partitions as i32))
            .collect(),
        backlog_weight: gregor_assign::load::DEFAULT_BACKLOG_WEIGHT,
        steps,
    })
}

/// `n` distinct partition indices not in `avoid`.
fn pick(rng: &mut SplitMix, total: u64, n: u32, avoid: &BTreeSet<u64>) -> BTreeSet<u64> {
    let mut out = BTreeSet::new();
    while out.len() < n as usize {
        let i = rng.next() % total;
        if !avoid.contains(&i) {
            out.insert(i);
        }
    }
    out
}
