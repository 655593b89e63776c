//! One hosted partition replica: its log, its role (leader or follower, leader epoch), the
//! high watermark, idempotent and transactional producer state and the last stable offset, the
//! order of its appends, and — while it leads — the replication state of its followers
//! (`isr.rs`).

use std::sync::{Arc, Mutex, PoisonError};

use gregor_log::batch::BatchHeader;
use gregor_log::txn::{control_record, marker_batch, CompletedTxn, Marker};
use gregor_log::{DurableToken, Log, LogError, RecordErrors};
use gregor_meta::Uuid;
use kafka_protocol::ResponseError;
use tokio::sync::watch;
use tracing::{debug, warn};

use crate::fetch_signal::{Change, Listeners};
use crate::isr::{IsrChange, IsrProposal, LeaderState, PartitionState};
use crate::last_stable::LastStable;
use crate::producer_state::{parse_snapshot, snapshot_bytes, Check, ProducerStates, SNAPSHOT_FILE};
use crate::runtime::{blocking, now_ms};

/// Role of one hosted replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Role {
    pub is_leader: bool,
    pub leader_epoch: i32,
}

/// What the replica does for replication.
#[derive(Debug)]
enum Replication {
    /// Leading: the followers' progress and the ISR.
    Leader(LeaderState),
    /// Following `leader` in `leader_epoch`: the replica fetcher appends to the log. `in_sync`:
    /// this replica is in the committed ISR (replication throttles spare it).
    Follower { leader_epoch: i32, in_sync: bool },
}

/// One hosted partition replica.
pub struct Partition {
    pub topic: String,
    pub index: i32,
    pub topic_id: Uuid,
    pub log: Arc<Log>,
    node_id: i32,
    role: Mutex<Role>,
    /// Leader or follower state. Role changes and the fetcher's follower appends and
    /// truncations take this lock, so a follower write never lands after the replica became
    /// leader (nor in the middle of the change).
    replication: Mutex<Replication>,
    /// Serialises the idempotence check with the write that follows it.
    producers: tokio::sync::Mutex<ProducerStates>,
    /// What holds the last stable offset below the high watermark; updated under the
    /// producer lock, read by fetches without it.
    stability: Mutex<LastStable>,
    /// Log end offset of the last producer-state snapshot written (-1: none).
    snapshot_offset: std::sync::atomic::AtomicI64,
    /// Appends are written in the order they reached the partition.
    order: AppendOrder,
    /// Clients' transactional batches, from their arrival to their write, verification
    /// included (KIP-890): a producer's pipelined batches keep their order even when the first
    /// waits for its coordinator.
    txn_order: AppendOrder,
    /// The high watermark, for parked consumer fetches and acks=all produces to wait on (also
    /// touched when the role changes, so that waiters notice).
    hw: watch::Sender<i64>,
    /// The log end offset, for parked follower fetches to wait on.
    leo: watch::Sender<i64>,
    /// As a follower: the high watermark the leader last reported (its own is capped by its
    /// log end), to tell how far behind this replica is.
    leader_hw_seen: std::sync::atomic::AtomicI64,
    /// The fetch sessions holding this partition, told of each change a fetch could answer
    /// (`fetch_signal.rs`).
    fetch_listeners: Arc<Listeners>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What applying a committed partition state did to this replica.
pub(crate) struct AppliedState {
    /// It became the leader (a new epoch, or it followed before).
    pub became_leader: bool,
    /// It became a follower of a new leader or epoch: the fetcher must find where its log
    /// diverges before fetching.
    pub became_follower: bool,
    /// As the leader in the same epoch, how the committed ISR changed.
    pub isr_change: Option<IsrChange>,
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
    /// A hosted replica over an opened log, in `role`, with the producer state recovered from
    /// the log.
    pub(crate) fn new(
        topic: &str,
        index: i32,
        topic_id: Uuid,
        node_id: i32,
        log: Log,
        state: &PartitionState,
        role: Role,
    ) -> Partition {
        let loaded = load_producers(&log, now_ms());
        let leo = log.log_end_offset();
        let stability = Mutex::new(LastStable::default());
        note_loaded(&mut lock(&stability), &loaded, log.high_watermark());
        let Loaded {
            producers,
            snapshot_offset,
            ..
        } = loaded;
        let replication = if role.is_leader {
            let durable = log.durable_end_offset();
            Replication::Leader(LeaderState::new(node_id, state.clone(), durable, now_ms()))
        } else {
            Replication::Follower {
                leader_epoch: role.leader_epoch,
                in_sync: state.isr.contains(&node_id),
            }
        };
        Partition {
            topic: topic.to_string(),
            index,
            topic_id,
            node_id,
            hw: watch::channel(log.high_watermark()).0,
            leader_hw_seen: std::sync::atomic::AtomicI64::new(-1),
            fetch_listeners: Arc::default(),
            leo: watch::channel(leo).0,
            log: Arc::new(log),
            role: Mutex::new(role),
            replication: Mutex::new(replication),
            producers: tokio::sync::Mutex::new(producers),
            stability,
            snapshot_offset: std::sync::atomic::AtomicI64::new(snapshot_offset),
            order: AppendOrder::new(),
            txn_order: AppendOrder::new(),
        }
    }

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

