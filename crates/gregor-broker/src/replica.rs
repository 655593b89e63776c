//! The replica manager: the partition replicas this broker hosts (`partition.rs`), opened,
//! made leader or follower, and stopped as committed metadata says; the replica fetchers of the
//! partitions it follows; and the queue of ISR changes its leaders propose.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use gregor_log::{CleanupPolicy, FlushPolicy, Log, LogConfig, LogError, TimestampType};
use gregor_meta::config::{BrokerConfigView, ConfigValue};
use gregor_meta::{
    LocalPartition, LocalReplicaChanges, MetadataImage, PartitionRegistration, TopicIdPartition,
    NO_LEADER,
};
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

use crate::fetcher::FetcherManager;
use crate::isr::{IsrProposal, PartitionState};
use crate::metrics::events::IsrChangeCounters;
pub use crate::partition::{log_error, Partition, Role};
use crate::partition_dir::METADATA_LOG_DIR;
use crate::partition_dir::{self, Stamp};
use crate::quota::Throttles;
use crate::runtime::{for_each_parallel, now_ms};

/// The hosted partitions by topic name, then index, so that a lookup by `&str` allocates
/// nothing and hashes the name once: every Fetch and Produce looks up each partition it names
/// (a full Fetch of 256 partitions, as librdkafka sends every time, made 256 of them).
#[derive(Default)]
struct Hosted(HashMap<String, HashMap<i32, Arc<Partition>>>);

impl Hosted {
    fn get(&self, topic: &str, partition: i32) -> Option<&Arc<Partition>> {
        self.0.get(topic)?.get(&partition)
    }

    fn insert(&mut self, topic: &str, partition: i32, part: Arc<Partition>) {
        self.0
            .entry(topic.to_string())
            .or_default()
            .insert(partition, part);
    }

    fn remove(&mut self, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        let parts = self.0.get_mut(topic)?;
        let removed = parts.remove(&partition);
        if parts.is_empty() {
            self.0.remove(topic);
        }
        removed
    }

    fn values(&self) -> impl Iterator<Item = &Arc<Partition>> {
        self.0.values().flat_map(HashMap::values)
    }

    fn drain(&mut self) -> impl Iterator<Item = Arc<Partition>> + '_ {
        self.0.drain().flat_map(|(_, parts)| parts.into_values())
    }
}

/// The partition logs hosted by this broker.
pub struct ReplicaManager {
    node_id: i32,
    data_dir: PathBuf,
    /// What the partition directories are written through.
    disk: gregor_log::Disk,
    partitions: RwLock<Hosted>,
    /// Counts applied metadata changes to hosted replicas (roles, ISRs, replicas started or
    /// stopped): whoever follows leaderships (the group coordinator) waits on it.
    roles_changed: watch::Sender<u64>,
    fetchers: FetcherManager,
    throttles: Arc<Throttles>,
    isr_proposals: mpsc::UnboundedSender<(Arc<Partition>, IsrProposal)>,
    isr_proposal_queue: Mutex<Option<IsrProposalQueue>>,
    /// Committed ISR changes of the partitions this node leads, counted as they are applied.
    isr_changes: IsrChangeCounters,
}

/// ISR changes leaders propose, in the order they were made.
pub type IsrProposalQueue = mpsc::UnboundedReceiver<(Arc<Partition>, IsrProposal)>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A partition's committed state as the replication code uses it.
fn partition_state(reg: &PartitionRegistration) -> PartitionState {
    PartitionState {
        leader_epoch: reg.leader_epoch,
        partition_epoch: reg.partition_epoch,
        replicas: reg.replicas.clone(),
        isr: reg.isr.clone(),
    }
}

impl ReplicaManager {
    pub fn new(
        node_id: i32,
        data_dir: &Path,
        disk: gregor_log::Disk,
        isr_changes: IsrChangeCounters,
    ) -> ReplicaManager {
        let (isr_proposals, queue) = mpsc::unbounded_channel();
        let throttles = Arc::new(Throttles::new(node_id));
        ReplicaManager {
            node_id,
            data_dir: data_dir.to_path_buf(),
            disk,
            partitions: RwLock::new(Hosted::default()),
            roles_changed: watch::channel(0).0,
            fetchers: FetcherManager::new(node_id, throttles.clone()),
            throttles,
            isr_proposals,
            isr_proposal_queue: Mutex::new(Some(queue)),
            isr_changes,
        }
    }

    /// A receiver that changes after every applied change to hosted replicas' roles.
    pub fn watch_roles(&self) -> watch::Receiver<u64> {
        self.roles_changed.subscribe()
    }

