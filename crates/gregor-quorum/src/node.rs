//! [`Quorum`]: one node's part of the controller quorum — its Raft instance, the shared
//! controller state, and the write path of the active controller.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use gregor_log::{Disk, FaultInjector};
use gregor_meta::config::StaticBrokerConfig;
use gregor_meta::{Controller, ControllerResult, MetadataImage, MetadataRecord};
use openraft::error::{CheckIsLeaderError, ClientWriteError, InitializeError, RaftError};
use openraft::network::RaftNetworkFactory;
use openraft::{BasicNode, CommittedLeaderId, Membership, SnapshotPolicy};
use tokio::sync::{mpsc, watch};
use tracing::{info, warn};

use crate::metadata_fetch::MetadataFetch;
use crate::state_machine::{encode_image, write_snapshot_file, Shared, StoredSnapshot};
use crate::{
    ApplyListener, LogId, LogStore, MetadataBatch, NodeId, QuorumError, Raft, SnapshotMeta,
    StateMachineStore, StoredMembership, TypeConfig, Vote,
};

/// How this node takes part.
#[derive(Debug, Clone)]
pub struct QuorumConfig {
    /// `node.id`.
    pub node_id: NodeId,
    /// `controller.quorum.voters`: id -> `host:port` of its controller listener.
    pub voters: BTreeMap<NodeId, String>,
    /// The metadata log directory (`<data dir>/__cluster_metadata-0`).
    pub dir: PathBuf,
    /// Disk faults (tests and the simulator).
    pub faults: Option<Arc<FaultInjector>>,
    /// `controller.quorum.election.timeout.ms` (T): a follower that hears nothing from a leader
    /// for a random time between T/2 and T starts an election (openraft waits twice as long on a
    /// voter that has seen a longer log elsewhere), so an election takes at most 2T.
    pub election_timeout_ms: u64,
    /// How often the leader sends heartbeats (must be well under the election timeout).
    pub heartbeat_interval_ms: u64,
    /// `metadata.log.max.record.bytes.between.snapshots`.
    pub snapshot_bytes: u64,
    /// This node's static settings (the controller's defaults).
    pub static_config: StaticBrokerConfig,
    /// Seed for topic ids and placement.
    pub seed: u64,
    /// The clock, in milliseconds (injected so the simulator controls it).
    pub now_ms: i64,
}

/// Why a write did not commit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// Another node is (or no node is known to be) the active controller. Retriable.
    #[error("this node is not the active controller")]
    NotController { leader: Option<NodeId> },
    /// Not committed in time (no majority reachable, typically). It may still commit later.
    #[error("metadata write not committed in time")]
    Timeout,
    /// The quorum is shutting down or its storage failed.
    #[error("controller quorum unavailable: {0}")]
    Unavailable(String),
}

/// One node's quorum member.
pub struct Quorum {
    raft: Raft,
    node_id: NodeId,
    log: LogStore,
    shared: Arc<Shared>,
    /// Serializes controller operations (Kafka's controller is single-threaded); holds the term
    /// whose heartbeat sessions the controller has.
    write_lock: tokio::sync::Mutex<u64>,
    /// The Raft heartbeat interval: a follower that heard no leader for a few of them has
    /// reason to think it gone (see [`Quorum::leader_unheard`]).
    heartbeat: Duration,
    snapshots: tokio::task::JoinHandle<()>,
    /// Told how long each committed write took (see [`Quorum::observe_commits`]).
    commit_observer: std::sync::OnceLock<CommitObserver>,
}

/// What [`Quorum::observe_commits`] calls with a write's commit latency.
pub type CommitObserver = Box<dyn Fn(Duration) + Send + Sync>;

impl Quorum {
    /// Opens the metadata log and state, converts a pre-quorum log, starts Raft and joins (or
    /// forms) the quorum. Committed entries are applied (through `listener`) before this returns.
    pub async fn start<N: RaftNetworkFactory<TypeConfig>>(
        config: QuorumConfig,
        network: N,
        listener: Arc<dyn ApplyListener>,
    ) -> Result<Quorum, QuorumError> {
        Self::start_with(config, network, listener, |_| {}).await
    }

