//! Partitions' measured load, as the shell last gave it, and the figure the `load` assignor
//! uses for one group: bytes per second in, plus the group's backlog on the partition (the high
//! watermark less its committed offset, in bytes) weighted by
//! [`gregor_assign::load::DEFAULT_BACKLOG_WEIGHT`].

use std::collections::BTreeMap;

use gregor_assign::load::{load_figure, DEFAULT_BACKLOG_WEIGHT};

use super::offset_store::Offsets;

/// One partition's load, as measured from its leader.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PartitionLoad {
    /// Bytes appended per second, averaged over recent samples.
    pub bytes_in_per_sec: f64,
    pub high_watermark: i64,
    /// Mean bytes per record, to turn a backlog in records into bytes.
    pub bytes_per_record: f64,
}

/// Measured partitions: topic name, then partition.
pub type PartitionLoads = BTreeMap<String, BTreeMap<i32, PartitionLoad>>;

/// The figures of one group: the measured loads with its committed offsets.
#[derive(Clone, Copy)]
pub(crate) struct GroupLoads<'a> {
    loads: &'a PartitionLoads,
    offsets: &'a Offsets,
    group: &'a str,
}

impl<'a> GroupLoads<'a> {
    pub fn new(loads: &'a PartitionLoads, offsets: &'a Offsets, group: &'a str) -> Self {
        GroupLoads {
            loads,
            offsets,
            group,
        }
    }

    /// The partition's figure for the group; `None` when it was not measured. A partition
    /// without a committed offset counts no backlog: where the group starts is not known.
    pub fn figure(&self, topic: &str, partition: i32) -> Option<f64> {
        let l = self.loads.get(topic)?.get(&partition)?;
        let backlog = self
            .offsets
            .get(self.group, topic, partition)
            .map_or(0, |c| l.high_watermark.saturating_sub(c.offset).max(0));
        let backlog_bytes = backlog as f64 * l.bytes_per_record.max(0.0);
        Some(load_figure(
            l.bytes_in_per_sec.max(0.0),
            backlog_bytes,
            DEFAULT_BACKLOG_WEIGHT,
        ))
    }
}
