//! Partition state changes requested by brokers and admins: AlterPartition (ISR changes from
//! the leader, fenced by leader and partition epoch), ElectLeaders (preferred and unclean),
//! and partition reassignment (AlterPartitionReassignments / ListPartitionReassignments).

use super::change::{Election, PartitionChangeBuilder};
use super::state::{Controller, ControllerResult, Staging};
use super::topics::validate_manual_assignment;
use crate::error::ApiError;
use crate::image::{MetadataImage, PartitionRegistration};
use crate::record::*;
use crate::registration::has_duplicates;
use crate::types::{BrokerId, TopicIdPartition, TopicPartition, NO_LEADER};
use kafka_protocol::ResponseError;
use uuid::Uuid;

/// One partition of an AlterPartition request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterPartitionData {
    /// Topic id.
    pub topic_id: Uuid,
    /// Partition.
    pub partition: i32,
    /// The leader's current leader epoch.
    pub leader_epoch: i32,
    /// Proposed ISR.
    pub new_isr: Vec<BrokerId>,
    /// The leader's recovery state.
    pub leader_recovery_state: LeaderRecoveryState,
    /// The partition epoch the proposal is based on.
    pub partition_epoch: i32,
}

/// An AlterPartition request from a partition leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterPartitionRequest {
    /// The leader's broker id.
    pub broker_id: BrokerId,
    /// The leader's broker epoch.
    pub broker_epoch: i64,
    /// Partitions.
    pub partitions: Vec<AlterPartitionData>,
}

/// The state of a partition sent back to its leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionStateReply {
    /// Leader.
    pub leader: BrokerId,
    /// Leader epoch.
    pub leader_epoch: i32,
    /// ISR.
    pub isr: Vec<BrokerId>,
    /// Recovery state.
    pub leader_recovery_state: LeaderRecoveryState,
    /// Partition epoch.
    pub partition_epoch: i32,
}

impl From<&PartitionRegistration> for PartitionStateReply {
    fn from(p: &PartitionRegistration) -> Self {
        PartitionStateReply {
            leader: p.leader,
            leader_epoch: p.leader_epoch,
            isr: p.isr.clone(),
            leader_recovery_state: p.leader_recovery_state,
            partition_epoch: p.partition_epoch,
        }
    }
}

/// ElectLeaders election type (Kafka's ids: preferred 0, unclean 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElectionType {
    /// Move leadership to the preferred replica.
    Preferred,
    /// Elect a leader for a leaderless partition, from outside the ISR if need be.
    Unclean,
}

/// A partition with a reassignment in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OngoingReassignment {
    /// Topic and partition.
    pub partition: TopicPartition,
    /// Current replica set (targets and replicas being removed).
    pub replicas: Vec<BrokerId>,
    /// Replicas being added.
    pub adding_replicas: Vec<BrokerId>,
    /// Replicas being removed.
    pub removing_replicas: Vec<BrokerId>,
}

