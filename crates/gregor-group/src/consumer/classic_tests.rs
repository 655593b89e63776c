//! Classic members inside a consumer group, on the pure rules: eager members give everything
//! up, protocols must be shared, and the classic checks (member, generation, instance).

use gregor_assign::protocol::{self as wire, encode_subscription};

use super::*;
use crate::api::{HeartbeatRequest as ClassicHeartbeat, MemberIdentity};
use crate::consumer::model::TopicMetadata;

struct Topics;

impl TopicsView for Topics {
    fn topic(&self, name: &str) -> Option<TopicMetadata> {
        (name == "t").then(|| TopicMetadata {
            id: 7,
            name: "t".into(),
            partitions: 4,
            replica_racks: Vec::new(),
        })
    }
    fn names(&self) -> Vec<String> {
        vec!["t".into()]
    }
    fn version(&self) -> u64 {
        1
    }
}

fn ctx() -> RequestContext {
    RequestContext {
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        api_version: 5,
    }
}

/// A JoinGroup with one protocol `name`, eager (subscription v0) or cooperative (v1).
fn join(member: &str, name: &str, version: i16, owned: &[i32]) -> JoinGroupRequest {
    let sub = wire::Subscription {
        topics: vec!["t".into()],
        owned_partitions: vec![("t".into(), owned.to_vec())],
        ..wire::Subscription::default()
    };
    JoinGroupRequest {
        group_id: "g".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        member_id: member.into(),
        group_instance_id: None,
        protocol_type: "consumer".into(),
        protocols: vec![JoinProtocol {
            name: name.into(),
            metadata: encode_subscription(&sub, version).unwrap(),
        }],
        reason: None,
    }
}

fn cfg() -> ConsumerGroupConfig {
    ConsumerGroupConfig::default()
}

fn do_join(
    g: &mut ConsumerGroup,
    req: &JoinGroupRequest,
    id: &str,
) -> Result<ClassicJoin, ResponseError> {
    classic_join(g, &cfg(), &Topics, &ctx(), req, 0, || id.to_string())
}

fn owned(g: &ConsumerGroup, member: &str) -> Vec<i32> {
    let m = &g.members[member];
    m.assigned
        .get(&7)
        .map(|ps| ps.iter().copied().collect())
        .unwrap_or_default()
}

#[test]
fn an_eager_member_rejoining_has_given_up_everything_and_takes_its_target_at_once() {
    let mut g = ConsumerGroup::new("g");
    let a = do_join(&mut g, &join("", "range", 0, &[]), "a").unwrap();
    assert_eq!(owned(&g, "a"), [0, 1, 2, 3]);
    let b = do_join(&mut g, &join("", "range", 0, &[]), "b").unwrap();
    assert!(owned(&g, "b").is_empty(), "a still holds them");
    assert_eq!(g.members["b"].state, MemberState::UnreleasedPartitions);
    // a's heartbeat says rejoin; an eager member rejoins owning nothing (subscription v0).
    let hb = ClassicHeartbeat {
        group_id: "g".into(),
        generation_id: a.response.generation_id,
        member_id: "a".into(),
        group_instance_id: None,
    };
    assert_eq!(
        classic_heartbeat(&mut g, &cfg(), &Topics, &hb, 0),
        Err(ResponseError::RebalanceInProgress)
    );
    let again = do_join(&mut g, &join("a", "range", 0, &[]), "x").unwrap();
    assert!(again.response.generation_id > a.response.generation_id);
    assert_eq!(owned(&g, "a").len(), 2);
    let _ = b;
}

#[test]
fn classic_checks_protocols_members_generations_and_leaves() {
    let mut g = ConsumerGroup::new("g");
    let a = do_join(&mut g, &join("", "cooperative-sticky", 1, &[]), "a").unwrap();
    assert_eq!(
        do_join(&mut g, &join("", "range", 0, &[]), "b").unwrap_err(),
        ResponseError::InconsistentGroupProtocol,
        "no protocol in common with a"
    );
    let mut foreign = join("", "cooperative-sticky", 1, &[]);
    foreign.protocol_type = "connect".into();
    assert_eq!(
        do_join(&mut g, &foreign, "b").unwrap_err(),
        ResponseError::InconsistentGroupProtocol
    );
    assert_eq!(
        do_join(&mut g, &join("zz", "cooperative-sticky", 1, &[]), "b").unwrap_err(),
        ResponseError::UnknownMemberId
    );
    let sync = |generation| SyncGroupRequest {
        group_id: "g".into(),
        generation_id: generation,
        member_id: "a".into(),
        group_instance_id: None,
        protocol_type: Some("consumer".into()),
        protocol_name: Some("cooperative-sticky".into()),
        assignments: Vec::new(),
    };
    let generation = a.response.generation_id;
    assert_eq!(
        classic_sync(&g, &sync(generation + 1)).unwrap_err(),
        ResponseError::IllegalGeneration
    );
    let ok = classic_sync(&g, &sync(generation)).unwrap();
    let (version, assignment) = wire::decode_assignment(&ok.assignment).unwrap();
    assert_eq!(
        (version, assignment.partitions),
        (1, vec![("t".into(), vec![0, 1, 2, 3])])
    );
    let leave = LeaveGroupRequest {
        group_id: "g".into(),
        members: vec![
            MemberIdentity {
                member_id: "a".into(),
                group_instance_id: None,
                reason: None,
            },
            MemberIdentity {
                member_id: "nobody".into(),
                group_instance_id: None,
                reason: None,
            },
        ],
    };
    let (answers, left) = classic_leave(&mut g, &leave, 0);
    assert!(left);
    assert_eq!(answers[0].error, None);
    assert_eq!(answers[1].error, Some(ResponseError::UnknownMemberId));
    assert!(g.members.is_empty());
    assert!(
        !only_classic_members(&g),
        "an empty group is not downgraded"
    );
}
