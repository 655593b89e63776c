//! ConsumerGroupHeartbeat (KIP-848) on one group: joining, leaving, epoch fencing, static
//! members, subscription changes, the target assignment and the member's reconciliation.
//! Pure: the cluster's topics come in through [`TopicsView`], time as `now_ms`, new member ids
//! from the caller.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::model::{
    metadata_hash, Assignment, CauseKind, ConsumerGroup, ConsumerMember, Departure, EpochCause,
    MemberState, Resolved, TopicMetadata, JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH,
};
use super::reconcile::reconcile;
use super::target::{compute_target, ServerAssignor, Target};

pub use crate::config::ConsumerGroupConfig;

/// A ConsumerGroupHeartbeat request, as the coordinator's API carries it.
pub type HeartbeatRequest = crate::api::ConsumerGroupHeartbeatRequest;

/// The cluster's topics as the coordinator sees them.
pub trait TopicsView {
    fn topic(&self, name: &str) -> Option<TopicMetadata>;
    /// Every topic name, for regular-expression subscriptions.
    fn names(&self) -> Vec<String>;
    /// Changes whenever the topics do (a counter or a digest): groups resolve their
    /// subscriptions again only then.
    fn version(&self) -> u64;
    /// The partition's load figure for this group (bytes per second in, plus the weighted
    /// backlog), for the `load` assignor; `None` when it was not measured.
    fn partition_load(&self, _topic: &str, _partition: i32) -> Option<f64> {
        None
    }
}

/// The answer to a heartbeat that succeeded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatReply {
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// The member's assignment, sent when it changed or the member's report differs from it.
    pub assignment: Option<Assignment>,
}

/// What the coordinator must do with the member's timers after a heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevocationTimer {
    /// The member now has partitions to revoke: it must within its rebalance timeout.
    Start { at_ms: i64 },
    /// Nothing changed.
    Keep,
    /// Nothing to revoke any more.
    Cancel,
}

/// The outcome of a heartbeat: the reply and the member's deadlines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatOutcome {
    pub reply: HeartbeatReply,
    /// When the member's session ends without another heartbeat (`None`: it left).
    pub session_deadline_ms: Option<i64>,
    pub revocation: RevocationTimer,
}

/// A refusal, with Kafka's code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeartbeatError {
    #[error("INVALID_REQUEST: {0}")]
    InvalidRequest(String),
    #[error("UNKNOWN_MEMBER_ID: member {0} is not in the group")]
    UnknownMemberId(String),
    #[error("FENCED_MEMBER_EPOCH: member epoch {got}, the group has {current}")]
    FencedMemberEpoch { got: i32, current: i32 },
    #[error("UNRELEASED_INSTANCE_ID: instance {0} is still held by another member")]
    UnreleasedInstanceId(String),
    #[error("UNSUPPORTED_ASSIGNOR: {0}")]
    UnsupportedAssignor(String),
    #[error("INVALID_REGULAR_EXPRESSION: {0}")]
    InvalidRegularExpression(String),
    #[error("GROUP_MAX_SIZE_REACHED: the group has {0} members")]
    GroupMaxSizeReached(usize),
}

impl HeartbeatError {
    /// Kafka's error code.
    pub fn code(&self) -> i16 {
        match self {
            HeartbeatError::InvalidRequest(_) => 42,
            HeartbeatError::UnknownMemberId(_) => 25,
            HeartbeatError::FencedMemberEpoch { .. } => 110,
            HeartbeatError::UnreleasedInstanceId(_) => 111,
            HeartbeatError::UnsupportedAssignor(_) => 112,
            HeartbeatError::InvalidRegularExpression(_) => 128,
            HeartbeatError::GroupMaxSizeReached(_) => 81,
        }
    }
}

