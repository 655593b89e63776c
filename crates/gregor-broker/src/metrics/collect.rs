//! Gauges read from the broker's state at scrape time: partitions and replication health from
//! the metadata image and the hosted replicas, log sizes, connections, the controller, and the
//! groups of this node's coordinator shards with their consumer lag, and transactions: the
//! coordinator shards' transactional ids, each led partition's open transactions and last
//! stable offset.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, AtomicU64};

use gregor_meta::config::BrokerConfigView;
use gregor_meta::MetadataImage;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::broker_view::BrokerView;
use crate::groups::GroupObservation;
use crate::metrics::partitions::PartitionFilter;
use crate::metrics::{kafka_names, process, txns};

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

/// A metric without labels, registered; its handle.
fn registered<M>(registry: &mut Registry, name: &str, help: &str) -> M
where
    M: prometheus_client::registry::Metric + Clone + Default,
{
    let m = M::default();
    registry.register(name, help, m.clone());
    m
}

fn partition_labels(topic: &str, partition: i32) -> PartitionLabels {
    PartitionLabels {
        topic: topic.to_string(),
        partition: partition.to_string(),
    }
}

/// The whole scrape: the event metrics and the state read now.
pub(super) async fn render(b: BrokerView<'_>) -> String {
    let state = registry(b).await;
    let mut out = String::with_capacity(16 * 1024);
    let encoded = b
        .metrics
        .encode_events(&mut out)
        .and_then(|()| prometheus_client::encoding::text::encode_registry(&mut out, &state))
        .map(|()| {
            // metrics.naming=kafka: the same values again under Kafka's names.
            if kafka_names::enabled(&b.config.settings) {
                let kafka = kafka_names::render(&out);
                out.push_str(&kafka);
            }
        })
        .and_then(|()| prometheus_client::encoding::text::encode_eof(&mut out));
    if let Err(e) = encoded {
        tracing::warn!(error = %e, "cannot encode metrics");
    }
    out
}

