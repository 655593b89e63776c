//! The data of a KIP-848 consumer group (`group.protocol=consumer`): members with epochs, the
//! target assignment, and who holds each partition. Pure data with the few rules that keep it
//! consistent; the heartbeat logic is in `consumer/heartbeat`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

pub use super::epochs::{CauseKind, Departure, EpochCause, EpochHistory};
pub use crate::api::{Assignment, TopicUuid};

/// The member epoch a member sends to join, and the ones it sends to leave (KIP-848).
pub const JOIN_EPOCH: i32 = 0;
pub const LEAVE_EPOCH: i32 = -1;
pub const STATIC_LEAVE_EPOCH: i32 = -2;

/// Where a member is in reaching its target assignment (Kafka's `MemberState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// It holds its target assignment at the target epoch.
    Stable,
    /// It must first give up `pending_revocation`; its epoch stays until it has.
    UnrevokedPartitions,
    /// It is at the target epoch but some partitions of its target are still held by others.
    UnreleasedPartitions,
}

impl MemberState {
    pub fn name(self) -> &'static str {
        match self {
            MemberState::Stable => "STABLE",
            MemberState::UnrevokedPartitions => "UNREVOKED_PARTITIONS",
            MemberState::UnreleasedPartitions => "UNRELEASED_PARTITIONS",
        }
    }
}

/// What a member asked for, as its heartbeats last set it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subscription {
    pub topic_names: BTreeSet<String>,
    /// A regular expression (RE2 syntax) matched against whole topic names.
    pub topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    pub rack: Option<String>,
    pub rebalance_timeout_ms: i32,
}

/// What a member that speaks the classic protocol (JoinGroup/SyncGroup) inside a consumer group
/// joined with: its session timeout and its protocols with their metadata (subscriptions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicMemberMetadata {
    pub session_timeout_ms: i32,
    /// (protocol name, metadata), in the member's order of preference.
    pub supported_protocols: Vec<(String, bytes::Bytes)>,
}

/// One member of a consumer group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscription: Subscription,
    /// The member's epoch, or `STATIC_LEAVE_EPOCH` for a static member that left for now.
    pub member_epoch: i32,
    /// The epoch before the last bump: a heartbeat whose answer was lost may carry it.
    pub previous_member_epoch: i32,
    pub state: MemberState,
    /// What the member owns (or is allowed to own) now.
    pub assigned: Assignment,
    /// What the member must give up before it moves to the target epoch.
    pub pending_revocation: Assignment,
    /// Set for a member that speaks the classic protocol (a group being migrated).
    pub classic: Option<ClassicMemberMetadata>,
}

impl ConsumerMember {
    pub fn new(member_id: String, instance_id: Option<String>) -> ConsumerMember {
        ConsumerMember {
            member_id,
            instance_id,
            client_id: String::new(),
            client_host: String::new(),
            subscription: Subscription::default(),
            member_epoch: JOIN_EPOCH,
            previous_member_epoch: JOIN_EPOCH,
            state: MemberState::Stable,
            assigned: Assignment::new(),
            pending_revocation: Assignment::new(),
            classic: None,
        }
    }
}

/// A consumer group's state as Kafka reports it (ConsumerGroupDescribe, ListGroups).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerGroupState {
    Empty,
    /// The group epoch is ahead of the target assignment's.
    Assigning,
    /// Some member has not reached the target assignment.
    Reconciling,
    Stable,
}

impl ConsumerGroupState {
    pub fn name(self) -> &'static str {
        match self {
            ConsumerGroupState::Empty => "Empty",
            ConsumerGroupState::Assigning => "Assigning",
            ConsumerGroupState::Reconciling => "Reconciling",
            ConsumerGroupState::Stable => "Stable",
        }
    }
}

/// A subscribed topic as the group last saw it in the cluster's metadata: a change of its
/// id or partition count bumps the group epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    pub id: TopicUuid,
    pub name: String,
    pub partitions: i32,
    /// The racks of each partition's replicas, for rack-aware assignment.
    pub replica_racks: Vec<Vec<String>>,
}