impl Controller {
    /// AlterPartition: the leader proposes a new ISR. Per partition the reply is the new state,
    /// or: `UNKNOWN_TOPIC_ID`, `UNKNOWN_TOPIC_OR_PARTITION`, `FENCED_LEADER_EPOCH` (stale
    /// leader epoch), `NOT_CONTROLLER` (epochs ahead of this controller), `INVALID_REQUEST`
    /// (not the leader; ISR not within replicas, without the leader, with duplicates, or larger
    /// than one while recovering), `INVALID_UPDATE_VERSION` (stale partition epoch),
    /// `INELIGIBLE_REPLICA` (fenced or unregistered ISR member), `NEW_LEADER_ELECTED` (the
    /// change completed a reassignment that moved leadership). A stale broker epoch fails the
    /// whole request with `STALE_BROKER_EPOCH`.
    #[allow(clippy::type_complexity)]
    pub fn alter_partition(
        &mut self,
        request: &AlterPartitionRequest,
    ) -> ControllerResult<
        Result<Vec<(TopicIdPartition, Result<PartitionStateReply, ApiError>)>, ApiError>,
    > {
        match self.image.broker(request.broker_id) {
            Some(b) if b.epoch == request.broker_epoch => {}
            _ => {
                return ControllerResult::new(
                    Vec::new(),
                    Err(ApiError::new(
                        ResponseError::StaleBrokerEpoch,
                        format!(
                            "Broker {} epoch {} is not the registered one.",
                            request.broker_id, request.broker_epoch
                        ),
                    )),
                )
            }
        }
        let mut staging = Staging::new(&self.image);
        let mut out = Vec::with_capacity(request.partitions.len());
        let mut accepted = std::collections::BTreeMap::<&str, usize>::new();
        for d in &request.partitions {
            let id = TopicIdPartition {
                topic_id: d.topic_id,
                partition: d.partition,
            };
            let before = staging.records.len();
            let r = self.alter_one(&mut staging, request.broker_id, d);
            match &r {
                Err(e) => {
                    let topic = self.image.topic_by_id(d.topic_id).map(|t| t.name.as_str());
                    tracing::info!(broker = request.broker_id, topic, topic_id = %d.topic_id, partition = d.partition, code = ?e.code, message = %e.message, "AlterPartition rejected");
                }
                Ok(_) if staging.records.len() > before => {
                    let topic = self.image.topic_by_id(d.topic_id).map(|t| t.name.as_str());
                    *accepted.entry(topic.unwrap_or("?")).or_default() += 1;
                }
                Ok(_) => {}
            }
            out.push((id, r));
        }
        // One line per request; each partition's change is at DEBUG (a restarted replica
        // rejoins the ISR of every partition it hosts at once).
        if !accepted.is_empty() {
            tracing::info!(
                broker = request.broker_id,
                partitions = accepted.values().sum::<usize>(),
                topics = %crate::topic_name::topics_summary(&accepted),
                "AlterPartition: ISR changes accepted"
            );
        }
        ControllerResult::new(staging.records, Ok(out))
    }

    fn alter_one(
        &self,
        staging: &mut Staging,
        broker: BrokerId,
        d: &AlterPartitionData,
    ) -> Result<PartitionStateReply, ApiError> {
        let image = &staging.image;
        let topic = image.topic_by_id(d.topic_id).ok_or_else(|| {
            ApiError::new(
                ResponseError::UnknownTopicId,
                format!("Unknown topic id {}", d.topic_id),
            )
        })?;
        let part = topic.partitions.get(&d.partition).ok_or_else(|| {
            ApiError::unknown_topic_or_partition(format!(
                "Unknown partition {}-{}",
                topic.name, d.partition
            ))
        })?;
        check_alter_epochs(broker, &topic.name, d, part)?;
        check_new_isr(image, d, part)?;
        let is_active = |b: BrokerId| image.is_broker_active(b);
        let change = PartitionChangeBuilder::new(part, topic.id, d.partition, &is_active)
            .election(Election::Online)
            .target_isr(d.new_isr.clone())
            .target_recovery(d.leader_recovery_state)
            .build();
        let Some(change) = change else {
            return Ok(PartitionStateReply::from(part));
        };
        let leader_moved = matches!(change.leader, LeaderChange::To(l) if l != broker);
        let (topic_id, partition) = (topic.id, d.partition);
        let epochs_before = (part.leader_epoch, part.partition_epoch);
        tracing::debug!(broker, topic = %topic.name, %topic_id, partition, isr = ?d.new_isr, "AlterPartition accepted");
        staging.push(MetadataRecord::PartitionChange(change))?;
        let after = staging
            .image
            .topic_by_id(topic_id)
            .and_then(|t| t.partitions.get(&partition))
            .expect("the partition was just changed");
        debug_assert!(
            after.leader_epoch >= epochs_before.0 && after.partition_epoch > epochs_before.1,
            "a partition change never moves its epochs backwards"
        );
        if leader_moved {
            return Err(ApiError::new(
                ResponseError::NewLeaderElected,
                "The ISR change completed a reassignment and moved leadership.",
            ));
        }
        Ok(PartitionStateReply::from(after))
    }

