//! `gregor bench consume`: how fast a broker serves consumers, against the machine's own
//! limits measured in the same run.
//!
//! For each partition count in `--partitions`, a fresh topic is filled with `--mb` megabytes
//! of `--record-bytes` records (batches of `--batch-records`), then read back in full by:
//!   - a native librdkafka consumer (`kcat -C -e`, timed from its start to its exit), twice:
//!     with librdkafka's defaults, then with the properties of `--kcat-tuned` (the settings
//!     that read fastest here; the invocation is in the output),
//!   - the same two librdkafka consumers against a replay of the broker's own Fetch answers
//!     from memory (`bench_replay`): the ceiling no broker can pass with each consumer on
//!     this machine, next to which the broker's figure is also given,
//!   - the Gregor client's `Consumer` in a fresh group (timed from its first record to the
//!     last; the group join before is reported apart), twice: with the client's defaults and
//!     with `fetch.max.bytes` of `--gregor-tuned-fetch-max-bytes`,
//!
//! next to two baselines moving the same number of bytes: a page-cache read of a file holding
//! them (`raw_read`), and loopback TCP (a plain socket sender and receiver in this process,
//! `--loopback-runs` times per receiver read size in `--loopback-reads`, each read size's
//! median run reported; the fastest of those is the baseline).
//! Each consumer's figure is also given as a ratio of loopback, and, with `--broker-pid`, as
//! the broker's CPU seconds (user + system, from `/proc/<pid>/stat`) per GB read. The topic is
//! deleted after its case.
//!
//! Paired ratios: the machine's noise comes in bursts of a second or more, which can fall on
//! the baseline's runs and miss a consumer's, or the other way round. So every consumer run
//! is also preceded by one loopback run at the baseline's read size, and each series reports
//! the median over its runs of run MB/s / that loopback run's MB/s: how near loopback the
//! consumer came under the same conditions.
//!
//! CPU ceilings: for every process measured (each consumer, the broker, loopback's sender and
//! receiver) the bench reports its CPU seconds per GB and the throughput it could reach with a
//! whole core to itself (1 / its CPU s/GB), and its share of a core during its run (CPU
//! seconds / wall seconds). A consumer whose share is near 1 (one busy thread) or whose
//! ceiling is near what it measured is CPU-bound; one well below its ceiling is waiting.

mod figures;
mod machine;
mod render;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use gregor_client::admin::topics::{CreateTopicsOptions, NewTopic};
use gregor_client::consumer::AutoOffsetReset;
use gregor_client::consumer::FetchMetrics;
use gregor_client::{Admin, Client, ClientConfig, Consumer, ConsumerConfig};

use machine::{ceiling, clock_ticks, cpu_seconds, loopback, self_cpu_seconds};
use render::render;

pub use figures::{ConsumeCase, ConsumerFigure, LoopbackFigure, ReplayFigure};

