//! `gregor bench consume`: how fast a broker serves consumers, against the machine's own
//! limits measured in the same run.
//!
//! For each partition count in `--partitions`, a fresh topic is filled with `--mb` megabytes
//! of `--record-bytes` records (batches of `--batch-records`), then read back in full by:
//!   - a native librdkafka consumer (`kcat -C -e`, timed from its start to its exit),
//!   - the Gregor client's `Consumer` in a fresh group (timed from its first record to the
//!     last; the group join before is reported apart),
//!
//! next to two baselines moving the same number of bytes: a page-cache read of a file holding
//! them (`raw_read`), and loopback TCP (a plain socket sender and receiver in this process).
//! Each consumer's figure is also given as a ratio of loopback, and, with `--broker-pid`, as
//! the broker's CPU seconds (user + system, from `/proc/<pid>/stat`) per GB read. The topic is
//! deleted after its case.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use gregor_client::admin::topics::{CreateTopicsOptions, NewTopic};
use gregor_client::consumer::AutoOffsetReset;
use gregor_client::{Admin, Client, ClientConfig, Consumer, ConsumerConfig};
use serde::Serialize;

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
    /// Directory for the page-cache baseline's scratch file.
    #[arg(long, default_value = ".")]
    pub raw_dir: PathBuf,
    /// Gives up on a consumer after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_s: u64,
    /// One JSON object per case.
    #[arg(long)]
    pub json: bool,
}

/// One consumer's run.
#[derive(Debug, Clone, Serialize)]
pub struct ConsumerFigure {
    pub records: u64,
    pub seconds: f64,
    pub mb_per_s: f64,
    /// Of loopback TCP in the same case.
    pub ratio_to_loopback: f64,
    /// Broker CPU seconds (user + system) per GB read; `None` without `--broker-pid`.
    pub broker_cpu_s_per_gb: Option<f64>,
    /// The consumer's own CPU seconds (user + system) per GB read: kcat's from this process's
    /// reaped children (`cutime` + `cstime`), the Gregor client's from this process while it
    /// consumes (group join and close included; nothing else runs in the process then).
    pub client_cpu_s_per_gb: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConsumeCase {
    pub partitions: i32,
    pub records: u64,
    /// Record batch bytes in the topic (what the consumers read).
    pub bytes: u64,
    pub loopback_mb_per_s: f64,
    pub page_cache_mb_per_s: f64,
    pub librdkafka: Option<ConsumerFigure>,
    pub gregor: ConsumerFigure,
    /// The Gregor consumer's group join, before its first record.
    pub gregor_join_s: f64,
}

fn validate(a: &ConsumeArgs) -> Result<()> {
    if a.partitions.is_empty() || a.partitions.iter().any(|p| *p < 1 || *p > 10_000) {
        bail!("--partitions must list counts between 1 and 10000");
    }
    if a.mb == 0 || a.record_bytes == 0 || a.batch_records == 0 {
        bail!("--mb, --record-bytes and --batch-records must be at least 1");
    }
    Ok(())
}

/// User + system CPU seconds of a process so far (fields 14 and 15 of `/proc/<pid>/stat`,
/// in clock ticks), all its threads included.
fn cpu_seconds(pid: u32, ticks_per_s: f64) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("--broker-pid {pid}"))?;
    stat_cpu(&stat, 11, ticks_per_s)
}

/// This process's CPU seconds so far: its own, or with `children` its reaped children's.
fn self_cpu_seconds(children: bool, ticks_per_s: f64) -> Result<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").context("/proc/self/stat")?;
    stat_cpu(&stat, if children { 13 } else { 11 }, ticks_per_s)
}

/// Fields `at` and `at + 1` of a `/proc/<pid>/stat` line, counted from field 3, in seconds.
fn stat_cpu(stat: &str, at: usize, ticks_per_s: f64) -> Result<f64> {
    // The command name (field 2) may hold spaces; the fields after it start past its ')'.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("unexpected /proc stat format")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14, stime 15 (at 11), cutime 16 and
    // cstime 17 (at 13).
    let utime: f64 = fields.get(at).context("no utime")?.parse()?;
    let stime: f64 = fields.get(at + 1).context("no stime")?.parse()?;
    Ok((utime + stime) / ticks_per_s)
}