    /// The high watermark the leader's replication state allows, which its own log end
    /// bounds. Called under the replication lock, where a leader's log is never truncated.
    fn leader_hw(&self, l: &LeaderState) -> i64 {
        let hw = l.high_watermark();
        debug_assert!(
            hw <= self.log.log_end_offset(),
            "{}-{}: high watermark {hw} past the log end offset {}",
            self.topic,
            self.index,
            self.log.log_end_offset()
        );
        hw
    }

    /// Advances the high watermark to `offset` (never backwards) and wakes parked fetches.
    fn advance_hw(&self, offset: i64) {
        if offset > self.log.high_watermark() {
            let hw = self.log.set_high_watermark(offset);
            // An LSO stall is timed from the moment the high watermark passes the LSO.
            lock(&self.stability).observe(hw, now_ms());
            self.hw.send_replace(hw);
            self.fetch_listeners.announce(Change::Any);
        }
    }

    /// The fetch sessions holding this partition.
    pub fn fetch_listeners(&self) -> &Arc<Listeners> {
        &self.fetch_listeners
    }

    /// The log start offset moved (retention, DeleteRecords): fetch sessions answer it.
    pub fn log_start_moved(&self) {
        self.fetch_listeners.announce(Change::Any);
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
        self.spawn_write(Write::Records(records))
    }

    /// [`Partition::spawn_append`] for a batch a coordinator writes itself (Kafka's
    /// `AppendOrigin.COORDINATOR`): a group coordinator's transactional offset commit carries
    /// its producer's id and epoch but no sequence (-1), so the epoch is fenced and the
    /// producer's transaction opens, but no sequence or duplicate is checked.
    pub fn spawn_coordinator_append(self: &Arc<Self>, records: bytes::Bytes) -> PendingAppend {
        self.spawn_write(Write::CoordinatorRecords(records))
    }

    /// [`Partition::spawn_append`] for a client's transactional batch (KIP-890). One that would
    /// open its producer's transaction here fails with [`ProduceError::Unverified`] unless it
    /// carries `guard`, that error's guard, after the coordinator verified the transaction.
    pub fn spawn_txn_append(
        self: &Arc<Self>,
        records: bytes::Bytes,
        guard: Option<u64>,
    ) -> PendingAppend {
        self.spawn_write(Write::Verified(records, guard))
    }

    /// A ticket in the order of clients' transactional batches, taken when one arrives.
    pub fn txn_ticket(&self) -> u64 {
        self.txn_order.take_ticket()
    }

    /// Waits until the transactional batch of `ticket` may start its append (and its
    /// verification, if it needs one); the next one waits until the turn is dropped.
    pub async fn txn_turn(&self, ticket: u64) -> Turn<'_> {
        self.txn_order.wait_turn(ticket).await
    }

    /// Appends a transaction coordinator's commit or abort marker as leader, in turn with the
    /// producers' appends, as [`Partition::spawn_append`] does a batch: refused with
    /// INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED when the partition has seen a
    /// newer producer or coordinator epoch. The producer's open transaction ends with it.
    pub fn spawn_marker(self: &Arc<Self>, marker: Marker) -> PendingAppend {
        self.spawn_write(Write::Marker(marker))
    }

    fn spawn_write(self: &Arc<Self>, write: Write) -> PendingAppend {
        let (written_tx, written) = tokio::sync::oneshot::channel();
        let ticket = self.order.take_ticket();
        let part = self.clone();
        let done = crate::runtime::spawn(async move {
            let turn = part.order.wait_turn(ticket).await;
            let appended = match write {
                Write::Records(records) => part.append_unit(records, Origin::Client).await,
                Write::CoordinatorRecords(records) => {
                    part.append_unit(records, Origin::Coordinator).await
                }
                Write::Verified(records, guard) => {
                    part.append_unit(records, Origin::Verified(guard)).await
                }
                Write::Marker(marker) => part.append_marker_unit(marker).await,
            };
            drop(turn);
            let unverified = match &appended {
                Err(ProduceError::Unverified(guard)) => Some(*guard),
                _ => None,
            };
            let _ = written_tx.send(unverified);
            let (outcome, durable, end_offset, owed) = appended?;
            crate::runtime::wait_simulated_disk(owed).await;
            let log = part.log.clone();
            blocking(move || log.await_durable(durable))
                .await
                .map_err(|e| log_error(&e))?;
            if let Some(end) = end_offset {
                part.local_durable(end);
            }
            Ok(outcome)
        });
        PendingAppend { written, done }
    }

