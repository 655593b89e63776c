//! The input of an assignment (a group's members and the topics they subscribe to) and its
//! output, in a compact indexed form.
//!
//! Topic names and partitions are interned once when a [`GroupSpec`] is built, so strategies work
//! on integers: a topic is a [`TopicId`] (its rank in Java string order) and a partition is a
//! [`PartitionId`], its position in the group's partition space (topics in name order, partitions
//! in numeric order). Ordering `PartitionId`s therefore orders partitions by topic, then number.

use std::cmp::Ordering;
use std::collections::HashMap;

use bytes::Bytes;

use crate::AssignError;

/// Index of a topic in [`GroupSpec::topics`]; topics are sorted by name in Java string order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicId(pub u32);

/// A partition of the group's partition space: topics in name order, then partition number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionId(pub u32);

/// Index of a member in [`GroupSpec::members`] (the order the members were given in).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemberIdx(pub u32);

/// Compares two strings the way Java's `String.compareTo` does (UTF-16 code units), which is the
/// order Kafka's assignors sort member ids, instance ids and topic names in.
pub fn java_cmp(a: &str, b: &str) -> Ordering {
    if a.is_ascii() && b.is_ascii() {
        return a.as_bytes().cmp(b.as_bytes());
    }
    a.encode_utf16().cmp(b.encode_utf16())
}

/// A topic as the assignors see it: a name, a partition count and, when known, the racks that
/// host each partition's replicas.
#[derive(Debug, Clone)]
pub struct TopicSpec {
    pub name: String,
    pub partitions: u32,
    /// Per partition, the racks of its replicas (empty when unknown).
    pub replica_racks: Vec<Vec<String>>,
    /// First [`PartitionId`] of this topic.
    pub(crate) base: u32,
}

impl TopicSpec {
    /// Racks of partition `p`'s replicas; empty when unknown.
    pub fn racks_of(&self, partition: u32) -> &[String] {
        self.replica_racks
            .get(partition as usize)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }
}

/// One member's subscription as the group leader receives it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Member {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    /// `client.rack`; an empty string counts as no rack, as in Kafka.
    pub rack: Option<String>,
    /// Subscribed topics; topics that do not exist (yet) are skipped.
    pub topics: Vec<String>,
    /// Partitions the member owned before this rebalance.
    pub owned_partitions: Vec<(String, i32)>,
    /// Generation in which it owned them; `None` when unknown.
    pub generation: Option<i32>,
    /// Strategy-specific subscription user data.
    pub user_data: Option<Bytes>,
}

/// A member after interning: subscriptions and ownership as ids.
#[derive(Debug, Clone)]
pub struct MemberSpec {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub rack: Option<String>,
    /// Subscribed topics that exist, sorted and deduplicated.
    pub topics: Vec<TopicId>,
    /// Subscribed topic names that do not exist.
    pub unknown_topics: Vec<String>,
    /// Owned partitions of existing topics, as given (deduplicated).
    pub owned: Vec<PartitionId>,
    pub generation: Option<i32>,
    pub user_data: Option<Bytes>,
}

impl MemberSpec {
    pub fn subscribes(&self, topic: TopicId) -> bool {
        self.topics.binary_search(&topic).is_ok()
    }
}

/// Everything an assignor needs: the topics and the members. Build it with [`GroupSpecBuilder`].
#[derive(Debug, Clone)]
pub struct GroupSpec {
    topics: Vec<TopicSpec>,
    topic_index: HashMap<String, TopicId>,
    members: Vec<MemberSpec>,
    total_partitions: u32,
}

impl GroupSpec {
    pub fn builder() -> GroupSpecBuilder {
        GroupSpecBuilder::default()
    }

    pub fn topics(&self) -> &[TopicSpec] {
        &self.topics
    }

    pub fn topic(&self, id: TopicId) -> &TopicSpec {
        &self.topics[id.0 as usize]
    }

    pub fn topic_id(&self, name: &str) -> Option<TopicId> {
        self.topic_index.get(name).copied()
    }

    pub fn members(&self) -> &[MemberSpec] {
        &self.members
    }

