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
    pub metrics: &'a crate::metrics::events::BrokerMetrics,
    pub fetch_sessions: &'a std::sync::Mutex<crate::fetch_session::FetchSessionCache>,
    /// The transaction coordinators' side of a partition's writes.
    pub txn: &'a dyn TxnHooks,
}

/// A transactional producer's first batch to a partition, to verify with its coordinator.
#[derive(Debug, Clone)]
pub struct TxnVerifyRequest {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub topic: String,
    pub partition: i32,
    /// Transaction version 2 (Produce v12+, TxnOffsetCommit v5+): the producer did not add
    /// the partition itself, so the coordinator adds it (opening a transaction if none is)
    /// rather than only checking it.
    pub add: bool,
}

/// What a partition's writes need of the coordinators.
pub trait TxnHooks: Send + Sync {
    /// KIP-890's verification: `Ok` when the partition is in the producer's open transaction,
    /// else the error for the Produce answer.
    fn verify(
        &self,
        request: TxnVerifyRequest,
    ) -> futures::future::BoxFuture<'_, Result<(), ResponseError>>;

    /// A marker of `producer_id` is in the ISR of `__consumer_offsets` partition `partition`:
    /// the group coordinator's pending transactional offsets of the producer become visible
    /// (commit) or are dropped.
    fn offsets_marker_written(
        &self,
        partition: i32,
        producer_id: i64,
        commit: bool,
    ) -> futures::future::BoxFuture<'_, ()>;
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
        latency_cap(rtt, floor, rate)
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

/// A consumer's answer cap for a connection whose minimum round trip is `min_round_trip`: the
/// bytes `bytes_per_second` moves in one round trip, and at least `floor`. `None` when `floor`
/// is 0 (turned off).
///
/// Why: librdkafka keeps one Fetch in flight per broker and reads an answer whole before it
/// parses it; measured, the larger the answer, the more CPU it spent per byte and the more page
/// faults it took (bench/history/produce-consume-2026-12-04-to-12-05.md, session 26). On a
/// short round trip a small answer costs no throughput; on a long one an answer must carry the
/// round trip's worth of bytes, which the rate term gives it.
pub(crate) fn latency_cap(
    min_round_trip: std::time::Duration,
    floor: usize,
    bytes_per_second: u64,
) -> Option<usize> {
    if floor == 0 {
        return None;
    }
    let per_round_trip = u128::from(bytes_per_second) * min_round_trip.as_micros() / 1_000_000;
    Some(floor.max(usize::try_from(per_round_trip).unwrap_or(usize::MAX)))
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_latency_cap_is_the_floor_on_a_short_round_trip_and_a_round_trip_of_bytes_on_a_long_one()
    {
        const MIB: usize = 1 << 20;
        // Bytes per second.
        let rate = 10_000_000_000;
        // Off.
        assert_eq!(latency_cap(Duration::from_micros(20), 0, rate), None);
        // Loopback (tens of microseconds) and a rack (100 us): the floor.
        assert_eq!(
            latency_cap(Duration::from_micros(20), 2 * MIB, rate),
            Some(2 * MIB)
        );
        assert_eq!(
            latency_cap(Duration::from_micros(100), 2 * MIB, rate),
            Some(2 * MIB)
        );
        // 1 ms: 10 MB; 50 ms: 500 MB (fetch.max.bytes then caps it).
        assert_eq!(
            latency_cap(Duration::from_millis(1), 2 * MIB, rate),
            Some(10_000_000)
        );
        assert_eq!(
            latency_cap(Duration::from_millis(50), 2 * MIB, rate),
            Some(500_000_000)
        );
        // No overflow with the largest rate and a long round trip.
        assert_eq!(
            latency_cap(Duration::from_secs(10), 2 * MIB, u64::MAX),
            Some(usize::MAX)
        );
    }
}
