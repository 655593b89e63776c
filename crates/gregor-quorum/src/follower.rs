//! A broker-only node's view of the metadata: it follows the committed metadata log by fetching
//! from the voters (as Kafka's brokers are observers of the KRaft quorum), never votes, and keeps
//! nothing on disk (at start it fetches the leader's snapshot and what follows it).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use gregor_log::Disk;
use gregor_meta::config::StaticBrokerConfig;
use gregor_meta::{Controller, MetadataDelta, MetadataImage};
use openraft::EntryPayload;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::rpc::{Connector, MetadataUpdate, RpcClient, RpcRequest, RpcResponse};
use crate::state_machine::{decode_image, replay_batch, Shared};
use crate::{ApplyListener, NodeId};

/// How long a voter holds a fetch that has nothing new.
const FETCH_WAIT: Duration = Duration::from_millis(500);

/// Pause before trying another voter after a failure.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// The least time between two warnings that no voter answers.
const UNREACHABLE_WARNING_INTERVAL: Duration = Duration::from_secs(10);

/// How a broker-only node follows the quorum.
#[derive(Debug, Clone)]
pub struct FollowerConfig {
    pub node_id: NodeId,
    /// `controller.quorum.voters`: id -> address of each voter's controller listener.
    pub voters: BTreeMap<NodeId, String>,
    pub static_config: StaticBrokerConfig,
    pub seed: u64,
}

/// A broker-only node's metadata: image, applied index and the active controller's id.
pub struct MetadataFollower {
    shared: Arc<Shared>,
    leader: watch::Receiver<Option<NodeId>>,
    task: tokio::task::JoinHandle<()>,
}

impl MetadataFollower {
    /// Starts following; the image fills as the first fetches answer.
    pub fn start<C: Connector>(
        config: FollowerConfig,
        connector: C,
        listener: Arc<dyn ApplyListener>,
    ) -> MetadataFollower {
        let shared = Arc::new(Shared {
            controller: Mutex::new(Controller::new(config.static_config.clone(), config.seed)),
            image: RwLock::new(Arc::new(MetadataImage::new())),
            applied: watch::channel(0).0,
            listener,
            snapshot: Mutex::new(None),
            // Nothing here reaches a disk; the mark only serves a voter's log store.
            watermark: crate::durable::SnapshotWatermark::new(),
            dir: std::path::PathBuf::new(),
            disk: Disk::real(),
            leader_contact: Mutex::new(None),
        });
        let (leader_tx, leader) = watch::channel(None);
        let task = tokio::spawn(follow(config, connector, shared.clone(), leader_tx));
        MetadataFollower {
            shared,
            leader,
            task,
        }
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        self.shared.image()
    }

    pub fn read<R>(&self, f: impl FnOnce(&Controller) -> R) -> R {
        f(&self.shared.lock_controller())
    }

    /// The active controller, as the last voter that answered said.
    pub fn active_controller(&self) -> Option<NodeId> {
        *self.leader.borrow()
    }

    /// Returns once this observer no longer names `from` as the active controller.
    pub async fn wait_leader_change(&self, from: Option<NodeId>) {
        let mut rx = self.leader.clone();
        // An error means the follower task stopped: the leader it last named stays what this
        // node reports, so nothing changes any more (returning would make a caller that retries
        // on a change spin).
        if rx.wait_for(|l| *l != from).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Index of the last applied entry plus one.
    pub fn applied_index(&self) -> u64 {
        *self.shared.applied.borrow()
    }

    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> bool {
        self.shared.wait_applied(index, timeout).await
    }

    /// Waits until some voter has named an active controller.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Option<NodeId> {
        let mut rx = self.leader.clone();
        let found = tokio::time::timeout(timeout, rx.wait_for(|l| l.is_some()))
            .await
            .ok()
            .and_then(|r| r.ok().and_then(|l| *l));
        found
    }

    pub fn shutdown(&self) {
        self.task.abort();
    }
}

impl Drop for MetadataFollower {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn follow<C: Connector>(
    config: FollowerConfig,
    connector: C,
    shared: Arc<Shared>,
    leader: watch::Sender<Option<NodeId>>,
) {
    let voters: Vec<(NodeId, String)> = config.voters.into_iter().collect();
    let mut clients: BTreeMap<NodeId, RpcClient<C>> = BTreeMap::new();
    let mut next_voter = 0usize;
    let mut hint: Option<NodeId> = None;
    // Failures since the last answer, and when a warning last said so.
    let mut failures = 0usize;
    let mut warned: Option<tokio::time::Instant> = None;
    loop {
        let (id, addr) = match hint.and_then(|h| voters.iter().find(|(v, _)| *v == h)) {
            Some(v) => v.clone(),
            None => {
                next_voter = (next_voter + 1) % voters.len().max(1);
                match voters.get(next_voter) {
                    Some(v) => v.clone(),
                    None => return,
                }
            }
        };
        let client = clients
            .entry(id)
            .or_insert_with(|| RpcClient::new(connector.clone(), addr));
        let from = *shared.applied.borrow();
        let request = RpcRequest::FetchMetadata {
            from,
            max_wait_ms: FETCH_WAIT.as_millis() as u64,
        };
        match client.call(&request, FETCH_WAIT * 4).await {
            Ok(RpcResponse::FetchMetadata(Ok(fetch))) => {
                failures = 0;
                leader.send_replace(fetch.leader);
                hint = fetch.leader.or(Some(id));
                if let Err(e) = apply(&shared, from, fetch.update) {
                    debug!(voter = id, error = %e, "metadata from a voter not applied");
                    hint = None;
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
            other => {
                failures += 1;
                // One voter down is a failover; none answering a whole round (e.g. every
                // controller refusing this node's certificate) is worth telling the operator.
                let due = warned.is_none_or(|w| w.elapsed() >= UNREACHABLE_WARNING_INTERVAL);
                if failures >= voters.len() && due {
                    warn!(voter = id, answer = ?other.err(), failures, "no voter answers this node's metadata fetches");
                    warned = Some(tokio::time::Instant::now());
                } else {
                    debug!(voter = id, answer = ?other.err(), "metadata fetch failed; trying another voter");
                }
                hint = None;
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
}

fn apply(shared: &Shared, from: u64, update: MetadataUpdate) -> Result<(), String> {
    let mut controller = shared.lock_controller();
    match update {
        MetadataUpdate::Entries(entries) => {
            if entries.is_empty() {
                return Ok(());
            }
            let mut delta = MetadataDelta::default();
            // Checked before anything is replayed: a batch is applied whole or not at all.
            if let Some((expected, entry)) = (from..)
                .zip(&entries)
                .find(|(expected, e)| e.log_id.index != *expected)
            {
                return Err(format!(
                    "entry {} where {expected} was expected",
                    entry.log_id
                ));
            }
            let mut last = None;
            for entry in entries {
                if let EntryPayload::Normal(batch) = &entry.payload {
                    replay_batch(&mut controller, entry.log_id, batch, &mut delta);
                }
                last = Some(entry.log_id);
            }
            shared.publish(&controller, last, &delta);
        }
        MetadataUpdate::Snapshot { last_index, data } => {
            let image = decode_image(&data)?;
            let delta = MetadataDelta::between(controller.image(), &image);
            controller.reset_image(image);
            info!(last_index, "metadata snapshot received");
            let last = openraft::LogId::new(openraft::CommittedLeaderId::new(0, 0), last_index);
            shared.publish(&controller, Some(last), &delta);
        }
    }
    Ok(())
}
