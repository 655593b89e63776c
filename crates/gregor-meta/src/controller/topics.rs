//! CreateTopics, DeleteTopics and CreatePartitions.

use super::state::{Controller, ControllerResult, Staging, MAX_RECORDS_PER_USER_OP};
use crate::config::{validate_topic_overrides, BrokerConfigView, DescribedConfig};
use crate::error::ApiError;
use crate::image::MetadataImage;
use crate::placement::{assign_replicas, PlacementBroker, PlacementStart};
use crate::record::*;
use crate::topic_name::{has_collision_chars, unify_collision_chars, validate_topic_name};
use crate::types::BrokerId;
use kafka_protocol::ResponseError;
use std::collections::{BTreeMap, BTreeSet};
use uuid::Uuid;

/// One topic of a CreateTopics request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatableTopic {
    /// Name.
    pub name: String,
    /// Partitions, or -1 for `num.partitions` (must be -1 with manual assignments).
    pub num_partitions: i32,
    /// Replication factor, or -1 for `default.replication.factor` (must be -1 with manual
    /// assignments).
    pub replication_factor: i16,
    /// Manual assignment (`--replica-assignment`): partition index and its replicas, preferred
    /// leader first. Empty means automatic placement.
    pub assignments: Vec<(i32, Vec<BrokerId>)>,
    /// Topic config overrides (`--config`); a `None` value is rejected as Kafka does.
    pub configs: Vec<(String, Option<String>)>,
}

impl CreatableTopic {
    /// A topic with the broker defaults for partitions and replication factor.
    pub fn new(name: impl Into<String>) -> Self {
        CreatableTopic {
            name: name.into(),
            num_partitions: -1,
            replication_factor: -1,
            assignments: Vec::new(),
            configs: Vec::new(),
        }
    }

    /// With `num_partitions` and `replication_factor`.
    pub fn with_layout(mut self, num_partitions: i32, replication_factor: i16) -> Self {
        self.num_partitions = num_partitions;
        self.replication_factor = replication_factor;
        self
    }

    /// With a manual assignment, one replica list per partition in order (like
    /// `--replica-assignment 0:1,1:0,0:1`).
    pub fn with_assignment(mut self, partitions: Vec<Vec<BrokerId>>) -> Self {
        self.assignments = partitions
            .into_iter()
            .enumerate()
            .map(|(i, r)| (i as i32, r))
            .collect();
        self
    }

    /// With one config override.
    pub fn with_config(mut self, key: &str, value: &str) -> Self {
        self.configs
            .push((key.to_string(), Some(value.to_string())));
        self
    }
}

/// A CreateTopics request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreateTopicsRequest {
    /// Topics.
    pub topics: Vec<CreatableTopic>,
    /// Validate only: answer as if created, produce no records.
    pub validate_only: bool,
}

/// A created (or validated) topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedTopic {
    /// The new topic id (for `validate_only`, the id it would have had).
    pub topic_id: Uuid,
    /// Partitions.
    pub num_partitions: i32,
    /// Replication factor.
    pub replication_factor: i16,
    /// Replica assignment, by partition.
    pub assignment: Vec<Vec<BrokerId>>,
    /// The topic's effective configs.
    pub configs: Vec<DescribedConfig>,
}

/// The outcome for one topic of a CreateTopics request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateTopicResult {
    /// Topic name as requested.
    pub name: String,
    /// Created topic or the error.
    pub result: Result<CreatedTopic, ApiError>,
}

/// A topic named by name or id (DeleteTopics accepts both).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum TopicRef {
    /// By name.
    Name(String),
    /// By id.
    Id(Uuid),
}

/// The outcome for one topic of a DeleteTopics request: name and id of the deleted topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteTopicResult {
    /// The topic as requested.
    pub topic: TopicRef,
    /// Name and id, or the error.
    pub result: Result<(String, Uuid), ApiError>,
}

/// One topic of a CreatePartitions request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatePartitionsTopic {
    /// Topic name.
    pub name: String,
    /// New total partition count.
    pub count: i32,
    /// Replicas of each new partition, in order; `None` for automatic placement.
    pub assignments: Option<Vec<Vec<BrokerId>>>,
}

fn err(code: ResponseError, msg: impl Into<String>) -> ApiError {
    ApiError::new(code, msg)
}

