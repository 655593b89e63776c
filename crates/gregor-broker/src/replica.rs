//! The replica manager: the partition logs this broker hosts, their roles (leader or follower,
//! leader epoch), the high watermark, idempotent-producer state, and the wake-ups parked fetches
//! wait on. Role changes come from metadata deltas.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use gregor_log::batch::BatchHeader;
use gregor_log::{
    CleanupPolicy, DurableToken, FlushPolicy, Log, LogConfig, LogError, TimestampType,
};
use gregor_meta::config::{BrokerConfigView, ConfigValue};
use gregor_meta::{LocalReplicaChanges, Uuid};
use kafka_protocol::ResponseError;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::producer_state::{parse_snapshot, snapshot_bytes, Check, ProducerStates, SNAPSHOT_FILE};
use crate::util::{blocking, for_each_parallel, now_ms};

/// Identifies a partition by name.
pub type TopicPartitionKey = (String, i32);

/// Role and offsets of one hosted replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Role {
    pub is_leader: bool,
    pub leader_epoch: i32,
}

/// One hosted partition replica.
pub struct Partition {
    pub topic: String,
    pub index: i32,
    pub topic_id: Uuid,
    pub log: Arc<Log>,
    role: Mutex<Role>,
    /// Serialises the idempotence check with the write that follows it.
    producers: tokio::sync::Mutex<ProducerStates>,
    /// Log end offset of the last producer-state snapshot written (-1: none).
    snapshot_offset: std::sync::atomic::AtomicI64,
    /// Appends are written in the order they reached the partition.
    order: AppendOrder,
    /// The high watermark, for parked fetches to wait on.
    hw: watch::Sender<i64>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a produce to one partition produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProduceOutcome {
    pub base_offset: i64,
    /// The offset after the batch: the high watermark that commits it.
    pub end_offset: i64,
    pub log_append_time: i64,
    pub log_start_offset: i64,
}

impl Partition {
    pub fn role(&self) -> Role {
        *lock(&self.role)
    }

    pub fn high_watermark(&self) -> i64 {
        self.log.high_watermark()
    }

    /// A receiver that changes whenever the high watermark advances.
    pub fn watch_hw(&self) -> watch::Receiver<i64> {
        self.hw.subscribe()
    }

    /// Advances the high watermark to `offset` (never backwards) and wakes parked fetches.
    fn advance_hw(&self, offset: i64) {
        if offset > self.log.high_watermark() {
            let hw = self.log.set_high_watermark(offset);
            self.hw.send_replace(hw);
        }
    }

    /// Appends a producer's batch as leader on a task of its own: the idempotence check, the
    /// write and the producer-state update form one unit that neither the request's timeout
    /// nor a client that disconnects can interrupt (a half-done produce would write a batch
    /// without remembering it, and its retry would be written twice). The task then waits until
    /// the batch is durable and moves the high watermark past it; a retried batch is answered
    /// with its original offsets once the original is durable, never before.
    ///
    /// Appends to one partition are written in the order `spawn_append` was called (a ticket
    /// is taken here, synchronously): a producer's pipelined requests on one connection keep
    /// their order even though each runs on its own task.
    pub fn spawn_append(self: &Arc<Self>, records: bytes::Bytes) -> PendingAppend {
        let (written_tx, written) = tokio::sync::oneshot::channel();
        let ticket = self.order.take_ticket();
        let part = self.clone();
        let done = tokio::spawn(async move {
            let turn = part.order.wait_turn(ticket).await;
            let appended = part.append_unit(records).await;
            drop(turn);
            let _ = written_tx.send(());
            let (outcome, durable, end_offset) = appended?;
            let log = part.log.clone();
            blocking(move || log.await_durable(durable))
                .await
                .map_err(|e| log_error(&e))?;
            if let Some(end) = end_offset {
                part.advance_hw(end);
            }
            Ok(outcome)
        });
        PendingAppend { written, done }
    }

