//! The producer: `send` returns a future per record that resolves to its offset or error.
//!
//! A background task (the shell) owns the [`accumulator::Accumulator`] (the core): it
//! partitions records ([`partitioner`]), batches them per partition, sends ready batches to
//! each partition's leader, and feeds the outcomes back to the core, which decides on retries,
//! sequence numbers and delivery. Each broker has a lane: a task that takes that broker's
//! Produce requests in the order the core released them and submits them to the connection one
//! after the other, so they reach the broker in that order, while up to
//! `max.in.flight.requests.per.connection` of them wait for their responses at once. With
//! `acks=0` a request counts as answered once it is written.

pub mod accumulator;
pub mod config;
mod lane;
mod metrics;
pub mod partitioner;
pub mod txn;
mod txn_exec;
#[cfg(test)]
mod txn_tests;
pub mod txn_wire;
pub mod wire;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kafka_protocol::messages::InitProducerIdRequest;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::client::{Client, Target};
use crate::error::{Error, KafkaCode, KafkaError, Result};
use crate::types::{ConsumerGroupMetadata, TopicPartition};

pub use accumulator::RecordMetadata;
use accumulator::{Accumulator, AccumulatorConfig, Completed, IdentityReset, Outcome};
pub use config::{Acks, Compression, ProducerConfig};
use lane::{run_lane, LaneRequest, LaneSettings, RequestResult};
use metrics::Counters;
pub use metrics::ProducerMetrics;
use partitioner::{partition_for_key, StickyPartitioner};
use txn::{Op, Pending, TxnError, TxnManager, TxnResponse, TxnState};
pub use wire::ProducerIdentity;
use wire::{BatchToSend, RecordData};

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
    /// A transactional call (only with `transactional.id`).
    Txn(TxnCall, oneshot::Sender<Result<()>>),
    /// The answer to the transaction manager's request in flight.
    TxnAnswer(TxnResponse),
}

/// The transactional calls, as the sender task receives them.
enum TxnCall {
    Init,
    Begin,
    SendOffsets(BTreeMap<TopicPartition, i64>, ConsumerGroupMetadata),
    Commit,
    Abort,
}

/// An asynchronous Kafka producer. Cheap to share behind an `Arc`; `send` takes `&self`.
#[derive(Debug)]
pub struct Producer {
    tx: mpsc::Sender<Command>,
    client: Client,
    counters: Arc<Counters>,
    max_block: Duration,
    retry_backoff: Duration,
    transactional: bool,
}

