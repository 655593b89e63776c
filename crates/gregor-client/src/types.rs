//! Small value types shared by the admin calls (and, later, the producer and consumer).

use std::fmt;

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
}