    /// Check, write and record under the producer-state lock. Returns the answer, when it may
    /// be given, and the offset after the written batch (`None` for a duplicate, whose
    /// original's own task moves the high watermark), and what a simulated slow disk owes.
    /// `origin` decides how the batch is checked.
    async fn append_unit(
        self: &Arc<Self>,
        records: bytes::Bytes,
        origin: Origin,
    ) -> Result<
        (
            ProduceOutcome,
            DurableToken,
            Option<i64>,
            std::time::Duration,
        ),
        ProduceError,
    > {
        let role = self.role();
        if !role.is_leader {
            return Err(ResponseError::NotLeaderOrFollower.into());
        }
        let header = single_batch_header(&records)?;
        let mut producers = self.producers.lock().await;
        let check = match origin {
            Origin::Client => producers.check(&header),
            Origin::Coordinator => producers.check_coordinator(&header),
            Origin::Verified(guard) => producers.check_verified(&header, guard),
        };
        match check {
            Check::Duplicate(b) => {
                let outcome = ProduceOutcome {
                    base_offset: b.first_offset,
                    end_offset: b.first_offset + i64::from(header.last_offset_delta) + 1,
                    log_append_time: -1,
                    log_start_offset: self.log.log_start_offset(),
                };
                return Ok((outcome, b.durable, None, std::time::Duration::ZERO));
            }
            Check::Reject(e) => return Err(e.into()),
            Check::Unverified => {
                let guard = producers.verification_guard(header.producer_id);
                return Err(ProduceError::Unverified(guard));
            }
            Check::Append => {}
        }
        let now = now_ms();
        let (written, owed) = self
            .write_leading(role.leader_epoch, move |log, epoch| {
                log.append_as_leader_deferred(&records, epoch, now)
            })
            .await;
        let (info, durable) = written?;
        self.leo.send_replace(info.last_offset + 1);
        self.fetch_listeners.announce(Change::LogEnd);
        producers.record(
            &BatchHeader {
                base_offset: info.first_offset,
                ..header
            },
            durable,
            now,
        );
        lock(&self.stability).set_open_first(producers.first_unstable_offset());
        drop(producers);
        let outcome = ProduceOutcome {
            base_offset: info.first_offset,
            end_offset: info.last_offset + 1,
            log_append_time: info.log_append_time.unwrap_or(-1),
            log_start_offset: info.log_start_offset,
        };
        Ok((outcome, durable, Some(info.last_offset + 1), owed))
    }

    /// Runs `write` on the blocking pool while this replica still leads in `epoch` (a role
    /// change waits for it). Called under the producer lock: a simulated slow disk's delay is
    /// waited out by the caller after the lock is let go (`runtime::blocking_owing`).
    async fn write_leading(
        self: &Arc<Self>,
        epoch: i32,
        write: impl FnOnce(&Log, i32) -> Result<(gregor_log::AppendInfo, DurableToken), LogError>
            + Send
            + 'static,
    ) -> (
        Result<(gregor_log::AppendInfo, DurableToken), ProduceError>,
        std::time::Duration,
    ) {
        let part = self.clone();
        crate::runtime::blocking_owing(move || {
            let replication = lock(&part.replication);
            match &*replication {
                Replication::Leader(l) if l.state().leader_epoch == epoch => {}
                _ => return Err(ResponseError::NotLeaderOrFollower.into()),
            }
            write(&part.log, epoch).map_err(ProduceError::from_log)
        })
        .await
    }

    /// [`Partition::append_unit`] for a coordinator's marker.
    async fn append_marker_unit(
        self: &Arc<Self>,
        marker: Marker,
    ) -> Result<
        (
            ProduceOutcome,
            DurableToken,
            Option<i64>,
            std::time::Duration,
        ),
        ProduceError,
    > {
        let role = self.role();
        if !role.is_leader {
            return Err(ResponseError::NotLeaderOrFollower.into());
        }
        let batch = marker_batch(&marker).map_err(ProduceError::from_log)?;
        let mut producers = self.producers.lock().await;
        producers.check_marker(
            marker.producer_id,
            marker.producer_epoch,
            marker.coordinator_epoch,
        )?;
        let now = now_ms();
        let bytes = batch.clone();
        let (written, owed) = self
            .write_leading(role.leader_epoch, move |log, epoch| {
                log.append_marker_as_leader_deferred(&bytes, epoch, now)
            })
            .await;
        let (info, durable) = written?;
        self.leo.send_replace(info.last_offset + 1);
        self.fetch_listeners.announce(Change::LogEnd);
        let mut h = BatchHeader::parse(&batch).ok_or(ResponseError::CorruptMessage)?;
        h.base_offset = info.first_offset;
        let ended = observe_batch(&self.log, &mut producers, &batch, &h, durable, now);
        self.note_ended(&producers, ended.map_err(ProduceError::from_log)?);
        drop(producers);
        let outcome = ProduceOutcome {
            base_offset: info.first_offset,
            end_offset: info.last_offset + 1,
            log_append_time: -1,
            log_start_offset: info.log_start_offset,
        };
        Ok((outcome, durable, Some(info.last_offset + 1), owed))
    }

    /// The producer state changed (under its lock): the oldest open transaction, and one a
    /// marker ended.
    fn note_ended(&self, producers: &ProducerStates, ended: Option<CompletedTxn>) {
        let mut stability = lock(&self.stability);
        stability.set_open_first(producers.first_unstable_offset());
        if let Some(c) = ended {
            stability.completed(&c);
            drop(stability);
            // The last stable offset may move up to the high watermark without it moving.
            self.fetch_listeners.announce(Change::Any);
        }
    }

    /// The last stable offset: read_committed consumers read no further.
    pub fn last_stable_offset(&self, high_watermark: i64) -> i64 {
        lock(&self.stability).last_stable_offset(high_watermark)
    }

    /// The last stable offset now, and how long (ms) it has trailed the high watermark at that
    /// offset (the metrics' hanging-transaction signal).
    pub fn last_stable_stall(&self, now_ms: i64) -> (i64, i64) {
        lock(&self.stability).observe(self.high_watermark(), now_ms)
    }

