//! DescribeLogDirs: one broker's log directories and the replicas in them, with their size on
//! disk and how far each trails the high watermark (what `kafka-log-dirs.sh` shows; reassignment
//! tools read progress from it).

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::base::Admin;
use crate::client::Target;
use crate::error::{Error, KafkaError, Result};
use crate::types::TopicPartition;

/// One replica in a log directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaLogInfo {
    pub size_bytes: i64,
    /// Offsets from the replica's log end to the high watermark it knows (zero on a leader).
    pub offset_lag: i64,
    /// A replica being moved into this directory from another one of the same broker.
    pub is_future: bool,
}

/// One log directory of a broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogDirDescription {
    pub path: String,
    pub error: Option<KafkaError>,
    /// Size of the filesystem and bytes still usable there, when the broker reports them.
    pub total_bytes: Option<i64>,
    pub usable_bytes: Option<i64>,
    pub replicas: BTreeMap<TopicPartition, ReplicaLogInfo>,
}

/// A DescribeLogDirs request for the listed partitions, or every one (`None`).
pub fn describe_log_dirs_request(partitions: Option<&[TopicPartition]>) -> DescribeLogDirsRequest {
    let mut req = DescribeLogDirsRequest::default();
    req.topics = partitions.map(|parts| {
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for tp in parts {
            by_topic.entry(&tp.topic).or_default().push(tp.partition);
        }
        by_topic
            .into_iter()
            .map(|(topic, partitions)| {
                let mut t = DescribableLogDirTopic::default();
                t.topic = TopicName(StrBytes::from_string(topic.to_string()));
                t.partitions = partitions;
                t
            })
            .collect()
    });
    req
}

pub fn parse_describe_log_dirs(
    resp: DescribeLogDirsResponse,
) -> Result<Vec<LogDirDescription>, KafkaError> {
    KafkaError::check(resp.error_code, None)?;
    Ok(resp
        .results
        .into_iter()
        .map(|d| LogDirDescription {
            path: d.log_dir.to_string(),
            error: KafkaError::check(d.error_code, None).err(),
            total_bytes: (d.total_bytes >= 0).then_some(d.total_bytes),
            usable_bytes: (d.usable_bytes >= 0).then_some(d.usable_bytes),
            replicas: d
                .topics
                .into_iter()
                .flat_map(|t| {
                    let topic = t.name.0.to_string();
                    t.partitions.into_iter().map(move |p| {
                        (
                            TopicPartition::new(topic.clone(), p.partition_index),
                            ReplicaLogInfo {
                                size_bytes: p.partition_size,
                                offset_lag: p.offset_lag,
                                is_future: p.is_future_key,
                            },
                        )
                    })
                })
                .collect(),
        })
        .collect())
}

impl Admin {
    /// The log directories of `broker` and the replicas in them (the listed partitions, or all).
    pub async fn describe_log_dirs(
        &self,
        broker: i32,
        partitions: Option<&[TopicPartition]>,
    ) -> Result<Vec<LogDirDescription>> {
        self.client
            .retry("DescribeLogDirs", || async {
                let (_, resp) = self
                    .client
                    .send::<DescribeLogDirsRequest, _>(&Target::Broker(broker), |_| {
                        Ok(describe_log_dirs_request(partitions))
                    })
                    .await?;
                parse_describe_log_dirs(resp).map_err(|e| Error::kafka("DescribeLogDirs", e))
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::describe_log_dirs_response::{
        DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
    };

    #[test]
    fn requests_name_partitions_by_topic() {
        let req = describe_log_dirs_request(Some(&[
            TopicPartition::new("b", 1),
            TopicPartition::new("a", 0),
            TopicPartition::new("b", 0),
        ]));
        let topics = req.topics.expect("listed");
        assert_eq!(topics.len(), 2);
        assert_eq!(topics[0].topic.0.as_str(), "a");
        assert_eq!(topics[1].partitions, vec![1, 0]);
        assert!(describe_log_dirs_request(None).topics.is_none());
    }

    #[test]
    fn parses_replicas_and_space() {
        let mut p = DescribeLogDirsPartition::default();
        p.partition_index = 3;
        p.partition_size = 4096;
        p.offset_lag = 17;
        let mut t = DescribeLogDirsTopic::default();
        t.name = TopicName(StrBytes::from_static_str("t"));
        t.partitions = vec![p];
        let mut d = DescribeLogDirsResult::default();
        d.log_dir = StrBytes::from_static_str("/data");
        d.topics = vec![t];
        d.total_bytes = 100;
        d.usable_bytes = -1;
        let mut resp = DescribeLogDirsResponse::default();
        resp.results = vec![d];
        let dirs = parse_describe_log_dirs(resp).expect("no error");
        assert_eq!(dirs[0].path, "/data");
        assert_eq!(dirs[0].total_bytes, Some(100));
        assert_eq!(dirs[0].usable_bytes, None);
        let r = &dirs[0].replicas[&TopicPartition::new("t", 3)];
        assert_eq!((r.size_bytes, r.offset_lag, r.is_future), (4096, 17, false));
    }

    #[test]
    fn a_top_level_error_fails_the_call() {
        let mut resp = DescribeLogDirsResponse::default();
        resp.error_code = 29; // CLUSTER_AUTHORIZATION_FAILED
        assert!(parse_describe_log_dirs(resp).is_err());
    }
}