    /// Check, write and record under the producer-state lock. Returns the answer, when it may
    /// be given, and the offset after the written batch (`None` for a duplicate, whose
    /// original's own task moves the high watermark).
    async fn append_unit(
        &self,
        records: bytes::Bytes,
    ) -> Result<(ProduceOutcome, DurableToken, Option<i64>), ResponseError> {
        let role = self.role();
        if !role.is_leader {
            return Err(ResponseError::NotLeaderOrFollower);
        }
        let header = single_batch_header(&records)?;
        let mut producers = self.producers.lock().await;
        match producers.check(&header) {
            Check::Duplicate(b) => {
                let outcome = ProduceOutcome {
                    base_offset: b.first_offset,
                    end_offset: b.first_offset + i64::from(header.last_offset_delta) + 1,
                    log_append_time: -1,
                    log_start_offset: self.log.log_start_offset(),
                };
                return Ok((outcome, b.durable, None));
            }
            Check::Reject(e) => return Err(e),
            Check::Append => {}
        }
        let log = self.log.clone();
        let epoch = role.leader_epoch;
        let now = now_ms();
        let (info, durable) = blocking(move || log.append_as_leader_deferred(&records, epoch, now))
            .await
            .map_err(|e| log_error(&e))?;
        producers.record(
            &BatchHeader {
                base_offset: info.first_offset,
                ..header
            },
            durable,
            now,
        );
        drop(producers);
        let outcome = ProduceOutcome {
            base_offset: info.first_offset,
            end_offset: info.last_offset + 1,
            log_append_time: info.log_append_time.unwrap_or(-1),
            log_start_offset: info.log_start_offset,
        };
        Ok((outcome, durable, Some(info.last_offset + 1)))
    }

    /// Waits until the high watermark reaches `end_offset` (the batch before it is committed),
    /// answering NOT_LEADER_OR_FOLLOWER if this replica stops leading the partition first.
    pub async fn await_high_watermark(&self, end_offset: i64) -> Result<(), ResponseError> {
        let mut hw = self.hw.subscribe();
        loop {
            if !self.role().is_leader {
                return Err(ResponseError::NotLeaderOrFollower);
            }
            if *hw.borrow_and_update() >= end_offset || self.log.high_watermark() >= end_offset {
                return Ok(());
            }
            if hw.changed().await.is_err() {
                return Err(ResponseError::NotLeaderOrFollower);
            }
        }
    }

    /// Forgets idempotent producers that have not written for `expiration_ms`.
    pub async fn expire_producers(&self, now_ms: i64, expiration_ms: i64) -> usize {
        self.producers.lock().await.expire(now_ms, expiration_ms)
    }

    /// Writes a producer-state snapshot if the log has grown since the last one, so that a
    /// restart replays only the batches after it. Blocking file work: call it off the async
    /// workers. The state and the log end offset are read under the producer lock, which every
    /// append holds while it writes, so they match.
    pub fn snapshot_producers(&self) -> Result<(), LogError> {
        use std::sync::atomic::Ordering;
        let (bytes, offset) = {
            let producers = self.producers.blocking_lock();
            let offset = self.log.log_end_offset();
            // Nothing new since the last one, or nothing a restart would replay.
            if offset == self.snapshot_offset.load(Ordering::SeqCst)
                || offset <= self.log.log_start_offset()
            {
                return Ok(());
            }
            (snapshot_bytes(&producers, offset), offset)
        };
        gregor_log::Disk::real().write_atomic(&self.log.dir().join(SNAPSHOT_FILE), &bytes)?;
        self.snapshot_offset.store(offset, Ordering::SeqCst);
        Ok(())
    }
}

/// Arrival order of a partition's appends: tickets taken when a request reaches the partition,
/// served one at a time.
#[derive(Debug)]
struct AppendOrder {
    next_ticket: std::sync::atomic::AtomicU64,
    serving: watch::Sender<u64>,
}

/// The turn of one ticket: the next ticket is served when it is dropped (also on a panic).
struct Turn<'a>(&'a AppendOrder);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.serving.send_modify(|s| *s += 1);
    }
}