    pub fn member(&self, idx: MemberIdx) -> &MemberSpec {
        &self.members[idx.0 as usize]
    }

    pub fn member_index(&self, member_id: &str) -> Option<MemberIdx> {
        self.members
            .iter()
            .position(|m| m.member_id == member_id)
            .map(|i| MemberIdx(i as u32))
    }

    /// Number of partitions over all topics in the spec.
    pub fn total_partitions(&self) -> u32 {
        self.total_partitions
    }

    /// The id of `topic`'s partition `partition`, if it exists.
    pub fn partition_id(&self, topic: TopicId, partition: i32) -> Option<PartitionId> {
        let t = self.topics.get(topic.0 as usize)?;
        if partition < 0 || partition as u32 >= t.partitions {
            return None;
        }
        Some(PartitionId(t.base + partition as u32))
    }

    /// Topic and partition number of a partition id.
    pub fn partition(&self, id: PartitionId) -> (TopicId, i32) {
        // Topics with zero partitions share a base with the next topic; the last topic whose base
        // is at or below the id and that has partitions is the one.
        let i = self.topics.partition_point(|t| t.base <= id.0);
        let mut t = i.saturating_sub(1);
        while self.topics[t].partitions == 0
            || id.0 >= self.topics[t].base + self.topics[t].partitions
        {
            t -= 1;
        }
        (TopicId(t as u32), (id.0 - self.topics[t].base) as i32)
    }

    /// Partition ids of a topic.
    pub fn partitions_of(&self, topic: TopicId) -> std::ops::Range<u32> {
        let t = self.topic(topic);
        t.base..t.base + t.partitions
    }

    /// Kafka's member order: members with a `group.instance.id` first, ordered by it; then the
    /// others by `member.id` (Java string order).
    pub fn sorted_members(&self) -> Vec<MemberIdx> {
        let mut order: Vec<MemberIdx> = (0..self.members.len() as u32).map(MemberIdx).collect();
        order.sort_by(|a, b| kafka_member_order(self.member(*a), self.member(*b)));
        order
    }

    /// `topic-partition` display names of a list of partitions.
    pub fn display_all(&self, ids: &[PartitionId]) -> Vec<String> {
        ids.iter().map(|p| self.display(*p)).collect()
    }

    /// `topic-partition` display name.
    pub fn display(&self, id: PartitionId) -> String {
        let (t, p) = self.partition(id);
        format!("{}-{}", self.topic(t).name, p)
    }
}