/// Clock ticks per second, as `getconf` reports them (the unit of `/proc/<pid>/stat`).
fn clock_ticks() -> Result<f64> {
    let out = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .context("getconf CLK_TCK")?;
    let ticks: f64 = String::from_utf8_lossy(&out.stdout).trim().parse()?;
    if ticks <= 0.0 {
        bail!("getconf CLK_TCK gave {ticks}");
    }
    Ok(ticks)
}

/// Loopback TCP: one thread sends `bytes` over 127.0.0.1 in 1 MiB writes, another receives
/// them; MB/s from the connection to the last byte received.
fn loopback(bytes: u64) -> Result<f64> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let start = Instant::now();
    let sender = std::thread::spawn(move || -> std::io::Result<()> {
        let mut s = std::net::TcpStream::connect(addr)?;
        let buf = vec![b'x'; 1 << 20];
        let mut left = bytes;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            s.write_all(&buf[..n])?;
            left -= n as u64;
        }
        Ok(())
    });
    let (mut r, _) = listener.accept()?;
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0u64;
    while got < bytes {
        let n = r.read(&mut buf)?;
        if n == 0 {
            bail!("loopback sender stopped after {got} of {bytes} bytes");
        }
        got += n as u64;
    }
    let secs = start.elapsed().as_secs_f64();
    sender
        .join()
        .map_err(|_| anyhow::anyhow!("loopback sender panicked"))??;
    Ok(bytes as f64 / 1e6 / secs.max(1e-9))
}