    /// The open transactions (producer id, first offset), for tools.
    pub async fn open_transactions(&self) -> Vec<(i64, i64)> {
        self.producers.lock().await.open_transactions()
    }

    /// The producers this partition remembers (DescribeProducers).
    pub async fn producers(&self) -> Vec<crate::producer_state::ProducerSummary> {
        self.producers.lock().await.describe()
    }

    /// A receiver that changes whenever the log end offset moves (follower fetches wait on it).
    pub fn watch_leo(&self) -> watch::Receiver<i64> {
        self.leo.subscribe()
    }

    /// This leader's own appends are durable up to `end`.
    fn local_durable(&self, end: i64) {
        let hw = match &mut *lock(&self.replication) {
            Replication::Leader(l) => {
                l.local_durable(end);
                self.leader_hw(l)
            }
            Replication::Follower { .. } => return,
        };
        self.advance_hw(hw);
    }

    /// A follower fetched from `fetch_offset`: its durable log end offset. Moves the high
    /// watermark, and returns an ISR expansion to propose if the follower caught up.
    pub fn follower_fetched(&self, replica: i32, fetch_offset: i64) -> Option<IsrProposal> {
        // A fetch past the log end (a follower that has not truncated its divergent suffix yet)
        // is answered OFFSET_OUT_OF_RANGE and says nothing about what the follower holds.
        if fetch_offset > self.log.log_end_offset() {
            return None;
        }
        let (proposal, hw) = match &mut *lock(&self.replication) {
            Replication::Leader(l) => {
                let p = l.follower_fetched(
                    replica,
                    fetch_offset,
                    self.log.log_end_offset(),
                    self.log.high_watermark(),
                    now_ms(),
                );
                (p, self.leader_hw(l))
            }
            Replication::Follower { .. } => return None,
        };
        self.advance_hw(hw);
        proposal
    }

    /// The ISR without the followers that have not caught up for `lag_max_ms`, if any.
    /// A follower's fetches name no offset for a partition whose offset did not move; its
    /// session's last fetch tells when it last had this one's offset (`fetch_signal.rs`).
    pub fn shrink_isr(&self, now_ms: i64, lag_max_ms: i64) -> Option<IsrProposal> {
        match &mut *lock(&self.replication) {
            Replication::Leader(l) => {
                l.shrink(now_ms, lag_max_ms, self.log.log_end_offset(), |r: i32| {
                    self.fetch_listeners.last_fetch_by(r)
                })
            }
            Replication::Follower { .. } => None,
        }
    }

    /// Whether `p` is still this leader's ISR proposal in flight (no answer has settled it and
    /// no newer partition state has replaced it).
    pub fn isr_proposal_pending(&self, p: &IsrProposal) -> bool {
        match &*lock(&self.replication) {
            Replication::Leader(l) => l.is_pending(p),
            Replication::Follower { .. } => false,
        }
    }

    /// The controller answered an ISR proposal based on `partition_epoch`.
    pub fn isr_proposal_done(&self, partition_epoch: i32) {
        if let Replication::Leader(l) = &mut *lock(&self.replication) {
            l.proposal_done(partition_epoch);
        }
        // Another proposal may follow: the next fetch of each follower looks at it again.
        self.fetch_listeners.announce(Change::Recheck);
    }

    /// The committed ISR while leading (empty otherwise).
    pub fn isr(&self) -> Vec<i32> {
        match &*lock(&self.replication) {
            Replication::Leader(l) => l.isr().to_vec(),
            Replication::Follower { .. } => Vec::new(),
        }
    }

    /// How many offsets this replica's log end trails the partition's high watermark: zero
    /// on the leader; on a follower, against the high watermark its leader last reported.
    pub fn offset_lag(&self) -> i64 {
        if self.role().is_leader {
            return 0;
        }
        let hw = self
            .leader_hw_seen
            .load(std::sync::atomic::Ordering::Relaxed);
        (hw - self.log.log_end_offset()).max(0)
    }

    /// Whether `replica` is in the committed ISR: as the leader, of any replica; as a follower,
    /// of this one (each knows only that much).
    pub fn is_in_sync(&self, replica: i32) -> bool {
        match &*lock(&self.replication) {
            Replication::Leader(l) => l.isr().contains(&replica),
            Replication::Follower { in_sync, .. } => replica == self.node_id && *in_sync,
        }
    }

