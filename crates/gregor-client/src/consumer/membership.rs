//! The consumer's group membership as a pure state machine (Kafka's `AbstractCoordinator` /
//! `ConsumerCoordinator` decisions, without their I/O).
//!
//! Given the answers to JoinGroup, SyncGroup and Heartbeat and the current time (ms), it says
//! what to do next: join again at once (MEMBER_ID_REQUIRED), look for the coordinator, give up
//! (fenced), send a heartbeat, leave because `max.poll.interval.ms` passed. The rebalance rules
//! of the two protocols (which partitions to revoke before joining, which after SyncGroup, and
//! whether a second round is needed) are the functions at the bottom.
//!
//! States: `Unjoined` → (JoinGroup sent) `Joining` → (JoinGroup answered) `Syncing` →
//! (SyncGroup answered) `Stable`. Heartbeats are only sent while `Stable`: during a rebalance
//! the pending JoinGroup / SyncGroup keeps the member alive at the coordinator.

use std::collections::BTreeSet;

use gregor_assign::{Assignor, RebalanceProtocol};

use crate::error::KafkaCode;
use crate::types::TopicPartition;

pub const ILLEGAL_GENERATION: KafkaCode = KafkaCode(22);
pub const INCONSISTENT_GROUP_PROTOCOL: KafkaCode = KafkaCode(23);
pub const UNKNOWN_MEMBER_ID: KafkaCode = KafkaCode(25);
pub const INVALID_SESSION_TIMEOUT: KafkaCode = KafkaCode(26);
pub const GROUP_AUTHORIZATION_FAILED: KafkaCode = KafkaCode(30);
pub const MEMBER_ID_REQUIRED: KafkaCode = KafkaCode(79);
pub const GROUP_MAX_SIZE_REACHED: KafkaCode = KafkaCode(81);
pub const FENCED_INSTANCE_ID: KafkaCode = KafkaCode(82);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    Unjoined,
    Joining,
    Syncing,
    Stable,
}

/// Timing settings in ms.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub heartbeat_interval_ms: u64,
    pub session_timeout_ms: u64,
    pub max_poll_interval_ms: u64,
    pub retry_backoff_ms: u64,
}

/// What the heartbeat task does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeartbeatAction {
    /// Not in a stable generation: wait to be woken.
    Idle,
    /// Nothing until then.
    WaitUntil(u64),
    /// Send a Heartbeat for this generation.
    Send { generation: i32, member_id: String },
    /// `max.poll.interval.ms` passed without a poll: the member has left (its partitions are
    /// lost); send LeaveGroup when `send_leave` (dynamic members).
    PollTimeoutExpired { member_id: String, send_leave: bool },
}

/// What a Heartbeat answer meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeartbeatOutcome {
    Ok,
    /// The group is rebalancing: join again on the next poll.
    Rejoin,
    /// Membership gone (unknown member, old generation): partitions are lost; join again.
    Lost,
    /// The coordinator moved or is unreachable: find it again.
    CoordinatorUnknown,
    /// Fenced by a newer instance with the same `group.instance.id`.
    Fatal(KafkaCode),
}

/// The next step after a JoinGroup or SyncGroup answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinStep {
    /// Send JoinGroup again now (with the member id the coordinator gave, or none).
    JoinAgain,
    /// Look up the coordinator, wait the backoff, then join again.
    FindCoordinatorAndRejoin,
    /// Wait the backoff, then join again.
    BackoffAndRejoin,
    /// Joined: send SyncGroup (with the assignment when `leader`).
    Sync {
        leader: bool,
    },
    /// Synced: the assignment is this member's.
    Stable,
    Fatal(KafkaCode),
}

/// A JoinGroup answer, reduced to what the member needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinAnswer {
    pub error: Option<KafkaCode>,
    pub member_id: String,
    pub generation: i32,
    pub protocol_name: Option<String>,
    pub leader: String,
}

/// One member's view of its group.
#[derive(Debug, Clone)]
pub struct Membership {
    pub member_id: String,
    pub generation: i32,
    pub protocol_name: Option<String>,
    pub state: MemberState,
    static_member: bool,
    timing: Timing,
    /// Why the member must join again, if it must.
    rejoin: Option<String>,
    /// The member's partitions were lost (not revoked) and must be reported so before the
    /// next join.
    lost: bool,
    fatal: Option<KafkaCode>,
    last_poll_ms: u64,
    last_heartbeat_sent_ms: Option<u64>,
    heartbeat_in_flight: bool,
    last_heartbeat_ok_ms: u64,
}

