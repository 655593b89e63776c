//! The application side of a `group.protocol=consumer` member, run inside `poll`: reporting
//! lost partitions, reconciling toward the coordinator's assignment (revoke with a commit
//! first, take the new partitions, then let the heartbeat task acknowledge), commits at the
//! member epoch, and leaving the group.

use std::collections::BTreeMap;

use kafka_protocol::messages::OffsetCommitRequest;
use uuid::Uuid;

use super::group_wire::{self, MemberIdentityRef};
use super::heartbeat_848::send_848;
use super::listener::RebalanceKind;
use super::membership_848::{Reconciliation, STALE_MEMBER_EPOCH};
use super::shared::{lock, PartitionState};
use super::state::{Consumer, SubscriptionKind};
use crate::client::Target;
use crate::error::{Error, KafkaError, Result};
use crate::types::TopicPartition;

impl Consumer {
    /// Reports lost partitions and reconciles a new assignment, if any.
    pub(super) async fn ensure_active_group_848(&mut self) -> Result<()> {
        let (fatal, lost, reconciliation) = {
            let mut s = lock(&self.shared);
            let Some(cg) = s.cg.as_mut() else {
                return Ok(());
            };
            (cg.fatal(), cg.take_lost(), cg.reconciliation())
        };
        if let Some(code) = fatal {
            return Err(Error::kafka(
                format!("group '{}'", self.group_id),
                KafkaError::new(code, None),
            ));
        }
        if lost {
            if !self.assigned.is_empty() {
                let all: Vec<TopicPartition> = self.assigned.keys().cloned().collect();
                self.call_listener(RebalanceKind::Lost, &all);
                self.assigned.clear();
                self.drop_all_buffered();
            }
            // Reported: the member may join again, with epoch 0.
            let now = self.now();
            if lock(&self.shared)
                .cg
                .as_mut()
                .is_some_and(|cg| cg.on_poll(now))
            {
                self.wake_heartbeat.notify_one();
            }
            return Ok(());
        }
        if let Some(r) = reconciliation {
            self.reconcile_848(r).await?;
        }
        Ok(())
    }

    /// Revokes what the assignment no longer has (committing first with auto-commit), takes
    /// what it adds, and hands what is owned now to the heartbeat task, which acknowledges.
    async fn reconcile_848(&mut self, r: Reconciliation) -> Result<()> {
        let ids: Vec<Uuid> = r.revoke.iter().chain(&r.assign).map(|(t, _)| *t).collect();
        self.resolve_topic_ids(&ids).await?;
        let mut owned = r.owned.clone();
        let revoke: Vec<TopicPartition> = r
            .revoke
            .iter()
            .filter_map(|(id, p)| {
                owned.entry(*id).or_default().remove(p);
                self.topic_names.get(id).map(|n| TopicPartition::new(n, *p))
            })
            .collect();
        if !revoke.is_empty() {
            self.commit_before_revoke(&revoke).await;
            self.call_listener(RebalanceKind::Revoked, &revoke);
            for tp in &revoke {
                self.assigned.remove(tp);
                self.drop_buffered(tp);
            }
        }
        let mut added = Vec::new();
        for (id, p) in &r.assign {
            // A topic not in the metadata yet is taken on a later poll.
            if let Some(name) = self.topic_names.get(id) {
                owned.entry(*id).or_default().insert(*p);
                let tp = TopicPartition::new(name, *p);
                self.assigned.insert(tp.clone(), PartitionState::default());
                added.push(tp);
            }
        }
        owned.retain(|_, ps| !ps.is_empty());
        // The fetcher refreshes the metadata of these topics when a leader moves.
        self.subscribed = self.assigned.keys().map(|tp| tp.topic.clone()).collect();
        if let SubscriptionKind::Topics(t) = &self.subscription {
            self.subscribed.extend(t.iter().cloned());
        }
        self.fetcher.forget_leaders();
        self.call_listener(RebalanceKind::Assigned, &added);
        if let Some(cg) = lock(&self.shared).cg.as_mut() {
            cg.reconciled(r.session, owned);
        }
        self.wake_heartbeat.notify_one();
        Ok(())
    }

