//! TxnOffsetCommit (KIP-98, with KIP-447's member and generation checks) and the end of a
//! transaction. A transaction's offsets are appended in a batch that is transactional for its
//! producer; once durable they are pending for that producer, invisible to OffsetFetch, until
//! the transaction's marker: a commit marker makes them visible unless a plain commit of the
//! same partition was appended after them, an abort marker drops them.

use std::collections::hash_map::Entry;
use std::collections::BTreeSet;

use super::join::validate_member_generation;
use super::offsets::{commit_batch, CommitBatch, CommitSpec};
use super::state::{Cx, GroupCoordinator, PendingAppend, TxnCommit};
use crate::api::*;
use crate::effect::{Effect, TxnProducer};
use crate::group::{Group, GroupState};

/// Kafka's offset-commit validation of a classic group for a transactional commit: without a
/// member id, generation or instance id any live group accepts it (a producer may commit for a
/// group nobody consumes in, e.g. a Kafka Streams standby or a simple consumer), and so does an
/// Empty group without a generation; a member's commit must match its generation;
/// CompletingRebalance does not refuse it.
fn validate_txn_offset_commit(
    g: &Group,
    req: &TxnOffsetCommitRequest,
) -> Result<(), ResponseError> {
    if g.is(GroupState::Dead) {
        return Err(ResponseError::CoordinatorNotAvailable);
    }
    if req.generation_id < 0 && g.is(GroupState::Empty) {
        return Ok(());
    }
    if req.generation_id >= 0 || !req.member_id.is_empty() || req.group_instance_id.is_some() {
        validate_member_generation(
            g,
            &req.member_id,
            req.group_instance_id.as_deref(),
            req.generation_id,
        )?;
    }
    Ok(())
}