    /// [`Quorum::start`] with a last say over openraft's settings before they are validated.
    /// The deterministic simulator (gregor-sim) uses it to pin each node's election timeout to
    /// a one-millisecond window drawn from its seed: openraft draws the timeout from
    /// `rand::thread_rng()`, which no seed controls.
    pub async fn start_with<N: RaftNetworkFactory<TypeConfig>>(
        config: QuorumConfig,
        network: N,
        listener: Arc<dyn ApplyListener>,
        adjust: impl FnOnce(&mut openraft::Config),
    ) -> Result<Quorum, QuorumError> {
        let members = members_of(&config);
        let stores = open_stores(&config, listener)?;
        let (log_store, state_machine, shared) = (stores.log, stores.state_machine, stores.shared);
        let mut snapshot_requests = stores.snapshot_requests;
        let mut raft_config = openraft::Config {
            cluster_name: "gregor".into(),
            // openraft doubles a voter's wait once it has seen a longer log elsewhere; drawing
            // from [T/2, T) keeps every election within two election timeouts.
            election_timeout_min: (config.election_timeout_ms / 2).max(2),
            election_timeout_max: config.election_timeout_ms.max(3),
            heartbeat_interval: config.heartbeat_interval_ms,
            snapshot_policy: SnapshotPolicy::Never,
            // A snapshot replaces the entries it covers; a peer further behind gets the snapshot.
            max_in_snapshot_log_to_keep: 0,
            install_snapshot_timeout: config.election_timeout_ms.max(1000) * 5,
            ..Default::default()
        };
        adjust(&mut raft_config);
        let raft_config = raft_config
            .validate()
            .map_err(|e| QuorumError::Raft(e.to_string()))?;
        let log_reader = log_store.clone();
        let raft = Raft::new(
            config.node_id,
            Arc::new(raft_config),
            network,
            log_store,
            state_machine,
        )
        .await
        .map_err(|e| QuorumError::Raft(e.to_string()))?;
        let snapshot_raft = raft.clone();
        let snapshots = tokio::spawn(async move {
            while snapshot_requests.recv().await.is_some() {
                if snapshot_raft.trigger().snapshot().await.is_err() {
                    return;
                }
            }
        });
        let quorum = Quorum {
            raft,
            node_id: config.node_id,
            log: log_reader,
            shared,
            write_lock: tokio::sync::Mutex::new(0),
            heartbeat: Duration::from_millis(config.heartbeat_interval_ms.max(1)),
            snapshots,
            commit_observer: std::sync::OnceLock::new(),
        };
        quorum.join(&config, members).await?;
        Ok(quorum)
    }

    /// Forms the quorum on first start (every voter proposes the same configured membership;
    /// whichever is elected first commits it), or checks the configured voters against the
    /// stored ones.
    async fn join(
        &self,
        config: &QuorumConfig,
        members: BTreeMap<NodeId, BasicNode>,
    ) -> Result<(), QuorumError> {
        let is_voter = members.contains_key(&config.node_id);
        let initialized = self
            .raft
            .is_initialized()
            .await
            .map_err(|e| QuorumError::Raft(e.to_string()))?;
        if !initialized && is_voter {
            match self.raft.initialize(members.clone()).await {
                Ok(()) => {
                    info!(voters = ?members.keys().collect::<Vec<_>>(), "controller quorum initialized")
                }
                Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {}
                Err(e) => return Err(QuorumError::Raft(e.to_string())),
            }
        } else {
            let stored: BTreeSet<NodeId> = self
                .raft
                .metrics()
                .borrow()
                .membership_config
                .membership()
                .voter_ids()
                .collect();
            let configured: BTreeSet<NodeId> = members.keys().copied().collect();
            if initialized && stored != configured {
                return Err(QuorumError::VotersChanged {
                    configured: format!("{configured:?}"),
                    stored: format!("{stored:?}"),
                });
            }
        }
        if members.len() == 1 && is_voter {
            // A quorum of one need not wait an election timeout to lead.
            let _ = self.raft.trigger().elect().await;
        }
        Ok(())
    }