#[derive(Debug, Clone, Args)]
pub struct ConsumeArgs {
    /// Broker to read from.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap_server: String,
    /// Prefix of the topics created (one per partition count, deleted afterwards).
    #[arg(long, default_value = "gregor-bench-consume")]
    pub topic: String,
    /// Partition counts to measure (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [1, 8, 256])]
    pub partitions: Vec<i32>,
    /// Megabytes of record batches per case.
    #[arg(long, default_value_t = 256)]
    pub mb: u64,
    /// Size of each record's value.
    #[arg(long, default_value_t = 1024)]
    pub record_bytes: usize,
    /// Records per produced batch.
    #[arg(long, default_value_t = 64)]
    pub batch_records: usize,
    /// The broker's process id, for its CPU time per GB consumed.
    #[arg(long)]
    pub broker_pid: Option<u32>,
    /// The librdkafka consumer to run.
    #[arg(long, default_value = "kcat")]
    pub kcat: String,
    /// Leave out the librdkafka consumer.
    #[arg(long)]
    pub skip_kcat: bool,
    /// Runs of each kcat series per case, alternated (default, tuned, replay, tuned replay,
    /// default, ...); each series reports its median run.
    #[arg(long, default_value_t = 1)]
    pub kcat_runs: usize,
    /// Runs of the Gregor consumer per case (each in a fresh group), after the kcat series;
    /// it reports its median run, as each kcat series does.
    #[arg(long, default_value_t = 1)]
    pub gregor_runs: usize,
    /// `fetch.max.bytes` for a second Gregor consumer series, alternated run by run with the
    /// one with the client's defaults (50 MiB, Kafka's; the client's fetch window stays at 8
    /// MiB of it on a short round trip); 0, the default: no second series.
    #[arg(long, default_value_t = 0)]
    pub gregor_tuned_fetch_max_bytes: i32,
    /// Leave out the librdkafka run against a replay of the broker's answers from memory
    /// (it runs kcat once more per case and once more per run of each series, and holds the
    /// topic's answers in memory).
    #[arg(long)]
    pub skip_replay: bool,
    /// librdkafka properties (`KEY=VALUE`, comma-separated) for a second kcat run after the one
    /// with defaults; empty: no second run. The default: Fetches of at most 1 MiB (librdkafka's
    /// smallest `fetch.max.bytes`, instead of 50 MiB). librdkafka's own work per byte grows
    /// with the size of the answers it parses; with 8 and 256 partitions this read 1.1-1.5
    /// times as fast as its defaults here, at about half its CPU per GB (BENCHMARKS.md), while
    /// larger queues, socket buffers and per-partition fetches did not help.
    #[arg(long, value_delimiter = ',', default_value = "fetch.max.bytes=1048576")]
    pub kcat_tuned: Vec<String>,
    /// Read sizes of the loopback baseline's receiver (bytes, comma-separated; the sender
    /// writes 1 MiB at a time). Each is measured; the fastest is the baseline the ratios use,
    /// because how much the receiver asks for per read moved loopback's throughput by as much
    /// as 2x in some runs on the project's machine.
    #[arg(long, value_delimiter = ',', default_values_t = [65_536, 1_048_576])]
    pub loopback_reads: Vec<usize>,
    /// Runs of loopback per read size per case (alternated between the read sizes); each
    /// read size reports its median run, as the consumers do, and the baseline is the read
    /// size with the fastest median. One run of loopback moved 1.9 to 5.3 GB/s between cases
    /// of one bench on the project's machine, more than any consumer's runs.
    #[arg(long, default_value_t = 1)]
    pub loopback_runs: usize,
    /// Directory for the page-cache baseline's scratch file.
    #[arg(long, default_value = ".")]
    pub raw_dir: PathBuf,
    /// Gives up on a consumer after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_s: u64,
    /// One JSON object per case.
    #[arg(long)]
    pub json: bool,
    /// A Kafka client properties file saying how the Gregor consumer and the bench's admin
    /// client connect (TLS, SASL), as the admin commands take it. kcat (and the replay, which
    /// runs kcat) take no such file: `--skip-kcat` must be given with it.
    #[arg(long, value_name = "FILE")]
    pub command_config: Option<PathBuf>,
}

/// One consumer's run.
fn validate(a: &ConsumeArgs) -> Result<()> {
    if a.partitions.is_empty() || a.partitions.iter().any(|p| *p < 1 || *p > 10_000) {
        bail!("--partitions must list counts between 1 and 10000");
    }
    if a.loopback_reads.is_empty() || a.loopback_reads.iter().any(|r| !(1..=1 << 26).contains(r)) {
        bail!("--loopback-reads must list read sizes between 1 byte and 64 MiB");
    }
    if !(1..=1000).contains(&a.kcat_runs) {
        bail!("--kcat-runs must be between 1 and 1000");
    }
    if !(1..=1000).contains(&a.gregor_runs) {
        bail!("--gregor-runs must be between 1 and 1000");
    }
    if a.gregor_tuned_fetch_max_bytes < 0 {
        bail!("--gregor-tuned-fetch-max-bytes must be 0 (no tuned series) or a byte count");
    }
    if !(1..=1000).contains(&a.loopback_runs) {
        bail!("--loopback-runs must be between 1 and 1000");
    }
    if a.command_config.is_some() && !a.skip_kcat {
        bail!("--command-config needs --skip-kcat (only the Gregor consumer takes it)");
    }
    if a.mb == 0 || a.record_bytes == 0 || a.batch_records == 0 {
        bail!("--mb, --record-bytes and --batch-records must be at least 1");
    }
    if let Some(bad) = a
        .kcat_tuned
        .iter()
        .find(|p| !p.is_empty() && p.split_once('=').is_none_or(|(k, _)| k.is_empty()))
    {
        bail!("--kcat-tuned: '{bad}' is not KEY=VALUE");
    }
    Ok(())
}

