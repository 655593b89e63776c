//! The broker: owns the metadata shell, the replica manager and the group coordinator shell,
//! and routes each decoded request to its handler.

use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use kafka_protocol::messages::RequestKind;
use tracing::{info, warn};

use crate::config::BrokerConfig;
use crate::connection::{Handler, Reply, RequestContext};
use crate::handlers;
use crate::metadata::{MetadataError, MetadataManager};
use crate::producer_ids::ProducerIdAllocator;
use crate::replica::ReplicaManager;
use crate::util::now_ms;

/// A running broker's state, shared by all connections.
pub struct Broker {
    pub config: BrokerConfig,
    pub cluster_id: String,
    pub metadata: MetadataManager,
    pub replicas: ReplicaManager,
    pub producer_ids: ProducerIdAllocator,
    pub groups: crate::groups::Groups,
    pub incarnation: gregor_meta::Uuid,
    broker_epoch: AtomicI64,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("data directory {dir}: {source}")]
    DataDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    #[error("broker registration refused: {0}")]
    Registration(String),
}

impl Broker {
    /// Opens the data directory, replays metadata, opens the hosted logs and registers this
    /// broker with the (local) controller.
    pub async fn start(config: BrokerConfig) -> Result<Arc<Broker>, StartError> {
        let dir = config.data_dir.clone();
        let disk = gregor_log::Disk::real();
        disk.create_dir_all(&dir)
            .and_then(|()| disk.purge_deleted_dirs(&dir))
            .map_err(|e| StartError::DataDir {
                dir: dir.clone(),
                source: std::io::Error::other(e),
            })?;
        let cluster_id = crate::util::cluster_id(&dir).map_err(|source| StartError::DataDir {
            dir: dir.clone(),
            source,
        })?;
        let metadata = MetadataManager::open(&dir, config.node_id, config.settings.clone())?;
        let replicas = ReplicaManager::new(config.node_id, &dir);
        let producer_ids =
            ProducerIdAllocator::open(&dir).map_err(|source| StartError::DataDir {
                dir: dir.clone(),
                source,
            })?;
        let broker = Arc::new(Broker {
            incarnation: gregor_meta::Uuid::new_v4(),
            config,
            cluster_id,
            metadata,
            replicas,
            producer_ids,
            groups: crate::groups::Groups::new(),
            broker_epoch: AtomicI64::new(-1),
        });
        broker.metadata.apply_all_to(&broker.replicas).await;
        broker.register().await?;
        if let Err(e) = crate::groups::Groups::start_if_present(&broker).await {
            warn!(error = ?e, "group coordinator not loaded");
        }
        info!(node = broker.config.node_id, cluster_id = %broker.cluster_id, "broker started");
        Ok(broker)
    }

    /// Registers with the controller and unfences (a single node has always caught up with its
    /// own metadata log once it has replayed it).
    async fn register(&self) -> Result<(), StartError> {
        let request = gregor_meta::BrokerRegistrationRequest {
            broker_id: self.config.node_id,
            incarnation_id: self.incarnation,
            endpoints: vec![gregor_meta::BrokerEndpoint {
                name: "PLAINTEXT".into(),
                host: self.config.advertised_host.clone(),
                port: self.config.advertised_port,
                security_protocol: 0,
            }],
            rack: self.config.settings.raw("broker.rack").map(str::to_string),
        };
        let now = now_ms();
        let (epoch, _) = self
            .metadata
            .submit(&self.replicas, |c| c.register_broker(&request, now))
            .await?;
        let epoch = epoch.map_err(|e| StartError::Registration(e.message))?;
        self.broker_epoch.store(epoch, Ordering::SeqCst);
        self.heartbeat()
            .await
            .map_err(|e| StartError::Registration(e.to_string()))?;
        Ok(())
    }

    /// One broker heartbeat to the local controller, plus the controller's own periodic work.
    pub async fn heartbeat(&self) -> Result<(), MetadataError> {
        let hb = gregor_meta::BrokerHeartbeat {
            broker_id: self.config.node_id,
            broker_epoch: self.broker_epoch.load(Ordering::SeqCst),
            want_fence: false,
            want_shut_down: false,
        };
        let now = now_ms();
        let (reply, _) = self
            .metadata
            .submit(&self.replicas, |c| c.broker_heartbeat(&hb, now))
            .await?;
        if let Err(e) = reply {
            warn!(code = ?e.code, message = %e.message, "heartbeat refused");
        }
        let now = now_ms();
        self.metadata
            .submit(&self.replicas, |c| gregor_meta::ControllerResult {
                records: c.tick(now),
                response: (),
            })
            .await?;
        Ok(())
    }

