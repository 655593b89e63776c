//! `gregor bench produce`: a load generator against any Kafka-protocol broker, over
//! gregor-client's connections. Produce sends `acks=all` requests of one batch each
//! (`--batch-records` records of `--record-bytes`) from `--concurrency` requests in flight,
//! spread over the topic's partitions, and reports MB/s and request latency percentiles, with
//! the ratio to the raw bandwidth of the local disk measured in the same run: one thread
//! writing the same batches with `fdatasync` after each, in `--raw-dir`. The page-cache read
//! baseline here serves `gregor bench consume` (`bench_consume.rs`).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::Args;
use gregor_client::admin::topics::{CreateTopicsOptions, NewTopic};
use gregor_client::{Admin, Client, ClientConfig, Target};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use serde::Serialize;

#[derive(Debug, Clone, Args)]
pub struct LoadArgs {
    /// Broker to load.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap_server: String,
    /// Topic (created with --partitions if missing).
    #[arg(long, default_value = "gregor-bench")]
    pub topic: String,
    #[arg(long, default_value_t = 8)]
    pub partitions: i32,
    /// Size of each record's value.
    #[arg(long, default_value_t = 1024)]
    pub record_bytes: usize,
    /// Records per batch (one batch per produce request).
    #[arg(long, default_value_t = 16)]
    pub batch_records: usize,
    /// Produce requests in flight.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Seconds to produce for.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Directory on the local disk for the raw-bandwidth baseline.
    #[arg(long, default_value = ".")]
    pub raw_dir: PathBuf,
    /// One JSON object.
    #[arg(long)]
    pub json: bool,
    /// A Kafka client properties file saying how to connect (TLS, SASL), as the admin
    /// commands take it.
    #[arg(long, value_name = "FILE")]
    pub command_config: Option<PathBuf>,
}

#[derive(Debug, Serialize)]
pub struct ProduceResult {
    pub case: &'static str,
    pub records: u64,
    pub mb_per_s: f64,
    pub records_per_s: f64,
    pub latency_p50_ms: f64,
    pub latency_p99_ms: f64,
    pub latency_p999_ms: f64,
    pub raw_fdatasync_mb_per_s: f64,
    pub ratio: f64,
    pub concurrency: usize,
    pub batch_bytes: usize,
}

fn config(args: &LoadArgs) -> Result<ClientConfig> {
    let mut c = ClientConfig::new(&args.bootstrap_server).context("--bootstrap-server")?;
    c.client_id = "gregor-bench".into();
    c.connect_timeout = Duration::from_secs(5);
    if let Some(path) = &args.command_config {
        crate::admin::apply_command_config(&mut c, path)?;
    }
    Ok(c)
}

fn validate(args: &LoadArgs) -> Result<()> {
    if args.partitions < 1
        || args.record_bytes == 0
        || args.batch_records == 0
        || args.concurrency == 0
    {
        bail!("--partitions, --record-bytes, --batch-records and --concurrency must be at least 1");
    }
    if args.seconds.is_nan() || args.seconds <= 0.0 {
        bail!("--seconds must be positive");
    }
    Ok(())
}

/// One batch of `n` records with `size`-byte values (offsets and sequence numbers are the
/// broker's to assign; no producer id, so every send is a new append).
pub(crate) fn batch(n: usize, size: usize) -> Result<Bytes> {
    let now = crate::wall_clock::now_ms();
    let records: Vec<gregor_log::records::Record> = (0..n)
        .map(|i| gregor_log::records::Record {
            offset: i as i64,
            timestamp: now,
            key: None,
            value: Some(Bytes::from(vec![b'x'; size])),
            headers: Vec::new(),
        })
        .collect();
    Ok(Bytes::from(gregor_log::records::encode_batch(
        &gregor_log::records::BatchSpec::default(),
        &records,
    )?))
}

async fn ensure_topic(
    client: &Client,
    args: &LoadArgs,
) -> Result<(gregor_client::Uuid, Vec<(i32, i32)>)> {
    let admin = Admin::new(client.clone());
    let topic = NewTopic {
        name: args.topic.clone(),
        num_partitions: Some(args.partitions),
        ..Default::default()
    };
    // Already existing is fine.
    let _ = admin
        .create_topics(vec![topic], CreateTopicsOptions::default())
        .await;
    topic_leaders(client, &args.topic).await
}

