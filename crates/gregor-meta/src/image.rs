//! The metadata image: the cluster's metadata as of some point of the metadata log, built only by
//! applying [`MetadataRecord`]s. Every broker keeps one; the controller keeps one too. Applying a
//! record yields a [`MetadataDelta`] that says what changed.

use crate::acl::index::AclIndex;
use crate::delta::{MetadataDelta, PartitionDelta};
use crate::error::ImageError;
use crate::features::FinalizedFeatures;
use crate::quota::ClientQuotas;
use crate::record::*;
pub use crate::registration::PartitionRegistration;
use crate::scram::ScramCredentials;
use crate::types::{BrokerId, TopicIdPartition, TopicPartition};
use std::collections::BTreeMap;
use uuid::Uuid;

/// A registered broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRegistration {
    /// Broker id.
    pub id: BrokerId,
    /// Process incarnation id.
    pub incarnation_id: Uuid,
    /// Broker epoch of this registration.
    pub epoch: i64,
    /// Listeners.
    pub endpoints: Vec<BrokerEndpoint>,
    /// `broker.rack`.
    pub rack: Option<String>,
    /// Fenced brokers lead nothing and are not eligible for ISRs.
    pub fenced: bool,
}

impl BrokerRegistration {
    fn to_record(&self) -> RegisterBrokerRecord {
        RegisterBrokerRecord {
            broker_id: self.id,
            incarnation_id: self.incarnation_id,
            broker_epoch: self.epoch,
            endpoints: self.endpoints.clone(),
            rack: self.rack.clone(),
            fenced: self.fenced,
        }
    }
}

/// A topic and its partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicImage {
    /// Name.
    pub name: String,
    /// Id.
    pub id: Uuid,
    /// Partitions by index.
    pub partitions: BTreeMap<i32, PartitionRegistration>,
}

/// The whole cluster metadata.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataImage {
    brokers: BTreeMap<BrokerId, BrokerRegistration>,
    topics: BTreeMap<Uuid, TopicImage>,
    topic_ids: BTreeMap<String, Uuid>,
    configs: BTreeMap<ConfigResource, BTreeMap<String, String>>,
    acls: AclIndex,
    scram: ScramCredentials,
    client_quotas: ClientQuotas,
    features: FinalizedFeatures,
}

impl MetadataImage {
    /// An empty cluster.
    pub fn new() -> Self {
        Self::default()
    }