/// Order of Kafka's `MemberInfo`: instance ids first (by instance id), then member ids.
pub fn kafka_member_order(a: &MemberSpec, b: &MemberSpec) -> Ordering {
    match (&a.group_instance_id, &b.group_instance_id) {
        (Some(x), Some(y)) => java_cmp(x, y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => java_cmp(&a.member_id, &b.member_id),
    }
}

/// Collects topics and members, validates them and interns names.
#[derive(Debug, Default, Clone)]
pub struct GroupSpecBuilder {
    topics: Vec<(String, i64, Vec<Vec<String>>)>,
    members: Vec<Member>,
}

impl GroupSpecBuilder {
    /// Adds a topic with `partitions` partitions and no rack information.
    pub fn topic(mut self, name: impl Into<String>, partitions: i64) -> Self {
        self.topics.push((name.into(), partitions, Vec::new()));
        self
    }

    /// Adds a topic whose partition `i` has replicas on the racks `replica_racks[i]`.
    pub fn topic_with_racks(
        mut self,
        name: impl Into<String>,
        partitions: i64,
        replica_racks: Vec<Vec<String>>,
    ) -> Self {
        self.topics.push((name.into(), partitions, replica_racks));
        self
    }

    pub fn member(mut self, member: Member) -> Self {
        self.members.push(member);
        self
    }

    pub fn add_topic(
        &mut self,
        name: impl Into<String>,
        partitions: i64,
        replica_racks: Vec<Vec<String>>,
    ) {
        self.topics.push((name.into(), partitions, replica_racks));
    }

    pub fn add_member(&mut self, member: Member) {
        self.members.push(member);
    }

    pub fn build(self) -> Result<GroupSpec, AssignError> {
        let Topics {
            specs: topics,
            index: topic_index,
            total,
        } = build_topics(self.topics)?;
        let mut seen_ids = HashMap::with_capacity(self.members.len());
        let mut members = Vec::with_capacity(self.members.len());
        for m in self.members {
            if m.member_id.is_empty() {
                return Err(AssignError::InvalidInput("member id is empty".into()));
            }
            if seen_ids.insert(m.member_id.clone(), ()).is_some() {
                return Err(AssignError::InvalidInput(format!(
                    "duplicate member {}",
                    m.member_id
                )));
            }
            members.push(member_spec(m, &topics, &topic_index));
        }
        Ok(GroupSpec {
            topics,
            topic_index,
            members,
            total_partitions: total as u32,
        })
    }
}

/// The validated topics in name order, their index by name and the partition total.
struct Topics {
    specs: Vec<TopicSpec>,
    index: HashMap<String, TopicId>,
    total: u64,
}

/// Validates the topics, orders them by name (Java's string order) and numbers their
/// partitions consecutively.
fn build_topics(mut raw: Vec<(String, i64, Vec<Vec<String>>)>) -> Result<Topics, AssignError> {
    for (name, partitions, racks) in &raw {
        if name.is_empty() {
            return Err(AssignError::InvalidInput("topic name is empty".into()));
        }
        if *partitions < 0 || *partitions > i32::MAX as i64 {
            return Err(AssignError::InvalidInput(format!(
                "topic {name}: partition count {partitions} is out of range"
            )));
        }
        if !racks.is_empty() && racks.len() as i64 != *partitions {
            return Err(AssignError::InvalidInput(format!(
                "topic {name}: replica_racks has {} entries for {partitions} partitions",
                racks.len()
            )));
        }
    }
    raw.sort_by(|a, b| java_cmp(&a.0, &b.0));
    if let Some(w) = raw.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(AssignError::InvalidInput(format!(
            "duplicate topic {}",
            w[0].0
        )));
    }
    let mut total: u64 = 0;
    let mut topics = Vec::with_capacity(raw.len());
    let mut topic_index = HashMap::with_capacity(raw.len());
    for (i, (name, partitions, replica_racks)) in raw.into_iter().enumerate() {
        topic_index.insert(name.clone(), TopicId(i as u32));
        topics.push(TopicSpec {
            name,
            partitions: partitions as u32,
            replica_racks,
            base: total as u32,
        });
        total += partitions as u64;
        if total > u32::MAX as u64 / 2 {
            return Err(AssignError::InvalidInput(
                "too many partitions in total".into(),
            ));
        }
    }
    Ok(Topics {
        specs: topics,
        index: topic_index,
        total,
    })
}

/// A member's subscription against the known topics: subscribed topics interned (unknown ones
/// kept aside by name), owned partitions of known topics in the member's order without repeats.
fn member_spec(
    m: Member,
    topics: &[TopicSpec],
    topic_index: &HashMap<String, TopicId>,
) -> MemberSpec {
    let mut sub = Vec::with_capacity(m.topics.len());
    let mut unknown = Vec::new();
    for t in &m.topics {
        match topic_index.get(t.as_str()) {
            Some(id) => sub.push(*id),
            None => unknown.push(t.clone()),
        }
    }
    sub.sort_unstable();
    sub.dedup();
    let mut owned = Vec::with_capacity(m.owned_partitions.len());
    for (t, p) in &m.owned_partitions {
        if let Some(id) = topic_index.get(t.as_str()) {
            let spec = &topics[id.0 as usize];
            if *p >= 0 && (*p as u32) < spec.partitions {
                owned.push(PartitionId(spec.base + *p as u32));
            }
        }
    }
    // Keep the member's order of ownership but drop repeats.
    if owned.len() > 1 {
        let mut sorted = owned.clone();
        sorted.sort_unstable();
        if sorted.windows(2).any(|w| w[0] == w[1]) {
            let mut seen = std::collections::HashSet::with_capacity(owned.len());
            owned.retain(|p| seen.insert(*p));
        }
    }
    MemberSpec {
        member_id: m.member_id,
        group_instance_id: m.group_instance_id,
        rack: m.rack.filter(|r| !r.is_empty()),
        topics: sub,
        unknown_topics: unknown,
        owned,
        generation: m.generation,
        user_data: m.user_data,
    }
}