    /// Applies the partition's committed state from the metadata log: leads or follows in its
    /// leader epoch.
    pub(crate) fn apply_state(&self, leader: i32, state: PartitionState) -> AppliedState {
        let now = now_ms();
        let is_leader = leader == self.node_id;
        let epoch = state.leader_epoch;
        let mut replication = lock(&self.replication);
        let mut became_leader = false;
        let (became_follower, hw, isr_change) = match (&mut *replication, is_leader) {
            (Replication::Leader(l), true) if l.state().leader_epoch == epoch => {
                // The ISR or the replica set changed; a smaller ISR can move the high watermark.
                let change = l.update(state, now);
                (false, Some(self.leader_hw(l)), change)
            }
            (_, true) => {
                // An empty log needs no entry: OffsetForLeaderEpoch answers "no epoch" and a
                // follower empties its log too, which is right; the first append records the
                // epoch. (Writing the checkpoint is an fsync per partition, in the metadata
                // applier's path.)
                let empty = self.log.log_end_offset() == self.log.log_start_offset();
                if !empty {
                    if let Err(e) = self.log.assign_epoch_at_end(epoch) {
                        warn!(topic = %self.topic, partition = self.index, epoch, error = %e, "cannot record the new leader epoch");
                    }
                }
                // Its own durable end counts toward the high watermark, not what a failed sync
                // left unsynced.
                let durable = self.log.durable_end_offset();
                let l = LeaderState::new(self.node_id, state, durable, now);
                let hw = self.leader_hw(&l);
                *replication = Replication::Leader(l);
                debug!(topic = %self.topic, partition = self.index, epoch, "became leader");
                became_leader = true;
                (false, Some(hw), None)
            }
            (
                Replication::Follower {
                    leader_epoch,
                    in_sync,
                },
                false,
            ) if *leader_epoch == epoch => {
                *in_sync = state.isr.contains(&self.node_id);
                (false, None, None)
            }
            (_, false) => {
                *replication = Replication::Follower {
                    leader_epoch: epoch,
                    in_sync: state.isr.contains(&self.node_id),
                };
                debug!(topic = %self.topic, partition = self.index, epoch, leader, "became follower");
                (true, None, None)
            }
        };
        self.take_role(Role {
            is_leader,
            leader_epoch: epoch,
        });
        drop(replication);
        if let Some(hw) = hw {
            self.advance_hw(hw);
        }
        // Parked produces and fetches look at the role again.
        self.hw.send_modify(|_| {});
        self.leo.send_modify(|_| {});
        self.fetch_listeners.announce(Change::Any);
        AppliedState {
            became_leader,
            became_follower,
            isr_change,
        }
    }

    /// Takes the role a committed partition state gives (under the replication lock).
    fn take_role(&self, new: Role) {
        let mut role = lock(&self.role);
        // The metadata log is applied in order and every leader change bumps the epoch.
        debug_assert!(
            new.leader_epoch >= role.leader_epoch,
            "{}-{}: leader epoch {} after {}",
            self.topic,
            self.index,
            new.leader_epoch,
            role.leader_epoch
        );
        *role = new;
    }

    /// Where the next fetch from the leader of `leader_epoch` starts: the durable log end
    /// offset and the log start offset, read under the replication lock while this replica
    /// still follows in that epoch. `None` once it leads or follows another epoch: its log
    /// may then hold records that leader never sent (its own appends as a leader), and a fetch
    /// naming that end would count them as replicas of the old leader's records.
    pub(crate) fn follower_fetch_position(&self, leader_epoch: i32) -> Option<(i64, i64)> {
        let replication = lock(&self.replication);
        if !matches!(&*replication, Replication::Follower { leader_epoch: e, .. } if *e == leader_epoch)
            && !planted!(FetchPositionPastEpoch)
        {
            return None;
        }
        Some((self.log.durable_end_offset(), self.log.log_start_offset()))
    }

    /// Appends batches fetched from the leader of `leader_epoch` (synced before it returns, so
    /// the next fetch reports a durable log end offset), records their producers, and takes the
    /// leader's high watermark. Blocking file I/O. `Ok(false)` if the replica no longer follows
    /// in that epoch (nothing written).
    pub(crate) fn append_as_follower(
        &self,
        leader_epoch: i32,
        records: &[u8],
        leader_hw: i64,
    ) -> Result<bool, LogError> {
        // Lock order as on the leader's path: producer state, then replication state.
        let mut producers = self.producers.blocking_lock();
        let replication = lock(&self.replication);
        if !matches!(&*replication, Replication::Follower { leader_epoch: e, .. } if *e == leader_epoch)
        {
            return Ok(false);
        }
        let now = now_ms();
        let restamped;
        let records = if planted!(FollowerRestampsEpoch) {
            restamped = restamp_epoch(records, leader_epoch);
            &restamped[..]
        } else {
            records
        };
        if !records.is_empty() {
            let (_, durable) = self.log.append_as_follower_deferred(records, now)?;
            if !planted!(SkipFollowerSync) {
                // The next fetch names the new log end, which the leader then counts toward
                // the high watermark: it must be on this disk first.
                self.log.await_durable(durable)?;
            }
            let mut rest = records;
            while let Some(h) = BatchHeader::parse(rest) {
                if h.size() > rest.len() || h.size() == 0 {
                    break;
                }
                // Planted (simulation only): the new leader would not know the producer.
                if !planted!(FollowerSkipsProducerState) {
                    let batch = &rest[..h.size()];
                    let ended = observe_batch(
                        &self.log,
                        &mut producers,
                        batch,
                        &h,
                        DurableToken::DURABLE,
                        now,
                    )?;
                    self.note_ended(&producers, ended);
                }
                rest = &rest[h.size()..];
            }
        }
        drop(replication);
        drop(producers);
        let leo = self.log.log_end_offset();
        self.leo.send_replace(leo);
        self.leader_hw_seen
            .store(leader_hw, std::sync::atomic::Ordering::Relaxed);
        self.advance_hw(leader_hw.min(leo));
        Ok(true)
    }