    /// The Raft instance.
    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// What the controller listener serves: Raft and the metadata fetches of broker-only nodes.
    pub fn handle(&self) -> QuorumHandle {
        QuorumHandle {
            raft: self.raft.clone(),
            shared: self.shared.clone(),
            log: self.log.clone(),
        }
    }

    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    /// The committed image this node has applied.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.shared.image()
    }

    /// Reads the controller (configs, describe) without changing it.
    pub fn read<R>(&self, f: impl FnOnce(&Controller) -> R) -> R {
        f(&self.shared.lock_controller())
    }

    /// Changes the controller's volatile state, what is not in the metadata log (heartbeat
    /// sessions), without waiting for the write path.
    pub fn update_volatile<R>(&self, f: impl FnOnce(&mut Controller) -> R) -> R {
        f(&mut self.shared.lock_controller())
    }

    /// The active controller as this node knows it.
    pub fn active_controller(&self) -> Option<NodeId> {
        self.raft.metrics().borrow().current_leader
    }

    /// The controller listener address of a voter.
    pub fn voter_address(&self, id: NodeId) -> Option<String> {
        self.raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .get_node(&id)
            .map(|n| n.addr.clone())
    }

    /// Calls `observe` with the time each write of records took from being handed to Raft
    /// until committed and applied here (Kafka's raft-metrics commit latency). Set once.
    pub fn observe_commits(&self, observe: CommitObserver) {
        let _ = self.commit_observer.set(observe);
    }

    /// The current Raft term as this node knows it.
    pub fn term(&self) -> u64 {
        self.raft.metrics().borrow().current_term
    }

    /// Index of the last applied entry plus one (0: nothing applied yet).
    pub fn applied_index(&self) -> u64 {
        *self.shared.applied.borrow()
    }

    /// Waits until this node has applied everything below `index` (see
    /// [`Quorum::applied_index`]), at most `timeout`. Returns whether it has.
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> bool {
        self.shared.wait_applied(index, timeout).await
    }

    /// Waits until some node is known to be the active controller, at most `timeout`.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Option<NodeId> {
        let mut rx = self.raft.metrics();
        let got = tokio::time::timeout(timeout, rx.wait_for(|m| m.current_leader.is_some())).await;
        match got {
            Ok(Ok(m)) => m.current_leader,
            _ => None,
        }
    }

    /// Returns once this node no longer names `from` as the active controller (another one,
    /// or none).
    pub async fn wait_leader_change(&self, from: Option<NodeId>) {
        let mut rx = self.raft.metrics();
        // An error means the Raft stopped (a fatal storage error): the leader it last named
        // stays what this node reports, so returning would only send a caller that retries on
        // a change straight back here, in a loop that never yields. Nothing changes any more.
        if rx.wait_for(|m| m.current_leader != from).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Runs a controller operation on the active controller: its records are committed by the
    /// quorum and applied (here and, as they learn of it, on every node) before this returns.
    /// Operations run one at a time, each against the image with every earlier one applied.
    /// Returns the response and the applied index after the write.
    ///
    /// An operation that writes no records (a refusal, a no-op) is answered only once a quorum
    /// round has confirmed, after the decision, that this node still leads: a deposed leader
    /// that has not heard of its successor would otherwise answer from an image the cluster
    /// has moved past (an "unknown topic" for a topic the new leader created; gregor-sim's
    /// `wrong-answer`).
    pub async fn write<T>(
        &self,
        timeout: Duration,
        op: impl FnOnce(&mut Controller) -> ControllerResult<T>,
    ) -> Result<(T, u64), WriteError> {
        self.write_with(timeout, true, op).await
    }

    /// [`Quorum::write`] without the leadership confirmation for an operation that writes no
    /// records: for broker heartbeats and the controller's periodic checks, whose no-op answers
    /// depend on nothing another controller could have changed since this one led, and which
    /// must not wait for a quorum round (a slow follower would delay every heartbeat).
    pub async fn write_unconfirmed<T>(
        &self,
        timeout: Duration,
        op: impl FnOnce(&mut Controller) -> ControllerResult<T>,
    ) -> Result<(T, u64), WriteError> {
        self.write_with(timeout, false, op).await
    }

    async fn write_with<T>(
        &self,
        timeout: Duration,
        confirm: bool,
        op: impl FnOnce(&mut Controller) -> ControllerResult<T>,
    ) -> Result<(T, u64), WriteError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut term_seen = tokio::time::timeout_at(deadline, self.write_lock.lock())
            .await
            .map_err(|_| WriteError::Timeout)?;
        self.wait_ready_to_decide(deadline).await?;
        let ControllerResult { records, response } = {
            let mut controller = self.shared.lock_controller();
            let term = self.term();
            if *term_seen != term {
                // Heartbeat sessions from an earlier term are stale: every broker gets a full
                // session from now.
                controller.reset_sessions();
                *term_seen = term;
            }
            let mut result = op(&mut controller);
            // A new log's first write carries the bootstrap records ahead of its own.
            let mut records = controller.bootstrap_records_due();
            records.append(&mut result.records);
            result.records = records;
            result
        };
        if records.is_empty() {
            if confirm && !unconfirmed_planted() {
                self.confirm_leadership(deadline).await?;
            }
            return Ok((response, self.applied_index()));
        }
        let batch = MetadataBatch {
            records: records.iter().map(MetadataRecord::encode).collect(),
        };
        let handed = tokio::time::Instant::now();
        match tokio::time::timeout_at(deadline, self.raft.client_write(batch)).await {
            Err(_) => Err(WriteError::Timeout),
            Ok(Ok(r)) => {
                if let Some(observe) = self.commit_observer.get() {
                    observe(handed.elapsed());
                }
                Ok((response, r.log_id.index + 1))
            }
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
                Err(WriteError::NotController {
                    leader: f.leader_id,
                })
            }
            Ok(Err(RaftError::APIError(e))) => Err(WriteError::Unavailable(e.to_string())),
            Ok(Err(RaftError::Fatal(e))) => Err(WriteError::Unavailable(e.to_string())),
        }
    }

    /// Whether this node follows a leader it has not heard from for three Raft heartbeat
    /// intervals: most likely gone, with an election to come. Clients are then better sent to
    /// a broker that forwards their admin requests than to it.
    pub fn leader_unheard(&self) -> bool {
        let (leading, leader) = {
            let m = self.raft.metrics();
            let m = m.borrow();
            (m.state == openraft::ServerState::Leader, m.current_leader)
        };
        if leading || leader.is_none() {
            return false;
        }
        let contact = *self
            .shared
            .leader_contact
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        contact.is_none_or(|t| t.elapsed() > self.heartbeat * 3)
    }

    /// Waits until this node leads and has applied its whole log, the entry that began its term
    /// included: an operation is decided against every earlier committed one.
    ///
    /// No quorum round confirms the leadership here (openraft's `ensure_linearizable` would,
    /// with a timeout of one Raft heartbeat interval: a follower busy syncing its log for longer
    /// failed every controller operation, heartbeats and fencing included). An operation that
    /// writes records is confirmed by their commit; one that writes none (a heartbeat that
    /// changes nothing) is answered from this node's committed state.
    ///
    /// openraft restores a node that restarts within its own term as that term's leader, with
    /// no new blank entry: entries its earlier incarnation appended but never saw commit are
    /// still in its log, and commit ahead of this write. Deciding against an image without them
    /// built records on the wrong base (a partition led by a broker outside its ISR, found by
    /// gregor-sim: --replication --admin --power-loss --seed 70). So the whole log is applied
    /// first.
    async fn wait_ready_to_decide(&self, deadline: tokio::time::Instant) -> Result<(), WriteError> {
        let me = Some(self.node_id);
        let mut metrics = self.raft.metrics();
        let ready = metrics.wait_for(|m| {
            m.current_leader != me
                || m.last_log_index
                    .is_none_or(|end| m.last_applied.is_some_and(|a| a.index >= end))
        });
        match tokio::time::timeout_at(deadline, ready).await {
            Err(_) => return Err(WriteError::Timeout),
            Ok(Err(_)) => return Err(WriteError::Unavailable("the Raft stopped".into())),
            Ok(Ok(_)) => {}
        }
        let leader = metrics.borrow().current_leader;
        if leader != me {
            return Err(WriteError::NotController { leader });
        }
        Ok(())
    }

    /// Waits until a quorum round confirms this node still leads (openraft's
    /// `ensure_linearizable`), retrying rounds that found no quorum in time until `deadline`.
    /// The caller holds the write lock and has applied its whole log, so nothing it decided on
    /// can be older than what the confirmed leader has committed.
    async fn confirm_leadership(&self, deadline: tokio::time::Instant) -> Result<(), WriteError> {
        loop {
            let round = tokio::time::timeout_at(deadline, self.raft.ensure_linearizable());
            match round.await {
                Err(_) => return Err(WriteError::Timeout),
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f)))) => {
                    return Err(WriteError::NotController {
                        leader: f.leader_id,
                    })
                }
                Ok(Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(_)))) => {
                    // Not refuted, not confirmed: the next round may reach a quorum. A short
                    // pause keeps a round that fails at once from spinning.
                    tokio::time::sleep(self.heartbeat.min(Duration::from_millis(50))).await;
                }
                Ok(Err(RaftError::Fatal(e))) => return Err(WriteError::Unavailable(e.to_string())),
            }
        }
    }

    /// Stops Raft, then closes the metadata log cleanly: the next start skips its recovery.
    pub async fn shutdown(&self) {
        self.snapshots.abort();
        if let Err(e) = self.raft.shutdown().await {
            warn!(error = %e, "controller quorum did not stop cleanly");
        }
        // Raft's core task has ended: nothing appends to, truncates or purges the log now.
        if let Err(e) = self.log.close() {
            warn!(error = %e, "metadata log not closed cleanly");
        }
    }
}