impl Membership {
    pub fn new(static_member: bool, timing: Timing, now: u64) -> Membership {
        Membership {
            member_id: String::new(),
            generation: -1,
            protocol_name: None,
            state: MemberState::Unjoined,
            static_member,
            timing,
            rejoin: None,
            lost: false,
            fatal: None,
            last_poll_ms: now,
            last_heartbeat_sent_ms: None,
            heartbeat_in_flight: false,
            last_heartbeat_ok_ms: now,
        }
    }

    /// The application called `poll`.
    pub fn on_poll(&mut self, now: u64) {
        self.last_poll_ms = now;
    }

    pub fn needs_join(&self) -> bool {
        self.state == MemberState::Unjoined || self.rejoin.is_some()
    }

    pub fn rejoin_reason(&self) -> Option<&str> {
        self.rejoin.as_deref()
    }

    pub fn request_rejoin(&mut self, reason: &str) {
        if self.rejoin.is_none() {
            self.rejoin = Some(reason.to_string());
        }
    }

    /// Whether partitions were lost since the last call (and forgets it).
    pub fn take_lost(&mut self) -> bool {
        std::mem::take(&mut self.lost)
    }

    pub fn fatal(&self) -> Option<KafkaCode> {
        self.fatal
    }

    /// Forgets the generation (and, for dynamic members or when asked, the member id): the
    /// member's partitions are lost.
    fn reset_generation(&mut self, forget_member_id: bool) {
        self.generation = -1;
        self.protocol_name = None;
        if forget_member_id || !self.static_member {
            self.member_id.clear();
        }
        self.state = MemberState::Unjoined;
        self.lost = true;
        self.heartbeat_in_flight = false;
    }

    /// JoinGroup is being sent.
    pub fn join_sent(&mut self) {
        self.state = MemberState::Joining;
        self.rejoin = None;
    }

    pub fn on_join_answer(&mut self, a: JoinAnswer) -> JoinStep {
        match a.error {
            None => {
                self.member_id = a.member_id;
                self.generation = a.generation;
                self.protocol_name = a.protocol_name;
                self.state = MemberState::Syncing;
                JoinStep::Sync {
                    leader: a.leader == self.member_id,
                }
            }
            Some(MEMBER_ID_REQUIRED) => {
                // KIP-394: the coordinator named our member id; join again with it.
                self.member_id = a.member_id;
                self.state = MemberState::Unjoined;
                JoinStep::JoinAgain
            }
            Some(UNKNOWN_MEMBER_ID) => {
                self.reset_generation(true);
                JoinStep::JoinAgain
            }
            Some(ILLEGAL_GENERATION) => {
                self.reset_generation(false);
                JoinStep::JoinAgain
            }
            Some(code) => self.after_error(code),
        }
    }

    /// JoinGroup or SyncGroup got no answer (connection lost, timeout): the coordinator may
    /// have moved.
    pub fn on_no_answer(&mut self) -> JoinStep {
        self.state = MemberState::Unjoined;
        JoinStep::FindCoordinatorAndRejoin
    }

    /// SyncGroup is being sent.
    pub fn sync_sent(&mut self) {
        self.state = MemberState::Syncing;
    }

    pub fn on_sync_answer(&mut self, error: Option<KafkaCode>, now: u64) -> JoinStep {
        match error {
            None => {
                self.state = MemberState::Stable;
                // The poll interval restarts with the generation, as in Kafka: time spent
                // inside the rebalance (JoinGroup may wait up to the rebalance timeout, which
                // is max.poll.interval.ms itself) is not time the application failed to poll.
                self.last_poll_ms = now;
                self.last_heartbeat_sent_ms = Some(now);
                self.last_heartbeat_ok_ms = now;
                self.heartbeat_in_flight = false;
                JoinStep::Stable
            }
            Some(KafkaCode::REBALANCE_IN_PROGRESS) => {
                self.state = MemberState::Unjoined;
                JoinStep::JoinAgain
            }
            Some(UNKNOWN_MEMBER_ID) => {
                self.reset_generation(true);
                JoinStep::JoinAgain
            }
            Some(ILLEGAL_GENERATION) => {
                self.reset_generation(false);
                JoinStep::JoinAgain
            }
            Some(code) => self.after_error(code),
        }
    }

