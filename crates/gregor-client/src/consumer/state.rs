//! The consumer itself: its settings, subscription, assigned partitions and the handles of its
//! heartbeat task and fetcher, with the calls an application makes (subscribe, poll, commit,
//! seek, pause, close). Fetching, positions and rebalancing continue `impl Consumer` in their
//! own modules.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gregor_assign::{Assignor, RebalanceProtocol};
use kafka_protocol::messages::{LeaveGroupRequest, OffsetCommitRequest, OffsetFetchRequest};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::{Client, Target};
use crate::error::{Error, KafkaCode, KafkaError, Result};
use crate::types::{IsolationLevel, TopicPartition};

use super::config::{AutoOffsetReset, ConsumerConfig, GroupProtocol};
use super::fetch::{self, ConsumerRecord, FetchLimits};
use super::fetch_state::{byte_limits, Fetcher};
use super::group_wire::{self, MemberIdentityRef};
use super::heartbeat::{heartbeat_loop, HeartbeatTask};
use super::heartbeat_848::heartbeat_loop_848;
use super::listener::{RebalanceContext, RebalanceKind, RebalanceListener};
use super::membership::{common_protocol, MemberState, Membership, Timing};
use super::membership_848::{ConsumerMembership, Subscription};
use super::shared::{lock, millis, ms_i32, PartitionState, Shared};

/// What the consumer is subscribed to.
#[derive(Debug, Clone)]
pub(super) enum SubscriptionKind {
    None,
    Topics(BTreeSet<String>),
    Pattern(regex::Regex),
}

/// Settings the shell uses, in ms.
#[derive(Debug, Clone)]
pub(super) struct Settings {
    pub(super) session_timeout_ms: u64,
    pub(super) max_poll_interval_ms: u64,
    pub(super) join_group_timeout: Duration,
    pub(super) enable_auto_commit: bool,
    pub(super) auto_commit_interval_ms: u64,
    pub(super) auto_offset_reset: AutoOffsetReset,
    pub(super) limits: FetchLimits,
    pub(super) byte_limits: fetch::ByteLimits,
    pub(super) fetch_max_wait: Duration,
    pub(super) max_poll_records: usize,
    pub(super) check_crcs: bool,
    pub(super) isolation_level: IsolationLevel,
    pub(super) metadata_max_age_ms: u64,
    pub(super) retry_backoff: Duration,
}

impl Settings {
    pub(super) fn new(config: &ConsumerConfig) -> Settings {
        Settings {
            session_timeout_ms: millis(config.session_timeout),
            max_poll_interval_ms: millis(config.max_poll_interval),
            // JoinGroup waits at the coordinator for up to the rebalance timeout
            // (max.poll.interval.ms): its request must be allowed that long, and a few
            // seconds more (as Kafka's consumer allows). Other group requests keep
            // request.timeout.ms, so that a coordinator that stopped answering is given up.
            join_group_timeout: config
                .client
                .request_timeout
                .max(config.max_poll_interval + Duration::from_secs(5)),
            enable_auto_commit: config.enable_auto_commit,
            auto_commit_interval_ms: millis(config.auto_commit_interval),
            auto_offset_reset: config.auto_offset_reset,
            limits: FetchLimits {
                max_wait_ms: ms_i32(config.fetch_max_wait),
                min_bytes: config.fetch_min_bytes,
                max_bytes: config.fetch_max_bytes,
                partition_max_bytes: config.max_partition_fetch_bytes,
            },
            byte_limits: byte_limits(config.fetch_max_bytes, config.max_partition_fetch_bytes),
            fetch_max_wait: config.fetch_max_wait,
            max_poll_records: config.max_poll_records,
            check_crcs: config.check_crcs,
            isolation_level: config.isolation_level,
            metadata_max_age_ms: millis(config.metadata_max_age),
            retry_backoff: Duration::from_millis(config.client.backoff.delay_ms(0)),
        }
    }
}

