//! DescribeLogDirs: the log directory of this broker and, per hosted replica, its size on disk
//! and how far its log end trails the partition's high watermark (`offset_lag`: zero on a
//! leader; on a follower, the offsets it still has to copy up to the high watermark its leader
//! last reported; Kafka's followers report it against their own high watermark, which their log
//! end caps, so there it is always zero). Tools show reassignment progress from it.

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};
use kafka_protocol::ResponseError;

use super::s;
use crate::data_plane::DataPlane;

pub fn describe_log_dirs(
    b: DataPlane<'_>,
    r: &DescribeLogDirsRequest,
    version: i16,
) -> DescribeLogDirsResponse {
    let mut parts = b.replicas.all();
    if let Some(wanted) = &r.topics {
        parts.retain(|p| {
            wanted
                .iter()
                .any(|t| t.topic.0.as_str() == p.topic && t.partitions.contains(&p.index))
        });
    }
    parts.sort_by(|a, b| (a.topic.as_str(), a.index).cmp(&(b.topic.as_str(), b.index)));
    let mut topics: Vec<DescribeLogDirsTopic> = Vec::new();
    for p in parts {
        let mut d = DescribeLogDirsPartition::default();
        d.partition_index = p.index;
        d.partition_size = p.log.size_bytes().min(i64::MAX as u64) as i64;
        d.offset_lag = p.offset_lag();
        d.is_future_key = false;
        match topics.last_mut() {
            Some(t) if t.name.0.as_str() == p.topic => t.partitions.push(d),
            _ => {
                let mut t = DescribeLogDirsTopic::default();
                t.name = TopicName(s(p.topic.clone()));
                t.partitions.push(d);
                topics.push(t);
            }
        }
    }
    let dir = b.replicas.data_dir();
    let mut result = DescribeLogDirsResult::default();
    result.log_dir = s(std::path::absolute(dir)
        .unwrap_or_else(|_| dir.to_path_buf())
        .display()
        .to_string());
    result.topics = topics;
    result.total_bytes = -1;
    result.usable_bytes = -1;
    if version >= 4 {
        match gregor_log::Disk::real().space(dir) {
            Ok((total, usable)) => {
                result.total_bytes = total.min(i64::MAX as u64) as i64;
                result.usable_bytes = usable.min(i64::MAX as u64) as i64;
            }
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot read the log directory's disk space");
                result.error_code = ResponseError::KafkaStorageError.code();
            }
        }
    }
    let mut resp = DescribeLogDirsResponse::default();
    resp.results = vec![result];
    resp
}
