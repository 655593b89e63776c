//! The rebalance listener (Kafka's `ConsumerRebalanceListener`), called from inside `poll`
//! (and `close`), with the time of the call so rebalance timelines can be printed.

use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::types::TopicPartition;

/// When and in which generation a callback happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebalanceContext {
    /// Wall-clock time of the call, ms since the Unix epoch.
    pub at_ms: i64,
    /// The group generation the change belongs to (-1 when the member has none).
    pub generation: i32,
    pub member_id: String,
}

impl RebalanceContext {
    pub(crate) fn now(generation: i32, member_id: &str) -> RebalanceContext {
        RebalanceContext {
            at_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0),
            generation,
            member_id: member_id.to_string(),
        }
    }
}

/// Callbacks around partition ownership changes.
///
/// * `on_partitions_revoked`: the member gives the partitions up in an orderly way (eager:
///   everything before rejoining; cooperative: only partitions that move, after SyncGroup).
/// * `on_partitions_assigned`: the partitions newly added (cooperative: only the additions,
///   possibly none; eager: the whole assignment). Called after every completed rebalance.
/// * `on_partitions_lost`: the member lost them without revoking (its membership expired,
///   `max.poll.interval.ms` passed, it was fenced): another member may already own them.
///   Defaults to `on_partitions_revoked`, as in Kafka.
pub trait RebalanceListener: Send {
    fn on_partitions_revoked(&mut self, _partitions: &[TopicPartition], _ctx: &RebalanceContext) {}
    fn on_partitions_assigned(&mut self, _partitions: &[TopicPartition], _ctx: &RebalanceContext) {}
    fn on_partitions_lost(&mut self, partitions: &[TopicPartition], ctx: &RebalanceContext) {
        self.on_partitions_revoked(partitions, ctx);
    }
}

/// Which callback an event records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebalanceKind {
    Revoked,
    Assigned,
    Lost,
}

/// One callback, as [`RecordingListener`] keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebalanceEvent {
    pub kind: RebalanceKind,
    pub partitions: Vec<TopicPartition>,
    pub ctx: RebalanceContext,
    /// Monotonic time of the call: timelines measured against an `Instant` must not mix in the
    /// wall clock, which NTP may slew or step.
    pub at: Instant,
}

/// A listener that records every callback, for timelines (`gregor lab`) and tests. Clones
/// share the record.
#[derive(Debug, Clone, Default)]
pub struct RecordingListener {
    events: Arc<Mutex<Vec<RebalanceEvent>>>,
}

impl RecordingListener {
    pub fn new() -> RecordingListener {
        RecordingListener::default()
    }

    pub fn events(&self) -> Vec<RebalanceEvent> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn push(&self, kind: RebalanceKind, partitions: &[TopicPartition], ctx: &RebalanceContext) {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(RebalanceEvent {
                kind,
                partitions: partitions.to_vec(),
                ctx: ctx.clone(),
                at: Instant::now(),
            });
    }
}

impl RebalanceListener for RecordingListener {
    fn on_partitions_revoked(&mut self, partitions: &[TopicPartition], ctx: &RebalanceContext) {
        self.push(RebalanceKind::Revoked, partitions, ctx);
    }
    fn on_partitions_assigned(&mut self, partitions: &[TopicPartition], ctx: &RebalanceContext) {
        self.push(RebalanceKind::Assigned, partitions, ctx);
    }
    fn on_partitions_lost(&mut self, partitions: &[TopicPartition], ctx: &RebalanceContext) {
        self.push(RebalanceKind::Lost, partitions, ctx);
    }
}
