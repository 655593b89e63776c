//! `gregor-sim`: runs seeds of the deterministic cluster simulation.

use anyhow::Result;
use clap::Parser;
use gregor_sim::{run_seed, Mode, PlantedBug, SimOptions};

gregor_sim::deterministic_entropy!();

/// Log lines carry the simulated time (none outside a simulated host), not the wall clock, so
/// two replays of a seed can be compared line by line.
struct SimulatedTime;

impl tracing_subscriber::fmt::time::FormatTime for SimulatedTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        match turmoil::sim_elapsed() {
            Some(t) => write!(w, "{:>9.3}", t.as_secs_f64()),
            None => write!(w, "{:>9}", "-"),
        }
    }
}

#[derive(Parser)]
#[command(about = "Deterministic simulation of a Gregor controller quorum under seeded faults")]
struct Args {
    /// Number of seeds to run.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// Run only this seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Print the full event trace (with --seed).
    #[arg(long)]
    trace: bool,
    /// One JSON object per line instead of text.
    #[arg(long)]
    json: bool,
    /// Plant a classic bug to see the checker catch it: ack-uncommitted, forget-vote, or
    /// (with --replication) hw-max.
    #[arg(long)]
    plant: Option<String>,
    /// Run whole brokers replicating an RF 3 topic under producers and a consumer, instead of
    /// the controller quorum alone.
    #[arg(long)]
    replication: bool,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .with_timer(SimulatedTime)
            .with_ansi(false)
            .init();
    }
    let bug = match args.plant.as_deref() {
        None => None,
        Some("ack-uncommitted") => Some(PlantedBug::AckUncommitted),
        Some("forget-vote") => Some(PlantedBug::ForgetVote),
        Some("hw-max") => Some(PlantedBug::HighWatermarkMax),
        Some(other) => {
            anyhow::bail!("unknown bug to plant: {other} (ack-uncommitted, forget-vote, hw-max)")
        }
    };
    let mode = if args.replication {
        Mode::Replication
    } else {
        Mode::Quorum
    };
    let seeds: Vec<u64> = match args.seed {
        Some(s) => vec![s],
        None => (args.from..args.from.saturating_add(args.seeds)).collect(),
    };
    let started = std::time::Instant::now();
    let mut failed = 0usize;
    let mut sim_ms = 0u64;
    for &seed in &seeds {
        let outcome = run_seed(SimOptions { seed, bug, mode });
        sim_ms += outcome.sim_ms;
        if args.trace {
            for line in &outcome.trace {
                println!("{line}");
            }
        }
        if args.json {
            println!("{}", serde_json::to_string(&outcome)?);
        } else if !outcome.passed() {
            let excerpt: Vec<&String> = outcome
                .trace
                .iter()
                .filter(|l| {
                    l.contains("fault")
                        || l.contains("VIOLATION")
                        || l.contains("leads")
                        || l.contains(" leader ")
                })
                .rev()
                .take(6)
                .collect();
            for v in &outcome.violations {
                println!("seed {seed} FAIL {}: {}", v.property, v.detail);
            }
            for l in excerpt.into_iter().rev() {
                println!("    {l}");
            }
        }
        if !outcome.passed() {
            failed += 1;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let summary = format!(
        "{} seeds, {} failed, {:.1} s, {:.2} seeds/s, {:.0} s simulated",
        seeds.len(),
        failed,
        secs,
        seeds.len() as f64 / secs.max(1e-9),
        sim_ms as f64 / 1000.0
    );
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "summary": summary, "seeds": seeds.len(), "failed": failed })
        );
    } else {
        println!("{summary}");
    }
    if failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}
