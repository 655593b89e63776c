//! Small value types shared by the admin calls, the producer and the consumer.

use std::fmt;

use crate::error::{Error, Result};

/// Kafka's `isolation.level`: which records a consumer reads (Fetch) and which offset counts as
/// a partition's end (ListOffsets for the latest offset).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum IsolationLevel {
    /// Every record up to the high watermark, aborted transactions included (Kafka's default).
    #[default]
    ReadUncommitted,
    /// Up to the last stable offset, without the records of aborted transactions.
    ReadCommitted,
}

impl IsolationLevel {
    /// Kafka's spellings, `read_uncommitted` and `read_committed`.
    pub fn parse(s: &str) -> Result<IsolationLevel> {
        match s.trim() {
            "read_uncommitted" => Ok(IsolationLevel::ReadUncommitted),
            "read_committed" => Ok(IsolationLevel::ReadCommitted),
            other => Err(Error::InvalidArgument(format!(
                "invalid isolation.level '{other}': expected read_uncommitted or read_committed"
            ))),
        }
    }

    /// The `isolation_level` field of Fetch (v4+) and ListOffsets (v2+).
    pub fn wire(self) -> i8 {
        match self {
            IsolationLevel::ReadUncommitted => 0,
            IsolationLevel::ReadCommitted => 1,
        }
    }
}

impl fmt::Display for IsolationLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IsolationLevel::ReadUncommitted => "read_uncommitted",
            IsolationLevel::ReadCommitted => "read_committed",
        })
    }
}

/// A partition of a topic. Orders by topic, then partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    /// Kafka's `topic-partition` spelling.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// Groups partitions by topic in first-seen topic order, partitions in given order: the shape
/// of most Kafka request bodies.
pub fn group_by_topic<'a, I>(partitions: I) -> Vec<(String, Vec<i32>)>
where
    I: IntoIterator<Item = &'a TopicPartition>,
{
    let mut out: Vec<(String, Vec<i32>)> = Vec::new();
    for tp in partitions {
        match out.iter_mut().find(|(t, _)| *t == tp.topic) {
            Some((_, ps)) => ps.push(tp.partition),
            None => out.push((tp.topic.clone(), vec![tp.partition])),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_and_groups_like_kafka() {
        assert_eq!(TopicPartition::new("tp_re_01", 3).to_string(), "tp_re_01-3");
        let tps = [
            TopicPartition::new("b", 1),
            TopicPartition::new("a", 0),
            TopicPartition::new("b", 0),
        ];
        assert_eq!(
            group_by_topic(&tps),
            vec![("b".to_string(), vec![1, 0]), ("a".to_string(), vec![0])]
        );
    }

    #[test]
    fn isolation_levels_parse_and_print_with_kafkas_names() {
        for level in [
            IsolationLevel::ReadUncommitted,
            IsolationLevel::ReadCommitted,
        ] {
            assert_eq!(IsolationLevel::parse(&level.to_string()).unwrap(), level);
        }
        assert_eq!(IsolationLevel::default(), IsolationLevel::ReadUncommitted);
        assert_eq!(IsolationLevel::ReadCommitted.wire(), 1);
        assert_eq!(IsolationLevel::ReadUncommitted.wire(), 0);
        let err = IsolationLevel::parse("committed").unwrap_err().to_string();
        assert!(err.contains("isolation.level"), "{err}");
    }
}

/// A consumer's place in its group (Kafka's `ConsumerGroupMetadata`), which a transactional
/// producer's `send_offsets_to_transaction` sends with the offsets (TxnOffsetCommit v3+) so
/// that the group coordinator refuses the offsets of a member fenced since.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupMetadata {
    pub group_id: String,
    /// -1 when not in a generation.
    pub generation_id: i32,
    /// Empty when not in a generation.
    pub member_id: String,
    /// `group.instance.id` of a static member.
    pub group_instance_id: Option<String>,
}

impl ConsumerGroupMetadata {
    /// Only a group id: the broker then checks no generation (Kafka's
    /// `new ConsumerGroupMetadata(groupId)`).
    pub fn new(group_id: impl Into<String>) -> ConsumerGroupMetadata {
        ConsumerGroupMetadata {
            group_id: group_id.into(),
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
        }
    }
}