/// The topic's id and its partitions' leaders (`(partition, leader)`), once every partition
/// has one (a topic just created gets its leaders within moments).
async fn topic_leaders(
    client: &Client,
    topic: &str,
) -> Result<(gregor_client::Uuid, Vec<(i32, i32)>)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let meta = client.refresh_metadata(Some(&[topic.to_string()])).await?;
        if let Some(t) = meta.topics.iter().find(|t| t.name == topic) {
            let leaders: Vec<(i32, i32)> = t
                .partitions
                .iter()
                .filter_map(|p| p.leader.map(|l| (p.partition, l)))
                .collect();
            if !leaders.is_empty() && leaders.len() == t.partitions.len() {
                return Ok((t.topic_id, leaders));
            }
        }
        if Instant::now() >= deadline {
            bail!("topic {topic} has no leader for every partition");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The leaders of every partition of `topic`.
/// Sends one `acks=all` Produce of `records` to `partition`'s leader and checks its answer.
pub(crate) async fn produce_batch(
    client: &Client,
    leader: i32,
    partition: i32,
    topic: String,
    records: Bytes,
) -> Result<()> {
    let (_, resp) = client
        .send::<ProduceRequest, _>(&Target::Broker(leader), move |_| {
            let mut p = PartitionProduceData::default();
            p.index = partition;
            p.records = Some(records);
            let mut t = TopicProduceData::default();
            t.name = TopicName(StrBytes::from_string(topic));
            t.partition_data = vec![p];
            let mut r = ProduceRequest::default();
            r.acks = -1;
            r.timeout_ms = 30_000;
            r.topic_data = vec![t];
            Ok(r)
        })
        .await?;
    let code = resp
        .responses
        .first()
        .and_then(|t| t.partition_responses.first())
        .map_or(-1, |p| p.error_code);
    if code != 0 {
        bail!("produce to partition {partition} failed with error code {code}");
    }
    Ok(())
}

pub(crate) async fn leaders(client: &Client, topic: &str) -> Result<Vec<(i32, i32)>> {
    Ok(topic_leaders(client, topic).await?.1)
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Raw write+fdatasync bandwidth of the same batch size, one thread.
fn raw_fdatasync(dir: &std::path::Path, batch: &[u8], seconds: f64) -> Result<f64> {
    let scratch = tempfile::Builder::new()
        .prefix("gregor-bench-raw")
        .tempdir_in(dir)
        .with_context(|| format!("--raw-dir {}", dir.display()))?;
    let mut f = std::fs::File::create(scratch.path().join("raw"))?;
    let start = Instant::now();
    let mut bytes = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        f.write_all(batch)?;
        f.sync_data()?;
        bytes += batch.len() as u64;
    }
    Ok(bytes as f64 / 1e6 / start.elapsed().as_secs_f64())
}

/// Raw sequential read bandwidth of `bytes` written with plain writes.
pub(crate) fn raw_read(dir: &std::path::Path, batch: &[u8], bytes: u64) -> Result<f64> {
    let scratch = tempfile::Builder::new()
        .prefix("gregor-bench-raw")
        .tempdir_in(dir)
        .with_context(|| format!("--raw-dir {}", dir.display()))?;
    let path = scratch.path().join("raw");
    let mut f = std::fs::File::create(&path)?;
    let mut written = 0u64;
    while written < bytes {
        f.write_all(batch)?;
        written += batch.len() as u64;
    }
    f.sync_all()?;
    drop(f);
    let mut f = std::fs::File::open(&path)?;
    let mut buf = vec![0u8; 1 << 20];
    let start = Instant::now();
    let mut read = 0u64;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        read += n as u64;
    }
    Ok(read as f64 / 1e6 / start.elapsed().as_secs_f64().max(1e-9))
}

pub async fn produce(args: LoadArgs) -> Result<ProduceResult> {
    validate(&args)?;
    let client = Client::connect(config(&args)?).await?;
    let leaders = Arc::new(ensure_topic(&client, &args).await?.1);
    let batch = batch(args.batch_records, args.record_bytes)?;
    let deadline = Instant::now() + Duration::from_secs_f64(args.seconds);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..args.concurrency {
        let client = client.clone();
        let leaders = leaders.clone();
        let batch = batch.clone();
        let topic = args.topic.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut i = w;
            while Instant::now() < deadline {
                let (partition, leader) = leaders[i % leaders.len()];
                i += 1;
                let sent = Instant::now();
                let records = batch.clone();
                let topic = topic.clone();
                produce_batch(&client, leader, partition, topic, records).await?;
                latencies.push(sent.elapsed().as_secs_f64() * 1000.0);
            }
            Ok::<_, anyhow::Error>(latencies)
        }));
    }
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await.context("producer task")??);
    }
    let elapsed = start.elapsed().as_secs_f64();
    latencies.sort_by(f64::total_cmp);
    let requests = latencies.len() as u64;
    let records = requests * args.batch_records as u64;
    let mb = (records * args.record_bytes as u64) as f64 / 1e6;
    let raw_dir = args.raw_dir.clone();
    let raw_batch = batch.clone();
    let raw_seconds = (args.seconds / 2.0).clamp(0.5, 5.0);
    let raw = tokio::task::spawn_blocking(move || raw_fdatasync(&raw_dir, &raw_batch, raw_seconds))
        .await
        .context("raw baseline")??;
    let mb_per_s = mb / elapsed;
    Ok(ProduceResult {
        case: "produce acks=all",
        records,
        mb_per_s,
        records_per_s: records as f64 / elapsed,
        latency_p50_ms: percentile(&latencies, 0.5),
        latency_p99_ms: percentile(&latencies, 0.99),
        latency_p999_ms: percentile(&latencies, 0.999),
        raw_fdatasync_mb_per_s: raw,
        ratio: mb_per_s / raw.max(1e-9),
        concurrency: args.concurrency,
        batch_bytes: batch.len(),
    })
}