/// A Kafka consumer in a consumer group.
pub struct Consumer {
    pub(super) client: Client,
    pub(super) group_client: Client,
    pub(super) group_id: String,
    pub(super) instance_id: Option<String>,
    pub(super) rack: Option<String>,
    pub(super) settings: Settings,
    pub(super) assignors: Vec<Box<dyn Assignor>>,
    pub(super) protocol: RebalanceProtocol,
    pub(super) shared: Arc<Mutex<Shared>>,
    pub(super) wake_heartbeat: Arc<Notify>,
    pub(super) wake_app: Arc<Notify>,
    pub(super) heartbeat_task: JoinHandle<()>,
    pub(super) subscription: SubscriptionKind,
    pub(super) subscribed: BTreeSet<String>,
    pub(super) assigned: BTreeMap<TopicPartition, PartitionState>,
    /// In a mutex only so that the consumer is `Sync` (listeners need only be `Send`).
    pub(super) listener: Option<Mutex<Box<dyn RebalanceListener>>>,
    /// Fetches in flight, fetch sessions and the records fetched and not yet returned.
    pub(super) fetcher: Fetcher,
    pub(super) started: Instant,
    pub(super) last_auto_commit_ms: u64,
    pub(super) last_metadata_ms: Option<u64>,
    /// As the group's leader: the partition count of every topic it last assigned, to notice
    /// partitions added since (then the group rebalances, as with Kafka's consumer).
    pub(super) assigned_partition_counts: Option<BTreeMap<String, usize>>,
    pub(super) group_protocol: GroupProtocol,
    /// Counts heartbeat answers (group.protocol=consumer): a commit refused for a stale member
    /// epoch waits for the next one.
    pub(super) answers: tokio::sync::watch::Receiver<u64>,
    /// Topic names by id, for the assignments of group.protocol=consumer.
    pub(super) topic_names: BTreeMap<uuid::Uuid, String>,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("group_id", &self.group_id)
            .field("assigned", &self.assigned.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.heartbeat_task.abort();
    }
}

impl Consumer {
    /// Connects; joins the group on the first `poll` after `subscribe`.
    pub async fn new(mut config: ConsumerConfig) -> Result<Consumer> {
        let assignors = config.take_assignors()?;
        let protocol = common_protocol(&assignors);
        let client = Client::connect(config.client.clone()).await?;
        // Group requests get connections of their own, so that a JoinGroup the coordinator
        // holds for a whole rebalance never queues a fetch behind it.
        let group_client = Client::connect(config.client.clone()).await?;
        let timing = Timing {
            heartbeat_interval_ms: millis(config.heartbeat_interval),
            session_timeout_ms: millis(config.session_timeout),
            max_poll_interval_ms: millis(config.max_poll_interval),
            retry_backoff_ms: config.client.backoff.delay_ms(0),
        };
        let started = Instant::now();
        let shared = Arc::new(Mutex::new(Shared {
            m: Membership::new(config.group_instance_id.is_some(), timing, 0),
            cg: (config.group_protocol == GroupProtocol::Consumer)
                .then(|| ConsumerMembership::new(new_member_id(), settings_848(&config), 0)),
            closed: false,
        }));
        let wake_heartbeat = Arc::new(Notify::new());
        let wake_app = Arc::new(Notify::new());
        let (answers_tx, answers) = tokio::sync::watch::channel(0u64);
        let task = HeartbeatTask {
            shared: shared.clone(),
            client: group_client.clone(),
            group_id: config.group_id.clone(),
            instance_id: config.group_instance_id.clone(),
            wake: wake_heartbeat.clone(),
            wake_app: wake_app.clone(),
            started,
            session_timeout: config.session_timeout,
            answers: Arc::new(answers_tx),
        };
        let heartbeat_task = match config.group_protocol {
            GroupProtocol::Classic => tokio::spawn(heartbeat_loop(task)),
            GroupProtocol::Consumer => tokio::spawn(heartbeat_loop_848(task)),
        };
        let settings = Settings::new(&config);
        Ok(Consumer {
            client,
            group_client,
            group_id: config.group_id,
            instance_id: config.group_instance_id,
            rack: config.client_rack,
            settings,
            assignors,
            protocol,
            shared,
            wake_heartbeat,
            wake_app,
            heartbeat_task,
            subscription: SubscriptionKind::None,
            subscribed: BTreeSet::new(),
            assigned: BTreeMap::new(),
            listener: None,
            fetcher: Fetcher::default(),
            started,
            last_auto_commit_ms: 0,
            last_metadata_ms: None,
            assigned_partition_counts: None,
            group_protocol: config.group_protocol,
            answers,
            topic_names: BTreeMap::new(),
        })
    }

