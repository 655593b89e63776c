//! What `kafka-topics.sh --describe` shows, from the image: a topic line
//! (`Topic`, `TopicId`, `PartitionCount`, `ReplicationFactor`, `Configs`) and one line per
//! partition (`Topic`, `Partition`, `Leader`, `Replicas`, `Isr`, plus `Adding Replicas` /
//! `Removing Replicas` during a reassignment), tab-separated like Kafka 3.x.

use crate::image::{MetadataImage, TopicImage};
use crate::record::ConfigResource;
use crate::types::{BrokerId, NO_LEADER};
use std::fmt;
use uuid::Uuid;

/// One partition line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionDescription {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// Leader, `None` when there is none.
    pub leader: Option<BrokerId>,
    /// Replicas, preferred order.
    pub replicas: Vec<BrokerId>,
    /// In-sync replicas.
    pub isr: Vec<BrokerId>,
    /// Replicas being added by a reassignment.
    pub adding_replicas: Vec<BrokerId>,
    /// Replicas being removed by a reassignment.
    pub removing_replicas: Vec<BrokerId>,
    /// Whether the leader is a live (unfenced) broker.
    pub leader_live: bool,
}

impl PartitionDescription {
    /// ISR smaller than the replica set (`--under-replicated-partitions`).
    pub fn is_under_replicated(&self) -> bool {
        self.isr.len() < self.replicas.len()
    }

    /// No live leader (`--unavailable-partitions`).
    pub fn is_unavailable(&self) -> bool {
        !self.leader_live
    }

    /// ISR smaller than `min_isr` (`--under-min-isr-partitions`).
    pub fn is_under_min_isr(&self, min_isr: usize) -> bool {
        self.isr.len() < min_isr
    }
}

fn ids(v: &[BrokerId]) -> String {
    v.iter()
        .map(|b| b.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

impl fmt::Display for PartitionDescription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let leader = match self.leader {
            Some(l) => l.to_string(),
            None => "none".to_string(),
        };
        write!(
            f,
            "\tTopic: {}\tPartition: {}\tLeader: {}\tReplicas: {}\tIsr: {}",
            self.topic,
            self.partition,
            leader,
            ids(&self.replicas),
            ids(&self.isr)
        )?;
        if !self.adding_replicas.is_empty() {
            write!(f, "\tAdding Replicas: {}", ids(&self.adding_replicas))?;
        }
        if !self.removing_replicas.is_empty() {
            write!(f, "\tRemoving Replicas: {}", ids(&self.removing_replicas))?;
        }
        Ok(())
    }
}

/// A topic: its summary line and partition lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicDescription {
    /// Name.
    pub name: String,
    /// Id.
    pub topic_id: Uuid,
    /// Number of partitions.
    pub partition_count: usize,
    /// Replication factor (of partition 0, not counting replicas being removed).
    pub replication_factor: usize,
    /// Topic config overrides, sorted by key.
    pub configs: Vec<(String, String)>,
    /// Partitions in index order.
    pub partitions: Vec<PartitionDescription>,
}

impl fmt::Display for TopicDescription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let configs: Vec<String> = self
            .configs
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        write!(
            f,
            "Topic: {}\tTopicId: {}\tPartitionCount: {}\tReplicationFactor: {}\tConfigs: {}",
            self.name,
            kafka_uuid_string(self.topic_id),
            self.partition_count,
            self.replication_factor,
            configs.join(",")
        )?;
        for p in &self.partitions {
            write!(f, "\n{p}")?;
        }
        Ok(())
    }
}

/// A topic id as Kafka prints it: URL-safe base64 without padding (22 characters).
pub fn kafka_uuid_string(id: Uuid) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = id.as_bytes();
    let mut out = String::with_capacity(22);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

fn describe(image: &MetadataImage, topic: &TopicImage) -> TopicDescription {
    let partitions: Vec<PartitionDescription> = topic
        .partitions
        .iter()
        .map(|(&p, reg)| PartitionDescription {
            topic: topic.name.clone(),
            partition: p,
            leader: (reg.leader != NO_LEADER).then_some(reg.leader),
            replicas: reg.replicas.clone(),
            isr: reg.isr.clone(),
            adding_replicas: reg.adding_replicas.clone(),
            removing_replicas: reg.removing_replicas.clone(),
            leader_live: reg.leader != NO_LEADER && image.is_broker_active(reg.leader),
        })
        .collect();
    let replication_factor = topic
        .partitions
        .values()
        .next()
        .map_or(0, |p| p.target_replicas().len());
    let configs = image
        .configs(&ConfigResource::topic(topic.name.clone()))
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    TopicDescription {
        name: topic.name.clone(),
        topic_id: topic.id,
        partition_count: topic.partitions.len(),
        replication_factor,
        configs,
        partitions,
    }
}

/// Describe one topic by name.
pub fn describe_topic(image: &MetadataImage, name: &str) -> Option<TopicDescription> {
    image.topic(name).map(|t| describe(image, t))
}

/// Describe every topic, sorted by name.
pub fn describe_topics(image: &MetadataImage) -> Vec<TopicDescription> {
    image
        .topic_ids()
        .values()
        .filter_map(|id| image.topic_by_id(*id))
        .map(|t| describe(image, t))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_prints_like_kafka() {
        // Kafka's Uuid.toString of (0, 1) is "AAAAAAAAAAAAAAAAAAAAAQ" (the metadata topic id).
        assert_eq!(
            kafka_uuid_string(Uuid::from_u64_pair(0, 1)),
            "AAAAAAAAAAAAAAAAAAAAAQ"
        );
        assert_eq!(kafka_uuid_string(Uuid::nil()).len(), 22);
    }
}
