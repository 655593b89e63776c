//! The metadata shell: the controller state machine, its log (`__cluster_metadata-0` in the data
//! directory) and the image every request handler reads.
//!
//! A single node is a cluster of one: admin requests go through the controller, which returns
//! records; the records are appended (durably) to the metadata log, then replayed into the
//! controller and the image, and the resulting delta drives the replica manager. Requests are
//! handled one at a time, as Kafka's controller does. At start-up the log is replayed to rebuild
//! the image. A quorum (openraft) will replace the local log without changing this flow.

use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};

use bytes::Bytes;
use gregor_log::records::{decode_batch, encode_batch, BatchSpec, Record};
use gregor_log::{Log, LogConfig, LogError};
use gregor_meta::config::StaticBrokerConfig;
use gregor_meta::{Controller, ControllerResult, MetadataDelta, MetadataImage, MetadataRecord};
use tracing::{info, warn};

use crate::replica::ReplicaManager;
use crate::util::{blocking, now_ms};

/// Directory of the metadata log inside the data directory.
pub const METADATA_LOG_DIR: &str = "__cluster_metadata-0";

#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("metadata log: {0}")]
    Log(#[from] LogError),
    #[error("metadata log holds an unreadable record at offset {offset}: {reason}")]
    Corrupt { offset: i64, reason: String },
}

struct Inner {
    controller: Controller,
    log: Arc<Log>,
}

pub struct MetadataManager {
    node_id: i32,
    inner: tokio::sync::Mutex<Inner>,
    image: RwLock<Arc<MetadataImage>>,
    static_config: StaticBrokerConfig,
}

impl MetadataManager {
    /// Opens the metadata log and replays it.
    pub fn open(
        data_dir: &Path,
        node_id: i32,
        static_config: StaticBrokerConfig,
    ) -> Result<MetadataManager, MetadataError> {
        let log = Log::open(
            &data_dir.join(METADATA_LOG_DIR),
            LogConfig::default(),
            now_ms(),
        )?;
        let seed = rand_seed();
        let mut controller = Controller::new(static_config.clone(), seed);
        let mut offset = log.log_start_offset();
        let end = log.log_end_offset();
        let mut replayed = 0usize;
        while offset < end {
            let read = log.read(offset, 1 << 20, None)?;
            let Some(next) = read.next_offset else { break };
            let mut rest: &[u8] = &read.records;
            while !rest.is_empty() {
                let (header, records) = decode_batch(rest).map_err(|e| MetadataError::Corrupt {
                    offset,
                    reason: e.to_string(),
                })?;
                for r in records {
                    let value = r.value.unwrap_or_default();
                    let record =
                        MetadataRecord::decode(&value).map_err(|e| MetadataError::Corrupt {
                            offset: r.offset,
                            reason: e.to_string(),
                        })?;
                    controller
                        .replay(&record)
                        .map_err(|e| MetadataError::Corrupt {
                            offset: r.offset,
                            reason: e.to_string(),
                        })?;
                    replayed += 1;
                }
                rest = &rest[header.size()..];
            }
            offset = next;
        }
        info!(
            records = replayed,
            topics = controller.image().topics().len(),
            "metadata log replayed"
        );
        let image = Arc::new(controller.image().clone());
        Ok(MetadataManager {
            node_id,
            inner: tokio::sync::Mutex::new(Inner {
                controller,
                log: Arc::new(log),
            }),
            image: RwLock::new(image),
            static_config,
        })
    }

    pub fn node_id(&self) -> i32 {
        self.node_id
    }

    pub fn static_config(&self) -> &StaticBrokerConfig {
        &self.static_config
    }

    /// The latest committed image.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.image
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Applies the whole image to the replica manager (start-up).
    pub async fn apply_all_to(&self, replicas: &ReplicaManager) {
        let inner = self.inner.lock().await;
        let mut delta = MetadataDelta::default();
        let image = inner.controller.image();
        for topic in image.topics().values() {
            for (index, p) in &topic.partitions {
                delta.changed_partitions.insert(
                    gregor_meta::TopicIdPartition {
                        topic_id: topic.id,
                        partition: *index,
                    },
                    gregor_meta::PartitionDelta {
                        topic: topic.name.clone(),
                        before: None,
                        after: Some(p.clone()),
                    },
                );
            }
        }
        replicas.apply(
            &inner.controller.config_view(),
            &delta.local_changes(self.node_id),
        );
    }

    /// Runs a controller operation: its records are made durable in the metadata log, replayed,
    /// and their delta applied to the replica manager before the response is returned.
    pub async fn submit<T: Send + 'static>(
        &self,
        replicas: &ReplicaManager,
        op: impl FnOnce(&mut Controller) -> ControllerResult<T>,
    ) -> Result<(T, MetadataDelta), MetadataError> {
        let mut inner = self.inner.lock().await;
        let ControllerResult { records, response } = op(&mut inner.controller);
        if records.is_empty() {
            return Ok((response, MetadataDelta::default()));
        }
        let batch = encode_records(&records)?;
        let log = inner.log.clone();
        blocking(move || log.append_as_leader(&batch, 0, now_ms())).await?;
        let mut delta = MetadataDelta::default();
        for r in &records {
            match inner.controller.replay(r) {
                Ok(d) => delta.merge(d),
                // The controller produced it from the same image: a bug, not bad input.
                Err(e) => {
                    warn!(error = %e, record = ?r, "controller produced a record its image rejects")
                }
            }
        }
        *self.image.write().unwrap_or_else(PoisonError::into_inner) =
            Arc::new(inner.controller.image().clone());
        let view = inner.controller.config_view();
        replicas.apply(&view, &delta.local_changes(self.node_id));
        let node = self.node_id.to_string();
        let broker_wide = delta.changed_configs.iter().any(|r| {
            r.resource_type == gregor_meta::ConfigResourceType::Broker
                && (r.name.is_empty() || r.name == node)
        });
        if broker_wide {
            // Broker defaults of topic configs reach every running log.
            replicas.reconfigure_all(&view);
        } else {
            for resource in &delta.changed_configs {
                if resource.resource_type == gregor_meta::ConfigResourceType::Topic {
                    replicas.reconfigure(&resource.name, &view);
                }
            }
        }
        Ok((response, delta))
    }

    /// Reads the controller (configs, describe) without changing it.
    pub async fn read<R>(&self, f: impl FnOnce(&Controller) -> R) -> R {
        let inner = self.inner.lock().await;
        f(&inner.controller)
    }

    /// Syncs and closes the metadata log (clean shutdown).
    pub async fn close(&self) {
        let inner = self.inner.lock().await;
        if let Err(e) = inner.log.checkpoint() {
            warn!(error = %e, "metadata log checkpoint failed");
        }
    }
}

fn encode_records(records: &[MetadataRecord]) -> Result<Vec<u8>, LogError> {
    let now = now_ms();
    let recs: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, r)| Record {
            offset: i as i64,
            timestamp: now,
            key: None,
            value: Some(Bytes::from(r.encode())),
            headers: Vec::new(),
        })
        .collect();
    encode_batch(&BatchSpec::default(), &recs)
}

/// Seed for topic ids and placement: different per process, as Kafka's random topic ids are.
fn rand_seed() -> u64 {
    let u = uuid::Uuid::new_v4();
    let (hi, lo) = u.as_u64_pair();
    hi ^ lo
}
