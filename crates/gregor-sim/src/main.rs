//! `gregor-sim`: runs seeds of the deterministic cluster simulation.

use anyhow::{Context, Result};
use clap::Parser;
use gregor_sim::{run_seed, run_seeds_in_children, Mode, Outcome, PlantedBug, SimOptions};

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
    /// Plant a classic bug to see the checker catch it: ack-uncommitted, forget-vote,
    /// reload-stale-snapshot, committed-is-log-end, snapshot-without-epochs,
    /// retry-timed-out-write, or (with --replication) hw-max, truncate-to-hw, isr-shrink-early,
    /// skip-follower-fsync, probe-fences-live, restamp-epoch, read-uncommitted,
    /// follower-forgets-producers, election-keeps-epoch, reuse-value-buffer,
    /// stale-fetch-position, decide-unconfirmed, (with
    /// --replication --groups) stale-sync, replay-keeps-first-commit, fetch-past-commit,
    /// drop-last-record, (with --replication --groups --group-protocol consumer)
    /// consumer-replay-first-epoch, (with --replication --groups --group-protocol mixed)
    /// upgrade-drops-assignment, (with --replication --topic-admin) keep-stray-logs, (with
    /// --replication --acls) ack-acl-unapplied, (with --replication --quotas)
    /// ack-quota-unapplied, (with --replication --transactions) txn-abort-visible,
    /// txn-fenced-produce, txn-offsets-early, txn-marker-before-prepare.
    #[arg(long)]
    plant: Option<String>,
    /// Run whole brokers replicating an RF 3 topic under producers and a consumer, instead of
    /// the controller quorum alone.
    #[arg(long)]
    replication: bool,
    /// Disk faults: three crashes in four become power losses (unsynced bytes and directory
    /// entries dropped, the last unsynced write possibly torn), and half the seeds end with an
    /// outage of every node at once.
    #[arg(long)]
    power_loss: bool,
    /// With --replication: reassign the data topic's partitions (to two or three nodes) and
    /// elect preferred leaders while the faults run; after them every reassignment must
    /// complete.
    #[arg(long)]
    admin: bool,
    /// With --replication: a consumer group of two or three members (the real gregor-client
    /// consumer, one strategy drawn per seed) consumes the data topic while the faults run,
    /// members leaving and vanishing; checked for two owners of a partition in one
    /// generation, commits going back, skipped records, and the group finishing.
    #[arg(long)]
    groups: bool,
    /// With --groups: one member incarnation in four, while the faults run, stops polling for
    /// longer than its max.poll.interval.ms (2.5 s) before it commits what it read, as an
    /// application stuck in its processing; checked like every other commit.
    #[arg(long)]
    stalls: bool,
    /// With --groups: static members. Each member has a group.instance.id that every one of
    /// its incarnations keeps, so a restart takes its place (and its assignment) without a
    /// rebalance; checked like every other group.
    #[arg(long)]
    static_members: bool,
    /// With --groups: the group protocol of the members, classic (JoinGroup/SyncGroup, a
    /// strategy drawn per seed) or consumer (KIP-848's ConsumerGroupHeartbeat, the
    /// coordinator's uniform or range assignor drawn per seed, and member epochs checked).
    /// Or mixed: each incarnation draws classic or consumer, so the group migrates online
    /// between the protocols. Or load: consumer, with the coordinator's `load` assignor, which
    /// reviews the group with measured partition load every 500 ms.
    #[arg(long, default_value = "classic", value_parser = ["classic", "consumer", "mixed", "load"])]
    group_protocol: String,
    /// With --replication: after the other faults, one or two episodes of a full disk or
    /// failing fsyncs on one node, which is then restarted on the repaired disk (keeping only
    /// what it synced).
    #[arg(long)]
    disk_faults: bool,
    /// With --replication: one to three episodes, overlapping the others, in which every
    /// fsync of one node takes 2-40 ms or 100-1500 ms of simulated time.
    #[arg(long)]
    slow_disk: bool,
    /// With --replication: one to three episodes, overlapping the others, in which one node's
    /// wall clock jumps 0.2-8 s forward or back, then is stepped back to the right time.
    #[arg(long)]
    clock_jumps: bool,
    /// With --replication: after the other faults, one or two cascading crashes: a data
    /// partition's leader crashes, then its successor 0-60 ms after it takes over; both
    /// restart 1.5-4 s after the first crash.
    #[arg(long)]
    cascading_crashes: bool,
    /// With --replication: create side topics, add partitions to them, delete them and ask for
    /// unclean elections of their partitions while the faults run; after them every node must
    /// agree on the side topics as acknowledged, host exactly their logs, and take a write to
    /// each partition.
    #[arg(long)]
    topic_admin: bool,
    /// With --replication: create ACL bindings and delete some of them while the faults run
    /// (with the slow-disk episodes of --slow-disk); the node that acknowledged a change must
    /// enforce it, and after them every node must describe the same ACLs, as acknowledged.
    #[arg(long)]
    acls: bool,
    /// With --replication: set and remove users' byte-rate quotas while the faults run (with
    /// the slow-disk episodes of --slow-disk); the node that acknowledged a change must
    /// describe it, and after them every node must
    /// describe the same quotas, as acknowledged.
    #[arg(long)]
    quotas: bool,
    /// With --replication: after the other faults, one or two splits of the cluster in two
    /// (two against three on five nodes), sometimes with the clients cut off from the smaller
    /// side.
    #[arg(long)]
    splits: bool,
    /// With --replication: after the other faults, one or two partitions that are not
    /// transitive: two groups of nodes cannot reach each other while the rest reach both.
    #[arg(long)]
    bridges: bool,
    /// One to three more crashes (power losses with --power-loss), isolations, one-way
    /// partitions, pauses, held links (full disks and failing fsyncs with --disk-faults) that
    /// overlap the other faults and each other.
    #[arg(long)]
    overlaps: bool,
    /// With --replication: two transactional producers (commits, aborts, a client that
    /// crashes and is fenced by its successor) on a topic of their own, then a read_committed
    /// consumer; no aborted or fenced record may be visible, every committed one must be, once,
    /// and every partition's last stable offset must reach its high watermark.
    #[arg(long)]
    transactions: bool,
    /// Seeds run at the same time, each in a process of its own (default: the number of CPUs).
    #[arg(long)]
    jobs: Option<usize>,
    /// Internal: run the one --seed in this process and print its whole outcome as JSON (how
    /// a run of many seeds starts each one).
    #[arg(long, hide = true)]
    child: bool,
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
    let bug = planted_bug(&args)?;
    let options = |seed| sim_options(&args, bug, seed);
    if args.child {
        // One seed for a parent `gregor-sim`: the whole outcome, trace included, as JSON.
        let seed = args.seed.context("--child needs --seed")?;
        let outcome = run_seed(options(seed));
        println!("{}", serde_json::to_string(&outcome)?);
        return Ok(());
    }
    if let Some(seed) = args.seed {
        // One seed: this process is as fresh as a child would be, so it runs here (and its
        // RUST_LOG logs come out as they happen).
        let mut outcome = run_seed(options(seed));
        report(&args, &mut outcome);
        if !outcome.passed() {
            std::process::exit(1);
        }
        return Ok(());
    }
    let runs: Vec<SimOptions> = (args.from..args.from.saturating_add(args.seeds))
        .map(options)
        .collect();
    if run_many(&args, &runs)? > 0 {
        std::process::exit(1);
    }
    Ok(())
}

