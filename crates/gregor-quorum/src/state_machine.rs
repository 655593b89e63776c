//! openraft's state machine over gregor-meta: committed metadata records are replayed into the
//! controller's image in commit order, and every change is handed to the [`ApplyListener`] (the
//! broker's replica manager). Snapshots are the image as records (`MetadataImage::to_records`).

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use gregor_log::Disk;
use gregor_meta::{Controller, MetadataDelta, MetadataImage, MetadataRecord};
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{AnyError, EntryPayload, RaftSnapshotBuilder, StorageIOError};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};
use tracing::{info, warn};

use crate::durable::SnapshotWatermark;
use crate::{
    decode, encode, Entry, LogId, QuorumError, SnapshotMeta, StorageError, StoredMembership,
    TypeConfig,
};

pub(crate) const SNAPSHOT_FILE: &str = "snapshot";

/// What the broker does with committed metadata.
pub trait ApplyListener: Send + Sync + 'static {
    /// Committed records (or a snapshot) changed the image; called in commit order, after the
    /// controller's image was updated and before the write that committed them is answered.
    fn applied(&self, controller: &Controller, delta: &MetadataDelta);
}

/// A snapshot as stored in the `snapshot` file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct StoredSnapshot {
    pub meta: SnapshotMeta,
    /// bincode of the image's records, each in gregor-meta's encoding.
    pub data: Vec<u8>,
}

/// State shared by the state machine, the snapshot builder and [`crate::Quorum`].
pub(crate) struct Shared {
    pub controller: Mutex<Controller>,
    pub image: RwLock<Arc<MetadataImage>>,
    /// Index of the last applied entry, plus one (0: nothing applied).
    pub applied: watch::Sender<u64>,
    pub listener: Arc<dyn ApplyListener>,
    /// The latest snapshot, as on disk. Its lock is held across a snapshot's write, so two
    /// writes (a build and an install) never race and an older one never replaces a newer one.
    pub snapshot: Mutex<Option<StoredSnapshot>>,
    /// What the snapshot on disk covers (shared with the log store, which purges below it).
    pub watermark: SnapshotWatermark,
    pub dir: PathBuf,
    pub disk: Disk,
    /// When this voter last served an AppendEntries (a leader's replication or heartbeat).
    pub leader_contact: Mutex<Option<tokio::time::Instant>>,
}

impl Shared {
    pub fn lock_controller(&self) -> std::sync::MutexGuard<'_, Controller> {
        self.controller
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until everything below `index` is applied, at most `timeout`; whether it is.
    pub async fn wait_applied(&self, index: u64, timeout: std::time::Duration) -> bool {
        let mut rx = self.applied.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|a| *a >= index))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        self.image
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn publish(
        &self,
        controller: &Controller,
        applied: Option<LogId>,
        delta: &MetadataDelta,
    ) {
        *self.image.write().unwrap_or_else(PoisonError::into_inner) =
            Arc::new(controller.image().clone());
        if !delta.is_empty() {
            self.listener.applied(controller, delta);
        }
        self.applied
            .send_replace(applied.map_or(0, |l| l.index + 1));
    }
}

/// The image as snapshot bytes.
pub(crate) fn encode_image(image: &MetadataImage) -> Vec<u8> {
    let records: Vec<Vec<u8>> = image
        .to_records()
        .iter()
        .map(snapshot_record)
        .map(|r| r.encode())
        .collect();
    encode(&records).expect("a vector of byte strings always encodes")
}

/// A record of the image as its snapshot holds it: itself, unless the simulator planted
/// [`crate::simulation::PlantedBug::SnapshotWithoutEpochs`].
#[cfg(feature = "simulation")]
fn snapshot_record(record: &MetadataRecord) -> std::borrow::Cow<'_, MetadataRecord> {
    use crate::simulation::{planted, PlantedBug};
    match record {
        MetadataRecord::Partition(p) if planted(PlantedBug::SnapshotWithoutEpochs) => {
            std::borrow::Cow::Owned(MetadataRecord::Partition(gregor_meta::PartitionRecord {
                leader_epoch: 0,
                partition_epoch: 0,
                ..p.clone()
            }))
        }
        other => std::borrow::Cow::Borrowed(other),
    }
}

#[cfg(not(feature = "simulation"))]
fn snapshot_record(record: &MetadataRecord) -> std::borrow::Cow<'_, MetadataRecord> {
    std::borrow::Cow::Borrowed(record)
}