/// Whether the simulation planted [`crate::simulation::PlantedBug::DecideUnconfirmed`].
fn unconfirmed_planted() -> bool {
    #[cfg(feature = "simulation")]
    {
        crate::simulation::planted(crate::simulation::PlantedBug::DecideUnconfirmed)
    }
    #[cfg(not(feature = "simulation"))]
    {
        false
    }
}

fn members_of(config: &QuorumConfig) -> BTreeMap<NodeId, BasicNode> {
    config
        .voters
        .iter()
        .map(|(id, addr)| (*id, BasicNode::new(addr)))
        .collect()
}

/// The storage a node's Raft runs on, opened.
struct Stores {
    log: LogStore,
    state_machine: StateMachineStore,
    shared: Arc<Shared>,
    /// The state machine's requests for a snapshot.
    snapshot_requests: mpsc::UnboundedReceiver<()>,
}

/// Opens the metadata log and the state machine in `config.dir` (converting a pre-quorum log)
/// and checks that the snapshot covers what the log lacks.
fn open_stores(
    config: &QuorumConfig,
    listener: Arc<dyn ApplyListener>,
) -> Result<Stores, QuorumError> {
    let disk = match &config.faults {
        Some(f) => Disk::with_faults(f.clone()),
        None => Disk::real(),
    };
    disk.create_dir_all(&config.dir)?;
    let log = LogStore::open(&config.dir, config.faults.clone(), config.now_ms)?;
    if !log.has_quorum_state() {
        convert_single_node_log(&log, &disk, config, &members_of(config))?;
    }
    let shared = Arc::new(Shared {
        controller: Mutex::new(Controller::new(config.static_config.clone(), config.seed)),
        image: RwLock::new(Arc::new(MetadataImage::new())),
        applied: watch::channel(0).0,
        listener,
        snapshot: Mutex::new(None),
        watermark: log.watermark().clone(),
        dir: config.dir.clone(),
        disk,
        leader_contact: Mutex::new(None),
    });
    let (want_snapshot, snapshot_requests) = mpsc::unbounded_channel();
    let state_machine =
        StateMachineStore::open(shared.clone(), config.snapshot_bytes.max(1), want_snapshot)?;
    log.check_snapshot_covers_purged()?;
    Ok(Stores {
        log,
        state_machine,
        shared,
        snapshot_requests,
    })
}

