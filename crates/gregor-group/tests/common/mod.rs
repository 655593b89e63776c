//! A test driver: a clock, request ids, and the shell's side of appends (durable log, optional
//! manual completion or failure).
#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;
use gregor_group::*;

pub const GROUP: &str = "g";
pub const SESSION: i32 = 10_000;
pub const REBALANCE: i32 = 30_000;

pub struct H {
    pub c: GroupCoordinator,
    pub now: i64,
    next_id: u64,
    pub responses: HashMap<u64, Response>,
    /// Order in which responses were sent.
    pub sent: Vec<u64>,
    /// Records whose append completed successfully, in log order.
    pub log: Vec<Record>,
    /// Appends not yet completed (when `auto_append` is off).
    pub pending: VecDeque<(AppendToken, Vec<Record>)>,
    pub auto_append: bool,
}

impl H {
    pub fn new() -> Self {
        Self::with_config(GroupConfig::default())
    }

    pub fn with_config(config: GroupConfig) -> Self {
        H {
            c: GroupCoordinator::new(config, 42),
            now: 1_000_000,
            next_id: 0,
            responses: HashMap::new(),
            sent: Vec::new(),
            log: Vec::new(),
            pending: VecDeque::new(),
            auto_append: true,
        }
    }

    pub fn process(&mut self, effects: Vec<Effect>) {
        let mut queue: VecDeque<Effect> = effects.into();
        while let Some(effect) = queue.pop_front() {
            match effect {
                Effect::Respond {
                    request_id,
                    response,
                } => {
                    assert!(
                        self.responses.insert(request_id, response).is_none(),
                        "request {request_id} answered twice"
                    );
                    self.sent.push(request_id);
                }
                Effect::Append { token, records } => {
                    if self.auto_append {
                        self.log.extend(records);
                        let more = self.c.append_completed(self.now, token, Ok(()));
                        queue.extend(more);
                    } else {
                        self.pending.push_back((token, records));
                    }
                }
            }
        }
    }

