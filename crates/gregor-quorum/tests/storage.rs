//! The quorum's Raft storage on its own: openraft's storage conformance suite, and power cuts at
//! every disk operation of a vote, an append, a truncation, a snapshot build and a snapshot
//! install, each followed by a restart that must find everything that was acknowledged.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::Path;
use std::sync::Arc;

use gregor_log::FaultInjector;
use gregor_meta::config::StaticBrokerConfig;
use gregor_meta::{Controller, MetadataDelta};
use gregor_quorum::{
    open_storage, ApplyListener, Entry, LogId, LogStore, QuorumConfig, StateMachineStore,
    StorageError, TypeConfig, Vote,
};
use openraft::storage::{RaftLogStorage, RaftStateMachine, StorageHelper};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{CommittedLeaderId, EntryPayload, Membership, RaftLogReader, RaftSnapshotBuilder};
use tempfile::TempDir;

struct NoListener;

impl ApplyListener for NoListener {
    fn applied(&self, _c: &Controller, _d: &MetadataDelta) {}
}

fn config(dir: &Path, faults: Option<Arc<FaultInjector>>) -> QuorumConfig {
    QuorumConfig {
        node_id: 0,
        voters: BTreeMap::from([(0, "localhost:9093".to_string())]),
        dir: dir.to_path_buf(),
        faults,
        election_timeout_ms: 1000,
        heartbeat_interval_ms: 100,
        snapshot_bytes: u64::MAX,
        static_config: StaticBrokerConfig::new(),
        seed: 7,
        now_ms: 0,
    }
}

fn open(dir: &Path, faults: Option<Arc<FaultInjector>>) -> (LogStore, StateMachineStore) {
    open_storage(&config(dir, faults), Arc::new(NoListener)).expect("the storage opens")
}

/// Fresh stores in a directory of their own, as `Quorum::start` opens them.
struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for Builder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore), StorageError> {
        let root = tempfile::tempdir().expect("a temporary directory");
        let (log, sm) = open(&root.path().join("__cluster_metadata-0"), None);
        Ok((root, log, sm))
    }
}

/// openraft's storage conformance suite, every case of it (`test_all` runs them one by one,
/// each on fresh stores, and stops at the first that fails).
#[test]
fn openraft_storage_suite_passes() {
    Suite::test_all(Builder).expect("every case of openraft's storage suite passes");
}

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, 0), index)
}

fn blank(term: u64, index: u64) -> Entry {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Blank,
    }
}

fn membership(term: u64, index: u64) -> Entry {
    let members = BTreeMap::from([(0, openraft::BasicNode::new("localhost:9093"))]);
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Membership(Membership::new(vec![[0].into()], members)),
    }
}

/// What the storage acknowledged before the power went: what a restart must still find.
#[derive(Debug, Default)]
struct Acked {
    vote: Option<Vote>,
    /// Entries whose flush was reported done, by index (dropped once a truncation of them
    /// begins: from then on they may or may not be there).
    entries: BTreeMap<u64, LogId>,
    /// The last entry a snapshot installed or built covers.
    snapshot: Option<LogId>,
}

type Step = Result<(), StorageError>;

/// Appends `entries`: acknowledged once the flush is done (what `append` reports to openraft's
/// callback; openraft does not let a test build one).
async fn append(log: &mut LogStore, entries: Vec<Entry>, acked: &mut Acked) -> Step {
    let ids: Vec<LogId> = entries.iter().map(|e| e.log_id).collect();
    log.append_durably(entries).await?;
    for id in ids {
        acked.entries.insert(id.index, id);
    }
    Ok(())
}

async fn save_vote(log: &mut LogStore, vote: Vote, acked: &mut Acked) -> Step {
    log.save_vote(&vote).await?;
    acked.vote = Some(vote);
    Ok(())
}

async fn truncate(log: &mut LogStore, since: LogId, acked: &mut Acked) -> Step {
    acked.entries.retain(|i, _| *i < since.index);
    log.truncate(since).await
}

/// A follower's log: votes in two terms, appends, a conflict truncated, commits.
async fn follower_log(log: &mut LogStore, _sm: &mut StateMachineStore, acked: &mut Acked) -> Step {
    save_vote(log, Vote::new(1, 0), acked).await?;
    let first: Vec<Entry> = (0..5).map(|i| blank(1, i)).collect();
    append(log, first, acked).await?;
    log.save_committed(Some(log_id(1, 2))).await?;
    save_vote(log, Vote::new_committed(2, 1), acked).await?;
    truncate(log, log_id(1, 3), acked).await?;
    append(log, (3..7).map(|i| blank(2, i)).collect(), acked).await?;
    log.save_committed(Some(log_id(2, 6))).await?;
    save_vote(log, Vote::new(3, 0), acked).await
}

