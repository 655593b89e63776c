//! The group coordinator shell: runs the pure `gregor-group` state machine in one task, feeds it
//! requests, timer ticks and append completions, and carries out its effects — responses to the
//! waiting connections, and records appended (durably, in order) to the `__consumer_offsets`
//! partition of their group. At start-up the coordinator is rebuilt from those partitions.
//!
//! The internal topic is created on first use, as Kafka does, with `offsets.topic.num.partitions`
//! partitions and `min(offsets.topic.replication.factor, live brokers)` replicas.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use gregor_group::{
    partition_for, AppendToken, Effect, GroupConfig, GroupCoordinator, Input, Record, Request,
    RequestContext, Response,
};
use gregor_log::records::{decode_batch, encode_batch, BatchSpec};
use kafka_protocol::ResponseError;
use tokio::sync::{mpsc, oneshot, OnceCell};
use tracing::{info, warn};

use crate::broker::Broker;
use crate::util::now_ms;

/// The internal topic holding group metadata and committed offsets.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

enum Msg {
    Request(Box<Input>, oneshot::Sender<Response>),
}

/// A finished append of the coordinator's records.
type AppendDone = (AppendToken, Result<(), ResponseError>);

/// Appends the coordinator may have queued or under way before it stops taking requests
/// (requests wait in the bounded request channel meanwhile): the append queue stays bounded
/// however fast clients commit.
const MAX_PENDING_APPENDS: usize = 256;

/// Handle to the coordinator task.
pub struct Groups {
    tx: OnceCell<mpsc::Sender<Msg>>,
}

impl Default for Groups {
    fn default() -> Self {
        Self::new()
    }
}

impl Groups {
    pub fn new() -> Groups {
        Groups {
            tx: OnceCell::new(),
        }
    }

    /// Number of `__consumer_offsets` partitions.
    pub fn num_partitions(b: &Broker) -> i32 {
        b.config.int("offsets.topic.num.partitions") as i32
    }

    /// Starts the coordinator if the internal topic exists (start-up after a restart).
    pub async fn start_if_present(b: &Arc<Broker>) -> Result<(), ResponseError> {
        if b.metadata.image().topic(OFFSETS_TOPIC).is_some() {
            b.groups.ensure(b).await?;
        }
        Ok(())
    }

    /// The coordinator, created (with the internal topic) on first use.
    async fn ensure(&self, b: &Arc<Broker>) -> Result<&mpsc::Sender<Msg>, ResponseError> {
        self.tx
            .get_or_try_init(|| async {
                create_offsets_topic(b).await?;
                let coordinator = load(b)?;
                let (tx, rx) = mpsc::channel(1024);
                tokio::spawn(run(b.clone(), coordinator, rx));
                Ok(tx)
            })
            .await
    }

    /// Makes sure the coordinator runs (FindCoordinator).
    pub async fn call_ready(&self, b: &Arc<Broker>) -> Result<(), ResponseError> {
        self.ensure(b).await.map(|_| ())
    }

    /// Sends one request to the coordinator and waits for its answer.
    pub async fn call(
        &self,
        b: &Arc<Broker>,
        context: RequestContext,
        request: Request,
    ) -> Result<Response, ResponseError> {
        let tx = self.ensure(b).await?;
        let (reply, rx) = oneshot::channel();
        let input = Input {
            request_id: 0, // assigned by the coordinator task
            context,
            request,
        };
        tx.send(Msg::Request(Box::new(input), reply))
            .await
            .map_err(|_| ResponseError::CoordinatorNotAvailable)?;
        rx.await.map_err(|_| ResponseError::CoordinatorNotAvailable)
    }
}

