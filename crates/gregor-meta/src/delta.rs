//! What applying records changed, and what that means for one broker's replicas.

use crate::quota::ClientQuotaEntity;
use crate::record::ConfigResource;
use crate::registration::PartitionRegistration;
use crate::types::{BrokerId, TopicIdPartition};
use std::collections::{BTreeMap, BTreeSet};
use uuid::Uuid;

/// One partition's state before and after (`None`: did not exist / deleted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionDelta {
    /// Topic name.
    pub topic: String,
    /// State before the first merged record.
    pub before: Option<PartitionRegistration>,
    /// State after the last merged record.
    pub after: Option<PartitionRegistration>,
}

/// The changes made by one or more applied records.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataDelta {
    /// Topics created (id -> name).
    pub created_topics: BTreeMap<Uuid, String>,
    /// Topics deleted (id -> name).
    pub deleted_topics: BTreeMap<Uuid, String>,
    /// Partitions created, changed or deleted.
    pub changed_partitions: BTreeMap<TopicIdPartition, PartitionDelta>,
    /// Brokers registered, fenced, unfenced or unregistered.
    pub changed_brokers: BTreeSet<BrokerId>,
    /// Resources whose dynamic configs changed (a deleted topic's configs included).
    pub changed_configs: BTreeSet<ConfigResource>,
    /// ACL bindings created or deleted (by id).
    pub changed_acls: BTreeSet<Uuid>,
    /// Users whose SCRAM credentials were set or deleted.
    pub changed_scram_users: BTreeSet<String>,
    /// Entities whose client quotas were set or removed.
    pub changed_client_quotas: BTreeSet<ClientQuotaEntity>,
}

/// Leader elections a delta holds: a partition that existed before got another live leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeaderElections {
    /// Leaders chosen from the ISR (failover, preferred or reassignment elections).
    pub clean: u64,
    /// Leaders chosen from outside the ISR (KIP-704's recovering state).
    pub unclean: u64,
}

impl MetadataDelta {
    /// The leader elections in this delta (of a single commit: a merged delta counts at most
    /// one per partition).
    pub fn leader_elections(&self) -> LeaderElections {
        let mut out = LeaderElections::default();
        for change in self.changed_partitions.values() {
            let (Some(before), Some(after)) = (&change.before, &change.after) else {
                continue;
            };
            if after.leader < 0 || after.leader == before.leader {
                continue;
            }
            if after.leader_recovery_state == crate::record::LeaderRecoveryState::Recovering {
                out.unclean += 1;
            } else {
                out.clean += 1;
            }
        }
        out
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.created_topics.is_empty()
            && self.deleted_topics.is_empty()
            && self.changed_partitions.is_empty()
            && self.changed_brokers.is_empty()
            && self.changed_configs.is_empty()
            && self.changed_acls.is_empty()
            && self.changed_scram_users.is_empty()
            && self.changed_client_quotas.is_empty()
    }

    /// Fold a later delta into this one: the earliest `before` and the latest `after` of each
    /// partition are kept; a topic created and deleted within the span disappears.
    pub fn merge(&mut self, later: MetadataDelta) {
        for (id, name) in later.deleted_topics {
            if self.created_topics.remove(&id).is_none() {
                self.deleted_topics.insert(id, name);
            }
        }
        self.created_topics.extend(later.created_topics);
        for (tp, d) in later.changed_partitions {
            match self.changed_partitions.get_mut(&tp) {
                Some(existing) => {
                    existing.after = d.after;
                    if existing.before.is_none() && existing.after.is_none() {
                        self.changed_partitions.remove(&tp);
                    }
                }
                None => {
                    self.changed_partitions.insert(tp, d);
                }
            }
        }
        self.changed_brokers.extend(later.changed_brokers);
        self.changed_configs.extend(later.changed_configs);
        self.changed_acls.extend(later.changed_acls);
        self.changed_scram_users.extend(later.changed_scram_users);
        self.changed_client_quotas
            .extend(later.changed_client_quotas);
    }