/// Handles one heartbeat of `group`. `new_member_id` is called for a version-0 join without
/// a member id.
pub fn heartbeat(
    group: &mut ConsumerGroup,
    cfg: &ConsumerGroupConfig,
    topics: &dyn TopicsView,
    req: &HeartbeatRequest,
    now_ms: i64,
    new_member_id: impl FnOnce() -> String,
) -> Result<HeartbeatOutcome, HeartbeatError> {
    validate(req, cfg)?;
    if req.member_epoch == LEAVE_EPOCH || req.member_epoch == STATIC_LEAVE_EPOCH {
        return leave(group, cfg, req, now_ms);
    }
    let (before, mut member) = member_for(group, cfg, req, new_member_id)?;
    let changed = update_member(&mut member, req);
    let cause = match (&before, changed) {
        (None, _) => Some(CauseKind::MemberJoined),
        (Some(_), true) => Some(CauseKind::SubscriptionChanged),
        (Some(_), false) => None,
    };
    let cause = cause.map(|k| EpochCause::of_member(k, &member.member_id, &member.client_id));
    group.put_member(member.clone());
    let deferred = new_regex(group, before.as_ref(), &member);
    refresh_target(group, cfg, topics, cause, deferred.as_deref(), now_ms)?;
    let target = group
        .target
        .get(&member.member_id)
        .cloned()
        .unwrap_or_default();
    let me = member.member_id.clone();
    let next = reconcile(
        &member,
        &target,
        group.target_epoch,
        req.owned.as_ref(),
        |t, p| group.held_by_other(&me, t, p).is_some(),
    );
    group.put_member(next.clone());
    let reconciled = next.state == MemberState::Stable && next.member_epoch == group.target_epoch;
    group
        .epochs
        .member_at(&next.member_id, next.member_epoch, reconciled, now_ms);
    Ok(outcome(cfg, req, before.as_ref(), &next, now_ms))
}

/// Brings the group's target assignment up to date at `now_ms`: a new group epoch when the
/// subscribed topics changed, then a target for the group epoch if it has none yet.
pub fn update_target(
    group: &mut ConsumerGroup,
    cfg: &ConsumerGroupConfig,
    topics: &dyn TopicsView,
    now_ms: i64,
) -> Result<(), HeartbeatError> {
    refresh_target(group, cfg, topics, None, None, now_ms)
}

/// [`update_target`], with a new group epoch for `cause` too, leaving the regex `deferred`
/// unresolved until the group's next heartbeat.
fn refresh_target(
    group: &mut ConsumerGroup,
    cfg: &ConsumerGroupConfig,
    topics: &dyn TopicsView,
    cause: Option<EpochCause>,
    deferred: Option<&str>,
    now_ms: i64,
) -> Result<(), HeartbeatError> {
    let moved = refresh_subscribed(group, topics, deferred);
    // A member's change explains a metadata change it brings (its new topics).
    let cause = cause.or_else(|| moved.then(|| EpochCause::of_group(CauseKind::MetadataChanged)));
    if let Some(cause) = cause {
        group.bump_epoch(cause, now_ms);
    }
    if group.group_epoch > group.target_epoch {
        let assignor = pick_assignor(group, cfg);
        let target = new_target(group, assignor, topics)
            .map_err(|e| HeartbeatError::InvalidRequest(e.to_string()))?;
        set_target(group, assignor, target, now_ms);
    }
    Ok(())
}

/// The target `assignor` computes for `group` now, from its members' subscribed topics.
pub(crate) fn new_target(
    group: &ConsumerGroup,
    assignor: ServerAssignor,
    topics: &dyn TopicsView,
) -> Result<Target, gregor_assign::AssignError> {
    let subscribed = member_topics(group);
    let loads = |t: &str, p: i32| topics.partition_load(t, p);
    compute_target(
        group,
        assignor,
        &subscribed,
        &group.subscribed_topics,
        &loads,
    )
}

/// Makes `target` the group's target at its group epoch.
pub(crate) fn set_target(
    group: &mut ConsumerGroup,
    assignor: ServerAssignor,
    target: Target,
    now_ms: i64,
) {
    group.target = Arc::new(target.assignment);
    group.target_epoch = group.group_epoch;
    group.note_target_computed(now_ms);
    group
        .epochs
        .explained(group.target_epoch, assignor.name(), target.moves);
}