    /// Removes the log's suffix from `offset` (it diverges from the leader's) and rebuilds the
    /// producer state from what remains. Returns the number of offsets removed. Blocking.
    pub(crate) fn truncate_as_follower(
        &self,
        leader_epoch: i32,
        offset: i64,
    ) -> Result<Option<i64>, LogError> {
        let mut producers = self.producers.blocking_lock();
        let replication = lock(&self.replication);
        if !matches!(&*replication, Replication::Follower { leader_epoch: e, .. } if *e == leader_epoch)
        {
            return Ok(None);
        }
        let before = self.log.log_end_offset();
        if offset >= before {
            return Ok(Some(0));
        }
        self.log.truncate_to(offset)?;
        self.reload_producers(&mut producers);
        drop(replication);
        self.after_truncation();
        Ok(Some(before - self.log.log_end_offset()))
    }

    /// Empties the log and restarts it at `offset` (the leader's log start is past this
    /// replica's log end). Blocking.
    pub(crate) fn restart_as_follower_at(
        &self,
        leader_epoch: i32,
        offset: i64,
    ) -> Result<bool, LogError> {
        let mut producers = self.producers.blocking_lock();
        let replication = lock(&self.replication);
        if !matches!(&*replication, Replication::Follower { leader_epoch: e, .. } if *e == leader_epoch)
        {
            return Ok(false);
        }
        self.log.truncate_fully_and_start_at(offset)?;
        self.reload_producers(&mut producers);
        drop(replication);
        self.after_truncation();
        Ok(true)
    }

    fn reload_producers(&self, producers: &mut ProducerStates) {
        let loaded = load_producers(&self.log, now_ms());
        note_loaded(
            &mut lock(&self.stability),
            &loaded,
            self.log.high_watermark(),
        );
        *producers = loaded.producers;
        self.snapshot_offset
            .store(loaded.snapshot_offset, std::sync::atomic::Ordering::SeqCst);
    }

    /// The replica is no longer hosted: parked fetches and produces wake and find it gone.
    pub(crate) fn stopped(&self) {
        *lock(&self.role) = Role {
            is_leader: false,
            leader_epoch: -1,
        };
        self.hw.send_replace(-1);
        self.leo.send_modify(|_| {});
        self.fetch_listeners.announce(Change::Any);
    }

    fn after_truncation(&self) {
        self.leo.send_replace(self.log.log_end_offset());
        self.hw.send_replace(self.log.high_watermark());
        self.fetch_listeners.announce(Change::Any);
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
        // Every aborted-transaction entry of a marker below `offset` is written: made durable
        // before the snapshot that lets a restart skip replaying those markers.
        self.log.sync_txn_indexes()?;
        self.log
            .disk()
            .write_atomic(&self.log.dir().join(SNAPSHOT_FILE), &bytes)?;
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
pub struct Turn<'a>(&'a AppendOrder);

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
    /// Fires once the batch is written and remembered (or refused); with the guard of a
    /// transactional batch refused as [`ProduceError::Unverified`].
    pub written: tokio::sync::oneshot::Receiver<Option<u64>>,
    /// The answer, once the batch is durable.
    pub done: tokio::task::JoinHandle<Result<ProduceOutcome, ProduceError>>,
}

/// Why a produce to one partition failed.
#[derive(Debug, thiserror::Error)]
pub enum ProduceError {
    /// Kafka's error code says it all.
    #[error(transparent)]
    Code(#[from] ResponseError),
    /// Records of the batch were refused one by one; the batch was not appended (Produce v8+
    /// lists them, KIP-467).
    #[error("{0}")]
    Records(RecordErrors),
    /// A transactional batch that would open its producer's transaction here: verify it with
    /// the coordinator, then append again with this guard (KIP-890).
    #[error("transaction not verified")]
    Unverified(u64),
}

impl ProduceError {
    /// A log failure: its record errors when it has them, its Kafka error code otherwise.
    pub fn from_log(e: LogError) -> ProduceError {
        match e {
            LogError::RecordErrors(r) => ProduceError::Records(r),
            e => ProduceError::Code(log_error(&e)),
        }
    }

