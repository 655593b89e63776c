//! The synthetic groups of `gregor bench assign` and the criterion benches, defined precisely
//! enough that other implementations can be run on identical input:
//!
//! * topics `topic0` .. `topic{T-1}`, each with `P` partitions; members `consumer-00000` ..
//!   (`consumer-%05d`), no group instance ids;
//! * `Uniform`: every member subscribes to every topic; `Nonuniform`: member `i` subscribes to
//!   topic `j` iff `(i + j) % 3 != 0` or `j == i % T`;
//! * `owned_prev`: the first `M-1` members owned everything before member `M-1` joined: walk
//!   partitions topic-major with a cursor `k` starting at 0; give each partition to the first
//!   member `mi = (k + tries) % (M-1)`, `tries = 0, 1, ...`, that subscribes to its topic, then
//!   set `k = mi + 1`; owners carry generation 1;
//! * `racks = R > 0`: partition `p` of topic `t` has replicas on racks `r{(t+p)%R}` and
//!   `r{(t+p+1)%R}`; member `i` has rack `r{i%R}`.

use crate::{AssignError, GroupSpec, Member};

/// Subscription pattern of a synthetic group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subscriptions {
    Uniform,
    Nonuniform,
}

/// Parameters of a synthetic group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Synthetic {
    pub topics: u32,
    pub partitions: u32,
    pub members: u32,
    pub subscriptions: Subscriptions,
    pub owned_prev: bool,
    pub racks: u32,
}

impl Synthetic {
    /// Member `i` subscribes to topic `j`.
    pub fn subscribes(&self, i: u32, j: u32) -> bool {
        match self.subscriptions {
            Subscriptions::Uniform => true,
            Subscriptions::Nonuniform => !(i + j).is_multiple_of(3) || j == i % self.topics,
        }
    }

    /// Builds the group.
    pub fn build(&self) -> Result<GroupSpec, AssignError> {
        if self.topics == 0 || self.members == 0 {
            return Err(AssignError::InvalidInput(
                "a synthetic group needs at least one topic and one member".into(),
            ));
        }
        let names: Vec<String> = (0..self.topics).map(|t| format!("topic{t}")).collect();
        let mut b = GroupSpec::builder();
        for (t, name) in names.iter().enumerate() {
            let racks = if self.racks > 0 {
                (0..self.partitions)
                    .map(|p| {
                        let r = (t as u32 + p) % self.racks;
                        vec![format!("r{r}"), format!("r{}", (r + 1) % self.racks)]
                    })
                    .collect()
            } else {
                Vec::new()
            };
            b.add_topic(name.clone(), self.partitions as i64, racks);
        }
        let mut owned: Vec<Vec<(String, i32)>> = vec![Vec::new(); self.members as usize];
        if self.owned_prev && self.members > 1 {
            let prev = self.members - 1;
            let mut k = 0u32;
            for (t, name) in names.iter().enumerate() {
                for p in 0..self.partitions {
                    let owner = (0..prev)
                        .map(|tries| (k + tries) % prev)
                        .find(|mi| self.subscribes(*mi, t as u32));
                    if let Some(mi) = owner {
                        owned[mi as usize].push((name.clone(), p as i32));
                        k = mi + 1;
                    }
                }
            }
        }
        for (i, owned) in owned.into_iter().enumerate() {
            let i = i as u32;
            let previous_owner = self.owned_prev && i + 1 < self.members;
            b.add_member(Member {
                member_id: format!("consumer-{i:05}"),
                rack: (self.racks > 0).then(|| format!("r{}", i % self.racks)),
                topics: (0..self.topics)
                    .filter(|j| self.subscribes(i, *j))
                    .map(|j| names[j as usize].clone())
                    .collect(),
                owned_partitions: owned,
                generation: previous_owner.then_some(1),
                ..Default::default()
            });
        }
        b.build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonuniform_rule_and_previous_owners() {
        let s = Synthetic {
            topics: 3,
            partitions: 2,
            members: 4,
            subscriptions: Subscriptions::Nonuniform,
            owned_prev: true,
            racks: 2,
        };
        let g = s.build().expect("valid");
        // Member 0: (0+0)%3 == 0 but 0 == 0 % 3, so topic0; topic1, topic2 by the first rule.
        let names = |m: usize| -> Vec<&str> {
            g.members()[m]
                .topics
                .iter()
                .map(|t| g.topic(*t).name.as_str())
                .collect()
        };
        assert_eq!(names(0), vec!["topic0", "topic1", "topic2"]);
        // Member 1: topic2 excluded ((1+2)%3 == 0 and 2 != 1 % 3).
        assert_eq!(names(1), vec!["topic0", "topic1"]);
        // The last member owns nothing and has no generation; all partitions have an owner.
        assert!(g.members()[3].owned.is_empty());
        assert_eq!(g.members()[3].generation, None);
        let owned: usize = g.members().iter().map(|m| m.owned.len()).sum();
        assert_eq!(owned, 6);
        assert_eq!(g.members()[1].rack.as_deref(), Some("r1"));
        assert_eq!(
            g.topics()[1].replica_racks[1],
            vec!["r0".to_string(), "r1".to_string()]
        );
    }
}