    /// Background duties: heartbeats, retention, compaction, checkpoints.
    pub async fn run_background(self: Arc<Self>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let mut heartbeat = tokio::time::interval(std::time::Duration::from_millis(
            self.config.int("broker.heartbeat.interval.ms").max(100) as u64,
        ));
        let mut cleanup = tokio::time::interval(std::time::Duration::from_millis(
            self.config.int("log.retention.check.interval.ms").max(1000) as u64,
        ));
        let mut checkpoint = tokio::time::interval(std::time::Duration::from_millis(
            self.config
                .int("log.flush.offset.checkpoint.interval.ms")
                .max(100) as u64,
        ));
        let mut producer_expiry = tokio::time::interval(std::time::Duration::from_millis(
            self.config
                .int("producer.id.expiration.check.interval.ms")
                .max(1) as u64,
        ));
        loop {
            tokio::select! {
                _ = heartbeat.tick() => {
                    if let Err(e) = self.heartbeat().await {
                        warn!(error = %e, "heartbeat failed");
                    }
                }
                _ = cleanup.tick() => {
                    let parts = self.replicas.all();
                    let cleaner_enabled = self.config.bool("log.cleaner.enable");
                    let map_budget = usize::try_from(
                        self.config.int("log.cleaner.dedupe.buffer.size"),
                    )
                    .unwrap_or(gregor_log::DEFAULT_MAP_BUDGET);
                    crate::util::blocking(move || {
                        let now = now_ms();
                        for p in parts {
                            if let Err(e) = p.log.apply_retention(now) {
                                warn!(topic = %p.topic, partition = p.index, error = %e, "retention failed");
                            }
                            if cleaner_enabled && p.log.config().cleanup_policy.compact {
                                if let Err(e) = p.log.compact_within(now, map_budget) {
                                    warn!(topic = %p.topic, partition = p.index, error = %e, "compaction failed");
                                }
                            }
                        }
                    }).await;
                }
                _ = checkpoint.tick() => {
                    let parts = self.replicas.all();
                    crate::util::blocking(move || {
                        for p in parts {
                            let _ = p.log.flush_if_due(now_ms());
                            let _ = p.log.checkpoint();
                            if let Err(e) = p.snapshot_producers() {
                                warn!(topic = %p.topic, partition = p.index, error = %e, "cannot write the producer-state snapshot");
                            }
                        }
                    }).await;
                }
                _ = producer_expiry.tick() => self.expire_producers().await,
                _ = shutdown.changed() => return,
            }
        }
    }

    /// Forgets idempotent producers that have not written to a partition for
    /// `producer.id.expiration.ms` (a dynamic broker config).
    async fn expire_producers(&self) {
        let expiration_ms = self.dynamic_i64("producer.id.expiration.ms");
        let now = now_ms();
        for p in self.replicas.all() {
            let expired = p.expire_producers(now, expiration_ms).await;
            if expired > 0 {
                info!(topic = %p.topic, partition = p.index, expired, "expired idempotent producer ids");
            }
        }
    }

    /// Clean shutdown: logs synced, checkpoints and clean-shutdown markers written.
    pub async fn shutdown(&self) {
        self.metadata.close().await;
        let threads = self.dynamic_i64("num.recovery.threads.per.data.dir").max(1) as usize;
        let replicas = &self.replicas;
        tokio::task::block_in_place(|| replicas.close_all(threads));
        info!("broker stopped cleanly");
    }
}

impl Handler for Broker {
    async fn handle(self: Arc<Self>, ctx: RequestContext, request: RequestKind) -> Reply {
        handlers::dispatch(&self, &ctx, request).await
    }
}

impl Broker {
    /// A broker config's value now: dynamic per-broker override, dynamic cluster default,
    /// static setting, default (for settings that may change at run time).
    pub fn dynamic_i64(&self, key: &str) -> i64 {
        let image = self.metadata.image();
        gregor_meta::config::BrokerConfigView::new(
            &image,
            &self.config.settings,
            self.config.node_id,
        )
        .i64(key)
    }

    /// `fetch.max.bytes`: the largest fetch response (besides KIP-74's first batch).
    pub fn fetch_max_bytes(&self) -> usize {
        usize::try_from(self.dynamic_i64("fetch.max.bytes")).unwrap_or(usize::MAX)
    }

    /// Whether a partition's ISR is at least `min.insync.replicas` (acks=all).
    pub fn enough_in_sync(&self, topic: &str, partition: i32) -> bool {
        let image = self.metadata.image();
        let isr = image
            .topic(topic)
            .and_then(|t| t.partitions.get(&partition))
            .map_or(0, |p| p.isr.len() as i64);
        let min = gregor_meta::config::BrokerConfigView::new(
            &image,
            &self.config.settings,
            self.config.node_id,
        )
        .topic_value(topic, "min.insync.replicas")
        .and_then(|r| r.value.as_i64())
        .unwrap_or(1);
        isr >= min
    }
}
