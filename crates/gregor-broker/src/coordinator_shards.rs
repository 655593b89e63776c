//! What every coordinator family hosted on an internal topic shares (group coordinators on
//! `__consumer_offsets`, and the transaction coordinators on `__transaction_state` to come):
//! a table of shards, one per partition this node leads, each loading from its partition's log
//! and then running on a task of its own; and the ordered appends of a shard's records, each
//! reported once committed.
//!
//! The table follows this node's leaderships: when it leads a partition of the topic (or its
//! leader epoch changes) the shard is started; when it stops leading, the shard's slot is
//! dropped, which stops it. A request for a partition without a shard here is
//! NOT_COORDINATOR, for one whose shard still loads COORDINATOR_LOAD_IN_PROGRESS.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{FuturesOrdered, StreamExt};
use gregor_group::{AppendToken, Record, TxnProducer};
use gregor_log::batch::BatchHeader;
use gregor_log::records::{decode_batch, encode_batch, BatchSpec};
use kafka_protocol::ResponseError;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{info, warn};

use crate::partition::PendingAppend;
use crate::replica::{Partition, ReplicaManager};
use crate::runtime::now_ms;

/// A finished append of a shard's records.
pub type AppendDone = (AppendToken, Result<(), ResponseError>);

/// Appends a shard has written and waits to see committed at once (they are written in order
/// and complete in order; waiting for one at a time would cost a replication round trip each).
const MAX_APPENDS_IN_FLIGHT: usize = 32;

/// One shard's place in the table.
pub(crate) struct Slot<M> {
    /// The leader epoch the shard was loaded for.
    pub leader_epoch: i32,
    /// The replica it was loaded from (a replica re-created under the same epoch reloads). Weak:
    /// a stopped replica's log is closed while the slot may still be loading it.
    pub partition: Weak<Partition>,
    /// `None` while the shard loads.
    pub tx: Option<mpsc::Sender<M>>,
    /// Dropping the slot drops this sender, which stops the shard (or discards its load).
    pub _stop: oneshot::Sender<()>,
}

/// The shards of one coordinator family on this node, by partition of its topic.
pub struct ShardTable<M> {
    /// The internal topic.
    topic: &'static str,
    /// What the shards are, for the logs ("group coordinator").
    what: &'static str,
    pub(crate) shards: Mutex<HashMap<i32, Slot<M>>>,
    /// The leader epoch this node's replica of each partition of the topic has taken (as
    /// leader or follower), as of the last reconcile.
    replica_epochs: Mutex<HashMap<i32, i32>>,
    /// Changes whenever a shard starts loading, finishes loading or stops.
    changed: watch::Sender<u64>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<M: Send + 'static> ShardTable<M> {
    pub fn new(topic: &'static str, what: &'static str) -> ShardTable<M> {
        ShardTable {
            topic,
            what,
            shards: Mutex::new(HashMap::new()),
            replica_epochs: Mutex::new(HashMap::new()),
            changed: watch::channel(0).0,
        }
    }

