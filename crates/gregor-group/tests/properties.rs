//! Random sequences of JoinGroup / SyncGroup / Heartbeat / LeaveGroup / time / append outcomes
//! from a few simulated consumers. Invariants: a Stable generation hands every member exactly the
//! (disjoint) share its leader gave it; no JoinGroup of a new generation is answered before every
//! known member rejoined, left, expired or the rebalance timeout passed; generations never go
//! back; every request is eventually answered exactly once.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use common::*;
use gregor_group::*;
use proptest::prelude::*;

const CLIENTS: usize = 4;
const PARTITIONS: u8 = 8;
const TICK: i64 = 500;

#[derive(Debug, Clone)]
enum Action {
    Join(usize),
    /// Rejoin with different subscription metadata.
    JoinChanged(usize),
    Sync(usize),
    Heartbeat(usize),
    Leave(usize),
    Advance(i64),
    CompleteAppend(bool),
}

fn action() -> impl Strategy<Value = Action> {
    let c = 0..CLIENTS;
    prop_oneof![
        3 => c.clone().prop_map(Action::Join),
        1 => c.clone().prop_map(Action::JoinChanged),
        4 => c.clone().prop_map(Action::Sync),
        3 => c.clone().prop_map(Action::Heartbeat),
        1 => c.prop_map(Action::Leave),
        3 => prop_oneof![
            Just(500i64),
            Just(1_000),
            Just(3_000),
            Just(6_000),
            Just(12_000),
            Just(31_000)
        ]
        .prop_map(Action::Advance),
        2 => any::<bool>().prop_map(Action::CompleteAppend),
    ]
}

#[derive(Debug, Default, Clone)]
struct Client {
    member_id: String,
    generation: i32,
    /// The member list of `generation` when this client leads it.
    led: Option<Vec<String>>,
    version: u8,
}

struct World {
    h: H,
    clients: Vec<Client>,
    /// request id -> client that sent it.
    owner: HashMap<u64, usize>,
    /// generation -> the leader's assignment (member -> partitions).
    leader_assignments: HashMap<i32, BTreeMap<String, Vec<u8>>>,
    max_generation: i32,
    answered: usize,
}

/// What a step may legitimately remove from the group.
struct Step {
    left: Option<String>,
}

impl World {
    fn new(auto_append: bool) -> Self {
        let mut h = H::new();
        h.auto_append = auto_append;
        World {
            h,
            clients: vec![Client::default(); CLIENTS],
            owner: HashMap::new(),
            leader_assignments: HashMap::new(),
            max_generation: 0,
            answered: 0,
        }
    }

    fn summary(&self) -> Option<GroupSummary> {
        self.h.c.group(GROUP)
    }

    fn send(&mut self, client: usize, request: Request) -> u64 {
        let id = self.h.send(request);
        self.owner.insert(id, client);
        id
    }

    fn protocols(&self, client: usize) -> Vec<(&'static str, Vec<u8>)> {
        vec![("range", vec![self.clients[client].version])]
    }

    fn join(&mut self, client: usize) {
        let protocols = self.protocols(client);
        let refs: Vec<(&str, &[u8])> = protocols.iter().map(|(n, m)| (*n, m.as_slice())).collect();
        let member_id = self.clients[client].member_id.clone();
        let id = self.send(
            client,
            Request::JoinGroup(join_req(&member_id, None, &refs)),
        );
        self.learn();
        // A consumer told MEMBER_ID_REQUIRED rejoins with its id at once.
        if let Some(Response::JoinGroup(r)) = self.h.responses.get(&id) {
            if r.error == Some(ResponseError::MemberIdRequired) {
                let member_id = r.member_id.clone();
                self.send(
                    client,
                    Request::JoinGroup(join_req(&member_id, None, &refs)),
                );
            }
        }
    }

