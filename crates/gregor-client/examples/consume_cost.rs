//! What the consumer costs per byte consumed, measured on its own (issue 14): a process that
//! does nothing but consume, so that an instruction count of the whole process (`valgrind
//! --tool=callgrind`, repeatable on a noisy machine) or a `perf record` of it is the client's.
//!
//! ```text
//! consume_cost --bootstrap 127.0.0.1:19731 --topic t --fill-mb 256 [--partitions 1]
//! consume_cost --bootstrap 127.0.0.1:19731 --topic t --count 250048 [--no-crc] [--fetch-max-bytes N]
//!     [--delay-ms N]
//! ```
//!
//! `--fill-mb` creates the topic and fills it as `gregor bench consume` does: uncompressed
//! batches of 64 records with 1 KiB values and no keys, round-robin over the partitions, sent
//! as raw Produce requests to any broker (a single-broker cluster: it leads them all), so every
//! batch on the broker is exactly one such batch. The
//! consume mode reads `--count` records from the beginning in a fresh group with the defaults
//! of `gregor bench consume` (a current-thread runtime, auto-commit off, `check.crcs` on unless
//! `--no-crc`) and prints one JSON line: records, value bytes, Fetches sent, the fetch window
//! at the end, seconds from first record to last. `--delay-ms N` carries every byte between
//! the consumer and the broker N ms later each way (a round trip of 2N ms), through a relay in
//! this process (`tests/common/delay.rs`), to show what the fetch window does over a long link.

#[path = "../tests/common/delay.rs"]
mod delay;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use bytes::Bytes;
use gregor_client::admin::topics::{CreateTopicsOptions, NewTopic};
use gregor_client::consumer::AutoOffsetReset;
use gregor_client::producer::wire::{encode_batch, RecordData};
use gregor_client::{Admin, Client, ClientConfig, Consumer, ConsumerConfig, Target};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;

struct Args {
    bootstrap: String,
    topic: String,
    partitions: i32,
    fill_mb: u64,
    count: u64,
    no_crc: bool,
    /// `fetch.max.bytes`; the consumer's default when absent.
    fetch_max_bytes: Option<i32>,
    /// Delay added to every byte each way.
    delay_ms: u64,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        bootstrap: "127.0.0.1:9092".into(),
        topic: String::new(),
        partitions: 1,
        fill_mb: 0,
        count: 0,
        no_crc: false,
        fetch_max_bytes: None,
        delay_ms: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--no-crc" {
            a.no_crc = true;
            continue;
        }
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let num = |v: &str| v.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--bootstrap" => a.bootstrap = value,
            "--topic" => a.topic = value,
            "--partitions" => a.partitions = num(&value)? as i32,
            "--fill-mb" => a.fill_mb = num(&value)?,
            "--count" => a.count = num(&value)?,
            "--delay-ms" => a.delay_ms = num(&value)?.min(60_000),
            "--fetch-max-bytes" => {
                a.fetch_max_bytes = Some(value.parse().map_err(|e| format!("{flag}: {e}"))?)
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if a.topic.is_empty() || (a.fill_mb == 0) == (a.count == 0) {
        return Err("--topic and one of --fill-mb or --count are required".into());
    }
    Ok(a)
}

async fn fill(a: &Args) -> gregor_client::Result<()> {
    let client = Client::connect(ClientConfig::new(&a.bootstrap)?).await?;
    Admin::new(client.clone())
        .create_topics(
            vec![NewTopic {
                name: a.topic.clone(),
                num_partitions: Some(a.partitions),
                ..Default::default()
            }],
            CreateTopicsOptions::default(),
        )
        .await?;
    let records: Vec<RecordData> = (0..64)
        .map(|_| RecordData {
            key: None,
            value: Some(Bytes::from(vec![b'x'; 1024])),
            headers: vec![],
            timestamp: 1,
        })
        .collect();
    let batch = encode_batch(&records, None, 0, Compression::None)?;
    let batches = (a.fill_mb * 1_000_000).div_ceil(batch.len() as u64);
    for i in 0..batches {
        let partition = (i % a.partitions as u64) as i32;
        let (topic, records) = (a.topic.clone(), batch.clone());
        let (_, resp) = client
            .send::<ProduceRequest, _>(&Target::Any, move |_| {
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
        let code = resp.responses[0].partition_responses[0].error_code;
        if code != 0 {
            return Err(gregor_client::Error::InvalidArgument(format!(
                "produce failed with error code {code}"
            )));
        }
    }
    println!(
        r#"{{"filled_batches":{batches},"records":{},"batch_bytes":{}}}"#,
        batches * 64,
        batch.len()
    );
    Ok(())
}

async fn consume(a: &Args) -> gregor_client::Result<()> {
    let group = format!("{}-cost-{}", a.topic, std::process::id());
    let mut c = ConsumerConfig::new(&a.bootstrap, &group)?;
    c.auto_offset_reset = AutoOffsetReset::Earliest;
    c.enable_auto_commit = false;
    c.check_crcs = !a.no_crc;
    if let Some(n) = a.fetch_max_bytes {
        c.fetch_max_bytes = n;
    }
    if a.delay_ms > 0 {
        c.client.dialer = Some(delay::delayed_dialer(Duration::from_millis(a.delay_ms)));
    }
    let mut consumer = Consumer::new(c).await?;
    consumer.subscribe(&[a.topic.as_str()]).await?;
    let (mut records, mut bytes, mut first) = (0u64, 0u64, None);
    while records < a.count {
        let batch = consumer.poll(Duration::from_millis(500)).await?;
        if !batch.is_empty() && first.is_none() {
            first = Some(Instant::now());
        }
        records += batch.len() as u64;
        bytes += batch
            .iter()
            .map(|r| r.value.as_ref().map_or(0, |v| v.len()) as u64)
            .sum::<u64>();
    }
    let seconds = first.map_or(0.0, |f| f.elapsed().as_secs_f64());
    let m = consumer.fetch_metrics();
    consumer.close().await?;
    println!(
        r#"{{"records":{records},"value_bytes":{bytes},"fetches":{},"fetch_window_bytes":{},"seconds":{seconds:.6}}}"#,
        m.fetches_sent, m.fetch_window_bytes
    );
    Ok(())
}

fn main() -> ExitCode {
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("consume_cost: {e}");
            return ExitCode::from(2);
        }
    };
    // Current-thread, as `gregor bench consume`: the reader, Fetch tasks and poll share a thread.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("consume_cost: runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async {
        if a.fill_mb > 0 {
            fill(&a).await
        } else {
            consume(&a).await
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("consume_cost: {e}");
            ExitCode::FAILURE
        }
    }
}