    /// A receiver that changes whenever a shard starts loading, is loaded or stops.
    pub fn watch_shards(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Partitions with a loaded shard, and with one still loading.
    pub fn shard_partitions(&self) -> (Vec<i32>, Vec<i32>) {
        let shards = lock(&self.shards);
        let mut loaded: Vec<i32> = Vec::new();
        let mut loading: Vec<i32> = Vec::new();
        for (p, slot) in shards.iter() {
            if slot.tx.is_some() {
                loaded.push(*p);
            } else {
                loading.push(*p);
            }
        }
        loaded.sort_unstable();
        loading.sort_unstable();
        (loaded, loading)
    }

    /// Whether a shard of `partition` is here, loaded or loading.
    pub fn hosts(&self, partition: i32) -> bool {
        lock(&self.shards).contains_key(&partition)
    }

    /// Brings the shards in line with the partitions of the topic this node leads: `start`
    /// starts the shard of a partition (its replica, leader epoch, and the receiver that fires
    /// when the shard must stop).
    pub fn reconcile(
        &self,
        replicas: &ReplicaManager,
        mut start: impl FnMut(Arc<Partition>, i32, oneshot::Receiver<()>),
    ) {
        let hosted: Vec<Arc<Partition>> = replicas
            .all()
            .into_iter()
            .filter(|p| p.topic == self.topic)
            .collect();
        *lock(&self.replica_epochs) = hosted
            .iter()
            .map(|p| (p.index, p.role().leader_epoch))
            .collect();
        let led: HashMap<i32, (i32, Arc<Partition>)> = hosted
            .into_iter()
            .filter_map(|p| {
                let role = p.role();
                role.is_leader.then(|| (p.index, (role.leader_epoch, p)))
            })
            .collect();
        let mut shards = lock(&self.shards);
        let mut changed = false;
        shards.retain(|p, slot| {
            let keep = led.get(p).is_some_and(|(epoch, part)| {
                *epoch == slot.leader_epoch && Weak::ptr_eq(&Arc::downgrade(part), &slot.partition)
            });
            if !keep {
                info!(
                    partition = *p,
                    leader_epoch = slot.leader_epoch,
                    "unloading {} shard",
                    self.what
                );
                changed = true;
            }
            keep
        });
        for (p, (epoch, part)) in led {
            if shards.contains_key(&p) {
                continue;
            }
            let (stop_tx, stop_rx) = oneshot::channel();
            shards.insert(
                p,
                Slot {
                    leader_epoch: epoch,
                    partition: Arc::downgrade(&part),
                    tx: None,
                    _stop: stop_tx,
                },
            );
            changed = true;
            info!(
                partition = p,
                leader_epoch = epoch,
                "loading {} shard",
                self.what
            );
            start(part, epoch, stop_rx);
        }
        drop(shards);
        if changed {
            self.changed.send_modify(|n| *n += 1);
        }
    }

    /// Installs a loaded shard if its slot still waits for it; returns its request channel.
    pub fn install(
        &self,
        partition: &Arc<Partition>,
        leader_epoch: i32,
    ) -> Option<mpsc::Receiver<M>> {
        let mut shards = lock(&self.shards);
        let slot = shards.get_mut(&partition.index)?;
        if slot.leader_epoch != leader_epoch
            || !Weak::ptr_eq(&slot.partition, &Arc::downgrade(partition))
            || slot.tx.is_some()
        {
            return None;
        }
        let (tx, rx) = mpsc::channel(1024);
        slot.tx = Some(tx);
        drop(shards);
        self.changed.send_modify(|n| *n += 1);
        Some(rx)
    }

    /// The request channel of the shard for `partition`: NOT_COORDINATOR when this node does not
    /// lead it, COORDINATOR_LOAD_IN_PROGRESS while its shard loads.
    pub fn route(&self, partition: i32) -> Result<mpsc::Sender<M>, ResponseError> {
        match lock(&self.shards).get(&partition) {
            None => Err(ResponseError::NotCoordinator),
            Some(Slot { tx: None, .. }) => Err(ResponseError::CoordinatorLoadInProgress),
            Some(Slot { tx: Some(tx), .. }) => Ok(tx.clone()),
        }
    }

    /// After the internal topic was created: waits, at most `wait`, until partition `p`
    /// (from the image, as `partition_of` says) has a leader, and if it is this node, until its
    /// shard is loaded. The first requests of a new cluster are then not bounced with
    /// COORDINATOR_LOAD_IN_PROGRESS. Returns the partition.
    pub async fn await_first_load(
        &self,
        image: impl Fn() -> std::sync::Arc<gregor_meta::MetadataImage>,
        node_id: i32,
        partition_of: impl Fn(&gregor_meta::MetadataImage) -> i32,
        wait: Duration,
    ) -> i32 {
        let deadline = tokio::time::Instant::now() + wait;
        let mut changed = self.watch_shards();
        loop {
            changed.borrow_and_update();
            let image = image();
            let p = partition_of(&image);
            let leader = image
                .topic(self.topic)
                .and_then(|t| t.partitions.get(&p))
                .map(|r| r.leader);
            let settled = match leader {
                Some(l) if l == node_id => self.route(p).is_ok(),
                Some(_) => true,
                None => false,
            };
            if settled || tokio::time::Instant::now() >= deadline {
                return p;
            }
            // Shard changes wake this at once; the image's catching up is polled.
            let _ = tokio::time::timeout(Duration::from_millis(20), changed.changed()).await;
        }
    }

    /// Whether `image` names `node_id` the leader of partition `p` under a leader epoch its
    /// replica has not taken yet (the shard is about to load).
    pub fn taking_over(&self, image: &gregor_meta::MetadataImage, node_id: i32, p: i32) -> bool {
        let Some(r) = image.topic(self.topic).and_then(|t| t.partitions.get(&p)) else {
            return false;
        };
        r.leader == node_id
            && lock(&self.replica_epochs)
                .get(&p)
                .is_none_or(|taken| *taken < r.leader_epoch)
    }
}

/// Writes a shard's appends in order, several at a time, and reports each once it is committed
/// (or has failed), in order.
pub async fn appender(
    part: Arc<Partition>,
    commit_timeout: Duration,
    timeout_setting: &'static str,
    mut rx: mpsc::UnboundedReceiver<(AppendToken, Vec<Record>)>,
    done: mpsc::UnboundedSender<AppendDone>,
) {
    let mut in_flight = FuturesOrdered::new();
    let mut open = true;
    loop {
        tokio::select! {
            m = rx.recv(), if open && in_flight.len() < MAX_APPENDS_IN_FLIGHT => match m {
                Some((token, records)) => {
                    let committed = append(&part, records, commit_timeout, timeout_setting);
                    in_flight.push_back(async move { (token, committed.await) });
                }
                None => open = false,
            },
            Some(finished) = in_flight.next(), if !in_flight.is_empty() => {
                if done.send(finished).is_err() {
                    return;
                }
            }
            else => return,
        }
    }
}

/// Starts appending a shard's records to its partition (the partition's write order is taken
/// now) and returns a future that completes once they are committed: the high watermark has
/// passed them. Bounded by `commit_timeout`, the setting `timeout_setting` (REQUEST_TIMED_OUT); losing the leadership
/// meanwhile answers NOT_LEADER_OR_FOLLOWER. The coordinators map both as Kafka's do.
///
/// Records with `transactional: Some(p)` (a TxnOffsetCommit's offsets) go in a batch that is
/// transactional for producer `p`, with no sequence (-1) as Kafka writes a coordinator's
/// batches, appended as the coordinator's own write: it opens `p`'s transaction in the
/// partition, which holds its last stable offset until the marker. One append is one batch, so
/// it may not mix transactional and plain records (the coordinators never do); such an append is
/// refused with UNKNOWN_SERVER_ERROR.
fn append(
    part: &Arc<Partition>,
    records: Vec<Record>,
    commit_timeout: Duration,
    timeout_setting: &'static str,
) -> impl std::future::Future<Output = Result<(), ResponseError>> {
    let now = now_ms();
    let transactional = records.first().and_then(|r| r.transactional);
    let mixed = records.iter().any(|r| r.transactional != transactional);
    let batch: Vec<gregor_log::records::Record> = records
        .into_iter()
        .enumerate()
        .map(|(i, r)| gregor_log::records::Record {
            offset: i as i64,
            timestamp: now,
            key: Some(r.key),
            value: r.value,
            headers: Vec::new(),
        })
        .collect();
    let pending = if mixed {
        warn!(
            topic = %part.topic,
            partition = part.index,
            "coordinator append mixes transactional and plain records; refused"
        );
        Err(ResponseError::UnknownServerError)
    } else {
        spawn_batch(part, transactional, &batch)
    };
    let part = part.clone();
    async move {
        let pending = pending?;
        let committed = async {
            let outcome = pending
                .done
                .await
                .map_err(|_| ResponseError::UnknownServerError)??;
            part.await_high_watermark(outcome.end_offset).await
        };
        match tokio::time::timeout(commit_timeout, committed).await {
            Ok(result) => result,
            Err(_) => {
                warn!(
                    topic = %part.topic,
                    partition = part.index,
                    "coordinator records not committed within {timeout_setting}"
                );
                Err(ResponseError::RequestTimedOut)
            }
        }
    }
}

/// Encodes the records as one batch (transactional for `transactional`'s producer, if given) and
/// starts appending it.
fn spawn_batch(
    part: &Arc<Partition>,
    transactional: Option<TxnProducer>,
    batch: &[gregor_log::records::Record],
) -> Result<PendingAppend, ResponseError> {
    let spec = match transactional {
        None => BatchSpec::default(),
        Some(p) => BatchSpec {
            transactional: true,
            producer_id: p.producer_id,
            producer_epoch: p.producer_epoch,
            base_sequence: -1,
            ..BatchSpec::default()
        },
    };
    let bytes = encode_batch(&spec, batch).map_err(|_| ResponseError::UnknownServerError)?;
    Ok(match transactional {
        None => part.spawn_append(Bytes::from(bytes)),
        Some(_) => part.spawn_coordinator_append(Bytes::from(bytes)),
    })
}

/// Reads `part`'s log from its start to its end, batch by batch, for a shard's load (blocking
/// file work): `each` gets each batch's header, bytes and records. An unreadable batch ends
/// its read (`what` names the log in the warning); the next read starts after it.
pub fn for_each_batch(
    part: &Partition,
    what: &str,
    mut each: impl FnMut(&BatchHeader, &[u8], Vec<gregor_log::records::Record>),
) -> Result<(), ResponseError> {
    let mut offset = part.log.log_start_offset();
    let end = part.log.log_end_offset();
    while offset < end {
        let read = part
            .log
            .read(offset, 1 << 20, Some(end))
            .map_err(|_| ResponseError::CoordinatorLoadInProgress)?;
        let Some(next) = read.next_offset else { break };
        let mut rest: &[u8] = &read.records;
        while !rest.is_empty() {
            let Ok((h, records)) = decode_batch(rest) else {
                warn!(
                    partition = part.index,
                    offset,
                    log = what,
                    "skipping an unreadable batch"
                );
                break;
            };
            each(&h, &rest[..h.size()], records);
            rest = &rest[h.size()..];
        }
        if next <= offset {
            break;
        }
        offset = next;
    }
    Ok(())
}
