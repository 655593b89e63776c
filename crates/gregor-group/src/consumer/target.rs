//! The target assignment of a consumer group, computed on the broker by a server-side assignor
//! (`group.consumer.assignors`): `uniform` (balanced and sticky: each member keeps what its
//! previous target gave it unless balance needs a move, gregor-assign's sticky algorithm) or
//! `range` (Kafka's range per topic), or `load` (gregor-assign's load-aware assignor: sticky,
//! balancing the members' measured load, each move explained). Pure: the subscribed topics come
//! in resolved, partitions' load figures through a lookup.

use std::collections::BTreeMap;

use gregor_assign::load::{self, LoadConfig, LoadInput, LoadMember, TopicPartition};
use gregor_assign::{range, sticky, GroupSpec, Member};

use super::model::{Assignment, ConsumerGroup, TopicMetadata};

/// A server-side assignor (`group.consumer.assignors`, or a member's `group.remote.assignor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerAssignor {
    Uniform,
    Range,
    Load,
}

impl ServerAssignor {
    pub fn parse(name: &str) -> Option<ServerAssignor> {
        match name {
            "uniform" => Some(ServerAssignor::Uniform),
            "range" => Some(ServerAssignor::Range),
            load::NAME => Some(ServerAssignor::Load),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ServerAssignor::Uniform => "uniform",
            ServerAssignor::Range => "range",
            ServerAssignor::Load => load::NAME,
        }
    }
}

/// A partition's load figure (`topic`, `partition`), when one was measured.
pub type LoadLookup<'a> = &'a dyn Fn(&str, i32) -> Option<f64>;

/// A computed target: each member's assignment, and the assignor's explanation of each partition
/// that changed owner (only `load` explains).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Target {
    pub assignment: BTreeMap<String, Assignment>,
    pub moves: Vec<String>,
}

/// Each member's target: `subscribed` maps a member to the names of the existing topics it
/// subscribes to (its list and its regex resolved); `topics` describes them; `loads` gives the
/// `load` assignor its figures.
pub fn compute_target(
    group: &ConsumerGroup,
    assignor: ServerAssignor,
    subscribed: &BTreeMap<String, Vec<String>>,
    topics: &BTreeMap<String, TopicMetadata>,
    loads: LoadLookup<'_>,
) -> Result<Target, gregor_assign::AssignError> {
    if assignor == ServerAssignor::Load {
        return load_target(group, subscribed, topics, loads);
    }
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
        ServerAssignor::Range => range::assign(&spec),
        _ => sticky::assign(&spec, sticky::Flavor::Sticky),
    };
    let mut assignment = BTreeMap::new();
    for (member, got) in spec.members().iter().zip(&result.members) {
        let mut a = Assignment::new();
        for &pid in &got.partitions {
            let (topic, partition) = spec.partition(pid);
            let name = &spec.topic(topic).name;
            if let Some(t) = topics.get(name) {
                a.entry(t.id).or_default().insert(partition);
            }
        }
        assignment.insert(member.member_id.clone(), a);
    }
    Ok(Target {
        assignment,
        moves: Vec::new(),
    })
}

/// The `load` assignor's round: the previous target is what each member owns.
fn load_target(
    group: &ConsumerGroup,
    subscribed: &BTreeMap<String, Vec<String>>,
    topics: &BTreeMap<String, TopicMetadata>,
    loads: LoadLookup<'_>,
) -> Result<Target, gregor_assign::AssignError> {
    let by_id: BTreeMap<u128, &TopicMetadata> = topics.values().map(|t| (t.id, t)).collect();
    let members = group.members.keys().map(|id| LoadMember {
        member_id: id.clone(),
        topics: subscribed.get(id).cloned().unwrap_or_default(),
    });
    let current = group.target.iter().map(|(id, a)| {
        let owned = a
            .iter()
            .filter_map(|(t, ps)| by_id.get(t).map(|t| (t, ps)))
            .flat_map(|(t, ps)| ps.iter().map(|p| TopicPartition::new(&t.name, *p)));
        (id.clone(), owned.collect())
    });
    let measured = topics.values().flat_map(|t| {
        (0..t.partitions.max(0))
            .filter_map(|p| loads(&t.name, p).map(|l| (TopicPartition::new(&t.name, p), l)))
    });
    let input = LoadInput {
        members: members.collect(),
        topics: topics
            .values()
            .map(|t| (t.name.clone(), t.partitions))
            .collect(),
        loads: measured.collect(),
        current: current.collect(),
    };
    let outcome = load::assign(&input, &LoadConfig::default())?;
    let mut assignment = BTreeMap::new();
    for (member, partitions) in outcome.assignment {
        let mut a = Assignment::new();
        for tp in partitions {
            if let Some(t) = topics.get(&tp.topic) {
                a.entry(t.id).or_default().insert(tp.partition);
            }
        }
        assignment.insert(member, a);
    }
    Ok(Target {
        assignment,
        moves: outcome.moves.iter().map(ToString::to_string).collect(),
    })
}