    /// ElectLeaders. `partitions: None` means every partition; then partitions that already
    /// have the desired leader are left out of the answer, as in Kafka. Errors per partition:
    /// `UNKNOWN_TOPIC_OR_PARTITION`, `ELECTION_NOT_NEEDED`, `PREFERRED_LEADER_NOT_AVAILABLE`,
    /// `ELIGIBLE_LEADERS_NOT_AVAILABLE`.
    #[allow(clippy::type_complexity)]
    pub fn elect_leaders(
        &mut self,
        election: ElectionType,
        partitions: Option<&[TopicPartition]>,
    ) -> ControllerResult<Vec<(TopicPartition, Result<(), ApiError>)>> {
        let mut staging = Staging::new(&self.image);
        let mut out = Vec::new();
        match partitions {
            Some(list) => {
                for tp in list {
                    let r = self.elect_one(&mut staging, election, tp);
                    out.push((tp.clone(), r));
                }
            }
            None => {
                let all: Vec<TopicPartition> = self
                    .image
                    .topics()
                    .values()
                    .flat_map(|t| {
                        t.partitions
                            .keys()
                            .map(|&p| TopicPartition::new(t.name.clone(), p))
                    })
                    .collect();
                for tp in all {
                    let r = self.elect_one(&mut staging, election, &tp);
                    if !matches!(&r, Err(e) if e.code == ResponseError::ElectionNotNeeded) {
                        out.push((tp, r));
                    }
                }
            }
        }
        ControllerResult::new(staging.records, out)
    }

    fn elect_one(
        &self,
        staging: &mut Staging,
        election: ElectionType,
        tp: &TopicPartition,
    ) -> Result<(), ApiError> {
        let image = &staging.image;
        let topic = image.topic(&tp.topic).ok_or_else(|| {
            ApiError::unknown_topic_or_partition(format!("No such topic as {}", tp.topic))
        })?;
        let part = topic.partitions.get(&tp.partition).ok_or_else(|| {
            ApiError::unknown_topic_or_partition(format!("No such partition as {tp}"))
        })?;
        let not_needed = match election {
            ElectionType::Preferred => part.leader == part.preferred_leader(),
            ElectionType::Unclean => part.leader != NO_LEADER,
        };
        if not_needed {
            return Err(ApiError::new(
                ResponseError::ElectionNotNeeded,
                format!("Leader election not needed for {tp}."),
            ));
        }
        let is_active = |b: BrokerId| image.is_broker_active(b);
        let builder_election = match election {
            ElectionType::Preferred => Election::Preferred,
            ElectionType::Unclean => Election::Unclean,
        };
        let change = PartitionChangeBuilder::new(part, topic.id, tp.partition, &is_active)
            .election(builder_election)
            .build();
        match change {
            Some(c) => {
                tracing::info!(topic = %tp.topic, partition = tp.partition, ?election, leader = ?c.leader, "electing leader");
                staging.push(MetadataRecord::PartitionChange(c))
            }
            None => Err(match election {
                ElectionType::Preferred => ApiError::new(
                    ResponseError::PreferredLeaderNotAvailable,
                    format!("The preferred leader of {tp} is not available."),
                ),
                ElectionType::Unclean => ApiError::new(
                    ResponseError::EligibleLeadersNotAvailable,
                    format!("No live replica of {tp} can become leader."),
                ),
            }),
        }
    }

    /// AlterPartitionReassignments: `Some(replicas)` starts (or replaces) a reassignment to that
    /// target, `None` cancels the ongoing one. The reassignment completes, through a later
    /// AlterPartition, once every new replica is in the ISR. Errors per partition:
    /// `UNKNOWN_TOPIC_OR_PARTITION`, `INVALID_REPLICA_ASSIGNMENT` (empty, duplicates,
    /// unregistered brokers, or a cancellation that would leave no in-sync replica),
    /// `NO_REASSIGNMENT_IN_PROGRESS` (cancelling nothing).
    #[allow(clippy::type_complexity)]
    pub fn alter_partition_reassignments(
        &mut self,
        reassignments: &[(TopicPartition, Option<Vec<BrokerId>>)],
    ) -> ControllerResult<Vec<(TopicPartition, Result<(), ApiError>)>> {
        let mut staging = Staging::new(&self.image);
        let mut out = Vec::with_capacity(reassignments.len());
        for (tp, target) in reassignments {
            let r = self.reassign_one(&mut staging, tp, target.as_deref());
            if let Err(e) = &r {
                tracing::info!(topic = %tp.topic, partition = tp.partition, code = ?e.code, message = %e.message, "reassignment rejected");
            }
            out.push((tp.clone(), r));
        }
        ControllerResult::new(staging.records, out)
    }