fn outcome(
    cfg: &ConsumerGroupConfig,
    req: &HeartbeatRequest,
    before: Option<&ConsumerMember>,
    next: &ConsumerMember,
    now_ms: i64,
) -> HeartbeatOutcome {
    let changed = before.is_none_or(|b| b.assigned != next.assigned);
    let differs = req.owned.as_ref().is_some_and(|o| *o != next.assigned);
    let was_revoking = before.is_some_and(|b| b.state == MemberState::UnrevokedPartitions);
    let revocation = match (was_revoking, next.state == MemberState::UnrevokedPartitions) {
        (false, true) => RevocationTimer::Start {
            at_ms: now_ms + i64::from(next.subscription.rebalance_timeout_ms),
        },
        (true, false) => RevocationTimer::Cancel,
        _ => RevocationTimer::Keep,
    };
    HeartbeatOutcome {
        reply: HeartbeatReply {
            member_id: next.member_id.clone(),
            member_epoch: next.member_epoch,
            heartbeat_interval_ms: heartbeat_interval_ms(cfg, next),
            assignment: (changed || differs).then(|| next.assigned.clone()),
        },
        session_deadline_ms: Some(now_ms + i64::from(cfg.session_timeout_ms)),
        revocation,
    }
}

/// A member waiting for partitions that others still hold is told to heartbeat this many times
/// as often (but not more often than every [`WAITING_FLOOR_MS`]), so it takes them over soon
/// after their owners release them. With the full interval (Kafka's way) a release that lands
/// just after the waiting member's heartbeat costs it a whole second interval.
pub const WAITING_SPEEDUP: i32 = 20;
pub const WAITING_FLOOR_MS: i32 = 20;

/// The interval a member is told: the group's, or a shorter one while it waits for
/// partitions others hold.
fn heartbeat_interval_ms(cfg: &ConsumerGroupConfig, m: &ConsumerMember) -> i32 {
    let full = cfg.heartbeat_interval_ms;
    match m.state {
        MemberState::UnreleasedPartitions => {
            (full / WAITING_SPEEDUP).max(WAITING_FLOOR_MS).min(full)
        }
        _ => full,
    }
}

fn validate(req: &HeartbeatRequest, cfg: &ConsumerGroupConfig) -> Result<(), HeartbeatError> {
    let invalid = |m: &str| Err(HeartbeatError::InvalidRequest(m.to_string()));
    if req.group_id.is_empty() {
        return invalid("GroupId can't be empty.");
    }
    if req.version >= 1 && req.member_id.is_empty() {
        return invalid("MemberId can't be empty.");
    }
    if req.instance_id.as_deref() == Some("") {
        return invalid("InstanceId can't be empty.");
    }
    if req.rack_id.as_deref() == Some("") {
        return invalid("RackId can't be empty.");
    }
    match req.member_epoch {
        JOIN_EPOCH => {
            if req.rebalance_timeout_ms <= 0 {
                return invalid("RebalanceTimeoutMs must be provided in first request.");
            }
            if req.owned.as_ref().is_none_or(|o| !o.is_empty()) {
                return invalid("TopicPartitions must be empty when (re-)joining.");
            }
            if req.subscribed_topic_names.is_none() && req.subscribed_topic_regex.is_none() {
                return invalid(
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
                );
            }
        }
        STATIC_LEAVE_EPOCH if req.instance_id.is_none() => {
            return invalid("InstanceId can't be null when leaving with epoch -2.");
        }
        e if e < STATIC_LEAVE_EPOCH => return invalid("MemberEpoch is invalid."),
        _ => {}
    }
    if let Some(name) = &req.server_assignor {
        if ServerAssignor::parse(name).is_none() || !cfg.assignors.contains(name) {
            return Err(HeartbeatError::UnsupportedAssignor(format!(
                "assignor {name} is not one of group.consumer.assignors"
            )));
        }
    }
    if let Some(re) = &req.subscribed_topic_regex {
        if let Err(e) = regex::Regex::new(&format!("^(?:{re})$")) {
            return Err(HeartbeatError::InvalidRegularExpression(e.to_string()));
        }
    }
    Ok(())
}

