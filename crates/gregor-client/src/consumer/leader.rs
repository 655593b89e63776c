//! What the leader member does between JoinGroup and SyncGroup: decode every member's
//! `ConsumerProtocolSubscription`, describe the subscribed topics (partition counts and the
//! racks of each partition's replicas), run the chosen strategy, and encode each member's
//! `ConsumerProtocolAssignment`. Pure.

use std::collections::BTreeSet;

use bytes::Bytes;
use gregor_assign::protocol::{
    decode_subscription, encode_assignment, group_by_topic, Assignment, ASSIGNMENT_VERSION,
};
use gregor_assign::{Assignor, GroupSpec};

use super::group_wire::JoinedMember;
use crate::error::{Error, Result};
use crate::metadata::ClusterMetadata;

fn assign_error(e: gregor_assign::AssignError) -> Error {
    Error::InvalidArgument(format!("assignment failed: {e}"))
}

/// Every topic some member subscribes to.
pub fn subscribed_topics(members: &[JoinedMember]) -> Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    for m in members {
        let (_, sub) = decode_subscription(&m.metadata).map_err(assign_error)?;
        out.extend(sub.topics);
    }
    Ok(out)
}

/// Builds the assignor's input. Topics missing from `metadata` are left out (members keep
/// them in their subscription; the assignors skip them, as Kafka's do). Replica racks are
/// given only when every replica's broker has a rack.
pub fn group_spec(
    members: &[JoinedMember],
    metadata: &ClusterMetadata,
) -> Result<(GroupSpec, Vec<i16>)> {
    let mut builder = GroupSpec::builder();
    let mut versions = Vec::with_capacity(members.len());
    let mut topics = BTreeSet::new();
    for m in members {
        let (version, sub) = decode_subscription(&m.metadata).map_err(assign_error)?;
        versions.push(version);
        topics.extend(sub.topics.iter().cloned());
        builder.add_member(sub.into_member(m.member_id.clone(), m.group_instance_id.clone()));
    }
    for name in topics {
        let Some(t) = metadata.topic(&name) else {
            continue;
        };
        let racks: Option<Vec<Vec<String>>> = t
            .partitions
            .iter()
            .map(|p| {
                p.replicas
                    .iter()
                    .map(|b| metadata.broker(*b).and_then(|n| n.rack.clone()))
                    .collect::<Option<Vec<String>>>()
            })
            .collect();
        // Partitions must be numbered 0..n for the racks list to line up.
        let dense = t
            .partitions
            .iter()
            .enumerate()
            .all(|(i, p)| p.partition == i as i32);
        let racks = racks.filter(|_| dense).unwrap_or_default();
        builder.add_topic(name, t.partitions.len() as i64, racks);
    }
    let spec = builder.build().map_err(assign_error)?;
    Ok((spec, versions))
}