/// Fills `topic` with `batches` copies of `batch`, spread over its partitions, 16 requests in
/// flight.
pub(crate) async fn fill(
    client: &Client,
    topic: &str,
    leaders: Arc<Vec<(i32, i32)>>,
    batch: bytes::Bytes,
    batches: u64,
) -> Result<()> {
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (client, leaders, batch, next) =
            (client.clone(), leaders.clone(), batch.clone(), next.clone());
        let topic = topic.to_string();
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= batches {
                    return Ok::<_, anyhow::Error>(());
                }
                let (partition, leader) = leaders[(i % leaders.len() as u64) as usize];
                let (records, topic) = (batch.clone(), topic.clone());
                crate::bench_kafka::produce_batch(&client, leader, partition, topic, records)
                    .await?;
            }
        }));
    }
    for t in tasks {
        t.await.context("producer task")??;
    }
    Ok(())
}

/// kcat's arguments to read the whole topic, with `properties` as `-X KEY=VALUE`.
fn kcat_args(bootstrap: &str, topic: &str, records: u64, properties: &[String]) -> Vec<String> {
    let mut args: Vec<String> = ["-C", "-b", bootstrap, "-t", topic]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(["-o", "beginning", "-e", "-q", "-c"].map(String::from));
    args.push(records.to_string());
    // One byte per record: kcat's output costs as little as it can.
    args.extend(["-f", "."].map(String::from));
    for p in properties.iter().filter(|p| !p.is_empty()) {
        args.extend(["-X".to_string(), p.clone()]);
    }
    args
}