    fn reassign_one(
        &self,
        staging: &mut Staging,
        tp: &TopicPartition,
        target: Option<&[BrokerId]>,
    ) -> Result<(), ApiError> {
        let image = &staging.image;
        let topic = image.topic(&tp.topic).ok_or_else(|| {
            ApiError::unknown_topic_or_partition(format!("Unable to find topic {}", tp.topic))
        })?;
        let part = topic.partitions.get(&tp.partition).ok_or_else(|| {
            ApiError::unknown_topic_or_partition(format!("Unable to find partition {tp}"))
        })?;
        let is_active = |b: BrokerId| image.is_broker_active(b);
        let election = self.election_for(image, &topic.name);
        let builder = PartitionChangeBuilder::new(part, topic.id, tp.partition, &is_active)
            .election(election);
        let change = match target {
            None => {
                if !part.is_reassigning() {
                    return Err(ApiError::new(
                        ResponseError::NoReassignmentInProgress,
                        format!("No ongoing reassignment for {tp}."),
                    ));
                }
                let original = part.original_replicas();
                let isr: Vec<BrokerId> = part
                    .isr
                    .iter()
                    .copied()
                    .filter(|b| original.contains(b))
                    .collect();
                if isr.is_empty() {
                    return Err(ApiError::new(
                        ResponseError::InvalidReplicaAssignment,
                        format!("Cannot cancel the reassignment of {tp}: none of its original replicas is in sync."),
                    ));
                }
                builder
                    .target_isr(isr)
                    .target_assignment(original, Vec::new(), Vec::new())
                    .build()
            }
            Some(target) => {
                validate_manual_assignment(image, target, None)?;
                let current = &part.replicas;
                let adding: Vec<BrokerId> = target
                    .iter()
                    .copied()
                    .filter(|b| !current.contains(b))
                    .collect();
                let removing: Vec<BrokerId> = current
                    .iter()
                    .copied()
                    .filter(|b| !target.contains(b))
                    .collect();
                let mut merged = target.to_vec();
                merged.extend(removing.iter().copied());
                builder.target_assignment(merged, adding, removing).build()
            }
        };
        if let Some(c) = change {
            tracing::info!(topic = %tp.topic, partition = tp.partition, target = ?target, "reassigning partition");
            staging.push(MetadataRecord::PartitionChange(c))?;
        }
        Ok(())
    }

    /// ListPartitionReassignments: the ongoing reassignments among `partitions` (all when
    /// `None`); unknown partitions are left out.
    pub fn list_partition_reassignments(
        &self,
        partitions: Option<&[TopicPartition]>,
    ) -> Vec<OngoingReassignment> {
        let describe = |tp: TopicPartition, p: &PartitionRegistration| OngoingReassignment {
            partition: tp,
            replicas: p.replicas.clone(),
            adding_replicas: p.adding_replicas.clone(),
            removing_replicas: p.removing_replicas.clone(),
        };
        match partitions {
            Some(list) => list
                .iter()
                .filter_map(|tp| {
                    let p = self.image.partition(tp)?;
                    p.is_reassigning().then(|| describe(tp.clone(), p))
                })
                .collect(),
            None => self
                .image
                .topics()
                .values()
                .flat_map(|t| {
                    t.partitions
                        .iter()
                        .filter(|(_, p)| p.is_reassigning())
                        .map(|(&i, p)| describe(TopicPartition::new(t.name.clone(), i), p))
                })
                .collect(),
        }
    }
}