    /// What `broker` must do with its replicas: become leader, become or stay follower, or stop
    /// (and delete) a replica it no longer hosts. Partitions whose state did not change are left
    /// out.
    pub fn local_changes(&self, broker: BrokerId) -> LocalReplicaChanges {
        let mut out = LocalReplicaChanges::default();
        for (tp, d) in &self.changed_partitions {
            if d.before == d.after {
                continue;
            }
            let was_replica = d
                .before
                .as_ref()
                .is_some_and(|p| p.replicas.contains(&broker));
            match &d.after {
                Some(after) if after.replicas.contains(&broker) => {
                    let role_changed = match &d.before {
                        Some(before) if was_replica => {
                            before.leader_epoch != after.leader_epoch
                                || before.leader != after.leader
                        }
                        _ => true,
                    };
                    let local = LocalPartition {
                        topic: d.topic.clone(),
                        id: *tp,
                        registration: after.clone(),
                        role_changed,
                    };
                    if after.leader == broker {
                        out.leaders.push(local);
                    } else {
                        out.followers.push(local);
                    }
                }
                _ if was_replica => out.stopped.push(StoppedReplica {
                    topic: d.topic.clone(),
                    id: *tp,
                    delete: true,
                }),
                _ => {}
            }
        }
        out
    }
}

/// A partition this broker hosts after the delta.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalPartition {
    /// Topic name.
    pub topic: String,
    /// Topic id and partition.
    pub id: TopicIdPartition,
    /// The partition's new state.
    pub registration: PartitionRegistration,
    /// True when the replica is new here or the leader / leader epoch changed (the replica
    /// manager must make it leader or follower, truncating as needed); false when only the ISR
    /// or the assignment changed.
    pub role_changed: bool,
}

/// A replica this broker must stop hosting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoppedReplica {
    /// Topic name.
    pub topic: String,
    /// Topic id and partition.
    pub id: TopicIdPartition,
    /// Delete the log (topic deleted or replica reassigned away).
    pub delete: bool,
}

/// Role changes for one broker, derived from a [`MetadataDelta`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LocalReplicaChanges {
    /// Partitions this broker leads.
    pub leaders: Vec<LocalPartition>,
    /// Partitions this broker follows.
    pub followers: Vec<LocalPartition>,
    /// Replicas to stop.
    pub stopped: Vec<StoppedReplica>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::LeaderRecoveryState;

    fn part(leader: BrokerId, recovery: LeaderRecoveryState) -> PartitionRegistration {
        PartitionRegistration {
            replicas: vec![1, 2, 3],
            isr: vec![leader],
            removing_replicas: vec![],
            adding_replicas: vec![],
            leader,
            leader_recovery_state: recovery,
            leader_epoch: 0,
            partition_epoch: 0,
        }
    }

    fn change(
        delta: &mut MetadataDelta,
        partition: i32,
        before: Option<PartitionRegistration>,
        after: Option<PartitionRegistration>,
    ) {
        let id = TopicIdPartition {
            topic_id: Uuid::nil(),
            partition,
        };
        let topic = "t".to_string();
        delta.changed_partitions.insert(
            id,
            PartitionDelta {
                topic,
                before,
                after,
            },
        );
    }

    #[test]
    fn elections_are_new_live_leaders_of_existing_partitions() {
        use LeaderRecoveryState::{Recovered, Recovering};
        let mut d = MetadataDelta::default();
        // Failover to another ISR member, and an unclean election.
        change(
            &mut d,
            0,
            Some(part(1, Recovered)),
            Some(part(2, Recovered)),
        );
        change(
            &mut d,
            1,
            Some(part(1, Recovered)),
            Some(part(3, Recovering)),
        );
        // Not elections: a new partition, a leader lost, a same leader (ISR change), a deletion.
        change(&mut d, 2, None, Some(part(1, Recovered)));
        change(
            &mut d,
            3,
            Some(part(1, Recovered)),
            Some(part(-1, Recovered)),
        );
        change(
            &mut d,
            4,
            Some(part(2, Recovering)),
            Some(part(2, Recovered)),
        );
        change(&mut d, 5, Some(part(2, Recovered)), None);
        assert_eq!(
            d.leader_elections(),
            LeaderElections {
                clean: 1,
                unclean: 1
            }
        );
        // An offline partition that gets a leader back is an election too.
        let mut d = MetadataDelta::default();
        change(
            &mut d,
            0,
            Some(part(-1, Recovered)),
            Some(part(2, Recovered)),
        );
        assert_eq!(d.leader_elections().clean, 1);
    }
}