/// The member a heartbeat is about (before this heartbeat, if it existed) and its copy to
/// update; checks the epoch and the static-member rules.
fn member_for(
    group: &mut ConsumerGroup,
    cfg: &ConsumerGroupConfig,
    req: &HeartbeatRequest,
    new_member_id: impl FnOnce() -> String,
) -> Result<(Option<ConsumerMember>, ConsumerMember), HeartbeatError> {
    if req.member_epoch != JOIN_EPOCH {
        let m = group
            .members
            .get(&req.member_id)
            .ok_or_else(|| HeartbeatError::UnknownMemberId(req.member_id.clone()))?;
        check_epoch(m, req)?;
        return Ok((Some(m.clone()), m.clone()));
    }
    let member_id = match req.member_id.is_empty() {
        true => new_member_id(),
        false => req.member_id.clone(),
    };
    if let Some(instance) = &req.instance_id {
        if let Some(old_id) = group.static_member(instance).map(str::to_string) {
            return take_over(group, &old_id, member_id, instance);
        }
    }
    if group.members.contains_key(&member_id) {
        // A fenced member rejoining: it has given up everything it held.
        group.remove_member(&member_id);
    } else if group.members.len() >= cfg.max_size {
        return Err(HeartbeatError::GroupMaxSizeReached(group.members.len()));
    }
    Ok((
        None,
        ConsumerMember::new(member_id, req.instance_id.clone()),
    ))
}

/// A static member rejoining under a new member id: it takes the place, and the assignment,
/// of the one that left for now (epoch -2). One still active keeps the instance id.
fn take_over(
    group: &mut ConsumerGroup,
    old_id: &str,
    member_id: String,
    instance: &str,
) -> Result<(Option<ConsumerMember>, ConsumerMember), HeartbeatError> {
    let Some(old) = group.members.get(old_id) else {
        return Err(HeartbeatError::UnknownMemberId(old_id.to_string()));
    };
    if old.member_epoch != STATIC_LEAVE_EPOCH && old_id != member_id {
        return Err(HeartbeatError::UnreleasedInstanceId(instance.to_string()));
    }
    let target = Arc::make_mut(&mut group.target).remove(old_id);
    group.epochs.member_replaced(old_id, &member_id);
    let mut old = group.remove_member(old_id).expect("present above");
    // What it had to revoke is gone with the process that held it.
    old.pending_revocation = Assignment::new();
    let mut new = old.clone();
    new.member_id = member_id;
    new.member_epoch = JOIN_EPOCH;
    new.previous_member_epoch = JOIN_EPOCH;
    new.state = MemberState::Stable;
    if let Some(t) = target {
        Arc::make_mut(&mut group.target).insert(new.member_id.clone(), t);
    }
    Ok((Some(old), new))
}

fn check_epoch(m: &ConsumerMember, req: &HeartbeatRequest) -> Result<(), HeartbeatError> {
    let fenced = || HeartbeatError::FencedMemberEpoch {
        got: req.member_epoch,
        current: m.member_epoch,
    };
    if req.member_epoch > m.member_epoch {
        return Err(fenced());
    }
    if req.member_epoch < m.member_epoch {
        // The answer that bumped the epoch may have been lost: the member then still reports
        // its previous epoch, owning no more than it is assigned now.
        let lost_answer = req.member_epoch == m.previous_member_epoch
            && req
                .owned
                .as_ref()
                .is_some_and(|o| is_subset(o, &m.assigned));
        if !lost_answer {
            return Err(fenced());
        }
    }
    Ok(())
}

fn is_subset(a: &Assignment, of: &Assignment) -> bool {
    a.iter()
        .all(|(t, ps)| of.get(t).is_some_and(|o| ps.is_subset(o)) || ps.is_empty())
}