impl AppendOrder {
    fn new() -> AppendOrder {
        AppendOrder {
            next_ticket: std::sync::atomic::AtomicU64::new(0),
            serving: watch::channel(0).0,
        }
    }

    fn take_ticket(&self) -> u64 {
        self.next_ticket
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    }

    async fn wait_turn(&self, ticket: u64) -> Turn<'_> {
        let mut serving = self.serving.subscribe();
        // The sender lives as long as `self`, so the wait ends when the ticket's turn comes.
        let _ = serving.wait_for(|s| *s == ticket).await;
        Turn(self)
    }
}

/// A produce under way on its own task (see [`Partition::spawn_append`]).
pub struct PendingAppend {
    /// Fires once the batch is written and remembered (or refused).
    pub written: tokio::sync::oneshot::Receiver<()>,
    /// The answer, once the batch is durable.
    pub done: tokio::task::JoinHandle<Result<ProduceOutcome, ResponseError>>,
}

/// Kafka's error for a log failure on the produce path.
pub fn log_error(e: &LogError) -> ResponseError {
    ResponseError::try_from_code(e.kafka_error_code()).unwrap_or(ResponseError::KafkaStorageError)
}

/// The one record batch of a partition's produce data. Produce v3+ carries exactly one v2
/// batch per partition (Kafka answers anything else with INVALID_RECORD); its full validation
/// is the log's.
fn single_batch_header(records: &[u8]) -> Result<BatchHeader, ResponseError> {
    use gregor_log::batch::HEADER_LEN;
    // The magic byte sits at offset 16 in every message format.
    match records.get(16) {
        Some(2) => {}
        Some(_) => return Err(ResponseError::InvalidRecord),
        None => return Err(ResponseError::CorruptMessage),
    }
    let h = BatchHeader::parse(records).ok_or(ResponseError::CorruptMessage)?;
    if h.size() < HEADER_LEN || h.size() > records.len() {
        return Err(ResponseError::CorruptMessage);
    }
    if h.size() < records.len() {
        return Err(ResponseError::InvalidRecord);
    }
    Ok(h)
}

/// The partition logs hosted by this broker.
pub struct ReplicaManager {
    node_id: i32,
    data_dir: PathBuf,
    partitions: RwLock<HashMap<TopicPartitionKey, Arc<Partition>>>,
    /// Counts applied metadata changes to hosted replicas (roles, ISRs, replicas started or
    /// stopped): whoever follows leaderships (the group coordinator) waits on it.
    roles_changed: watch::Sender<u64>,
}

impl ReplicaManager {
    pub fn new(node_id: i32, data_dir: &Path) -> ReplicaManager {
        ReplicaManager {
            node_id,
            data_dir: data_dir.to_path_buf(),
            partitions: RwLock::new(HashMap::new()),
            roles_changed: watch::channel(0).0,
        }
    }

    /// A receiver that changes after every applied change to hosted replicas' roles.
    pub fn watch_roles(&self) -> watch::Receiver<u64> {
        self.roles_changed.subscribe()
    }