/// Runs `assignor` and encodes one assignment per member, in the version of that member's
/// subscription (so older clients read what they wrote).
pub fn compute_assignments(
    assignor: &dyn Assignor,
    members: &[JoinedMember],
    metadata: &ClusterMetadata,
) -> Result<Vec<(String, Bytes)>> {
    let (spec, versions) = group_spec(members, metadata)?;
    let result = assignor.assign(&spec).map_err(assign_error)?;
    // Refuse an assignment that gives a partition twice, whatever strategy produced it.
    result.owners(&spec).map_err(assign_error)?;
    let mut out = Vec::with_capacity(members.len());
    for (i, member) in spec.members().iter().enumerate() {
        let assigned = result.members.get(i).cloned().unwrap_or_default();
        let pairs: Vec<(String, i32)> = assigned
            .partitions
            .iter()
            .map(|id| {
                let (topic, p) = spec.partition(*id);
                (spec.topic(topic).name.clone(), p)
            })
            .collect();
        let grouped = group_by_topic(pairs.iter().map(|(t, p)| (t.as_str(), *p)));
        let bytes = encode_assignment(
            &Assignment {
                partitions: grouped,
                user_data: assigned.user_data.clone(),
            },
            versions[i].clamp(0, ASSIGNMENT_VERSION),
        )
        .map_err(assign_error)?;
        out.push((member.member_id.clone(), bytes));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::{BrokerNode, PartitionMetadata, TopicMetadata};
    use gregor_assign::protocol::{decode_assignment, encode_subscription, Subscription};

    fn metadata(racks: bool) -> ClusterMetadata {
        let part = |p: i32, replicas: Vec<i32>| PartitionMetadata {
            partition: p,
            leader: Some(replicas[0]),
            leader_epoch: 0,
            replicas: replicas.clone(),
            isr: replicas,
            offline_replicas: vec![],
            error: None,
        };
        ClusterMetadata {
            brokers: (0..2)
                .map(|id| BrokerNode {
                    id,
                    host: "h".into(),
                    port: 1,
                    rack: racks.then(|| format!("r{id}")),
                })
                .collect(),
            topics: vec![TopicMetadata {
                name: "t".into(),
                topic_id: uuid::Uuid::nil(),
                is_internal: false,
                partitions: vec![part(0, vec![0]), part(1, vec![1]), part(2, vec![0])],
                error: None,
            }],
            ..Default::default()
        }
    }

    fn member(id: &str, rack: Option<&str>, owned: &[i32], version: i16) -> JoinedMember {
        let sub = Subscription {
            topics: vec!["t".into(), "missing".into()],
            owned_partitions: if owned.is_empty() {
                vec![]
            } else {
                vec![("t".into(), owned.to_vec())]
            },
            generation_id: 1,
            rack_id: rack.map(str::to_string),
            ..Default::default()
        };
        JoinedMember {
            member_id: id.into(),
            group_instance_id: None,
            metadata: encode_subscription(&sub, version).unwrap(),
        }
    }

    fn decoded(out: &[(String, Bytes)]) -> Vec<(String, Vec<i32>)> {
        out.iter()
            .map(|(m, b)| {
                let (_, a) = decode_assignment(b).unwrap();
                (
                    m.clone(),
                    a.partitions
                        .first()
                        .map(|(_, p)| p.clone())
                        .unwrap_or_default(),
                )
            })
            .collect()
    }

    #[test]
    fn range_gives_kafkas_split() {
        let members = [member("b", None, &[], 3), member("a", None, &[], 0)];
        let range = gregor_assign::builtin("range").unwrap();
        let out = compute_assignments(range.as_ref(), &members, &metadata(false)).unwrap();
        assert_eq!(
            decoded(&out),
            vec![("b".to_string(), vec![2]), ("a".to_string(), vec![0, 1])]
        );
        // Each member's assignment uses its subscription's version.
        assert_eq!(i16::from_be_bytes([out[1].1[0], out[1].1[1]]), 0);
        assert_eq!(i16::from_be_bytes([out[0].1[0], out[0].1[1]]), 3);
        assert!(subscribed_topics(&members).unwrap().contains("missing"));
    }

    #[test]
    fn cooperative_withholds_moving_partitions() {
        // a owned everything; b joins: the partition moving to b is withheld this round.
        let members = [member("a", None, &[0, 1, 2], 3), member("b", None, &[], 3)];
        let coop = gregor_assign::builtin("cooperative-sticky").unwrap();
        let out = decoded(&compute_assignments(coop.as_ref(), &members, &metadata(false)).unwrap());
        assert_eq!(out[0].1.len(), 2, "a keeps two: {out:?}");
        assert!(out[1].1.is_empty(), "b waits for the second round: {out:?}");
    }

    #[test]
    fn racks_reach_the_assignor() {
        let (spec, _) = group_spec(&[member("a", Some("r1"), &[], 3)], &metadata(true)).unwrap();
        let t = spec.topic(spec.topic_id("t").unwrap());
        assert_eq!(t.racks_of(1), ["r1".to_string()]);
        let (spec, _) = group_spec(&[member("a", None, &[], 3)], &metadata(false)).unwrap();
        assert!(spec
            .topic(spec.topic_id("t").unwrap())
            .racks_of(0)
            .is_empty());
    }

    #[test]
    fn undecodable_subscription_is_an_error() {
        let bad = JoinedMember {
            member_id: "x".into(),
            group_instance_id: None,
            metadata: Bytes::from_static(b"\x00"),
        };
        let range = gregor_assign::builtin("range").unwrap();
        assert!(compute_assignments(range.as_ref(), &[bad], &metadata(false)).is_err());
    }
}
