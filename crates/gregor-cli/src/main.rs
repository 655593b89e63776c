//! The `gregor` command line.

mod admin;
mod alloc;
mod assign_cmd;
mod bench_assign;
mod bench_consume;
mod bench_kafka;
mod bench_replay;
mod broker_cmd;
mod broker_log;
mod cluster_cmd;
mod cluster_control;
mod cluster_nodes;
mod cluster_supervise;
mod console_consumer;
mod group_json;
mod lab;
mod storage_cmd;
mod wall_clock;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

#[derive(Debug, Parser)]
#[command(
    name = "gregor",
    version,
    about = "Gregor: a Kafka-compatible log broker and its tools"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a broker (single node with no arguments: 127.0.0.1:9092, data in ./gregor-data).
    Broker(broker_cmd::BrokerArgs),
    /// Run a local cluster of combined broker+controller nodes (`cluster up --nodes 3`).
    Cluster(cluster_cmd::ClusterArgs),
    /// Create, delete, describe, list or alter topics (like kafka-topics.sh).
    Topics(admin::TopicsArgs),
    /// List, describe, reset the offsets of, or delete consumer groups (like kafka-consumer-groups.sh).
    Groups(admin::GroupsArgs),
    /// Describe or alter topic, broker and group configs (like kafka-configs.sh).
    Configs(admin::ConfigsArgs),
    /// Print a topic's records (like kafka-console-consumer.sh; `--isolation-level
    /// read_committed` leaves out aborted transactions).
    #[command(alias = "console-consumer")]
    Consume(console_consumer::ConsoleConsumerArgs),
    /// Add, remove or list ACLs (like kafka-acls.sh).
    Acls(admin::AclsArgs),
    /// Elect partition leaders, preferred or unclean (like kafka-leader-election.sh).
    Elect(admin::ElectArgs),
    /// Generate, execute, verify, cancel or list partition reassignments (like
    /// kafka-reassign-partitions.sh).
    Reassign(admin::ReassignArgs),
    /// List, describe and abort transactions, find hanging ones (like kafka-transactions.sh).
    Transactions(admin::TransactionsArgs),
    /// Describe, upgrade, downgrade or disable feature levels (like kafka-features.sh).
    Features(admin::FeaturesArgs),
    /// Format a data directory with a cluster id, or print a new one (like kafka-storage.sh).
    Storage(storage_cmd::StorageArgs),
    /// Compute a group's partition assignment from a JSON description and print it as JSON.
    Assign {
        /// Group description (JSON); `-` reads standard input.
        #[arg(long)]
        input: PathBuf,
        /// Strategy: range, roundrobin, sticky or cooperative-sticky (overrides the file's).
        #[arg(long)]
        strategy: Option<String>,
    },
    /// Compare the assignment strategies on a scenario of membership changes (`lab run`: live,
    /// against a broker).
    #[command(args_conflicts_with_subcommands = true)]
    Lab {
        #[command(subcommand)]
        live: Option<LabCommand>,
        /// A bundled scenario name or a scenario file (default: seed-002).
        scenario: Option<String>,
        /// Comma-separated strategies to compare.
        #[arg(
            long,
            default_value = "range,roundrobin,sticky,cooperative-sticky",
            value_delimiter = ','
        )]
        strategies: Vec<String>,
        /// List the bundled scenarios.
        #[arg(long)]
        list: bool,
        /// JSON output for scripts.
        #[arg(long)]
        json: bool,
    },
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        what: BenchCommand,
    },
}

#[derive(Debug, Subcommand)]
enum LabCommand {
    /// Play the scenario with real consumers against a broker, one group per strategy.
    Run(lab::run::RunArgs),
    /// The broker's server-side assignors (uniform, range) and the load-aware `load` side by
    /// side on membership and byte-rate changes (seed-002-skew, hot-partitions, or a file).
    Load(lab::load_lab::LoadArgs),
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Time one strategy's assignment call on a synthetic group.
    Assign(bench_assign::AssignBenchArgs),
    /// Partition log throughput against the raw bandwidth of the same disk.
    Log(LogBenchArgs),
    /// Produce load against a broker: MB/s and latency percentiles, acks=all.
    Produce(bench_kafka::LoadArgs),
    /// Consume throughput (librdkafka and Gregor consumers) against loopback TCP and a
    /// page-cache read of the same bytes, per partition count.
    Consume(bench_consume::ConsumeArgs),
}

