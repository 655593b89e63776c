//! A classic group's membership data: members, leader, generation, protocol, state and the
//! bookkeeping of the join and sync barriers. No policy here: the coordinator decides when to
//! rebalance; this module keeps the data consistent (leader present while members exist, static
//! member index in step with members, awaiting-join count exact).

use std::collections::{HashMap, HashSet};
use std::fmt;

use bytes::Bytes;
use indexmap::IndexMap;

use crate::api::{JoinGroupMember, JoinProtocol, RequestId};

/// Kafka's classic group states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupState {
    /// No members. Also the state of "simple" groups that only commit offsets.
    Empty,
    /// Waiting for the members to (re)join.
    PreparingRebalance,
    /// Joined; waiting for the leader's assignment.
    CompletingRebalance,
    /// Every member has its assignment.
    Stable,
    /// Being deleted (or unloaded).
    Dead,
}

impl GroupState {
    /// The name Kafka reports (DescribeGroups, ListGroups).
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }

    /// Kafka's allowed transitions: the states a group must be in to move to `self`.
    pub fn valid_previous(self) -> &'static [GroupState] {
        use GroupState::*;
        match self {
            Empty => &[PreparingRebalance],
            PreparingRebalance => &[Stable, CompletingRebalance, Empty],
            CompletingRebalance => &[PreparingRebalance],
            Stable => &[CompletingRebalance],
            Dead => &[Stable, PreparingRebalance, CompletingRebalance, Empty, Dead],
        }
    }

    pub fn can_transition_to(self, target: GroupState) -> bool {
        target.valid_previous().contains(&self)
    }
}

impl fmt::Display for GroupState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Member {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<JoinProtocol>,
    pub assignment: Bytes,
    /// The JoinGroup request parked until the join phase completes.
    pub awaiting_join: Option<RequestId>,
    /// The SyncGroup request parked until the leader's assignment is durable.
    pub awaiting_sync: Option<RequestId>,
    /// Joined in the current join phase for the first time: may expire while awaiting join.
    pub is_new: bool,
}

impl Member {
    /// The member as its client described itself, for the rebalance history.
    pub fn to_ref(&self) -> crate::history::MemberRef {
        crate::history::MemberRef {
            member_id: self.member_id.clone(),
            group_instance_id: self.group_instance_id.clone(),
            client_id: self.client_id.clone(),
            client_host: self.client_host.clone(),
        }
    }

