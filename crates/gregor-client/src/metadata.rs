//! The cluster as a Metadata response describes it: brokers, controller, topics, partitions.
//!
//! Request building and response parsing are pure; the client keeps the latest snapshot and
//! refreshes it when leadership errors say it is stale.

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    DescribeClusterRequest, DescribeClusterResponse, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::error::{KafkaCode, KafkaError};

/// A broker as clients address it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerNode {
    pub id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

impl BrokerNode {
    /// `host:port`, ready for a TCP connect.
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            // An IPv6 literal needs brackets before the port.
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// One partition's replicas and leadership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMetadata {
    pub partition: i32,
    /// `None` while the partition has no leader (Kafka's leader id -1).
    pub leader: Option<i32>,
    /// -1 when the broker does not report it (Metadata before v7).
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub offline_replicas: Vec<i32>,
    /// Per-partition error (e.g. `LEADER_NOT_AVAILABLE`); the rest is still reported.
    pub error: Option<KafkaCode>,
}

/// One topic's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    pub name: String,
    /// Nil when the broker does not report topic ids (Metadata before v10).
    pub topic_id: Uuid,
    pub is_internal: bool,
    /// Sorted by partition index.
    pub partitions: Vec<PartitionMetadata>,
    /// Topic-level error (`UNKNOWN_TOPIC_OR_PARTITION` for a topic asked for by name that does
    /// not exist).
    pub error: Option<KafkaCode>,
}

impl TopicMetadata {
    pub fn partition(&self, partition: i32) -> Option<&PartitionMetadata> {
        // Partitions are sorted by index and normally dense (0..n), so index `i` is at `i`: the
        // consumer looks every assigned partition up at each poll, and a scan made that
        // quadratic in the partition count. Otherwise (a gap, or metadata built by hand in any
        // order) the scan.
        let direct = usize::try_from(partition)
            .ok()
            .and_then(|at| self.partitions.get(at))
            .filter(|p| p.partition == partition);
        direct.or_else(|| self.partitions.iter().find(|p| p.partition == partition))
    }
}

/// A Metadata response, normalised: brokers sorted by id, topics by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterMetadata {
    pub cluster_id: Option<String>,
    /// `None` when the broker reports no controller (-1).
    pub controller_id: Option<i32>,
    pub brokers: Vec<BrokerNode>,
    pub topics: Vec<TopicMetadata>,
}

impl ClusterMetadata {
    pub fn broker(&self, id: i32) -> Option<&BrokerNode> {
        self.brokers.iter().find(|b| b.id == id)
    }

    pub fn topic(&self, name: &str) -> Option<&TopicMetadata> {
        self.topics.iter().find(|t| t.name == name)
    }

    /// The leader of a partition, if the topic, the partition and a leader are all known.
    pub fn leader_for(&self, topic: &str, partition: i32) -> Option<i32> {
        self.topic(topic)?.partition(partition)?.leader
    }
}

/// A Metadata request: `None` asks for every topic, `Some(&[])` for brokers only.
pub fn metadata_request(topics: Option<&[String]>, version: i16) -> MetadataRequest {
    let mut req = MetadataRequest::default();
    req.topics = topics.map(|names| {
        names
            .iter()
            .map(|n| {
                MetadataRequestTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_string(n.clone()))))
            })
            .collect()
    });
    // Admin tools must never create topics by describing them; the field exists from v4.
    if version >= 4 {
        req.allow_auto_topic_creation = false;
    }
    req
}

/// Parses a Metadata response. Only a top-level error (v13) fails the whole response; topic
/// and partition errors are kept in the model for the caller to judge.
pub fn parse_metadata(resp: MetadataResponse) -> Result<ClusterMetadata, KafkaError> {
    KafkaError::check(resp.error_code, None)?;
    let mut brokers: Vec<BrokerNode> = resp
        .brokers
        .into_iter()
        .map(|b| BrokerNode {
            id: b.node_id.0,
            host: b.host.to_string(),
            port: b.port,
            rack: b.rack.map(|r| r.to_string()),
        })
        .collect();
    brokers.sort_by_key(|b| b.id);
    let mut topics: Vec<TopicMetadata> = resp
        .topics
        .into_iter()
        .map(|t| {
            let mut partitions: Vec<PartitionMetadata> = t
                .partitions
                .into_iter()
                .map(|p| PartitionMetadata {
                    partition: p.partition_index,
                    leader: (p.leader_id.0 >= 0).then_some(p.leader_id.0),
                    leader_epoch: p.leader_epoch,
                    replicas: p.replica_nodes.into_iter().map(|b| b.0).collect(),
                    isr: p.isr_nodes.into_iter().map(|b| b.0).collect(),
                    offline_replicas: p.offline_replicas.into_iter().map(|b| b.0).collect(),
                    error: KafkaCode::from_code(p.error_code),
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            TopicMetadata {
                name: t.name.map(|n| n.0.to_string()).unwrap_or_default(),
                topic_id: t.topic_id,
                is_internal: t.is_internal,
                partitions,
                error: KafkaCode::from_code(t.error_code),
            }
        })
        .collect();
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(ClusterMetadata {
        cluster_id: resp.cluster_id.map(|c| c.to_string()),
        controller_id: (resp.controller_id.0 >= 0).then_some(resp.controller_id.0),
        brokers,
        topics,
    })
}

/// A topic id as Kafka prints it: URL-safe base64 of its 16 bytes, without padding
/// (e.g. `Mm6wVFeIQ-qKXDTb4Uuy1g`).
pub fn kafka_uuid_string(id: &Uuid) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = id.as_bytes();
    let mut out = String::with_capacity(22);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        // 1 byte -> 2 characters, 2 -> 3, 3 -> 4 (no padding).
        let chars = chunk.len() + 1;
        for i in 0..chars {
            let idx = (n >> (18 - 6 * i)) & 0x3f;
            out.push(char::from(ALPHABET[idx as usize]));
        }
    }
    out
}

