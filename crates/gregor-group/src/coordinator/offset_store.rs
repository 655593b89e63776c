//! Committed offsets in memory, by group, topic and partition: what OffsetFetch reads once the
//! records that committed them are durable.

use std::collections::{BTreeMap, HashMap};

/// A committed offset as OffsetFetch returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    /// -1 when unknown.
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
}

/// group -> (topic, partition) -> offset; ordered so "fetch all" lists topics and partitions in
/// a stable order.
#[derive(Debug, Default)]
pub(crate) struct Offsets {
    by_group: HashMap<String, BTreeMap<(String, i32), CommittedOffset>>,
}

impl Offsets {
    pub fn get(&self, group: &str, topic: &str, partition: i32) -> Option<&CommittedOffset> {
        self.by_group
            .get(group)?
            .get(&(topic.to_string(), partition))
    }

    pub fn put(&mut self, group: &str, topic: String, partition: i32, offset: CommittedOffset) {
        self.by_group
            .entry(group.to_string())
            .or_default()
            .insert((topic, partition), offset);
    }

    pub fn remove(&mut self, group: &str, topic: &str, partition: i32) {
        if let Some(offsets) = self.by_group.get_mut(group) {
            offsets.remove(&(topic.to_string(), partition));
            if offsets.is_empty() {
                self.by_group.remove(group);
            }
        }
    }

    pub fn remove_group(&mut self, group: &str) {
        self.by_group.remove(group);
    }

    pub fn all(&self, group: &str) -> Vec<(String, i32, CommittedOffset)> {
        self.by_group
            .get(group)
            .map(|o| {
                o.iter()
                    .map(|((t, p), v)| (t.clone(), *p, v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn partitions(&self, group: &str) -> Vec<(String, i32)> {
        self.by_group
            .get(group)
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    }

    pub fn clear(&mut self) {
        self.by_group.clear();
    }

    /// Groups with committed offsets.
    pub fn group_ids(&self) -> Vec<String> {
        self.by_group.keys().cloned().collect()
    }
}