    fn sync(&mut self, client: usize) {
        let c = self.clients[client].clone();
        if c.member_id.is_empty() {
            return;
        }
        // The leader deals partitions round-robin: a disjoint assignment.
        let mut assignments = Vec::new();
        if let Some(members) = &c.led {
            let mut plan: BTreeMap<String, Vec<u8>> =
                members.iter().map(|m| (m.clone(), vec![])).collect();
            for p in 0..PARTITIONS {
                let m = &members[usize::from(p) % members.len()];
                plan.get_mut(m).expect("member").push(p);
            }
            self.leader_assignments
                .entry(c.generation)
                .or_insert_with(|| plan.clone());
            assignments = plan
                .into_iter()
                .map(|(m, ps)| SyncGroupAssignment {
                    member_id: m,
                    assignment: ps.into(),
                })
                .collect();
        }
        self.send(
            client,
            Request::SyncGroup(SyncGroupRequest {
                group_id: GROUP.into(),
                generation_id: c.generation,
                member_id: c.member_id,
                assignments,
                ..Default::default()
            }),
        );
    }

    /// Updates the simulated clients from the responses sent since last time.
    fn learn(&mut self) {
        let new: Vec<u64> = self.h.sent[self.answered..].to_vec();
        self.answered = self.h.sent.len();
        for id in new {
            let Some(&client) = self.owner.get(&id) else {
                continue;
            };
            let c = &mut self.clients[client];
            let error = match &self.h.responses[&id] {
                Response::JoinGroup(r) => {
                    if r.error.is_none() {
                        c.member_id = r.member_id.clone();
                        c.generation = r.generation_id;
                        c.led = (r.leader == r.member_id && !r.members.is_empty())
                            .then(|| r.members.iter().map(|m| m.member_id.clone()).collect());
                    }
                    r.error
                }
                Response::SyncGroup(r) => r.error,
                Response::Heartbeat(r) => r.error,
                _ => None,
            };
            if error == Some(ResponseError::UnknownMemberId) {
                c.member_id.clear();
                c.led = None;
            }
        }
    }

    fn run(&mut self, action: &Action) {
        match *action {
            Action::Join(c) => {
                let before = self.snapshot();
                self.join(c);
                self.check(&before, &Step { left: None });
            }
            Action::JoinChanged(c) => {
                self.clients[c].version = self.clients[c].version.wrapping_add(1);
                let before = self.snapshot();
                self.join(c);
                self.check(&before, &Step { left: None });
            }
            Action::Sync(c) => {
                let before = self.snapshot();
                self.sync(c);
                self.learn();
                self.check(&before, &Step { left: None });
            }
            Action::Heartbeat(c) => {
                let m = self.clients[c].member_id.clone();
                if !m.is_empty() {
                    let generation = self.clients[c].generation;
                    let before = self.snapshot();
                    self.send(
                        c,
                        Request::Heartbeat(HeartbeatRequest {
                            group_id: GROUP.into(),
                            generation_id: generation,
                            member_id: m,
                            group_instance_id: None,
                        }),
                    );
                    self.learn();
                    self.check(&before, &Step { left: None });
                }
            }
            Action::Leave(c) => {
                let m = std::mem::take(&mut self.clients[c].member_id);
                if !m.is_empty() {
                    let before = self.snapshot();
                    self.send(
                        c,
                        Request::LeaveGroup(LeaveGroupRequest {
                            group_id: GROUP.into(),
                            members: vec![MemberIdentity {
                                member_id: m.clone(),
                                ..Default::default()
                            }],
                        }),
                    );
                    self.learn();
                    self.check(&before, &Step { left: Some(m) });
                }
            }
            Action::Advance(ms) => {
                for _ in 0..(ms / TICK) {
                    let before = self.snapshot();
                    self.h.advance(TICK);
                    self.learn();
                    self.check(&before, &Step { left: None });
                }
            }
            Action::CompleteAppend(ok) => {
                if !self.h.pending.is_empty() {
                    let before = self.snapshot();
                    let result = if ok {
                        Ok(())
                    } else {
                        Err(ResponseError::NotEnoughReplicas)
                    };
                    self.h.complete_append(result);
                    self.learn();
                    self.check(&before, &Step { left: None });
                }
            }
        }
    }

    fn snapshot(&self) -> (Option<GroupSummary>, usize, i64) {
        (self.summary(), self.h.sent.len(), self.h.now)
    }

