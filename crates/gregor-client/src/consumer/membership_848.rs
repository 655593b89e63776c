//! The consumer's membership in a KIP-848 consumer group (`group.protocol=consumer`) as a pure
//! state machine: what ConsumerGroupHeartbeat to send and when, what its answers mean, and
//! which partitions the application must revoke and take to reach the assignment the
//! coordinator sent (incremental reconciliation, as Kafka's consumers do it).
//!
//! The member joins with epoch 0 on the first `poll` after subscribing, then heartbeats at the
//! interval the coordinator names. A new assignment is reconciled by the application thread:
//! it revokes what it no longer owns (committing first), takes what is new, and reports
//! [`ConsumerMembership::reconciled`], which sends the acknowledging heartbeat at once with
//! the partitions it now owns. The coordinator only hands out partitions nobody else holds, so
//! taking them before the acknowledgement never makes two owners. Fenced (UNKNOWN_MEMBER_ID,
//! FENCED_MEMBER_EPOCH) or past `max.poll.interval.ms`, the member's partitions are lost; it
//! joins again with epoch 0 once the application has reported them lost.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use crate::error::KafkaCode;

pub const JOIN_EPOCH: i32 = 0;
pub const LEAVE_EPOCH: i32 = -1;
/// A static member leaving for now: the coordinator keeps its place for the session.
pub const STATIC_LEAVE_EPOCH: i32 = -2;

pub const UNKNOWN_MEMBER_ID: KafkaCode = KafkaCode(25);
pub const FENCED_MEMBER_EPOCH: KafkaCode = KafkaCode(110);
pub const UNRELEASED_INSTANCE_ID: KafkaCode = KafkaCode(111);
pub const UNSUPPORTED_ASSIGNOR: KafkaCode = KafkaCode(112);
pub const STALE_MEMBER_EPOCH: KafkaCode = KafkaCode(113);

/// Partitions by topic id, as the protocol carries them.
pub type TopicIdPartitions = BTreeMap<Uuid, BTreeSet<i32>>;

/// What the member subscribes to; a regular expression is resolved by the coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subscription {
    Topics(Vec<String>),
    Regex(String),
}

/// Settings of the member, in ms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings848 {
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub server_assignor: Option<String>,
    /// `max.poll.interval.ms`: also the rebalance timeout the coordinator gives for revoking.
    pub max_poll_interval_ms: u64,
    /// Until the coordinator names its own.
    pub heartbeat_interval_ms: u64,
    pub retry_backoff_ms: u64,
}

/// A ConsumerGroupHeartbeat to send. Every field is filled in each time (a full heartbeat),
/// which the protocol allows and which keeps a lost answer harmless.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatFields {
    pub member_id: String,
    /// Whether `member_id` may be sent in v0, where the coordinator names new members.
    pub member_id_named: bool,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub subscription: Option<Subscription>,
    /// Send an empty regex, which drops the one the member subscribed with before.
    pub clear_regex: bool,
    pub server_assignor: Option<String>,
    pub owned: Option<TopicIdPartitions>,
    /// Which incarnation of the membership sent it: answers to an older one are ignored.
    pub session: u64,
}

/// What the heartbeat task does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeartbeatAction848 {
    /// Not subscribed, not polled yet, or waiting for the application: wait to be woken.
    Idle,
    WaitUntil(u64),
    Send(HeartbeatFields),
    /// `max.poll.interval.ms` passed without a poll: send this leave heartbeat; the partitions
    /// are lost.
    PollTimeoutExpired(HeartbeatFields),
}

/// A successful heartbeat answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatReply {
    pub member_id: Option<String>,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    pub assignment: Option<TopicIdPartitions>,
}

/// What an answer meant for the application.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeartbeatOutcome848 {
    Ok,
    /// An answer to a heartbeat of an earlier incarnation.
    Ignored,
    /// A new assignment to reconcile.
    NewAssignment,
    /// Fenced: the partitions are lost; the member joins again with epoch 0.
    Lost,
    /// The coordinator moved or did not answer: find it again, then retry.
    CoordinatorUnknown,
    /// Retry after the backoff.
    Retry,
    Fatal(KafkaCode),
}

/// The partitions the application must give up and take to reach the assignment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reconciliation {
    pub revoke: Vec<(Uuid, i32)>,
    pub assign: Vec<(Uuid, i32)>,
    /// What the member owns before it, and the incarnation it belongs to.
    pub owned: TopicIdPartitions,
    pub session: u64,
}