    pub(super) fn now(&self) -> u64 {
        millis(self.started.elapsed())
    }

    /// Subscribes to a list of topics (an empty list unsubscribes). Takes effect at the next
    /// `poll`, which (re)joins the group.
    pub async fn subscribe<S: AsRef<str>>(&mut self, topics: &[S]) -> Result<()> {
        if topics.is_empty() {
            return self.unsubscribe().await;
        }
        let mut set = BTreeSet::new();
        for t in topics {
            let t = t.as_ref().trim();
            if t.is_empty() {
                return Err(Error::InvalidArgument(
                    "topic names in a subscription must not be empty".to_string(),
                ));
            }
            set.insert(t.to_string());
        }
        let mut s = lock(&self.shared);
        if let Some(cg) = s.cg.as_mut() {
            cg.subscribe(Subscription::Topics(set.iter().cloned().collect()));
        }
        s.m.request_rejoin("the subscription changed");
        drop(s);
        self.subscription = SubscriptionKind::Topics(set);
        self.wake_heartbeat.notify_one();
        Ok(())
    }

    /// Subscribes to every topic whose whole name matches `pattern` (as Java's
    /// `Pattern.matcher(topic).matches()`); new matching topics are picked up within
    /// `metadata.max.age.ms`.
    pub fn subscribe_pattern(&mut self, pattern: &str) -> Result<()> {
        let re = regex::Regex::new(&format!("^(?:{pattern})$"))
            .map_err(|e| Error::InvalidArgument(format!("invalid pattern '{pattern}': {e}")))?;
        self.subscription = SubscriptionKind::Pattern(re);
        self.last_metadata_ms = None;
        let mut s = lock(&self.shared);
        if let Some(cg) = s.cg.as_mut() {
            // The coordinator resolves it (KIP-848), matching whole names too.
            cg.subscribe(Subscription::Regex(pattern.to_string()));
        }
        s.m.request_rejoin("the subscription changed");
        drop(s);
        self.wake_heartbeat.notify_one();
        Ok(())
    }

    pub fn set_rebalance_listener(&mut self, listener: Box<dyn RebalanceListener>) {
        self.listener = Some(Mutex::new(listener));
    }

    /// Leaves the group: revokes every partition and sends LeaveGroup.
    pub async fn unsubscribe(&mut self) -> Result<()> {
        self.leave("the consumer unsubscribed").await;
        self.subscription = SubscriptionKind::None;
        self.subscribed.clear();
        Ok(())
    }

    /// The partitions assigned to this member.
    pub fn assignment(&self) -> BTreeSet<TopicPartition> {
        self.assigned.keys().cloned().collect()
    }

    /// The high watermark of `tp` in the last Fetch answer for it, without a request (as
    /// librdkafka's cached `get_watermark_offsets`); `None` before the first answer.
    pub fn cached_high_watermark(&self, tp: &TopicPartition) -> Option<i64> {
        self.fetcher.high_watermarks.get(tp).copied()
    }

    /// The member id and generation (`""` and -1 outside a generation).
    pub fn group_metadata(&self) -> (String, i32) {
        lock(&self.shared).identity()
    }