/// The digest of subscribed topics' metadata (FNV-1a over ids, names, partition counts and
/// racks): stable across processes and versions, 0 for no topics.
pub fn metadata_hash(topics: &BTreeMap<String, TopicMetadata>) -> i64 {
    if topics.is_empty() {
        return 0;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for t in topics.values() {
        eat(&t.id.to_be_bytes());
        eat(t.name.as_bytes());
        eat(&[0]);
        eat(&t.partitions.to_be_bytes());
        for racks in &t.replica_racks {
            for r in racks {
                eat(r.as_bytes());
                eat(&[0]);
            }
            eat(&[1]);
        }
    }
    // 0 stays "no topics".
    match h as i64 {
        0 => 1,
        x => x,
    }
}

/// A KIP-848 consumer group.
#[derive(Debug, Clone, Default)]
pub struct ConsumerGroup {
    pub group_id: String,
    /// Bumped whenever a new target assignment is needed.
    pub group_epoch: i32,
    /// The group epoch the target assignment was computed for.
    pub target_epoch: i32,
    pub members: BTreeMap<String, ConsumerMember>,
    /// Each member's target assignment; shared, so a change can keep the one it replaced.
    pub target: Arc<BTreeMap<String, Assignment>>,
    /// The subscribed topics' metadata the target was computed from, by name.
    pub subscribed_topics: BTreeMap<String, TopicMetadata>,
    /// A digest of `subscribed_topics`, written with the group epoch: a reloaded group, whose
    /// `subscribed_topics` start empty, compares it to tell a real change (a new target) from
    /// none.
    pub metadata_hash: i64,
    /// Who holds each partition (assigned or pending revocation), with that member's epoch.
    pub(crate) holders: BTreeMap<(TopicUuid, i32), (String, i32)>,
    /// Static members by `group.instance.id`.
    pub(crate) static_members: BTreeMap<String, String>,
    /// How many members subscribe to each topic name and each regex, kept by
    /// `put_member`/`remove_member`, so a heartbeat need not visit every member.
    pub(crate) subscriptions: SubscriptionIndex,
    /// The subscriptions last resolved against the cluster's topics (derived, not written).
    pub(crate) resolved: Resolved,
    /// How its rebalances went since this coordinator loaded it (kept in memory only).
    pub stats: ConsumerGroupStats,
    /// Its recent group epochs and each member's way to their targets (in memory only).
    pub epochs: EpochHistory,
}

/// A consumer group's rebalances as its coordinator saw them, for metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerGroupStats {
    /// Target assignments computed (one per new group epoch that needed one).
    pub targets: u64,
    /// Reconciliations finished: from a member's first step off the target (a new target, a
    /// member joining) to every member holding its target at the target epoch.
    pub reconciliations: u64,
    pub reconciliation_ms_total: u64,
    pub last_reconciliation_ms: Option<u64>,
    /// When the reconciliation under way started.
    pub reconciling_since_ms: Option<i64>,
}

impl ConsumerGroupStats {
    /// Notes the group's state after a change at `now_ms`: a reconciliation starts when the
    /// group leaves Stable and ends when it is Stable (or Empty) again.
    pub fn note(&mut self, state: ConsumerGroupState, target_moved: bool, now_ms: i64) {
        self.targets += u64::from(target_moved);
        let settled = matches!(
            state,
            ConsumerGroupState::Stable | ConsumerGroupState::Empty
        );
        match (self.reconciling_since_ms, settled) {
            (None, false) => self.reconciling_since_ms = Some(now_ms),
            (Some(since), true) => {
                let took = (now_ms - since).max(0) as u64;
                self.reconciliations += 1;
                self.reconciliation_ms_total += took;
                self.last_reconciliation_ms = Some(took);
                self.reconciling_since_ms = None;
            }
            _ => {}
        }
    }
}

/// The regexes of a group resolved to topic names, and what they were resolved against.
#[derive(Debug, Clone, Default)]
pub struct Resolved {
    /// The topics view's version and the subscription index's generation (`None`: never).
    pub against: Option<(u64, u64)>,
    pub regex_topics: BTreeMap<String, BTreeSet<String>>,
}

/// The distinct subscriptions of a group's members, with how many members hold each.
#[derive(Debug, Clone, Default)]
pub struct SubscriptionIndex {
    pub names: BTreeMap<String, usize>,
    pub regexes: BTreeMap<String, usize>,
    /// Bumped when a name or regex appears or disappears: the subscribed topics must be
    /// resolved again.
    pub generation: u64,
}

impl SubscriptionIndex {
    fn add(&mut self, s: &Subscription) {
        let mut grew = false;
        for n in &s.topic_names {
            grew |= bump(&mut self.names, n);
        }
        if let Some(re) = &s.topic_regex {
            grew |= bump(&mut self.regexes, re);
        }
        self.generation += u64::from(grew);
    }

    fn remove(&mut self, s: &Subscription) {
        let mut shrank = false;
        for n in &s.topic_names {
            shrank |= drop_one(&mut self.names, n);
        }
        if let Some(re) = &s.topic_regex {
            shrank |= drop_one(&mut self.regexes, re);
        }
        self.generation += u64::from(shrank);
    }
}

/// Counts one more holder of `key`; true if it is new.
fn bump(counts: &mut BTreeMap<String, usize>, key: &str) -> bool {
    match counts.get_mut(key) {
        Some(n) => {
            *n += 1;
            false
        }
        None => {
            counts.insert(key.to_string(), 1);
            true
        }
    }
}