    /// The member's metadata for `protocol`; empty when it does not support it (cannot happen for
    /// the group's chosen protocol, which every member supports).
    pub fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|p| p.name == protocol)
            .map(|p| p.metadata.clone())
            .unwrap_or_default()
    }

    pub fn protocol_names(&self) -> Vec<&str> {
        self.protocols.iter().map(|p| p.name.as_str()).collect()
    }

    /// Kafka's `hasSatisfiedHeartbeat`: members parked in a join or sync count as alive, except new
    /// members, whose pending join may time out.
    pub fn has_satisfied_heartbeat(&self) -> bool {
        !self.is_new && (self.awaiting_join.is_some() || self.awaiting_sync.is_some())
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Group {
    pub group_id: String,
    pub state: GroupState,
    pub previous_state: GroupState,
    pub state_timestamp: Option<i64>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub generation_id: i32,
    pub leader_id: Option<String>,
    /// In join order: the first member becomes leader when the leader leaves, and protocol votes
    /// break ties in this order.
    pub members: IndexMap<String, Member>,
    /// group instance id -> member id.
    pub static_members: HashMap<String, String>,
    /// Member ids handed out with MEMBER_ID_REQUIRED that have not joined yet.
    pub pending_join_members: HashSet<String>,
    /// Members that have not sent SyncGroup in this generation.
    pub pending_sync_members: HashSet<String>,
    num_awaiting_join: usize,
    /// A member joined during the initial delayed rebalance: extend the delay.
    pub new_member_added: bool,
    /// Rebalances since this coordinator loaded the group.
    pub history: crate::history::RebalanceHistory,
    /// The generation whose record is being written: its join phase is over, but its JoinGroup
    /// responses wait until the record is durable, so that no coordinator can hand the same
    /// generation number out again after a failover.
    pub storing_generation: Option<i32>,
    /// Loaded from a record of a generation whose assignment was never stored: the group must
    /// rebalance before anyone can sync.
    pub loaded_without_assignment: bool,
}

impl Group {
    pub fn new(group_id: String, now_ms: i64) -> Self {
        Group {
            group_id,
            state: GroupState::Empty,
            previous_state: GroupState::Dead,
            state_timestamp: Some(now_ms),
            protocol_type: None,
            protocol_name: None,
            generation_id: 0,
            leader_id: None,
            members: IndexMap::new(),
            static_members: HashMap::new(),
            pending_join_members: HashSet::new(),
            pending_sync_members: HashSet::new(),
            num_awaiting_join: 0,
            new_member_added: false,
            history: Default::default(),
            storing_generation: None,
            loaded_without_assignment: false,
        }
    }

    pub fn is(&self, state: GroupState) -> bool {
        self.state == state
    }

    pub fn transition_to(&mut self, target: GroupState, now_ms: i64) {
        if !self.state.can_transition_to(target) {
            // A bug, not a peer's doing; Kafka throws IllegalStateException. Keep serving.
            tracing::error!(group = %self.group_id, from = %self.state, to = %target, "invalid group state transition");
            debug_assert!(false, "invalid transition {} -> {}", self.state, target);
        }
        tracing::debug!(group = %self.group_id, from = %self.state, to = %target, generation = self.generation_id, "group state transition");
        self.previous_state = self.state;
        self.state = target;
        self.storing_generation = None;
        self.state_timestamp = Some(now_ms);
        self.record_rebalance_phase(now_ms);
    }

    /// Keeps the rebalance history in step with a state change just made.
    fn record_rebalance_phase(&mut self, now_ms: i64) {
        let members = || {
            self.members
                .values()
                .map(Member::to_ref)
                .collect::<Vec<_>>()
        };
        match (self.previous_state, self.state) {
            (GroupState::PreparingRebalance, GroupState::PreparingRebalance) => {}
            (previous, GroupState::PreparingRebalance) => {
                // A rebalance restarted during its sync phase did not finish.
                if previous == GroupState::CompletingRebalance {
                    self.history.abandon();
                }
                let before = members();
                self.history.start(now_ms, self.generation_id, before);
            }
            (GroupState::PreparingRebalance, GroupState::CompletingRebalance) => {
                let after = members();
                let leader = self.leader_id.clone();
                let protocol = self.protocol_name.clone();
                self.history
                    .join_completed(now_ms, self.generation_id, after, leader, protocol);
            }
            (GroupState::PreparingRebalance, GroupState::Empty) => {
                self.history
                    .join_completed(now_ms, self.generation_id, Vec::new(), None, None);
                self.history.finish(now_ms, Vec::new());
            }
            (_, GroupState::Stable) => {
                let assignments = self
                    .members
                    .values()
                    .map(|m| (m.member_id.clone(), m.assignment.clone()))
                    .collect();
                self.history.finish(now_ms, assignments)
            }
            (_, GroupState::Dead) => self.history.abandon(),
            _ => {}
        }
    }

    pub fn can_rebalance(&self) -> bool {
        self.state.can_transition_to(GroupState::PreparingRebalance)
    }

    pub fn member(&self, member_id: &str) -> Option<&Member> {
        self.members.get(member_id)
    }

    pub fn member_mut(&mut self, member_id: &str) -> Option<&mut Member> {
        self.members.get_mut(member_id)
    }

    pub fn has_member(&self, member_id: &str) -> bool {
        self.members.contains_key(member_id)
    }

    pub fn is_leader(&self, member_id: &str) -> bool {
        self.leader_id.as_deref() == Some(member_id)
    }

    pub fn is_pending_member(&self, member_id: &str) -> bool {
        self.pending_join_members.contains(member_id)
    }

    pub fn static_member_id(&self, group_instance_id: &str) -> Option<&str> {
        self.static_members
            .get(group_instance_id)
            .map(String::as_str)
    }

    /// Adds a member. The caller checked that its protocol type and protocols fit the group.
    pub fn add(&mut self, member: Member) {
        if self.members.is_empty() {
            self.protocol_type = Some(member.protocol_type.clone());
        }
        if let Some(instance) = &member.group_instance_id {
            self.static_members
                .insert(instance.clone(), member.member_id.clone());
        }
        if self.leader_id.is_none() {
            self.leader_id = Some(member.member_id.clone());
        }
        if member.awaiting_join.is_some() {
            self.num_awaiting_join += 1;
        }
        self.pending_join_members.remove(&member.member_id);
        self.members.insert(member.member_id.clone(), member);
    }

    /// Removes a member (and any pending-join or pending-sync entry for its id); a new leader is
    /// the first remaining member. Returns the removed member, whose parked requests the caller
    /// must answer.
    pub fn remove(&mut self, member_id: &str) -> Option<Member> {
        let removed = self.members.shift_remove(member_id);
        if let Some(m) = &removed {
            if m.awaiting_join.is_some() {
                self.num_awaiting_join -= 1;
            }
            if let Some(instance) = &m.group_instance_id {
                if self.static_members.get(instance).map(String::as_str) == Some(member_id) {
                    self.static_members.remove(instance);
                }
            }
        }
        if self.is_leader(member_id) {
            self.leader_id = self.members.keys().next().cloned();
        }
        self.pending_join_members.remove(member_id);
        self.pending_sync_members.remove(member_id);
        removed
    }

    /// Sets or clears a member's parked JoinGroup, keeping the awaiting count exact. Returns the
    /// request it replaces, if any.
    pub fn set_awaiting_join(
        &mut self,
        member_id: &str,
        request: Option<RequestId>,
    ) -> Option<RequestId> {
        let m = self.members.get_mut(member_id)?;
        let previous = std::mem::replace(&mut m.awaiting_join, request);
        match (previous.is_some(), request.is_some()) {
            (false, true) => self.num_awaiting_join += 1,
            (true, false) => self.num_awaiting_join -= 1,
            _ => {}
        }
        previous
    }

    pub fn num_awaiting_join(&self) -> usize {
        self.num_awaiting_join
    }

    /// Every member has rejoined and no member id handed out with MEMBER_ID_REQUIRED is pending.
    pub fn has_all_members_joined(&self) -> bool {
        self.members.len() == self.num_awaiting_join && self.pending_join_members.is_empty()
    }

    /// The group's rebalance timeout: the largest of its members'.
    pub fn rebalance_timeout_ms(&self) -> i32 {
        self.members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0)
    }

    /// Kafka's `supportsProtocols`: an empty group takes any non-empty protocol type and list;
    /// otherwise the type must match and one of the protocols must be supported by every member.
    pub fn supports_protocols(&self, protocol_type: &str, protocols: &[JoinProtocol]) -> bool {
        if self.is(GroupState::Empty) {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        if self.protocol_type.as_deref() != Some(protocol_type) {
            return false;
        }
        let lists: Vec<Vec<&str>> = self.members.values().map(Member::protocol_names).collect();
        let names: Vec<&str> = protocols.iter().map(|p| p.name.as_str()).collect();
        !names.is_empty() && gregor_assign::selection::supports_group(&lists, &names)
    }

    /// The protocol the members vote for (Kafka's rule, ties to join order).
    pub fn select_protocol(&self) -> Option<String> {
        let lists: Vec<Vec<&str>> = self.members.values().map(Member::protocol_names).collect();
        match gregor_assign::selection::select_protocol(&lists) {
            Ok(p) => Some(p),
            Err(e) => {
                // Joins are checked against the group's protocols, so this means a bug; keep
                // serving with the first member's first choice rather than failing the group.
                tracing::error!(group = %self.group_id, error = %e, "no protocol supported by every member");
                lists.first().and_then(|l| l.first()).map(|s| s.to_string())
            }
        }
    }

    /// Kafka's `maybeElectNewJoinedLeader`: keeps the leader if it rejoined, otherwise picks a
    /// member that did. False when nobody rejoined (or there is no leader).
    pub fn maybe_elect_new_joined_leader(&mut self) -> bool {
        let Some(leader) = self.leader_id.clone() else {
            return false;
        };
        if self
            .members
            .get(&leader)
            .is_some_and(|m| m.awaiting_join.is_some())
        {
            return true;
        }
        match self
            .members
            .values()
            .find(|m| m.awaiting_join.is_some())
            .map(|m| m.member_id.clone())
        {
            Some(new_leader) => {
                tracing::info!(group = %self.group_id, old_leader = %leader, new_leader = %new_leader, "leader did not rejoin; elected a member that did");
                self.leader_id = Some(new_leader);
                true
            }
            None => false,
        }
    }

    /// The members as the leader's JoinGroup response lists them.
    pub fn join_response_members(&self) -> Vec<JoinGroupMember> {
        let protocol = self.protocol_name.as_deref().unwrap_or_default();
        self.members
            .values()
            .map(|m| JoinGroupMember {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                metadata: m.metadata(protocol),
            })
            .collect()
    }

    /// Ids of members that have not rejoined in this join phase.
    pub fn not_yet_rejoined(&self) -> Vec<String> {
        self.members
            .values()
            .filter(|m| m.awaiting_join.is_none())
            .map(|m| m.member_id.clone())
            .collect()
    }
}