/// Check a manual replica list: non-empty, no duplicates, registered brokers, and the same
/// size as the other partitions.
pub(crate) fn validate_manual_assignment(
    image: &MetadataImage,
    replicas: &[BrokerId],
    expected_rf: Option<usize>,
) -> Result<(), ApiError> {
    let bad = |m: String| err(ResponseError::InvalidReplicaAssignment, m);
    if replicas.is_empty() {
        return Err(bad(
            "The manual partition assignment includes an empty replica list.".into(),
        ));
    }
    let mut seen = BTreeSet::new();
    for &b in replicas {
        if !seen.insert(b) {
            return Err(bad(format!(
                "The manual partition assignment includes the broker {b} more than once."
            )));
        }
        if image.broker(b).is_none() {
            return Err(bad(format!(
                "The manual partition assignment includes broker {b}, but no such broker is registered."
            )));
        }
    }
    if let Some(rf) = expected_rf {
        if replicas.len() != rf {
            return Err(bad(format!(
                "The manual partition assignment includes a partition with {} replica(s), but this is inconsistent with previous partitions, which have {rf} replica(s).",
                replicas.len()
            )));
        }
    }
    Ok(())
}

/// A new partition's record: the ISR is the active replicas, the leader the first of them.
fn new_partition_record(
    image: &MetadataImage,
    topic_id: Uuid,
    partition: i32,
    replicas: &[BrokerId],
) -> Option<PartitionRecord> {
    let isr: Vec<BrokerId> = replicas
        .iter()
        .copied()
        .filter(|&b| image.is_broker_active(b))
        .collect();
    let leader = *isr.first()?;
    Some(PartitionRecord {
        topic_id,
        partition,
        replicas: replicas.to_vec(),
        isr,
        removing_replicas: Vec::new(),
        adding_replicas: Vec::new(),
        leader,
        leader_recovery_state: LeaderRecoveryState::Recovered,
        leader_epoch: 0,
        partition_epoch: 0,
    })
}

/// A new topic's name must be valid, unused, and not collide with an existing one once '.'
/// and '_' are unified.
fn check_new_topic_name(image: &MetadataImage, name: &str) -> Result<(), ApiError> {
    validate_topic_name(name).map_err(|m| err(ResponseError::InvalidTopicException, m))?;
    if image.topic(name).is_some() {
        return Err(err(
            ResponseError::TopicAlreadyExists,
            format!("Topic '{name}' already exists."),
        ));
    }
    if has_collision_chars(name) {
        let unified = unify_collision_chars(name);
        if let Some(existing) = image
            .topic_ids()
            .keys()
            .find(|n| unify_collision_chars(n) == unified)
        {
            return Err(err(
                ResponseError::InvalidTopicException,
                format!("Topic '{name}' collides with existing topic: {existing}"),
            ));
        }
    }
    Ok(())
}

/// The topic's config overrides; null values are refused.
fn topic_overrides(t: &CreatableTopic) -> Result<BTreeMap<String, String>, ApiError> {
    let nulls: Vec<&str> = t
        .configs
        .iter()
        .filter(|(_, v)| v.is_none())
        .map(|(k, _)| k.as_str())
        .collect();
    if !nulls.is_empty() {
        return Err(ApiError::invalid_config(format!(
            "Null value not supported for topic configs: {}",
            nulls.join(",")
        )));
    }
    Ok(t.configs
        .iter()
        .map(|(k, v)| (k.clone(), v.clone().unwrap_or_default()))
        .collect())
}

/// A manual assignment: partitions 0.. each listed once, with valid replicas of one size, and
/// neither a partition count nor a replication factor given.
fn manual_assignment(
    image: &MetadataImage,
    t: &CreatableTopic,
) -> Result<Vec<Vec<BrokerId>>, ApiError> {
    if t.replication_factor != -1 {
        return Err(ApiError::invalid_request(
            "A manual partition assignment was specified, but replication factor was not set to -1.",
        ));
    }
    if t.num_partitions != -1 {
        return Err(ApiError::invalid_request(
            "A manual partition assignment was specified, but numPartitions was not set to -1.",
        ));
    }
    let mut by_index: BTreeMap<i32, &Vec<BrokerId>> = BTreeMap::new();
    let mut rf = None;
    for (p, replicas) in &t.assignments {
        if by_index.insert(*p, replicas).is_some() {
            return Err(err(
                ResponseError::InvalidReplicaAssignment,
                format!("Found multiple manual partition assignments for partition {p}"),
            ));
        }
        validate_manual_assignment(image, replicas, rf)?;
        rf = Some(replicas.len());
    }
    if by_index.keys().copied().ne(0..by_index.len() as i32) {
        return Err(err(
            ResponseError::InvalidReplicaAssignment,
            "partitions should be a consecutive 0-based integer sequence",
        ));
    }
    Ok(by_index.into_values().cloned().collect())
}

