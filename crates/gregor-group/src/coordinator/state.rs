//! The coordinator's state and what every request handler shares: the groups, offsets, timers
//! and appends in flight, the context the rebalance logic runs in, and what each pending append
//! completes. The handlers (join, membership, offsets, ...) continue `impl GroupCoordinator`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;

use super::offset_store::{CommittedOffset, Offsets};
use crate::api::*;
use crate::config::GroupConfig;
use crate::consumer::model::{ConsumerGroup, TopicMetadata};
use crate::effect::{AppendToken, Effect, Record, TxnProducer};
use crate::group::Group;
use crate::member_id::UuidSource;
use crate::timer::{TimerAction, TimerKey, Timers};

/// The classic group coordinator for the groups of one `__consumer_offsets` partition.
///
/// Drive it with [`handle`](Self::handle) for requests, [`tick`](Self::tick) when
/// [`next_deadline`](Self::next_deadline) passes, and [`append_completed`](Self::append_completed)
/// when records it asked to append are durable (or failed). Every call takes the current time and
/// first fires the deadlines due by then, so behaviour does not depend on how often the shell
/// ticks.
#[derive(Debug)]
pub struct GroupCoordinator {
    pub(super) config: GroupConfig,
    pub(super) groups: HashMap<String, Group>,
    pub(super) offsets: Offsets,
    pub(super) timers: Timers,
    pub(super) uuids: UuidSource,
    pub(super) appends: Appends,
    /// KIP-848 consumer groups, beside the classic ones (a group id is one or the other).
    pub(super) consumer_groups: BTreeMap<String, ConsumerGroup>,
    /// The cluster's topics as the shell last reported them (`update_topics`).
    pub(super) topics: std::sync::Arc<BTreeMap<String, TopicMetadata>>,
    /// Bumped when `topics` changes, so groups resolve their subscriptions only then.
    pub(super) topics_version: u64,
    /// Each group's own settings (GROUP config resources), as the shell last reported them.
    pub(super) group_overrides: std::sync::Arc<crate::config::GroupOverridesMap>,
    /// Consumer groups whose last write failed: their next one writes them whole.
    pub(super) consumer_dirty: BTreeSet<String>,
    /// Partitions' measured load, for the `load` assignor (`review_load`).
    pub(super) partition_loads: std::sync::Arc<super::load_figures::PartitionLoads>,
}

/// A static member's JoinGroup waiting for the record of its new member id.
#[derive(Debug)]
pub(crate) struct StaticRejoin {
    pub(super) request_id: RequestId,
    pub(super) group_id: String,
    pub(super) group_instance_id: String,
    pub(super) old_member_id: String,
    pub(super) new_member_id: String,
    /// The leader before the replacement: what a pre-v9 client is told.
    pub(super) previous_leader: String,
    pub(super) supports_skip_assignment: bool,
    /// What to restore if the record cannot be written.
    pub(super) old_protocols: Vec<JoinProtocol>,
    pub(super) old_rebalance_timeout_ms: i32,
    pub(super) old_session_timeout_ms: i32,
}

/// A TxnOffsetCommit being written: on success its offsets are pending for the producer (or,
/// if the transaction's marker came meanwhile, made visible or dropped at once).
#[derive(Debug)]
pub(crate) struct TxnCommit {
    pub(super) request_id: RequestId,
    pub(super) group_id: String,
    pub(super) producer: TxnProducer,
    pub(super) offsets: Vec<(String, i32, CommittedOffset)>,
    pub(super) response: TxnOffsetCommitResponse,
    /// The transaction's marker (true: commit) arrived while the records were in flight.
    pub(super) decided: Option<bool>,
}

/// What to do when an append completes.
#[derive(Debug)]
pub(crate) enum PendingAppend {
    /// The record of a generation whose join phase ended: on success its JoinGroups are answered.
    Generation { group_id: String, generation: i32 },
    /// The leader's assignment of `generation`: on success the group becomes Stable and every
    /// parked SyncGroup is answered.
    Sync {
        group_id: String,
        generation: i32,
        assignment: HashMap<String, Bytes>,
    },
    /// A static member replaced its old member id without a rebalance: answer its JoinGroup.
    StaticRejoin(StaticRejoin),
    /// Offsets to apply and the OffsetCommit response to send.
    OffsetCommit {
        request_id: RequestId,
        group_id: String,
        offsets: Vec<(String, i32, CommittedOffset)>,
        response: OffsetCommitResponse,
    },
    /// Offsets of a transaction, then the TxnOffsetCommit response.
    TxnOffsetCommit(TxnCommit),
    /// Groups (already Dead) to remove with their offsets, and the DeleteGroups response.
    DeleteGroups(DeletingGroups),
    /// Offsets to remove once their tombstones are durable, and the OffsetDelete response.
    OffsetDelete {
        request_id: RequestId,
        group_id: String,
        partitions: Vec<(String, i32)>,
        response: OffsetDeleteResponse,
    },
    /// Metadata of a group that became Empty; nothing waits on it.
    GroupMetadata { group_id: String },
    /// Tombstones of expired offsets (and maybe their group); nothing waits on them.
    ExpiredOffsets { group_id: String },
    /// A consumer group's records (KIP-848); the answer that waits on them, if any (a
    /// ConsumerGroupHeartbeat's, or a classic member's JoinGroup or LeaveGroup).
    ConsumerGroup {
        group_id: String,
        request_id: Option<RequestId>,
        response: Response,
    },
}