    /// Kafka's `groupMetadata()`: group id, generation, member id and instance id, for a
    /// transactional producer's `send_offsets_to_transaction`.
    pub fn consumer_group_metadata(&self) -> crate::types::ConsumerGroupMetadata {
        let (member_id, generation_id) = self.group_metadata();
        crate::types::ConsumerGroupMetadata {
            group_id: self.group_id.clone(),
            generation_id,
            member_id,
            group_instance_id: self.instance_id.clone(),
        }
    }

    /// Records from the assigned partitions, at most `max.poll.records`. Joins or rejoins the
    /// group first when needed (running the listener), which may take longer than `timeout`.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>> {
        if matches!(self.subscription, SubscriptionKind::None) {
            return Err(Error::InvalidArgument(
                "poll() needs a subscription: call subscribe() first".to_string(),
            ));
        }
        let deadline = self.now() + millis(timeout);
        loop {
            let now = self.now();
            if self.on_poll(now) {
                self.wake_heartbeat.notify_one();
            }
            self.maybe_auto_commit(now);
            self.maybe_refresh_metadata().await?;
            self.ensure_active_group().await?;
            self.update_positions().await?;
            self.fetch_more().await;
            let records = self.take_buffered();
            if !records.is_empty() {
                // Prefetch: partitions drained just now are fetched again while the
                // application works on these records.
                self.fetch_more().await;
                if self.fetch_in_flight() {
                    // On a current-thread runtime nothing else runs until this task waits:
                    // let the connection's writer put the Fetch just sent on the wire and its
                    // reader drain the answer arriving, or both would wait until the buffer is
                    // empty and every Fetch would be a full round trip with nothing to overlap.
                    tokio::task::yield_now().await;
                }
                return Ok(records);
            }
            if self.fetcher.buffer.has_undecoded() {
                // The records decoded ahead were all skipped (their partitions paused or
                // revoked meanwhile): decode the next ones rather than wait.
                continue;
            }
            let now = self.now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            let wait = Duration::from_millis(deadline - now).min(self.settings.fetch_max_wait);
            self.wait_for_fetches(wait).await;
        }
    }

    pub(super) fn context(&self) -> RebalanceContext {
        let (member_id, generation) = lock(&self.shared).identity();
        RebalanceContext::now(generation, &member_id)
    }

    /// Records the poll; true when the heartbeat task has something new to do.
    fn on_poll(&self, now: u64) -> bool {
        let mut s = lock(&self.shared);
        s.m.on_poll(now);
        s.cg.as_mut().is_some_and(|cg| cg.on_poll(now))
    }

    pub(super) fn call_listener(&mut self, kind: RebalanceKind, partitions: &[TopicPartition]) {
        let ctx = self.context();
        tracing::info!(group = %self.group_id, member = %ctx.member_id, generation = ctx.generation, ?kind, partitions = ?partitions, "rebalance callback");
        if let Some(l) = self.listener.as_mut() {
            let l = l.get_mut().unwrap_or_else(|p| p.into_inner());
            match kind {
                RebalanceKind::Revoked => l.on_partitions_revoked(partitions, &ctx),
                RebalanceKind::Assigned => l.on_partitions_assigned(partitions, &ctx),
                RebalanceKind::Lost => l.on_partitions_lost(partitions, &ctx),
            }
        }
    }

    pub(super) fn maybe_auto_commit(&mut self, now: u64) {
        if !self.settings.enable_auto_commit
            || now < self.last_auto_commit_ms + self.settings.auto_commit_interval_ms
        {
            return;
        }
        self.last_auto_commit_ms = now;
        let offsets = self.positions();
        if !offsets.is_empty() {
            drop(self.commit_async(Some(offsets)));
        }
    }

    pub(super) fn positions(&self) -> BTreeMap<TopicPartition, i64> {
        self.assigned
            .iter()
            .filter_map(|(tp, s)| s.position.map(|p| (tp.clone(), p)))
            .collect()
    }

    /// Every `metadata.max.age.ms`: a pattern subscription picks up new matching topics, and the
    /// group's leader notices partitions added to the topics it assigned; either asks for a
    /// rebalance.
    pub(super) async fn maybe_refresh_metadata(&mut self) -> Result<()> {
        let pattern = matches!(self.subscription, SubscriptionKind::Pattern(_));
        // Under KIP-848 the coordinator resolves patterns and notices new partitions.
        let cg = self.group_protocol == GroupProtocol::Consumer;
        if cg || (!pattern && self.assigned_partition_counts.is_none()) {
            return Ok(());
        }
        let now = self.now();
        if self
            .last_metadata_ms
            .is_some_and(|t| now < t + self.settings.metadata_max_age_ms)
        {
            return Ok(());
        }
        if pattern {
            let before = self.subscribed.clone();
            self.resolve_subscription().await?;
            if before != self.subscribed && !before.is_empty() {
                lock(&self.shared)
                    .m
                    .request_rejoin("new topics match the subscription pattern");
            }
        }
        if let Some(counts) = &self.assigned_partition_counts {
            let topics: Vec<String> = counts.keys().cloned().collect();
            // The pattern refresh above already fetched every topic.
            let md = if pattern {
                self.client.metadata()
            } else {
                std::sync::Arc::new(self.client.refresh_metadata(Some(&topics)).await?)
            };
            self.last_metadata_ms = Some(now);
            let changed = topics.iter().find(|t| {
                md.topic(t)
                    .is_some_and(|m| !m.partitions.is_empty() && m.partitions.len() != counts[*t])
            });
            if let Some(topic) = changed {
                tracing::info!(group = %self.group_id, %topic, "partition count changed; rebalancing");
                lock(&self.shared)
                    .m
                    .request_rejoin("the partition count of a subscribed topic changed");
            }
        }
        Ok(())
    }

    /// Works out the subscribed topic names (the pattern against the cluster's topics).
    pub(super) async fn resolve_subscription(&mut self) -> Result<()> {
        match &self.subscription {
            SubscriptionKind::None => self.subscribed.clear(),
            SubscriptionKind::Topics(t) => self.subscribed = t.clone(),
            SubscriptionKind::Pattern(re) => {
                let re = re.clone();
                let md = self.client.refresh_metadata(None).await?;
                self.last_metadata_ms = Some(self.now());
                self.subscribed = md
                    .topics
                    .iter()
                    .filter(|t| !t.is_internal && t.error.is_none() && re.is_match(&t.name))
                    .map(|t| t.name.clone())
                    .collect();
            }
        }
        Ok(())
    }

    /// Commits offsets (the positions of every assigned partition when `None`) and waits for
    /// the result. `REBALANCE_IN_PROGRESS`, `ILLEGAL_GENERATION` and `UNKNOWN_MEMBER_ID` are
    /// returned as they are (Kafka's `CommitFailedException` cases); coordinator moves are
    /// retried.
    pub async fn commit_sync(
        &mut self,
        offsets: Option<BTreeMap<TopicPartition, i64>>,
    ) -> Result<()> {
        let offsets = offsets.unwrap_or_else(|| self.positions());
        self.commit_job(offsets).await
    }

    /// Commits in the background; the handle yields the result.
    pub fn commit_async(
        &self,
        offsets: Option<BTreeMap<TopicPartition, i64>>,
    ) -> JoinHandle<Result<()>> {
        let offsets = offsets.unwrap_or_else(|| self.positions());
        let job = self.commit_job(offsets);
        tokio::spawn(job)
    }

    pub(super) fn commit_job(
        &self,
        offsets: BTreeMap<TopicPartition, i64>,
    ) -> impl std::future::Future<Output = Result<()>> + Send + 'static {
        let job_848 = (self.group_protocol == GroupProtocol::Consumer)
            .then(|| self.commit_job_848(offsets.clone()));
        let classic = self.commit_job_classic(offsets);
        async move {
            match job_848 {
                Some(job) => job.await,
                None => classic.await,
            }
        }
    }

    fn commit_job_classic(
        &self,
        offsets: BTreeMap<TopicPartition, i64>,
    ) -> impl std::future::Future<Output = Result<()>> + Send + 'static {
        let client = self.group_client.clone();
        let group = self.group_id.clone();
        let instance = self.instance_id.clone();
        let (member_id, generation, state) = {
            let s = lock(&self.shared);
            (s.m.member_id.clone(), s.m.generation, s.m.state)
        };
        async move {
            if offsets.is_empty() {
                return Ok(());
            }
            // As Kafka's consumer: a member outside a stable generation does not commit. Sent
            // with no generation, the commit would be taken as a simple consumer's by a group
            // that has emptied meanwhile, moving back offsets that others have committed past.
            match state {
                MemberState::Stable => {}
                MemberState::Joining | MemberState::Syncing => {
                    return Err(Error::kafka(
                        format!("committing offsets of group '{group}' during a rebalance"),
                        KafkaError::new(KafkaCode::REBALANCE_IN_PROGRESS, None),
                    ))
                }
                MemberState::Unjoined => {
                    return Err(Error::CommitFailed(format!(
                        "the consumer is not part of an active generation of group '{group}' \
                         (not joined yet, or removed from it, e.g. after max.poll.interval.ms \
                         without a poll); poll() rejoins"
                    )))
                }
            }
            let target = Target::Coordinator(group.clone());
            client
                .retry("OffsetCommit", || {
                    let (client, group, member_id, instance, offsets, target) = (
                        client.clone(),
                        group.clone(),
                        member_id.clone(),
                        instance.clone(),
                        offsets.clone(),
                        target.clone(),
                    );
                    async move {
                        let who = MemberIdentityRef {
                            group_id: &group,
                            member_id: &member_id,
                            group_instance_id: instance.as_deref(),
                        };
                        let (_, resp) = client
                            .send::<OffsetCommitRequest, _>(&target, |v| {
                                Ok(group_wire::member_offset_commit_request(
                                    &who, generation, &offsets, v,
                                ))
                            })
                            .await?;
                        for (tp, r) in crate::admin::groups::parse_offset_commit(resp) {
                            r.map_err(|e| Error::kafka(format!("committing {tp}"), e))?;
                        }
                        Ok(())
                    }
                })
                .await
        }
    }

    /// The committed offsets of `partitions` (`None` where nothing is committed). A
    /// read_committed consumer asks for stable offsets only (KIP-447): while a transaction
    /// that commits offsets of these partitions is still open, the coordinator answers
    /// UNSTABLE_OFFSET_COMMIT and the fetch is retried, so that a new instance of an
    /// exactly-once pipeline never resumes from offsets that transaction is about to move.
    pub async fn committed(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, Option<i64>>> {
        let target = Target::Coordinator(self.group_id.clone());
        let group = self.group_id.clone();
        let require_stable = self.settings.isolation_level == IsolationLevel::ReadCommitted;
        let found = self
            .group_client
            .retry("OffsetFetch", || async {
                let (_, resp) = self
                    .group_client
                    .send::<OffsetFetchRequest, _>(&target, |v| {
                        crate::admin::groups::offset_fetch_request(
                            &group,
                            Some(partitions),
                            require_stable,
                            v,
                        )
                    })
                    .await?;
                crate::admin::groups::parse_offset_fetch(&group, resp)
                    .map_err(|e| Error::kafka(format!("OffsetFetch for group '{group}'"), e))
            })
            .await?;
        Ok(partitions
            .iter()
            .map(|tp| (tp.clone(), found.get(tp).map(|c| c.offset)))
            .collect())
    }

    /// Moves the position of an assigned partition; the next `poll` returns records from
    /// `offset`.
    pub fn seek(&mut self, tp: &TopicPartition, offset: i64) -> Result<()> {
        if offset < 0 {
            return Err(Error::InvalidArgument(format!(
                "seek offset must not be negative: {offset}"
            )));
        }
        let state = self.assigned.get_mut(tp).ok_or_else(|| not_assigned(tp))?;
        state.position = Some(offset);
        state.reset = false;
        self.drop_buffered(tp);
        Ok(())
    }

    /// The offset of the next record `poll` will return for `tp`.
    pub async fn position(&mut self, tp: &TopicPartition) -> Result<i64> {
        if !self.assigned.contains_key(tp) {
            return Err(not_assigned(tp));
        }
        self.update_positions().await?;
        self.assigned
            .get(tp)
            .and_then(|s| s.position)
            .ok_or_else(|| Error::InvalidArgument(format!("no position for {tp} yet")))
    }

    /// Stops returning records of these partitions until `resume`; they stay assigned.
    pub fn pause(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        for tp in partitions {
            self.assigned
                .get_mut(tp)
                .ok_or_else(|| not_assigned(tp))?
                .paused = true;
        }
        for tp in partitions {
            self.drop_buffered(tp);
        }
        Ok(())
    }

    pub fn resume(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        for tp in partitions {
            self.assigned
                .get_mut(tp)
                .ok_or_else(|| not_assigned(tp))?
                .paused = false;
        }
        Ok(())
    }

    pub fn paused(&self) -> BTreeSet<TopicPartition> {
        self.assigned
            .iter()
            .filter(|(_, s)| s.paused)
            .map(|(tp, _)| tp.clone())
            .collect()
    }

    /// Revokes everything, commits (with auto-commit), and leaves the group (dynamic members
    /// send LeaveGroup; static members keep their place until the session times out).
    pub async fn close(mut self) -> Result<()> {
        self.leave("the consumer is closing").await;
        lock(&self.shared).closed = true;
        self.wake_heartbeat.notify_one();
        Ok(())
    }

    pub(super) async fn leave(&mut self, reason: &str) {
        if self.group_protocol == GroupProtocol::Consumer {
            return self.leave_848().await;
        }
        let (member_id, generation) = {
            let s = lock(&self.shared);
            (s.m.member_id.clone(), s.m.generation)
        };
        if !self.assigned.is_empty() {
            let all: Vec<TopicPartition> = self.assigned.keys().cloned().collect();
            if generation >= 0 {
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
        if self.instance_id.is_none() && !member_id.is_empty() {
            let who = MemberIdentityRef {
                group_id: &self.group_id,
                member_id: &member_id,
                group_instance_id: None,
            };
            let sent = self
                .group_client
                .send::<LeaveGroupRequest, _>(&Target::Coordinator(self.group_id.clone()), |v| {
                    Ok(group_wire::leave_group_request(&who, reason, v))
                })
                .await;
            match sent.map(|(_, r)| group_wire::parse_leave_group(r)) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::debug!(group = %self.group_id, error = %e, "LeaveGroup refused")
                }
                Err(e) => tracing::debug!(group = %self.group_id, error = %e, "LeaveGroup failed"),
            }
        }
        lock(&self.shared).m.left();
    }
}

/// A member id of this client's making (KIP-1082), in Kafka's spelling of a random UUID.
fn new_member_id() -> String {
    crate::metadata::kafka_uuid_string(&uuid::Uuid::from_u128(fastrand::u128(..)))
}

fn settings_848(config: &ConsumerConfig) -> super::membership_848::Settings848 {
    super::membership_848::Settings848 {
        instance_id: config.group_instance_id.clone(),
        rack_id: config.client_rack.clone(),
        server_assignor: config.group_remote_assignor.clone(),
        max_poll_interval_ms: millis(config.max_poll_interval),
        heartbeat_interval_ms: millis(config.heartbeat_interval),
        retry_backoff_ms: config.client.backoff.delay_ms(0),
    }
}

pub(super) fn not_assigned(tp: &TopicPartition) -> Error {
    Error::InvalidArgument(format!("no current assignment for partition {tp}"))
}
