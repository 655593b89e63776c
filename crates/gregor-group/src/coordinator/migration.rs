//! Online migration between the group protocols (KIP-848): a classic consumer group becomes a
//! consumer group when a consumer-protocol member joins it (upgrade). Its members keep their
//! partitions and go on speaking the classic protocol inside the consumer group until they
//! leave; the group's epoch carries on from the classic generation. A consumer group whose
//! members all speak the classic protocol again becomes a classic group (downgrade), at a
//! generation that carries on from its epoch, and rebalances.

use std::collections::BTreeSet;
use std::sync::Arc;

use gregor_assign::protocol::{decode_assignment, decode_subscription};

use crate::api::JoinProtocol;
use crate::consumer::heartbeat::TopicsView;
use crate::consumer::model::{
    Assignment, ClassicMemberMetadata, ConsumerGroup, ConsumerMember, MemberState, Subscription,
};
use crate::group::{Group, GroupState, Member};

/// The classic protocol type whose members' metadata are consumer subscriptions.
const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

/// `g` as a consumer group, or why it cannot become one (Kafka refuses the joining member then).
pub(super) fn consumer_group_from_classic(
    g: &Group,
    topics: &dyn TopicsView,
) -> Result<ConsumerGroup, String> {
    let refuse = |why: &str| {
        Err(format!(
            "Cannot upgrade classic group {}: {why}.",
            g.group_id
        ))
    };
    if g.protocol_type.as_deref() != Some(CONSUMER_PROTOCOL_TYPE) {
        return refuse("it does not use the consumer embedded protocol");
    }
    if g.state != GroupState::Stable {
        return refuse("it is rebalancing");
    }
    let Some(protocol) = g.protocol_name.as_deref() else {
        return refuse("it has no protocol");
    };
    let mut out = ConsumerGroup::new(&g.group_id);
    out.group_epoch = g.generation_id;
    out.target_epoch = g.generation_id;
    let mut target = std::collections::BTreeMap::new();
    for m in g.members.values() {
        let member = converted_member(m, protocol, g.generation_id, topics)
            .map_err(|why| format!("Cannot upgrade classic group {}: {why}.", g.group_id))?;
        target.insert(member.member_id.clone(), member.assigned.clone());
        if out.put_member_unchecked(member) != 0 {
            return refuse("two of its members own one partition");
        }
    }
    out.target = Arc::new(target);
    Ok(out)
}

/// A classic member as a member of the consumer group, at the classic generation.
fn converted_member(
    m: &Member,
    protocol: &str,
    generation: i32,
    topics: &dyn TopicsView,
) -> Result<ConsumerMember, String> {
    let (_, sub) = decode_subscription(&m.metadata(protocol)).map_err(|e| {
        format!(
            "the subscription of member {} does not decode: {e}",
            m.member_id
        )
    })?;
    let (_, assignment) = decode_assignment(&m.assignment).map_err(|e| {
        format!(
            "the assignment of member {} does not decode: {e}",
            m.member_id
        )
    })?;
    let mut assigned = Assignment::new();
    for (name, partitions) in &assignment.partitions {
        // A topic deleted since the assignment has nothing left to own.
        if let Some(t) = topics.topic(name) {
            assigned.entry(t.id).or_default().extend(partitions);
        }
    }
    let mut member = ConsumerMember::new(m.member_id.clone(), m.group_instance_id.clone());
    member.client_id = m.client_id.clone();
    member.client_host = m.client_host.clone();
    member.subscription = Subscription {
        topic_names: sub.topics.into_iter().collect::<BTreeSet<_>>(),
        topic_regex: None,
        server_assignor: None,
        rack: sub.rack_id,
        rebalance_timeout_ms: m.rebalance_timeout_ms,
    };
    member.member_epoch = generation;
    member.previous_member_epoch = generation;
    member.state = MemberState::Stable;
    member.assigned = assigned;
    member.classic = Some(ClassicMemberMetadata {
        session_timeout_ms: m.session_timeout_ms,
        supported_protocols: m
            .protocols
            .iter()
            .map(|p| (p.name.clone(), p.metadata.clone()))
            .collect(),
    });
    Ok(member)
}

