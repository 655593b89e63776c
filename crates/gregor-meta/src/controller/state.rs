//! The controller's state: the image it has replayed, its static config, heartbeat sessions and
//! random generator, plus the scratch image one request stages its records on. The request
//! handlers (brokers, configs, partitions, topics) continue `impl Controller` on top of this.

use crate::config::{describe_configs, BrokerConfigView, DescribedConfig, StaticBrokerConfig};
use crate::delta::MetadataDelta;
use crate::error::{ApiError, ImageError};
use crate::image::MetadataImage;
use crate::record::{ConfigResource, MetadataRecord};
use crate::types::{BrokerId, SplitMix64};
use kafka_protocol::ResponseError;
use std::collections::BTreeMap;

/// Kafka's bound on the records one admin operation may produce.
pub const MAX_RECORDS_PER_USER_OP: usize = 10_000;

/// Records to commit plus the response to send once they are committed.
#[derive(Debug, Clone, PartialEq)]
pub struct ControllerResult<T> {
    /// Records to append to the metadata log, in order.
    pub records: Vec<MetadataRecord>,
    /// The response.
    pub response: T,
}

impl<T> ControllerResult<T> {
    pub(super) fn new(records: Vec<MetadataRecord>, response: T) -> Self {
        ControllerResult { records, response }
    }
}

/// A broker's heartbeat session (volatile; not in the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct BrokerSession {
    pub(super) last_heartbeat_ms: i64,
    /// The broker asked for a controlled shutdown in this registration: it stays fenced until
    /// it registers again, whatever heartbeat comes next (one sent before the ask may be
    /// answered after it, and must not unfence it while it stops).
    pub(super) shutting_down: bool,
    /// This controller heard from the broker (a registration or a heartbeat). A session it only
    /// granted on taking over says nothing of whether that incarnation still lives, so it does
    /// not keep a restarted incarnation from registering.
    pub(super) heard: bool,
}

/// The controller state machine.
#[derive(Debug, Clone)]
pub struct Controller {
    pub(super) image: MetadataImage,
    pub(super) static_config: StaticBrokerConfig,
    pub(super) node_id: BrokerId,
    pub(super) rng: SplitMix64,
    pub(super) sessions: BTreeMap<BrokerId, BrokerSession>,
    /// Records a new metadata log starts with (`gregor storage format --add-scram`).
    pub(super) bootstrap_records: Vec<MetadataRecord>,
}

impl Controller {
    /// A controller for an empty cluster. `static_config` is this node's configuration (defaults
    /// such as `num.partitions` come from it); `seed` drives topic ids and placement.
    pub fn new(static_config: StaticBrokerConfig, seed: u64) -> Self {
        Controller {
            image: MetadataImage::new(),
            node_id: static_config.node_id(),
            static_config,
            rng: SplitMix64::new(seed),
            sessions: BTreeMap::new(),
            bootstrap_records: Vec::new(),
        }
    }

    /// Sets the records a new metadata log starts with (KIP-900's bootstrap SCRAM
    /// credentials, from this node's data directory).
    pub fn set_bootstrap_records(&mut self, records: Vec<MetadataRecord>) {
        self.bootstrap_records = records;
    }

    /// The bootstrap records, when nothing has been committed yet: the first write to a new
    /// metadata log commits them ahead of its own records, whichever write that is (so a broker
    /// registering first cannot skip them). Empty once the image holds anything.
    pub fn bootstrap_records_due(&self) -> Vec<MetadataRecord> {
        if self.image == MetadataImage::default() {
            self.bootstrap_records.clone()
        } else {
            Vec::new()
        }
    }

    /// The committed metadata as this controller has replayed it.
    pub fn image(&self) -> &MetadataImage {
        &self.image
    }

    /// This node's static configuration.
    pub fn static_config(&self) -> &StaticBrokerConfig {
        &self.static_config
    }

    /// Replace the image with one built elsewhere (a snapshot received from the quorum leader).
    /// Heartbeat sessions are dropped: they belonged to the old image.
    pub fn reset_image(&mut self, image: MetadataImage) {
        self.image = image;
        self.sessions.clear();
    }

    /// Apply a committed (or about-to-be-committed) record.
    pub fn replay(&mut self, record: &MetadataRecord) -> Result<MetadataDelta, ImageError> {
        let delta = self.image.apply(record)?;
        for b in &delta.changed_brokers {
            if self.image.broker(*b).is_none() {
                self.sessions.remove(b);
            }
        }
        Ok(delta)
    }

    /// Apply records in order.
    pub fn replay_all<'a>(
        &mut self,
        records: impl IntoIterator<Item = &'a MetadataRecord>,
    ) -> Result<MetadataDelta, ImageError> {
        let mut delta = MetadataDelta::default();
        for r in records {
            delta.merge(self.replay(r)?);
        }
        Ok(delta)
    }

    /// Config lookups as this node sees them.
    pub fn config_view(&self) -> BrokerConfigView<'_> {
        BrokerConfigView::new(&self.image, &self.static_config, self.node_id)
    }

    /// DescribeConfigs for a topic, this node, or the cluster default.
    pub fn describe_configs(
        &self,
        resource: &ConfigResource,
        keys: Option<&[String]>,
    ) -> Result<Vec<DescribedConfig>, ApiError> {
        describe_configs(
            &self.image,
            &self.static_config,
            self.node_id,
            resource,
            keys,
        )
    }

    /// `unclean.leader.election.enable` for a topic.
    pub(super) fn unclean_enabled(&self, image: &MetadataImage, topic: &str) -> bool {
        BrokerConfigView::new(image, &self.static_config, self.node_id)
            .topic_value(topic, "unclean.leader.election.enable")
            .and_then(|r| r.value.as_bool())
            .unwrap_or(false)
    }
}

/// Records being produced by one request, applied to a scratch copy of the image so that later
/// steps of the same request see earlier ones.
pub(super) struct Staging {
    pub(super) image: MetadataImage,
    pub(super) records: Vec<MetadataRecord>,
}

impl Staging {
    pub(super) fn new(image: &MetadataImage) -> Self {
        Staging {
            image: image.clone(),
            records: Vec::new(),
        }
    }

    /// Add a record. Generated records are valid by construction; if one is not, that is a
    /// controller bug, reported as UNKNOWN_SERVER_ERROR rather than a crash.
    pub(super) fn push(&mut self, record: MetadataRecord) -> Result<(), ApiError> {
        if let Err(e) = self.image.apply(&record) {
            tracing::error!(error = %e, ?record, "controller generated a record that does not apply");
            return Err(ApiError::new(
                ResponseError::UnknownServerError,
                format!("internal error: {e}"),
            ));
        }
        self.records.push(record);
        Ok(())
    }
}