    /// The partition's error code.
    pub fn response_error(&self) -> ResponseError {
        match self {
            ProduceError::Code(e) => *e,
            ProduceError::Records(r) => ResponseError::try_from_code(r.kafka_error_code())
                .unwrap_or(ResponseError::InvalidRecord),
            ProduceError::Unverified(_) => ResponseError::InvalidTxnState,
        }
    }
}

impl From<ProduceError> for ResponseError {
    fn from(e: ProduceError) -> ResponseError {
        e.response_error()
    }
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

/// Idempotent-producer state at start-up: the partition's snapshot if it is intact and no newer
/// than the recovered log, plus the batches after it; otherwise every batch of the log. Returns
/// the state and the offset of the snapshot it came from (-1: none). `loaded_at_ms` is the
/// broker's clock now: see [`replay_producers`]. The aborted-transaction index entries of the
/// markers replayed are written again (the snapshot's own are durable, see
/// [`Partition::snapshot_producers`]).
fn load_producers(log: &Log, loaded_at_ms: i64) -> Loaded {
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
                    let removed = log
                        .disk()
                        .remove_if_exists(&path)
                        .and_then(|()| log.disk().sync_dir(log.dir()));
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
    if let Err(e) = log.truncate_aborted_txns_from(from) {
        warn!(dir = %log.dir().display(), error = %e, "cannot cut the aborted-transaction index back for its replay");
    }
    let ended = replay_producers(log, from, &mut producers, loaded_at_ms);
    Loaded {
        producers,
        snapshot_offset,
        ended,
    }
}

/// The producer state recovered from a log.
struct Loaded {
    producers: ProducerStates,
    /// The offset of the snapshot it came from (-1: none).
    snapshot_offset: i64,
    /// The transactions the replay saw end.
    ended: Vec<CompletedTxn>,
}

/// The last stable offset's bounds after `loaded`: its open transactions, and those the replay
/// saw end whose markers are not yet below `high_watermark`.
fn note_loaded(stability: &mut LastStable, loaded: &Loaded, high_watermark: i64) {
    stability.clear_completed();
    stability.set_open_first(loaded.producers.first_unstable_offset());
    for c in loaded
        .ended
        .iter()
        .filter(|c| c.last_offset >= high_watermark)
    {
        stability.completed(c);
    }
}

/// Takes one batch now in the log into the producer state: a data batch's producer, or the end
/// of the transaction a marker closes, whose aborted-transaction index entry (for an abort) is
/// written to the log. Returns the transaction that ended.
fn observe_batch(
    log: &Log,
    producers: &mut ProducerStates,
    batch: &[u8],
    h: &BatchHeader,
    durable: DurableToken,
    now: i64,
) -> Result<Option<CompletedTxn>, LogError> {
    if !h.is_control() {
        producers.record(h, durable, now);
        return Ok(None);
    }
    let Some((kind, coordinator_epoch)) = control_record(batch)? else {
        return Ok(None);
    };
    let Some(ended) = producers.record_marker(h, kind, coordinator_epoch, now) else {
        return Ok(None);
    };
    if let Some(entry) = producers.aborted_entry(&ended) {
        log.append_aborted_txn(entry)?;
    }
    Ok(Some(ended))
}

/// Who wrote a batch, which decides how it is checked.
#[derive(Debug, Clone, Copy)]
enum Origin {
    /// A producer: sequences checked.
    Client,
    /// A coordinator's own batch: no sequence to check.
    Coordinator,
    /// A transactional producer's batch, with its verification's guard.
    Verified(Option<u64>),
}

/// One write to a partition, in its turn.
enum Write {
    /// A producer's batch.
    Records(bytes::Bytes),
    /// A batch a coordinator writes itself (no sequence).
    CoordinatorRecords(bytes::Bytes),
    /// A client's transactional batch, with its verification's guard (KIP-890).
    Verified(bytes::Bytes, Option<u64>),
    /// A transaction coordinator's commit or abort marker.
    Marker(Marker),
}

/// Replays the batch headers from `offset` to the log end into `producers`, as written at
/// `loaded_at_ms`. Not at the batches' own timestamps: those are the producer's (CreateTime),
/// and a producer writing old ones (a backfill, a mirror keeping its source's times) would be
/// expired by the first `producer.id.expiration.ms` check after a restart, and a retry of its
/// last batch written again. Appends record the broker's clock; so does a replay, which at
/// worst keeps a producer one expiration period longer.
fn replay_producers(
    log: &Log,
    mut offset: i64,
    producers: &mut ProducerStates,
    loaded_at_ms: i64,
) -> Vec<CompletedTxn> {
    let end = log.log_end_offset();
    let mut ended = Vec::new();
    while offset < end {
        let Ok(read) = log.read(offset, 1 << 20, None) else {
            return ended;
        };
        let Some(next) = read.next_offset else {
            return ended;
        };
        let mut rest: &[u8] = &read.records;
        while let Some(h) = BatchHeader::parse(rest) {
            if h.size() > rest.len() {
                break;
            }
            let batch = &rest[..h.size()];
            match observe_batch(
                log,
                producers,
                batch,
                &h,
                DurableToken::DURABLE,
                loaded_at_ms,
            ) {
                Ok(Some(c)) => ended.push(c),
                Ok(None) => {}
                Err(e) => {
                    warn!(dir = %log.dir().display(), offset = h.base_offset, error = %e, "a transaction marker could not be replayed");
                }
            }
            rest = &rest[h.size()..];
        }
        if next <= offset {
            return ended;
        }
        offset = next;
    }
    ended
}

/// The planted `FollowerRestampsEpoch`: `records` with every batch's partition leader epoch (12
/// bytes in, outside the CRC) set to `epoch`.
fn restamp_epoch(records: &[u8], epoch: i32) -> Vec<u8> {
    let mut out = records.to_vec();
    let mut at = 0;
    while let Some(h) = BatchHeader::parse(&out[at..]) {
        if h.size() == 0 || at + h.size() > out.len() {
            break;
        }
        out[at + 12..at + 16].copy_from_slice(&epoch.to_be_bytes());
        at += h.size();
    }
    out
}

#[cfg(test)]
#[path = "partition_txn_tests.rs"]
mod txn_tests;

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use gregor_log::LogConfig;

    use gregor_log::batch::Codec;
    use gregor_log::records::{encode_batch, BatchSpec, Record};
    use gregor_log::FaultInjector;

    use super::*;