    pub fn send_with(&mut self, api_version: i16, client_id: &str, request: Request) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        let input = Input {
            request_id: id,
            context: RequestContext {
                client_id: client_id.to_string(),
                client_host: "/127.0.0.1".to_string(),
                api_version,
            },
            request,
        };
        let effects = self.c.handle(self.now, input);
        self.process(effects);
        id
    }

    pub fn send(&mut self, request: Request) -> u64 {
        self.send_with(9, "client", request)
    }

    /// Completes the oldest pending append.
    pub fn complete_append(&mut self, result: Result<(), ResponseError>) {
        let (token, records) = self.pending.pop_front().expect("a pending append");
        if result.is_ok() {
            self.log.extend(records);
        }
        let effects = self.c.append_completed(self.now, token, result);
        self.process(effects);
    }

    pub fn complete_all_appends(&mut self) {
        while !self.pending.is_empty() {
            self.complete_append(Ok(()));
        }
    }

    pub fn advance(&mut self, ms: i64) {
        self.now += ms;
        let effects = self.c.tick(self.now);
        self.process(effects);
    }

    pub fn answered(&self, id: u64) -> bool {
        self.responses.contains_key(&id)
    }

    pub fn join_resp(&self, id: u64) -> JoinGroupResponse {
        match self.responses.get(&id) {
            Some(Response::JoinGroup(r)) => r.clone(),
            other => panic!("expected a JoinGroup response for {id}, got {other:?}"),
        }
    }

    pub fn sync_resp(&self, id: u64) -> SyncGroupResponse {
        match self.responses.get(&id) {
            Some(Response::SyncGroup(r)) => r.clone(),
            other => panic!("expected a SyncGroup response for {id}, got {other:?}"),
        }
    }

    pub fn hb_error(&self, id: u64) -> Option<ResponseError> {
        match self.responses.get(&id) {
            Some(Response::Heartbeat(r)) => r.error,
            other => panic!("expected a Heartbeat response for {id}, got {other:?}"),
        }
    }

    pub fn leave_resp(&self, id: u64) -> LeaveGroupResponse {
        match self.responses.get(&id) {
            Some(Response::LeaveGroup(r)) => r.clone(),
            other => panic!("expected a LeaveGroup response for {id}, got {other:?}"),
        }
    }

    pub fn commit_resp(&self, id: u64) -> OffsetCommitResponse {
        match self.responses.get(&id) {
            Some(Response::OffsetCommit(r)) => r.clone(),
            other => panic!("expected an OffsetCommit response for {id}, got {other:?}"),
        }
    }

    pub fn state(&self) -> GroupState {
        self.c.group(GROUP).expect("group exists").state
    }

    pub fn generation(&self) -> i32 {
        self.c.group(GROUP).expect("group exists").generation_id
    }

    // ---- request shortcuts on GROUP --------------------------------------------------------

    pub fn join(&mut self, member_id: &str, protocols: &[(&str, &[u8])]) -> u64 {
        self.send(Request::JoinGroup(join_req(member_id, None, protocols)))
    }

    pub fn join_static(
        &mut self,
        member_id: &str,
        instance: &str,
        protocols: &[(&str, &[u8])],
    ) -> u64 {
        self.send(Request::JoinGroup(join_req(
            member_id,
            Some(instance),
            protocols,
        )))
    }

    /// A new dynamic member: MEMBER_ID_REQUIRED, then the rejoin (parked or answered). Returns
    /// (member id, request id of the second JoinGroup).
    pub fn new_member(&mut self, protocols: &[(&str, &[u8])]) -> (String, u64) {
        let first = self.join("", protocols);
        let r = self.join_resp(first);
        assert_eq!(r.error, Some(ResponseError::MemberIdRequired));
        let id = r.member_id.clone();
        let second = self.join(&id, protocols);
        (id, second)
    }

    pub fn sync(&mut self, member_id: &str, generation: i32, assignments: &[(&str, &[u8])]) -> u64 {
        self.send(Request::SyncGroup(SyncGroupRequest {
            group_id: GROUP.into(),
            generation_id: generation,
            member_id: member_id.into(),
            group_instance_id: None,
            protocol_type: Some("consumer".into()),
            protocol_name: None,
            assignments: assignments
                .iter()
                .map(|(m, a)| SyncGroupAssignment {
                    member_id: m.to_string(),
                    assignment: Bytes::copy_from_slice(a),
                })
                .collect(),
        }))
    }

    pub fn heartbeat(&mut self, member_id: &str, generation: i32) -> Option<ResponseError> {
        let id = self.send(Request::Heartbeat(HeartbeatRequest {
            group_id: GROUP.into(),
            generation_id: generation,
            member_id: member_id.into(),
            group_instance_id: None,
        }));
        self.hb_error(id)
    }

    pub fn leave(&mut self, member_id: &str) -> LeaveGroupResponse {
        let id = self.send(Request::LeaveGroup(LeaveGroupRequest {
            group_id: GROUP.into(),
            members: vec![MemberIdentity {
                member_id: member_id.into(),
                group_instance_id: None,
                reason: None,
            }],
        }));
        self.leave_resp(id)
    }

    pub fn commit(
        &mut self,
        member_id: &str,
        generation: i32,
        offsets: &[(&str, i32, i64)],
    ) -> u64 {
        self.send(Request::OffsetCommit(commit_req(
            GROUP, member_id, generation, offsets,
        )))
    }

    pub fn fetch(&mut self, topics: Option<&[(&str, &[i32])]>) -> OffsetFetchResponse {
        let id = self.send(Request::OffsetFetch(OffsetFetchRequest {
            group_id: GROUP.into(),
            topics: topics.map(|ts| {
                ts.iter()
                    .map(|(t, ps)| OffsetFetchTopic {
                        name: t.to_string(),
                        partition_indexes: ps.to_vec(),
                    })
                    .collect()
            }),
            require_stable: false,
        }));
        match self.responses.get(&id) {
            Some(Response::OffsetFetch(r)) => r.clone(),
            other => panic!("expected an OffsetFetch response, got {other:?}"),
        }
    }

    pub fn describe(&mut self, group: &str) -> DescribedGroup {
        let id = self.send(Request::DescribeGroups(DescribeGroupsRequest {
            group_ids: vec![group.into()],
        }));
        match self.responses.get(&id) {
            Some(Response::DescribeGroups(r)) => r.groups[0].clone(),
            other => panic!("expected a DescribeGroups response, got {other:?}"),
        }
    }

    /// Brings a group of new dynamic members to Stable through the initial delay; the first is
    /// the leader and assigns `assignments[i]` to member i. Returns the member ids.
    pub fn stable_group(&mut self, n: usize, assignments: &[&[u8]]) -> Vec<String> {
        let mut ids = Vec::new();
        let mut joins = Vec::new();
        for _ in 0..n {
            let (id, join) = self.new_member(RANGE);
            ids.push(id);
            joins.push(join);
        }
        let delay = i64::from(self.c.config().initial_rebalance_delay_ms);
        self.advance(delay * (n as i64 + 1));
        let generation = self.join_resp(joins[0]).generation_id;
        let pairs: Vec<(&str, &[u8])> = ids
            .iter()
            .zip(assignments)
            .map(|(id, a)| (id.as_str(), *a))
            .collect();
        for (i, id) in ids.iter().enumerate() {
            let assignment: &[(&str, &[u8])] = if i == 0 { &pairs } else { &[] };
            self.sync(id, generation, assignment);
        }
        assert_eq!(self.state(), GroupState::Stable);
        ids
    }
}

pub const RANGE: &[(&str, &[u8])] = &[("range", b"sub")];

pub fn join_req(
    member_id: &str,
    instance: Option<&str>,
    protocols: &[(&str, &[u8])],
) -> JoinGroupRequest {
    JoinGroupRequest {
        group_id: GROUP.into(),
        session_timeout_ms: SESSION,
        rebalance_timeout_ms: REBALANCE,
        member_id: member_id.into(),
        group_instance_id: instance.map(str::to_string),
        protocol_type: "consumer".into(),
        protocols: protocols
            .iter()
            .map(|(n, m)| JoinProtocol {
                name: n.to_string(),
                metadata: Bytes::copy_from_slice(m),
            })
            .collect(),
        reason: None,
    }
}

pub fn commit_req(
    group: &str,
    member_id: &str,
    generation: i32,
    offsets: &[(&str, i32, i64)],
) -> OffsetCommitRequest {
    let mut topics: Vec<OffsetCommitTopic> = Vec::new();
    for (t, p, o) in offsets {
        if topics.last().is_none_or(|x| x.name != *t) {
            topics.push(OffsetCommitTopic {
                name: t.to_string(),
                partitions: Vec::new(),
            });
        }
        topics
            .last_mut()
            .unwrap()
            .partitions
            .push(OffsetCommitPartition {
                partition_index: *p,
                committed_offset: *o,
                committed_leader_epoch: 3,
                committed_metadata: Some(format!("m{o}")),
            });
    }
    OffsetCommitRequest {
        group_id: group.into(),
        generation_id: generation,
        member_id: member_id.into(),
        group_instance_id: None,
        topics,
    }
}