    fn after_error(&mut self, code: KafkaCode) -> JoinStep {
        self.state = MemberState::Unjoined;
        match code {
            KafkaCode::NOT_COORDINATOR | KafkaCode::COORDINATOR_NOT_AVAILABLE => {
                JoinStep::FindCoordinatorAndRejoin
            }
            KafkaCode::COORDINATOR_LOAD_IN_PROGRESS
            | KafkaCode::REBALANCE_IN_PROGRESS
            | KafkaCode::REQUEST_TIMED_OUT
            | KafkaCode::NETWORK_EXCEPTION => JoinStep::BackoffAndRejoin,
            other => {
                self.fatal = Some(other);
                JoinStep::Fatal(other)
            }
        }
    }

    /// The heartbeat task's next step.
    pub fn heartbeat_action(&mut self, now: u64) -> HeartbeatAction {
        if self.state != MemberState::Stable {
            return HeartbeatAction::Idle;
        }
        let poll_deadline = self.last_poll_ms + self.timing.max_poll_interval_ms;
        if now > poll_deadline {
            let member_id = self.member_id.clone();
            let send_leave = !self.static_member;
            // A static member keeps its id: the coordinator holds its place until the session
            // times out. Either way the partitions are lost.
            self.reset_generation(false);
            self.request_rejoin("max.poll.interval.ms expired");
            return HeartbeatAction::PollTimeoutExpired {
                member_id,
                send_leave,
            };
        }
        if self.heartbeat_in_flight {
            return HeartbeatAction::WaitUntil(poll_deadline + 1);
        }
        let next = self
            .last_heartbeat_sent_ms
            .map_or(now, |t| t + self.timing.heartbeat_interval_ms);
        if now >= next {
            self.heartbeat_in_flight = true;
            self.last_heartbeat_sent_ms = Some(now);
            return HeartbeatAction::Send {
                generation: self.generation,
                member_id: self.member_id.clone(),
            };
        }
        HeartbeatAction::WaitUntil(next.min(poll_deadline + 1))
    }

    /// A Heartbeat answer (`None` = no error) for `generation`, or a failure to get one.
    pub fn on_heartbeat_answer(
        &mut self,
        generation: i32,
        error: Option<KafkaCode>,
        now: u64,
    ) -> HeartbeatOutcome {
        if generation != self.generation || self.state != MemberState::Stable {
            // An answer about a generation the member has already left behind.
            self.heartbeat_in_flight = false;
            return HeartbeatOutcome::Ok;
        }
        self.heartbeat_in_flight = false;
        match error {
            None => {
                self.last_heartbeat_ok_ms = now;
                HeartbeatOutcome::Ok
            }
            Some(KafkaCode::REBALANCE_IN_PROGRESS) => {
                self.last_heartbeat_ok_ms = now;
                self.request_rejoin("the group is rebalancing");
                HeartbeatOutcome::Rejoin
            }
            Some(UNKNOWN_MEMBER_ID) => {
                self.reset_generation(true);
                HeartbeatOutcome::Lost
            }
            Some(ILLEGAL_GENERATION) => {
                self.reset_generation(false);
                HeartbeatOutcome::Lost
            }
            Some(FENCED_INSTANCE_ID) => {
                self.fatal = Some(FENCED_INSTANCE_ID);
                self.reset_generation(false);
                HeartbeatOutcome::Fatal(FENCED_INSTANCE_ID)
            }
            Some(_) => {
                // Retry sooner than a full interval.
                self.last_heartbeat_sent_ms = Some(
                    (now + self.timing.retry_backoff_ms)
                        .saturating_sub(self.timing.heartbeat_interval_ms),
                );
                if now > self.last_heartbeat_ok_ms + self.timing.session_timeout_ms {
                    tracing::warn!(
                        member = %self.member_id,
                        generation = self.generation,
                        "no heartbeat answered within session.timeout.ms"
                    );
                }
                HeartbeatOutcome::CoordinatorUnknown
            }
        }
    }

    /// The member leaves the group (close): nothing more to send.
    pub fn left(&mut self) {
        self.reset_generation(false);
        self.lost = false;
    }
}

