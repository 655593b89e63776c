//! A Gregor client process driven from the command line, for the interoperability tests in
//! `e2e/test_interop_gregor_client.py` (mixed groups with confluent-kafka and kafka-python).
//!
//! Prints one JSON object per line on stdout, flushed at once, so that a test can replay what
//! the application saw:
//!
//! * `{"event":"assigned"|"revoked"|"lost","partitions":[[topic,p],..],"at_ms":..,"generation":..,"member_id":..}`
//! * `{"event":"record","topic":..,"partition":..,"offset":..,"key":..,"value":..}` (consume)
//! * `{"event":"committed","offsets":[[topic,p,next_offset],..]}` or `{"event":"commit_failed","error":..}`
//! * `{"event":"produced","topic":..,"partition":..,"offset":..,"key":..,"value":..}` (produce)
//! * `{"event":"ready"}` once subscribed (consume), `{"event":"closed"}` at the end,
//!   `{"event":"error","error":..}` before a non-zero exit.
//!
//! Consume mode polls until stdin reaches end of file (or `--max-seconds`), committing the
//! positions synchronously after every non-empty poll (no auto-commit), then commits once more
//! and closes (revoke, LeaveGroup). Produce mode reads records from stdin, one per line:
//! `key<TAB>value`, or a bare `value` for a keyless record, and prints each delivery.
//!
//! ```text
//! gregor_member --bootstrap 127.0.0.1:9092 --mode consume --group g --topic t \
//!     --strategy cooperative-sticky [--name A] [--session-ms 6000] [--heartbeat-ms 500]
//! gregor_member --bootstrap 127.0.0.1:9092 --mode produce --topic t < records.tsv
//! ```
//!
//! `--command-config FILE` (any mode) takes a Kafka client properties file, as the `gregor`
//! admin commands do: `security.protocol`, the `ssl.*` settings and the SASL login
//! (`e2e/test_secure_clients.py` runs the member over SASL_SSL and mTLS with it).
//!
//! Two benchmark modes (for `bench/client_compare.py`) print a single summary line
//! `{"event":"bench","mode":..,"records":..,"bytes":..,"seconds":..,..}`:
//!
//! ```text
//! gregor_member --bootstrap .. --mode produce-bench --topic t --count 200000 --value-bytes 1024 \
//!     [--linger-ms 5] [--batch-size 65536]
//! gregor_member --bootstrap .. --mode consume-bench --group g --topic t --count 200000
//! ```
//!
//! `produce-bench` sends `--count` records keyed `k<i>` (spread over the partitions by the key
//! hash) with `--value-bytes` values, `acks=all`, idempotence on, and times from the first
//! `send` to the last delivery. `consume-bench` subscribes and polls until it has `--count`
//! records; `seconds` runs from the first record to the last, `join_seconds` from the subscribe
//! call to the first record. Neither mode reads stdin.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gregor_client::consumer::AutoOffsetReset;
use gregor_client::sasl::ClientSasl;
use gregor_client::tls::ClientTls;
use gregor_client::{
    ClientConfig, Consumer, ConsumerConfig, Producer, ProducerConfig, ProducerRecord,
    RebalanceContext, RebalanceListener, TopicPartition,
};

