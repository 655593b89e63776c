//! Coordinator settings, named and defaulted as Kafka's broker configs.

/// Settings of the group coordinator (`group.*` and `offset.*` broker configs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    /// `group.min.session.timeout.ms`: smallest session timeout a member may ask for.
    pub min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms`: largest session timeout a member may ask for.
    pub max_session_timeout_ms: i32,
    /// `group.initial.rebalance.delay.ms`: how long the first rebalance of an empty group waits
    /// for more members, extended per new member up to the rebalance timeout.
    pub initial_rebalance_delay_ms: i32,
    /// `group.max.size`: most members a group may have.
    pub max_size: usize,
    /// How long a new member's pending JoinGroup may wait before it is dropped (Kafka's
    /// `classicGroupNewMemberJoinTimeoutMs`, 5 minutes, not configurable there).
    pub new_member_join_timeout_ms: i32,
    /// `offset.metadata.max.bytes`: largest metadata string of a committed offset.
    pub offset_metadata_max_bytes: usize,
    /// `offsets.retention.minutes` in milliseconds: how long the offsets of a group nobody
    /// consumes with are kept.
    pub offsets_retention_ms: i64,
    /// KIP-848 consumer groups' settings.
    pub consumer: ConsumerGroupConfig,
    /// A planted bug, for the deterministic simulator to show its checker finds it (the broker
    /// sets it only in a simulation that planted it, never in the broker binary): a follower
    /// whose SyncGroup arrives before the leader's assignment is answered at once with its
    /// assignment of the previous generation, so two members can own a partition in one
    /// generation.
    #[cfg(feature = "simulation")]
    pub planted_stale_sync: bool,
    /// A planted bug (set as `planted_stale_sync` is): loading a `__consumer_offsets`
    /// partition keeps the first commit of each group's partition instead of the last.
    #[cfg(feature = "simulation")]
    pub planted_replay_keeps_first_commit: bool,
    /// A planted bug (set as `planted_stale_sync` is): OffsetFetch answers the offset after
    /// the committed one (taking a commit for the last record consumed, not the next to
    /// read), so a member that resumes from it skips a record.
    #[cfg(feature = "simulation")]
    pub planted_fetch_past_commit: bool,
    /// A planted bug (set as `planted_stale_sync` is): a TxnOffsetCommit's offsets are
    /// visible as soon as they are durable, as if committed, not pending until the marker.
    #[cfg(feature = "simulation")]
    pub planted_txn_offsets_early: bool,
    /// A planted bug (set as `planted_stale_sync` is): loading a `__consumer_offsets`
    /// partition keeps the first group epoch and target assignment epoch of each consumer
    /// group (KIP-848) instead of the last, so the next target after the coordinator moves
    /// takes its members' epochs back.
    #[cfg(feature = "simulation")]
    pub planted_consumer_replay_first_epoch: bool,
    /// A planted bug (set as `planted_stale_sync` is): a classic group upgraded to a consumer
    /// group keeps none of its classic members' partitions, so they go to the joining member
    /// while their owners still consume them.
    #[cfg(feature = "simulation")]
    pub planted_upgrade_drops_assignment: bool,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            initial_rebalance_delay_ms: 3_000,
            max_size: usize::MAX,
            new_member_join_timeout_ms: 300_000,
            offset_metadata_max_bytes: 4_096,
            offsets_retention_ms: 10_080 * 60_000,
            consumer: ConsumerGroupConfig::default(),
            #[cfg(feature = "simulation")]
            planted_stale_sync: false,
            #[cfg(feature = "simulation")]
            planted_replay_keeps_first_commit: false,
            #[cfg(feature = "simulation")]
            planted_fetch_past_commit: false,
            #[cfg(feature = "simulation")]
            planted_txn_offsets_early: false,
            #[cfg(feature = "simulation")]
            planted_consumer_replay_first_epoch: false,
            #[cfg(feature = "simulation")]
            planted_upgrade_drops_assignment: false,
        }
    }
}

/// The planted bugs as the coordinator reads them: `false` in a build without the
/// `simulation` feature, so their branches compile away.
impl GroupConfig {
    #[cfg(feature = "simulation")]
    pub(crate) fn stale_sync_planted(&self) -> bool {
        self.planted_stale_sync
    }
    #[cfg(not(feature = "simulation"))]
    pub(crate) const fn stale_sync_planted(&self) -> bool {
        false
    }
    #[cfg(feature = "simulation")]
    pub(crate) fn replay_keeps_first_commit_planted(&self) -> bool {
        self.planted_replay_keeps_first_commit
    }
    #[cfg(not(feature = "simulation"))]
    pub(crate) const fn replay_keeps_first_commit_planted(&self) -> bool {
        false
    }
    #[cfg(feature = "simulation")]
    pub(crate) fn fetch_past_commit_planted(&self) -> bool {
        self.planted_fetch_past_commit
    }
    #[cfg(not(feature = "simulation"))]
    pub(crate) const fn fetch_past_commit_planted(&self) -> bool {
        false
    }
    #[cfg(feature = "simulation")]
    pub(crate) fn txn_offsets_early_planted(&self) -> bool {
        self.planted_txn_offsets_early
    }
    #[cfg(not(feature = "simulation"))]
    pub(crate) const fn txn_offsets_early_planted(&self) -> bool {
        false
    }
    #[cfg(feature = "simulation")]
    pub(crate) fn consumer_replay_first_epoch_planted(&self) -> bool {
        self.planted_consumer_replay_first_epoch
    }
    #[cfg(not(feature = "simulation"))]
    pub(crate) const fn consumer_replay_first_epoch_planted(&self) -> bool {
        false
    }
    #[cfg(feature = "simulation")]
    pub(crate) fn upgrade_drops_assignment_planted(&self) -> bool {
        self.planted_upgrade_drops_assignment
    }
    #[cfg(not(feature = "simulation"))]
    pub(crate) const fn upgrade_drops_assignment_planted(&self) -> bool {
        false
    }
}

/// The coordinator's settings for KIP-848 consumer groups (Kafka's names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupConfig {
    /// `group.consumer.session.timeout.ms`.
    pub session_timeout_ms: i32,
    /// `group.consumer.heartbeat.interval.ms`.
    pub heartbeat_interval_ms: i32,
    /// `group.consumer.max.size`.
    pub max_size: usize,
    /// `group.consumer.assignors`, by name: the first is the default.
    pub assignors: Vec<String>,
    /// `group.consumer.migration.policy`.
    pub migration_policy: MigrationPolicy,
}

/// `group.consumer.migration.policy`: which online conversions between the group protocols
/// the coordinator makes (KIP-848's migration).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MigrationPolicy {
    /// Neither: a classic group with members refuses consumer-protocol members.
    Disabled,
    /// A classic group becomes a consumer group when a consumer-protocol member joins.
    Upgrade,
    /// A consumer group whose last consumer-protocol member leaves becomes a classic group.
    Downgrade,
    /// Both (Kafka's default).
    #[default]
    Bidirectional,
}

impl MigrationPolicy {
    /// The policy named by the setting's value (case-insensitive, as Kafka reads it).
    pub fn parse(value: &str) -> Option<MigrationPolicy> {
        match value.to_ascii_lowercase().as_str() {
            "disabled" => Some(MigrationPolicy::Disabled),
            "upgrade" => Some(MigrationPolicy::Upgrade),
            "downgrade" => Some(MigrationPolicy::Downgrade),
            "bidirectional" => Some(MigrationPolicy::Bidirectional),
            _ => None,
        }
    }

    pub fn upgrades(self) -> bool {
        matches!(
            self,
            MigrationPolicy::Upgrade | MigrationPolicy::Bidirectional
        )
    }

    pub fn downgrades(self) -> bool {
        matches!(
            self,
            MigrationPolicy::Downgrade | MigrationPolicy::Bidirectional
        )
    }
}

/// One consumer group's own settings (its GROUP config resource), overriding the broker's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupOverrides {
    /// `consumer.session.timeout.ms`.
    pub session_timeout_ms: Option<i32>,
    /// `consumer.heartbeat.interval.ms`.
    pub heartbeat_interval_ms: Option<i32>,
}

/// Every group's overrides, by group id.
pub type GroupOverridesMap = std::collections::BTreeMap<String, GroupOverrides>;

impl ConsumerGroupConfig {
    /// The settings of group `group`: these, with the group's overrides applied.
    pub fn for_group<'a>(
        &'a self,
        overrides: &GroupOverridesMap,
        group: &str,
    ) -> std::borrow::Cow<'a, ConsumerGroupConfig> {
        match overrides.get(group) {
            None => std::borrow::Cow::Borrowed(self),
            Some(o) => {
                let mut c = self.clone();
                c.session_timeout_ms = o.session_timeout_ms.unwrap_or(c.session_timeout_ms);
                c.heartbeat_interval_ms =
                    o.heartbeat_interval_ms.unwrap_or(c.heartbeat_interval_ms);
                std::borrow::Cow::Owned(c)
            }
        }
    }
}

impl Default for ConsumerGroupConfig {
    fn default() -> Self {
        ConsumerGroupConfig {
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5_000,
            max_size: i32::MAX as usize,
            assignors: vec![
                "uniform".to_string(),
                "range".to_string(),
                "load".to_string(),
            ],
            migration_policy: MigrationPolicy::default(),
        }
    }
}
