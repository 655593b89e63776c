//! Committed offsets in memory, by group, topic and partition: what OffsetFetch reads once the
//! records that committed them are durable. Transactional commits wait here too, per producer,
//! until their transaction's marker makes them visible or drops them.

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

/// An offset with where its record sits in the log, relative to the others: Kafka orders a
/// transactional commit against a plain one of the same partition by their log offsets.
/// Records are applied in log order (replayed, or completed in token order), so a counter of
/// applied records orders them as the log does.
#[derive(Debug, Clone)]
struct Positioned {
    offset: CommittedOffset,
    position: u64,
}

/// (group, topic, partition)
type Gtp = (String, String, i32);

/// group -> (topic, partition) -> offset; ordered so "fetch all" lists topics and partitions in
/// a stable order. `pending`: producer id -> the offsets its open transaction committed.
#[derive(Debug, Default)]
pub(crate) struct Offsets {
    by_group: HashMap<String, BTreeMap<(String, i32), Positioned>>,
    pending: BTreeMap<i64, BTreeMap<Gtp, Positioned>>,
    next_position: u64,
}

impl Offsets {
    fn position(&mut self) -> u64 {
        self.next_position += 1;
        self.next_position
    }

    pub fn get(&self, group: &str, topic: &str, partition: i32) -> Option<&CommittedOffset> {
        self.by_group
            .get(group)?
            .get(&(topic.to_string(), partition))
            .map(|p| &p.offset)
    }

    /// A plain commit's record was applied: it is the newest record of its partition.
    pub fn put(&mut self, group: &str, topic: String, partition: i32, offset: CommittedOffset) {
        let position = self.position();
        self.by_group
            .entry(group.to_string())
            .or_default()
            .insert((topic, partition), Positioned { offset, position });
    }

    /// A transactional commit's record was applied: pending for `producer_id` until its marker.
    pub fn put_pending(
        &mut self,
        producer_id: i64,
        group: &str,
        topic: String,
        partition: i32,
        offset: CommittedOffset,
    ) {
        let position = self.position();
        self.pending.entry(producer_id).or_default().insert(
            (group.to_string(), topic, partition),
            Positioned { offset, position },
        );
    }

    /// A tombstone in a transactional batch takes back that producer's pending offset.
    pub fn remove_pending(&mut self, producer_id: i64, group: &str, topic: &str, partition: i32) {
        if let Some(offsets) = self.pending.get_mut(&producer_id) {
            offsets.remove(&(group.to_string(), topic.to_string(), partition));
            if offsets.is_empty() {
                self.pending.remove(&producer_id);
            }
        }
    }

    /// The marker of `producer_id`'s transaction: on commit its pending offsets replace the
    /// visible ones appended before them (a plain commit appended after one stays); on abort
    /// they are dropped. Returns how many were pending.
    pub fn complete(&mut self, producer_id: i64, commit: bool) -> usize {
        let Some(pending) = self.pending.remove(&producer_id) else {
            return 0;
        };
        let count = pending.len();
        if commit {
            for ((group, topic, partition), p) in pending {
                let offsets = self.by_group.entry(group).or_default();
                let key = (topic, partition);
                if offsets.get(&key).is_none_or(|v| v.position < p.position) {
                    offsets.insert(key, p);
                }
            }
        }
        count
    }

    /// Whether an open transaction holds an offset of this partition.
    pub fn has_pending(&self, group: &str, topic: &str, partition: i32) -> bool {
        let key = (group.to_string(), topic.to_string(), partition);
        self.pending.values().any(|o| o.contains_key(&key))
    }

    /// Whether an open transaction holds an offset of this group.
    pub fn group_has_pending(&self, group: &str) -> bool {
        self.pending
            .values()
            .any(|o| o.keys().any(|(g, _, _)| g == group))
    }

    /// The partitions of a group that open transactions hold offsets of.
    pub fn pending_partitions(&self, group: &str) -> Vec<(String, i32)> {
        let mut out: Vec<(String, i32)> = self
            .pending
            .values()
            .flat_map(|o| o.keys())
            .filter(|(g, _, _)| g == group)
            .map(|(_, t, p)| (t.clone(), *p))
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Producers with pending offsets, ascending.
    pub fn pending_producers(&self) -> Vec<i64> {
        self.pending.keys().copied().collect()
    }

    /// A plain tombstone: the visible offset goes, and so do pending ones of the partition
    /// (Kafka removes them too, so a later commit marker cannot bring the offset back).
    pub fn remove(&mut self, group: &str, topic: &str, partition: i32) {
        if let Some(offsets) = self.by_group.get_mut(group) {
            offsets.remove(&(topic.to_string(), partition));
            if offsets.is_empty() {
                self.by_group.remove(group);
            }
        }
        let key = (group.to_string(), topic.to_string(), partition);
        self.pending.retain(|_, o| {
            o.remove(&key);
            !o.is_empty()
        });
    }

    /// Drops a group's visible and pending offsets.
    pub fn remove_group(&mut self, group: &str) {
        self.by_group.remove(group);
        self.pending.retain(|_, o| {
            o.retain(|(g, _, _), _| g != group);
            !o.is_empty()
        });
    }

    pub fn all(&self, group: &str) -> Vec<(String, i32, CommittedOffset)> {
        self.by_group
            .get(group)
            .map(|o| {
                o.iter()
                    .map(|((t, p), v)| (t.clone(), *p, v.offset.clone()))
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
        self.pending.clear();
    }

    /// Groups with committed offsets.
    pub fn group_ids(&self) -> Vec<String> {
        self.by_group.keys().cloned().collect()
    }
}