/// Snapshot bytes back into an image; anything that does not decode or apply is an error.
pub(crate) fn decode_image(data: &[u8]) -> Result<MetadataImage, String> {
    let records: Vec<Vec<u8>> = decode(data).map_err(|e| e.to_string())?;
    let mut image = MetadataImage::new();
    for bytes in records {
        let record = MetadataRecord::decode(&bytes).map_err(|e| e.to_string())?;
        image.apply(&record).map_err(|e| e.to_string())?;
    }
    Ok(image)
}

pub(crate) fn read_snapshot_file(dir: &Path) -> Result<Option<StoredSnapshot>, QuorumError> {
    let path = dir.join(SNAPSHOT_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => decode(&bytes).map(Some).map_err(|e| QuorumError::File {
            path,
            reason: format!("unreadable snapshot: {e}"),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(QuorumError::File {
            path,
            reason: e.to_string(),
        }),
    }
}

pub(crate) fn write_snapshot_file(
    disk: &Disk,
    dir: &Path,
    snapshot: &StoredSnapshot,
) -> Result<(), String> {
    let bytes = encode(snapshot).map_err(|e| e.to_string())?;
    disk.write_atomic(&dir.join(SNAPSHOT_FILE), &bytes)
        .map_err(|e| e.to_string())
}

/// Makes `snapshot` the node's snapshot: the file is written and fsynced, its directory entry
/// too, before the snapshot counts (in memory and for the log store's purge). One that covers
/// no more than the current snapshot is not written (a build that an install overtook).
/// Returns whether it was written.
fn persist_snapshot(shared: &Shared, snapshot: StoredSnapshot) -> Result<bool, String> {
    let mut current = shared
        .snapshot
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let newer = current
        .as_ref()
        .is_none_or(|c| snapshot.meta.last_log_id > c.meta.last_log_id);
    if !newer {
        return Ok(false);
    }
    write_snapshot_file(&shared.disk, &shared.dir, &snapshot)?;
    shared.watermark.advance(snapshot.meta.last_log_id);
    *current = Some(snapshot);
    Ok(true)
}

/// Replays one committed batch into the controller, merging what changed into `delta`;
/// returns the record bytes. Every node skips a record that does not decode or apply the same
/// way, so images stay equal.
pub(crate) fn replay_batch(
    controller: &mut Controller,
    log_id: LogId,
    batch: &crate::MetadataBatch,
    delta: &mut MetadataDelta,
) -> u64 {
    let mut bytes_total = 0;
    for bytes in &batch.records {
        bytes_total += bytes.len() as u64;
        match MetadataRecord::decode(bytes) {
            Ok(record) => match controller.replay(&record) {
                Ok(d) => delta.merge(d),
                Err(e) => {
                    warn!(log_id = %log_id, error = %e, ?record, "committed metadata record does not apply; skipped")
                }
            },
            Err(e) => {
                warn!(log_id = %log_id, error = %e, "committed metadata record does not decode; skipped")
            }
        }
    }
    bytes_total
}

/// The state machine openraft drives.
pub struct StateMachineStore {
    shared: Arc<Shared>,
    applied: Option<LogId>,
    membership: StoredMembership,
    /// Record bytes applied since the last snapshot.
    bytes_since_snapshot: u64,
    /// `metadata.log.max.record.bytes.between.snapshots`.
    snapshot_bytes: u64,
    /// Asks the quorum's task to take a snapshot.
    want_snapshot: mpsc::UnboundedSender<()>,
}

impl StateMachineStore {
    /// A state machine starting from the stored snapshot, if any (openraft then re-applies the
    /// committed entries after it).
    pub(crate) fn open(
        shared: Arc<Shared>,
        snapshot_bytes: u64,
        want_snapshot: mpsc::UnboundedSender<()>,
    ) -> Result<StateMachineStore, QuorumError> {
        let stored = read_snapshot_file(&shared.dir)?;
        let mut sm = StateMachineStore {
            shared: shared.clone(),
            applied: None,
            membership: StoredMembership::default(),
            bytes_since_snapshot: 0,
            snapshot_bytes,
            want_snapshot,
        };
        if let Some(s) = stored {
            let image = decode_image(&s.data).map_err(|reason| QuorumError::File {
                path: shared.dir.join(SNAPSHOT_FILE),
                reason,
            })?;
            info!(
                last = ?s.meta.last_log_id,
                topics = image.topics().len(),
                "metadata snapshot loaded"
            );
            sm.install_image(image, &s.meta);
            shared.watermark.advance(s.meta.last_log_id);
            *shared
                .snapshot
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(s);
        }
        Ok(sm)
    }

    fn install_image(&mut self, image: MetadataImage, meta: &SnapshotMeta) {
        let mut controller = self.shared.lock_controller();
        let delta = MetadataDelta::between(controller.image(), &image);
        controller.reset_image(image);
        self.applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.bytes_since_snapshot = 0;
        self.shared.publish(&controller, self.applied, &delta);
    }
}

#[cfg(feature = "simulation")]
impl StateMachineStore {
    /// The planted [`crate::simulation::PlantedBug::ReloadStaleSnapshot`]: the controller's
    /// image and the published applied index go back to the stored snapshot, while openraft's
    /// own applied log id (`self.applied`) stays where it was.
    fn reload_stored_snapshot(&mut self) {
        let stored = self
            .shared
            .snapshot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let Some(image) = stored.as_ref().and_then(|s| decode_image(&s.data).ok()) else {
            return;
        };
        let last = stored.and_then(|s| s.meta.last_log_id);
        let mut controller = self.shared.lock_controller();
        let delta = MetadataDelta::between(controller.image(), &image);
        controller.reset_image(image);
        warn!(last = ?last, "planted bug: state machine reloaded from its previous snapshot");
        self.shared.publish(&controller, last, &delta);
    }
}

fn sm_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_state_machine(AnyError::error(e.to_string())).into()
}

/// Builds a snapshot of the image as it was when the builder was made.
pub struct SnapshotBuilder {
    shared: Arc<Shared>,
    data: Vec<u8>,
    meta: SnapshotMeta,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let stored = StoredSnapshot {
            meta: self.meta.clone(),
            data: std::mem::take(&mut self.data),
        };
        let snapshot = Snapshot {
            meta: stored.meta.clone(),
            snapshot: Box::new(Cursor::new(stored.data.clone())),
        };
        let (last, bytes) = (stored.meta.last_log_id, stored.data.len());
        let written = persist_snapshot(&self.shared, stored).map_err(|e| {
            StorageError::from(StorageIOError::write_snapshot(
                Some(snapshot.meta.signature()),
                AnyError::error(e),
            ))
        })?;
        if written {
            info!(last = ?last, bytes, "metadata snapshot written");
        }
        Ok(snapshot)
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        Ok((self.applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<()>, StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut out = Vec::new();
        let mut delta = MetadataDelta::default();
        let mut controller = self.shared.lock_controller();
        for entry in entries {
            self.applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(batch) => {
                    self.bytes_since_snapshot +=
                        replay_batch(&mut controller, entry.log_id, &batch, &mut delta);
                }
                EntryPayload::Membership(m) => {
                    self.membership = StoredMembership::new(Some(entry.log_id), m);
                }
            }
            out.push(());
        }
        self.shared.publish(&controller, self.applied, &delta);
        drop(controller);
        if self.bytes_since_snapshot >= self.snapshot_bytes {
            self.bytes_since_snapshot = 0;
            let _ = self.want_snapshot.send(());
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        #[cfg(feature = "simulation")]
        if crate::simulation::planted(crate::simulation::PlantedBug::ReloadStaleSnapshot) {
            self.reload_stored_snapshot();
        }
        let controller = self.shared.lock_controller();
        let data = encode_image(controller.image());
        let last = self.applied;
        SnapshotBuilder {
            shared: self.shared.clone(),
            data,
            meta: SnapshotMeta {
                last_log_id: last,
                last_membership: self.membership.clone(),
                snapshot_id: format!(
                    "{}-{}",
                    last.map_or(0, |l| l.leader_id.term),
                    last.map_or(0, |l| l.index)
                ),
            },
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data,
        };
        // The log store may be waiting for this snapshot to be durable: a failure must reach it.
        let image = decode_image(&stored.data)
            .and_then(|image| persist_snapshot(&self.shared, stored).map(|_| image))
            .map_err(|e| {
                self.shared.watermark.fail(e.clone());
                sm_err(e)
            })?;
        info!(last = ?meta.last_log_id, topics = image.topics().len(), "metadata snapshot installed");
        self.install_image(image, meta);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let s = self
            .shared
            .snapshot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        Ok(s.map(|s| Snapshot {
            meta: s.meta,
            snapshot: Box::new(Cursor::new(s.data)),
        }))
    }
}
