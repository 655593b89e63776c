//! The producer: `send` returns a future per record that resolves to its offset or error.
//!
//! A background task (the shell) owns the [`accumulator::Accumulator`] (the core): it
//! partitions records ([`partitioner`]), batches them per partition, sends ready batches to
//! each partition's leader, and feeds the outcomes back to the core, which decides on retries,
//! sequence numbers and delivery. One Produce request per broker is in flight at a time: that
//! keeps each partition's batches in order on the wire without relying on how tasks are
//! scheduled onto the connection (the core itself handles up to `max.in.flight` batches per
//! partition and their out-of-order answers).

pub mod accumulator;
pub mod config;
pub mod partitioner;
pub mod wire;

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kafka_protocol::messages::{InitProducerIdRequest, ProduceRequest};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::client::{Client, Target};
use crate::error::{Error, KafkaCode, KafkaError, Result};
use crate::types::TopicPartition;

pub use accumulator::RecordMetadata;
use accumulator::{Accumulator, AccumulatorConfig, Completed, Outcome};
pub use config::{Acks, Compression, ProducerConfig};
use partitioner::{partition_for_key, StickyPartitioner};
use wire::{BatchToSend, ProducerIdentity, RecordData};

/// A record to send.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerRecord {
    pub topic: String,
    /// An explicit partition; otherwise the key's hash, or the sticky partition for keyless
    /// records.
    pub partition: Option<i32>,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Create time in ms since the epoch; the send time when `None`.
    pub timestamp: Option<i64>,
}

impl ProducerRecord {
    pub fn new(topic: impl Into<String>) -> ProducerRecord {
        ProducerRecord {
            topic: topic.into(),
            ..Default::default()
        }
    }

    pub fn key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }

    pub fn value(mut self, value: impl Into<Bytes>) -> Self {
        self.value = Some(value.into());
        self
    }

    pub fn partition(mut self, partition: i32) -> Self {
        self.partition = Some(partition);
        self
    }

    pub fn header(mut self, name: impl Into<String>, value: Option<Bytes>) -> Self {
        self.headers.push((name.into(), value));
        self
    }

    pub fn timestamp(mut self, ms: i64) -> Self {
        self.timestamp = Some(ms);
        self
    }
}

type Reply = oneshot::Sender<Result<RecordMetadata>>;

/// Resolves to the record's offset, or to why it was not written.
#[derive(Debug)]
pub struct DeliveryFuture {
    rx: oneshot::Receiver<Result<RecordMetadata>>,
}

impl Future for DeliveryFuture {
    type Output = Result<RecordMetadata>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx).poll(cx).map(|r| {
            r.unwrap_or_else(|_| {
                Err(Error::InvalidArgument(
                    "the producer stopped before the record was delivered".to_string(),
                ))
            })
        })
    }
}

enum Command {
    Send(ProducerRecord, Reply),
    Flush(oneshot::Sender<()>),
    Close(oneshot::Sender<()>),
}

/// An asynchronous Kafka producer. Cheap to share behind an `Arc`; `send` takes `&self`.
#[derive(Debug)]
pub struct Producer {
    tx: mpsc::Sender<Command>,
    client: Client,
}

