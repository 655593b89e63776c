//! Joining the group: revocation before JoinGroup (eager), JoinGroup / SyncGroup with the
//! membership core deciding each next step, the leader's assignment, and installing an
//! assignment with the listener calls (cooperative: revoke what moved, then rejoin).

use std::collections::{BTreeMap, BTreeSet};

use gregor_assign::protocol::{
    decode_assignment, encode_subscription, flatten, group_by_topic, Subscription,
    SUBSCRIPTION_VERSION,
};
use gregor_assign::AssignmentInfo;
use kafka_protocol::messages::{JoinGroupRequest, SyncGroupRequest};

use super::group_wire::{self, JoinedMember, MemberIdentityRef};
use super::leader;
use super::listener::RebalanceKind;
use super::membership::{assignment_change, revoke_before_join, JoinStep};
use super::shared::{lock, PartitionState};
use super::state::Consumer;
use crate::client::Target;
use crate::error::{Error, KafkaCode, KafkaError, Result};
use crate::types::TopicPartition;

impl Consumer {
    /// Joins (or rejoins) until the member is in a stable generation, running the listener.
    pub(super) async fn ensure_active_group(&mut self) -> Result<()> {
        if self.group_protocol == super::config::GroupProtocol::Consumer {
            return self.ensure_active_group_848().await;
        }
        loop {
            let (lost, needs_join, fatal) = {
                let mut s = lock(&self.shared);
                (s.m.take_lost(), s.m.needs_join(), s.m.fatal())
            };
            if let Some(code) = fatal {
                return Err(Error::kafka(
                    format!("group '{}'", self.group_id),
                    KafkaError::new(code, None),
                ));
            }
            if lost && !self.assigned.is_empty() {
                let all: Vec<TopicPartition> = self.assigned.keys().cloned().collect();
                self.call_listener(RebalanceKind::Lost, &all);
                self.assigned.clear();
                self.drop_all_buffered();
            }
            if !needs_join {
                return Ok(());
            }
            self.resolve_subscription().await?;
            let owned: BTreeSet<TopicPartition> = self.assigned.keys().cloned().collect();
            let revoke = revoke_before_join(self.protocol, &owned, &self.subscribed);
            if !revoke.is_empty() {
                self.commit_before_revoke(&revoke).await;
                self.call_listener(RebalanceKind::Revoked, &revoke);
                for tp in &revoke {
                    self.assigned.remove(tp);
                    self.drop_buffered(tp);
                }
            }
            self.join_once().await?;
        }
    }

    /// With auto-commit, the positions of partitions about to be revoked are committed first
    /// so their next owner resumes there. Best effort, as in Kafka.
    pub(super) async fn commit_before_revoke(&mut self, revoke: &[TopicPartition]) {
        if !self.settings.enable_auto_commit {
            return;
        }
        let offsets: BTreeMap<TopicPartition, i64> = revoke
            .iter()
            .filter_map(|tp| {
                self.assigned
                    .get(tp)
                    .and_then(|s| s.position)
                    .map(|p| (tp.clone(), p))
            })
            .collect();
        if let Err(e) = self.commit_sync(Some(offsets)).await {
            tracing::warn!(group = %self.group_id, error = %e, "commit before revoking failed");
        }
    }

    fn subscription_bytes(&self, generation: i32) -> Result<Vec<(String, bytes::Bytes)>> {
        let topics: Vec<String> = self.subscribed.iter().cloned().collect();
        let owned = group_by_topic(
            self.assigned
                .keys()
                .map(|tp| (tp.topic.as_str(), tp.partition)),
        );
        self.assignors
            .iter()
            .map(|a| {
                let sub = Subscription {
                    topics: topics.clone(),
                    user_data: a.subscription_user_data(&topics),
                    owned_partitions: owned.clone(),
                    generation_id: generation,
                    rack_id: self.rack.clone(),
                };
                encode_subscription(&sub, SUBSCRIPTION_VERSION)
                    .map(|b| (a.name().to_string(), b))
                    .map_err(|e| Error::InvalidArgument(e.to_string()))
            })
            .collect()
    }