/// One member's view of its consumer group.
#[derive(Debug, Clone)]
pub struct ConsumerMembership {
    pub member_id: String,
    member_id_named: bool,
    pub member_epoch: i32,
    settings: Settings848,
    subscription: Option<Subscription>,
    clear_regex: bool,
    /// Polled since subscribing (or since the loss was reported): join.
    join_wanted: bool,
    /// Partitions were lost; the application must report them before the member rejoins.
    awaiting_lost: bool,
    fatal: Option<KafkaCode>,
    /// The latest assignment from the coordinator not yet reconciled.
    target: Option<TopicIdPartitions>,
    /// What the application holds (reported in every heartbeat).
    owned: TopicIdPartitions,
    interval_ms: u64,
    /// When the next heartbeat is due (`None`: now).
    next_due_ms: Option<u64>,
    last_poll_ms: u64,
    session: u64,
}

impl ConsumerMembership {
    /// `member_id`: the id this client generated (KIP-1082), used from v1 on.
    pub fn new(member_id: String, settings: Settings848, now: u64) -> ConsumerMembership {
        ConsumerMembership {
            member_id,
            member_id_named: false,
            member_epoch: JOIN_EPOCH,
            interval_ms: settings.heartbeat_interval_ms,
            settings,
            subscription: None,
            clear_regex: false,
            join_wanted: false,
            awaiting_lost: false,
            fatal: None,
            target: None,
            owned: TopicIdPartitions::new(),
            next_due_ms: None,
            last_poll_ms: now,
            session: 0,
        }
    }

    pub fn fatal(&self) -> Option<KafkaCode> {
        self.fatal
    }

    /// In the group with an epoch the coordinator gave.
    pub fn is_member(&self) -> bool {
        self.member_epoch > JOIN_EPOCH
    }

    /// The epoch offsets are committed with, when the member is in the group.
    pub fn commit_epoch(&self) -> Option<i32> {
        self.is_member().then_some(self.member_epoch)
    }

    /// Subscribes (a change is sent with the next heartbeat, at once when in the group).
    pub fn subscribe(&mut self, sub: Subscription) {
        if self.subscription.as_ref() == Some(&sub) {
            return;
        }
        let had_regex = matches!(self.subscription, Some(Subscription::Regex(_)));
        self.clear_regex = had_regex && matches!(sub, Subscription::Topics(_));
        self.subscription = Some(sub);
        if self.is_member() {
            self.next_due_ms = None;
        }
    }

    /// The application called `poll`: it joins when subscribed and not in the group.
    /// Returns whether the heartbeat task has something new to do.
    pub fn on_poll(&mut self, now: u64) -> bool {
        self.last_poll_ms = now;
        let join = self.subscription.is_some()
            && self.owned.is_empty()
            && !self.is_member()
            && !self.awaiting_lost
            && self.fatal.is_none()
            && !self.join_wanted;
        if join {
            self.join_wanted = true;
            self.next_due_ms = None;
        }
        join
    }

    /// Whether partitions were lost since the last call (and forgets it); the member may join
    /// again after the application has reported them.
    pub fn take_lost(&mut self) -> bool {
        std::mem::take(&mut self.awaiting_lost)
    }

    fn fields(&self, member_epoch: i32) -> HeartbeatFields {
        let leaving = member_epoch < JOIN_EPOCH;
        HeartbeatFields {
            member_id: self.member_id.clone(),
            member_id_named: self.member_id_named,
            member_epoch,
            instance_id: self.settings.instance_id.clone(),
            rack_id: self.settings.rack_id.clone(),
            rebalance_timeout_ms: i32::try_from(self.settings.max_poll_interval_ms)
                .unwrap_or(i32::MAX),
            subscription: (!leaving).then(|| self.subscription.clone()).flatten(),
            clear_regex: self.clear_regex && !leaving,
            server_assignor: (!leaving)
                .then(|| self.settings.server_assignor.clone())
                .flatten(),
            owned: (!leaving).then(|| self.owned.clone()),
            session: self.session,
        }
    }

    fn leave_epoch(&self) -> i32 {
        match self.settings.instance_id {
            Some(_) => STATIC_LEAVE_EPOCH,
            None => LEAVE_EPOCH,
        }
    }

    /// The heartbeat task's next step.
    pub fn heartbeat_action(&mut self, now: u64) -> HeartbeatAction848 {
        let active = self.subscription.is_some() && self.fatal.is_none() && !self.awaiting_lost;
        if !active || (!self.is_member() && !self.join_wanted) {
            return HeartbeatAction848::Idle;
        }
        let poll_deadline = self.last_poll_ms + self.settings.max_poll_interval_ms;
        if self.is_member() && now > poll_deadline {
            let leave = self.fields(self.leave_epoch());
            self.lose();
            return HeartbeatAction848::PollTimeoutExpired(leave);
        }
        let due = self.next_due_ms.unwrap_or(now);
        if now >= due {
            let fields = self.fields(self.member_epoch);
            // Until the answer says otherwise; the task waits for the answer anyway.
            self.next_due_ms = Some(now + self.interval_ms);
            return HeartbeatAction848::Send(fields);
        }
        match self.is_member() {
            true => HeartbeatAction848::WaitUntil(due.min(poll_deadline + 1)),
            false => HeartbeatAction848::WaitUntil(due),
        }
    }