/// Runs kcat over the whole topic: wall seconds from its start to its exit.
async fn kcat(a: &ConsumeArgs, args: &[String], records: u64) -> Result<f64> {
    let start = Instant::now();
    let mut child = tokio::process::Command::new(&a.kcat)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", a.kcat))?;
    let mut stdout = child.stdout.take().context("kcat stdout")?;
    let counted = tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; 1 << 16];
        let mut n = 0u64;
        loop {
            match stdout.read(&mut buf).await {
                Ok(0) | Err(_) => return n,
                Ok(k) => n += buf[..k].iter().filter(|b| **b == b'.').count() as u64,
            }
        }
    });
    let out = tokio::time::timeout(Duration::from_secs(a.timeout_s), child.wait_with_output())
        .await
        .context("kcat timed out")??;
    let secs = start.elapsed().as_secs_f64();
    let got = counted.await.unwrap_or(0);
    if !out.status.success() || got != records {
        bail!(
            "kcat read {got} of {records} records ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(secs)
}

/// Reads the whole topic with the Gregor consumer: (seconds from the first record to the
/// last, seconds from subscribing to the first record, this process's CPU seconds from the
/// first record to the last when `/proc/self/stat` is readable, the consumer's fetch metrics
/// at the end).
async fn gregor_consume(
    a: &ConsumeArgs,
    topic: &str,
    run: usize,
    fetch_max_bytes: Option<i32>,
    records: u64,
    ticks: f64,
) -> Result<(f64, f64, Option<f64>, FetchMetrics)> {
    let group = format!("{topic}-group-{run}");
    let mut c = ConsumerConfig::new(&a.bootstrap_server, &group)?;
    if let Some(path) = &a.command_config {
        crate::admin::apply_command_config(&mut c.client, path)?;
    }
    if let Some(n) = fetch_max_bytes {
        c.fetch_max_bytes = n;
    }
    c.auto_offset_reset = AutoOffsetReset::Earliest;
    c.enable_auto_commit = false;
    let mut consumer = Consumer::new(c).await?;
    let subscribed = Instant::now();
    consumer.subscribe(&[topic]).await?;
    let deadline = subscribed + Duration::from_secs(a.timeout_s);
    let mut first = None;
    let mut cpu_at_first = None;
    let mut got = 0u64;
    while got < records {
        if Instant::now() > deadline {
            bail!("the Gregor consumer read {got} of {records} records in --timeout-s");
        }
        let batch = consumer.poll(Duration::from_millis(500)).await?;
        if !batch.is_empty() && first.is_none() {
            first = Some(Instant::now());
            cpu_at_first = self_cpu_seconds(false, ticks).ok();
        }
        got += batch.len() as u64;
    }
    let end = Instant::now();
    let cpu = self_cpu_seconds(false, ticks)
        .ok()
        .zip(cpu_at_first)
        .map(|(after, before)| after - before);
    let first = first.unwrap_or(end);
    let metrics = consumer.fetch_metrics();
    consumer.close().await?;
    Ok((
        (end - first).as_secs_f64(),
        (first - subscribed).as_secs_f64(),
        cpu,
        metrics,
    ))
}

/// CPU seconds used by the broker and by the consumer over a consumer's run, and the wall
/// seconds each was measured over.
struct CpuUsed {
    broker: Option<f64>,
    broker_wall: f64,
    client: Option<f64>,
}

fn figure(
    records: u64,
    bytes: u64,
    seconds: f64,
    loopback: f64,
    cpu: CpuUsed,
    cores: f64,
) -> ConsumerFigure {
    let mb_per_s = bytes as f64 / 1e6 / seconds.max(1e-9);
    let gb = bytes as f64 / 1e9;
    let broker = cpu.broker.map(|c| c / gb);
    let client = cpu.client.map(|c| c / gb);
    ConsumerFigure {
        records,
        seconds,
        mb_per_s,
        runs_mb_per_s: vec![mb_per_s],
        ratio_to_loopback: mb_per_s / loopback.max(1e-9),
        broker_cpu_s_per_gb: broker,
        client_cpu_s_per_gb: client,
        client_cpu_share: cpu.client.map(|c| c / seconds.max(1e-9)),
        client_ceiling_mb_per_s: client.and_then(ceiling),
        broker_cpu_share: cpu.broker.map(|c| c / cpu.broker_wall.max(1e-9)),
        broker_ceiling_mb_per_s: broker.and_then(ceiling),
        machine_ceiling_mb_per_s: broker
            .zip(client)
            .and_then(|(b, c)| ceiling(b + c))
            .map(|m| cores * m),
        fetches: None,
        fetch_window_bytes: None,
        paired_loopback_mb_per_s: None,
        runs_paired_ratio: Vec::new(),
        paired_ratio: None,
    }
}

async fn case(
    a: &ConsumeArgs,
    client: &Client,
    partitions: i32,
    ticks: f64,
) -> Result<ConsumeCase> {
    let topic = format!("{}-p{partitions}-{}", a.topic, crate::wall_clock::now_ms());
    let admin = Admin::new(client.clone());
    admin
        .create_topics(
            vec![NewTopic {
                name: topic.clone(),
                num_partitions: Some(partitions),
                ..Default::default()
            }],
            CreateTopicsOptions::default(),
        )
        .await
        .with_context(|| format!("creating {topic}"))?;
    let leaders = crate::bench_kafka::leaders(client, &topic).await?;
    let batch = crate::bench_kafka::batch(a.batch_records, a.record_bytes)?;
    let batches = (a.mb * 1_000_000).div_ceil(batch.len() as u64);
    let leaders = Arc::new(leaders);
    fill(client, &topic, leaders.clone(), batch.clone(), batches).await?;
    let bytes = batches * batch.len() as u64;
    let records = batches * a.batch_records as u64;
    let (loopback_runs, loopback) = loopback_figures(a, bytes).await?;
    let (dir, sample) = (a.raw_dir.clone(), batch.clone());
    let page_cache =
        tokio::task::spawn_blocking(move || crate::bench_kafka::raw_read(&dir, &sample, bytes))
            .await
            .context("page-cache read")??;
    let runs = CaseRuns {
        a,
        topic,
        records,
        bytes,
        loop_mb: loopback.mb_per_s,
        paired_read: loopback.read_bytes,
        cores: std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64),
        ticks,
    };
    let kcat = runs.kcat_series(&admin, &leaders).await?;
    let gregor = runs.gregor_series().await?;
    let topic = runs.topic;
    if let Err(e) = admin
        .delete_topics(std::slice::from_ref(&topic), 30_000)
        .await
    {
        eprintln!("gregor bench consume: could not delete {topic}: {e}");
    }
    Ok(ConsumeCase {
        partitions,
        records,
        bytes,
        loopback_mb_per_s: runs.loop_mb,
        loopback,
        loopback_runs,
        page_cache_mb_per_s: page_cache,
        librdkafka: kcat.plain,
        librdkafka_tuned: kcat.tuned,
        librdkafka_tuned_command: kcat.tuned_command,
        librdkafka_replay: kcat.replay,
        librdkafka_tuned_replay: kcat.tuned_replay,
        gregor: gregor.plain,
        gregor_tuned: gregor.tuned,
        gregor_tuned_fetch_max_bytes: gregor.tuned_fetch_max,
        gregor_join_s: gregor.join_s,
    })
}

