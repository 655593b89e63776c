//! An exactly-once consume-transform-produce pipeline on Gregor's client, for
//! `e2e/test_transactions_gregor_client.py` (the pipeline on a three-node cluster while the
//! pipeline process, the transaction coordinator's node, an output partition's leader or the
//! group coordinator's node is SIGKILLed).
//!
//! It reads `--input` (read_committed, group `--group`, one static member), writes each record
//! to `--output` with its key, in the same partition, with `V` before its value, and commits
//! the input offsets in the same transaction (`send_offsets_to_transaction`). A transaction
//! that must be aborted is aborted, and the consumer goes back to the committed offsets; a
//! commit that times out is called again, as the producer asks. It ends after `--idle-seconds`
//! without records.
//!
//! Prints one JSON object per line on stdout: `{"event":"ready"}` once subscribed,
//! `{"event":"committed","records":N,"total":T}` after each commit,
//! `{"event":"aborted","error":..}` after each abort, `{"event":"done","total":T}` at the end,
//! or `{"event":"error","error":..}` before a non-zero exit (a fenced or failed producer).
//!
//! ```text
//! eos_pipeline --bootstrap 127.0.0.1:9092 --input in --output out --group g \
//!     --transactional-id tx [--idle-seconds 6] [--max-poll-records 20]
//! ```

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use gregor_client::consumer::AutoOffsetReset;
use gregor_client::{Consumer, ConsumerConfig};
use gregor_client::{
    ConsumerRecord, Error, IsolationLevel, Producer, ProducerConfig, ProducerRecord, TopicPartition,
};

struct Args {
    bootstrap: String,
    input: String,
    output: String,
    group: String,
    transactional_id: String,
    idle: Duration,
    max_poll_records: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        bootstrap: String::new(),
        input: String::new(),
        output: String::new(),
        group: String::new(),
        transactional_id: String::new(),
        idle: Duration::from_secs(6),
        max_poll_records: 20,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let number = || value.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--bootstrap" => a.bootstrap = value.clone(),
            "--input" => a.input = value.clone(),
            "--output" => a.output = value.clone(),
            "--group" => a.group = value.clone(),
            "--transactional-id" => a.transactional_id = value.clone(),
            "--idle-seconds" => a.idle = Duration::from_secs(number()?),
            "--max-poll-records" => a.max_poll_records = number()? as usize,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    let required = [
        &a.bootstrap,
        &a.input,
        &a.output,
        &a.group,
        &a.transactional_id,
    ];
    if required.iter().any(|v| v.is_empty()) {
        return Err(
            "--bootstrap, --input, --output, --group and --transactional-id are \
                    required"
                .into(),
        );
    }
    Ok(a)
}

fn emit(v: serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("eos_pipeline: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args).await {
        Ok(total) => {
            emit(serde_json::json!({"event": "done", "total": total}));
            ExitCode::SUCCESS
        }
        Err(e) => {
            emit(serde_json::json!({"event": "error", "error": e.to_string()}));
            ExitCode::from(1)
        }
    }
}

async fn consumer(a: &Args) -> Result<Consumer, Error> {
    let mut config = ConsumerConfig::new(&a.bootstrap, &a.group)?;
    config.group_instance_id = Some(format!("{}-0", a.group));
    config.auto_offset_reset = AutoOffsetReset::Earliest;
    config.enable_auto_commit = false;
    config.isolation_level = IsolationLevel::ReadCommitted;
    config.fetch_max_wait = Duration::from_millis(100);
    config.max_poll_records = a.max_poll_records;
    let mut consumer = Consumer::new(config).await?;
    consumer.subscribe(&[a.input.as_str()]).await?;
    Ok(consumer)
}

async fn run(a: &Args) -> Result<u64, Error> {
    let mut config = ProducerConfig::new(&a.bootstrap)?;
    config.transactional_id = Some(a.transactional_id.clone());
    let producer = Producer::connect(config).await?;
    // A timed-out init goes on in the background; calling again waits for the same call.
    again_on_timeout(|| producer.init_transactions(Duration::from_secs(30))).await?;
    let mut consumer = consumer(a).await?;
    emit(serde_json::json!({"event": "ready"}));
    let (mut total, mut idle_since) = (0u64, Instant::now());
    while idle_since.elapsed() < a.idle {
        let records = match consumer.poll(Duration::from_millis(200)).await {
            Ok(r) => r,
            Err(e) => {
                emit(serde_json::json!({"event": "poll_failed", "error": e.to_string()}));
                continue;
            }
        };
        if records.is_empty() {
            continue;
        }
        idle_since = Instant::now();
        match transaction(&producer, &consumer, &records, &a.output).await {
            Ok(()) => {
                total += records.len() as u64;
                let n = records.len();
                emit(serde_json::json!({"event": "committed", "records": n, "total": total}));
            }
            Err(e) if is_fatal(&e) => return Err(e),
            Err(e) => {
                again_on_timeout(|| producer.abort_transaction(Duration::from_secs(30))).await?;
                emit(serde_json::json!({"event": "aborted", "error": e.to_string()}));
                rewind(&mut consumer).await?;
            }
        }
    }
    producer.close().await?;
    consumer.close().await?;
    Ok(total)
}

/// A producer that cannot go on: fenced by a newer instance, or failed for good.
fn is_fatal(e: &Error) -> bool {
    matches!(e, Error::Transaction { .. }) && !e.txn_requires_abort()
}

/// One transaction: the transformed records and the input offsets after them.
async fn transaction(
    producer: &Producer,
    consumer: &Consumer,
    records: &[ConsumerRecord],
    output: &str,
) -> Result<(), Error> {
    producer.begin_transaction().await?;
    let mut offsets = BTreeMap::new();
    for r in records {
        let value = [b"V".as_slice(), r.value.as_deref().unwrap_or_default()].concat();
        let mut out = ProducerRecord::new(output)
            .value(value)
            .partition(r.partition);
        if let Some(k) = &r.key {
            out = out.key(k.clone());
        }
        // The commit waits for every delivery and fails if one failed.
        drop(producer.send(out).await?);
        offsets.insert(TopicPartition::new(&*r.topic, r.partition), r.offset + 1);
    }
    let group = consumer.consumer_group_metadata();
    producer
        .send_offsets_to_transaction(&offsets, &group)
        .await?;
    again_on_timeout(|| producer.commit_transaction(Duration::from_secs(30))).await
}

/// Calls `f` again while it times out (at most 10 times): the producer's transactional calls go
/// on after a timeout, and a second call waits for the first.
async fn again_on_timeout<F, Fut>(mut f: F) -> Result<(), Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), Error>>,
{
    let mut tries = 0;
    loop {
        match f().await {
            Err(Error::Timeout { .. }) if tries < 10 => tries += 1,
            other => return other,
        }
    }
}

/// After an abort: every assigned partition goes back to its committed offset (the start of
/// the log where nothing is committed), so that the aborted records are processed again.
async fn rewind(consumer: &mut Consumer) -> Result<(), Error> {
    let assigned: Vec<TopicPartition> = consumer.assignment().into_iter().collect();
    let committed = consumer.committed(&assigned).await?;
    for (tp, offset) in committed {
        consumer.seek(&tp, offset.unwrap_or(0))?;
    }
    Ok(())
}