/// Applies the heartbeat's changed fields; true if the group needs a new target.
fn update_member(m: &mut ConsumerMember, req: &HeartbeatRequest) -> bool {
    let before = m.subscription.clone();
    if let Some(names) = &req.subscribed_topic_names {
        m.subscription.topic_names = names.iter().cloned().collect();
    }
    if req.subscribed_topic_regex.is_some() {
        m.subscription.topic_regex = req.subscribed_topic_regex.clone().filter(|r| !r.is_empty());
    }
    if req.server_assignor.is_some() {
        m.subscription.server_assignor = req.server_assignor.clone();
    }
    if req.rack_id.is_some() {
        m.subscription.rack = req.rack_id.clone();
    }
    if req.rebalance_timeout_ms > 0 {
        m.subscription.rebalance_timeout_ms = req.rebalance_timeout_ms;
    }
    m.client_id = req.client_id.clone();
    m.client_host = req.client_host.clone();
    let s = &m.subscription;
    s.topic_names != before.topic_names
        || s.topic_regex != before.topic_regex
        || s.server_assignor != before.server_assignor
        || s.rack != before.rack
}

/// A regex this heartbeat brings to the group (no other member subscribes to it). Kafka resolves
/// a new regex off the heartbeat's path, so the member gets its literal topics first and the
/// regex's at a later heartbeat (librdkafka's tests expect that order); Gregor resolves it at the
/// group's next heartbeat, which is as soon as a member can learn of it either way.
fn new_regex(
    group: &ConsumerGroup,
    before: Option<&ConsumerMember>,
    member: &ConsumerMember,
) -> Option<String> {
    let re = member.subscription.topic_regex.as_ref()?;
    let had = before.and_then(|b| b.subscription.topic_regex.as_ref());
    let only_user = group.subscriptions.regexes.get(re) == Some(&1);
    (had != Some(re) && only_user).then(|| re.clone())
}

/// Resolves the group's subscriptions again if they or the cluster's topics changed since
/// the last time (all but the regex `deferred`, which matches nothing until the next time); true
/// if the subscribed topics' metadata or a regex's topics changed (a new target is needed).
/// Costs the group's distinct subscriptions, not its members.
fn refresh_subscribed(
    group: &mut ConsumerGroup,
    topics: &dyn TopicsView,
    deferred: Option<&str>,
) -> bool {
    let against = (topics.version(), group.subscriptions.generation);
    if group.resolved.against == Some(against) {
        return false;
    }
    let mut regex_topics = resolve_regexes(
        group
            .subscriptions
            .regexes
            .keys()
            .filter(|re| Some(re.as_str()) != deferred),
        topics,
    );
    if let Some(re) = deferred {
        regex_topics.insert(re.to_string(), BTreeSet::new());
    }
    let names: BTreeSet<&String> = group
        .subscriptions
        .names
        .keys()
        .chain(regex_topics.values().flatten())
        .collect();
    let metadata: BTreeMap<String, TopicMetadata> = names
        .into_iter()
        .filter_map(|n| topics.topic(n).map(|t| (n.clone(), t)))
        .collect();
    // By digest: a reloaded group knows only that of the metadata its target was computed from.
    let hash = metadata_hash(&metadata);
    // A regex that now matches other topics, which others may subscribe to by name (same hash).
    let regexes_moved = regex_topics.iter().any(|(re, ts)| {
        group
            .resolved
            .regex_topics
            .get(re)
            .is_some_and(|old| old != ts)
    });
    let changed = hash != group.metadata_hash || regexes_moved;
    group.metadata_hash = hash;
    group.subscribed_topics = metadata;
    group.resolved = Resolved {
        // A deferred regex makes the next heartbeat resolve again.
        against: deferred.is_none().then_some(against),
        regex_topics,
    };
    changed
}

/// The topic names each regex matches in full. A regex that does not compile (only a record
/// from an older version could hold one: requests are checked) matches nothing.
fn resolve_regexes<'a>(
    regexes: impl Iterator<Item = &'a String>,
    topics: &dyn TopicsView,
) -> BTreeMap<String, BTreeSet<String>> {
    let mut regexes = regexes.peekable();
    if regexes.peek().is_none() {
        return BTreeMap::new();
    }
    let all = topics.names();
    regexes
        .map(|re| {
            let matched = match regex::Regex::new(&format!("^(?:{re})$")) {
                Ok(compiled) => all
                    .iter()
                    .filter(|n| compiled.is_match(n))
                    .cloned()
                    .collect(),
                Err(_) => BTreeSet::new(),
            };
            (re.clone(), matched)
        })
        .collect()
}

