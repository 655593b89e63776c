//! The target assignment of a consumer group, computed on the broker by a server-side assignor
//! (`group.consumer.assignors`): `uniform` (balanced and sticky: each member keeps what its
//! previous target gave it unless balance needs a move, gregor-assign's sticky algorithm) or
//! `range` (Kafka's range per topic). Pure: the subscribed topics come in resolved.

use std::collections::BTreeMap;

use gregor_assign::{range, sticky, GroupSpec, Member};

use super::model::{Assignment, ConsumerGroup, TopicMetadata};

/// A server-side assignor (`group.consumer.assignors`, or a member's `group.remote.assignor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerAssignor {
    Uniform,
    Range,
}

impl ServerAssignor {
    pub fn parse(name: &str) -> Option<ServerAssignor> {
        match name {
            "uniform" => Some(ServerAssignor::Uniform),
            "range" => Some(ServerAssignor::Range),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ServerAssignor::Uniform => "uniform",
            ServerAssignor::Range => "range",
        }
    }
}

/// Each member's target: `subscribed` maps a member to the names of the existing topics it
/// subscribes to (its list and its regex resolved); `topics` describes them.
pub fn compute_target(
    group: &ConsumerGroup,
    assignor: ServerAssignor,
    subscribed: &BTreeMap<String, Vec<String>>,
    topics: &BTreeMap<String, TopicMetadata>,
) -> Result<BTreeMap<String, Assignment>, gregor_assign::AssignError> {
    let by_id: BTreeMap<u128, &TopicMetadata> = topics.values().map(|t| (t.id, t)).collect();
    let mut builder = GroupSpec::builder();
    for t in topics.values() {
        builder.add_topic(&t.name, i64::from(t.partitions), t.replica_racks.clone());
    }
    for m in group.members.values() {
        // Stickiness: the previous target stands for what the member owns.
        let owned = group
            .target
            .get(&m.member_id)
            .into_iter()
            .flat_map(|a| a.iter())
            .filter_map(|(id, ps)| by_id.get(id).map(|t| (t, ps)))
            .flat_map(|(t, ps)| ps.iter().map(|p| (t.name.clone(), *p)))
            .collect();
        builder.add_member(Member {
            member_id: m.member_id.clone(),
            group_instance_id: m.instance_id.clone(),
            rack: m.subscription.rack.clone(),
            topics: subscribed.get(&m.member_id).cloned().unwrap_or_default(),
            owned_partitions: owned,
            generation: Some(group.target_epoch),
            user_data: None,
        });
    }
    let spec = builder.build()?;
    let result = match assignor {
        ServerAssignor::Uniform => sticky::assign(&spec, sticky::Flavor::Sticky),
        ServerAssignor::Range => range::assign(&spec),
    };
    let mut out = BTreeMap::new();
    for (member, got) in spec.members().iter().zip(&result.members) {
        let mut a = Assignment::new();
        for &pid in &got.partitions {
            let (topic, partition) = spec.partition(pid);
            let name = &spec.topic(topic).name;
            if let Some(t) = topics.get(name) {
                a.entry(t.id).or_default().insert(partition);
            }
        }
        out.insert(member.member_id.clone(), a);
    }
    Ok(out)
}