/// `--loopback-runs` loopback runs per `--loopback-reads` size, alternated: the median run of
/// each size, and the fastest of those (the baseline).
async fn loopback_figures(
    a: &ConsumeArgs,
    bytes: u64,
) -> Result<(Vec<LoopbackFigure>, LoopbackFigure)> {
    let mut by_read_size: Vec<Vec<LoopbackFigure>> = vec![Vec::new(); a.loopback_reads.len()];
    for _ in 0..a.loopback_runs {
        for (runs, &read_bytes) in by_read_size.iter_mut().zip(&a.loopback_reads) {
            let run = tokio::task::spawn_blocking(move || loopback(bytes, read_bytes))
                .await
                .context("loopback")??;
            runs.push(run);
        }
    }
    let loopback_runs: Vec<LoopbackFigure> = by_read_size
        .into_iter()
        .filter_map(median_loopback)
        .collect();
    let fastest = loopback_runs
        .iter()
        .max_by(|x, y| x.mb_per_s.total_cmp(&y.mb_per_s))
        .cloned()
        .context("no loopback run")?;
    Ok((loopback_runs, fastest))
}

/// What the consumers' runs of one case share: the filled topic and the loopback baseline
/// each run is paired with.
struct CaseRuns<'a> {
    a: &'a ConsumeArgs,
    topic: String,
    records: u64,
    bytes: u64,
    /// The baseline loopback run's MB/s.
    loop_mb: f64,
    /// The baseline loopback run's read size, used by the paired runs.
    paired_read: usize,
    cores: f64,
    ticks: f64,
}

/// The kcat series' medians.
struct KcatFigures {
    plain: Option<ConsumerFigure>,
    tuned: Option<ConsumerFigure>,
    tuned_command: Option<String>,
    replay: Option<ReplayFigure>,
    tuned_replay: Option<ReplayFigure>,
}

/// The Gregor consumer series' medians.
struct GregorFigures {
    plain: ConsumerFigure,
    tuned: Option<ConsumerFigure>,
    tuned_fetch_max: Option<i32>,
    /// The median group join of the default series.
    join_s: f64,
}