/// Each member's subscribed topics that exist: its list and its regex, as last resolved.
fn member_topics(group: &ConsumerGroup) -> BTreeMap<String, Vec<String>> {
    let none = BTreeSet::new();
    group
        .members
        .values()
        .map(|m| {
            let s = &m.subscription;
            let by_regex = s
                .topic_regex
                .as_ref()
                .and_then(|re| group.resolved.regex_topics.get(re))
                .unwrap_or(&none);
            let names: BTreeSet<&String> = s.topic_names.iter().chain(by_regex).collect();
            let existing = names
                .into_iter()
                .filter(|n| group.subscribed_topics.contains_key(*n))
                .cloned();
            (m.member_id.clone(), existing.collect())
        })
        .collect()
}

/// The assignor the members ask for most (ties to the configured order), else the default.
pub fn pick_assignor(group: &ConsumerGroup, cfg: &ConsumerGroupConfig) -> ServerAssignor {
    let mut votes: BTreeMap<usize, usize> = BTreeMap::new();
    for m in group.members.values() {
        let asked = m.subscription.server_assignor.as_deref();
        if let Some(i) = asked.and_then(|a| cfg.assignors.iter().position(|c| c == a)) {
            *votes.entry(i).or_default() += 1;
        }
    }
    let best = votes
        .iter()
        .max_by_key(|(i, n)| (**n, std::cmp::Reverse(**i)));
    let name = match best {
        Some((i, _)) => cfg.assignors.get(*i),
        None => cfg.assignors.first(),
    };
    name.and_then(|n| ServerAssignor::parse(n))
        .unwrap_or(ServerAssignor::Uniform)
}

/// A member leaving: a dynamic one for good (its partitions are free at once, and the group
/// gets a new target); a static one for now (epoch -2), keeping its partitions until its
/// session ends or its instance rejoins.
fn leave(
    group: &mut ConsumerGroup,
    cfg: &ConsumerGroupConfig,
    req: &HeartbeatRequest,
    now_ms: i64,
) -> Result<HeartbeatOutcome, HeartbeatError> {
    let id = match &req.instance_id {
        Some(instance) => group.static_member(instance).map(str::to_string),
        None => Some(req.member_id.clone()),
    };
    let id = id
        .filter(|id| group.members.contains_key(id))
        .ok_or_else(|| HeartbeatError::UnknownMemberId(req.member_id.clone()))?;
    let mut session_deadline_ms = None;
    if req.member_epoch == STATIC_LEAVE_EPOCH {
        let mut m = group.members[&id].clone();
        m.member_epoch = STATIC_LEAVE_EPOCH;
        group.put_member(m);
        group.epochs.member_gone(&id, Departure::Left, now_ms);
        // It is removed if it does not come back within its session.
        session_deadline_ms = Some(now_ms + i64::from(cfg.session_timeout_ms));
    } else {
        remove_member(group, &id, Departure::Left, now_ms);
    }
    Ok(HeartbeatOutcome {
        reply: HeartbeatReply {
            member_id: id,
            member_epoch: req.member_epoch,
            heartbeat_interval_ms: 0,
            assignment: None,
        },
        session_deadline_ms,
        revocation: RevocationTimer::Cancel,
    })
}

/// Removes a member whose session ended, who left, or who did not revoke in time (`how`, at
/// `now_ms`); the group needs a new target.
pub fn remove_member(
    group: &mut ConsumerGroup,
    member_id: &str,
    how: Departure,
    now_ms: i64,
) -> Option<ConsumerMember> {
    let m = group.remove_member(member_id)?;
    group.epochs.member_gone(member_id, how, now_ms);
    let kind = match how {
        Departure::Left => CauseKind::MemberLeft,
        Departure::Fenced => CauseKind::MemberFenced,
    };
    group.bump_epoch(EpochCause::of_member(kind, member_id, &m.client_id), now_ms);
    Some(m)
}