/// Fills `topic` with `batches` copies of `batch`, spread over its partitions, 16 requests in
/// flight.
async fn fill(
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

/// Runs kcat over the whole topic: wall seconds from its start to its exit.
async fn kcat(a: &ConsumeArgs, topic: &str, records: u64) -> Result<f64> {
    let start = Instant::now();
    let mut child = tokio::process::Command::new(&a.kcat)
        .args(["-C", "-b", &a.bootstrap_server, "-t", topic])
        .args(["-o", "beginning", "-e", "-q", "-c", &records.to_string()])
        // One byte per record: kcat's output costs as little as it can.
        .args(["-f", "."])
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
/// last, seconds from subscribing to the first record).
async fn gregor_consume(a: &ConsumeArgs, topic: &str, records: u64) -> Result<(f64, f64)> {
    let group = format!("{topic}-group");
    let mut c = ConsumerConfig::new(&a.bootstrap_server, &group)?;
    c.auto_offset_reset = AutoOffsetReset::Earliest;
    c.enable_auto_commit = false;
    let mut consumer = Consumer::new(c).await?;
    let subscribed = Instant::now();
    consumer.subscribe(&[topic]).await?;
    let deadline = subscribed + Duration::from_secs(a.timeout_s);
    let mut first = None;
    let mut got = 0u64;
    while got < records {
        if Instant::now() > deadline {
            bail!("the Gregor consumer read {got} of {records} records in --timeout-s");
        }
        let batch = consumer.poll(Duration::from_millis(500)).await?;
        if !batch.is_empty() && first.is_none() {
            first = Some(Instant::now());
        }
        got += batch.len() as u64;
    }
    let end = Instant::now();
    let first = first.unwrap_or(end);
    consumer.close().await?;
    Ok((
        (end - first).as_secs_f64(),
        (first - subscribed).as_secs_f64(),
    ))
}

fn figure(
    records: u64,
    bytes: u64,
    seconds: f64,
    loopback: f64,
    cpu: Option<f64>,
    client_cpu: Option<f64>,
) -> ConsumerFigure {
    let mb_per_s = bytes as f64 / 1e6 / seconds.max(1e-9);
    ConsumerFigure {
        records,
        seconds,
        mb_per_s,
        ratio_to_loopback: mb_per_s / loopback.max(1e-9),
        broker_cpu_s_per_gb: cpu.map(|c| c / (bytes as f64 / 1e9)),
        client_cpu_s_per_gb: client_cpu.map(|c| c / (bytes as f64 / 1e9)),
    }
}

async fn case(
    a: &ConsumeArgs,
    client: &Client,
    partitions: i32,
    ticks: f64,
) -> Result<ConsumeCase> {
    let topic = format!("{}-p{partitions}-{}", a.topic, crate::now_ms());
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
    fill(client, &topic, Arc::new(leaders), batch.clone(), batches).await?;
    let bytes = batches * batch.len() as u64;
    let records = batches * a.batch_records as u64;
    let loop_mb = tokio::task::spawn_blocking(move || loopback(bytes))
        .await
        .context("loopback")??;
    let (dir, sample) = (a.raw_dir.clone(), batch.clone());
    let page_cache =
        tokio::task::spawn_blocking(move || crate::bench_kafka::raw_read(&dir, &sample, bytes))
            .await
            .context("page-cache read")??;
    let cpu = |pid: Option<u32>| pid.map(|p| cpu_seconds(p, ticks)).transpose();
    let librdkafka = if a.skip_kcat {
        None
    } else {
        let before = cpu(a.broker_pid)?;
        let children = self_cpu_seconds(true, ticks).ok();
        let secs = kcat(a, &topic, records).await?;
        let used = cpu(a.broker_pid)?.zip(before).map(|(after, b)| after - b);
        let client = self_cpu_seconds(true, ticks)
            .ok()
            .zip(children)
            .map(|(after, b)| after - b);
        Some(figure(records, bytes, secs, loop_mb, used, client))
    };
    let before = cpu(a.broker_pid)?;
    let own = self_cpu_seconds(false, ticks).ok();
    let (secs, join) = gregor_consume(a, &topic, records).await?;
    let used = cpu(a.broker_pid)?.zip(before).map(|(after, b)| after - b);
    let client = self_cpu_seconds(false, ticks)
        .ok()
        .zip(own)
        .map(|(after, b)| after - b);
    let gregor = figure(records, bytes, secs, loop_mb, used, client);
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
        loopback_mb_per_s: loop_mb,
        page_cache_mb_per_s: page_cache,
        librdkafka,
        gregor,
        gregor_join_s: join,
    })
}

/// Runs every case, printing each as it completes.
pub async fn run(a: ConsumeArgs) -> Result<Vec<ConsumeCase>> {
    validate(&a)?;
    let ticks = clock_ticks()?;
    let mut cfg = ClientConfig::new(&a.bootstrap_server).context("--bootstrap-server")?;
    cfg.client_id = "gregor-bench".into();
    cfg.connect_timeout = Duration::from_secs(5);
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

fn render_figure(name: &str, f: &ConsumerFigure) -> String {
    let cpu = f
        .broker_cpu_s_per_gb
        .map_or(String::new(), |c| format!(", broker CPU {c:.2} s/GB"));
    let client = f
        .client_cpu_s_per_gb
        .map_or(String::new(), |c| format!(", client CPU {c:.2} s/GB"));
    format!(
        "  {name:<11} {:>8.1} MB/s  {:.2} of loopback{cpu}{client}\n",
        f.mb_per_s, f.ratio_to_loopback
    )
}

pub fn render(c: &ConsumeCase) -> String {
    let mut s = format!(
        "consume, {} partitions: {} records, {:.1} MB; loopback TCP {:.1} MB/s, page-cache read {:.1} MB/s\n",
        c.partitions,
        c.records,
        c.bytes as f64 / 1e6,
        c.loopback_mb_per_s,
        c.page_cache_mb_per_s
    );
    if let Some(f) = &c.librdkafka {
        s += &render_figure("librdkafka", f);
    }
    s += &render_figure("gregor", &c.gregor);
    s += &format!("  (gregor group join {:.2} s, not timed)", c.gregor_join_s);
    s
}
