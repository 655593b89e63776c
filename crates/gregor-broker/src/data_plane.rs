//! The narrow service the partition data APIs (Produce, Fetch, ListOffsets,
//! OffsetForLeaderEpoch, DeleteRecords) run on: the metadata image, the hosted replicas and this
//! broker's settings, without the rest of the broker (controller forwarding, groups, tasks).

use std::sync::Arc;

use gregor_meta::config::{BrokerConfigView, StaticBrokerConfig};
use gregor_meta::Uuid;
use kafka_protocol::ResponseError;

use crate::metadata::MetadataManager;
use crate::partition::Partition;
use crate::replica::ReplicaManager;

/// What the data handlers read and write.
#[derive(Clone, Copy)]
pub struct DataPlane<'a> {
    pub node_id: i32,
    pub settings: &'a StaticBrokerConfig,
    pub metadata: &'a MetadataManager,
    pub replicas: &'a ReplicaManager,
    pub metrics: &'a crate::metrics::BrokerMetrics,
    pub fetch_sessions: &'a std::sync::Mutex<crate::fetch_session::FetchSessionCache>,
}

impl DataPlane<'_> {
    /// A broker setting's value now: dynamic per-broker override, dynamic cluster default,
    /// static setting, default.
    pub fn dynamic_i64(&self, key: &str) -> i64 {
        let image = self.metadata.image();
        BrokerConfigView::new(&image, self.settings, self.node_id).i64(key)
    }

    /// `fetch.max.bytes`: the largest fetch response (besides KIP-74's first batch).
    pub fn fetch_max_bytes(&self) -> usize {
        usize::try_from(self.dynamic_i64("fetch.max.bytes")).unwrap_or(usize::MAX)
    }

    /// The most a consumer's Fetch answer carries over a connection whose minimum round trip
    /// is `min_round_trip` (`fetch.low.latency.max.bytes`, `fetch.low.latency.bytes.per.second`);
    /// `None`: no cap beyond `fetch.max.bytes` (turned off, or the round trip is unknown).
    pub fn fetch_latency_cap(&self, min_round_trip: Option<std::time::Duration>) -> Option<usize> {
        let rtt = min_round_trip?;
        let floor = usize::try_from(self.dynamic_i64("fetch.low.latency.max.bytes")).unwrap_or(0);
        let rate =
            u64::try_from(self.dynamic_i64("fetch.low.latency.bytes.per.second")).unwrap_or(0);
        crate::handlers::fetch::latency_cap(rtt, floor, rate)
    }

    /// The fetch session settings (`max.incremental.fetch.session.cache.slots`,
    /// `min.incremental.fetch.session.eviction.ms`).
    pub fn fetch_session_limits(&self) -> crate::fetch_session::SessionLimits {
        crate::fetch_session::SessionLimits {
            slots: usize::try_from(self.dynamic_i64("max.incremental.fetch.session.cache.slots"))
                .unwrap_or(0),
            eviction_ms: u64::try_from(
                self.dynamic_i64("min.incremental.fetch.session.eviction.ms"),
            )
            .unwrap_or(0),
        }
    }

    /// Whether a partition's ISR is at least its `min.insync.replicas` (acks=all).
    pub fn enough_in_sync(&self, topic: &str, partition: i32) -> bool {
        let image = self.metadata.image();
        let isr = image
            .topic(topic)
            .and_then(|t| t.partitions.get(&partition))
            .map_or(0, |p| p.isr.len() as i64);
        let min = BrokerConfigView::new(&image, self.settings, self.node_id)
            .topic_value(topic, "min.insync.replicas")
            .and_then(|r| r.value.as_i64())
            .unwrap_or(1);
        isr >= min
    }

    /// [`DataPlane::locate`] for several partitions of one topic, in their order: the
    /// metadata image, the topic and the hosted replicas are looked up once for all of them.
    pub fn locate_many(
        &self,
        name: &str,
        topic_id: Uuid,
        partitions: impl ExactSizeIterator<Item = i32> + Clone,
    ) -> Vec<Result<Arc<Partition>, ResponseError>> {
        let image = self.metadata.image();
        let topic = match topic_of(&image, name, topic_id) {
            Ok(t) => t,
            Err(e) => return vec![Err(e); partitions.len()],
        };
        let hosted = self.replicas.get_many(&topic.name, partitions.clone());
        partitions
            .zip(hosted)
            .map(|(p, part)| {
                if !topic.partitions.contains_key(&p) {
                    return Err(ResponseError::UnknownTopicOrPartition);
                }
                part.ok_or(ResponseError::NotLeaderOrFollower)
            })
            .collect()
    }

    /// Resolves a produce or fetch target: the topic's name from the request (or its id, in
    /// newer versions), whether it exists, and the hosted partition.
    pub fn locate(
        &self,
        name: &str,
        topic_id: Uuid,
        partition: i32,
    ) -> Result<Arc<Partition>, ResponseError> {
        let image = self.metadata.image();
        let topic = topic_of(&image, name, topic_id)?;
        if !topic.partitions.contains_key(&partition) {
            return Err(ResponseError::UnknownTopicOrPartition);
        }
        self.replicas
            .get(&topic.name, partition)
            .ok_or(ResponseError::NotLeaderOrFollower)
    }
}

/// A request's topic in the image: by name, or by id where the request names none (newer
/// versions).
fn topic_of<'i>(
    image: &'i gregor_meta::MetadataImage,
    name: &str,
    topic_id: Uuid,
) -> Result<&'i gregor_meta::TopicImage, ResponseError> {
    if name.is_empty() && !topic_id.is_nil() {
        image
            .topic_by_id(topic_id)
            .ok_or(ResponseError::UnknownTopicId)
    } else {
        image
            .topic(name)
            .ok_or(ResponseError::UnknownTopicOrPartition)
    }
}