/// A DeleteGroups waiting for its tombstones.
#[derive(Debug, Clone)]
pub(crate) struct DeletingGroups {
    pub request_id: RequestId,
    pub group_ids: Vec<String>,
    /// Consumer groups removed at the request: back if the write fails.
    pub consumer_groups: Vec<crate::consumer::model::ConsumerGroup>,
    pub response: DeleteGroupsResponse,
}

#[derive(Debug, Default)]
pub(crate) struct Appends {
    pub(super) next: u64,
    pub(super) pending: BTreeMap<AppendToken, PendingAppend>,
}

/// What the rebalance logic needs besides the group: time, settings, deadlines, effects.
pub(crate) struct Cx<'a> {
    pub now: i64,
    pub config: &'a GroupConfig,
    pub timers: &'a mut Timers,
    pub appends: &'a mut Appends,
    pub out: &'a mut Vec<Effect>,
}

impl Cx<'_> {
    pub fn respond(&mut self, request_id: RequestId, response: Response) {
        self.out.push(Effect::Respond {
            request_id,
            response,
        });
    }

    pub fn append(&mut self, records: Vec<Record>, then: PendingAppend) -> AppendToken {
        self.appends.next += 1;
        let token = AppendToken(self.appends.next);
        self.appends.pending.insert(token, then);
        self.out.push(Effect::Append { token, records });
        token
    }

    pub fn schedule_heartbeat(&mut self, group_id: &str, member_id: &str, timeout_ms: i32) {
        self.timers.schedule(
            heartbeat_key(group_id, member_id),
            self.now.saturating_add(i64::from(timeout_ms)),
            TimerAction::Heartbeat,
        );
    }

    pub fn cancel_heartbeat(&mut self, group_id: &str, member_id: &str) {
        self.timers.cancel(&heartbeat_key(group_id, member_id));
    }
}

pub(crate) fn heartbeat_key(group_id: &str, member_id: &str) -> TimerKey {
    TimerKey::Heartbeat {
        group: group_id.to_string(),
        member: member_id.to_string(),
    }
}

/// Kafka's mapping of a failed `__consumer_offsets` append to the error a client understands.
pub(crate) fn append_error_to_response_error(error: ResponseError) -> ResponseError {
    use ResponseError::*;
    match error {
        UnknownTopicOrPartition
        | NotEnoughReplicas
        | NotEnoughReplicasAfterAppend
        | RequestTimedOut => CoordinatorNotAvailable,
        NotLeaderOrFollower | KafkaStorageError => NotCoordinator,
        MessageTooLarge | RecordListTooLarge | InvalidFetchSize => UnknownServerError,
        other => other,
    }
}

impl GroupCoordinator {
    /// A coordinator with no groups. `seed` drives member id generation: give each coordinator
    /// instance a random one in production, a fixed one in tests.
    pub fn new(config: GroupConfig, seed: u64) -> Self {
        GroupCoordinator {
            config,
            groups: HashMap::new(),
            offsets: Offsets::default(),
            timers: Timers::default(),
            uuids: UuidSource::new(seed),
            appends: Appends::default(),
            consumer_groups: BTreeMap::new(),
            topics: Default::default(),
            topics_version: 0,
            group_overrides: Default::default(),
            consumer_dirty: BTreeSet::new(),
            partition_loads: Default::default(),
        }
    }

    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    pub(super) fn cx<'a>(
        now: i64,
        config: &'a GroupConfig,
        timers: &'a mut Timers,
        appends: &'a mut Appends,
        out: &'a mut Vec<Effect>,
    ) -> Cx<'a> {
        Cx {
            now,
            config,
            timers,
            appends,
            out,
        }
    }
}