/// A leader's snapshot of entries 0..=15 (a membership, then blanks).
async fn leader_snapshot() -> openraft::storage::Snapshot<TypeConfig> {
    let root = tempfile::tempdir().expect("a temporary directory");
    let (_log, mut sm) = open(&root.path().join("leader"), None);
    let mut entries = vec![membership(1, 0)];
    entries.extend((1..=15).map(|i| blank(2, i)));
    sm.apply(entries).await.expect("the leader applies");
    let mut builder = sm.get_snapshot_builder().await;
    builder
        .build_snapshot()
        .await
        .expect("the leader's snapshot")
}

/// A follower behind the leader's snapshot installs it, as openraft 0.9 drives it: the log is
/// purged while the state machine still writes the snapshot, then entries after it arrive.
async fn install_from_leader(
    log: &mut LogStore,
    sm: &mut StateMachineStore,
    acked: &mut Acked,
    snapshot: openraft::storage::Snapshot<TypeConfig>,
) -> Step {
    save_vote(log, Vote::new_committed(2, 1), acked).await?;
    let mut entries = vec![membership(1, 0)];
    entries.extend((1..=4).map(|i| blank(2, i)));
    append(log, entries.clone(), acked).await?;
    log.save_committed(Some(log_id(2, 4))).await?;
    sm.apply(entries).await?;
    let last = snapshot
        .meta
        .last_log_id
        .expect("the snapshot covers entries");
    log.purge(last).await?;
    let mut data = sm.begin_receiving_snapshot().await?;
    *data = Cursor::new(snapshot.snapshot.into_inner());
    sm.install_snapshot(&snapshot.meta, data).await?;
    acked.snapshot = Some(last);
    append(log, (16..19).map(|i| blank(2, i)).collect(), acked).await?;
    log.save_committed(Some(log_id(2, 18))).await?;
    sm.apply((16..19).map(|i| blank(2, i))).await?;
    Ok(())
}

/// A leader builds a snapshot of what it applied, purges the log it covers, and goes on.
async fn build_and_purge(
    log: &mut LogStore,
    sm: &mut StateMachineStore,
    acked: &mut Acked,
) -> Step {
    save_vote(log, Vote::new_committed(1, 0), acked).await?;
    let mut entries = vec![membership(1, 0)];
    entries.extend((1..6).map(|i| blank(1, i)));
    append(log, entries.clone(), acked).await?;
    log.save_committed(Some(log_id(1, 5))).await?;
    sm.apply(entries).await?;
    let snapshot = sm.get_snapshot_builder().await.build_snapshot().await?;
    let last = snapshot
        .meta
        .last_log_id
        .expect("the snapshot covers entries");
    acked.snapshot = Some(last);
    log.purge(last).await?;
    append(log, (6..9).map(|i| blank(1, i)).collect(), acked).await?;
    log.save_committed(Some(log_id(1, 8))).await
}

/// Reopens the storage after the power loss and checks it against what was acknowledged:
/// openraft's own start (the state it rebuilds, the entries it re-applies) must succeed.
async fn check_restart(dir: &Path, acked: &Acked, cut: u64) {
    let (mut log, mut sm) =
        open_storage(&config(dir, None), Arc::new(NoListener)).unwrap_or_else(|e| {
            panic!("cut after {cut} disk operations: the storage fails to open: {e}")
        });
    StorageHelper::new(&mut log, &mut sm)
        .get_initial_state()
        .await
        .unwrap_or_else(|e| {
            panic!("cut after {cut} disk operations: openraft fails to start: {e}")
        });
    let vote = log.read_vote().await.expect("the vote reads");
    if let Some(want) = acked.vote {
        assert!(
            vote.is_some_and(|v| v >= want),
            "cut after {cut} disk operations: acknowledged vote {want} forgotten, found {vote:?}"
        );
    }
    let (applied, _) = sm.applied_state().await.expect("the applied state reads");
    if let Some(snapshot) = acked.snapshot {
        assert!(
            applied.is_some_and(|a| a.index >= snapshot.index),
            "cut after {cut} disk operations: acknowledged snapshot {snapshot} lost, applied {applied:?}"
        );
    }
    let first = applied.map_or(0, |a| a.index + 1);
    let stored = log
        .try_get_log_entries(first..)
        .await
        .expect("entries read");
    let stored: BTreeMap<u64, LogId> = stored.iter().map(|e| (e.log_id.index, e.log_id)).collect();
    for (index, id) in acked.entries.range(first..) {
        assert_eq!(
            stored.get(index),
            Some(id),
            "cut after {cut} disk operations: acknowledged entry {id} lost"
        );
    }
}