async fn create_offsets_topic(b: &Arc<Broker>) -> Result<(), ResponseError> {
    if b.metadata.image().topic(OFFSETS_TOPIC).is_some() {
        return Ok(());
    }
    let live = b.metadata.image().active_brokers().count().max(1) as i64;
    let rf = b.config.int("offsets.topic.replication.factor").min(live) as i16;
    let topic = gregor_meta::CreatableTopic::new(OFFSETS_TOPIC)
        .with_layout(Groups::num_partitions(b), rf)
        .with_config("cleanup.policy", "compact")
        .with_config(
            "segment.bytes",
            &b.config.int("offsets.topic.segment.bytes").to_string(),
        );
    let request = gregor_meta::CreateTopicsRequest {
        topics: vec![topic],
        validate_only: false,
    };
    let results = crate::handlers::create_topics_internal(b, &request)
        .await
        .map_err(|_| ResponseError::CoordinatorNotAvailable)?;
    match results.into_iter().next().map(|(_, result)| result) {
        Some(Ok(_)) => {
            info!(
                partitions = Groups::num_partitions(b),
                replication_factor = rf,
                "created {OFFSETS_TOPIC}"
            );
            Ok(())
        }
        Some(Err(e)) if e.code == ResponseError::TopicAlreadyExists => Ok(()),
        Some(Err(e)) => {
            warn!(code = ?e.code, message = %e.message, "cannot create {OFFSETS_TOPIC}");
            Err(ResponseError::CoordinatorNotAvailable)
        }
        None => Err(ResponseError::CoordinatorNotAvailable),
    }
}

fn group_config(b: &Broker) -> GroupConfig {
    GroupConfig {
        min_session_timeout_ms: b.config.int("group.min.session.timeout.ms") as i32,
        max_session_timeout_ms: b.config.int("group.max.session.timeout.ms") as i32,
        initial_rebalance_delay_ms: b.config.int("group.initial.rebalance.delay.ms") as i32,
        max_size: b.config.int("group.max.size").max(1) as usize,
        offset_metadata_max_bytes: b.config.int("offset.metadata.max.bytes").max(0) as usize,
        offsets_retention_ms: b
            .config
            .int("offsets.retention.minutes")
            .saturating_mul(60_000),
        ..GroupConfig::default()
    }
}

/// Rebuilds the coordinator from the internal topic's partitions.
fn load(b: &Broker) -> Result<GroupCoordinator, ResponseError> {
    let mut coordinator =
        GroupCoordinator::new(group_config(b), uuid::Uuid::new_v4().as_u64_pair().0);
    let mut records = 0usize;
    for p in 0..Groups::num_partitions(b) {
        let Some(part) = b.replicas.get(OFFSETS_TOPIC, p) else {
            return Err(ResponseError::CoordinatorNotAvailable);
        };
        let mut offset = part.log.log_start_offset();
        let end = part.high_watermark();
        while offset < end {
            let read = part
                .log
                .read(offset, 1 << 20, Some(end))
                .map_err(|_| ResponseError::CoordinatorLoadInProgress)?;
            let Some(next) = read.next_offset else { break };
            let mut rest: &[u8] = &read.records;
            while !rest.is_empty() {
                let Ok((h, recs)) = decode_batch(rest) else {
                    break;
                };
                for r in recs {
                    let Some(key) = r.key else { continue };
                    if let Err(e) = coordinator.replay(&key, r.value.as_deref()) {
                        warn!(partition = p, offset = r.offset, error = %e, "skipping unreadable group record");
                    }
                    records += 1;
                }
                rest = &rest[h.size()..];
            }
            if next <= offset {
                break;
            }
            offset = next;
        }
    }
    info!(records, "group coordinator loaded");
    Ok(coordinator)
}

