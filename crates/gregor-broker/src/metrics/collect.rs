//! Gauges read from the broker's state at scrape time: partitions and replication health from
//! the metadata image and the hosted replicas, log sizes, connections, the controller, and the
//! groups of this node's coordinator shards with their consumer lag.

use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, AtomicU64};

use gregor_meta::config::BrokerConfigView;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::Broker;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartitionLabels {
    topic: String,
    partition: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupLabels {
    group: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupPartitionLabels {
    group: String,
    topic: String,
    partition: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

fn gauge(registry: &mut Registry, name: &str, help: &str, value: i64) {
    let g = Gauge::<i64, AtomicI64>::default();
    g.set(value);
    registry.register(name, help, g);
}

fn family<L>(registry: &mut Registry, name: &str, help: &str) -> Family<L, Gauge>
where
    L: Clone + std::hash::Hash + Eq + EncodeLabelSet + std::fmt::Debug + Send + Sync + 'static,
{
    let f = Family::<L, Gauge>::default();
    registry.register(name, help, f.clone());
    f
}

fn partition_labels(topic: &str, partition: i32) -> PartitionLabels {
    PartitionLabels {
        topic: topic.to_string(),
        partition: partition.to_string(),
    }
}

/// A registry holding the state read now.
pub(super) async fn registry(b: &Broker) -> Registry {
    let mut r = Registry::default();
    broker_state(b, &mut r);
    groups(b, &mut r).await;
    r
}

fn broker_state(b: &Broker, r: &mut Registry) {
    let node = b.config.node_id;
    let image = b.metadata.image();
    let active = b.metadata.is_active_controller();
    gauge(
        r,
        "gregor_controller_active",
        "1 on the active controller, 0 elsewhere (Kafka ActiveControllerCount; the cluster's sum should be 1)",
        i64::from(active),
    );
    // Cluster-wide counts come from the active controller only, as in Kafka, so that summing
    // over the brokers counts each once.
    let (offline, fenced, registered) = if active {
        let offline = image
            .topics()
            .values()
            .flat_map(|t| t.partitions.values())
            .filter(|p| p.leader < 0 || !image.is_broker_active(p.leader))
            .count();
        let fenced = image.brokers().values().filter(|x| x.fenced).count();
        (offline, fenced, image.brokers().len())
    } else {
        (0, 0, 0)
    };
    gauge(
        r,
        "gregor_controller_offline_partitions",
        "Partitions without a live leader, reported by the active controller (Kafka OfflinePartitionsCount)",
        offline as i64,
    );
    gauge(
        r,
        "gregor_controller_fenced_brokers",
        "Registered brokers that are fenced, reported by the active controller (Kafka FencedBrokerCount)",
        fenced as i64,
    );
    gauge(
        r,
        "gregor_controller_registered_brokers",
        "Registered brokers, fenced or not, reported by the active controller",
        registered as i64,
    );
    gauge(
        r,
        "gregor_metadata_applied_index",
        "Metadata log entries this node has applied",
        i64::try_from(b.metadata.applied_index()).unwrap_or(i64::MAX),
    );
    let (sessions, session_partitions) = {
        let cache = b
            .fetch_sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (cache.len(), cache.partitions())
    };
    gauge(
        r,
        "gregor_fetch_sessions",
        "Incremental fetch sessions (KIP-227) held (Kafka NumIncrementalFetchSessions)",
        sessions as i64,
    );
    gauge(
        r,
        "gregor_fetch_session_partitions",
        "Partitions in all fetch sessions (Kafka NumIncrementalFetchPartitionsCached)",
        session_partitions as i64,
    );
    if let Some(open) = b.metrics.open_connections() {
        gauge(
            r,
            "gregor_connections",
            "Open client connections",
            open as i64,
        );
    }

    let size = family::<PartitionLabels>(
        r,
        "gregor_log_size_bytes",
        "Bytes of a hosted partition's log segments (Kafka Log Size)",
    );
    let leo = family::<PartitionLabels>(
        r,
        "gregor_log_end_offset",
        "Log end offset of a hosted partition",
    );
    let lso = family::<PartitionLabels>(
        r,
        "gregor_log_start_offset",
        "Log start offset of a hosted partition",
    );
    let hw = family::<PartitionLabels>(
        r,
        "gregor_partition_high_watermark",
        "High watermark of a hosted partition (on a follower: as far as its leader has told it)",
    );
    let under = family::<PartitionLabels>(r, "gregor_partition_under_replicated", "1 when a partition this broker leads has fewer in-sync replicas than replicas (Kafka UnderReplicated)");
    let under_min = family::<PartitionLabels>(r, "gregor_partition_under_min_isr", "1 when a partition this broker leads has fewer in-sync replicas than min.insync.replicas (Kafka UnderMinIsr)");
    let follower_lag = family::<PartitionLabels>(
        r,
        "gregor_replica_lag_offsets",
        "How far a follower replica on this broker trails its leader's high watermark, in offsets",
    );
    let view = BrokerConfigView::new(&image, &b.config.settings, node);
    let (mut hosted, mut leaders, mut under_count, mut under_min_count) = (0i64, 0i64, 0i64, 0i64);
    for p in b.replicas.all() {
        hosted += 1;
        let labels = partition_labels(&p.topic, p.index);
        size.get_or_create(&labels)
            .set(i64::try_from(p.log.size_bytes()).unwrap_or(i64::MAX));
        leo.get_or_create(&labels).set(p.log.log_end_offset());
        lso.get_or_create(&labels).set(p.log.log_start_offset());
        hw.get_or_create(&labels).set(p.high_watermark());
        let Some(reg) = image
            .topic(&p.topic)
            .and_then(|t| t.partitions.get(&p.index))
        else {
            continue;
        };
        if reg.leader != node {
            follower_lag.get_or_create(&labels).set(p.offset_lag());
            continue;
        }
        leaders += 1;
        let is_under = reg.isr.len() < reg.replicas.len();
        under.get_or_create(&labels).set(i64::from(is_under));
        under_count += i64::from(is_under);
        let min_isr = view
            .topic_value(&p.topic, "min.insync.replicas")
            .and_then(|v| v.value.as_i64())
            .unwrap_or(1);
        let is_under_min = (reg.isr.len() as i64) < min_isr;
        under_min
            .get_or_create(&labels)
            .set(i64::from(is_under_min));
        under_min_count += i64::from(is_under_min);
    }
    gauge(
        r,
        "gregor_partitions",
        "Partition replicas hosted by this broker (Kafka PartitionCount)",
        hosted,
    );
    gauge(
        r,
        "gregor_leader_partitions",
        "Partitions this broker leads (Kafka LeaderCount)",
        leaders,
    );
    gauge(r, "gregor_under_replicated_partitions", "Partitions this broker leads with fewer in-sync replicas than replicas (Kafka UnderReplicatedPartitions)", under_count);
    gauge(r, "gregor_under_min_isr_partitions", "Partitions this broker leads with fewer in-sync replicas than min.insync.replicas (Kafka UnderMinIsrPartitionCount)", under_min_count);
}

async fn groups(b: &Broker, r: &mut Registry) {
    let observed = b.groups.observe().await;
    let by_state = family::<StateLabels>(
        r,
        "gregor_groups",
        "Groups coordinated by this broker, per state (Kafka NumGroups<State>)",
    );
    for state in [
        "Empty",
        "PreparingRebalance",
        "CompletingRebalance",
        "Stable",
        "Dead",
    ] {
        drop(by_state.get_or_create(&StateLabels { state }));
    }
    let members = family::<GroupLabels>(
        r,
        "gregor_group_members",
        "Members of a group this broker coordinates",
    );
    let generation = family::<GroupLabels>(r, "gregor_group_generation", "A group's generation id");
    let rebalancing = family::<GroupLabels>(
        r,
        "gregor_group_rebalance_in_progress",
        "1 while a group is rebalancing",
    );
    let generations = Family::<GroupLabels, Counter>::default();
    r.register(
        "gregor_group_rebalances",
        "Rebalances of a group that formed a new generation, since this coordinator loaded the group",
        generations.clone(),
    );
    let completed = Family::<GroupLabels, Counter>::default();
    r.register(
        "gregor_group_rebalances_completed",
        "Rebalances of a group that finished (Stable or Empty), since this coordinator loaded the group",
        completed.clone(),
    );
    let seconds = Family::<GroupLabels, Counter<f64, AtomicU64>>::default();
    r.register(
        "gregor_group_rebalance_seconds",
        "Total duration of a group's finished rebalances, from PreparingRebalance to Stable; divide by gregor_group_rebalances_completed_total for the mean",
        seconds.clone(),
    );
    let last = Family::<GroupLabels, FloatGauge>::default();
    r.register(
        "gregor_group_last_rebalance_duration_seconds",
        "Duration of a group's last finished rebalance",
        last.clone(),
    );
    let committed = family::<GroupPartitionLabels>(
        r,
        "gregor_consumer_group_committed_offset",
        "A group's committed offset for a partition",
    );
    let lag = family::<GroupPartitionLabels>(r, "gregor_consumer_group_lag_offsets", "High watermark minus the committed offset, the high watermark from the partition's leader (read here when this broker leads it, else asked of the leader with ListOffsets, refreshed at most every 2 s; no series while the leader does not answer). Reported by the group's coordinator only: summing over brokers counts each group once");
    let time_lag = Family::<GroupPartitionLabels, FloatGauge>::default();
    r.register(
        "gregor_consumer_group_lag_seconds",
        "Age of the first unconsumed record (now minus the first timestamp of the batch holding the committed offset), where the coordinator hosts a replica holding that batch (remote batches are not fetched: no series for partitions without a replica here)",
        time_lag.clone(),
    );
    let failures = Counter::<u64>::default();
    failures.inc_by(b.cluster_view.high_watermark_failures());
    r.register(
        "gregor_consumer_group_remote_high_watermark_failures",
        "Lookups of a partition's high watermark at its leader (for the lag of the groups coordinated here) that failed; the lag of that partition is left out until a lookup succeeds",
        failures,
    );
    let now_ms = crate::util::now_ms();
    let group_lag = family::<GroupLabels>(
        r,
        "gregor_consumer_group_lag_sum_offsets",
        "Sum of a group's lag over its partitions whose high watermark is known",
    );

    // One look per partition however many groups commit to it.
    let wanted: HashSet<(String, i32)> = observed
        .iter()
        .flat_map(|g| g.offsets.iter().map(|(t, p, _)| (t.clone(), *p)))
        .collect();
    let hws = b.cluster_view.high_watermarks(b, wanted).await;
    for g in &observed {
        let s = &g.summary;
        by_state
            .get_or_create(&StateLabels {
                state: s.state.name(),
            })
            .inc();
        let labels = GroupLabels {
            group: s.group_id.clone(),
        };
        members.get_or_create(&labels).set(s.members.len() as i64);
        generation
            .get_or_create(&labels)
            .set(i64::from(s.generation_id));
        rebalancing
            .get_or_create(&labels)
            .set(i64::from(g.rebalances.in_progress().is_some()));
        generations
            .get_or_create(&labels)
            .inc_by(g.rebalances.generations);
        completed
            .get_or_create(&labels)
            .inc_by(g.rebalances.completed);
        seconds
            .get_or_create(&labels)
            .inc_by(g.rebalances.completed_ms_total as f64 / 1000.0);
        if let Some(done) = g
            .rebalances
            .recent
            .iter()
            .rev()
            .find_map(|x| x.completed_ms.map(|end| (end - x.started_ms).max(0)))
        {
            last.get_or_create(&labels).set(done as f64 / 1000.0);
        }
        let mut sum = None::<i64>;
        for (topic, partition, offset) in &g.offsets {
            let labels = GroupPartitionLabels {
                group: s.group_id.clone(),
                topic: topic.clone(),
                partition: partition.to_string(),
            };
            committed.get_or_create(&labels).set(*offset);
            if let Some(&hw) = hws.get(&(topic.clone(), *partition)) {
                let l = (hw - offset).max(0);
                lag.get_or_create(&labels).set(l);
                *sum.get_or_insert(0) += l;
                if l > 0 {
                    if let Some(ts) =
                        first_unconsumed_timestamp(b, topic, *partition, *offset).await
                    {
                        let age = (now_ms - ts).max(0) as f64 / 1000.0;
                        time_lag.get_or_create(&labels).set(age);
                    }
                }
            }
        }
        if let Some(sum) = sum {
            group_lag.get_or_create(&labels).set(sum);
        }
    }
}

/// The first timestamp of the record batch holding `offset` in a hosted replica's log (bytes
/// 27..35 of a v2 batch header), read below this replica's high watermark; `None` when the
/// replica or the offset is not here (a follower that has not replicated it yet, a partition
/// without a replica here).
async fn first_unconsumed_timestamp(
    b: &Broker,
    topic: &str,
    partition: i32,
    offset: i64,
) -> Option<i64> {
    let part = b.replicas.get(topic, partition)?;
    let hw = part.high_watermark();
    let read = crate::util::blocking(move || part.log.read(offset, 1, Some(hw))).await;
    let header = read.ok()?.records.get(27..35)?.try_into().ok()?;
    Some(i64::from_be_bytes(header))
}