/// What one member receives.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberAssignment {
    /// Partitions assigned in this round, sorted.
    pub partitions: Vec<PartitionId>,
    /// Cooperative protocol: partitions this member will receive in the follow-up round, once
    /// their current owners have revoked them. Always empty for eager strategies.
    pub pending: Vec<PartitionId>,
    /// Assignment user data for the member.
    pub user_data: Option<Bytes>,
}

/// The result of an assignment: one entry per member, in the order of [`GroupSpec::members`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupAssignment {
    pub members: Vec<MemberAssignment>,
}

impl GroupAssignment {
    pub fn empty(members: usize) -> Self {
        GroupAssignment {
            members: vec![MemberAssignment::default(); members],
        }
    }

    /// Builds an assignment from per-member partition lists, sorting each list.
    pub fn from_lists(lists: Vec<Vec<PartitionId>>) -> Self {
        GroupAssignment {
            members: lists
                .into_iter()
                .map(|mut partitions| {
                    partitions.sort_unstable();
                    MemberAssignment {
                        partitions,
                        ..Default::default()
                    }
                })
                .collect(),
        }
    }

    pub fn member(&self, idx: MemberIdx) -> &MemberAssignment {
        &self.members[idx.0 as usize]
    }

    /// Owner of each partition, `None` where unassigned. Errors if a partition is assigned twice.
    pub fn owners(&self, spec: &GroupSpec) -> Result<Vec<Option<MemberIdx>>, AssignError> {
        let mut owners = vec![None; spec.total_partitions() as usize];
        for (i, m) in self.members.iter().enumerate() {
            for p in &m.partitions {
                let slot = owners.get_mut(p.0 as usize).ok_or_else(|| {
                    AssignError::InvalidAssignment(format!("unknown partition id {}", p.0))
                })?;
                if let Some(other) = slot {
                    let other: MemberIdx = *other;
                    return Err(AssignError::InvalidAssignment(format!(
                        "{} assigned to both {} and {}",
                        spec.display(*p),
                        spec.member(other).member_id,
                        spec.members()[i].member_id
                    )));
                }
                *slot = Some(MemberIdx(i as u32));
            }
        }
        Ok(owners)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_order_matches_utf16_for_non_bmp() {
        // U+FF61 sorts after U+1F600 in UTF-8 bytes but before it in UTF-16 code units.
        assert_eq!(java_cmp("\u{FF61}", "\u{1F600}"), Ordering::Greater);
        assert_eq!(java_cmp("a", "b"), Ordering::Less);
        assert_eq!(java_cmp("B", "a"), Ordering::Less);
    }

    #[test]
    fn partition_ids_round_trip_with_empty_topics() {
        let spec = GroupSpec::builder()
            .topic("b", 2)
            .topic("a", 0)
            .topic("c", 3)
            .build()
            .expect("valid");
        assert_eq!(spec.topics()[0].name, "a");
        let c = spec.topic_id("c").expect("exists");
        for p in 0..3 {
            let id = spec.partition_id(c, p).expect("exists");
            assert_eq!(spec.partition(id), (c, p));
        }
        let b = spec.topic_id("b").expect("exists");
        assert_eq!(spec.partition(PartitionId(0)), (b, 0));
        assert_eq!(spec.partition_id(c, 3), None);
    }

    #[test]
    fn rejects_bad_input() {
        assert!(GroupSpec::builder().topic("t", -1).build().is_err());
        assert!(GroupSpec::builder()
            .topic("t", 1)
            .topic("t", 2)
            .build()
            .is_err());
        let m = Member {
            member_id: "a".into(),
            ..Default::default()
        };
        assert!(GroupSpec::builder()
            .member(m.clone())
            .member(m)
            .build()
            .is_err());
    }
}