fn txn_error_response(
    req: &TxnOffsetCommitRequest,
    error: ResponseError,
) -> TxnOffsetCommitResponse {
    TxnOffsetCommitResponse {
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

impl GroupCoordinator {
    pub(super) fn txn_offset_commit(
        &mut self,
        now: i64,
        request_id: RequestId,
        req: TxnOffsetCommitRequest,
        out: &mut Vec<Effect>,
    ) {
        let reply = |out: &mut Vec<Effect>, response| {
            out.push(Effect::Respond {
                request_id,
                response: Response::TxnOffsetCommit(response),
            })
        };
        if let Err(error) = self.admit_txn_commit(now, &req) {
            return reply(out, txn_error_response(&req, error));
        }
        let producer = TxnProducer {
            producer_id: req.producer_id,
            producer_epoch: req.producer_epoch,
        };
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
                transactional: Some(producer),
            },
            self.config.offset_metadata_max_bytes,
        );
        let response = TxnOffsetCommitResponse {
            topics: response.topics,
        };
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
            PendingAppend::TxnOffsetCommit(TxnCommit {
                request_id,
                group_id: req.group_id,
                producer,
                offsets,
                response,
                decided: None,
            }),
        );
    }

    /// Whether the group takes this transactional commit: an unknown group is created as a
    /// "simple" one, unless the commit names a generation (a member's commit for a group this
    /// coordinator does not know: ILLEGAL_GENERATION).
    fn admit_txn_commit(
        &mut self,
        now: i64,
        req: &TxnOffsetCommitRequest,
    ) -> Result<(), ResponseError> {
        // Unlike OffsetCommit, TxnOffsetCommit never accepted the empty group id.
        if req.group_id.is_empty() {
            return Err(ResponseError::InvalidGroupId);
        }
        if let Some(checked) = self.validate_consumer_txn_commit(req) {
            return checked;
        }
        let g = match self.groups.entry(req.group_id.clone()) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(_) if req.generation_id >= 0 => {
                return Err(ResponseError::IllegalGeneration)
            }
            Entry::Vacant(e) => {
                tracing::info!(group = %req.group_id, transactional_id = %req.transactional_id, "creating a simple group for a transactional offset commit");
                e.insert(Group::new(req.group_id.clone(), now))
            }
        };
        validate_txn_offset_commit(g, req)
    }

    /// A consumer group's checks of a transactional commit (`None`: not a consumer group), as
    /// Kafka's: a commit without member id, generation and instance id, or one to an empty
    /// group without a generation, is taken; a member commits at its current member epoch (the
    /// generation of its consumer's group metadata), STALE_MEMBER_EPOCH otherwise
    /// (ILLEGAL_GENERATION for a classic member).
    fn validate_consumer_txn_commit(
        &self,
        req: &TxnOffsetCommitRequest,
    ) -> Option<Result<(), ResponseError>> {
        let g = self.consumer_groups.get(&req.group_id)?;
        let anonymous =
            req.generation_id < 0 && req.member_id.is_empty() && req.group_instance_id.is_none();
        if anonymous || (req.generation_id < 0 && g.members.is_empty()) {
            return Some(Ok(()));
        }
        Some(match g.members.get(&req.member_id) {
            None => Err(ResponseError::UnknownMemberId),
            // A classic member (a migration under way) is checked as in a classic group.
            Some(m) if m.member_epoch != req.generation_id && m.classic.is_some() => {
                Err(ResponseError::IllegalGeneration)
            }
            Some(m) if m.member_epoch != req.generation_id => Err(ResponseError::StaleMemberEpoch),
            Some(_) => Ok(()),
        })
    }

    pub(super) fn txn_offset_commit_appended(
        &mut self,
        commit: TxnCommit,
        result: Result<(), ResponseError>,
        out: &mut Vec<Effect>,
    ) {
        let TxnCommit {
            request_id,
            group_id,
            producer,
            offsets,
            mut response,
            decided,
        } = commit;
        let group_id = group_id.as_str();
        match result {
            Ok(()) => {
                for (topic, partition, offset) in offsets {
                    match decided {
                        // Planted (simulation only): visible before the marker.
                        None if self.config.txn_offsets_early_planted() => {
                            self.offsets.put(group_id, topic, partition, offset)
                        }
                        None => self.offsets.put_pending(
                            producer.producer_id,
                            group_id,
                            topic,
                            partition,
                            offset,
                        ),
                        // The marker follows these records in the log, and nothing was
                        // appended between them, so they are the newest.
                        Some(true) => self.offsets.put(group_id, topic, partition, offset),
                        Some(false) => {}
                    }
                }
            }
            Err(error) => {
                tracing::warn!(group = %group_id, producer_id = producer.producer_id, %error, "failed to persist transactional offset commit");
                for p in response.topics.iter_mut().flat_map(|t| &mut t.partitions) {
                    p.error = Some(error);
                }
            }
        }
        out.push(Effect::Respond {
            request_id,
            response: Response::TxnOffsetCommit(response),
        });
    }

    /// The marker of `producer_id`'s transaction is in the log: its pending offsets, in every
    /// group of this partition, become visible (commit) or go (abort). Offsets still in flight
    /// get the same decision when they land.
    pub(super) fn apply_txn_marker(&mut self, producer_id: i64, commit: bool) {
        let applied = self.offsets.complete(producer_id, commit);
        let mut in_flight = 0;
        for pending in self.appends.pending.values_mut() {
            if let PendingAppend::TxnOffsetCommit(c) = pending {
                if c.producer.producer_id == producer_id && c.decided.is_none() {
                    c.decided = Some(commit);
                    in_flight += 1;
                }
            }
        }
        tracing::debug!(
            producer_id,
            commit,
            applied,
            in_flight,
            "transaction marker"
        );
    }

    /// Partitions of a group with a transactional commit still being written. A `BTreeSet`,
    /// not a `HashSet`: every OffsetFetch builds it, and each new `HashSet` draws the thread's
    /// next hash keys, which shifts the iteration order of every hash map created after it (the
    /// simulator's schedules depend on that order).
    pub(super) fn txn_commits_in_flight(&self, group: &str) -> BTreeSet<(String, i32)> {
        let mut out = BTreeSet::new();
        for pending in self.appends.pending.values() {
            if let PendingAppend::TxnOffsetCommit(c) = pending {
                if c.group_id == group {
                    out.extend(c.offsets.iter().map(|(t, p, _)| (t.clone(), *p)));
                }
            }
        }
        out
    }
}

#[cfg(test)]
#[path = "txn_offsets_tests.rs"]
mod tests;