    pub fn get(&self, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        self.partitions
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(topic.to_string(), partition))
            .cloned()
    }

    pub fn all(&self) -> Vec<Arc<Partition>> {
        self.partitions
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    fn dir_for(&self, topic: &str, partition: i32) -> PathBuf {
        self.data_dir.join(format!("{topic}-{partition}"))
    }

    /// Applies role changes: open (or create) logs this broker now leads or follows, update
    /// roles, stop and delete replicas it no longer hosts. Called under the metadata lock
    /// (blocking file I/O).
    pub fn apply(&self, view: &BrokerConfigView<'_>, changes: &LocalReplicaChanges) {
        let mut to_open = Vec::new();
        for (p, is_leader) in changes
            .leaders
            .iter()
            .map(|p| (p, true))
            .chain(changes.followers.iter().map(|p| (p, false)))
        {
            let role = Role {
                is_leader,
                leader_epoch: p.registration.leader_epoch,
            };
            match self.get(&p.topic, p.id.partition) {
                Some(part) => *lock(&part.role) = role,
                None => to_open.push((p, role)),
            }
        }
        // Opening a log is file work (recovery, checkpoints): many are opened in parallel.
        let threads = view.i64("num.recovery.threads.per.data.dir").max(1) as usize;
        for_each_parallel(to_open, threads, |(p, role)| {
            match self.open_partition(&p.topic, p.id.partition, p.id.topic_id, role, view) {
                Ok(part) => {
                    self.partitions
                        .write()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert((p.topic.clone(), p.id.partition), Arc::new(part));
                }
                Err(e) => {
                    warn!(topic = %p.topic, partition = p.id.partition, error = %e, "cannot open partition log");
                }
            }
        });
        for s in &changes.stopped {
            let removed = self
                .partitions
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&(s.topic.clone(), s.id.partition));
            if let Some(part) = removed {
                // Wake parked fetches so they notice the partition is gone.
                part.hw.send_replace(-1);
                if s.delete {
                    let dir = part.log.dir().to_path_buf();
                    drop(part);
                    if let Err(e) = gregor_log::Disk::real().remove_dir_all(&dir) {
                        warn!(dir = %dir.display(), error = %e, "cannot delete partition directory");
                    } else {
                        info!(topic = %s.topic, partition = s.id.partition, "deleted partition");
                    }
                }
            }
        }
        if !(changes.leaders.is_empty()
            && changes.followers.is_empty()
            && changes.stopped.is_empty())
        {
            self.roles_changed.send_modify(|n| *n += 1);
        }
    }

    /// Re-reads topic configs into open logs (after a config change).
    pub fn reconfigure(&self, topic: &str, view: &BrokerConfigView<'_>) {
        let config = log_config(view, topic);
        for p in self.all().into_iter().filter(|p| p.topic == topic) {
            if let Err(e) = p.log.set_config(config.clone()) {
                warn!(topic, partition = p.index, error = %e, "cannot apply topic config");
            }
        }
    }

    /// Re-reads every open log's config after a broker-level change (this broker's dynamic
    /// configs or the cluster-wide default): topic configs without an override of their own
    /// take their default from the broker's (`log.retention.ms` for `retention.ms`, ...).
    pub fn reconfigure_all(&self, view: &BrokerConfigView<'_>) {
        let mut by_topic: HashMap<String, LogConfig> = HashMap::new();
        for p in self.all() {
            let config = by_topic
                .entry(p.topic.clone())
                .or_insert_with(|| log_config(view, &p.topic))
                .clone();
            if let Err(e) = p.log.set_config(config) {
                warn!(topic = %p.topic, partition = p.index, error = %e, "cannot apply broker config");
            }
        }
    }

    fn open_partition(
        &self,
        topic: &str,
        index: i32,
        topic_id: Uuid,
        role: Role,
        view: &BrokerConfigView<'_>,
    ) -> Result<Partition, LogError> {
        let dir = self.dir_for(topic, index);
        let log = Log::open(&dir, log_config(view, topic), now_ms())?;
        // This node is the only replica it knows of here: what is durable is committed.
        let leo = log.log_end_offset();
        log.set_high_watermark(leo);
        let (producers, snapshot_offset) = load_producers(&log);
        let (hw, _) = watch::channel(log.high_watermark());
        info!(
            topic,
            partition = index,
            node = self.node_id,
            leader = role.is_leader,
            epoch = role.leader_epoch,
            log_end_offset = leo,
            "hosting partition"
        );
        Ok(Partition {
            topic: topic.to_string(),
            index,
            topic_id,
            log: Arc::new(log),
            role: Mutex::new(role),
            producers: tokio::sync::Mutex::new(producers),
            snapshot_offset: std::sync::atomic::AtomicI64::new(snapshot_offset),
            order: AppendOrder::new(),
            hw,
        })
    }

    /// Closes every log cleanly (flushed, checkpoints and clean-shutdown markers written), up to
    /// `threads` at a time.
    pub fn close_all(&self, threads: usize) {
        let parts: Vec<Arc<Partition>> = self
            .partitions
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .map(|(_, p)| p)
            .collect();
        for_each_parallel(parts, threads, |p| {
            let (topic, index) = (p.topic.clone(), p.index);
            if let Err(e) = p.snapshot_producers() {
                warn!(topic, partition = index, error = %e, "cannot write the producer-state snapshot");
            }
            let result = match Arc::try_unwrap(p) {
                Ok(part) => match Arc::try_unwrap(part.log) {
                    Ok(log) => log.close(),
                    // Still shared (a request holds it): make it durable, leave no marker.
                    Err(log) => log.flush().and_then(|()| log.checkpoint()),
                },
                Err(p) => p.log.flush().and_then(|()| p.log.checkpoint()),
            };
            if let Err(e) = result {
                warn!(topic, partition = index, error = %e, "close failed");
            }
        });
    }
}