/// A registry holding the state read now.
async fn registry(b: BrokerView<'_>) -> Registry {
    let mut r = Registry::default();
    host_state(b, &mut r).await;
    broker_state(b, &mut r);
    groups(b, &mut r).await;
    transactions(b, &mut r).await;
    r
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LogDirLabels {
    log_dir: String,
}

/// The process (`/proc/self`), its async runtime, the build, and the data directory's file
/// system.
async fn host_state(b: BrokerView<'_>, r: &mut Registry) {
    if let Some(runtime) = process::runtime_sample() {
        process::register_runtime(r, &runtime);
    }
    let dir = b.replicas.data_dir().to_path_buf();
    // statvfs can wait on a slow file system: off the async workers, with the /proc reads.
    let (sample, space) = crate::runtime::blocking(move || {
        let sample = process::sample(&process::RealProc, process::ticks_per_second());
        let space = gregor_log::Disk::real().space(&dir);
        (sample, (std::path::absolute(&dir).unwrap_or(dir), space))
    })
    .await;
    process::register(r, &sample);
    let (dir, space) = space;
    match space {
        Ok((total, usable)) => {
            let labels = LogDirLabels {
                log_dir: dir.display().to_string(),
            };
            let free = family::<LogDirLabels>(
                r,
                "gregor_log_dir_free_bytes",
                "Bytes still usable by the broker on the file system of a log directory (DescribeLogDirs' usable_bytes)",
            );
            free.get_or_create(&labels)
                .set(i64::try_from(usable).unwrap_or(i64::MAX));
            let size = family::<LogDirLabels>(
                r,
                "gregor_log_dir_total_bytes",
                "Size of the file system of a log directory (DescribeLogDirs' total_bytes)",
            );
            size.get_or_create(&labels)
                .set(i64::try_from(total).unwrap_or(i64::MAX));
        }
        Err(e) => {
            tracing::debug!(dir = %dir.display(), error = %e, "cannot read the log directory's disk space");
        }
    }
}

fn broker_state(b: BrokerView<'_>, r: &mut Registry) {
    let image = b.metadata.image();
    controller_gauges(b, &image, r);
    session_gauges(b, r);
    cleaner_gauges(b, r);
    partition_gauges(b, &image, r);
}

/// The controller's view: whether this node is the active controller and, there only, the
/// cluster-wide counts; the metadata applied here.
fn controller_gauges(b: BrokerView<'_>, image: &MetadataImage, r: &mut Registry) {
    let active = b.metadata.is_active_controller();
    gauge(
        r,
        "gregor_controller_active",
        "1 on the active controller, 0 elsewhere (Kafka ActiveControllerCount; the cluster's sum should be 1)",
        i64::from(active),
    );
    // Cluster-wide counts come from the active controller only, as in Kafka, so that summing
    // over the brokers counts each once.
    let (offline, fenced, registered, imbalance) = if active {
        let partitions = || image.topics().values().flat_map(|t| t.partitions.values());
        let offline = partitions()
            .filter(|p| p.leader < 0 || !image.is_broker_active(p.leader))
            .count();
        // Led by another replica than the first of its list, the preferred one (offline
        // partitions included, as in Kafka).
        let imbalance = partitions()
            .filter(|p| p.replicas.first() != Some(&p.leader))
            .count();
        let fenced = image.brokers().values().filter(|x| x.fenced).count();
        (offline, fenced, image.brokers().len(), imbalance)
    } else {
        (0, 0, 0, 0)
    };
    gauge(
        r,
        "gregor_controller_preferred_replica_imbalance",
        "Partitions whose leader is not their preferred (first) replica, reported by the active controller (Kafka PreferredReplicaImbalanceCount)",
        imbalance as i64,
    );
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
    raft_gauges(b, r);
}

/// The metadata quorum as this node sees it: the leader (the active controller) everywhere,
/// the term on the voters, which take part in it.
fn raft_gauges(b: BrokerView<'_>, r: &mut Registry) {
    gauge(
        r,
        "gregor_raft_current_leader",
        "Node id of the metadata quorum's leader, the active controller, as this node knows it; -1 when none is known (Kafka raft-metrics current-leader)",
        b.metadata.active_controller().map_or(-1, i64::from),
    );
    if let Some(q) = b.metadata.quorum() {
        gauge(
            r,
            "gregor_raft_current_epoch",
            "The metadata quorum's Raft term as this voter knows it (Kafka raft-metrics current-epoch)",
            i64::try_from(q.term()).unwrap_or(i64::MAX),
        );
        r.register(
            "gregor_raft_commit_latency_seconds",
            "Time from a controller write handed to Raft until it was committed and applied, on this voter while it led (Kafka raft-metrics commit-latency)",
            b.metadata.commit_latency().clone(),
        );
    }
    let elections = b.metadata.leader_elections();
    registered::<Counter>(
        r,
        "gregor_controller_leader_elections",
        "Partition leader elections (a partition got another live leader: failover, preferred, reassignment or unclean) this node applied from the metadata log since it started; every node counts each one (Kafka LeaderElectionRateAndTimeMs count)",
    )
    .inc_by(elections.clean + elections.unclean);
    registered::<Counter>(
        r,
        "gregor_controller_unclean_leader_elections",
        "Of those, leaders chosen from outside the ISR (Kafka UncleanLeaderElectionsPerSec)",
    )
    .inc_by(elections.unclean);
}

/// How long ago the log cleaner last looked at the logs (none before its first pass, or
/// with log.cleaner.enable=false).
fn cleaner_gauges(b: BrokerView<'_>, r: &mut Registry) {
    if let Some(last) = b.metrics.log_cleaner().last_run_ms() {
        let since = crate::runtime::now_ms().saturating_sub(last).max(0);
        registered::<FloatGauge>(
            r,
            "gregor_log_cleaner_time_since_last_run_seconds",
            "Time since the log cleaner's last pass over the logs ended (Kafka time-since-last-run-ms)",
        )
        .set(since as f64 / 1000.0);
    }
}

/// Fetch sessions held and client connections open.
fn session_gauges(b: BrokerView<'_>, r: &mut Registry) {
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
}

/// The per-partition series of the replicas this broker hosts.
struct PartitionFamilies {
    size: Family<PartitionLabels, Gauge>,
    leo: Family<PartitionLabels, Gauge>,
    lso: Family<PartitionLabels, Gauge>,
    hw: Family<PartitionLabels, Gauge>,
    under: Family<PartitionLabels, Gauge>,
    under_min: Family<PartitionLabels, Gauge>,
    follower_lag: Family<PartitionLabels, Gauge>,
}

impl PartitionFamilies {
    fn register(r: &mut Registry) -> PartitionFamilies {
        PartitionFamilies {
            size: family(
                r,
                "gregor_log_size_bytes",
                "Bytes of a hosted partition's log segments (Kafka Log Size)",
            ),
            leo: family(
                r,
                "gregor_log_end_offset",
                "Log end offset of a hosted partition",
            ),
            lso: family(
                r,
                "gregor_log_start_offset",
                "Log start offset of a hosted partition",
            ),
            hw: family(
                r,
                "gregor_partition_high_watermark",
                "High watermark of a hosted partition (on a follower: as far as its leader has told it)",
            ),
            under: family(
                r,
                "gregor_partition_under_replicated",
                "1 when a partition this broker leads has fewer in-sync replicas than replicas (Kafka UnderReplicated)",
            ),
            under_min: family(
                r,
                "gregor_partition_under_min_isr",
                "1 when a partition this broker leads has fewer in-sync replicas than min.insync.replicas (Kafka UnderMinIsr)",
            ),
            follower_lag: family(
                r,
                "gregor_replica_lag_offsets",
                "How far a follower replica on this broker trails its leader's high watermark, in offsets",
            ),
        }
    }
}

/// How many hosted replicas this broker leads, and of those how many are under-replicated and
/// under `min.insync.replicas`.
#[derive(Default)]
struct LeaderCounts {
    hosted: i64,
    leaders: i64,
    under: i64,
    under_min: i64,
}

fn partition_gauges(b: BrokerView<'_>, image: &MetadataImage, r: &mut Registry) {
    let families = PartitionFamilies::register(r);
    let view = BrokerConfigView::new(image, &b.config.settings, b.node_id());
    let filter = partition_filter(b);
    let mut counts = LeaderCounts::default();
    for p in b.replicas.all() {
        counts.hosted += 1;
        // Left out of the per-partition series (metrics.partition.topics), still counted.
        let series = filter.includes(&p.topic);
        let labels = partition_labels(&p.topic, p.index);
        if series {
            families
                .size
                .get_or_create(&labels)
                .set(i64::try_from(p.log.size_bytes()).unwrap_or(i64::MAX));
            families
                .leo
                .get_or_create(&labels)
                .set(p.log.log_end_offset());
            families
                .lso
                .get_or_create(&labels)
                .set(p.log.log_start_offset());
            families.hw.get_or_create(&labels).set(p.high_watermark());
        }
        let Some(reg) = image
            .topic(&p.topic)
            .and_then(|t| t.partitions.get(&p.index))
        else {
            continue;
        };
        if reg.leader != b.node_id() {
            if series {
                families
                    .follower_lag
                    .get_or_create(&labels)
                    .set(p.offset_lag());
            }
            continue;
        }
        counts.leaders += 1;
        let is_under = reg.isr.len() < reg.replicas.len();
        counts.under += i64::from(is_under);
        let min_isr = view
            .topic_value(&p.topic, "min.insync.replicas")
            .and_then(|v| v.value.as_i64())
            .unwrap_or(1);
        let is_under_min = (reg.isr.len() as i64) < min_isr;
        counts.under_min += i64::from(is_under_min);
        if series {
            families
                .under
                .get_or_create(&labels)
                .set(i64::from(is_under));
            families
                .under_min
                .get_or_create(&labels)
                .set(i64::from(is_under_min));
        }
    }
    leader_count_gauges(&counts, r);
}

/// `metrics.partition.topics` of this broker (validated at start-up with the listener).
fn partition_filter(b: BrokerView<'_>) -> PartitionFilter {
    PartitionFilter::from_settings(&b.config.settings).unwrap_or_else(|e| {
        tracing::debug!(error = %e, "default per-partition series");
        PartitionFilter::default()
    })
}

fn leader_count_gauges(counts: &LeaderCounts, r: &mut Registry) {
    gauge(
        r,
        "gregor_partitions",
        "Partition replicas hosted by this broker (Kafka PartitionCount)",
        counts.hosted,
    );
    gauge(
        r,
        "gregor_leader_partitions",
        "Partitions this broker leads (Kafka LeaderCount)",
        counts.leaders,
    );
    gauge(
        r,
        "gregor_under_replicated_partitions",
        "Partitions this broker leads with fewer in-sync replicas than replicas (Kafka UnderReplicatedPartitions)",
        counts.under,
    );
    gauge(
        r,
        "gregor_under_min_isr_partitions",
        "Partitions this broker leads with fewer in-sync replicas than min.insync.replicas (Kafka UnderMinIsrPartitionCount)",
        counts.under_min,
    );
}

/// The per-group series of the groups this node coordinates: state, members, rebalances.
struct GroupFamilies {
    by_state: Family<StateLabels, Gauge>,
    members: Family<GroupLabels, Gauge>,
    generation: Family<GroupLabels, Gauge>,
    rebalancing: Family<GroupLabels, Gauge>,
    generations: Family<GroupLabels, Counter>,
    completed: Family<GroupLabels, Counter>,
    seconds: Family<GroupLabels, Counter<f64, AtomicU64>>,
    last: Family<GroupLabels, FloatGauge>,
}

impl GroupFamilies {
    fn register(r: &mut Registry) -> GroupFamilies {
        let by_state = family::<StateLabels>(
            r,
            "gregor_groups",
            "Groups coordinated by this broker, per state (Kafka NumGroups<State>)",
        );
        // Every state has a series, zero when no group is in it.
        for state in [
            "Empty",
            "PreparingRebalance",
            "CompletingRebalance",
            "Stable",
            "Dead",
        ] {
            drop(by_state.get_or_create(&StateLabels { state }));
        }
        GroupFamilies {
            by_state,
            members: family(
                r,
                "gregor_group_members",
                "Members of a group this broker coordinates",
            ),
            generation: family(r, "gregor_group_generation", "A group's generation id"),
            rebalancing: family(
                r,
                "gregor_group_rebalance_in_progress",
                "1 while a group is rebalancing",
            ),
            generations: registered(
                r,
                "gregor_group_rebalances",
                "Rebalances of a group that formed a new generation, since this coordinator loaded the group",
            ),
            completed: registered(
                r,
                "gregor_group_rebalances_completed",
                "Rebalances of a group that finished (Stable or Empty), since this coordinator loaded the group",
            ),
            seconds: registered(
                r,
                "gregor_group_rebalance_seconds",
                "Total duration of a group's finished rebalances, from PreparingRebalance to Stable; divide by gregor_group_rebalances_completed_total for the mean",
            ),
            last: registered(
                r,
                "gregor_group_last_rebalance_duration_seconds",
                "Duration of a group's last finished rebalance",
            ),
        }
    }

    /// One group's state and rebalance series.
    fn record(&self, g: &GroupObservation) {
        let s = &g.summary;
        self.by_state
            .get_or_create(&StateLabels {
                state: s.state.name(),
            })
            .inc();
        let labels = GroupLabels {
            group: s.group_id.clone(),
        };
        self.members
            .get_or_create(&labels)
            .set(s.members.len() as i64);
        self.generation
            .get_or_create(&labels)
            .set(i64::from(s.generation_id));
        self.rebalancing
            .get_or_create(&labels)
            .set(i64::from(g.rebalances.in_progress().is_some()));
        self.generations
            .get_or_create(&labels)
            .inc_by(g.rebalances.generations);
        self.completed
            .get_or_create(&labels)
            .inc_by(g.rebalances.completed);
        self.seconds
            .get_or_create(&labels)
            .inc_by(g.rebalances.completed_ms_total as f64 / 1000.0);
        if let Some(done) = g
            .rebalances
            .recent
            .iter()
            .rev()
            .find_map(|x| x.completed_ms.map(|end| (end - x.started_ms).max(0)))
        {
            self.last.get_or_create(&labels).set(done as f64 / 1000.0);
        }
    }
}

/// The consumer lag series of the groups this node coordinates.
struct LagFamilies {
    committed: Family<GroupPartitionLabels, Gauge>,
    lag: Family<GroupPartitionLabels, Gauge>,
    time_lag: Family<GroupPartitionLabels, FloatGauge>,
    group_lag: Family<GroupLabels, Gauge>,
}

impl LagFamilies {
    fn register(r: &mut Registry, remote_failures: u64) -> LagFamilies {
        let committed = family(
            r,
            "gregor_consumer_group_committed_offset",
            "A group's committed offset for a partition",
        );
        let lag = family(
            r,
            "gregor_consumer_group_lag_offsets",
            "High watermark minus the committed offset, the high watermark from the partition's leader (read here when this broker leads it, else asked of the leader with ListOffsets, refreshed at most every 2 s; no series while the leader does not answer). Reported by the group's coordinator only: summing over brokers counts each group once",
        );
        let time_lag = registered(
            r,
            "gregor_consumer_group_lag_seconds",
            "Age of the first unconsumed record (now minus the first timestamp of the batch holding the committed offset), where the coordinator hosts a replica holding that batch (remote batches are not fetched: no series for partitions without a replica here)",
        );
        let failures = Counter::<u64>::default();
        failures.inc_by(remote_failures);
        r.register(
            "gregor_consumer_group_remote_high_watermark_failures",
            "Lookups of a partition's high watermark at its leader (for the lag of the groups coordinated here) that failed; the lag of that partition is left out until a lookup succeeds",
            failures,
        );
        let group_lag = family(
            r,
            "gregor_consumer_group_lag_sum_offsets",
            "Sum of a group's lag over its partitions whose high watermark is known",
        );
        LagFamilies {
            committed,
            lag,
            time_lag,
            group_lag,
        }
    }

    /// One group's committed offsets and lag, against the leaders' high watermarks `hws`;
    /// per partition of the topics `filter` includes.
    async fn record(
        &self,
        b: BrokerView<'_>,
        (group, offsets): (&String, &[(String, i32, i64)]),
        hws: &HashMap<(String, i32), i64>,
        filter: &PartitionFilter,
        now_ms: i64,
    ) {
        let mut sum = None::<i64>;
        for (topic, partition, offset) in offsets {
            let series = filter.includes(topic);
            let labels = GroupPartitionLabels {
                group: group.clone(),
                topic: topic.clone(),
                partition: partition.to_string(),
            };
            if series {
                self.committed.get_or_create(&labels).set(*offset);
            }
            let Some(&hw) = hws.get(&(topic.clone(), *partition)) else {
                continue;
            };
            let l = (hw - offset).max(0);
            *sum.get_or_insert(0) += l;
            if !series {
                continue;
            }
            self.lag.get_or_create(&labels).set(l);
            if l > 0 {
                if let Some(ts) = first_unconsumed_timestamp(b, topic, *partition, *offset).await {
                    let age = (now_ms - ts).max(0) as f64 / 1000.0;
                    self.time_lag.get_or_create(&labels).set(age);
                }
            }
        }
        if let Some(sum) = sum {
            self.group_lag
                .get_or_create(&GroupLabels {
                    group: group.clone(),
                })
                .set(sum);
        }
    }
}

async fn groups(b: BrokerView<'_>, r: &mut Registry) {
    let observed = b.groups.observe().await;
    let consumer = b.groups.observe_consumer().await;
    let families = GroupFamilies::register(r);
    let consumer_families = ConsumerGroupFamilies::register(r);
    let lags = LagFamilies::register(r, b.cluster_view.high_watermark_failures());
    let now_ms = crate::runtime::now_ms();
    // One look per partition however many groups commit to it.
    let wanted: HashSet<(String, i32)> = observed
        .iter()
        .map(|g| &g.offsets)
        .chain(consumer.iter().map(|g| &g.offsets))
        .flat_map(|o| o.iter().map(|(t, p, _)| (t.clone(), *p)))
        .collect();
    let hws = b
        .cluster_view
        .high_watermarks(b.metadata, b.replicas, wanted)
        .await;
    let filter = partition_filter(b);
    for g in &observed {
        families.record(g);
        let of = (&g.summary.group_id, g.offsets.as_slice());
        lags.record(b, of, &hws, &filter, now_ms).await;
    }
    for g in &consumer {
        consumer_families.record(g);
        lags.record(
            b,
            (&g.group_id, g.offsets.as_slice()),
            &hws,
            &filter,
            now_ms,
        )
        .await;
    }
}

/// The KIP-848 consumer groups' series: epochs, members, and how their rebalances went.
struct ConsumerGroupFamilies {
    by_state: Family<StateLabels, Gauge>,
    epoch: Family<GroupLabels, Gauge>,
    target_epoch: Family<GroupLabels, Gauge>,
    members: Family<GroupLabels, Gauge>,
    classic_members: Family<GroupLabels, Gauge>,
    reconciliations: Family<GroupLabels, Counter>,
    reconciliation_seconds: Family<GroupLabels, Counter<f64, AtomicU64>>,
    last_reconciliation: Family<GroupLabels, FloatGauge>,
    assignments: Family<GroupLabels, Counter>,
    assignment_seconds: Family<GroupLabels, Counter<f64, AtomicU64>>,
}

impl ConsumerGroupFamilies {
    fn register(r: &mut Registry) -> ConsumerGroupFamilies {
        let by_state = family::<StateLabels>(
            r,
            "gregor_consumer_groups",
            "KIP-848 consumer groups coordinated by this broker, per state (Empty, Assigning, Reconciling, Stable)",
        );
        for state in ["Empty", "Assigning", "Reconciling", "Stable"] {
            drop(by_state.get_or_create(&StateLabels { state }));
        }
        let g = |r: &mut Registry, name, help| family::<GroupLabels>(r, name, help);
        ConsumerGroupFamilies {
            by_state,
            epoch: g(r, "gregor_consumer_group_epoch", "A consumer group's group epoch"),
            target_epoch: g(r, "gregor_consumer_group_target_assignment_epoch", "The group epoch a consumer group's target assignment was computed for"),
            members: g(r, "gregor_consumer_group_members", "Members of a consumer group"),
            classic_members: g(r, "gregor_consumer_group_classic_members", "Members of a consumer group that speak the classic protocol (a migration under way)"),
            reconciliations: registered(r, "gregor_consumer_group_reconciliations", "Reconciliations of a consumer group that finished (every member at its target), since this coordinator loaded the group"),
            reconciliation_seconds: registered(r, "gregor_consumer_group_reconciliation_seconds", "Total duration of a consumer group's finished reconciliations, from the first change to every member holding its target"),
            last_reconciliation: registered(r, "gregor_consumer_group_last_reconciliation_seconds", "Duration of a consumer group's last finished reconciliation"),
            assignments: registered(r, "gregor_consumer_group_target_assignments", "Target assignments computed for a consumer group, since this coordinator loaded it"),
            assignment_seconds: registered(r, "gregor_consumer_group_assignment_seconds", "Total time the coordinator spent in requests that computed a consumer group's target assignment"),
        }
    }

    fn record(&self, g: &crate::groups::ConsumerGroupObservation) {
        self.by_state
            .get_or_create(&StateLabels { state: g.state })
            .inc();
        let labels = GroupLabels {
            group: g.group_id.clone(),
        };
        self.epoch
            .get_or_create(&labels)
            .set(i64::from(g.group_epoch));
        self.target_epoch
            .get_or_create(&labels)
            .set(i64::from(g.target_epoch));
        self.members.get_or_create(&labels).set(g.members as i64);
        self.classic_members
            .get_or_create(&labels)
            .set(g.classic_members as i64);
        let s = &g.stats;
        self.reconciliations
            .get_or_create(&labels)
            .inc_by(s.reconciliations);
        self.reconciliation_seconds
            .get_or_create(&labels)
            .inc_by(s.reconciliation_ms_total as f64 / 1000.0);
        if let Some(ms) = s.last_reconciliation_ms {
            self.last_reconciliation
                .get_or_create(&labels)
                .set(ms as f64 / 1000.0);
        }
        self.assignments.get_or_create(&labels).inc_by(s.targets);
        self.assignment_seconds
            .get_or_create(&labels)
            .inc_by(g.assignment.seconds_total);
    }
}

/// The first timestamp of the record batch holding `offset` in a hosted replica's log (bytes
/// 27..35 of a v2 batch header), read below this replica's high watermark; `None` when the
/// replica or the offset is not here (a follower that has not replicated it yet, a partition
/// without a replica here).
async fn first_unconsumed_timestamp(
    b: BrokerView<'_>,
    topic: &str,
    partition: i32,
    offset: i64,
) -> Option<i64> {
    let part = b.replicas.get(topic, partition)?;
    let hw = part.high_watermark();
    let read = crate::runtime::blocking(move || part.log.read(offset, 1, Some(hw))).await;
    let header = read.ok()?.records.get(27..35)?.try_into().ok()?;
    Some(i64::from_be_bytes(header))
}

/// Transactions: the transactional ids of this node's coordinator shards by state, and per
/// partition led here its open transactions and how far and how long its last stable offset
/// trails the high watermark.
async fn transactions(b: BrokerView<'_>, r: &mut Registry) {
    let by_state = family::<StateLabels>(
        r,
        "gregor_transactional_ids",
        "Transactional ids of the transaction coordinator shards on this broker, per state (Ongoing, PrepareCommit, PrepareAbort... as ListTransactions names them)",
    );
    // The counts only: the open transactions themselves are the console's.
    let coordinator = txns::coordinator(b, 0).await;
    for state in gregor_group::txn::TransactionState::ALL {
        let n = coordinator.by_state.get(&state).copied().unwrap_or(0);
        by_state
            .get_or_create(&StateLabels {
                state: state.name(),
            })
            .set(n);
    }
    let open = family::<PartitionLabels>(
        r,
        "gregor_partition_open_transactions",
        "Producers with a transaction open in a partition this broker leads",
    );
    let lag = family::<PartitionLabels>(
        r,
        "gregor_partition_last_stable_offset_lag_offsets",
        "High watermark minus last stable offset of a partition this broker leads: what read_committed consumers cannot read yet (Kafka LastStableOffsetLag)",
    );
    let stalled_for = registered::<Family<PartitionLabels, FloatGauge>>(
        r,
        "gregor_partition_last_stable_offset_stalled_seconds",
        "How long the last stable offset of a partition this broker leads has trailed its high watermark at the same offset (0 when it does not trail it)",
    );
    let mut stalled = 0;
    let filter = partition_filter(b);
    for p in txns::led_partitions(b, crate::runtime::now_ms()).await {
        stalled += i64::from(p.stalled());
        if !filter.includes(&p.topic) {
            continue;
        }
        let labels = partition_labels(&p.topic, p.partition);
        open.get_or_create(&labels).set(p.open_transactions as i64);
        lag.get_or_create(&labels).set(p.lag());
        stalled_for
            .get_or_create(&labels)
            .set(p.stalled_ms as f64 / 1000.0);
    }
    gauge(
        r,
        "gregor_last_stable_offset_stalled_partitions",
        "Partitions this broker leads whose last stable offset has trailed the high watermark at the same offset for more than 60 s (a hanging transaction, or markers not written)",
        stalled,
    );
}