/// The rebalance protocol a member runs: the highest one every configured strategy supports
/// (Kafka's rule), so `[range, cooperative-sticky]` runs eager.
pub fn common_protocol(assignors: &[Box<dyn Assignor>]) -> RebalanceProtocol {
    let all_cooperative = !assignors.is_empty()
        && assignors.iter().all(|a| {
            a.supported_protocols()
                .contains(&RebalanceProtocol::Cooperative)
        });
    if all_cooperative {
        RebalanceProtocol::Cooperative
    } else {
        RebalanceProtocol::Eager
    }
}

/// Partitions to revoke before sending JoinGroup: everything under eager; under cooperative
/// only those of topics no longer subscribed.
pub fn revoke_before_join(
    protocol: RebalanceProtocol,
    owned: &BTreeSet<TopicPartition>,
    subscribed: &BTreeSet<String>,
) -> Vec<TopicPartition> {
    match protocol {
        RebalanceProtocol::Eager => owned.iter().cloned().collect(),
        RebalanceProtocol::Cooperative => owned
            .iter()
            .filter(|tp| !subscribed.contains(&tp.topic))
            .cloned()
            .collect(),
    }
}

/// How an assignment from SyncGroup changes what the member owns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AssignmentChange {
    /// Owned partitions not in the new assignment (revoked now, after SyncGroup).
    pub revoked: Vec<TopicPartition>,
    /// Partitions in the new assignment not owned before.
    pub added: Vec<TopicPartition>,
    /// Cooperative: partitions were revoked, so their new owners can only get them in a
    /// second rebalance, which this member starts by rejoining at once.
    pub rejoin: bool,
}