impl Producer {
    /// Connects and starts the sender task.
    pub async fn connect(config: ProducerConfig) -> Result<Producer> {
        config.validate()?;
        let client = Client::connect(config.client.clone()).await?;
        let (tx, rx) = mpsc::channel(config.max_queued_records);
        let (results_tx, results_rx) = mpsc::unbounded_channel();
        let counters = Arc::new(Counters::default());
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x5eed);
        let max_block = config.max_block;
        let retry_backoff = config.retry_backoff;
        let txn = config.transactional_id.as_ref().map(|id| {
            TxnManager::new(
                id.clone(),
                i32::try_from(config.transaction_timeout.as_millis()).unwrap_or(i32::MAX),
                millis(config.retry_backoff),
            )
        });
        let transactional = txn.is_some();
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
                transactional,
            }),
            partitioner: StickyPartitioner::new(seed),
            identity: None,
            // A transactional producer's identity comes from init_transactions.
            reset: (config.enable_idempotence && !transactional)
                .then_some(IdentityReset::NewProducerId),
            in_flight: HashMap::new(),
            lanes: HashMap::new(),
            results: results_tx,
            counters: counters.clone(),
            flush_waiters: Vec::new(),
            closing: None,
            started: Instant::now(),
            metadata_stale: false,
            last_refresh_ms: None,
            txn,
            txn_waiter: None,
            txn_request_in_flight: false,
            commands: transactional.then(|| tx.downgrade()),
            config,
        };
        tokio::spawn(task.run(rx, results_rx));
        Ok(Producer {
            tx,
            client,
            counters,
            max_block,
            retry_backoff,
            transactional,
        })
    }

    /// Queues a record; waits while its topic's metadata is unknown (up to `max.block.ms`,
    /// as Kafka's `send` blocks its caller) and while `max_queued_records` records are
    /// queued. The returned future resolves once the record is acknowledged (with `acks`) or
    /// has failed for good. Waiting for one topic holds up only this caller: records of known
    /// topics from other tasks keep flowing.
    pub async fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture> {
        self.wait_for_topic(&record.topic).await?;
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

    /// Kafka's `initTransactions`: finds the transaction coordinator of `transactional.id`
    /// and gets a producer id from it, which fences older producers with the same id and
    /// ends their open transaction. Needed once before the first `begin_transaction`. On a
    /// timeout the call goes on; calling again waits for the same call.
    pub async fn init_transactions(&self, timeout: Duration) -> Result<()> {
        self.txn_call(TxnCall::Init, "init_transactions", Some(timeout))
            .await
    }

    /// Kafka's `beginTransaction`: local; records sent from now on belong to the transaction.
    pub async fn begin_transaction(&self) -> Result<()> {
        self.txn_call(TxnCall::Begin, "begin_transaction", None)
            .await
    }

    /// Kafka's `sendOffsetsToTransaction`: commits `offsets` (the next offsets to consume) for
    /// the consumer's group as part of the transaction (AddOffsetsToTxn, then TxnOffsetCommit
    /// to the group coordinator with the consumer's generation). Waits up to `max.block.ms`.
    pub async fn send_offsets_to_transaction(
        &self,
        offsets: &BTreeMap<TopicPartition, i64>,
        group_metadata: &ConsumerGroupMetadata,
    ) -> Result<()> {
        let call = TxnCall::SendOffsets(offsets.clone(), group_metadata.clone());
        self.txn_call(call, "send_offsets_to_transaction", Some(self.max_block))
            .await
    }

    /// Kafka's `commitTransaction`: sends every record of the transaction (ignoring
    /// `linger.ms`), waits for their answers, then ends the transaction (EndTxn). Fails with
    /// the error if a record failed: then only `abort_transaction` is allowed.
    pub async fn commit_transaction(&self, timeout: Duration) -> Result<()> {
        self.txn_call(TxnCall::Commit, "commit_transaction", Some(timeout))
            .await
    }

    /// Kafka's `abortTransaction`: records not yet sent fail, those in flight get their
    /// answers, then the transaction ends aborted.
    pub async fn abort_transaction(&self, timeout: Duration) -> Result<()> {
        self.txn_call(TxnCall::Abort, "abort_transaction", Some(timeout))
            .await
    }

    async fn txn_call(&self, call: TxnCall, what: &str, timeout: Option<Duration>) -> Result<()> {
        if !self.transactional {
            return Err(Error::InvalidArgument(format!(
                "{what}: this producer has no transactional.id"
            )));
        }
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Command::Txn(call, tx))
            .await
            .map_err(|_| closed())?;
        let Some(timeout) = timeout else {
            return rx.await.map_err(|_| closed())?;
        };
        match tokio::time::timeout(timeout, rx).await {
            Ok(answer) => answer.map_err(|_| closed())?,
            Err(_) => Err(Error::Timeout {
                what: format!("{what} (it goes on: call it again to wait for it)"),
                after_ms: millis(timeout),
            }),
        }
    }

    /// Waits until the metadata cache knows `topic` with partitions, refreshing it every
    /// `retry.backoff.ms`, for up to `max.block.ms`.
    async fn wait_for_topic(&self, topic: &str) -> Result<()> {
        let known = |client: &Client| {
            client
                .metadata()
                .topic(topic)
                .is_some_and(|t| !t.partitions.is_empty())
        };
        if known(&self.client) {
            return Ok(());
        }
        let deadline = Instant::now() + self.max_block;
        loop {
            let fresh = self
                .client
                .refresh_metadata(Some(&[topic.to_string()]))
                .await;
            if known(&self.client) {
                return Ok(());
            }
            if Instant::now() + self.retry_backoff >= deadline {
                let code = fresh
                    .ok()
                    .and_then(|md| md.topic(topic).and_then(|t| t.error))
                    .unwrap_or(KafkaCode::UNKNOWN_TOPIC_OR_PARTITION);
                return Err(Error::kafka(
                    format!(
                        "topic '{topic}' not in metadata after {} ms",
                        self.max_block.as_millis()
                    ),
                    KafkaError::new(code, None),
                ));
            }
            tokio::time::sleep(self.retry_backoff).await;
        }
    }

    /// The producer's counters now.
    pub fn metrics(&self) -> ProducerMetrics {
        self.counters.snapshot()
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

/// The shell: owns the core, the network and the clock.
struct SenderTask {
    client: Client,
    config: ProducerConfig,
    acc: Accumulator<Reply>,
    partitioner: StickyPartitioner,
    identity: Option<ProducerIdentity>,
    /// A pending identity renewal: nothing is sent until it is done.
    reset: Option<IdentityReset>,
    /// Produce requests per broker sent and not yet answered.
    in_flight: HashMap<i32, usize>,
    lanes: HashMap<i32, mpsc::UnboundedSender<LaneRequest>>,
    results: mpsc::UnboundedSender<RequestResult>,
    counters: Arc<Counters>,
    flush_waiters: Vec<oneshot::Sender<()>>,
    closing: Option<oneshot::Sender<()>>,
    started: Instant,
    metadata_stale: bool,
    last_refresh_ms: Option<u64>,
    /// With `transactional.id`: the transaction manager (the pure core of transactions).
    txn: Option<TxnManager>,
    /// The caller of the transactional call in progress.
    txn_waiter: Option<(Op, oneshot::Sender<Result<()>>)>,
    txn_request_in_flight: bool,
    /// For transactional requests' answers to come back as commands (no task holds it
    /// otherwise, so the command channel still closes when the producer is dropped).
    commands: Option<mpsc::WeakSender<Command>>,
}

impl SenderTask {
    fn now(&self) -> u64 {
        millis(self.started.elapsed())
    }

    async fn run(
        mut self,
        mut rx: mpsc::Receiver<Command>,
        mut results: mpsc::UnboundedReceiver<RequestResult>,
    ) {
        let mut input_open = true;
        loop {
            self.housekeeping().await;
            let flushing = !self.flush_waiters.is_empty() || self.closing.is_some() || !input_open;
            let answered = self.in_flight.values().all(|n| *n == 0);
            if flushing && self.acc.is_empty() && answered {
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
            let mut wake = match self.acc.next_wakeup() {
                Some(w) if w > now => w,
                // Ready but blocked (no leader, broker busy, no producer id): look again after
                // a backoff unless an answer comes first.
                Some(_) => now + millis(self.config.retry_backoff),
                None => now + 60_000,
            };
            if let Some(t) = self.txn.as_ref().and_then(TxnManager::retry_at_ms) {
                if t > now {
                    wake = wake.min(t);
                }
            }
            // Transactional answers come as commands, also while closing.
            let commands_open = self.closing.is_none() || self.txn_request_in_flight;
            let sleep = tokio::time::sleep_until(self.started + Duration::from_millis(wake));
            tokio::select! {
                cmd = rx.recv(), if input_open && commands_open => match cmd {
                    Some(Command::Send(record, reply)) => self.accept(record, reply).await,
                    Some(Command::Flush(w)) => self.flush_waiters.push(w),
                    Some(Command::Close(w)) => self.closing = Some(w),
                    Some(Command::Txn(call, reply)) => self.on_txn_call(call, reply),
                    Some(Command::TxnAnswer(answer)) => self.on_txn_answer(answer),
                    None => input_open = false,
                },
                // The task holds a sender itself, so this never ends.
                Some(result) = results.recv() => self.on_result(result),
                _ = sleep => {}
            }
        }
    }

    /// Expiry, producer id, metadata, then sending whatever is ready.
    async fn housekeeping(&mut self) {
        let now = self.now();
        let (expired, reset) = self.acc.expire(now);
        if let Some(txn) = self.txn.as_mut() {
            // A transaction with a record given up cannot commit.
            if let Some((_, e)) = expired.first() {
                txn.on_batch_failed(&KafkaError::new(
                    KafkaCode::REQUEST_TIMED_OUT,
                    Some(e.to_string()),
                ));
            }
            txn_reset(txn, reset);
        } else {
            self.reset = self.reset.max(reset);
        }
        for (reply, e) in expired {
            let _ = reply.send(Err(e));
        }
        if self.txn.is_some() {
            self.drive_txn(now);
        }
        if self.reset.is_some() && self.acc.in_flight_batches() == 0 && !self.acc.is_empty() {
            self.renew_identity().await;
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
        if self.reset.is_some() {
            return;
        }
        self.send_ready();
    }

    /// Bumps the epoch (KIP-360) or takes a new producer id, then renumbers every unsent batch.
    /// Called with nothing in flight.
    async fn renew_identity(&mut self) {
        match (self.reset, self.identity) {
            (Some(IdentityReset::BumpEpoch), Some(id)) if id.epoch < i16::MAX => {
                let bumped = ProducerIdentity {
                    producer_id: id.producer_id,
                    epoch: id.epoch + 1,
                };
                tracing::info!(
                    producer_id = bumped.producer_id,
                    epoch = bumped.epoch,
                    "producer epoch bumped; sequences restart at 0"
                );
                self.identity = Some(bumped);
                self.counters.set_identity(bumped);
                self.counters.epoch_bumps.fetch_add(1, Ordering::Relaxed);
                self.reset = None;
                self.acc.reset_sequences();
            }
            // No identity yet, a fenced epoch, or an epoch that cannot grow.
            _ => self.init_producer_id().await,
        }
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
                self.counters.set_identity(identity);
                self.counters.producer_ids.fetch_add(1, Ordering::Relaxed);
                self.reset = None;
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
        if let Some(txn) = self.txn.as_mut() {
            // Refused outside a transaction; the partition joins the transaction otherwise.
            if let Err(e) = txn.on_send(&tp) {
                let _ = reply.send(Err(txn_error(txn.transactional_id(), e)));
                return;
            }
        }
        let now = self.now();
        if self.acc.append(&tp, data, reply, now) {
            self.partitioner
                .on_batch_closed(&tp.topic, tp.partition, &available, num_partitions);
        }
    }

    /// Partition count and partitions with a leader. `send` made sure the topic was known;
    /// if it has gone since (deleted), one refresh decides.
    async fn topic_partitions(&mut self, topic: &str) -> Result<(i32, Vec<i32>)> {
        for attempt in 0..2 {
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
            if attempt == 0 {
                if let Err(e) = self
                    .client
                    .refresh_metadata(Some(&[topic.to_string()]))
                    .await
                {
                    tracing::debug!(topic, error = %e, "metadata refresh failed");
                }
            }
        }
        Err(Error::kafka(
            format!("topic '{topic}' is not in the metadata"),
            KafkaError::new(KafkaCode::UNKNOWN_TOPIC_OR_PARTITION, None),
        ))
    }

    fn send_ready(&mut self) {
        let now = self.now();
        let txn = self.txn.as_ref();
        // Committing sends every record now, as Kafka's commitTransaction flushes.
        let committing = txn.is_some_and(|t| t.state() == TxnState::CommittingTransaction);
        let flushing = !self.flush_waiters.is_empty() || self.closing.is_some() || committing;
        let metadata = self.client.metadata();
        let in_flight = &self.in_flight;
        let limit = self.config.max_in_flight;
        let mut leaderless = false;
        let drained = self.acc.drain(now, flushing, self.identity, |tp| {
            // A partition's batches wait until the coordinator has added it to the transaction.
            if txn.is_some_and(|t| !t.may_send(tp)) {
                return false;
            }
            match metadata.leader_for(&tp.topic, tp.partition) {
                Some(l) => in_flight.get(&l).copied().unwrap_or(0) < limit,
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
        for (leader, batches) in by_leader(&metadata, drained.sends) {
            self.send_to_lane(leader, batches);
        }
    }

    /// Hands one leader's batches to its lane (started on first use) as one Produce request.
    fn send_to_lane(&mut self, leader: i32, batches: Vec<(u64, BatchToSend)>) {
        let ids: Vec<(u64, TopicPartition)> =
            batches.iter().map(|(id, b)| (*id, b.tp.clone())).collect();
        let batches: Vec<BatchToSend> = batches.into_iter().map(|(_, b)| b).collect();
        let n = self.in_flight.entry(leader).or_default();
        *n += 1;
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        self.counters
            .peak_requests_in_flight
            .fetch_max(*n as u64, Ordering::Relaxed);
        let client = &self.client;
        let results = &self.results;
        let settings = LaneSettings {
            acks: self.config.acks.wire(),
            timeout_ms: i32::try_from(self.config.client.request_timeout.as_millis())
                .unwrap_or(i32::MAX),
            transactional_id: self.config.transactional_id.as_deref().map(Arc::from),
        };
        let lane = self.lanes.entry(leader).or_insert_with(|| {
            let (lane, requests) = mpsc::unbounded_channel();
            tokio::spawn(run_lane(
                client.clone(),
                leader,
                settings,
                requests,
                results.clone(),
            ));
            lane
        });
        let txn_version2 = self.txn.as_ref().is_some_and(TxnManager::version2);
        let request = LaneRequest {
            ids,
            batches,
            txn_version2,
        };
        if let Err(mpsc::error::SendError(request)) = lane.send(request) {
            // The lane task is gone (it only ends with this task, or by panicking): answer
            // for it so the batches are retried on a new lane.
            self.lanes.remove(&leader);
            let _ = self.results.send((
                leader,
                request.ids,
                Err(Error::Disconnected {
                    broker: format!("broker {leader}"),
                    reason: "produce lane stopped".to_string(),
                }),
            ));
        }
    }

    fn on_result(&mut self, (leader, ids, result): RequestResult) {
        if let Some(n) = self.in_flight.get_mut(&leader) {
            *n = n.saturating_sub(1);
        }
        let now = self.now();
        for (batch_id, tp) in ids {
            let outcome = match &result {
                Ok(parts) => match parts.iter().find(|(t, _)| *t == tp) {
                    Some((_, Ok(a))) => Outcome::Appended(*a),
                    Some((_, Err(r))) if r.records.is_empty() => Outcome::Failed(r.error.clone()),
                    Some((_, Err(r))) => {
                        Outcome::RecordsRejected(r.error.clone(), r.records.clone())
                    }
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
                reset,
            } = self.acc.complete(&tp, batch_id, outcome, now);
            self.metadata_stale |= refresh_metadata;
            if let Some(txn) = self.txn.as_mut() {
                for e in delivered.iter().filter_map(|(_, r)| r.as_ref().err()) {
                    txn.on_batch_failed(&batch_error(e));
                }
                txn_reset(txn, reset);
            } else if reset > self.reset {
                tracing::warn!(topic = %tp.topic, partition = tp.partition, ?reset, "producer identity to renew");
                self.reset = reset;
            }
            for (reply, r) in delivered {
                let _ = reply.send(r);
            }
        }
    }
}

/// The transactional side of the sender task: calls in, the manager's requests out (each in a
/// task of its own, its answer coming back as a command), unsent batches failed when the
/// transaction aborts.
impl SenderTask {
    fn on_txn_call(&mut self, call: TxnCall, reply: oneshot::Sender<Result<()>>) {
        let Some(txn) = self.txn.as_mut() else {
            let _ = reply.send(Err(Error::InvalidArgument(
                "this producer has no transactional.id".to_string(),
            )));
            return;
        };
        let (op, started) = match call {
            TxnCall::Init => (Op::InitTransactions, txn.init()),
            TxnCall::Begin => {
                let id = txn.transactional_id().to_string();
                let _ = reply.send(txn.begin().map_err(|e| txn_error(&id, e)));
                return;
            }
            TxnCall::SendOffsets(offsets, group) => {
                (Op::SendOffsets, txn.send_offsets(offsets, group))
            }
            TxnCall::Commit => (Op::Commit, txn.commit()),
            TxnCall::Abort => (Op::Abort, txn.abort()),
        };
        let id = txn.transactional_id().to_string();
        match started {
            Err(e) => {
                let _ = reply.send(Err(txn_error(&id, e)));
            }
            Ok(Pending::Done(r)) => {
                let _ = reply.send(r.map_err(|e| txn_error(&id, e)));
            }
            // A caller that timed out before is replaced by this one.
            Ok(Pending::Waiting) => self.txn_waiter = Some((op, reply)),
        }
        let now = self.now();
        self.drive_txn(now);
    }

    fn on_txn_answer(&mut self, answer: TxnResponse) {
        self.txn_request_in_flight = false;
        let now = self.now();
        let Some(txn) = self.txn.as_mut() else {
            return;
        };
        let fx = txn.on_response(now, answer);
        let id = txn.transactional_id().to_string();
        if let Some(identity) = fx.identity {
            tracing::info!(
                transactional_id = %id,
                producer_id = identity.producer_id,
                epoch = identity.epoch,
                "transactional producer identity"
            );
            if self
                .identity
                .is_some_and(|old| old.producer_id == identity.producer_id)
            {
                self.counters.epoch_bumps.fetch_add(1, Ordering::Relaxed);
            } else {
                self.counters.producer_ids.fetch_add(1, Ordering::Relaxed);
            }
            self.identity = Some(identity);
            self.counters.set_identity(identity);
            // The manager asks for a new identity only with no batch in flight.
            self.acc.reset_sequences();
        }
        if let Some((op, result)) = fx.completed {
            let unclaimed = match self.txn_waiter.take() {
                Some((waiting, reply)) if waiting == op => reply
                    .send(result.clone().map_err(|e| txn_error(&id, e)))
                    .err()
                    .map(|_| result),
                other => {
                    self.txn_waiter = other;
                    Some(result)
                }
            };
            if let Some(result) = unclaimed {
                txn.unclaimed(op, result);
            }
        }
        self.drive_txn(now);
    }

    /// Fails unsent batches of an aborting or failed transaction, and sends the manager's
    /// next request if one is due.
    fn drive_txn(&mut self, now: u64) {
        let Some(txn) = self.txn.as_mut() else {
            return;
        };
        if let Some(e) = txn.drop_unsent() {
            let id = txn.transactional_id();
            let (failed, numbered) = self.acc.abort_undrained(|| txn_error(id, e.clone()));
            if numbered {
                txn.on_sequence_gap();
            }
            for (reply, e) in failed {
                let _ = reply.send(Err(e));
            }
        }
        if self.txn_request_in_flight {
            return;
        }
        let Some(out) = txn.next_request(now, !self.acc.is_empty()) else {
            return;
        };
        let Some(commands) = self.commands.as_ref().and_then(mpsc::WeakSender::upgrade) else {
            // The producer is gone: nobody waits for the answer.
            return;
        };
        tracing::debug!(transactional_id = %txn.transactional_id(), request = ?out.request.kind(), broker = ?out.broker, "transactional request");
        self.txn_request_in_flight = true;
        let client = self.client.clone();
        tokio::spawn(async move {
            let answer = txn_exec::execute(&client, out).await;
            // The sender task may have stopped; nobody is left to tell then.
            let _ = commands.send(Command::TxnAnswer(answer)).await;
        });
    }
}

/// The accumulator asked for a new identity after a batch failure: in a transaction that is
/// the transaction manager's decision (abort with an epoch bump, or fenced).
fn txn_reset(txn: &mut TxnManager, reset: Option<IdentityReset>) {
    match reset {
        Some(IdentityReset::BumpEpoch) => txn.on_batch_failed(&KafkaError::new(
            txn::UNKNOWN_PRODUCER_ID,
            Some("the broker lost this producer's sequence".to_string()),
        )),
        Some(IdentityReset::NewProducerId) => txn.on_batch_failed(&KafkaError::new(
            txn::INVALID_PRODUCER_EPOCH,
            Some("the broker refused this producer's epoch".to_string()),
        )),
        None => {}
    }
}

/// A record's failure as the Kafka error the transaction manager classifies.
fn batch_error(e: &Error) -> KafkaError {
    match e {
        Error::Kafka { error, .. } | Error::Transaction { error, .. } => error.clone(),
        other => KafkaError::new(KafkaCode::UNKNOWN_SERVER_ERROR, Some(other.to_string())),
    }
}

/// A transaction manager's refusal or failure as the client's error.
fn txn_error(transactional_id: &str, e: TxnError) -> Error {
    match e {
        TxnError::IllegalState { .. } => {
            Error::InvalidArgument(format!("transactional.id '{transactional_id}': {e}"))
        }
        TxnError::Abortable(error) => Error::Transaction {
            transactional_id: transactional_id.to_string(),
            requires_abort: true,
            error,
        },
        TxnError::Fatal(error) => Error::Transaction {
            transactional_id: transactional_id.to_string(),
            requires_abort: false,
            error,
        },
    }
}

/// The drained batches grouped by their partitions' leaders, each with its batch id.
fn by_leader(
    metadata: &crate::metadata::ClusterMetadata,
    sends: Vec<accumulator::Outgoing>,
) -> BTreeMap<i32, Vec<(u64, BatchToSend)>> {
    let mut by_leader: BTreeMap<i32, Vec<(u64, BatchToSend)>> = BTreeMap::new();
    for o in sends {
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
    by_leader
}