/// The log store and the state machine exactly as [`Quorum::start`] opens them from `config`
/// (its Raft settings aside), without a Raft: for tests of the storage itself (openraft's
/// conformance suite, power cuts).
pub fn open_storage(
    config: &QuorumConfig,
    listener: Arc<dyn ApplyListener>,
) -> Result<(LogStore, StateMachineStore), QuorumError> {
    let stores = open_stores(config, listener)?;
    Ok((stores.log, stores.state_machine))
}

/// Most entries one FetchMetadata answer carries.
const MAX_FETCH_ENTRIES: u64 = 512;

/// A voter's side of the controller listener (cheap to clone).
#[derive(Clone)]
pub struct QuorumHandle {
    raft: Raft,
    shared: Arc<Shared>,
    log: LogStore,
}

impl QuorumHandle {
    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// This voter just served a leader's AppendEntries.
    pub fn note_leader_contact(&self) {
        *self
            .shared
            .leader_contact
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(tokio::time::Instant::now());
    }

    /// Committed metadata from index `from` on for a broker-only node: entries this voter has
    /// applied (so committed), or its snapshot when they were dropped; waits up to `max_wait`
    /// when there is nothing new.
    pub async fn fetch_metadata(
        &self,
        from: u64,
        max_wait: Duration,
    ) -> Result<MetadataFetch, QuorumError> {
        use crate::metadata_fetch::MetadataUpdate;
        if *self.shared.applied.borrow() <= from {
            let mut rx = self.shared.applied.subscribe();
            let _ = tokio::time::timeout(max_wait, rx.wait_for(|a| *a > from)).await;
        }
        let leader = self.raft.metrics().borrow().current_leader;
        let applied = *self.shared.applied.borrow();
        let log_start = self.log.first_index();
        if from < log_start {
            let snapshot = self
                .shared
                .snapshot
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            if let Some(s) = snapshot {
                return Ok(MetadataFetch {
                    leader,
                    update: MetadataUpdate::Snapshot {
                        last_index: s.meta.last_log_id.map_or(0, |l| l.index),
                        data: s.data,
                    },
                });
            }
        }
        let end = applied.min(from.saturating_add(MAX_FETCH_ENTRIES));
        let entries = if from < end {
            self.log.read_range(from as i64, end as i64)?
        } else {
            Vec::new()
        };
        Ok(MetadataFetch {
            leader,
            update: MetadataUpdate::Entries(entries),
        })
    }
}