impl CaseRuns<'_> {
    /// One loopback run just before each consumer run: its MB/s.
    async fn paired_loopback(&self) -> Result<f64> {
        let (bytes, read_bytes) = (self.bytes, self.paired_read);
        let run = tokio::task::spawn_blocking(move || loopback(bytes, read_bytes))
            .await
            .context("loopback")??;
        Ok(run.mb_per_s)
    }

    /// kcat timed over one full read of the topic; the server's CPU is the broker's, or this
    /// process's when it serves kcat through the replay proxy.
    async fn timed_kcat(&self, args: Vec<String>, server: Option<u32>) -> Result<ConsumerFigure> {
        let ticks = self.ticks;
        let server_cpu = || match server {
            Some(pid) => cpu_seconds(pid, ticks).map(Some),
            None => Ok(self_cpu_seconds(false, ticks).ok()),
        };
        let paired = self.paired_loopback().await?;
        let before = server_cpu()?;
        let children = self_cpu_seconds(true, ticks).ok();
        let secs = kcat(self.a, &args, self.records).await?;
        let broker = server_cpu()?.zip(before).map(|(after, b)| after - b);
        let client = self_cpu_seconds(true, ticks)
            .ok()
            .zip(children)
            .map(|(after, b)| after - b);
        let used = CpuUsed {
            broker,
            broker_wall: secs,
            client,
        };
        let mut f = figure(
            self.records,
            self.bytes,
            secs,
            self.loop_mb,
            used,
            self.cores,
        );
        f.pair(paired);
        Ok(f)
    }

    /// kcat with librdkafka's defaults and with `--kcat-tuned`, against the broker and against
    /// a replay of its answers (unless skipped).
    async fn kcat_series(&self, admin: &Admin, leaders: &[(i32, i32)]) -> Result<KcatFigures> {
        let (a, topic, records) = (self.a, self.topic.as_str(), self.records);
        let tuned = a.kcat_tuned.iter().any(|p| !p.is_empty());
        let proxy = if a.skip_kcat || a.skip_replay {
            None
        } else {
            let broker = leaders.first().map(|&(_, leader)| leader);
            let cap = match broker {
                Some(id) => broker_answer_cap(admin, id).await,
                None => None,
            };
            Some(record(a, topic, records, cap).await?)
        };
        let (mut plain, mut tuned_runs) = (Vec::new(), Vec::new());
        let (mut replayed, mut tuned_replayed) = (ReplaySeries::default(), ReplaySeries::default());
        // Alternated, so that the machine's noise falls on every series alike.
        for _ in 0..if a.skip_kcat { 0 } else { a.kcat_runs } {
            let args = kcat_args(&a.bootstrap_server, topic, records, &[]);
            plain.push(self.timed_kcat(args, a.broker_pid).await?);
            if tuned {
                let args = kcat_args(&a.bootstrap_server, topic, records, &a.kcat_tuned);
                tuned_runs.push(self.timed_kcat(args, a.broker_pid).await?);
            }
            if let Some(p) = &proxy {
                let args = kcat_args(&p.addr().to_string(), topic, records, &[]);
                replayed.run(p, self.timed_kcat(args, None)).await?;
                if tuned {
                    let args = kcat_args(&p.addr().to_string(), topic, records, &a.kcat_tuned);
                    tuned_replayed.run(p, self.timed_kcat(args, None)).await?;
                }
            }
        }
        let librdkafka = median_run(plain);
        let librdkafka_tuned = median_run(tuned_runs);
        let (replay, tuned_replay) = match proxy {
            Some(p) => {
                let plain = replayed.figure(&p, librdkafka.as_ref());
                let tuned = tuned_replayed.figure(&p, librdkafka_tuned.as_ref());
                // Frees the held answers before the next consumer runs.
                tokio::task::spawn_blocking(move || drop(p))
                    .await
                    .context("stopping the replay proxy")?;
                (plain, tuned)
            }
            None => (None, None),
        };
        let tuned_command = (!a.skip_kcat && tuned).then(|| {
            let args = kcat_args(&a.bootstrap_server, topic, records, &a.kcat_tuned);
            format!("{} {}", a.kcat, args.join(" "))
        });
        Ok(KcatFigures {
            plain: librdkafka,
            tuned: librdkafka_tuned,
            tuned_command,
            replay,
            tuned_replay,
        })
    }

    /// The Gregor consumer with its defaults and, when `--gregor-tuned-fetch-max-bytes` is
    /// set, with that `fetch.max.bytes`; alternated, as the kcat series are.
    async fn gregor_series(&self) -> Result<GregorFigures> {
        let a = self.a;
        let tuned_fetch_max =
            (a.gregor_tuned_fetch_max_bytes > 0).then_some(a.gregor_tuned_fetch_max_bytes);
        let (mut gregor_runs, mut gregor_tuned_runs) = (Vec::new(), Vec::new());
        let mut joins = Vec::new();
        for run in 0..a.gregor_runs {
            // The defaults (`None`), then the tuned series when there is one.
            for fetch_max in std::iter::once(None).chain(tuned_fetch_max.map(Some)) {
                let tuned = fetch_max.is_some();
                let (f, join) = self
                    .gregor_run(2 * run + usize::from(tuned), fetch_max)
                    .await?;
                if tuned {
                    gregor_tuned_runs.push(f);
                } else {
                    gregor_runs.push(f);
                    joins.push(join);
                }
            }
        }
        joins.sort_by(f64::total_cmp);
        let join_s = joins
            .get(joins.len().saturating_sub(1) / 2)
            .copied()
            .unwrap_or_default();
        Ok(GregorFigures {
            tuned: median_run(gregor_tuned_runs),
            plain: median_run(gregor_runs).context("no Gregor consumer run")?,
            tuned_fetch_max,
            join_s,
        })
    }

    /// One Gregor consumer run in its own group: its figure and its group join's seconds.
    async fn gregor_run(
        &self,
        group_run: usize,
        fetch_max: Option<i32>,
    ) -> Result<(ConsumerFigure, f64)> {
        let (a, ticks) = (self.a, self.ticks);
        let cpu = |pid: Option<u32>| pid.map(|p| cpu_seconds(p, ticks)).transpose();
        let paired = self.paired_loopback().await?;
        let before = cpu(a.broker_pid)?;
        let started = Instant::now();
        let (secs, join, client, metrics) =
            gregor_consume(a, &self.topic, group_run, fetch_max, self.records, ticks).await?;
        let broker_wall = started.elapsed().as_secs_f64();
        let broker = cpu(a.broker_pid)?.zip(before).map(|(after, b)| after - b);
        let used = CpuUsed {
            broker,
            broker_wall,
            client,
        };
        let mut f = figure(
            self.records,
            self.bytes,
            secs,
            self.loop_mb,
            used,
            self.cores,
        );
        f.fetches = Some(metrics.fetches_sent);
        f.fetch_window_bytes = Some(metrics.fetch_window_bytes);
        f.pair(paired);
        Ok((f, join))
    }
}