impl Controller {
    /// Automatic leader rebalance (`auto.leader.rebalance.enable`): for every broker whose
    /// share of partitions led by someone else although it is their preferred leader exceeds
    /// `leader.imbalance.per.broker.percentage`, move those partitions back to it where it is
    /// live and in sync. The shell calls this every `leader.imbalance.check.interval.seconds`;
    /// nothing happens when the feature is off.
    pub fn rebalance_leaders(&self) -> Vec<MetadataRecord> {
        let view = self.config_view();
        if !view.bool("auto.leader.rebalance.enable") {
            return Vec::new();
        }
        let threshold = view.i64("leader.imbalance.per.broker.percentage");
        let mut preferred_total: std::collections::BTreeMap<BrokerId, usize> = Default::default();
        let mut not_led: std::collections::BTreeMap<BrokerId, Vec<TopicPartition>> =
            Default::default();
        for t in self.image.topics().values() {
            for (&p, part) in &t.partitions {
                let preferred = part.preferred_leader();
                *preferred_total.entry(preferred).or_default() += 1;
                if part.leader != preferred {
                    not_led
                        .entry(preferred)
                        .or_default()
                        .push(TopicPartition::new(t.name.clone(), p));
                }
            }
        }
        let mut staging = Staging::new(&self.image);
        for (broker, partitions) in not_led {
            let total = preferred_total[&broker];
            // Imbalance ratio in percent, compared as integers: 100 * off / total > threshold.
            if (100 * partitions.len()) as i64 <= threshold * total as i64
                || !self.image.is_broker_active(broker)
            {
                continue;
            }
            tracing::info!(
                broker,
                imbalanced = partitions.len(),
                total,
                "rebalancing leaders"
            );
            for tp in partitions {
                // Partitions whose preferred leader cannot lead now are skipped.
                let _ = self.elect_one(&mut staging, ElectionType::Preferred, &tp);
            }
        }
        staging.records
    }
}

/// The AlterPartition request must come from the leader, at the current epochs: newer epochs
/// mean this controller lags (`NOT_CONTROLLER`), older ones a stale leader.
fn check_alter_epochs(
    broker: BrokerId,
    topic_name: &str,
    d: &AlterPartitionData,
    part: &PartitionRegistration,
) -> Result<(), ApiError> {
    if d.leader_epoch > part.leader_epoch || d.partition_epoch > part.partition_epoch {
        return Err(ApiError::new(
            ResponseError::NotController,
            "The request's epochs are ahead of this controller.",
        ));
    }
    if d.leader_epoch < part.leader_epoch {
        return Err(ApiError::new(
            ResponseError::FencedLeaderEpoch,
            format!(
                "Leader epoch {} is older than the current leader epoch {}.",
                d.leader_epoch, part.leader_epoch
            ),
        ));
    }
    if broker != part.leader {
        return Err(ApiError::invalid_request(format!(
            "Broker {broker} is not the leader of {}-{} (leader is {}).",
            topic_name, d.partition, part.leader
        )));
    }
    if d.partition_epoch < part.partition_epoch {
        return Err(ApiError::new(
            ResponseError::InvalidUpdateVersion,
            format!(
                "Partition epoch {} is older than the current partition epoch {}.",
                d.partition_epoch, part.partition_epoch
            ),
        ));
    }
    Ok(())
}

/// The new ISR must be replicas including the leader, only the leader while it recovers, and
/// only registered, unfenced brokers.
fn check_new_isr(
    image: &MetadataImage,
    d: &AlterPartitionData,
    part: &PartitionRegistration,
) -> Result<(), ApiError> {
    if d.new_isr.is_empty()
        || has_duplicates(&d.new_isr)
        || d.new_isr.iter().any(|b| !part.replicas.contains(b))
    {
        return Err(ApiError::invalid_request(format!(
            "Invalid ISR {:?} for replicas {:?}.",
            d.new_isr, part.replicas
        )));
    }
    if !d.new_isr.contains(&part.leader) {
        return Err(ApiError::invalid_request(format!(
            "The ISR {:?} does not include the leader {}.",
            d.new_isr, part.leader
        )));
    }
    if d.leader_recovery_state == LeaderRecoveryState::Recovering && d.new_isr.len() > 1 {
        return Err(ApiError::invalid_request(
            "The ISR may hold only the leader while it recovers from an unclean election.",
        ));
    }
    if part.leader_recovery_state == LeaderRecoveryState::Recovered
        && d.leader_recovery_state == LeaderRecoveryState::Recovering
    {
        return Err(ApiError::invalid_request(
            "The leader recovery state cannot change from RECOVERED to RECOVERING.",
        ));
    }
    let ineligible: Vec<String> = d
        .new_isr
        .iter()
        .filter_map(|&b| match image.broker(b) {
            None => Some(format!("{b} (not registered)")),
            Some(r) if r.fenced => Some(format!("{b} (fenced)")),
            Some(_) => None,
        })
        .collect();
    if !ineligible.is_empty() {
        return Err(ApiError::new(
            ResponseError::IneligibleReplica,
            format!(
                "The new ISR contains ineligible replicas: {}",
                ineligible.join(", ")
            ),
        ));
    }
    Ok(())
}