/// Why partition `p` of `t` got no record: every replica is fenced or shutting down.
fn no_eligible_replicas(t: &CreatableTopic, p: usize, replicas: usize) -> ApiError {
    if t.assignments.is_empty() {
        err(
            ResponseError::InvalidReplicationFactor,
            format!("Unable to replicate the partition {replicas} time(s): All brokers are currently fenced or in controlled shutdown."),
        )
    } else {
        err(
            ResponseError::InvalidReplicaAssignment,
            format!("All brokers specified in the manual partition assignment for partition {p} are fenced or in controlled shutdown."),
        )
    }
}

impl Controller {
    fn placement_brokers(image: &MetadataImage) -> Vec<PlacementBroker> {
        image
            .active_brokers()
            .map(|b| PlacementBroker {
                id: b.id,
                rack: b.rack.clone(),
            })
            .collect()
    }

    fn placement_start(&mut self, brokers: usize) -> PlacementStart {
        let n = brokers.max(1);
        PlacementStart {
            start_index: self.rng.next_below(n),
            replica_shift: self.rng.next_below(n),
        }
    }

    /// Automatic placement of `count` partitions from index `first`.
    fn place(
        &mut self,
        image: &MetadataImage,
        count: usize,
        rf: usize,
        first: usize,
    ) -> Result<Vec<Vec<BrokerId>>, ApiError> {
        let brokers = Self::placement_brokers(image);
        let start = self.placement_start(brokers.len());
        assign_replicas(&brokers, count, rf, first, start).map_err(|e| {
            err(
                ResponseError::InvalidReplicationFactor,
                format!("Unable to replicate the partition {rf} time(s): {e}"),
            )
        })
    }

    /// CreateTopics. One result per requested topic, in request order.
    ///
    /// Errors per topic: `INVALID_REQUEST` (duplicate name in the request; manual assignment
    /// together with a partition count or replication factor), `INVALID_TOPIC_EXCEPTION` (bad
    /// name, or collides with an existing name through `.`/`_`), `TOPIC_ALREADY_EXISTS`,
    /// `INVALID_PARTITIONS`, `INVALID_REPLICATION_FACTOR`, `INVALID_REPLICA_ASSIGNMENT`,
    /// `INVALID_CONFIG`, `POLICY_VIOLATION` (more than [`MAX_RECORDS_PER_USER_OP`] records).
    pub fn create_topics(
        &mut self,
        request: &CreateTopicsRequest,
    ) -> ControllerResult<Vec<CreateTopicResult>> {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for t in &request.topics {
            *counts.entry(t.name.as_str()).or_default() += 1;
        }
        let mut staging = Staging::new(&self.image);
        let mut results = Vec::with_capacity(request.topics.len());
        for t in &request.topics {
            let result = if counts[t.name.as_str()] > 1 {
                Err(ApiError::invalid_request("Duplicate topic name."))
            } else {
                self.create_topic(&mut staging, t)
            };
            if let Err(e) = &result {
                tracing::info!(topic = %t.name, code = ?e.code, message = %e.message, "CreateTopics rejected a topic");
            }
            results.push(CreateTopicResult {
                name: t.name.clone(),
                result,
            });
            if staging.records.len() > MAX_RECORDS_PER_USER_OP {
                let e = err(
                    ResponseError::PolicyViolation,
                    "Unable to perform excessively large batch operation.",
                );
                let results = request
                    .topics
                    .iter()
                    .map(|t| CreateTopicResult {
                        name: t.name.clone(),
                        result: Err(e.clone()),
                    })
                    .collect();
                return ControllerResult::new(Vec::new(), results);
            }
        }
        let records = if request.validate_only {
            Vec::new()
        } else {
            staging.records
        };
        ControllerResult::new(records, results)
    }