    /// The hosted replicas of `partitions` of one topic, in their order: one lock and one
    /// look-up of the topic for all of them (a Fetch names up to thousands).
    pub fn get_many(
        &self,
        topic: &str,
        partitions: impl Iterator<Item = i32>,
    ) -> Vec<Option<Arc<Partition>>> {
        let hosted = self
            .partitions
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let parts = hosted.0.get(topic);
        partitions
            .map(|p| parts.and_then(|ps| ps.get(&p)).cloned())
            .collect()
    }

    pub fn get(&self, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        self.partitions
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(topic, partition)
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

    /// The directory this broker keeps its partition logs in.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    fn dir_for(&self, topic: &str, partition: i32) -> PathBuf {
        self.data_dir.join(format!("{topic}-{partition}"))
    }

    /// The replica fetchers (follower side of replication).
    pub fn fetchers(&self) -> &FetcherManager {
        &self.fetchers
    }

    /// The replication throttles (leader and follower quotas).
    pub fn throttles(&self) -> &Throttles {
        &self.throttles
    }

    /// Re-reads the replication throttles: this broker's two rates and the throttled-replica
    /// lists of the topics it hosts.
    pub fn update_throttles(&self, view: &BrokerConfigView<'_>) {
        let mut topics: Vec<String> = self.all().iter().map(|p| p.topic.clone()).collect();
        topics.sort_unstable();
        topics.dedup();
        let list = |topic: &str, key: &str| -> Vec<String> {
            view.topic_value(topic, key)
                .and_then(|r| r.value.as_list().map(<[String]>::to_vec))
                .unwrap_or_default()
        };
        let lists = topics
            .into_iter()
            .map(|t| {
                let leader = list(&t, "leader.replication.throttled.replicas");
                let follower = list(&t, "follower.replication.throttled.replicas");
                (t, leader, follower)
            })
            .collect();
        self.throttles.update(
            view.i64("leader.replication.throttled.rate"),
            view.i64("follower.replication.throttled.rate"),
            lists,
            self.throttles.now_ms(),
        );
    }

    /// Queues an ISR change for the controller (see `alter_partition.rs`).
    pub fn propose_isr(&self, part: &Arc<Partition>, proposal: IsrProposal) {
        debug!(topic = %part.topic, partition = part.index, isr = ?proposal.isr, partition_epoch = proposal.partition_epoch, "proposing an ISR change");
        if self
            .isr_proposals
            .send((part.clone(), proposal.clone()))
            .is_err()
        {
            // Nobody sends proposals (no broker running): let a later one be made.
            part.isr_proposal_done(proposal.partition_epoch);
        }
    }

    /// The queue of ISR proposals, for the task that sends them (taken once).
    pub fn take_isr_proposals(&self) -> Option<IsrProposalQueue> {
        lock(&self.isr_proposal_queue).take()
    }

    /// Applies committed metadata: opens (or creates) the logs this broker now leads or
    /// follows, makes each replica leader or follower in its leader epoch (starting or stopping
    /// its fetcher), hands ISR changes to leaders, and stops and deletes replicas it no longer
    /// hosts. Called under the metadata lock (blocking file I/O).
    pub fn apply(
        &self,
        view: &BrokerConfigView<'_>,
        image: &MetadataImage,
        changes: &LocalReplicaChanges,
    ) {
        self.fetchers.set_endpoints(
            image
                .brokers()
                .values()
                .filter_map(|b| {
                    b.endpoints
                        .first()
                        .map(|ep| (b.id, format!("{}:{}", ep.host, ep.port)))
                })
                .collect(),
        );
        // Stopped first: one delta can delete a topic and create another of the same name
        // (a node catching up), and the old replica must be gone before the new one opens.
        for s in &changes.stopped {
            self.stop_replica(&s.topic, s.id, s.delete);
        }
        let mut to_open = Vec::new();
        for p in changes.leaders.iter().chain(&changes.followers) {
            match self.get(&p.topic, p.id.partition) {
                None => to_open.push(p),
                Some(part) if part.topic_id != p.id.topic_id => {
                    // Still hosting a deleted topic of the same name.
                    let old = TopicIdPartition {
                        topic_id: part.topic_id,
                        partition: p.id.partition,
                    };
                    drop(part);
                    self.stop_replica(&p.topic, old, true);
                    to_open.push(p);
                }
                Some(_) => {}
            }
        }
        // Opening a log is file work (recovery, checkpoints): many are opened in parallel.
        let threads = view.i64("num.recovery.threads.per.data.dir").max(1) as usize;
        let opened = Mutex::new(std::collections::HashSet::new());
        for_each_parallel(to_open, threads, |p| match self.open_partition(p, view) {
            Ok(part) => {
                self.partitions
                    .write()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(&p.topic, p.id.partition, Arc::new(part));
                lock(&opened).insert((p.topic.clone(), p.id.partition));
            }
            Err(e) => {
                warn!(topic = %p.topic, partition = p.id.partition, error = %e, "cannot open partition log");
            }
        });
        let opened = opened.into_inner().unwrap_or_else(PoisonError::into_inner);
        let mut summary = RoleSummary {
            opened: opened.len(),
            stopped: changes.stopped.len(),
            ..RoleSummary::default()
        };
        for p in changes.leaders.iter().chain(&changes.followers) {
            let key = (p.topic.clone(), p.id.partition);
            let Some(part) = self.get(&p.topic, p.id.partition) else {
                continue;
            };
            let reg = &p.registration;
            let applied = part.apply_state(reg.leader, partition_state(reg));
            summary.count(&applied);
            if let Some(change) = applied.isr_change {
                self.isr_changes.count(change);
            }
            if reg.leader == self.node_id || reg.leader == NO_LEADER {
                self.fetchers.stop(&key);
            } else if applied.became_follower || opened.contains(&key) {
                self.fetchers.follow(part, reg.leader, reg.leader_epoch);
            }
        }
        if !(changes.leaders.is_empty()
            && changes.followers.is_empty()
            && changes.stopped.is_empty())
        {
            self.roles_changed.send_modify(|n| *n += 1);
        }
        summary.log(self.node_id);
    }

