//! Committed offsets: OffsetCommit (with Kafka's generation checks and simple commits) and
//! OffsetFetch. Offsets become visible once their records are durable.

use super::join::validate_member_generation;
use super::offset_store::CommittedOffset;
use super::state::{Cx, GroupCoordinator, PendingAppend};
use crate::api::*;
use crate::effect::{Effect, Record, TxnProducer};
use crate::group::{Group, GroupState};
use crate::records::{self, OffsetCommitValue, RecordKey};

pub(crate) fn offset_commit_record(
    group: &str,
    topic: &str,
    partition: i32,
    offset: &CommittedOffset,
) -> Record {
    Record {
        transactional: None,
        key: records::encode_key(&RecordKey::OffsetCommit {
            group: group.to_string(),
            topic: topic.to_string(),
            partition,
        }),
        value: Some(records::encode_offset_commit_value(&OffsetCommitValue {
            offset: offset.offset,
            leader_epoch: offset.leader_epoch,
            metadata: offset.metadata.clone(),
            commit_timestamp: offset.commit_timestamp_ms,
            expire_timestamp: -1,
        })),
    }
}

pub(crate) fn offset_tombstone(group: &str, topic: &str, partition: i32) -> Record {
    Record {
        transactional: None,
        key: records::encode_key(&RecordKey::OffsetCommit {
            group: group.to_string(),
            topic: topic.to_string(),
            partition,
        }),
        value: None,
    }
}