pub fn assignment_change(
    protocol: RebalanceProtocol,
    owned: &BTreeSet<TopicPartition>,
    assigned: &BTreeSet<TopicPartition>,
) -> AssignmentChange {
    let revoked: Vec<TopicPartition> = owned.difference(assigned).cloned().collect();
    let added: Vec<TopicPartition> = assigned.difference(owned).cloned().collect();
    let rejoin = protocol == RebalanceProtocol::Cooperative && !revoked.is_empty();
    AssignmentChange {
        revoked,
        added,
        rejoin,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timing = Timing {
        heartbeat_interval_ms: 100,
        session_timeout_ms: 1_000,
        max_poll_interval_ms: 2_000,
        retry_backoff_ms: 10,
    };

    fn answer(error: Option<KafkaCode>, member: &str, generation: i32, leader: &str) -> JoinAnswer {
        JoinAnswer {
            error,
            member_id: member.into(),
            generation,
            protocol_name: Some("range".into()),
            leader: leader.into(),
        }
    }

    fn joined(static_member: bool) -> Membership {
        let mut m = Membership::new(static_member, T, 0);
        m.join_sent();
        assert_eq!(
            m.on_join_answer(answer(None, "m1", 1, "m1")),
            JoinStep::Sync { leader: true }
        );
        m.sync_sent();
        assert_eq!(m.on_sync_answer(None, 0), JoinStep::Stable);
        m
    }

    #[test]
    fn member_id_required_then_join_as_follower() {
        let mut m = Membership::new(false, T, 0);
        assert!(m.needs_join());
        m.join_sent();
        assert_eq!(
            m.on_join_answer(answer(Some(MEMBER_ID_REQUIRED), "m-7", -1, "")),
            JoinStep::JoinAgain
        );
        assert_eq!(m.member_id, "m-7");
        m.join_sent();
        assert_eq!(
            m.on_join_answer(answer(None, "m-7", 3, "other")),
            JoinStep::Sync { leader: false }
        );
        assert_eq!(m.generation, 3);
        assert_eq!(
            m.heartbeat_action(0),
            HeartbeatAction::Idle,
            "no heartbeat while syncing"
        );
        m.sync_sent();
        assert_eq!(m.on_sync_answer(None, 0), JoinStep::Stable);
        assert!(!m.needs_join());
    }

    #[test]
    fn heartbeats_every_interval_and_rejoin_on_rebalance() {
        let mut m = joined(false);
        assert_eq!(m.heartbeat_action(50), HeartbeatAction::WaitUntil(100));
        let send = m.heartbeat_action(100);
        assert_eq!(
            send,
            HeartbeatAction::Send {
                generation: 1,
                member_id: "m1".into()
            }
        );
        // One in flight at a time.
        assert!(matches!(
            m.heartbeat_action(150),
            HeartbeatAction::WaitUntil(_)
        ));
        assert_eq!(m.on_heartbeat_answer(1, None, 120), HeartbeatOutcome::Ok);
        m.on_poll(150);
        assert!(matches!(
            m.heartbeat_action(200),
            HeartbeatAction::Send { .. }
        ));
        assert_eq!(
            m.on_heartbeat_answer(1, Some(KafkaCode::REBALANCE_IN_PROGRESS), 210),
            HeartbeatOutcome::Rejoin
        );
        assert!(m.needs_join());
        assert!(!m.take_lost(), "a rebalance is not a loss");
    }

    #[test]
    fn a_rebalance_longer_than_the_poll_interval_does_not_expire_it() {
        let mut m = joined(false);
        m.on_poll(100);
        assert_eq!(
            m.on_heartbeat_answer(1, Some(KafkaCode::REBALANCE_IN_PROGRESS), 150),
            HeartbeatOutcome::Rejoin
        );
        // The JoinGroup round waits for a slow member for longer than max.poll.interval.ms.
        m.join_sent();
        assert_eq!(m.heartbeat_action(1_000), HeartbeatAction::Idle);
        assert_eq!(
            m.on_join_answer(answer(None, "m1", 2, "m1")),
            JoinStep::Sync { leader: true }
        );
        m.sync_sent();
        let synced = 100 + T.max_poll_interval_ms + 500;
        assert_eq!(m.on_sync_answer(None, synced), JoinStep::Stable);
        assert!(matches!(
            m.heartbeat_action(synced + 1),
            HeartbeatAction::WaitUntil(_)
        ));
        assert!(!m.take_lost(), "the healthy member keeps its partitions");
        // The interval counts again from the new generation.
        assert!(matches!(
            m.heartbeat_action(synced + T.max_poll_interval_ms + 1),
            HeartbeatAction::PollTimeoutExpired { .. }
        ));
    }

    #[test]
    fn unknown_member_or_old_generation_loses_partitions() {
        let mut m = joined(false);
        m.heartbeat_action(100);
        assert_eq!(
            m.on_heartbeat_answer(1, Some(UNKNOWN_MEMBER_ID), 110),
            HeartbeatOutcome::Lost
        );
        assert!(m.take_lost());
        assert_eq!(m.member_id, "");
        assert_eq!(m.generation, -1);
        assert!(m.needs_join());

        let mut m = joined(true);
        m.heartbeat_action(100);
        assert_eq!(
            m.on_heartbeat_answer(1, Some(ILLEGAL_GENERATION), 110),
            HeartbeatOutcome::Lost
        );
        assert_eq!(m.member_id, "m1", "a static member keeps its id");
        // A late answer for an old generation changes nothing.
        assert_eq!(
            m.on_heartbeat_answer(1, Some(UNKNOWN_MEMBER_ID), 120),
            HeartbeatOutcome::Ok
        );
    }

    #[test]
    fn poll_timeout_leaves_the_group_and_loses_partitions() {
        let mut m = joined(false);
        m.on_poll(0);
        assert!(matches!(
            m.heartbeat_action(100),
            HeartbeatAction::Send { .. }
        ));
        m.on_heartbeat_answer(1, None, 100);
        // The wait never passes the poll deadline.
        assert_eq!(
            m.heartbeat_action(1_950),
            HeartbeatAction::Send {
                generation: 1,
                member_id: "m1".into()
            }
        );
        m.on_heartbeat_answer(1, None, 1_950);
        assert_eq!(m.heartbeat_action(1_990), HeartbeatAction::WaitUntil(2_001));
        assert_eq!(
            m.heartbeat_action(2_001),
            HeartbeatAction::PollTimeoutExpired {
                member_id: "m1".into(),
                send_leave: true
            }
        );
        assert!(m.take_lost());
        assert!(m.needs_join());
        assert_eq!(m.heartbeat_action(2_002), HeartbeatAction::Idle);
        // Static members do not send LeaveGroup.
        let mut s = joined(true);
        assert!(matches!(
            s.heartbeat_action(2_001),
            HeartbeatAction::PollTimeoutExpired {
                send_leave: false,
                ..
            }
        ));
    }

    #[test]
    fn join_and_sync_errors_map_to_kafkas_reactions() {
        let mut m = Membership::new(false, T, 0);
        m.join_sent();
        assert_eq!(
            m.on_join_answer(answer(Some(KafkaCode::NOT_COORDINATOR), "", -1, "")),
            JoinStep::FindCoordinatorAndRejoin
        );
        m.join_sent();
        assert_eq!(
            m.on_join_answer(answer(
                Some(KafkaCode::COORDINATOR_LOAD_IN_PROGRESS),
                "",
                -1,
                ""
            )),
            JoinStep::BackoffAndRejoin
        );
        m.join_sent();
        assert_eq!(
            m.on_join_answer(answer(Some(INCONSISTENT_GROUP_PROTOCOL), "", -1, "")),
            JoinStep::Fatal(INCONSISTENT_GROUP_PROTOCOL)
        );
        assert_eq!(m.fatal(), Some(INCONSISTENT_GROUP_PROTOCOL));
        let mut m = Membership::new(false, T, 0);
        m.join_sent();
        m.on_join_answer(answer(None, "m", 2, "x"));
        m.sync_sent();
        assert_eq!(
            m.on_sync_answer(Some(KafkaCode::REBALANCE_IN_PROGRESS), 5),
            JoinStep::JoinAgain
        );
        assert!(!m.take_lost());
        m.join_sent();
        m.on_join_answer(answer(None, "m", 3, "x"));
        assert_eq!(
            m.on_sync_answer(Some(ILLEGAL_GENERATION), 5),
            JoinStep::JoinAgain
        );
        assert!(m.take_lost());
        assert_eq!(m.member_id, "", "dynamic members start over");
        m.join_sent();
        m.on_join_answer(answer(None, "m", 4, "x"));
        assert_eq!(
            m.on_sync_answer(Some(FENCED_INSTANCE_ID), 5),
            JoinStep::Fatal(FENCED_INSTANCE_ID)
        );
    }

    fn tps(v: &[i32]) -> BTreeSet<TopicPartition> {
        v.iter().map(|&p| TopicPartition::new("t", p)).collect()
    }

    #[test]
    fn eager_revokes_everything_before_joining_cooperative_only_what_moves() {
        let owned = tps(&[0, 1, 2]);
        let subscribed: BTreeSet<String> = ["t".to_string()].into();
        assert_eq!(
            revoke_before_join(RebalanceProtocol::Eager, &owned, &subscribed).len(),
            3
        );
        assert!(revoke_before_join(RebalanceProtocol::Cooperative, &owned, &subscribed).is_empty());
        assert_eq!(
            revoke_before_join(RebalanceProtocol::Cooperative, &owned, &BTreeSet::new()).len(),
            3,
            "unsubscribed topics are revoked"
        );
        // Seed 004, cooperative: A owned 0,1,2 and is now given 0,1 -> revoke 2, rejoin.
        let c = assignment_change(RebalanceProtocol::Cooperative, &owned, &tps(&[0, 1]));
        assert_eq!(c.revoked, vec![TopicPartition::new("t", 2)]);
        assert!(c.added.is_empty());
        assert!(c.rejoin);
        // The second round gives nothing new: assigned [] and no further rejoin.
        let c = assignment_change(RebalanceProtocol::Cooperative, &tps(&[0, 1]), &tps(&[0, 1]));
        assert_eq!(c, AssignmentChange::default());
        // Eager: everything was revoked before joining, so it is all "added".
        let c = assignment_change(RebalanceProtocol::Eager, &BTreeSet::new(), &tps(&[0, 1]));
        assert_eq!(c.added.len(), 2);
        assert!(!c.rejoin);
    }

    #[test]
    fn protocol_is_the_highest_every_strategy_supports() {
        let b = |n: &str| gregor_assign::builtin(n).unwrap();
        assert_eq!(
            common_protocol(&[b("range"), b("cooperative-sticky")]),
            RebalanceProtocol::Eager
        );
        assert_eq!(
            common_protocol(&[b("cooperative-sticky")]),
            RebalanceProtocol::Cooperative
        );
        assert_eq!(common_protocol(&[b("sticky")]), RebalanceProtocol::Eager);
    }
}