impl Producer {
    /// Connects and starts the sender task.
    pub async fn connect(config: ProducerConfig) -> Result<Producer> {
        config.validate()?;
        let client = Client::connect(config.client.clone()).await?;
        let (tx, rx) = mpsc::channel(config.max_queued_records);
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x5eed);
        let task = SenderTask {
            client: client.clone(),
            acc: Accumulator::new(AccumulatorConfig {
                batch_size: config.batch_size,
                linger_ms: millis(config.linger),
                max_in_flight: config.max_in_flight,
                retries: config.retries,
                retry_backoff_ms: millis(config.retry_backoff),
                delivery_timeout_ms: millis(config.delivery_timeout),
                idempotent: config.enable_idempotence,
                compression: config.compression.codec(),
            }),
            partitioner: StickyPartitioner::new(seed),
            identity: None,
            need_identity: config.enable_idempotence,
            busy_brokers: HashSet::new(),
            inflight: JoinSet::new(),
            flush_waiters: Vec::new(),
            closing: None,
            started: Instant::now(),
            metadata_stale: false,
            last_refresh_ms: None,
            config,
        };
        tokio::spawn(task.run(rx));
        Ok(Producer { tx, client })
    }

    /// Queues a record; waits only while `max_queued_records` records are queued. The returned
    /// future resolves once the record is acknowledged (with `acks`) or has failed for good.
    pub async fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Command::Send(record, reply))
            .await
            .map_err(|_| closed())?;
        Ok(DeliveryFuture { rx })
    }

    /// Sends every queued record now, ignoring `linger.ms`, and waits until each has its result.
    pub async fn flush(&self) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Command::Flush(tx))
            .await
            .map_err(|_| closed())?;
        rx.await.map_err(|_| closed())
    }

    /// Flushes, then stops the sender task.
    pub async fn close(self) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Command::Close(tx))
            .await
            .map_err(|_| closed())?;
        rx.await.map_err(|_| closed())
    }

    pub fn client(&self) -> &Client {
        &self.client
    }
}