#[derive(Debug, clap::Args)]
struct LogBenchArgs {
    /// Directory on the disk to measure (a scratch subdirectory is created and removed).
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Seconds per case, split between the raw-disk and the log measurement.
    #[arg(long, default_value_t = 4.0)]
    seconds: f64,
    /// Batch sizes in bytes (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [16 * 1024, 1024 * 1024])]
    batch_bytes: Vec<usize>,
    /// Concurrent writer counts for the fsync cases (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [1, 4, 16])]
    writers: Vec<usize>,
    /// One JSON object per line and case.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gregor: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    // The broker logs at info by default; the client commands stay quiet unless RUST_LOG asks
    // (e.g. RUST_LOG=gregor_client=debug to follow a consumer's rebalances).
    if !matches!(cli.command, Command::Broker(_)) && std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
    match cli.command {
        Command::Broker(args) => broker_cmd::run(args)?,
        Command::Cluster(args) => cluster_cmd::run(args)?,
        Command::Topics(args) => admin::block_on(admin::run_topics(args))??,
        Command::Groups(args) => admin::block_on(admin::run_groups(args))??,
        Command::Configs(args) => admin::block_on(admin::run_configs(args))??,
        Command::Consume(args) => admin::block_on(console_consumer::run(args))??,
        Command::Acls(args) => admin::block_on(admin::run_acls(args))??,
        Command::Elect(args) => admin::block_on(admin::run_elect(args))??,
        Command::Reassign(args) => admin::block_on(admin::run_reassign(args))??,
        Command::Transactions(args) => admin::block_on(admin::run_transactions(args))??,
        Command::Features(args) => admin::block_on(admin::run_features(args))??,
        Command::Storage(args) => storage_cmd::run(args)?,
        Command::Assign { input, strategy } => {
            let text = assign_cmd::read_input(&input)?;
            let out = assign_cmd::run(&text, strategy.as_deref())?;
            println!("{}", serde_json::to_string_pretty(&out)?);
        }
        Command::Lab {
            live: Some(LabCommand::Run(args)),
            ..
        } => run_lab_live(&args)?,
        Command::Lab {
            live: Some(LabCommand::Load(args)),
            ..
        } => print!("{}", lab::load_lab::main(&args)?),
        Command::Lab {
            live: None,
            scenario,
            strategies,
            list,
            json,
        } => run_lab(scenario.as_deref(), &strategies, list, json)?,
        Command::Bench { what } => run_bench(what)?,
    }
    Ok(())
}

/// `gregor lab run`: the scenario with real consumers against a broker.
fn run_lab_live(args: &lab::run::RunArgs) -> Result<()> {
    let scenario = lab::run::load_live(&args.scenario)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let report = runtime.block_on(lab::run::run(args, &scenario))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", lab::run::render_text(&report));
    }
    Ok(())
}

/// `gregor lab`: the scenario simulated, or the bundled scenarios listed.
fn run_lab(scenario: Option<&str>, strategies: &[String], list: bool, json: bool) -> Result<()> {
    if list {
        for (name, text) in lab::BUNDLED {
            let s: lab::Scenario = serde_json::from_str(text).context("bundled scenario")?;
            println!("{name:<30} {}", s.description);
        }
        return Ok(());
    }
    let scenario = lab::load(scenario.unwrap_or("seed-002"))?;
    let report = lab::run(&scenario, strategies)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", lab::render_text(&report));
    }
    Ok(())
}

/// `gregor bench ...`.
fn run_bench(what: BenchCommand) -> Result<()> {
    match what {
        BenchCommand::Assign(args) => {
            let r = bench_assign::run(&args)?;
            if args.json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!("{}", bench_assign::render(&r));
            }
        }
        BenchCommand::Produce(args) => {
            let json = args.json;
            let r = admin::block_on(bench_kafka::produce(args))??;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!(
                    "produce acks=all: {} records, {:.1} MB/s, {:.0} records/s, latency p50 {:.2} ms p99 {:.2} ms p999 {:.2} ms; raw fdatasync {:.1} MB/s, ratio {:.2}",
                    r.records, r.mb_per_s, r.records_per_s, r.latency_p50_ms, r.latency_p99_ms,
                    r.latency_p999_ms, r.raw_fdatasync_mb_per_s, r.ratio
                );
            }
        }
        BenchCommand::Consume(args) => {
            // Each case prints as it completes.
            admin::block_on(bench_consume::run(args))??;
        }
        BenchCommand::Log(args) => bench_log(args)?,
    }
    Ok(())
}

/// `gregor bench log`: the partition log against the raw disk.
fn bench_log(args: LogBenchArgs) -> Result<()> {
    if args.seconds <= 0.0 || args.batch_bytes.is_empty() || args.writers.is_empty() {
        anyhow::bail!("--seconds must be positive and --batch-bytes, --writers non-empty");
    }
    let mut opts = gregor_log::bench::BenchOptions::new(&args.dir);
    opts.seconds = args.seconds;
    opts.batch_bytes = args.batch_bytes;
    opts.writers = args.writers;
    let cases = gregor_log::bench::run(&opts)
        .with_context(|| format!("log benchmark in {}", args.dir.display()))?;
    for c in cases {
        if args.json {
            println!("{}", serde_json::to_string(&c)?);
        } else {
            println!(
                "{:<24} writers {:>2}  {:>9.1} MB/s  raw {:>9.1} MB/s  ratio {:>6.2}",
                c.case, c.writers, c.mb_per_s, c.raw_mb_per_s, c.ratio
            );
        }
    }
    Ok(())
}