/// `g`, whose members all speak the classic protocol, as a classic group with each member's
/// current partitions, Stable until the caller rebalances it. Its generation is the group
/// epoch, as Kafka's: no generation a member of the consumer group used is handed out again;
/// a member whose epoch is behind it learns that its generation is stale, and rejoins.
/// `None` if the members share no protocol (they all joined with one, so only a record from
/// elsewhere could say so).
pub(super) fn classic_group_from_consumer(g: &ConsumerGroup, now_ms: i64) -> Option<Group> {
    let first = g.members.values().next()?.classic.as_ref()?;
    let protocol = first
        .supported_protocols
        .iter()
        .map(|(n, _)| n)
        .find(|name| {
            g.members.values().all(|m| {
                m.classic
                    .as_ref()
                    .is_some_and(|c| c.supported_protocols.iter().any(|(n, _)| n == *name))
            })
        })?;
    let mut out = Group::new(g.group_id.clone(), now_ms);
    out.protocol_name = Some(protocol.clone());
    out.generation_id = g.group_epoch;
    for m in g.members.values() {
        let classic = m.classic.as_ref()?;
        let partitions = m
            .assigned
            .iter()
            .filter_map(|(id, ps)| {
                let t = g.subscribed_topics.values().find(|t| t.id == *id)?;
                Some((t.name.clone(), ps.iter().copied().collect()))
            })
            .collect();
        let assignment = gregor_assign::protocol::Assignment {
            partitions,
            user_data: None,
        };
        let version = classic
            .supported_protocols
            .iter()
            .find(|(n, _)| n == protocol)
            .and_then(|(_, meta)| decode_subscription(meta).ok())
            .map_or(0, |(v, _)| {
                v.clamp(0, gregor_assign::protocol::ASSIGNMENT_VERSION)
            });
        out.add(Member {
            member_id: m.member_id.clone(),
            group_instance_id: m.instance_id.clone(),
            client_id: m.client_id.clone(),
            client_host: m.client_host.clone(),
            rebalance_timeout_ms: m.subscription.rebalance_timeout_ms,
            session_timeout_ms: classic.session_timeout_ms,
            protocol_type: CONSUMER_PROTOCOL_TYPE.to_string(),
            protocols: classic
                .supported_protocols
                .iter()
                .map(|(name, metadata)| JoinProtocol {
                    name: name.clone(),
                    metadata: metadata.clone(),
                })
                .collect(),
            assignment: gregor_assign::protocol::encode_assignment(&assignment, version).ok()?,
            awaiting_join: None,
            awaiting_sync: None,
            is_new: false,
        });
    }
    out.state = GroupState::Stable;
    Some(out)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use gregor_assign::protocol::{self as p, encode_assignment, encode_subscription};

    use super::*;
    use crate::api::JoinProtocol;
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

    fn member(id: &str, owns: &[i32]) -> Member {
        let sub = p::Subscription {
            topics: vec!["t".into()],
            rack_id: Some("r1".into()),
            ..p::Subscription::default()
        };
        let assignment = p::Assignment {
            partitions: vec![("t".into(), owns.to_vec()), ("gone".into(), vec![0])],
            user_data: None,
        };
        Member {
            member_id: id.into(),
            group_instance_id: None,
            client_id: format!("client-{id}"),
            client_host: "/127.0.0.1".into(),
            rebalance_timeout_ms: 30_000,
            session_timeout_ms: 10_000,
            protocol_type: "consumer".into(),
            protocols: vec![JoinProtocol {
                name: "cooperative-sticky".into(),
                metadata: encode_subscription(&sub, 3).unwrap(),
            }],
            assignment: encode_assignment(&assignment, 3).unwrap(),
            awaiting_join: None,
            awaiting_sync: None,
            is_new: false,
        }
    }

    fn stable_group() -> Group {
        let mut g = Group::new("g".into(), 0);
        g.protocol_type = Some("consumer".into());
        g.protocol_name = Some("cooperative-sticky".into());
        g.generation_id = 5;
        for m in [member("a", &[0, 1]), member("b", &[2, 3])] {
            g.members.insert(m.member_id.clone(), m);
        }
        g.state = GroupState::Stable;
        g
    }

    #[test]
    fn a_stable_classic_group_becomes_a_consumer_group_with_its_assignment() {
        let c = consumer_group_from_classic(&stable_group(), &Topics).unwrap();
        assert_eq!((c.group_epoch, c.target_epoch), (5, 5));
        let a = &c.members["a"];
        assert_eq!((a.member_epoch, a.state), (5, MemberState::Stable));
        // The deleted topic's partition is dropped; the rest keeps its owner.
        assert_eq!(a.assigned[&7], [0, 1].into());
        assert_eq!(c.target["b"][&7], [2, 3].into());
        assert_eq!(a.subscription.rack.as_deref(), Some("r1"));
        let classic = a.classic.as_ref().unwrap();
        assert_eq!(classic.session_timeout_ms, 10_000);
        assert_eq!(classic.supported_protocols[0].0, "cooperative-sticky");
        assert_eq!(c.held_by_other("b", 7, 0), Some(5));
    }

    #[test]
    fn a_rebalancing_or_foreign_group_is_not_upgraded() {
        let mut g = stable_group();
        g.state = GroupState::PreparingRebalance;
        assert!(consumer_group_from_classic(&g, &Topics)
            .unwrap_err()
            .contains("rebalancing"));
        let mut g = stable_group();
        g.protocol_type = Some("connect".into());
        assert!(consumer_group_from_classic(&g, &Topics).is_err());
        let mut g = stable_group();
        g.members.get_mut("b").unwrap().assignment = Bytes::from_static(&[0, 9, 9]);
        assert!(consumer_group_from_classic(&g, &Topics)
            .unwrap_err()
            .contains("member b"));
        let mut g = stable_group();
        g.members.get_mut("b").unwrap().assignment = g.members["a"].assignment.clone();
        assert!(consumer_group_from_classic(&g, &Topics)
            .unwrap_err()
            .contains("two of its members"));
    }
}