    /// Stops hosting the replica of topic id `id` (a replica of another topic of the same name
    /// is left alone), deleting its log when `delete`.
    fn stop_replica(&self, topic: &str, id: TopicIdPartition, delete: bool) {
        let key = (topic.to_string(), id.partition);
        let removed = {
            let mut partitions = self
                .partitions
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            match partitions.get(topic, id.partition) {
                Some(part) if part.topic_id == id.topic_id => {
                    partitions.remove(topic, id.partition)
                }
                _ => None,
            }
        };
        let Some(part) = removed else {
            return;
        };
        self.fetchers.stop(&key);
        // Wake parked fetches and produces so they notice the partition is gone.
        part.stopped();
        if delete {
            // Closed before the directory goes: a fetch, produce or checkpoint still holding the
            // partition finishes its write first (it holds the log's locks), and later ones get
            // LogError::Closed, not an I/O error about a checkpoint's `.tmp` in a directory
            // that is gone.
            part.log.close_for_deletion();
            let dir = part.log.dir().to_path_buf();
            drop(part);
            if let Err(e) = self.disk.remove_dir_all(&dir) {
                warn!(dir = %dir.display(), error = %e, "cannot delete partition directory");
            } else {
                debug!(topic, partition = id.partition, "deleted partition");
            }
        }
    }

    /// Sets aside for deletion every partition directory `image` does not assign to this
    /// broker (replicas reassigned away or deleted while the node was down); returns them.
    /// Call under the metadata lock, with an image that has caught up with everything this
    /// node acted on before it stopped (its own registration applied): a later assignment then
    /// cannot race with the rename, and it can never be a directory that is still wanted. The
    /// renamed directories are removed by [`ReplicaManager::purge_deleted`], outside the lock.
    pub fn set_aside_stray_logs(&self, image: &MetadataImage) -> Vec<PathBuf> {
        if planted!(StrayLogsKept) {
            return Vec::new();
        }
        let hosted = |topic: &str, partition: i32| {
            image.topic(topic).is_some_and(|t| {
                t.partitions
                    .get(&partition)
                    .is_some_and(|p| p.replicas.contains(&self.node_id))
            })
        };
        let strays = match partition_dir::stray_dirs(&self.data_dir, &[METADATA_LOG_DIR], hosted) {
            Ok(s) => s,
            Err(e) => {
                warn!(dir = %self.data_dir.display(), error = %e, "cannot scan the data directory for stray partitions");
                return Vec::new();
            }
        };
        let disk = &self.disk;
        strays
            .into_iter()
            .filter(|dir| match disk.set_aside_for_deletion(dir) {
                Ok(_) => {
                    info!(dir = %dir.display(), "deleting stray partition directory: this broker no longer hosts it");
                    true
                }
                Err(e) => {
                    warn!(dir = %dir.display(), error = %e, "cannot delete stray partition directory");
                    false
                }
            })
            .collect()
    }