/// The same error for every partition of the request.
fn commit_error_response(req: &OffsetCommitRequest, error: ResponseError) -> OffsetCommitResponse {
    OffsetCommitResponse {
        topics: req
            .topics
            .iter()
            .map(|t| OffsetCommitResponseTopic {
                name: t.name.clone(),
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| OffsetCommitResponsePartition {
                        partition_index: p.partition_index,
                        error: Some(error),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// Kafka's `validateOffsetCommit` for a classic group.
fn validate_offset_commit(g: &Group, req: &OffsetCommitRequest) -> Result<(), ResponseError> {
    if g.is(GroupState::Dead) {
        return Err(ResponseError::CoordinatorNotAvailable);
    }
    if req.generation_id < 0 && g.is(GroupState::Empty) {
        // Admin client or a consumer without group management: allowed while nobody is a member.
        return Ok(());
    }
    if req.generation_id >= 0 || !req.member_id.is_empty() || req.group_instance_id.is_some() {
        validate_member_generation(
            g,
            &req.member_id,
            req.group_instance_id.as_deref(),
            req.generation_id,
        )?;
    } else if !g.is(GroupState::Empty) {
        return Err(ResponseError::UnknownMemberId);
    }
    if g.is(GroupState::CompletingRebalance) {
        // The member has the new generation but not its assignment yet: let it finish the sync.
        return Err(ResponseError::RebalanceInProgress);
    }
    Ok(())
}

/// Java's `String.length()`: UTF-16 code units, which is what `offset.metadata.max.bytes` bounds.
fn java_length(s: &str) -> usize {
    s.encode_utf16().count()
}

/// One OffsetCommit's (or TxnOffsetCommit's) outcome before it is durable: the per-partition
/// answer, the records to append and the offsets they commit.
pub(crate) struct CommitBatch {
    pub response: OffsetCommitResponse,
    pub records: Vec<Record>,
    pub offsets: Vec<(String, i32, CommittedOffset)>,
}

/// What a commit writes: whose offsets, by whom (for the log), and whether the batch is
/// transactional.
pub(crate) struct CommitSpec<'a> {
    pub group_id: &'a str,
    pub member_id: &'a str,
    pub topics: &'a [OffsetCommitTopic],
    pub transactional: Option<TxnProducer>,
}

/// Every partition with metadata within `metadata_max_bytes` is committed at `now`; the others
/// fail with `OFFSET_METADATA_TOO_LARGE`.
pub(crate) fn commit_batch(
    now: i64,
    spec: CommitSpec<'_>,
    metadata_max_bytes: usize,
) -> CommitBatch {
    let mut response = OffsetCommitResponse::default();
    let mut records = Vec::new();
    let mut offsets = Vec::new();
    for topic in spec.topics {
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let metadata = p.committed_metadata.clone().unwrap_or_default();
            let error = if java_length(&metadata) > metadata_max_bytes {
                Some(ResponseError::OffsetMetadataTooLarge)
            } else {
                let offset = CommittedOffset {
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata,
                    commit_timestamp_ms: now,
                };
                tracing::debug!(group = %spec.group_id, topic = %topic.name, partition = p.partition_index, offset = p.committed_offset, epoch = p.committed_leader_epoch, member = %spec.member_id, transactional = spec.transactional.is_some(), "committing offset");
                let mut record =
                    offset_commit_record(spec.group_id, &topic.name, p.partition_index, &offset);
                record.transactional = spec.transactional;
                records.push(record);
                offsets.push((topic.name.clone(), p.partition_index, offset));
                None
            };
            partitions.push(OffsetCommitResponsePartition {
                partition_index: p.partition_index,
                error,
            });
        }
        response.topics.push(OffsetCommitResponseTopic {
            name: topic.name.clone(),
            partitions,
        });
    }
    CommitBatch {
        response,
        records,
        offsets,
    }
}

impl GroupCoordinator {
    pub(super) fn offset_commit(
        &mut self,
        now: i64,
        request_id: RequestId,
        ctx: &RequestContext,
        req: OffsetCommitRequest,
        out: &mut Vec<Effect>,
    ) {
        let reply = |out: &mut Vec<Effect>, response| {
            out.push(Effect::Respond {
                request_id,
                response: Response::OffsetCommit(response),
            })
        };
        let checked = match self.validate_consumer_commit(ctx, &req) {
            Some(checked) => checked,
            None => self.validate_classic_commit(now, ctx, &req, out),
        };
        if let Err(error) = checked {
            return reply(out, commit_error_response(&req, error));
        }
        let CommitBatch {
            response,
            records,
            offsets,
        } = commit_batch(
            now,
            CommitSpec {
                group_id: &req.group_id,
                member_id: &req.member_id,
                topics: &req.topics,
                transactional: None,
            },
            self.config.offset_metadata_max_bytes,
        );
        if records.is_empty() {
            return reply(out, response);
        }
        let mut cx = Cx {
            now,
            config: &self.config,
            timers: &mut self.timers,
            appends: &mut self.appends,
            out,
        };
        cx.append(
            records,
            PendingAppend::OffsetCommit {
                request_id,
                group_id: req.group_id.clone(),
                offsets,
                response,
            },
        );
    }

    /// A classic (or simple) group's checks of a commit; a commit of a member also keeps its
    /// session alive, as in Kafka's classic protocol.
    fn validate_classic_commit(
        &mut self,
        now: i64,
        ctx: &RequestContext,
        req: &OffsetCommitRequest,
        out: &mut Vec<Effect>,
    ) -> Result<(), ResponseError> {
        self.commit_group(now, ctx, req)?;
        let g = self
            .groups
            .get(&req.group_id)
            .expect("present or just created");
        validate_offset_commit(g, req)?;
        if g.is(GroupState::Stable) || g.is(GroupState::PreparingRebalance) {
            if let Some(m) = g.member(&req.member_id) {
                let session = m.session_timeout_ms;
                let mut cx = Cx {
                    now,
                    config: &self.config,
                    timers: &mut self.timers,
                    appends: &mut self.appends,
                    out,
                };
                cx.schedule_heartbeat(&req.group_id, &req.member_id, session);
            }
        }
        Ok(())
    }

    /// The group a commit goes to: an existing one, or (for a commit outside any generation)
    /// a new simple group. Kafka accepts the empty group id here (only a null one, impossible
    /// on the wire in versions that matter, is INVALID_GROUP_ID).
    fn commit_group(
        &mut self,
        now: i64,
        ctx: &RequestContext,
        req: &OffsetCommitRequest,
    ) -> Result<(), ResponseError> {
        if self.groups.contains_key(&req.group_id) {
            return Ok(());
        }
        if req.generation_id >= 0 {
            return Err(if ctx.api_version >= 9 {
                ResponseError::GroupIdNotFound
            } else {
                ResponseError::IllegalGeneration
            });
        }
        tracing::info!(group = %req.group_id, "creating a simple group for a manual offset commit");
        self.groups
            .insert(req.group_id.clone(), Group::new(req.group_id.clone(), now));
        Ok(())
    }

    pub(super) fn offset_commit_appended(
        &mut self,
        request_id: RequestId,
        group_id: &str,
        offsets: Vec<(String, i32, CommittedOffset)>,
        mut response: OffsetCommitResponse,
        result: Result<(), ResponseError>,
        out: &mut Vec<Effect>,
    ) {
        match result {
            Ok(()) => {
                for (topic, partition, offset) in offsets {
                    self.offsets.put(group_id, topic, partition, offset);
                }
            }
            Err(error) => {
                tracing::warn!(group = %group_id, %error, "failed to persist offset commit");
                for t in &mut response.topics {
                    for p in &mut t.partitions {
                        p.error = Some(error);
                    }
                }
            }
        }
        out.push(Effect::Respond {
            request_id,
            response: Response::OffsetCommit(response),
        });
    }

    pub(super) fn offset_fetch(&self, req: &OffsetFetchRequest) -> OffsetFetchResponse {
        // Kafka answers an unknown (or Dead) group as a group without offsets, not with an error.
        let known = self
            .groups
            .get(&req.group_id)
            .is_some_and(|g| !g.is(GroupState::Dead))
            || self.consumer_groups.contains_key(&req.group_id);
        let in_flight = self.txn_commits_in_flight(&req.group_id);
        // require_stable (v7+): an offset an open transaction may still change is not given out.
        let unstable = |topic: &str, partition: i32| {
            req.require_stable
                && (self.offsets.has_pending(&req.group_id, topic, partition)
                    || in_flight.contains(&(topic.to_string(), partition)))
        };
        let lookup = |topic: &str, partition: i32| -> OffsetFetchResponsePartition {
            let error = unstable(topic, partition).then_some(ResponseError::UnstableOffsetCommit);
            match self
                .offsets
                .get(&req.group_id, topic, partition)
                .filter(|_| known && error.is_none())
            {
                Some(o) => OffsetFetchResponsePartition {
                    partition_index: partition,
                    // Planted (simulation only): taken for the last record consumed.
                    committed_offset: o.offset + i64::from(self.config.fetch_past_commit_planted()),
                    committed_leader_epoch: o.leader_epoch,
                    metadata: o.metadata.clone(),
                    error: None,
                },
                None => OffsetFetchResponsePartition {
                    partition_index: partition,
                    committed_offset: -1,
                    committed_leader_epoch: -1,
                    metadata: String::new(),
                    error,
                },
            }
        };
        let topics = match &req.topics {
            Some(topics) => topics
                .iter()
                .map(|t| OffsetFetchResponseTopic {
                    name: t.name.clone(),
                    partitions: t
                        .partition_indexes
                        .iter()
                        .map(|p| lookup(&t.name, *p))
                        .collect(),
                })
                .collect(),
            None if known => self.fetch_all(&req.group_id, &unstable),
            None => Vec::new(),
        };
        OffsetFetchResponse {
            group_id: req.group_id.clone(),
            error: None,
            topics,
        }
    }

    /// Every visible offset of a group; a partition `unstable` names is answered with
    /// UNSTABLE_OFFSET_COMMIT instead.
    fn fetch_all(
        &self,
        group_id: &str,
        unstable: &dyn Fn(&str, i32) -> bool,
    ) -> Vec<OffsetFetchResponseTopic> {
        let mut topics: Vec<OffsetFetchResponseTopic> = Vec::new();
        for (topic, partition, o) in self.offsets.all(group_id) {
            if topics.last().is_none_or(|t| t.name != topic) {
                topics.push(OffsetFetchResponseTopic {
                    name: topic.clone(),
                    partitions: Vec::new(),
                });
            }
            let stable = !unstable(&topic, partition);
            let last = topics.last_mut().expect("pushed above");
            last.partitions.push(OffsetFetchResponsePartition {
                partition_index: partition,
                committed_offset: if stable { o.offset } else { -1 },
                committed_leader_epoch: if stable { o.leader_epoch } else { -1 },
                metadata: if stable { o.metadata } else { String::new() },
                error: (!stable).then_some(ResponseError::UnstableOffsetCommit),
            });
        }
        topics
    }
}
