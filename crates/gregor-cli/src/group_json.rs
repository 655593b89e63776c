//! The JSON description of a consumer group used by `gregor assign` and `gregor lab`.
//!
//! ```json
//! { "strategy": "range",
//!   "topics": { "t0": { "partitions": 3, "replica_racks": [["r0"], ["r1"], ["r0", "r1"]] } },
//!   "members": [ { "member_id": "c0", "group_instance_id": null, "rack": "r0",
//!                  "topics": ["t0"], "owned_partitions": ["t0-0"], "generation": 1 } ] }
//! ```

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use gregor_assign::{GroupAssignment, GroupSpec, Member, PartitionId};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TopicJson {
    pub partitions: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_racks: Option<Vec<Vec<String>>>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MemberJson {
    pub member_id: String,
    #[serde(default)]
    pub group_instance_id: Option<String>,
    #[serde(default)]
    pub rack: Option<String>,
    pub topics: Vec<String>,
    #[serde(default)]
    pub owned_partitions: Vec<String>,
    #[serde(default)]
    pub generation: Option<i32>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupJson {
    #[serde(default)]
    pub strategy: Option<String>,
    pub topics: BTreeMap<String, TopicJson>,
    pub members: Vec<MemberJson>,
}

/// Splits `topic-N` at the last `-`.
pub fn parse_partition(s: &str) -> Result<(String, i32)> {
    let (topic, num) = s
        .rsplit_once('-')
        .with_context(|| format!("partition '{s}' is not of the form topic-N"))?;
    if topic.is_empty() {
        bail!("partition '{s}' has an empty topic name");
    }
    let n: i32 = num
        .parse()
        .with_context(|| format!("partition '{s}' does not end in a partition number"))?;
    if n < 0 {
        bail!("partition '{s}' has a negative partition number");
    }
    Ok((topic.to_string(), n))
}

impl MemberJson {
    pub fn to_member(&self) -> Result<Member> {
        let owned = self
            .owned_partitions
            .iter()
            .map(|p| parse_partition(p))
            .collect::<Result<Vec<_>>>()
            .with_context(|| format!("member {}", self.member_id))?;
        Ok(Member {
            member_id: self.member_id.clone(),
            group_instance_id: self.group_instance_id.clone(),
            rack: self.rack.clone(),
            topics: self.topics.clone(),
            owned_partitions: owned,
            generation: self.generation,
            user_data: None,
        })
    }
}

/// Builds the assignor input from topics and members.
pub fn build_spec(topics: &BTreeMap<String, TopicJson>, members: &[Member]) -> Result<GroupSpec> {
    let mut b = GroupSpec::builder();
    for (name, t) in topics {
        b.add_topic(
            name.clone(),
            t.partitions,
            t.replica_racks.clone().unwrap_or_default(),
        );
    }
    for m in members {
        b.add_member(m.clone());
    }
    Ok(b.build()?)
}

/// Parses a group document; errors name the problem (serde reports line and column).
pub fn parse_group(text: &str) -> Result<GroupJson> {
    serde_json::from_str(text).context("malformed group description")
}

/// `topic-N` names of each member's partitions, by member id.
pub fn named(
    spec: &GroupSpec,
    lists: impl Fn(usize) -> Vec<PartitionId>,
) -> BTreeMap<String, Vec<String>> {
    spec.members()
        .iter()
        .enumerate()
        .map(|(i, m)| (m.member_id.clone(), spec.display_all(&lists(i))))
        .collect()
}

/// The assignment (this round) by member id.
pub fn assigned(spec: &GroupSpec, a: &GroupAssignment) -> BTreeMap<String, Vec<String>> {
    named(spec, |i| a.members[i].partitions.clone())
}

/// Partitions promised for the follow-up round, by member id.
pub fn pending(spec: &GroupSpec, a: &GroupAssignment) -> BTreeMap<String, Vec<String>> {
    named(spec, |i| a.members[i].pending.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_names_split_at_the_last_dash() {
        assert_eq!(
            parse_partition("my-topic-12").expect("valid"),
            ("my-topic".into(), 12)
        );
        assert!(parse_partition("nodash").is_err());
        assert!(parse_partition("t-x").is_err());
        assert!(parse_partition("-3").is_err());
        assert_eq!(parse_partition("t--1").expect("valid"), ("t-".into(), 1));
    }
}