    /// One JoinGroup (+ SyncGroup) attempt; the caller loops.
    async fn join_once(&mut self) -> Result<()> {
        let (member_id, generation, reason) = {
            let mut s = lock(&self.shared);
            let reason = s.m.rejoin_reason().map(str::to_string);
            s.m.join_sent();
            (s.m.member_id.clone(), s.m.generation, reason)
        };
        let protocols = self.subscription_bytes(generation)?;
        let target = Target::Coordinator(self.group_id.clone());
        let who = MemberIdentityRef {
            group_id: &self.group_id,
            member_id: &member_id,
            group_instance_id: self.instance_id.as_deref(),
        };
        let session = i32::try_from(self.settings.session_timeout_ms).unwrap_or(i32::MAX);
        let rebalance = i32::try_from(self.settings.max_poll_interval_ms).unwrap_or(i32::MAX);
        tracing::debug!(group = %self.group_id, member = %member_id, generation, reason = ?reason, "joining");
        let sent = self
            .group_client
            .send_within::<JoinGroupRequest, _>(&target, self.settings.join_group_timeout, |v| {
                Ok(group_wire::join_group_request(
                    &who,
                    session,
                    rebalance,
                    &protocols,
                    reason.as_deref(),
                    v,
                ))
            })
            .await;
        let step = match sent {
            Ok((_, resp)) => {
                let (answer, members) = group_wire::parse_join_group(resp);
                let step = lock(&self.shared).m.on_join_answer(answer);
                if let JoinStep::Sync { leader } = step {
                    return self.sync(leader, members).await;
                }
                step
            }
            Err(e) => {
                tracing::debug!(group = %self.group_id, error = %e, "JoinGroup failed");
                if !matches!(crate::retry::action(&e), crate::retry::RetryAction::Fail) {
                    lock(&self.shared).m.on_no_answer()
                } else {
                    return Err(e);
                }
            }
        };
        self.after_step(step).await
    }

    async fn after_step(&mut self, step: JoinStep) -> Result<()> {
        match step {
            JoinStep::JoinAgain | JoinStep::Stable | JoinStep::Sync { .. } => Ok(()),
            JoinStep::FindCoordinatorAndRejoin => {
                self.forget_coordinator().await;
                Ok(())
            }
            JoinStep::BackoffAndRejoin => {
                tokio::time::sleep(self.settings.retry_backoff).await;
                Ok(())
            }
            JoinStep::Fatal(code) => Err(Error::kafka(
                format!("joining group '{}'", self.group_id),
                KafkaError::new(code, None),
            )),
        }
    }

    async fn forget_coordinator(&self) {
        let mut state = self
            .group_client
            .retry_state("finding the group coordinator");
        let _ = self
            .group_client
            .prepare_retry(
                &mut state,
                Error::kafka("group", KafkaError::new(KafkaCode::NOT_COORDINATOR, None)),
            )
            .await;
    }

    async fn sync(&mut self, leader: bool, members: Vec<JoinedMember>) -> Result<()> {
        let (member_id, generation, protocol_name) = {
            let s = lock(&self.shared);
            (
                s.m.member_id.clone(),
                s.m.generation,
                s.m.protocol_name.clone(),
            )
        };
        let assignments = if leader {
            self.leader_assign(protocol_name.as_deref(), &members)
                .await?
        } else {
            self.assigned_partition_counts = None;
            Vec::new()
        };
        lock(&self.shared).m.sync_sent();
        let who = MemberIdentityRef {
            group_id: &self.group_id,
            member_id: &member_id,
            group_instance_id: self.instance_id.as_deref(),
        };
        let sent = self
            .group_client
            .send::<SyncGroupRequest, _>(&Target::Coordinator(self.group_id.clone()), |v| {
                Ok(group_wire::sync_group_request(
                    &who,
                    generation,
                    protocol_name.as_deref(),
                    &assignments,
                    v,
                ))
            })
            .await;
        let step = match sent {
            Ok((_, resp)) => {
                let (error, bytes) = group_wire::parse_sync_group(resp);
                let now = self.now();
                let step = lock(&self.shared).m.on_sync_answer(error, now);
                if step == JoinStep::Stable {
                    self.install_assignment(&bytes, generation, protocol_name.as_deref())?;
                    self.wake_heartbeat.notify_one();
                    return Ok(());
                }
                step
            }
            Err(e) if crate::retry::action(&e) != crate::retry::RetryAction::Fail => {
                tracing::debug!(group = %self.group_id, error = %e, "SyncGroup failed");
                lock(&self.shared).m.on_no_answer()
            }
            Err(e) => return Err(e),
        };
        self.after_step(step).await
    }