/// Idempotent-producer state at start-up: the partition's snapshot if it is intact and no newer
/// than the recovered log, plus the batches after it; otherwise every batch of the log. Returns
/// the state and the offset of the snapshot it came from (-1: none).
fn load_producers(log: &Log) -> (ProducerStates, i64) {
    let path = log.dir().join(SNAPSHOT_FILE);
    let end = log.log_end_offset();
    let snapshot = match std::fs::read(&path) {
        Ok(bytes) => {
            let parsed = parse_snapshot(&bytes);
            match parsed {
                Some((offset, states)) if offset <= end => Some((offset, states)),
                _ => {
                    // Damaged, or newer than what survived a crash: it describes batches the log
                    // no longer has. Remove it so that it can never be taken for current later.
                    warn!(dir = %log.dir().display(), "ignoring a producer-state snapshot the log does not match");
                    let removed = std::fs::remove_file(&path)
                        .map_err(|source| LogError::Io {
                            path: path.clone(),
                            source,
                        })
                        .and_then(|()| gregor_log::Disk::real().sync_dir(log.dir()));
                    if let Err(e) = removed {
                        warn!(path = %path.display(), error = %e, "cannot remove a stale producer-state snapshot");
                    }
                    None
                }
            }
        }
        Err(_) => None,
    };
    let (mut producers, from, snapshot_offset) = match snapshot {
        Some((offset, states)) => (states, offset.max(log.log_start_offset()), offset),
        None => (ProducerStates::default(), log.log_start_offset(), -1),
    };
    replay_producers(log, from, &mut producers);
    (producers, snapshot_offset)
}

/// Replays the batch headers from `offset` to the log end into `producers`.
fn replay_producers(log: &Log, mut offset: i64, producers: &mut ProducerStates) {
    let end = log.log_end_offset();
    while offset < end {
        let Ok(read) = log.read(offset, 1 << 20, None) else {
            return;
        };
        let Some(next) = read.next_offset else { return };
        let mut rest: &[u8] = &read.records;
        while let Some(h) = BatchHeader::parse(rest) {
            if h.size() > rest.len() {
                break;
            }
            producers.record(&h, DurableToken::DURABLE, h.max_timestamp);
            rest = &rest[h.size()..];
        }
        if next <= offset {
            return;
        }
        offset = next;
    }
}

