//! The replica manager: the partition logs this broker hosts, their roles (leader or follower,
//! leader epoch), the high watermark, idempotent-producer state, and the wake-ups parked fetches
//! wait on. Role changes come from metadata deltas.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use gregor_log::batch::BatchHeader;
use gregor_log::{CleanupPolicy, FlushPolicy, Log, LogConfig, LogError, TimestampType};
use gregor_meta::config::{BrokerConfigView, ConfigValue};
use gregor_meta::{LocalReplicaChanges, Uuid};
use kafka_protocol::ResponseError;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::producer_state::{Check, ProducerStates};
use crate::util::{blocking, now_ms};

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

    /// Appends a producer's batches as leader: idempotence check, write, fdatasync (shared with
    /// concurrent appends), then the high watermark moves past them. A retried batch answers
    /// with its original offsets.
    pub async fn append_as_leader(
        self: &Arc<Self>,
        records: bytes::Bytes,
    ) -> Result<ProduceOutcome, ResponseError> {
        let role = self.role();
        if !role.is_leader {
            return Err(ResponseError::NotLeaderOrFollower);
        }
        let headers = batch_headers(&records)?;
        let mut producers = self.producers.lock().await;
        // A request carries one producer's batches; judge by the first (Kafka checks each and
        // librdkafka / Java send one batch per partition per request).
        match headers.first().map(|h| producers.check(h)) {
            Some(Check::Duplicate(b)) => {
                drop(producers);
                return Ok(ProduceOutcome {
                    base_offset: b.first_offset,
                    log_append_time: -1,
                    log_start_offset: self.log.log_start_offset(),
                });
            }
            Some(Check::Reject(e)) => return Err(e),
            _ => {}
        }
        let log = self.log.clone();
        let epoch = role.leader_epoch;
        let written =
            blocking(move || log.append_as_leader_deferred(&records, epoch, now_ms())).await;
        let (info, durable) = written.map_err(|e| log_error(&e))?;
        for (i, h) in headers.iter().enumerate() {
            // The first batch starts at first_offset; later ones follow contiguously.
            let offset = if i == 0 {
                info.first_offset
            } else {
                info.first_offset
                    + headers[..i]
                        .iter()
                        .map(|x| x.last_offset_delta as i64 + 1)
                        .sum::<i64>()
            };
            producers.record(&BatchHeader {
                base_offset: offset,
                ..*h
            });
        }
        drop(producers);
        let log = self.log.clone();
        blocking(move || log.await_durable(durable))
            .await
            .map_err(|e| log_error(&e))?;
        self.advance_hw(info.last_offset + 1);
        Ok(ProduceOutcome {
            base_offset: info.first_offset,
            log_append_time: info.log_append_time.unwrap_or(-1),
            log_start_offset: info.log_start_offset,
        })
    }
}

/// Kafka's error for a log failure on the produce path.
pub fn log_error(e: &LogError) -> ResponseError {
    ResponseError::try_from_code(e.kafka_error_code()).unwrap_or(ResponseError::KafkaStorageError)
}

fn batch_headers(records: &[u8]) -> Result<Vec<BatchHeader>, ResponseError> {
    let mut out = Vec::new();
    let mut rest = records;
    while !rest.is_empty() {
        let h = BatchHeader::parse(rest).ok_or(ResponseError::CorruptMessage)?;
        if h.size() > rest.len() || h.magic != 2 {
            return Err(ResponseError::CorruptMessage);
        }
        out.push(h);
        rest = &rest[h.size()..];
    }
    if out.is_empty() {
        return Err(ResponseError::InvalidRecord);
    }
    Ok(out)
}

/// The partition logs hosted by this broker.
pub struct ReplicaManager {
    node_id: i32,
    data_dir: PathBuf,
    partitions: RwLock<HashMap<TopicPartitionKey, Arc<Partition>>>,
}

impl ReplicaManager {
    pub fn new(node_id: i32, data_dir: &Path) -> ReplicaManager {
        ReplicaManager {
            node_id,
            data_dir: data_dir.to_path_buf(),
            partitions: RwLock::new(HashMap::new()),
        }
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
        for (p, is_leader) in changes
            .leaders
            .iter()
            .map(|p| (p, true))
            .chain(changes.followers.iter().map(|p| (p, false)))
        {
            let key = (p.topic.clone(), p.id.partition);
            let role = Role {
                is_leader,
                leader_epoch: p.registration.leader_epoch,
            };
            let existing = self.get(&p.topic, p.id.partition);
            match existing {
                Some(part) => {
                    *lock(&part.role) = role;
                }
                None => {
                    match self.open_partition(&p.topic, p.id.partition, p.id.topic_id, role, view) {
                        Ok(part) => {
                            self.partitions
                                .write()
                                .unwrap_or_else(PoisonError::into_inner)
                                .insert(key, Arc::new(part));
                        }
                        Err(e) => {
                            warn!(topic = %p.topic, partition = p.id.partition, error = %e, "cannot open partition log");
                        }
                    }
                }
            }
        }
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
                    if let Err(e) = std::fs::remove_dir_all(&dir) {
                        warn!(dir = %dir.display(), error = %e, "cannot delete partition directory");
                    } else {
                        info!(topic = %s.topic, partition = s.id.partition, "deleted partition");
                    }
                }
            }
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
        let mut producers = ProducerStates::default();
        rebuild_producers(&log, &mut producers);
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
            hw,
        })
    }

    /// Flushes and checkpoints every log (clean shutdown).
    pub fn close_all(&self) {
        let parts: Vec<Arc<Partition>> = self
            .partitions
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .map(|(_, p)| p)
            .collect();
        for p in parts {
            match Arc::try_unwrap(p) {
                Ok(part) => match Arc::try_unwrap(part.log) {
                    Ok(log) => {
                        if let Err(e) = log.close() {
                            warn!(topic = %part.topic, partition = part.index, error = %e, "close failed");
                        }
                    }
                    Err(log) => {
                        let _ = log.checkpoint();
                    }
                },
                Err(p) => {
                    let _ = p.log.checkpoint();
                }
            }
        }
    }
}

/// Replays batch headers to rebuild idempotent-producer state after a restart.
fn rebuild_producers(log: &Log, producers: &mut ProducerStates) {
    let mut offset = log.log_start_offset();
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
            producers.record(&h);
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
