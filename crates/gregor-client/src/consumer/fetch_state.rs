//! What the consumer's fetching keeps between `poll` calls: the Fetches in flight and their
//! landed answers, each broker's session, window and back-off, the buffer of records fetched
//! and not yet returned. How `poll` drives it is in `fetcher`.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::task::{Id, JoinSet};

use super::fetch::ConsumerRecord;
use super::fetch::{ByteLimits, FetchTarget, RawPartition};
use super::fetch_window::FetchWindow;
use super::prefetch::{self, BrokerLoad, Leaders, PlannedFetch, Positions};
use super::shared::PartitionState;
use crate::error::{KafkaError, Result};
use crate::fetch_session::FetchSession;
use crate::metadata::ClusterMetadata;
use crate::types::TopicPartition;
pub(super) type Parsed =
    std::result::Result<Vec<(TopicPartition, std::result::Result<Answer, KafkaError>)>, KafkaError>;

/// One partition's answer as its Fetch task hands it over.
pub(super) struct Answer {
    pub(super) raw: RawPartition,
    /// Its records, when the task decoded them (on a multi-thread runtime, where the task runs
    /// beside the application); `None`: decoded in `poll` once the next Fetch is out.
    pub(super) decoded: Option<Vec<ConsumerRecord>>,
}

/// A Fetch answer (or its failure), its record batches not yet decoded, with what was asked.
pub(super) struct Landed {
    pub(super) broker: i32,
    pub(super) session: FetchSession,
    /// The Fetch's `max_bytes`.
    pub(super) asked: usize,
    /// When it was sent, and when its answer's first bytes were read (`None`: it failed).
    pub(super) sent_at: tokio::time::Instant,
    pub(super) first_byte: Option<tokio::time::Instant>,
    pub(super) targets: Vec<FetchTarget>,
    /// The partitions' tokens when the Fetch was sent, in `targets` order.
    pub(super) tokens: Vec<u64>,
    pub(super) outcome: Result<Parsed>,
}

/// What the consumer's fetching keeps between `poll` calls.
#[derive(Default)]
pub(super) struct Fetcher {
    pub(super) in_flight: JoinSet<Landed>,
    /// The task and partitions of the Fetch in flight to each broker.
    pub(super) busy: HashMap<i32, (Id, Vec<TopicPartition>)>,
    /// A fetch session per broker fetched from (absent while its Fetch is in flight).
    pub(super) sessions: HashMap<i32, FetchSession>,
    /// Each broker's window, and when its last answer landed (a list: a consumer fetches from
    /// a handful of brokers).
    pub(super) windows: Vec<(i32, FetchWindow, tokio::time::Instant)>,
    /// Brokers whose last Fetch failed: not asked again before this time (consumer ms).
    pub(super) backoff_until: HashMap<i32, u64>,
    /// Partitions whose last answer was an error (such as NOT_LEADER_OR_FOLLOWER): not
    /// fetched again before this time, while metadata is refreshed.
    pub(super) partition_backoff_until: HashMap<TopicPartition, u64>,
    /// Each partition's high watermark in its last answer.
    pub(super) high_watermarks: HashMap<TopicPartition, i64>,
    /// In read_committed, each partition's last stable offset in its last answer (its high
    /// watermark when the answer had none); empty in read_uncommitted.
    pub(super) last_stable_offsets: HashMap<TopicPartition, i64>,
    /// Records fetched and not yet returned.
    pub(super) buffer: prefetch::Buffer,
    /// Some partition has no known leader, or a Fetch failed: refresh metadata.
    pub(super) needs_metadata: bool,
    pub(super) next_metadata_ms: u64,
    pub(super) sent: u64,
    pub(super) stale: u64,
    /// The assigned partitions' leaders in a metadata snapshot, worked out again when the
    /// snapshot is replaced or partitions are assigned.
    pub(super) leaders: Option<LeaderCache>,
}

/// [`Leaders`] of the assigned partitions in `metadata`, when `assigned` were assigned.
pub(super) struct LeaderCache {
    pub(super) metadata: Arc<ClusterMetadata>,
    pub(super) assigned: usize,
    pub(super) leaders: Leaders,
}

/// What one pass over the assigned partitions plans.
pub(super) struct Planned {
    pub(super) fetches: Vec<PlannedFetch>,
    /// Some partition to fetch has no known leader.
    pub(super) leaderless: bool,
}

impl Fetcher {
    /// Partitions were assigned: their leaders are worked out again before the next plan.
    pub(super) fn forget_leaders(&mut self) {
        self.leaders = None;
    }

    /// Where each partition's answers end: its last stable offset in read_committed
    /// (`read_committed`), else its high watermark.
    pub(super) fn readable_ends(&self, read_committed: bool) -> &HashMap<TopicPartition, i64> {
        if read_committed {
            &self.last_stable_offsets
        } else {
            &self.high_watermarks
        }
    }

    pub(super) fn load(&self, broker: i32, now: u64, limits: ByteLimits) -> BrokerLoad {
        BrokerLoad {
            in_flight: self.busy.contains_key(&broker),
            backing_off: self.backoff_until.get(&broker).is_some_and(|t| now < *t),
            buffered: self.buffer.broker_bytes(broker),
            window: self
                .windows
                .iter()
                .find(|(b, ..)| *b == broker)
                .map_or_else(
                    || FetchWindow::new(limits).bytes(limits),
                    |(_, w, _)| w.bytes(limits),
                ),
        }
    }
}

impl Positions for std::collections::BTreeMap<TopicPartition, PartitionState> {
    fn returnable(&self, tp: &TopicPartition) -> Option<i64> {
        self.get(tp).filter(|s| !s.paused).and_then(|s| s.position)
    }

    fn advance(&mut self, tp: &TopicPartition, position: i64) {
        if let Some(s) = self.get_mut(tp) {
            s.position = Some(position);
        }
    }
}

/// `fetch.max.bytes` and `max.partition.fetch.bytes` as the plan uses them.
pub(super) fn byte_limits(fetch_max: i32, partition_max: i32) -> ByteLimits {
    ByteLimits {
        fetch_max: usize::try_from(fetch_max).unwrap_or(1).max(1),
        partition_max: usize::try_from(partition_max).unwrap_or(1).max(1),
    }
}