    /// Build an image from a sequence of records (e.g. a snapshot, or a whole log).
    pub fn from_records<'a>(
        records: impl IntoIterator<Item = &'a MetadataRecord>,
    ) -> Result<Self, ImageError> {
        let mut image = MetadataImage::new();
        for r in records {
            image.apply(r)?;
        }
        Ok(image)
    }

    /// All registered brokers by id.
    pub fn brokers(&self) -> &BTreeMap<BrokerId, BrokerRegistration> {
        &self.brokers
    }

    /// One broker.
    pub fn broker(&self, id: BrokerId) -> Option<&BrokerRegistration> {
        self.brokers.get(&id)
    }

    /// Whether a broker is registered and unfenced (may lead, may be in an ISR).
    pub fn is_broker_active(&self, id: BrokerId) -> bool {
        self.brokers.get(&id).is_some_and(|b| !b.fenced)
    }

    /// Unfenced brokers, by id.
    pub fn active_brokers(&self) -> impl Iterator<Item = &BrokerRegistration> {
        self.brokers.values().filter(|b| !b.fenced)
    }

    /// All topics by id.
    pub fn topics(&self) -> &BTreeMap<Uuid, TopicImage> {
        &self.topics
    }

    /// Topic ids by name (sorted by name).
    pub fn topic_ids(&self) -> &BTreeMap<String, Uuid> {
        &self.topic_ids
    }

    /// A topic by name.
    pub fn topic(&self, name: &str) -> Option<&TopicImage> {
        self.topic_ids.get(name).and_then(|id| self.topics.get(id))
    }

    /// A topic by id.
    pub fn topic_by_id(&self, id: Uuid) -> Option<&TopicImage> {
        self.topics.get(&id)
    }

    /// A partition by topic name and index.
    pub fn partition(&self, tp: &TopicPartition) -> Option<&PartitionRegistration> {
        self.topic(&tp.topic)
            .and_then(|t| t.partitions.get(&tp.partition))
    }

    /// A partition by topic id and index.
    pub fn partition_by_id(&self, tp: TopicIdPartition) -> Option<&PartitionRegistration> {
        self.topics
            .get(&tp.topic_id)
            .and_then(|t| t.partitions.get(&tp.partition))
    }

    /// The dynamic config overrides of a resource (empty if none).
    pub fn configs(&self, resource: &ConfigResource) -> Option<&BTreeMap<String, String>> {
        self.configs.get(resource)
    }

    /// Every resource with dynamic config overrides.
    pub fn all_configs(&self) -> &BTreeMap<ConfigResource, BTreeMap<String, String>> {
        &self.configs
    }

    /// The ACL bindings.
    pub fn acls(&self) -> &AclIndex {
        &self.acls
    }

    /// Every user's SCRAM credentials.
    pub fn scram_credentials(&self) -> &ScramCredentials {
        &self.scram
    }

    /// Every entity's client quotas.
    pub fn client_quotas(&self) -> &ClientQuotas {
        &self.client_quotas
    }

    /// The finalized feature levels (KIP-584).
    pub fn finalized_features(&self) -> &FinalizedFeatures {
        &self.features
    }

    /// The next broker epoch the controller hands out: above every registered epoch.
    pub fn next_broker_epoch(&self) -> i64 {
        self.brokers.values().map(|b| b.epoch).max().unwrap_or(0) + 1
    }

    /// Apply one record. On error the image is unchanged.
    pub fn apply(&mut self, record: &MetadataRecord) -> Result<MetadataDelta, ImageError> {
        let mut delta = MetadataDelta::default();
        let d = &mut delta;
        match record {
            MetadataRecord::RegisterBroker(r) => self.apply_register_broker(r, d)?,
            MetadataRecord::UnregisterBroker(r) => self.apply_unregister_broker(r, d)?,
            MetadataRecord::FenceBroker(r) => self.apply_fencing(r, true, d)?,
            MetadataRecord::UnfenceBroker(r) => self.apply_fencing(r, false, d)?,
            MetadataRecord::Topic(r) => self.apply_topic(r, d)?,
            MetadataRecord::Partition(r) => self.apply_partition(r, d)?,
            MetadataRecord::PartitionChange(c) => self.apply_partition_change(c, d)?,
            MetadataRecord::RemoveTopic(r) => self.apply_remove_topic(r, d)?,
            MetadataRecord::Config(r) => self.apply_config(r, d)?,
            MetadataRecord::AccessControlEntry(r) => {
                self.acls
                    .insert(r.id, r.acl.clone())
                    .map_err(ImageError::Invalid)?;
                d.changed_acls.insert(r.id);
            }
            MetadataRecord::RemoveAccessControlEntry(r) => {
                self.acls
                    .remove(&r.id)
                    .ok_or_else(|| ImageError::Invalid(format!("no ACL with id {}", r.id)))?;
                d.changed_acls.insert(r.id);
            }
            MetadataRecord::UserScramCredential(r) => {
                self.scram.apply_upsert(r)?;
                d.changed_scram_users.insert(r.name.clone());
            }
            MetadataRecord::RemoveUserScramCredential(r) => {
                self.scram.apply_remove(r)?;
                d.changed_scram_users.insert(r.name.clone());
            }
            MetadataRecord::ClientQuota(r) => {
                self.client_quotas.apply(r)?;
                d.changed_client_quotas.insert(r.entity.clone());
            }
            MetadataRecord::FeatureLevel(r) => self.features.apply(r)?,
        }
        Ok(delta)
    }

    fn apply_register_broker(
        &mut self,
        r: &RegisterBrokerRecord,
        delta: &mut MetadataDelta,
    ) -> Result<(), ImageError> {
        self.brokers.insert(
            r.broker_id,
            BrokerRegistration {
                id: r.broker_id,
                incarnation_id: r.incarnation_id,
                epoch: r.broker_epoch,
                endpoints: r.endpoints.clone(),
                rack: r.rack.clone(),
                fenced: r.fenced,
            },
        );
        delta.changed_brokers.insert(r.broker_id);
        Ok(())
    }

    fn apply_unregister_broker(
        &mut self,
        r: &BrokerEpochRecord,
        delta: &mut MetadataDelta,
    ) -> Result<(), ImageError> {
        self.check_broker_epoch(r)?;
        self.brokers.remove(&r.broker_id);
        delta.changed_brokers.insert(r.broker_id);
        Ok(())
    }

    fn apply_fencing(
        &mut self,
        r: &BrokerEpochRecord,
        fenced: bool,
        delta: &mut MetadataDelta,
    ) -> Result<(), ImageError> {
        self.check_broker_epoch(r)?;
        if let Some(b) = self.brokers.get_mut(&r.broker_id) {
            b.fenced = fenced;
        }
        delta.changed_brokers.insert(r.broker_id);
        Ok(())
    }

    fn apply_topic(
        &mut self,
        r: &TopicRecord,
        delta: &mut MetadataDelta,
    ) -> Result<(), ImageError> {
        if self.topics.contains_key(&r.topic_id) || self.topic_ids.contains_key(&r.name) {
            return Err(ImageError::TopicExists {
                name: r.name.clone(),
                topic_id: r.topic_id,
            });
        }
        self.topics.insert(
            r.topic_id,
            TopicImage {
                name: r.name.clone(),
                id: r.topic_id,
                partitions: BTreeMap::new(),
            },
        );
        self.topic_ids.insert(r.name.clone(), r.topic_id);
        delta.created_topics.insert(r.topic_id, r.name.clone());
        Ok(())
    }

    fn apply_partition(
        &mut self,
        r: &PartitionRecord,
        delta: &mut MetadataDelta,
    ) -> Result<(), ImageError> {
        let topic = self
            .topics
            .get_mut(&r.topic_id)
            .ok_or(ImageError::UnknownTopicId(r.topic_id))?;
        let after = PartitionRegistration::from_record(r);
        after.validate().map_err(ImageError::Invalid)?;
        if r.partition < 0 {
            return Err(ImageError::Invalid(format!(
                "negative partition index {}",
                r.partition
            )));
        }
        let before = topic.partitions.insert(r.partition, after.clone());
        delta.changed_partitions.insert(
            TopicIdPartition {
                topic_id: r.topic_id,
                partition: r.partition,
            },
            PartitionDelta {
                topic: topic.name.clone(),
                before,
                after: Some(after),
            },
        );
        Ok(())
    }

    fn apply_partition_change(
        &mut self,
        c: &PartitionChangeRecord,
        delta: &mut MetadataDelta,
    ) -> Result<(), ImageError> {
        let topic = self
            .topics
            .get_mut(&c.topic_id)
            .ok_or(ImageError::UnknownTopicId(c.topic_id))?;
        let part = topic
            .partitions
            .get_mut(&c.partition)
            .ok_or(ImageError::UnknownPartition {
                topic_id: c.topic_id,
                partition: c.partition,
            })?;
        let after = part.merge(c);
        after.validate().map_err(ImageError::Invalid)?;
        let before = std::mem::replace(part, after.clone());
        delta.changed_partitions.insert(
            TopicIdPartition {
                topic_id: c.topic_id,
                partition: c.partition,
            },
            PartitionDelta {
                topic: topic.name.clone(),
                before: Some(before),
                after: Some(after),
            },
        );
        Ok(())
    }

    fn apply_remove_topic(
        &mut self,
        r: &RemoveTopicRecord,
        delta: &mut MetadataDelta,
    ) -> Result<(), ImageError> {
        let topic = self
            .topics
            .remove(&r.topic_id)
            .ok_or(ImageError::UnknownTopicId(r.topic_id))?;
        self.topic_ids.remove(&topic.name);
        let resource = ConfigResource::topic(topic.name.clone());
        if self.configs.remove(&resource).is_some() {
            delta.changed_configs.insert(resource);
        }
        for (partition, reg) in topic.partitions {
            delta.changed_partitions.insert(
                TopicIdPartition {
                    topic_id: r.topic_id,
                    partition,
                },
                PartitionDelta {
                    topic: topic.name.clone(),
                    before: Some(reg),
                    after: None,
                },
            );
        }
        delta.deleted_topics.insert(r.topic_id, topic.name);
        Ok(())
    }

    fn apply_config(
        &mut self,
        r: &ConfigRecord,
        delta: &mut MetadataDelta,
    ) -> Result<(), ImageError> {
        match r.resource.resource_type {
            ConfigResourceType::Topic => {
                if !self.topic_ids.contains_key(&r.resource.name) {
                    return Err(ImageError::Invalid(format!(
                        "config for unknown topic {}",
                        r.resource.name
                    )));
                }
            }
            ConfigResourceType::Broker => {
                if !r.resource.name.is_empty() && r.resource.name.parse::<u32>().is_err() {
                    return Err(ImageError::Invalid(format!(
                        "broker config resource name {:?} is not a broker id",
                        r.resource.name
                    )));
                }
            }
            ConfigResourceType::Group => {
                if r.resource.name.is_empty() {
                    return Err(ImageError::Invalid("group config without a group".into()));
                }
            }
        }
        match &r.value {
            Some(v) => {
                self.configs
                    .entry(r.resource.clone())
                    .or_default()
                    .insert(r.name.clone(), v.clone());
            }
            None => {
                if let Some(m) = self.configs.get_mut(&r.resource) {
                    m.remove(&r.name);
                    if m.is_empty() {
                        self.configs.remove(&r.resource);
                    }
                }
            }
        }
        delta.changed_configs.insert(r.resource.clone());
        Ok(())
    }

    /// Apply records in order, merging their deltas. Stops at the first record that does not
    /// apply; the records before it stay applied.
    pub fn apply_all<'a>(
        &mut self,
        records: impl IntoIterator<Item = &'a MetadataRecord>,
    ) -> Result<MetadataDelta, ImageError> {
        let mut delta = MetadataDelta::default();
        for r in records {
            delta.merge(self.apply(r)?);
        }
        Ok(delta)
    }

    fn check_broker_epoch(&self, r: &BrokerEpochRecord) -> Result<(), ImageError> {
        let b = self
            .brokers
            .get(&r.broker_id)
            .ok_or(ImageError::UnknownBroker(r.broker_id))?;
        if b.epoch != r.broker_epoch {
            return Err(ImageError::StaleBrokerEpoch {
                broker: r.broker_id,
                got: r.broker_epoch,
                registered: b.epoch,
            });
        }
        Ok(())
    }

    /// The records that rebuild this image from empty: a snapshot. Order: brokers, then each
    /// topic (topic, its configs, its partitions), then broker configs, then ACLs, then SCRAM credentials,
    /// then client quotas.
    pub fn to_records(&self) -> Vec<MetadataRecord> {
        let mut out = Vec::new();
        for b in self.brokers.values() {
            out.push(MetadataRecord::RegisterBroker(b.to_record()));
        }
        for (name, id) in &self.topic_ids {
            let topic = &self.topics[id];
            out.push(MetadataRecord::Topic(TopicRecord {
                name: name.clone(),
                topic_id: *id,
            }));
            if let Some(cfg) = self.configs.get(&ConfigResource::topic(name.clone())) {
                push_configs(&mut out, &ConfigResource::topic(name.clone()), cfg);
            }
            for (p, reg) in &topic.partitions {
                out.push(MetadataRecord::Partition(reg.to_record(*id, *p)));
            }
        }
        for (resource, cfg) in &self.configs {
            // Topic configs went out with their topics.
            if resource.resource_type != ConfigResourceType::Topic {
                push_configs(&mut out, resource, cfg);
            }
        }
        for (id, acl) in self.acls.iter() {
            out.push(MetadataRecord::AccessControlEntry(
                AccessControlEntryRecord {
                    id: *id,
                    acl: acl.clone(),
                },
            ));
        }
        out.extend(
            self.scram
                .to_records()
                .map(MetadataRecord::UserScramCredential),
        );
        out.extend(
            self.client_quotas
                .to_records()
                .map(MetadataRecord::ClientQuota),
        );
        out.extend(self.features.to_records().map(MetadataRecord::FeatureLevel));
        out
    }
}

fn push_configs(
    out: &mut Vec<MetadataRecord>,
    resource: &ConfigResource,
    cfg: &BTreeMap<String, String>,
) {
    for (k, v) in cfg {
        out.push(MetadataRecord::Config(ConfigRecord {
            resource: resource.clone(),
            name: k.clone(),
            value: Some(v.clone()),
        }));
    }
}