/// The coordinator task: requests, timers and append completions, one at a time.
async fn run(b: Arc<Broker>, mut coordinator: GroupCoordinator, mut rx: mpsc::Receiver<Msg>) {
    let mut waiting: HashMap<u64, oneshot::Sender<Response>> = HashMap::new();
    let mut next_id: u64 = 1;
    // Appends run in order on one task, as the coordinator requires. The queue is bounded by
    // `pending`: no request is taken while MAX_PENDING_APPENDS appends are outstanding.
    let (append_tx, append_rx) = mpsc::unbounded_channel::<(AppendToken, Vec<Record>)>();
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<AppendDone>();
    tokio::spawn(appender(b.clone(), append_rx, done_tx));
    let mut pending = 0usize;
    let effects = coordinator.complete_load(now_ms());
    pending += carry_out(effects, &mut waiting, &append_tx);
    // Offset expiry runs every offsets.retention.check.interval.ms (first after one interval).
    let check = std::time::Duration::from_millis(
        b.config.int("offsets.retention.check.interval.ms").max(1) as u64,
    );
    let mut expiry = tokio::time::interval_at(tokio::time::Instant::now() + check, check);
    expiry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let deadline = coordinator.next_deadline();
        let sleep = async {
            match deadline {
                Some(at) => {
                    let wait = (at - now_ms()).max(0) as u64;
                    tokio::time::sleep(std::time::Duration::from_millis(wait)).await
                }
                None => std::future::pending().await,
            }
        };
        let effects = tokio::select! {
            m = rx.recv(), if pending < MAX_PENDING_APPENDS => {
                let Some(Msg::Request(input, reply)) = m else { return };
                let mut input = *input;
                input.request_id = next_id;
                waiting.insert(next_id, reply);
                next_id += 1;
                coordinator.handle(now_ms(), input)
            }
            Some((token, result)) = done_rx.recv() => {
                pending -= 1;
                coordinator.append_completed(now_ms(), token, result)
            }
            _ = sleep => coordinator.tick(now_ms()),
            _ = expiry.tick() => coordinator.expire_offsets(now_ms()),
        };
        pending += carry_out(effects, &mut waiting, &append_tx);
    }
}

/// Carries out effects; returns how many appends it queued.
fn carry_out(
    effects: Vec<Effect>,
    waiting: &mut HashMap<u64, oneshot::Sender<Response>>,
    append_tx: &mpsc::UnboundedSender<(AppendToken, Vec<Record>)>,
) -> usize {
    let mut appends = 0;
    for e in effects {
        match e {
            Effect::Respond {
                request_id,
                response,
            } => {
                if let Some(reply) = waiting.remove(&request_id) {
                    // The connection may have gone; nothing to do then.
                    let _ = reply.send(response);
                }
            }
            Effect::Append { token, records } => {
                if append_tx.send((token, records)).is_ok() {
                    appends += 1;
                }
            }
        }
    }
    appends
}

async fn appender(
    b: Arc<Broker>,
    mut rx: mpsc::UnboundedReceiver<(AppendToken, Vec<Record>)>,
    done: mpsc::UnboundedSender<AppendDone>,
) {
    while let Some((token, records)) = rx.recv().await {
        let result = append(&b, records).await;
        if done.send((token, result)).is_err() {
            return;
        }
    }
}

/// Appends a coordinator's records to the partitions of their groups.
async fn append(b: &Broker, records: Vec<Record>) -> Result<(), ResponseError> {
    let n = Groups::num_partitions(b);
    let mut by_partition: std::collections::BTreeMap<i32, Vec<Record>> =
        std::collections::BTreeMap::new();
    for r in records {
        let group = match gregor_group::records::decode_key(&r.key) {
            Ok(gregor_group::records::RecordKey::OffsetCommit { group, .. })
            | Ok(gregor_group::records::RecordKey::GroupMetadata { group }) => group,
            _ => String::new(),
        };
        by_partition
            .entry(partition_for(&group, n))
            .or_default()
            .push(r);
    }
    for (p, recs) in by_partition {
        let part = b
            .replicas
            .get(OFFSETS_TOPIC, p)
            .ok_or(ResponseError::NotLeaderOrFollower)?;
        let now = now_ms();
        let batch: Vec<gregor_log::records::Record> = recs
            .into_iter()
            .enumerate()
            .map(|(i, r)| gregor_log::records::Record {
                offset: i as i64,
                timestamp: now,
                key: Some(r.key),
                value: r.value,
                headers: Vec::new(),
            })
            .collect();
        let bytes = encode_batch(&BatchSpec::default(), &batch)
            .map_err(|_| ResponseError::UnknownServerError)?;
        part.spawn_append(Bytes::from(bytes))
            .done
            .await
            .map_err(|_| ResponseError::UnknownServerError)??;
    }
    Ok(())
}