/// Counts one holder of `key` less; true if it was the last.
fn drop_one(counts: &mut BTreeMap<String, usize>, key: &str) -> bool {
    let Some(n) = counts.get_mut(key) else {
        debug_assert!(
            false,
            "a subscription counted out that was never counted in"
        );
        return false;
    };
    *n -= 1;
    if *n == 0 {
        counts.remove(key);
        return true;
    }
    false
}

impl ConsumerGroup {
    pub fn new(group_id: &str) -> ConsumerGroup {
        ConsumerGroup {
            group_id: group_id.to_string(),
            ..ConsumerGroup::default()
        }
    }

    /// A new group epoch at `now_ms`, for `cause`: a new target assignment is needed.
    pub fn bump_epoch(&mut self, cause: EpochCause, now_ms: i64) {
        self.group_epoch += 1;
        self.epochs.bump(self.group_epoch, cause, now_ms);
    }

    /// Records in the epoch history that the target for `target_epoch` was computed at
    /// `now_ms`, with each member's client id.
    pub fn note_target_computed(&mut self, now_ms: i64) {
        let members = &self.members;
        let target = self.target.iter().map(|(id, a)| {
            let client = members.get(id).map_or("", |m| m.client_id.as_str());
            (id, client, a)
        });
        self.epochs
            .target_computed(self.target_epoch, target, now_ms);
    }

    pub fn state(&self) -> ConsumerGroupState {
        if self.members.is_empty() {
            ConsumerGroupState::Empty
        } else if self.group_epoch > self.target_epoch {
            ConsumerGroupState::Assigning
        } else if self
            .members
            .values()
            .any(|m| m.state != MemberState::Stable || m.member_epoch != self.target_epoch)
        {
            ConsumerGroupState::Reconciling
        } else {
            ConsumerGroupState::Stable
        }
    }

    /// The epoch of the member holding a partition, if another member than `me` holds it.
    pub fn held_by_other(&self, me: &str, topic: TopicUuid, partition: i32) -> Option<i32> {
        match self.holders.get(&(topic, partition)) {
            Some((member, epoch)) if member != me => Some(*epoch),
            _ => None,
        }
    }

    /// Replaces a member (or adds it), keeping the holder and static-member indexes in step.
    pub fn put_member(&mut self, member: ConsumerMember) {
        let conflicts = self.put_member_unchecked(member);
        debug_assert!(conflicts == 0, "a partition given to two members");
    }

    /// As [`put_member`](Self::put_member), for records being loaded, which come from a file:
    /// a partition another member still holds moves to this one. Returns how many did.
    pub fn put_member_unchecked(&mut self, member: ConsumerMember) -> usize {
        // Counted in before the old copy is counted out: an unchanged subscription then
        // leaves the index's generation alone.
        self.subscriptions.add(&member.subscription);
        if let Some(old) = self.members.remove(&member.member_id) {
            self.release(&old);
        }
        let mut conflicts = 0;
        for tp in partitions(&member.assigned).chain(partitions(&member.pending_revocation)) {
            let holder = (member.member_id.clone(), member.member_epoch);
            conflicts += usize::from(self.holders.insert(tp, holder).is_some());
        }
        if let Some(instance) = &member.instance_id {
            self.static_members
                .insert(instance.clone(), member.member_id.clone());
        }
        self.members.insert(member.member_id.clone(), member);
        conflicts
    }

    /// Removes a member; its partitions are free for others at once.
    pub fn remove_member(&mut self, member_id: &str) -> Option<ConsumerMember> {
        let old = self.members.remove(member_id)?;
        self.release(&old);
        if self.target.contains_key(member_id) {
            Arc::make_mut(&mut self.target).remove(member_id);
        }
        Some(old)
    }

    fn release(&mut self, m: &ConsumerMember) {
        self.subscriptions.remove(&m.subscription);
        for tp in partitions(&m.assigned).chain(partitions(&m.pending_revocation)) {
            if self
                .holders
                .get(&tp)
                .is_some_and(|(id, _)| *id == m.member_id)
            {
                self.holders.remove(&tp);
            }
        }
        if let Some(instance) = &m.instance_id {
            if self.static_members.get(instance) == Some(&m.member_id) {
                self.static_members.remove(instance);
            }
        }
    }

    /// The member id of the static member with `instance_id`.
    pub fn static_member(&self, instance_id: &str) -> Option<&str> {
        self.static_members.get(instance_id).map(String::as_str)
    }
}

/// Every (topic, partition) of an assignment.
pub fn partitions(a: &Assignment) -> impl Iterator<Item = (TopicUuid, i32)> + '_ {
    a.iter()
        .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
}

/// The number of partitions in an assignment.
pub fn count(a: &Assignment) -> usize {
    a.values().map(BTreeSet::len).sum()
}