/// The bug `--plant` names, if any.
fn planted_bug(args: &Args) -> Result<Option<PlantedBug>> {
    let Some(name) = args.plant.as_deref() else {
        return Ok(None);
    };
    let bug = PlantedBug::from_name(name).with_context(|| {
        let names: Vec<&str> = PlantedBug::ALL.iter().map(|(n, _)| *n).collect();
        format!("unknown bug to plant: {name} ({})", names.join(", "))
    })?;
    Ok(Some(bug))
}

/// One seed's options, as the flags ask.
fn sim_options(args: &Args, bug: Option<PlantedBug>, seed: u64) -> SimOptions {
    SimOptions {
        seed,
        bug,
        mode: if args.replication {
            Mode::Replication
        } else {
            Mode::Quorum
        },
        power_loss: args.power_loss,
        admin: args.admin,
        groups: args.groups,
        stalls: args.stalls,
        static_members: args.static_members,
        consumer_protocol: ["consumer", "load"].contains(&args.group_protocol.as_str()),
        mixed_protocols: args.group_protocol == "mixed",
        load_assignor: args.group_protocol == "load",
        disk_faults: args.disk_faults,
        slow_disk: args.slow_disk,
        clock_jumps: args.clock_jumps,
        cascading_crashes: args.cascading_crashes,
        topic_admin: args.topic_admin,
        acls: args.acls,
        quotas: args.quotas,
        splits: args.splits,
        bridges: args.bridges,
        overlaps: args.overlaps,
        transactions: args.transactions,
    }
}

/// Runs `runs`, each seed in a child process, reporting each as it ends and a summary line
/// last; returns how many failed.
fn run_many(args: &Args, runs: &[SimOptions]) -> Result<usize> {
    let exe = std::env::current_exe().context("locating the gregor-sim binary")?;
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let started = std::time::Instant::now();
    let mut failed = 0usize;
    let mut sim_ms = 0u64;
    run_seeds_in_children(&exe, runs, jobs, |outcome| {
        let mut outcome = match outcome {
            Ok(o) => o,
            Err(e) => {
                failed += 1;
                println!("{e}");
                return;
            }
        };
        sim_ms += outcome.sim_ms;
        if !outcome.passed() {
            failed += 1;
        }
        report(args, &mut outcome);
    });
    let secs = started.elapsed().as_secs_f64();
    let summary = format!(
        "{} seeds, {} failed, {:.1} s, {:.2} seeds/s, {:.0} s simulated, {jobs} at a time",
        runs.len(),
        failed,
        secs,
        runs.len() as f64 / secs.max(1e-9),
        sim_ms as f64 / 1000.0
    );
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "summary": summary, "seeds": runs.len(), "failed": failed })
        );
    } else {
        println!("{summary}");
    }
    Ok(failed)
}

/// Prints one seed's outcome: its trace if asked, then a JSON line or, for a failure, the
/// violations and the trace lines that led to them.
fn report(args: &Args, outcome: &mut Outcome) {
    if args.trace {
        for line in &outcome.trace {
            println!("{line}");
        }
    }
    let seed = outcome.seed;
    if args.json {
        let trace = std::mem::take(&mut outcome.trace);
        match serde_json::to_string(&*outcome) {
            Ok(line) => println!("{line}"),
            Err(e) => println!("seed {seed}: cannot write the outcome as JSON: {e}"),
        }
        outcome.trace = trace;
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
}