    fn create_topic(
        &mut self,
        staging: &mut Staging,
        t: &CreatableTopic,
    ) -> Result<CreatedTopic, ApiError> {
        let image = &staging.image;
        check_new_topic_name(image, &t.name)?;
        let overrides = topic_overrides(t)?;
        let view = BrokerConfigView::new(image, &self.static_config, self.node_id);
        validate_topic_overrides(&overrides, &view)
            .map_err(|e| ApiError::invalid_config(e.to_string()))?;
        let assignment: Vec<Vec<BrokerId>> = if !t.assignments.is_empty() {
            manual_assignment(image, t)?
        } else {
            self.default_assignment(image, t)?
        };
        let topic_id = loop {
            let id = self.rng.next_topic_id();
            if staging.image.topic_by_id(id).is_none() {
                break id;
            }
        };
        let mut partitions = Vec::with_capacity(assignment.len());
        for (p, replicas) in assignment.iter().enumerate() {
            let rec = new_partition_record(&staging.image, topic_id, p as i32, replicas)
                .ok_or_else(|| no_eligible_replicas(t, p, replicas.len()))?;
            partitions.push(rec);
        }
        // Topic, then its configs, then its partitions (Kafka's order).
        staging.push(MetadataRecord::Topic(TopicRecord {
            name: t.name.clone(),
            topic_id,
        }))?;
        for (k, v) in &overrides {
            staging.push(MetadataRecord::Config(ConfigRecord {
                resource: ConfigResource::topic(t.name.clone()),
                name: k.clone(),
                value: Some(v.clone()),
            }))?;
        }
        for rec in partitions {
            staging.push(MetadataRecord::Partition(rec))?;
        }
        tracing::info!(topic = %t.name, %topic_id, partitions = assignment.len(), "creating topic");
        let configs = crate::config::describe_configs(
            &staging.image,
            &self.static_config,
            self.node_id,
            &ConfigResource::topic(t.name.clone()),
            None,
        )?;
        Ok(CreatedTopic {
            topic_id,
            num_partitions: assignment.len() as i32,
            replication_factor: assignment.first().map_or(0, |r| r.len() as i16),
            assignment,
            configs,
        })
    }

    /// The placement for a topic created with a partition count and replication factor (or
    /// the broker defaults, for -1).
    fn default_assignment(
        &mut self,
        image: &MetadataImage,
        t: &CreatableTopic,
    ) -> Result<Vec<Vec<BrokerId>>, ApiError> {
        if t.replication_factor < -1 || t.replication_factor == 0 {
            return Err(err(
                ResponseError::InvalidReplicationFactor,
                "Replication factor must be larger than 0, or -1 to use the default value.",
            ));
        }
        if t.num_partitions < -1 || t.num_partitions == 0 {
            return Err(err(
                ResponseError::InvalidPartitions,
                "Number of partitions was set to an invalid non-positive value.",
            ));
        }
        let view = BrokerConfigView::new(image, &self.static_config, self.node_id);
        let num_partitions = if t.num_partitions == -1 {
            view.i64("num.partitions")
        } else {
            i64::from(t.num_partitions)
        };
        let rf = if t.replication_factor == -1 {
            view.i64("default.replication.factor")
        } else {
            i64::from(t.replication_factor)
        };
        if num_partitions as usize > MAX_RECORDS_PER_USER_OP {
            return Err(err(
                ResponseError::PolicyViolation,
                "Unable to perform excessively large batch operation.",
            ));
        }
        let image = image.clone();
        self.place(&image, num_partitions as usize, rf as usize, 0)
    }

    /// DeleteTopics by name or id. Errors per topic: `UNKNOWN_TOPIC_OR_PARTITION` (unknown
    /// name), `UNKNOWN_TOPIC_ID`, `INVALID_REQUEST` (the same topic twice),
    /// `TOPIC_DELETION_DISABLED` (`delete.topic.enable=false`).
    pub fn delete_topics(
        &mut self,
        topics: &[TopicRef],
    ) -> ControllerResult<Vec<DeleteTopicResult>> {
        let enabled = self.config_view().bool("delete.topic.enable");
        let mut seen: BTreeSet<Uuid> = BTreeSet::new();
        let mut counts: BTreeMap<&TopicRef, usize> = BTreeMap::new();
        for t in topics {
            *counts.entry(t).or_default() += 1;
        }
        let mut records = Vec::new();
        let mut results = Vec::with_capacity(topics.len());
        for t in topics {
            let result = (|| {
                if counts[t] > 1 {
                    return Err(ApiError::invalid_request(match t {
                        TopicRef::Name(_) => "Duplicate topic name.",
                        TopicRef::Id(_) => "Duplicate topic id.",
                    }));
                }
                let topic = match t {
                    TopicRef::Name(n) => self.image.topic(n).ok_or_else(|| {
                        ApiError::unknown_topic_or_partition(format!("Topic {n} does not exist."))
                    })?,
                    TopicRef::Id(id) => self.image.topic_by_id(*id).ok_or_else(|| {
                        err(
                            ResponseError::UnknownTopicId,
                            format!("Topic id {id} does not exist."),
                        )
                    })?,
                };
                if !seen.insert(topic.id) {
                    return Err(ApiError::invalid_request(
                        "The provided topic name maps to an ID that was already supplied.",
                    ));
                }
                if !enabled {
                    return Err(err(
                        ResponseError::TopicDeletionDisabled,
                        "Topic deletion is disabled.",
                    ));
                }
                Ok((topic.name.clone(), topic.id))
            })();
            if let Ok((name, id)) = &result {
                tracing::info!(topic = %name, topic_id = %id, "deleting topic");
                records.push(MetadataRecord::RemoveTopic(RemoveTopicRecord {
                    topic_id: *id,
                }));
            }
            results.push(DeleteTopicResult {
                topic: t.clone(),
                result,
            });
        }
        ControllerResult::new(records, results)
    }