    /// The membership is gone: its partitions are lost and it joins again with epoch 0 once
    /// the application has reported them.
    fn lose(&mut self) {
        self.member_epoch = JOIN_EPOCH;
        self.awaiting_lost = true;
        self.join_wanted = false;
        self.target = None;
        self.owned.clear();
        self.next_due_ms = None;
        self.session += 1;
    }

    /// An answer (or the error code standing for no answer) to a heartbeat sent with `sent`.
    pub fn on_answer(
        &mut self,
        sent: &HeartbeatFields,
        answer: Result<HeartbeatReply, KafkaCode>,
        now: u64,
    ) -> HeartbeatOutcome848 {
        if sent.session != self.session || self.subscription.is_none() {
            return HeartbeatOutcome848::Ignored;
        }
        match answer {
            Ok(reply) => self.on_reply(reply, now),
            Err(UNKNOWN_MEMBER_ID | FENCED_MEMBER_EPOCH) => {
                self.lose();
                HeartbeatOutcome848::Lost
            }
            Err(KafkaCode::NOT_COORDINATOR | KafkaCode::COORDINATOR_NOT_AVAILABLE)
            | Err(KafkaCode::NETWORK_EXCEPTION) => {
                self.next_due_ms = Some(now + self.settings.retry_backoff_ms);
                HeartbeatOutcome848::CoordinatorUnknown
            }
            Err(KafkaCode::COORDINATOR_LOAD_IN_PROGRESS | KafkaCode::REQUEST_TIMED_OUT) => {
                self.next_due_ms = Some(now + self.settings.retry_backoff_ms);
                HeartbeatOutcome848::Retry
            }
            Err(code) => {
                // UNRELEASED_INSTANCE_ID, UNSUPPORTED_ASSIGNOR, GROUP_MAX_SIZE_REACHED, an
                // invalid request or regex, authorization: nothing a retry changes.
                self.fatal = Some(code);
                HeartbeatOutcome848::Fatal(code)
            }
        }
    }

    fn on_reply(&mut self, reply: HeartbeatReply, now: u64) -> HeartbeatOutcome848 {
        if let Some(id) = reply.member_id.filter(|id| !id.is_empty()) {
            self.member_id = id;
        }
        self.member_id_named = true;
        self.member_epoch = reply.member_epoch;
        self.join_wanted = false;
        if let Ok(ms) = u64::try_from(reply.heartbeat_interval_ms) {
            if ms > 0 {
                self.interval_ms = ms;
            }
        }
        self.next_due_ms = Some(now + self.interval_ms);
        match reply.assignment {
            Some(a) => {
                self.target = Some(a);
                HeartbeatOutcome848::NewAssignment
            }
            None => HeartbeatOutcome848::Ok,
        }
    }

    /// What the application must revoke and take to reach the coordinator's assignment;
    /// `None` when there is nothing to do.
    pub fn reconciliation(&mut self) -> Option<Reconciliation> {
        let target = self.target.as_ref()?;
        let r = Reconciliation {
            revoke: difference(&self.owned, target),
            assign: difference(target, &self.owned),
            owned: self.owned.clone(),
            session: self.session,
        };
        if r.revoke.is_empty() && r.assign.is_empty() {
            self.target = None;
            return None;
        }
        Some(r)
    }

    /// The application now holds `owned` after reconciling in `session`: the acknowledging
    /// heartbeat goes at once. Ignored when the membership was lost meanwhile (the
    /// application reports everything lost next).
    pub fn reconciled(&mut self, session: u64, owned: TopicIdPartitions) {
        if session != self.session {
            return;
        }
        if self.target.as_ref() == Some(&owned) {
            self.target = None;
        }
        self.owned = owned;
        if self.is_member() {
            self.next_due_ms = None;
        }
    }

    /// The leave heartbeat to send (close, unsubscribe), if the member is in the group; the
    /// membership ends either way, and a later subscription joins anew.
    pub fn leave(&mut self) -> Option<HeartbeatFields> {
        let leave = self.is_member().then(|| self.fields(self.leave_epoch()));
        self.member_epoch = JOIN_EPOCH;
        self.subscription = None;
        self.join_wanted = false;
        self.awaiting_lost = false;
        self.target = None;
        self.owned.clear();
        self.next_due_ms = None;
        self.session += 1;
        leave
    }
}

fn difference(a: &TopicIdPartitions, b: &TopicIdPartitions) -> Vec<(Uuid, i32)> {
    a.iter()
        .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
        .filter(|(t, p)| !b.get(t).is_some_and(|ps| ps.contains(p)))
        .collect()
}

#[cfg(test)]
#[path = "membership_848_tests.rs"]
mod tests;