/// A metadata log written before the quorum existed holds plain metadata records and no vote:
/// its records become a snapshot of a cluster of one (this node), and the log restarts after
/// it. A new, empty log just gets its (empty) vote file, which marks it as a quorum log.
fn convert_single_node_log(
    store: &LogStore,
    disk: &Disk,
    config: &QuorumConfig,
    members: &BTreeMap<NodeId, BasicNode>,
) -> Result<(), QuorumError> {
    let log = store.log();
    let end = log.log_end_offset();
    if end <= log.log_start_offset() {
        return store.reset_after_empty();
    }
    let mut image = MetadataImage::new();
    let mut replayed = 0usize;
    crate::log_store::for_each_record(log, log.log_start_offset(), end, |_, value| {
        let record = MetadataRecord::decode(value).map_err(|e| e.to_string())?;
        image.apply(&record).map_err(|e| e.to_string())?;
        replayed += 1;
        Ok(())
    })?;
    if members.len() != 1 || !members.contains_key(&config.node_id) {
        return Err(QuorumError::VotersChanged {
            configured: format!("{:?}", members.keys().collect::<Vec<_>>()),
            stored: format!("[{}] (a single-node metadata log)", config.node_id),
        });
    }
    let last = LogId::new(CommittedLeaderId::new(0, config.node_id), end as u64 - 1);
    let membership = Membership::new(vec![members.keys().copied().collect()], members.clone());
    let snapshot = StoredSnapshot {
        meta: SnapshotMeta {
            last_log_id: Some(last),
            last_membership: StoredMembership::new(Some(last), membership),
            snapshot_id: format!("converted-{}", last.index),
        },
        data: encode_image(&image),
    };
    write_snapshot_file(disk, store.dir(), &snapshot).map_err(|reason| QuorumError::File {
        path: store.dir().to_path_buf(),
        reason,
    })?;
    store.reset_after(last, Vote::new(0, config.node_id))?;
    info!(
        records = replayed,
        topics = image.topics().len(),
        "converted the single-node metadata log into a quorum snapshot"
    );
    Ok(())
}