    fn check(&mut self, before: &(Option<GroupSummary>, usize, i64), step: &Step) {
        let (pre, first_new, _) = before;
        let post = self.summary();
        let now = self.h.now;

        // Generations only increase.
        if let (Some(pre), Some(post)) = (pre, &post) {
            assert!(
                post.generation_id >= pre.generation_id,
                "generation went back"
            );
        }

        // Join responses of a new generation: the barrier.
        let new_gen: Vec<JoinGroupResponse> = self.h.sent[*first_new..]
            .iter()
            .filter_map(|id| match &self.h.responses[id] {
                Response::JoinGroup(r)
                    if r.error.is_none() && r.generation_id > self.max_generation =>
                {
                    Some(r.clone())
                }
                _ => None,
            })
            .collect();
        if let Some(first) = new_gen.first() {
            let generation = first.generation_id;
            assert!(new_gen.iter().all(|r| r.generation_id == generation));
            let recipients: BTreeSet<String> =
                new_gen.iter().map(|r| r.member_id.clone()).collect();
            assert_eq!(recipients.len(), new_gen.len(), "one response per member");
            let post = post.as_ref().expect("a group answered joins");
            if post.generation_id == generation {
                let members: BTreeSet<String> =
                    post.members.iter().map(|m| m.member_id.clone()).collect();
                assert_eq!(
                    recipients, members,
                    "every member of the new generation is answered together"
                );
                let leader = post.leader_id.clone().expect("a leader");
                assert!(new_gen.iter().all(|r| r.leader == leader));
                let with_list: Vec<&JoinGroupResponse> =
                    new_gen.iter().filter(|r| !r.members.is_empty()).collect();
                assert_eq!(with_list.len(), 1, "only the leader gets the member list");
                assert_eq!(with_list[0].member_id, leader);
            }
            if let Some(pre) = pre {
                // Nobody known before the step was skipped, unless it left, its session
                // expired, or the rebalance timeout passed.
                for m in &pre.members {
                    if recipients.contains(&m.member_id) {
                        continue;
                    }
                    let left = step.left.as_deref() == Some(m.member_id.as_str());
                    let expired = m.session_deadline_ms.is_some_and(|d| d <= now);
                    let timed_out = pre.state == GroupState::PreparingRebalance
                        && pre
                            .state_timestamp_ms
                            .is_some_and(|t| now >= t + i64::from(REBALANCE));
                    assert!(
                        left || expired || timed_out,
                        "generation {generation} answered without member {} (pre state {:?})",
                        m.member_id,
                        pre.state
                    );
                }
            }
            self.max_generation = generation;
        }
        if let Some(post) = &post {
            self.max_generation = self.max_generation.max(post.generation_id);
        }

        // A Stable generation hands out exactly the leader's disjoint assignment.
        if let Some(post) = &post {
            if post.state == GroupState::Stable {
                let plan = self
                    .leader_assignments
                    .get(&post.generation_id)
                    .expect("Stable only after the leader synced");
                let mut seen = BTreeSet::new();
                for m in &post.members {
                    let expected = plan.get(&m.member_id).cloned().unwrap_or_default();
                    assert_eq!(
                        m.assignment.to_vec(),
                        expected,
                        "member {} assignment",
                        m.member_id
                    );
                    for p in expected {
                        assert!(seen.insert(p), "partition {p} assigned twice");
                    }
                }
            }
        }
    }

    /// Lets every deadline pass and every append complete: nothing may stay unanswered.
    fn drain(&mut self) {
        for _ in 0..4 {
            self.h.complete_all_appends();
            for _ in 0..(400_000 / 10_000) {
                self.h.advance(10_000);
                self.h.complete_all_appends();
            }
        }
        self.learn();
        let unanswered: Vec<&u64> = self
            .owner
            .keys()
            .filter(|id| !self.h.answered(**id))
            .collect();
        assert!(
            unanswered.is_empty(),
            "requests never answered: {unanswered:?}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn rebalance_invariants(auto_append in any::<bool>(), actions in prop::collection::vec(action(), 1..80)) {
        let mut w = World::new(auto_append);
        for a in &actions {
            w.run(a);
        }
        w.drain();
    }
}