    fn partition_on_slow_disk(dir: &Path, sync_delay: Duration) -> Arc<Partition> {
        let faults = FaultInjector::new();
        faults.set_sync_delay(sync_delay);
        let log =
            Log::open_with_faults(dir, LogConfig::default(), now_ms(), faults).expect("open log");
        let state = PartitionState {
            leader_epoch: 0,
            partition_epoch: 0,
            replicas: vec![1],
            isr: vec![1],
        };
        let role = Role {
            is_leader: true,
            leader_epoch: 0,
        };
        Arc::new(Partition::new("t", 0, Uuid::nil(), 1, log, &state, role))
    }

    /// One record with `value`, in a batch with the header fields of `spec`.
    fn batch_of(spec: BatchSpec, value: &str) -> bytes::Bytes {
        batch_at(spec, value, now_ms())
    }

    /// One record with `value` and `timestamp` (CreateTime), in a batch with the header fields
    /// of `spec`.
    fn batch_at(spec: BatchSpec, value: &str, timestamp: i64) -> bytes::Bytes {
        let record = Record {
            offset: 0,
            timestamp,
            key: None,
            value: Some(bytes::Bytes::copy_from_slice(value.as_bytes())),
            headers: Vec::new(),
        };
        bytes::Bytes::from(encode_batch(&spec, &[record]).expect("encode"))
    }

    fn idempotent_batch(seq: i32, value: &str) -> bytes::Bytes {
        idempotent_batch_at(seq, value, now_ms())
    }

    /// A batch of producer 42 with sequence `seq` and the record's timestamp `timestamp`.
    fn idempotent_batch_at(seq: i32, value: &str, timestamp: i64) -> bytes::Bytes {
        let spec = BatchSpec {
            codec: Codec::None,
            producer_id: 42,
            producer_epoch: 0,
            base_sequence: seq,
            ..BatchSpec::default()
        };
        batch_at(spec, value, timestamp)
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
        let Loaded {
            producers: states,
            snapshot_offset,
            ..
        } = load_producers(&log, now_ms());
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

    /// A producer whose records carry old CreateTime timestamps (a backfill, a mirror) keeps
    /// its idempotence across a restart: the replayed state is not expired by the first
    /// expiration check, and a retry of its last batch is still a duplicate. Found by the
    /// simulator (replicated seed 1216), whose records are stamped with simulated time.
    #[test]
    fn replayed_producers_are_not_expired_for_their_records_old_timestamps() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = Log::open(dir.path(), LogConfig::default(), now_ms()).expect("open");
        // Ten days before now: beyond the default producer.id.expiration.ms of one day.
        let old = |seq| idempotent_batch_at(seq, "old", now_ms() - 10 * 86_400_000);
        for seq in 0..2 {
            log.append_as_leader(&old(seq), 0, now_ms())
                .expect("append");
        }
        let restarted_at = now_ms();
        let mut states = load_producers(&log, restarted_at).producers;
        assert_eq!(states.expire(restarted_at + 1_000, 86_400_000), 0);
        assert!(matches!(
            states.check(&header_of(&old(1))),
            Check::Duplicate(b) if b.first_offset == 1
        ));
        // Idle for the whole expiration period after the restart: then it goes.
        assert_eq!(states.expire(restarted_at + 86_400_001, 86_400_000), 1);
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
            let Loaded {
                producers: states,
                snapshot_offset,
                ..
            } = load_producers(&log, now_ms());
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

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "t-0: leader epoch 2 after 3")]
    fn a_leader_epoch_going_backwards_is_a_bug() {
        let dir = tempfile::tempdir().expect("temp dir");
        let part = partition_on_slow_disk(dir.path(), Duration::ZERO);
        let state = |leader_epoch| PartitionState {
            leader_epoch,
            partition_epoch: leader_epoch,
            replicas: vec![1, 2],
            isr: vec![1, 2],
        };
        part.apply_state(2, state(3));
        assert!(!part.role().is_leader, "follows node 2 in epoch 3");
        part.apply_state(1, state(2));
    }

    /// A follower names a fetch position only while it follows in the fetch's epoch: once it leads
    /// (or follows a newer epoch), its log may hold records the old leader never sent, and a fetch
    /// of the old epoch naming that end would count them as copies of the old leader's.
    #[test]
    fn a_follower_names_no_fetch_position_once_it_leads_or_follows_another_epoch() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = Log::open(dir.path(), LogConfig::default(), now_ms()).expect("open");
        let state = |leader_epoch| PartitionState {
            leader_epoch,
            partition_epoch: leader_epoch,
            replicas: vec![1, 2],
            isr: vec![1, 2],
        };
        let role = Role {
            is_leader: false,
            leader_epoch: 1,
        };
        let part = Partition::new("t", 0, Uuid::nil(), 2, log, &state(1), role);
        assert_eq!(part.follower_fetch_position(1), Some((0, 0)));
        assert_eq!(
            part.follower_fetch_position(2),
            None,
            "not the epoch it follows"
        );
        part.apply_state(1, state(2));
        assert_eq!(part.follower_fetch_position(1), None, "follows epoch 2 now");
        assert_eq!(part.follower_fetch_position(2), Some((0, 0)));
        part.apply_state(2, state(3));
        assert_eq!(part.follower_fetch_position(2), None, "leads epoch 3");
        assert_eq!(
            part.follower_fetch_position(3),
            None,
            "a leader fetches from nobody"
        );
    }
}