    async fn leader_assign(
        &mut self,
        protocol_name: Option<&str>,
        members: &[JoinedMember],
    ) -> Result<Vec<(String, bytes::Bytes)>> {
        let name = protocol_name.unwrap_or_default();
        let topics: Vec<String> = leader::subscribed_topics(members)?.into_iter().collect();
        self.client.refresh_metadata(Some(&topics)).await?;
        let md = self.client.metadata();
        let assignor = self
            .assignors
            .iter()
            .find(|a| a.name() == name)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "the group chose strategy '{name}', which this member does not have"
                ))
            })?;
        let out = leader::compute_assignments(assignor.as_ref(), members, &md)?;
        self.assigned_partition_counts = Some(
            topics
                .iter()
                .filter_map(|t| md.topic(t).map(|m| (t.clone(), m.partitions.len())))
                .collect(),
        );
        tracing::debug!(group = %self.group_id, strategy = name, members = members.len(), "computed assignment");
        Ok(out)
    }

    /// Applies a SyncGroup assignment: revokes what moved away (cooperative), adds what is
    /// new, and calls the listener; with revocations under cooperative, asks to rejoin at once
    /// for the second round.
    fn install_assignment(
        &mut self,
        bytes: &[u8],
        generation: i32,
        protocol_name: Option<&str>,
    ) -> Result<()> {
        let (_, assignment) = decode_assignment(bytes)
            .map_err(|e| Error::InvalidArgument(format!("bad assignment from the leader: {e}")))?;
        let pairs = flatten(&assignment.partitions);
        if let Some(a) = self
            .assignors
            .iter_mut()
            .find(|a| Some(a.name()) == protocol_name)
        {
            a.on_assignment(&AssignmentInfo {
                partitions: pairs.clone(),
                user_data: assignment.user_data.clone(),
                generation,
            });
        }
        let assigned: BTreeSet<TopicPartition> = pairs
            .into_iter()
            .map(|(t, p)| TopicPartition::new(t, p))
            .collect();
        let owned: BTreeSet<TopicPartition> = self.assigned.keys().cloned().collect();
        let change = assignment_change(self.protocol, &owned, &assigned);
        if !change.revoked.is_empty() {
            // Auto-commit of revoked partitions happens asynchronously here: the member must
            // rejoin without delay.
            if self.settings.enable_auto_commit {
                let offsets: BTreeMap<TopicPartition, i64> = change
                    .revoked
                    .iter()
                    .filter_map(|tp| {
                        self.assigned
                            .get(tp)
                            .and_then(|s| s.position)
                            .map(|p| (tp.clone(), p))
                    })
                    .collect();
                drop(self.commit_async(Some(offsets)));
            }
            self.call_listener(RebalanceKind::Revoked, &change.revoked);
            for tp in &change.revoked {
                self.assigned.remove(tp);
                self.drop_buffered(tp);
            }
        }
        for tp in &change.added {
            self.assigned.insert(tp.clone(), PartitionState::default());
        }
        self.fetcher.forget_leaders();
        self.call_listener(RebalanceKind::Assigned, &change.added);
        if change.rejoin {
            lock(&self.shared)
                .m
                .request_rejoin("partitions were revoked: rejoin for the second round");
        }
        Ok(())
    }
}