    /// Removes the directories set aside for deletion in the data directory.
    pub fn purge_deleted(&self) {
        if let Err(e) = self.disk.purge_deleted_dirs(&self.data_dir) {
            warn!(dir = %self.data_dir.display(), error = %e, "cannot remove deleted partition directories");
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
        p: &LocalPartition,
        view: &BrokerConfigView<'_>,
    ) -> Result<Partition, LogError> {
        let (topic, index) = (p.topic.as_str(), p.id.partition);
        let reg = &p.registration;
        let dir = self.dir_for(topic, index);
        let disk = &self.disk;
        let stamp = partition_dir::read_stamp(&dir, p.id.topic_id);
        match &stamp {
            Stamp::OtherTopic(found) => {
                // A topic of this name was deleted (and this one created) while this node was
                // away: its records are not this topic's.
                warn!(topic, partition = index, found_topic_id = %found, "partition directory belongs to a deleted topic of the same name; deleting it");
                disk.remove_dir_all(&dir)?;
            }
            Stamp::Unreadable(why) => {
                warn!(topic, partition = index, reason = %why, "unreadable partition.metadata; keeping the log and stamping it again");
            }
            Stamp::Missing | Stamp::Matches => {}
        }
        let log = Log::open_on(&dir, log_config(view, topic), now_ms(), disk.clone())?;
        if stamp != Stamp::Matches {
            partition_dir::write_stamp(disk, &dir, p.id.topic_id)?;
        }
        let leo = log.log_end_offset();
        if reg.replicas.len() <= 1 {
            // The only replica: what is durable is committed.
            log.set_high_watermark(leo);
        }
        let role = Role {
            is_leader: reg.leader == self.node_id,
            leader_epoch: reg.leader_epoch,
        };
        debug!(
            topic,
            partition = index,
            node = self.node_id,
            leader = role.is_leader,
            epoch = role.leader_epoch,
            log_end_offset = leo,
            high_watermark = log.high_watermark(),
            "hosting partition"
        );
        // Opened as a follower: `apply_state` then makes it leader where it leads.
        let follower = Role {
            is_leader: false,
            leader_epoch: -1,
        };
        Ok(Partition::new(
            topic,
            index,
            p.id.topic_id,
            self.node_id,
            log,
            &partition_state(reg),
            follower,
        ))
    }

    /// Closes every log cleanly (flushed, checkpoints and clean-shutdown markers written), up to
    /// `threads` at a time. Other holders of a partition (fetch sessions, parked fetches, the
    /// group coordinator, a stopping replica fetcher, a request in flight) may outlive this:
    /// the log is closed through the shared handle and refuses their writes from then on.
    /// The markers' names are made durable together, by one sync of the data directory's file
    /// system, rather than two syncs per log.
    pub fn close_all(&self, threads: usize) {
        let parts: Vec<Arc<Partition>> = self
            .partitions
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .collect();
        let logs = parts.len();
        for_each_parallel(parts, threads, |p| {
            let (topic, index) = (p.topic.as_str(), p.index);
            if let Err(e) = p.log.close_leaving_marker_unsynced() {
                warn!(topic, partition = index, error = %e, "close failed");
            }
            // After the close: no append can follow, so the snapshot covers the whole log.
            if let Err(e) = p.snapshot_producers() {
                warn!(topic, partition = index, error = %e, "cannot write the producer-state snapshot");
            }
        });
        // Losing a marker costs a recovery scan at the next start, never data: each is written
        // after what it vouches for is durable.
        if let Err(e) = self.disk.sync_fs(&self.data_dir) {
            warn!(error = %e, "cannot sync the clean-shutdown markers; the next start may recover logs");
        }
        info!(logs, "partition logs closed");
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
    if let Some(v) = long("file.delete.delay.ms") {
        c.file_delete_delay_ms = v.max(0);
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

/// What one metadata delta did to this node's replicas, told in one line: each partition's
/// change is at DEBUG (a restart or a failover changes dozens at once).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct RoleSummary {
    opened: usize,
    stopped: usize,
    leader: usize,
    follower: usize,
}

impl RoleSummary {
    fn count(&mut self, applied: &crate::partition::AppliedState) {
        self.leader += usize::from(applied.became_leader);
        self.follower += usize::from(applied.became_follower);
    }

    fn is_quiet(&self) -> bool {
        *self == RoleSummary::default()
    }

    fn log(&self, node: i32) {
        if !self.is_quiet() {
            info!(
                node,
                became_leader = self.leader,
                became_follower = self.follower,
                opened = self.opened,
                stopped = self.stopped,
                "partition roles changed: became leader of {}, follower of {}",
                self.leader,
                self.follower
            );
        }
    }
}

#[cfg(test)]
mod role_summary_tests {
    use super::*;
    use crate::partition::AppliedState;

    fn applied(leader: bool, follower: bool) -> AppliedState {
        AppliedState {
            became_leader: leader,
            became_follower: follower,
            isr_change: None,
        }
    }

    #[test]
    fn counts_role_changes_only() {
        let mut s = RoleSummary::default();
        assert!(s.is_quiet());
        s.count(&applied(false, false));
        assert!(s.is_quiet(), "a partition whose role stayed is not told");
        s.count(&applied(true, false));
        s.count(&applied(false, true));
        s.count(&applied(false, true));
        assert_eq!((s.leader, s.follower), (1, 2));
        assert!(!s.is_quiet());
    }
}