fn closed() -> Error {
    Error::InvalidArgument("the producer is closed".to_string())
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn wall_clock_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

type RequestResult = (
    i32,
    Vec<(u64, TopicPartition)>,
    Result<
        Vec<(
            TopicPartition,
            std::result::Result<wire::Appended, KafkaError>,
        )>,
    >,
);

/// The shell: owns the core, the network and the clock.
struct SenderTask {
    client: Client,
    config: ProducerConfig,
    acc: Accumulator<Reply>,
    partitioner: StickyPartitioner,
    identity: Option<ProducerIdentity>,
    need_identity: bool,
    busy_brokers: HashSet<i32>,
    inflight: JoinSet<RequestResult>,
    flush_waiters: Vec<oneshot::Sender<()>>,
    closing: Option<oneshot::Sender<()>>,
    started: Instant,
    metadata_stale: bool,
    last_refresh_ms: Option<u64>,
}

impl SenderTask {
    fn now(&self) -> u64 {
        millis(self.started.elapsed())
    }

    async fn run(mut self, mut rx: mpsc::Receiver<Command>) {
        let mut input_open = true;
        loop {
            self.housekeeping().await;
            let flushing = !self.flush_waiters.is_empty() || self.closing.is_some() || !input_open;
            if flushing && self.acc.is_empty() && self.inflight.is_empty() {
                for w in self.flush_waiters.drain(..) {
                    let _ = w.send(());
                }
                if let Some(c) = self.closing.take() {
                    let _ = c.send(());
                    return;
                }
                if !input_open {
                    return;
                }
            }
            let now = self.now();
            let wake = match self.acc.next_wakeup() {
                Some(w) if w > now => w,
                // Ready but blocked (no leader, broker busy, no producer id): look again after
                // a backoff unless an answer comes first.
                Some(_) => now + millis(self.config.retry_backoff),
                None => now + 60_000,
            };
            let sleep = tokio::time::sleep_until(self.started + Duration::from_millis(wake));
            tokio::select! {
                cmd = rx.recv(), if input_open && self.closing.is_none() => match cmd {
                    Some(Command::Send(record, reply)) => self.accept(record, reply).await,
                    Some(Command::Flush(w)) => self.flush_waiters.push(w),
                    Some(Command::Close(w)) => self.closing = Some(w),
                    None => input_open = false,
                },
                Some(joined) = self.inflight.join_next(), if !self.inflight.is_empty() => {
                    match joined {
                        Ok(result) => self.on_result(result),
                        // A request task panicked: its batches stay in flight forever otherwise.
                        Err(e) => tracing::error!(error = %e, "produce request task failed"),
                    }
                }
                _ = sleep => {}
            }
        }
    }

    /// Expiry, producer id, metadata, then sending whatever is ready.
    async fn housekeeping(&mut self) {
        let now = self.now();
        let (expired, reset) = self.acc.expire(now);
        for (reply, e) in expired {
            let _ = reply.send(Err(e));
        }
        self.need_identity |= reset;
        if self.need_identity && self.acc.in_flight_batches() == 0 && !self.acc.is_empty() {
            self.init_producer_id().await;
        }
        if self.metadata_stale
            && self
                .last_refresh_ms
                .is_none_or(|t| now >= t + millis(self.config.retry_backoff))
        {
            self.metadata_stale = false;
            self.last_refresh_ms = Some(now);
            let topics: Vec<String> = self
                .client
                .metadata()
                .topics
                .iter()
                .map(|t| t.name.clone())
                .collect();
            if let Err(e) = self.client.refresh_metadata(Some(&topics)).await {
                tracing::debug!(error = %e, "metadata refresh failed");
            }
        }
        if self.need_identity {
            return;
        }
        self.send_ready().await;
    }

    async fn init_producer_id(&mut self) {
        let client = self.client.clone();
        let result = client
            .retry("InitProducerId", || async {
                let (_, resp) = client
                    .send::<InitProducerIdRequest, _>(&Target::Any, |v| {
                        Ok(wire::init_producer_id_request(v))
                    })
                    .await?;
                wire::parse_init_producer_id(resp).map_err(|e| Error::kafka("InitProducerId", e))
            })
            .await;
        match result {
            Ok(identity) => {
                tracing::debug!(
                    producer_id = identity.producer_id,
                    epoch = identity.epoch,
                    "producer id"
                );
                self.identity = Some(identity);
                self.need_identity = false;
                self.acc.reset_sequences();
            }
            Err(e) => tracing::warn!(error = %e, "InitProducerId failed; records wait"),
        }
    }

    async fn accept(&mut self, record: ProducerRecord, reply: Reply) {
        let data = RecordData {
            key: record.key.clone(),
            value: record.value,
            headers: record.headers,
            timestamp: record.timestamp.unwrap_or_else(wall_clock_ms),
        };
        if data.estimated_size() + wire::BATCH_OVERHEAD > self.config.max_request_size {
            let _ = reply.send(Err(Error::kafka(
                format!("record for topic '{}'", record.topic),
                KafkaError::new(
                    KafkaCode(10),
                    Some(format!(
                        "the record is larger than max.request.size ({} bytes)",
                        self.config.max_request_size
                    )),
                ),
            )));
            return;
        }
        let (num_partitions, available) = match self.topic_partitions(&record.topic).await {
            Ok(x) => x,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        let partition = match (record.partition, &record.key) {
            (Some(p), _) if p < 0 || p >= num_partitions => {
                let _ = reply.send(Err(Error::InvalidArgument(format!(
                    "partition {p} is not in topic '{}' ({num_partitions} partitions)",
                    record.topic
                ))));
                return;
            }
            (Some(p), _) => p,
            (None, Some(key)) => partition_for_key(key, num_partitions),
            (None, None) => self
                .partitioner
                .partition(&record.topic, &available, num_partitions),
        };
        let tp = TopicPartition::new(record.topic, partition);
        let now = self.now();
        if self.acc.append(&tp, data, reply, now) {
            self.partitioner
                .on_batch_closed(&tp.topic, tp.partition, &available, num_partitions);
        }
    }

    /// Partition count and partitions with a leader, fetching metadata for a topic not yet
    /// known (for up to `max.block.ms`).
    async fn topic_partitions(&mut self, topic: &str) -> Result<(i32, Vec<i32>)> {
        let deadline = Instant::now() + self.config.max_block;
        loop {
            if let Some(t) = self.client.metadata().topic(topic) {
                if !t.partitions.is_empty() {
                    let available = t
                        .partitions
                        .iter()
                        .filter(|p| p.leader.is_some())
                        .map(|p| p.partition)
                        .collect();
                    return Ok((t.partitions.len() as i32, available));
                }
            }
            let fresh = self
                .client
                .refresh_metadata(Some(&[topic.to_string()]))
                .await;
            let known = self.client.metadata().topic(topic).is_some();
            if !known && Instant::now() + self.config.retry_backoff >= deadline {
                let code = fresh
                    .ok()
                    .and_then(|md| md.topic(topic).and_then(|t| t.error))
                    .unwrap_or(KafkaCode::UNKNOWN_TOPIC_OR_PARTITION);
                return Err(Error::kafka(
                    format!(
                        "topic '{topic}' not in metadata after {} ms",
                        self.config.max_block.as_millis()
                    ),
                    KafkaError::new(code, None),
                ));
            }
            if !known {
                tokio::time::sleep(self.config.retry_backoff).await;
            }
        }
    }

    async fn send_ready(&mut self) {
        let now = self.now();
        let flushing = !self.flush_waiters.is_empty() || self.closing.is_some();
        let metadata = self.client.metadata();
        let busy = &self.busy_brokers;
        let mut leaderless = false;
        let drained = self.acc.drain(now, flushing, self.identity, |tp| {
            match metadata.leader_for(&tp.topic, tp.partition) {
                Some(l) => !busy.contains(&l),
                None => {
                    leaderless = true;
                    false
                }
            }
        });
        self.metadata_stale |= leaderless;
        for (reply, e) in drained.failed {
            let _ = reply.send(Err(e));
        }
        for tp in &drained.closed {
            if let Some(t) = metadata.topic(&tp.topic) {
                let available: Vec<i32> = t
                    .partitions
                    .iter()
                    .filter(|p| p.leader.is_some())
                    .map(|p| p.partition)
                    .collect();
                self.partitioner.on_batch_closed(
                    &tp.topic,
                    tp.partition,
                    &available,
                    t.partitions.len() as i32,
                );
            }
        }
        let mut by_leader: BTreeMap<i32, Vec<(u64, BatchToSend)>> = BTreeMap::new();
        for o in drained.sends {
            let leader = metadata
                .leader_for(&o.tp.topic, o.tp.partition)
                .expect("drained only partitions with a leader");
            let topic_id = metadata
                .topic(&o.tp.topic)
                .map(|t| t.topic_id)
                .unwrap_or_default();
            by_leader.entry(leader).or_default().push((
                o.batch_id,
                BatchToSend {
                    tp: o.tp,
                    topic_id,
                    records: o.records,
                },
            ));
        }
        for (leader, batches) in by_leader {
            self.busy_brokers.insert(leader);
            let client = self.client.clone();
            let acks = self.config.acks.wire();
            let timeout_ms =
                i32::try_from(self.config.client.request_timeout.as_millis()).unwrap_or(i32::MAX);
            self.inflight.spawn(async move {
                let ids: Vec<(u64, TopicPartition)> =
                    batches.iter().map(|(id, b)| (*id, b.tp.clone())).collect();
                let batches: Vec<BatchToSend> = batches.into_iter().map(|(_, b)| b).collect();
                let result = client
                    .send::<ProduceRequest, _>(&Target::Broker(leader), |v| {
                        Ok(wire::produce_request(&batches, acks, timeout_ms, v))
                    })
                    .await
                    .map(|(_, resp)| wire::parse_produce_response(resp, &batches));
                (leader, ids, result)
            });
        }
    }

    fn on_result(&mut self, (leader, ids, result): RequestResult) {
        self.busy_brokers.remove(&leader);
        let now = self.now();
        for (batch_id, tp) in ids {
            let outcome = match &result {
                Ok(parts) => match parts.iter().find(|(t, _)| *t == tp) {
                    Some((_, Ok(a))) => Outcome::Appended(*a),
                    Some((_, Err(e))) => Outcome::Failed(e.clone()),
                    None => Outcome::NoResponse(format!("the response has no result for {tp}")),
                },
                Err(e) => match e.kafka_code() {
                    Some(code) => Outcome::Failed(KafkaError::new(code, Some(e.to_string()))),
                    None => Outcome::NoResponse(e.to_string()),
                },
            };
            if let Outcome::Failed(e) = &outcome {
                tracing::debug!(topic = %tp.topic, partition = tp.partition, error = %e, "produce failed");
            }
            let Completed {
                delivered,
                refresh_metadata,
                reset_producer,
            } = self.acc.complete(&tp, batch_id, outcome, now);
            self.metadata_stale |= refresh_metadata;
            if reset_producer && !self.need_identity {
                tracing::warn!(topic = %tp.topic, partition = tp.partition, "producer id reset");
                self.need_identity = true;
            }
            for (reply, r) in delivered {
                let _ = reply.send(r);
            }
        }
    }
}