/// The cluster's identity and brokers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterDescription {
    pub cluster_id: Option<String>,
    pub controller_id: Option<i32>,
    /// Sorted by id.
    pub brokers: Vec<BrokerNode>,
}

/// DescribeCluster of the brokers, or (`controllers`, v1+) of the controllers (KIP-919).
pub fn describe_cluster_request(version: i16, controllers: bool) -> DescribeClusterRequest {
    let mut req = DescribeClusterRequest::default();
    if version >= 1 {
        // Kafka's endpoint types: 1 brokers, 2 controllers.
        req.endpoint_type = if controllers { 2 } else { 1 };
    }
    req
}

/// The cluster a DescribeCluster response describes.
pub fn parse_describe_cluster(
    resp: DescribeClusterResponse,
) -> Result<ClusterDescription, KafkaError> {
    KafkaError::check(resp.error_code, resp.error_message.as_deref())?;
    let mut brokers: Vec<BrokerNode> = resp
        .brokers
        .into_iter()
        .map(|b| BrokerNode {
            id: b.broker_id.0,
            host: b.host.to_string(),
            port: b.port,
            rack: b.rack.map(|r| r.to_string()),
        })
        .collect();
    brokers.sort_by_key(|b| b.id);
    Ok(ClusterDescription {
        cluster_id: Some(resp.cluster_id.to_string()).filter(|c| !c.is_empty()),
        controller_id: (resp.controller_id.0 >= 0).then_some(resp.controller_id.0),
        brokers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode_response, encode_response_frame};
    use kafka_protocol::messages::metadata_response::{
        MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    };
    use kafka_protocol::protocol::Message;

    pub(crate) fn sample_metadata_response() -> MetadataResponse {
        let partition = |idx: i32, leader: i32, replicas: &[i32], isr: &[i32]| {
            MetadataResponsePartition::default()
                .with_partition_index(idx)
                .with_leader_id(leader.into())
                .with_leader_epoch(4)
                .with_replica_nodes(replicas.iter().map(|&b| b.into()).collect())
                .with_isr_nodes(isr.iter().map(|&b| b.into()).collect())
        };
        MetadataResponse::default()
            .with_cluster_id(Some(StrBytes::from_static_str("c1")))
            .with_controller_id(1.into())
            .with_brokers(vec![
                MetadataResponseBroker::default()
                    .with_node_id(1.into())
                    .with_host(StrBytes::from_static_str("b1"))
                    .with_port(9093),
                MetadataResponseBroker::default()
                    .with_node_id(0.into())
                    .with_host(StrBytes::from_static_str("b0"))
                    .with_port(9092)
                    .with_rack(Some(StrBytes::from_static_str("r0"))),
            ])
            .with_topics(vec![
                MetadataResponseTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_static_str("tp_demo_03"))))
                    .with_topic_id(Uuid::from_u128(0x0102030405060708090a0b0c0d0e0f10))
                    .with_partitions(vec![
                        partition(1, 1, &[1, 0], &[1, 0]),
                        partition(0, -1, &[0, 1], &[]),
                    ]),
                MetadataResponseTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_static_str("missing"))))
                    .with_error_code(3),
            ])
    }

    #[test]
    fn parses_brokers_topics_and_leaderless_partitions() {
        let frame = encode_response_frame::<MetadataRequest>(&sample_metadata_response(), 12, 1);
        let resp = decode_response::<MetadataRequest>(frame, 12).unwrap();
        let md = parse_metadata(resp).unwrap();
        assert_eq!(md.cluster_id.as_deref(), Some("c1"));
        assert_eq!(md.controller_id, Some(1));
        assert_eq!(
            md.brokers.iter().map(|b| b.id).collect::<Vec<_>>(),
            vec![0, 1]
        );
        assert_eq!(md.broker(0).unwrap().address(), "b0:9092");
        assert_eq!(md.broker(0).unwrap().rack.as_deref(), Some("r0"));
        let names: Vec<&str> = md.topics.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, vec!["missing", "tp_demo_03"]);
        let t = md.topic("tp_demo_03").unwrap();
        assert_eq!(t.partitions[0].partition, 0);
        assert_eq!(t.partitions[0].leader, None);
        assert_eq!(t.partitions[1].replicas, vec![1, 0]);
        assert_eq!(md.leader_for("tp_demo_03", 1), Some(1));
        assert_eq!(md.leader_for("tp_demo_03", 0), None);
        assert_eq!(
            md.topic("missing").unwrap().error,
            Some(KafkaCode::UNKNOWN_TOPIC_OR_PARTITION)
        );
    }

    #[test]
    fn old_versions_lack_topic_ids_and_epochs() {
        // v1 carries neither cluster id, topic ids nor leader epochs: the model says "unknown".
        let mut v1 = sample_metadata_response();
        v1.cluster_id = None;
        for t in &mut v1.topics {
            t.topic_id = Uuid::nil();
            for p in &mut t.partitions {
                p.leader_epoch = -1;
            }
        }
        let frame = encode_response_frame::<MetadataRequest>(&v1, 1, 1);
        let md = parse_metadata(decode_response::<MetadataRequest>(frame, 1).unwrap()).unwrap();
        let t = md.topic("tp_demo_03").unwrap();
        assert!(t.topic_id.is_nil());
        assert_eq!(t.partitions[0].leader_epoch, -1);
        assert_eq!(md.cluster_id, None);
    }

    #[test]
    fn top_level_error_fails_the_response() {
        let resp = MetadataResponse::default().with_error_code(42);
        assert_eq!(
            parse_metadata(resp).unwrap_err().code,
            KafkaCode::INVALID_REQUEST
        );
    }

    #[test]
    fn request_never_auto_creates_and_encodes_in_every_client_version() {
        let topics = ["a".to_string()];
        for v in 1..=MetadataRequest::VERSIONS.max {
            for t in [None, Some(&topics[..]), Some(&[][..])] {
                let req = metadata_request(t, v);
                crate::codec::encode_request(&req, v, 1, "c")
                    .unwrap_or_else(|e| panic!("v{v}: {e}"));
                if v >= 4 {
                    assert!(!req.allow_auto_topic_creation);
                }
            }
        }
    }

    #[test]
    fn topic_ids_print_like_kafka() {
        assert_eq!(kafka_uuid_string(&Uuid::nil()), "AAAAAAAAAAAAAAAAAAAAAA");
        // Bytes 0x01..0x10 in URL-safe base64 without padding.
        let id = Uuid::from_u128(0x0102030405060708090a0b0c0d0e0f10);
        assert_eq!(kafka_uuid_string(&id), "AQIDBAUGBwgJCgsMDQ4PEA");
        let all_ones = Uuid::from_u128(u128::MAX);
        assert_eq!(kafka_uuid_string(&all_ones), "_____________________w");
    }

    #[test]
    fn partitions_are_found_by_index_with_gaps_and_in_any_order() {
        let p = |partition: i32, leader: i32| PartitionMetadata {
            partition,
            leader: Some(leader),
            leader_epoch: 0,
            replicas: vec![],
            isr: vec![],
            offline_replicas: vec![],
            error: None,
        };
        let topic = |partitions| TopicMetadata {
            name: "t".into(),
            topic_id: Uuid::nil(),
            is_internal: false,
            partitions,
            error: None,
        };
        let dense = topic((0..300).map(|i| p(i, i + 1000)).collect());
        for i in 0..300 {
            assert_eq!(dense.partition(i).map(|p| p.leader), Some(Some(i + 1000)));
        }
        assert!(dense.partition(300).is_none() && dense.partition(-1).is_none());
        let gaps = topic(vec![p(1, 11), p(3, 13), p(4, 14)]);
        let leaders: Vec<Option<i32>> = (0..6)
            .map(|i| gaps.partition(i).and_then(|p| p.leader))
            .collect();
        assert_eq!(
            leaders,
            vec![None, Some(11), None, Some(13), Some(14), None]
        );
        let unsorted = topic(vec![p(2, 12), p(0, 10), p(1, 11)]);
        for i in 0..3 {
            assert_eq!(unsorted.partition(i).and_then(|p| p.leader), Some(10 + i));
        }
    }
}