struct Args {
    bootstrap: String,
    mode: String,
    group: String,
    topic: String,
    strategy: String,
    name: String,
    session_ms: u64,
    heartbeat_ms: u64,
    max_seconds: u64,
    count: u64,
    value_bytes: usize,
    linger_ms: u64,
    batch_size: usize,
    command_config: Option<std::path::PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        bootstrap: String::new(),
        mode: String::new(),
        group: String::new(),
        topic: String::new(),
        strategy: "cooperative-sticky".into(),
        name: "gregor-member".into(),
        session_ms: 6000,
        heartbeat_ms: 500,
        max_seconds: 120,
        count: 0,
        value_bytes: 1024,
        linger_ms: 5,
        batch_size: 65_536,
        command_config: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |v: &str| v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--bootstrap" => a.bootstrap = value,
            "--mode" => a.mode = value,
            "--group" => a.group = value,
            "--topic" => a.topic = value,
            "--strategy" => a.strategy = value,
            "--name" => a.name = value,
            "--session-ms" => a.session_ms = num(&value)?,
            "--heartbeat-ms" => a.heartbeat_ms = num(&value)?,
            "--max-seconds" => a.max_seconds = num(&value)?,
            "--count" => a.count = num(&value)?,
            "--value-bytes" => a.value_bytes = num(&value)? as usize,
            "--linger-ms" => a.linger_ms = num(&value)?,
            "--batch-size" => a.batch_size = num(&value)? as usize,
            "--command-config" => a.command_config = Some(value.into()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.bootstrap.is_empty() || a.topic.is_empty() {
        return Err("--bootstrap and --topic are required".into());
    }
    match a.mode.as_str() {
        "produce" => {}
        "consume" if !a.group.is_empty() => {}
        "consume" => return Err("--mode consume needs --group".into()),
        "produce-bench" | "consume-bench" if a.count == 0 => {
            return Err(format!("--mode {} needs --count of at least 1", a.mode))
        }
        "produce-bench" => {}
        "consume-bench" if !a.group.is_empty() => {}
        "consume-bench" => return Err("--mode consume-bench needs --group".into()),
        _ => return Err("--mode must be produce, consume, produce-bench or consume-bench".into()),
    }
    Ok(a)
}

/// A JSON string literal (RFC 8259 escaping).
fn js(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn js_bytes(b: Option<&[u8]>) -> String {
    match b {
        None => "null".into(),
        Some(b) => js(&String::from_utf8_lossy(b)),
    }
}

fn emit(line: String) {
    let mut out = std::io::stdout().lock();
    // A closed stdout means the test is gone: nothing left to report to.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn parts_json(parts: &[TopicPartition]) -> String {
    let items: Vec<String> = parts
        .iter()
        .map(|tp| format!("[{},{}]", js(&tp.topic), tp.partition))
        .collect();
    format!("[{}]", items.join(","))
}

struct PrintingListener;

impl PrintingListener {
    fn print(kind: &str, parts: &[TopicPartition], ctx: &RebalanceContext) {
        emit(format!(
            r#"{{"event":"{kind}","partitions":{},"at_ms":{},"generation":{},"member_id":{}}}"#,
            parts_json(parts),
            ctx.at_ms,
            ctx.generation,
            js(&ctx.member_id)
        ));
    }
}

impl RebalanceListener for PrintingListener {
    fn on_partitions_revoked(&mut self, parts: &[TopicPartition], ctx: &RebalanceContext) {
        Self::print("revoked", parts, ctx);
    }
    fn on_partitions_assigned(&mut self, parts: &[TopicPartition], ctx: &RebalanceContext) {
        Self::print("assigned", parts, ctx);
    }
    fn on_partitions_lost(&mut self, parts: &[TopicPartition], ctx: &RebalanceContext) {
        Self::print("lost", parts, ctx);
    }
}

/// `key=value` lines of a Java properties file (`#` and `!` comments; no line continuations,
/// which client security files do not use).
fn properties(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('!'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// TLS and SASL from `--command-config`, as `gregor`'s admin commands read it.
fn apply_command_config(c: &mut ClientConfig, path: &std::path::Path) -> gregor_client::Result<()> {
    let invalid = |what: String| gregor_client::Error::InvalidArgument(what);
    let text = std::fs::read_to_string(path)
        .map_err(|e| invalid(format!("reading {}: {e}", path.display())))?;
    let props = properties(&text);
    if let Some(id) = props.get("client.id") {
        c.client_id = id.clone();
    }
    let tls = ClientTls::from_properties(&props).map_err(|e| invalid(e.to_string()))?;
    let sasl = ClientSasl::from_properties(&props).map_err(|e| invalid(e.to_string()))?;
    c.dialer = gregor_client::sasl::dialer(tls, sasl, &c.client_id);
    Ok(())
}

fn client_config(a: &Args) -> gregor_client::Result<ClientConfig> {
    let mut c = ClientConfig::new(&a.bootstrap)?;
    c.client_id = a.name.clone();
    c.connect_timeout = Duration::from_secs(20);
    c.api_timeout = Duration::from_secs(20);
    c.request_timeout = Duration::from_secs(10);
    if let Some(path) = &a.command_config {
        apply_command_config(&mut c, path)?;
    }
    Ok(c)
}

/// Sets the flag when stdin reaches end of file (the test's way of saying "stop").
fn watch_stdin() -> Arc<AtomicBool> {
    let eof = Arc::new(AtomicBool::new(false));
    let flag = eof.clone();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::stdin().lock().read_until(0, &mut sink);
        flag.store(true, Ordering::SeqCst);
    });
    eof
}

fn commit_line(offsets: &BTreeMap<TopicPartition, i64>) -> String {
    let items: Vec<String> = offsets
        .iter()
        .map(|(tp, o)| format!("[{},{},{o}]", js(&tp.topic), tp.partition))
        .collect();
    format!(r#"{{"event":"committed","offsets":[{}]}}"#, items.join(","))
}

/// Commits exactly the positions after the records printed so far, and reports the result.
async fn commit(consumer: &mut Consumer, next: &BTreeMap<TopicPartition, i64>) {
    if next.is_empty() {
        return;
    }
    match consumer.commit_sync(Some(next.clone())).await {
        Ok(()) => emit(commit_line(next)),
        Err(e) => emit(format!(
            r#"{{"event":"commit_failed","error":{}}}"#,
            js(&e.to_string())
        )),
    }
}

async fn consume(a: &Args) -> gregor_client::Result<()> {
    let mut c = ConsumerConfig::new(&a.bootstrap, &a.group)?;
    c.client = client_config(a)?;
    c.session_timeout = Duration::from_millis(a.session_ms);
    c.heartbeat_interval = Duration::from_millis(a.heartbeat_ms);
    c.max_poll_interval = Duration::from_secs(30);
    c.partition_assignment_strategy = a.strategy.split(',').map(str::to_string).collect();
    c.auto_offset_reset = AutoOffsetReset::Earliest;
    c.enable_auto_commit = false;
    c.fetch_max_wait = Duration::from_millis(100);
    let mut consumer = Consumer::new(c).await?;
    consumer.set_rebalance_listener(Box::new(PrintingListener));
    consumer.subscribe(&[a.topic.as_str()]).await?;
    emit(r#"{"event":"ready"}"#.into());
    let stop = watch_stdin();
    let deadline = Instant::now() + Duration::from_secs(a.max_seconds);
    while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
        let records = consumer.poll(Duration::from_millis(100)).await?;
        let mut next = BTreeMap::new();
        for r in &records {
            emit(format!(
                r#"{{"event":"record","topic":{},"partition":{},"offset":{},"key":{},"value":{}}}"#,
                js(&r.topic),
                r.partition,
                r.offset,
                js_bytes(r.key.as_deref()),
                js_bytes(r.value.as_deref())
            ));
            next.insert(TopicPartition::new(&*r.topic, r.partition), r.offset + 1);
        }
        commit(&mut consumer, &next).await;
    }
    consumer.close().await?;
    emit(r#"{"event":"closed"}"#.into());
    Ok(())
}

async fn produce(a: &Args) -> gregor_client::Result<()> {
    let mut c = ProducerConfig::new(&a.bootstrap)?;
    c.client = client_config(a)?;
    c.delivery_timeout = Duration::from_secs(30);
    let producer = Producer::connect(c).await?;
    let lines: Vec<String> = std::io::stdin()
        .lock()
        .lines()
        .collect::<std::io::Result<_>>()
        .map_err(|e| gregor_client::Error::InvalidArgument(format!("reading stdin: {e}")))?;
    let mut pending = Vec::new();
    for line in lines.iter().filter(|l| !l.is_empty()) {
        let (key, value) = match line.split_once('\t') {
            Some((k, v)) => (Some(k.to_string()), v.to_string()),
            None => (None, line.clone()),
        };
        let mut record = ProducerRecord::new(&a.topic).value(value.clone());
        if let Some(k) = &key {
            record = record.key(k.clone());
        }
        pending.push((key, value, producer.send(record).await?));
    }
    producer.flush().await?;
    for (key, value, delivery) in pending {
        let meta = delivery.await?;
        emit(format!(
            r#"{{"event":"produced","topic":{},"partition":{},"offset":{},"key":{},"value":{}}}"#,
            js(&meta.topic),
            meta.partition,
            meta.offset,
            key.as_deref().map(js).unwrap_or_else(|| "null".into()),
            js(&value)
        ));
    }
    producer.close().await?;
    emit(r#"{"event":"closed"}"#.into());
    Ok(())
}

fn bench_line(mode: &str, records: u64, bytes: u64, seconds: f64, extra: &str) -> String {
    format!(
        r#"{{"event":"bench","mode":"{mode}","records":{records},"bytes":{bytes},"seconds":{seconds:.6}{extra}}}"#
    )
}

/// Sends `--count` generated records and times them from the first `send` to the last delivery.
async fn produce_bench(a: &Args) -> gregor_client::Result<()> {
    let mut c = ProducerConfig::new(&a.bootstrap)?;
    c.client = client_config(a)?;
    c.delivery_timeout = Duration::from_secs(60);
    c.linger = Duration::from_millis(a.linger_ms);
    c.batch_size = a.batch_size;
    let producer = Producer::connect(c).await?;
    let value = bytes::Bytes::from(vec![b'x'; a.value_bytes]);
    let started = Instant::now();
    // Deliveries are awaited by a separate task as they come, so memory stays bounded by the
    // producer's own queue rather than by `--count` futures.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<gregor_client::DeliveryFuture>(100_000);
    let waiter = tokio::spawn(async move {
        let mut failed = 0u64;
        let mut first_error = None;
        while let Some(d) = rx.recv().await {
            if let Err(e) = d.await {
                failed += 1;
                first_error.get_or_insert(e.to_string());
            }
        }
        (failed, first_error)
    });
    for i in 0..a.count {
        let record = ProducerRecord::new(&a.topic)
            .key(format!("k{i}"))
            .value(value.clone());
        let delivery = producer.send(record).await?;
        if tx.send(delivery).await.is_err() {
            break;
        }
    }
    drop(tx);
    producer.flush().await?;
    let (failed, first_error) = waiter
        .await
        .map_err(|e| gregor_client::Error::InvalidArgument(format!("delivery task: {e}")))?;
    let seconds = started.elapsed().as_secs_f64();
    producer.close().await?;
    if let Some(e) = first_error {
        return Err(gregor_client::Error::InvalidArgument(format!(
            "{failed} records failed, first: {e}"
        )));
    }
    let bytes = a.count * a.value_bytes as u64;
    emit(bench_line("produce", a.count, bytes, seconds, ""));
    Ok(())
}

/// Polls until `--count` records arrived (or `--max-seconds`), counting records and value bytes.
async fn consume_bench(a: &Args) -> gregor_client::Result<()> {
    let mut c = ConsumerConfig::new(&a.bootstrap, &a.group)?;
    c.client = client_config(a)?;
    c.session_timeout = Duration::from_millis(a.session_ms);
    c.heartbeat_interval = Duration::from_millis(a.heartbeat_ms);
    c.partition_assignment_strategy = a.strategy.split(',').map(str::to_string).collect();
    c.auto_offset_reset = AutoOffsetReset::Earliest;
    c.enable_auto_commit = false;
    let mut consumer = Consumer::new(c).await?;
    let subscribed = Instant::now();
    consumer.subscribe(&[a.topic.as_str()]).await?;
    let deadline = subscribed + Duration::from_secs(a.max_seconds);
    let mut first = None;
    let (mut records, mut bytes) = (0u64, 0u64);
    while records < a.count && Instant::now() < deadline {
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
    let end = Instant::now();
    let first = first.unwrap_or(end);
    consumer.close().await?;
    let extra = format!(
        r#","join_seconds":{:.6}"#,
        (first - subscribed).as_secs_f64()
    );
    emit(bench_line(
        "consume",
        records,
        bytes,
        (end - first).as_secs_f64(),
        &extra,
    ));
    if records < a.count {
        return Err(gregor_client::Error::InvalidArgument(format!(
            "only {records} of {} records within --max-seconds",
            a.count
        )));
    }
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("gregor_member: {e}");
            return ExitCode::from(2);
        }
    };
    let result = match args.mode.as_str() {
        "produce" => produce(&args).await,
        "produce-bench" => produce_bench(&args).await,
        "consume-bench" => consume_bench(&args).await,
        _ => consume(&args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            emit(format!(
                r#"{{"event":"error","error":{}}}"#,
                js(&e.to_string())
            ));
            ExitCode::FAILURE
        }
    }
}