    /// CreatePartitions: grow topics to `count` partitions. Errors per topic:
    /// `INVALID_REQUEST` (duplicate topic), `UNKNOWN_TOPIC_OR_PARTITION`, `INVALID_PARTITIONS`
    /// (count not above the current one), `INVALID_REPLICA_ASSIGNMENT` (wrong number or shape of
    /// assignments, unknown brokers), `INVALID_REPLICATION_FACTOR` (not enough live brokers),
    /// `POLICY_VIOLATION` (too many records).
    pub fn create_partitions(
        &mut self,
        topics: &[CreatePartitionsTopic],
        validate_only: bool,
    ) -> ControllerResult<Vec<(String, Result<(), ApiError>)>> {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for t in topics {
            *counts.entry(t.name.as_str()).or_default() += 1;
        }
        let mut staging = Staging::new(&self.image);
        let mut results = Vec::with_capacity(topics.len());
        for t in topics {
            let result = if counts[t.name.as_str()] > 1 {
                Err(ApiError::invalid_request("Duplicate topic name."))
            } else {
                self.create_partitions_for(&mut staging, t)
            };
            if let Err(e) = &result {
                tracing::info!(topic = %t.name, code = ?e.code, message = %e.message, "CreatePartitions rejected a topic");
            }
            results.push((t.name.clone(), result));
        }
        if staging.records.len() > MAX_RECORDS_PER_USER_OP {
            let e = err(
                ResponseError::PolicyViolation,
                "Unable to perform excessively large batch operation.",
            );
            let results = topics
                .iter()
                .map(|t| (t.name.clone(), Err(e.clone())))
                .collect();
            return ControllerResult::new(Vec::new(), results);
        }
        let records = if validate_only {
            Vec::new()
        } else {
            staging.records
        };
        ControllerResult::new(records, results)
    }

    fn create_partitions_for(
        &mut self,
        staging: &mut Staging,
        t: &CreatePartitionsTopic,
    ) -> Result<(), ApiError> {
        let topic = staging.image.topic(&t.name).ok_or_else(|| {
            ApiError::unknown_topic_or_partition(format!("Topic {} does not exist.", t.name))
        })?;
        let topic_id = topic.id;
        let current = topic.partitions.len() as i32;
        if t.count < current {
            return Err(err(
                ResponseError::InvalidPartitions,
                format!(
                    "The topic {} currently has {current} partition(s); {} would not be an increase.",
                    t.name, t.count
                ),
            ));
        }
        if t.count == current {
            return Err(err(
                ResponseError::InvalidPartitions,
                format!("Topic already has {current} partition(s)."),
            ));
        }
        let additional = (t.count - current) as usize;
        if additional > MAX_RECORDS_PER_USER_OP {
            return Err(err(
                ResponseError::PolicyViolation,
                "Unable to perform excessively large batch operation.",
            ));
        }
        let rf = topic
            .partitions
            .values()
            .next()
            .map_or(1, |p| p.target_replicas().len());
        let new_assignments = match &t.assignments {
            Some(a) => {
                if a.len() != additional {
                    return Err(err(
                        ResponseError::InvalidReplicaAssignment,
                        format!(
                            "Attempted to add {additional} additional partition(s), but only {} assignment(s) were specified.",
                            a.len()
                        ),
                    ));
                }
                for replicas in a {
                    validate_manual_assignment(&staging.image, replicas, Some(rf))?;
                }
                a.clone()
            }
            None => {
                let image = staging.image.clone();
                self.place(&image, additional, rf, current as usize)?
            }
        };
        let mut recs = Vec::with_capacity(additional);
        for (i, replicas) in new_assignments.iter().enumerate() {
            let p = current + i as i32;
            let rec = new_partition_record(&staging.image, topic_id, p, replicas).ok_or_else(
                || {
                    err(
                        ResponseError::InvalidReplicaAssignment,
                        format!("All brokers specified in the manual partition assignment for partition {p} are fenced or in controlled shutdown."),
                    )
                },
            )?;
            recs.push(rec);
        }
        for rec in recs {
            staging.push(MetadataRecord::Partition(rec))?;
        }
        tracing::info!(topic = %t.name, from = current, to = t.count, "creating partitions");
        Ok(())
    }
}