/// The log configuration of a topic: its dynamic configs over the broker defaults.
pub fn log_config(view: &BrokerConfigView<'_>, topic: &str) -> LogConfig {
    let configs = view.topic_configs(topic);
    let long = |k: &str| configs.get(k).and_then(ConfigValue::as_i64);
    let mut c = LogConfig::default();
    if let Some(v) = long("segment.bytes") {
        c.segment_bytes = v.max(1) as u64;
    }
    if let Some(v) = long("segment.ms") {
        c.segment_ms = v;
    }
    if let Some(v) = long("index.interval.bytes") {
        c.index_interval_bytes = v.max(0) as u64;
    }
    if let Some(v) = long("max.message.bytes") {
        c.max_message_bytes = v.max(0) as usize;
    }
    if let Some(v) = long("retention.ms") {
        c.retention_ms = (v >= 0).then_some(v);
    }
    if let Some(v) = long("retention.bytes") {
        c.retention_bytes = (v >= 0).then_some(v as u64);
    }
    if let Some(v) = long("delete.retention.ms") {
        c.delete_retention_ms = v;
    }
    if let Some(v) = long("min.compaction.lag.ms") {
        c.min_compaction_lag_ms = v.max(0);
    }
    if let Some(v) = long("max.compaction.lag.ms") {
        c.max_compaction_lag_ms = v.max(1);
    }
    if let Some(ConfigValue::Double(r)) = configs.get("min.cleanable.dirty.ratio") {
        c.min_cleanable_dirty_ratio = r.clamp(0.0, 1.0);
    }
    if let Some(ConfigValue::String(t)) = configs.get("message.timestamp.type") {
        c.timestamp_type = if t == "LogAppendTime" {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        };
    }
    // KIP-937: before/after.max.ms left at their default fall back to the older
    // difference.max.ms, as Kafka does.
    let difference = long("message.timestamp.difference.max.ms").unwrap_or(i64::MAX);
    let bound = |k: &str| match long(k) {
        Some(v) if v != i64::MAX => v.max(0),
        _ => difference.max(0),
    };
    c.timestamp_before_max_ms = bound("message.timestamp.before.max.ms");
    c.timestamp_after_max_ms = bound("message.timestamp.after.max.ms");
    if let Some(ConfigValue::String(t)) = configs.get("compression.type") {
        c.compression = gregor_log::CompressionType::parse(t).unwrap_or_default();
    }
    if let Some(ConfigValue::List(policies)) = configs.get("cleanup.policy") {
        c.cleanup_policy = CleanupPolicy {
            delete: policies.iter().any(|p| p == "delete"),
            compact: policies.iter().any(|p| p == "compact"),
        };
    }
    let messages = long("flush.messages").unwrap_or(1);
    let ms = long("flush.ms").unwrap_or(i64::MAX);
    c.flush = if messages <= 1 && ms == i64::MAX {
        FlushPolicy::EveryAppend
    } else {
        FlushPolicy::Interval {
            messages: (messages != i64::MAX).then_some(messages as u64),
            ms: (ms != i64::MAX).then_some(ms),
        }
    };
    c
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use gregor_log::batch::Codec;
    use gregor_log::records::{encode_batch, BatchSpec, Record};
    use gregor_log::FaultInjector;

    use super::*;

    fn partition_on_slow_disk(dir: &Path, sync_delay: Duration) -> Arc<Partition> {
        let faults = FaultInjector::new();
        faults.set_sync_delay(sync_delay);
        let log =
            Log::open_with_faults(dir, LogConfig::default(), now_ms(), faults).expect("open log");
        let (hw, _) = watch::channel(0);
        Arc::new(Partition {
            topic: "t".into(),
            index: 0,
            topic_id: Uuid::nil(),
            log: Arc::new(log),
            role: Mutex::new(Role {
                is_leader: true,
                leader_epoch: 0,
            }),
            producers: tokio::sync::Mutex::new(ProducerStates::default()),
            snapshot_offset: std::sync::atomic::AtomicI64::new(-1),
            order: AppendOrder::new(),
            hw,
        })
    }

    /// One record with `value`, in a batch with the header fields of `spec`.
    fn batch_of(spec: BatchSpec, value: &str) -> bytes::Bytes {
        let record = Record {
            offset: 0,
            timestamp: now_ms(),
            key: None,
            value: Some(bytes::Bytes::copy_from_slice(value.as_bytes())),
            headers: Vec::new(),
        };
        bytes::Bytes::from(encode_batch(&spec, &[record]).expect("encode"))
    }

    fn idempotent_batch(seq: i32, value: &str) -> bytes::Bytes {
        let spec = BatchSpec {
            codec: Codec::None,
            producer_id: 42,
            producer_epoch: 0,
            base_sequence: seq,
            ..BatchSpec::default()
        };
        batch_of(spec, value)
    }

    /// A client that disconnects while its batch is being fsynced, then retries: the batch is
    /// stored once, and the retry is answered only once the original is durable.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn retry_during_the_originals_fsync_waits_for_it_and_is_not_written_twice() {
        let dir = tempfile::tempdir().expect("temp dir");
        let part = partition_on_slow_disk(dir.path(), Duration::from_millis(400));
        let batch = idempotent_batch(0, "once");
        let original = part.spawn_append(batch.clone());
        original.written.await.expect("written");
        // The connection goes away: its request future, holding `done`, is dropped.
        drop(original.done);
        assert_eq!(part.log.stats().syncs, 0, "the fsync is still under way");
        let retry = part.spawn_append(batch);
        let outcome = retry.done.await.expect("task").expect("duplicate answered");
        assert_eq!(outcome.base_offset, 0);
        assert!(
            part.log.stats().syncs >= 1,
            "the retry was answered before the original was durable"
        );
        assert_eq!(part.log.log_end_offset(), 1, "written once");
        // The dropped request's task still moved the high watermark.
        let mut hw = part.watch_hw();
        tokio::time::timeout(Duration::from_secs(10), hw.wait_for(|h| *h == 1))
            .await
            .expect("high watermark reaches 1")
            .expect("watch open");
        // The producer continues with the next sequence number.
        let next = part.spawn_append(idempotent_batch(1, "next"));
        assert_eq!(
            next.done
                .await
                .expect("task")
                .expect("appended")
                .base_offset,
            1
        );
    }

    /// Cancelling at any point after the append started (a request timeout, a disconnect)
    /// never leaves the batch written but unremembered.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancelled_wait_never_half_does_the_append() {
        let dir = tempfile::tempdir().expect("temp dir");
        let part = partition_on_slow_disk(dir.path(), Duration::from_millis(50));
        for seq in 0..5 {
            let batch = idempotent_batch(seq, "v");
            // The caller gives up almost at once, as with request.timeout.ms = 1.
            let first = part.spawn_append(batch.clone());
            let _ = tokio::time::timeout(Duration::from_millis(1), first.done).await;
            // Its retries are duplicates of the one stored copy.
            let again = part.spawn_append(batch);
            let outcome = again.done.await.expect("task").expect("answered");
            assert_eq!(outcome.base_offset, i64::from(seq));
        }
        assert_eq!(part.log.log_end_offset(), 5);
    }

    fn reopen(part: Arc<Partition>) -> Log {
        let dir = part.log.dir().to_path_buf();
        drop(part);
        Log::open(&dir, LogConfig::default(), now_ms()).expect("reopen")
    }

    fn header_of(batch: &[u8]) -> BatchHeader {
        BatchHeader::parse(batch).expect("header")
    }

    /// A restart takes the producer state from the snapshot and replays only the batches
    /// written after it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn restart_uses_the_producer_snapshot_and_replays_the_tail() {
        let dir = tempfile::tempdir().expect("temp dir");
        let part = partition_on_slow_disk(dir.path(), Duration::ZERO);
        for seq in 0..3 {
            let done = part.spawn_append(idempotent_batch(seq, "a")).done;
            done.await.expect("task").expect("appended");
        }
        // A producer that never wrote to the log, planted in the state before the snapshot:
        // if it is known after the restart, the snapshot was used.
        let planted = {
            let mut b = idempotent_batch(0, "planted").to_vec();
            b[43..51].copy_from_slice(&777i64.to_be_bytes());
            header_of(&b)
        };
        part.producers
            .lock()
            .await
            .record(&planted, DurableToken::DURABLE, now_ms());
        let p2 = part.clone();
        tokio::task::spawn_blocking(move || p2.snapshot_producers())
            .await
            .expect("task")
            .expect("snapshot");
        let after = part.spawn_append(idempotent_batch(3, "after")).done;
        after.await.expect("task").expect("appended");
        let log = reopen(part);
        let (states, snapshot_offset) = load_producers(&log);
        assert_eq!(snapshot_offset, 3);
        assert!(matches!(states.check(&planted), Check::Duplicate(_)));
        let retry_before = header_of(&idempotent_batch(2, "a"));
        let retry_after = header_of(&idempotent_batch(3, "after"));
        assert!(matches!(states.check(&retry_before), Check::Duplicate(b) if b.first_offset == 2));
        assert!(matches!(states.check(&retry_after), Check::Duplicate(b) if b.first_offset == 3));
        assert_eq!(
            states.check(&header_of(&idempotent_batch(4, "next"))),
            Check::Append
        );
    }

    /// A snapshot newer than the recovered log (its tail was lost) or damaged is ignored and
    /// removed; the state is rebuilt from the log.
    #[test]
    fn a_snapshot_the_log_does_not_match_is_removed_and_the_log_replayed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = Log::open(dir.path(), LogConfig::default(), now_ms()).expect("open");
        let batch = idempotent_batch(0, "a");
        log.append_as_leader(&batch, 0, now_ms()).expect("append");
        let mut fake = ProducerStates::default();
        fake.record(
            &header_of(&idempotent_batch(9, "x")),
            DurableToken::DURABLE,
            0,
        );
        let path = dir.path().join(SNAPSHOT_FILE);
        for bytes in [snapshot_bytes(&fake, 5), b"garbage".to_vec()] {
            std::fs::write(&path, bytes).expect("write");
            let (states, snapshot_offset) = load_producers(&log);
            assert_eq!(snapshot_offset, -1);
            assert!(!path.exists(), "the mismatched snapshot must be removed");
            assert!(matches!(
                states.check(&header_of(&batch)),
                Check::Duplicate(b) if b.first_offset == 0
            ));
        }
    }

    fn plain_batch(value: &str) -> bytes::Bytes {
        batch_of(BatchSpec::default(), value)
    }

    /// Pipelined produce requests run on tasks of their own, yet a partition writes them in the
    /// order they reached it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn appends_are_written_in_the_order_they_reached_the_partition() {
        let dir = tempfile::tempdir().expect("temp dir");
        let part = partition_on_slow_disk(dir.path(), Duration::ZERO);
        let pending: Vec<_> = (0..200)
            .map(|i| part.spawn_append(plain_batch(&i.to_string())))
            .collect();
        for (i, p) in pending.into_iter().enumerate() {
            let outcome = p.done.await.expect("task").expect("appended");
            assert_eq!(outcome.base_offset, i as i64, "append {i} was reordered");
        }
    }

    #[test]
    fn produce_data_must_be_exactly_one_v2_batch() {
        let one = idempotent_batch(0, "x");
        assert!(single_batch_header(&one).is_ok());
        let mut two = one.to_vec();
        two.extend_from_slice(&one);
        assert_eq!(single_batch_header(&two), Err(ResponseError::InvalidRecord));
        let mut magic1 = one.to_vec();
        magic1[16] = 1;
        assert_eq!(
            single_batch_header(&magic1),
            Err(ResponseError::InvalidRecord)
        );
        assert_eq!(
            single_batch_header(&one[..30]),
            Err(ResponseError::CorruptMessage)
        );
        assert_eq!(
            single_batch_header(&one[..10]),
            Err(ResponseError::CorruptMessage)
        );
    }
}