/// Runs `scenario` with the power cut after 0, 1, 2, ... disk operations (a torn last write
/// kept in part, seeded by the cut), restarting after each, until a run completes uncut.
/// Returns how many cut points it tried.
fn cut_at_every_point<F>(scenario: F) -> u64
where
    F: for<'a> Fn(
        &'a mut LogStore,
        &'a mut StateMachineStore,
        &'a mut Acked,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Step> + 'a>>,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    for cut in 0.. {
        let root = tempfile::tempdir().expect("a temporary directory");
        let dir = root.path().join("__cluster_metadata-0");
        let faults = FaultInjector::power_model(root.path()).expect("a power model");
        let (mut log, mut sm) = open(&dir, Some(faults.clone()));
        faults.crash_after(Some(cut));
        let mut acked = Acked::default();
        let result = rt.block_on(scenario(&mut log, &mut sm, &mut acked));
        let cut_happened = faults.is_dead();
        if !cut_happened {
            result.expect("uncut, the scenario succeeds");
        }
        drop((log, sm));
        faults.power_loss(Some(cut)).expect("the power comes back");
        assert!(
            faults.untracked_paths().is_empty(),
            "files written around the simulated disk: {:?}",
            faults.untracked_paths()
        );
        rt.block_on(check_restart(&dir, &acked, cut));
        if !cut_happened {
            return cut + 1;
        }
    }
    unreachable!("the loop returns once a run completes uncut")
}

#[test]
fn votes_and_entries_survive_a_power_cut_at_every_disk_operation() {
    let points = cut_at_every_point(|log, sm, acked| Box::pin(follower_log(log, sm, acked)));
    assert!(points > 20, "only {points} cut points");
}

/// Issue 36: openraft purges a follower's log while its state machine still writes the
/// snapshot it installs; a cut in between left a log starting after the snapshot that was
/// not on disk, and the node failed to start ("Failed to get log entries").
#[test]
fn a_snapshot_install_survives_a_power_cut_at_every_disk_operation() {
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let snapshot = rt.block_on(leader_snapshot());
    drop(rt);
    let points = cut_at_every_point(|log, sm, acked| {
        let snapshot = openraft::storage::Snapshot {
            meta: snapshot.meta.clone(),
            snapshot: Box::new(Cursor::new(snapshot.snapshot.get_ref().clone())),
        };
        Box::pin(install_from_leader(log, sm, acked, snapshot))
    });
    assert!(points > 20, "only {points} cut points");
}

#[test]
fn a_snapshot_build_and_purge_survive_a_power_cut_at_every_disk_operation() {
    let points = cut_at_every_point(|log, sm, acked| Box::pin(build_and_purge(log, sm, acked)));
    assert!(points > 20, "only {points} cut points");
}

/// A follower's log 0..=4, purged through the leader's snapshot (15) that the state machine has
/// yet to install, as openraft leaves it just before the install runs.
async fn purged_before_install(log: &mut LogStore, sm: &mut StateMachineStore) -> LogId {
    let mut entries = vec![membership(1, 0)];
    entries.extend((1..=4).map(|i| blank(2, i)));
    log.append_durably(entries.clone()).await.expect("appended");
    sm.apply(entries).await.expect("applied");
    let last = log_id(2, 15);
    log.purge(last).await.expect("purged");
    last
}

/// openraft appends the entries after an installed snapshot while the state machine still
/// writes it: the append waits for the snapshot to be durable (the old entries are what a
/// restart would rebuild from until then), then goes on; if the snapshot cannot be written, it
/// fails instead of waiting forever.
// Paused time: were the append to wait forever, the runtime would jump to the timeout at once.
#[tokio::test(start_paused = true)]
async fn an_append_after_a_snapshot_waits_for_it_to_be_durable() {
    let snapshot = leader_snapshot().await;
    for fail in [false, true] {
        let root = tempfile::tempdir().expect("a temporary directory");
        let dir = root.path().join("__cluster_metadata-0");
        let faults = FaultInjector::power_model(root.path()).expect("a power model");
        let (mut log, mut sm) = open(&dir, Some(faults.clone()));
        purged_before_install(&mut log, &mut sm).await;
        let mut data = sm.begin_receiving_snapshot().await.expect("receiving");
        *data = Cursor::new(snapshot.snapshot.get_ref().clone());
        if fail {
            faults.crash_after(Some(0));
        }
        let writer = log.clone();
        let both = async {
            tokio::join!(
                writer.append_durably((16..19).map(|i| blank(2, i))),
                sm.install_snapshot(&snapshot.meta, data),
            )
        };
        let (appended, installed) = tokio::time::timeout(std::time::Duration::from_secs(60), both)
            .await
            .expect("the append waits only as long as the install runs");
        assert_eq!(installed.is_err(), fail, "install: {installed:?}");
        assert_eq!(appended.is_err(), fail, "append: {appended:?}");
        if !fail {
            let ids: Vec<u64> = log
                .try_get_log_entries(0..)
                .await
                .expect("read")
                .iter()
                .map(|e| e.log_id.index)
                .collect();
            assert_eq!(ids, vec![16, 17, 18]);
        }
    }
}