/// The broker's cap on an answer to a consumer on loopback, when it says: its `fetch.max.bytes`,
/// or its `fetch.low.latency.max.bytes` where that is set and smaller (on loopback the latency
/// cap is its floor: the round trip is tens of microseconds).
async fn broker_answer_cap(admin: &Admin, broker: i32) -> Option<u64> {
    use gregor_client::admin::configs::ConfigResource;
    let described = admin
        .describe_configs(&[ConfigResource::broker(broker)], false, false)
        .await
        .ok()?;
    let (_, entries) = described.into_iter().next()?;
    let entries = entries.ok()?;
    let value = |name: &str| -> Option<u64> {
        entries
            .iter()
            .find(|e| e.name == name)?
            .value
            .as_deref()?
            .parse()
            .ok()
    };
    Some(loopback_answer_cap(
        value("fetch.max.bytes")?,
        value("fetch.low.latency.max.bytes"),
    ))
}

/// What a broker with these settings answers a consumer on loopback with at most:
/// `fetch.max.bytes`, or `fetch.low.latency.max.bytes` where set (not 0) and smaller.
fn loopback_answer_cap(fetch_max_bytes: u64, low_latency_max_bytes: Option<u64>) -> u64 {
    match low_latency_max_bytes {
        Some(low) if low > 0 => fetch_max_bytes.min(low),
        _ => fetch_max_bytes,
    }
}

/// The run of median MB/s (the lower of the two middle ones for an even count), with every
/// run's MB/s and paired ratio in the order run, and the median of those ratios.
fn median_run(runs: Vec<ConsumerFigure>) -> Option<ConsumerFigure> {
    let ratios: Vec<f64> = runs.iter().filter_map(|r| r.paired_ratio).collect();
    let mut median = median_by(runs, |r| r.mb_per_s, |r, all| r.runs_mb_per_s = all)?;
    median.paired_ratio = median_by(ratios.clone(), |&r| r, |_, _| ());
    median.runs_paired_ratio = ratios;
    Some(median)
}

/// Loopback's run of median MB/s at one read size (as [`median_run`]).
fn median_loopback(runs: Vec<LoopbackFigure>) -> Option<LoopbackFigure> {
    median_by(runs, |r| r.mb_per_s, |r, all| r.runs_mb_per_s = all)
}

/// The run of median `mb_per_s`, given every run's in the order run by `keep_all`.
fn median_by<T>(
    runs: Vec<T>,
    mb_per_s: impl Fn(&T) -> f64,
    keep_all: impl FnOnce(&mut T, Vec<f64>),
) -> Option<T> {
    let all: Vec<f64> = runs.iter().map(&mb_per_s).collect();
    let mut sorted = runs;
    sorted.sort_by(|x, y| mb_per_s(x).total_cmp(&mb_per_s(y)));
    let mid = sorted.len().checked_sub(1)? / 2;
    let mut median = sorted.swap_remove(mid);
    keep_all(&mut median, all);
    Some(median)
}