    /// Learns the names of topic ids from the metadata (of the subscribed topics, or of every
    /// topic for a pattern).
    async fn resolve_topic_ids(&mut self, ids: &[Uuid]) -> Result<()> {
        if ids.iter().all(|id| self.topic_names.contains_key(id)) {
            return Ok(());
        }
        let topics: Option<Vec<String>> = match &self.subscription {
            SubscriptionKind::Topics(t) => Some(t.iter().cloned().collect()),
            _ => None,
        };
        let fresh = self.client.refresh_metadata(topics.as_deref()).await?;
        for t in fresh.topics.iter().filter(|t| !t.topic_id.is_nil()) {
            self.topic_names.insert(t.topic_id, t.name.clone());
        }
        if let Some(id) = ids.iter().find(|id| !self.topic_names.contains_key(id)) {
            tracing::debug!(group = %self.group_id, topic_id = %crate::metadata::kafka_uuid_string(id), "assigned topic not in the metadata yet");
        }
        Ok(())
    }

    /// OffsetCommit at the member epoch. STALE_MEMBER_EPOCH (the epoch moved on with a new
    /// assignment) is retried with the epoch the next heartbeat answer brings.
    pub(super) fn commit_job_848(
        &self,
        offsets: BTreeMap<TopicPartition, i64>,
    ) -> impl std::future::Future<Output = Result<()>> + Send + 'static {
        let client = self.group_client.clone();
        let group = self.group_id.clone();
        let instance = self.instance_id.clone();
        let shared = self.shared.clone();
        let mut answers = self.answers.clone();
        async move {
            if offsets.is_empty() {
                return Ok(());
            }
            let deadline = tokio::time::Instant::now() + client.config().api_timeout;
            loop {
                let (member_id, epoch) = {
                    let s = lock(&shared);
                    let cg = s.cg.as_ref();
                    (
                        cg.map(|c| c.member_id.clone()).unwrap_or_default(),
                        cg.and_then(|c| c.commit_epoch()),
                    )
                };
                let Some(epoch) = epoch else {
                    return Err(Error::CommitFailed(format!(
                        "the consumer is not a member of group '{group}' (not joined yet, or \
                         fenced, or past max.poll.interval.ms without a poll); poll() rejoins"
                    )));
                };
                answers.borrow_and_update();
                let who = MemberIdentityRef {
                    group_id: &group,
                    member_id: &member_id,
                    group_instance_id: instance.as_deref(),
                };
                let sent = commit_once(&client, &who, epoch, &offsets).await;
                match sent {
                    Err(e) if e.kafka_code() == Some(STALE_MEMBER_EPOCH) => {
                        tracing::debug!(group = %group, epoch, "commit at a stale member epoch; retrying after the next heartbeat");
                        match tokio::time::timeout_at(deadline, answers.changed()).await {
                            Ok(Ok(())) => {}
                            _ => return Err(e),
                        }
                    }
                    other => return other,
                }
            }
        }
    }

    /// Revokes everything (committing first with auto-commit) and leaves with epoch -1 (-2 for
    /// a static member, whose place the coordinator keeps for the session).
    pub(super) async fn leave_848(&mut self) {
        let member = lock(&self.shared)
            .cg
            .as_ref()
            .is_some_and(|cg| cg.is_member());
        if !self.assigned.is_empty() {
            let all: Vec<TopicPartition> = self.assigned.keys().cloned().collect();
            if member {
                if self.settings.enable_auto_commit {
                    if let Err(e) = self.commit_sync(None).await {
                        tracing::warn!(group = %self.group_id, error = %e, "final commit failed");
                    }
                }
                self.call_listener(RebalanceKind::Revoked, &all);
            } else {
                self.call_listener(RebalanceKind::Lost, &all);
            }
            self.assigned.clear();
            self.drop_all_buffered();
        }
        let leave = lock(&self.shared).cg.as_mut().and_then(|cg| cg.leave());
        if let Some(f) = leave {
            let target = Target::Coordinator(self.group_id.clone());
            let timeout = self.group_client.config().request_timeout;
            if let Err((code, _)) =
                send_848(&self.group_client, &self.group_id, timeout, &target, &f).await
            {
                tracing::debug!(group = %self.group_id, ?code, "leave heartbeat failed");
            }
        }
    }
}

/// One OffsetCommit, retried over coordinator moves.
async fn commit_once(
    client: &crate::client::Client,
    who: &MemberIdentityRef<'_>,
    epoch: i32,
    offsets: &BTreeMap<TopicPartition, i64>,
) -> Result<()> {
    let target = Target::Coordinator(who.group_id.to_string());
    client
        .retry("OffsetCommit", || async {
            let (_, resp) = client
                .send::<OffsetCommitRequest, _>(&target, |v| {
                    Ok(group_wire::member_offset_commit_request(
                        who, epoch, offsets, v,
                    ))
                })
                .await?;
            for (tp, r) in crate::admin::groups::parse_offset_commit(resp) {
                r.map_err(|e| Error::kafka(format!("committing {tp}"), e))?;
            }
            Ok(())
        })
        .await
}