/// Starts the replay proxy and records the broker's answers to kcat with librdkafka's
/// defaults reading the whole topic through it; the proxy replays from then on.
async fn record(
    a: &ConsumeArgs,
    topic: &str,
    records: u64,
    answer_cap: Option<u64>,
) -> Result<crate::bench_replay::ReplayProxy> {
    let proxy = crate::bench_replay::ReplayProxy::start(&a.bootstrap_server, answer_cap)?;
    let args = kcat_args(&proxy.addr().to_string(), topic, records, &[]);
    kcat(a, &args, records)
        .await
        .context("kcat through the replay proxy, recording")?;
    proxy.replay();
    Ok(proxy)
}

/// One consumer's runs against the replay, with the proxy's counts over those runs only.
#[derive(Default)]
struct ReplaySeries {
    runs: Vec<ConsumerFigure>,
    counts: crate::bench_replay::ReplayCounts,
}

impl ReplaySeries {
    async fn run(
        &mut self,
        proxy: &crate::bench_replay::ReplayProxy,
        timed: impl std::future::Future<Output = Result<ConsumerFigure>>,
    ) -> Result<()> {
        let before = proxy.counts();
        let run = timed
            .await
            .context("kcat through the replay proxy, replaying")?;
        let after = proxy.counts();
        self.counts.fetches_replayed += after.fetches_replayed - before.fetches_replayed;
        self.counts.fetches_forwarded += after.fetches_forwarded - before.fetches_forwarded;
        self.counts.bytes_held = after.bytes_held;
        self.runs.push(run);
        Ok(())
    }

    /// The median run's figure; `None` without runs.
    fn figure(
        self,
        proxy: &crate::bench_replay::ReplayProxy,
        against_broker: Option<&ConsumerFigure>,
    ) -> Option<ReplayFigure> {
        let consumer = median_run(self.runs)?;
        let counts = self.counts;
        let fetches = counts.fetches_replayed + counts.fetches_forwarded;
        Some(ReplayFigure {
            replayed_share: counts.fetches_replayed as f64 / fetches.max(1) as f64,
            broker_of_replay: against_broker.map(|l| l.mb_per_s / consumer.mb_per_s.max(1e-9)),
            consumer,
            fetches_replayed: counts.fetches_replayed,
            fetches_forwarded: counts.fetches_forwarded,
            mb_held: counts.bytes_held as f64 / 1e6,
            proxy_error: proxy.error(),
            answer_cap_bytes: proxy.answer_cap(),
        })
    }
}

/// Runs every case, printing each as it completes.
pub async fn run(a: ConsumeArgs) -> Result<Vec<ConsumeCase>> {
    validate(&a)?;
    let ticks = clock_ticks()?;
    let mut cfg = ClientConfig::new(&a.bootstrap_server).context("--bootstrap-server")?;
    cfg.client_id = "gregor-bench".into();
    cfg.connect_timeout = Duration::from_secs(5);
    if let Some(path) = &a.command_config {
        crate::admin::apply_command_config(&mut cfg, path)?;
    }
    let client = Client::connect(cfg).await?;
    let mut out = Vec::new();
    for p in a.partitions.clone() {
        let c = case(&a, &client, p, ticks).await?;
        if a.json {
            println!("{}", serde_json::to_string(&c)?);
        } else {
            println!("{}", render(&c));
        }
        out.push(c);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::loopback_answer_cap;

    #[test]
    fn the_replay_keeps_to_the_smaller_of_the_brokers_two_caps() {
        const MIB: u64 = 1 << 20;
        // The latency cap off (0) or not reported: fetch.max.bytes.
        assert_eq!(loopback_answer_cap(30 * MIB, Some(0)), 30 * MIB);
        assert_eq!(loopback_answer_cap(30 * MIB, None), 30 * MIB);
        // Set: its floor applies on loopback, unless fetch.max.bytes is smaller still.
        assert_eq!(loopback_answer_cap(30 * MIB, Some(2 * MIB)), 2 * MIB);
        assert_eq!(loopback_answer_cap(MIB, Some(2 * MIB)), MIB);
    }
}
