//! `metrics.naming=kafka`: the scrape also carries the names the Prometheus JMX exporter's
//! usual Kafka broker rules give Kafka's MBeans (`kafka_server_brokertopicmetrics_*`,
//! `kafka_network_requestmetrics_*`, ...), and kafka_exporter's consumer lag names, so that
//! Kafka dashboards and alerts work unchanged.
//!
//! A thin mapping over Gregor's own exposition: it reads the text `collect` rendered, so a
//! Kafka name is exported only where the Gregor family it comes from is, with the same
//! values. Kafka's histograms are summaries with quantile labels; they are estimated from
//! Gregor's buckets, over everything observed since the broker started. docs/metrics.md lists
//! each name and its source.

use gregor_meta::config::{ConfigValue, StaticBrokerConfig};

/// The setting's name.
pub const SETTING: &str = "metrics.naming";

/// Whether the broker's settings ask for the Kafka names too.
pub fn enabled(settings: &StaticBrokerConfig) -> bool {
    matches!(settings.get(SETTING), Some(ConfigValue::String(s)) if s == "kafka")
}

/// One sample of the exposition; label values stay escaped as they were written.
#[derive(Debug, Clone, PartialEq)]
struct Sample<'a> {
    name: &'a str,
    labels: Vec<(&'a str, &'a str)>,
    value: f64,
}

impl Sample<'_> {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }
}

/// The samples of an exposition.
fn parse(text: &str) -> Vec<Sample<'_>> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(parse_sample)
        .collect()
}

/// `name{k="v",...} value`, or `name value`.
/// The braces around a sample's labels (spelt as escapes: brace-counting tools then see
/// balanced code).
const LABELS_OPEN: char = '\u{7b}';
const LABELS_CLOSE: char = '\u{7d}';

fn parse_sample(line: &str) -> Option<Sample<'_>> {
    let name_end = line.find([LABELS_OPEN, ' '])?;
    let name = &line[..name_end];
    let mut labels = Vec::new();
    let mut rest = &line[name_end..];
    if let Some(mut inner) = rest.strip_prefix(LABELS_OPEN) {
        while let Some(eq) = inner.find("=\"") {
            let key = inner[..eq].trim_start_matches(',');
            let after = &inner[eq + 2..];
            let end = closing_quote(after)?;
            labels.push((key, &after[..end]));
            inner = &after[end + 1..];
        }
        rest = inner.strip_prefix(LABELS_CLOSE)?;
    }
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// The index of the `"` ending an escaped label value.
fn closing_quote(s: &str) -> Option<usize> {
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            '"' if !escaped => return Some(i),
            _ => escaped = false,
        }
    }
    None
}

/// A sample to write: its name's suffix (`_total`, `_count`...), labels and value.
type OutSample = (&'static str, Vec<(String, String)>, f64);

/// A Gregor label, the Kafka label it becomes, and how Kafka spells its value.
type LabelMap = (&'static str, &'static str, fn(&str) -> String);

/// A Kafka family being built.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: Vec<OutSample>,
}

/// The Kafka families, in the order they are first named.
#[derive(Default)]
struct Out {
    families: Vec<Family>,
}

impl Out {
    fn family(
        &mut self,
        name: &'static str,
        kind: &'static str,
        help: &'static str,
    ) -> &mut Family {
        let i = match self.families.iter().position(|f| f.name == name) {
            Some(i) => i,
            None => {
                self.families.push(Family {
                    name,
                    kind,
                    help,
                    samples: Vec::new(),
                });
                self.families.len() - 1
            }
        };
        &mut self.families[i]
    }

    fn encode(&self) -> String {
        let mut s = String::new();
        for f in self.families.iter().filter(|f| !f.samples.is_empty()) {
            s.push_str(&format!(
                "# HELP {} {}\n# TYPE {} {}\n",
                f.name, f.help, f.name, f.kind
            ));
            for (suffix, labels, value) in &f.samples {
                let labels: Vec<String> =
                    labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
                let labels = if labels.is_empty() {
                    String::new()
                } else {
                    format!("{{{}}}", labels.join(","))
                };
                s.push_str(&format!("{}{suffix}{labels} {value}\n", f.name));
            }
        }
        s
    }
}

/// A Gregor sample family and the Kafka family it is exported as, sample by sample.
struct Rename {
    from: &'static str,
    to: &'static str,
    kind: &'static str,
    help: &'static str,
    /// Gregor label -> Kafka label, with the value's spelling; other labels are dropped.
    labels: &'static [LabelMap],
    /// Only samples whose label has (or, with `false`, has not) this value.
    only: Option<(&'static str, &'static str, bool)>,
    /// Multiplies the value (ratio -> percent, seconds -> ms).
    scale: f64,
}

fn same(v: &str) -> String {
    v.to_string()
}

/// `produce` -> `Produce`: Kafka's delayedOperation names.
fn capitalized(v: &str) -> String {
    let mut c = v.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

const TOPIC: LabelMap = ("topic", "topic", same);
const PARTITION: LabelMap = ("partition", "partition", same);

const fn gauge(from: &'static str, to: &'static str, help: &'static str) -> Rename {
    Rename {
        from,
        to,
        kind: "gauge",
        help,
        labels: &[],
        only: None,
        scale: 1.0,
    }
}

const fn per_partition(from: &'static str, to: &'static str, help: &'static str) -> Rename {
    Rename {
        labels: &[TOPIC, PARTITION],
        ..gauge(from, to, help)
    }
}

/// Counters and gauges exported under another name, sample by sample.
const RENAMES: &[Rename] = &[
    Rename { kind: "counter", labels: &[TOPIC], ..gauge("gregor_topic_messages_in_total", "kafka_server_brokertopicmetrics_messagesin", "Records appended by producers (gregor_topic_messages_in_total)") },
    Rename { kind: "counter", labels: &[TOPIC], ..gauge("gregor_topic_bytes_in_total", "kafka_server_brokertopicmetrics_bytesin", "Record batch bytes appended by producers (gregor_topic_bytes_in_total)") },
    Rename { kind: "counter", labels: &[TOPIC], ..gauge("gregor_topic_bytes_out_total", "kafka_server_brokertopicmetrics_bytesout", "Record bytes sent to consumers (gregor_topic_bytes_out_total)") },
    Rename { kind: "counter", labels: &[TOPIC], ..gauge("gregor_topic_replication_bytes_out_total", "kafka_server_brokertopicmetrics_replicationbytesout", "Record bytes sent to followers (gregor_topic_replication_bytes_out_total)") },
    Rename { kind: "counter", labels: &[("api", "request", same)], only: Some(("api", "Fetch", false)), ..gauge("gregor_requests_total", "kafka_network_requestmetrics_requests", "Requests handled (gregor_requests_total; Fetch from gregor_fetch_requests_total)") },
    Rename { kind: "counter", labels: &[("request", "request", same)], ..gauge("gregor_fetch_requests_total", "kafka_network_requestmetrics_requests", "Requests handled (gregor_requests_total; Fetch from gregor_fetch_requests_total)") },
    Rename { kind: "counter", labels: &[("api", "request", same), ("error", "error", same)], ..gauge("gregor_request_errors_total", "kafka_network_requestmetrics_errors", "Error codes in responses (gregor_request_errors_total)") },
    Rename { kind: "counter", ..gauge("gregor_isr_shrinks_total", "kafka_server_replicamanager_isrshrinks", "ISR shrinks of partitions led here (gregor_isr_shrinks_total)") },
    Rename { kind: "counter", ..gauge("gregor_isr_expands_total", "kafka_server_replicamanager_isrexpands", "ISR expansions of partitions led here (gregor_isr_expands_total)") },
    gauge("gregor_partitions", "kafka_server_replicamanager_partitioncount", "Partition replicas hosted here (gregor_partitions)"),
    gauge("gregor_leader_partitions", "kafka_server_replicamanager_leadercount", "Partitions led here (gregor_leader_partitions)"),
    gauge("gregor_under_replicated_partitions", "kafka_server_replicamanager_underreplicatedpartitions", "Under-replicated partitions led here (gregor_under_replicated_partitions)"),
    gauge("gregor_under_min_isr_partitions", "kafka_server_replicamanager_underminisrpartitioncount", "Partitions led here under min.insync.replicas (gregor_under_min_isr_partitions)"),
    gauge("gregor_controller_active", "kafka_controller_kafkacontroller_activecontrollercount", "1 on the active controller (gregor_controller_active)"),
    gauge("gregor_controller_offline_partitions", "kafka_controller_kafkacontroller_offlinepartitionscount", "Partitions without a live leader, on the active controller (gregor_controller_offline_partitions)"),
    gauge("gregor_controller_preferred_replica_imbalance", "kafka_controller_kafkacontroller_preferredreplicaimbalancecount", "Partitions not led by their preferred replica, on the active controller (gregor_controller_preferred_replica_imbalance)"),
    gauge("gregor_controller_fenced_brokers", "kafka_controller_kafkacontroller_fencedbrokercount", "Fenced brokers, on the active controller (gregor_controller_fenced_brokers)"),
    gauge("gregor_fetch_sessions", "kafka_server_fetchsessioncache_numincrementalfetchsessions", "Incremental fetch sessions held (gregor_fetch_sessions)"),
    gauge("gregor_fetch_session_partitions", "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached", "Partitions in fetch sessions (gregor_fetch_session_partitions)"),
    Rename { labels: &[("kind", "delayedOperation", capitalized)], ..gauge("gregor_purgatory_size", "kafka_server_delayedoperationpurgatory_purgatorysize", "Requests parked in a purgatory (gregor_purgatory_size)") },
    per_partition("gregor_partition_under_replicated", "kafka_cluster_partition_underreplicated", "1 when a partition led here is under-replicated (gregor_partition_under_replicated)"),
    per_partition("gregor_partition_under_min_isr", "kafka_cluster_partition_underminisr", "1 when a partition led here is under min.insync.replicas (gregor_partition_under_min_isr)"),
    per_partition("gregor_log_size_bytes", "kafka_log_log_size", "Bytes of a hosted partition's segments (gregor_log_size_bytes)"),
    per_partition("gregor_log_end_offset", "kafka_log_log_logendoffset", "Log end offset of a hosted partition (gregor_log_end_offset)"),
    per_partition("gregor_log_start_offset", "kafka_log_log_logstartoffset", "Log start offset of a hosted partition (gregor_log_start_offset)"),
    Rename { kind: "unknown", ..gauge("gregor_controller_leader_elections_total", "kafka_controller_controllerstats_leaderelectionrateandtimems_count", "Partition leader elections applied since start (gregor_controller_leader_elections_total)") },
    Rename { kind: "counter", ..gauge("gregor_controller_unclean_leader_elections_total", "kafka_controller_controllerstats_uncleanleaderelections", "Unclean leader elections applied since start (gregor_controller_unclean_leader_elections_total)") },
    gauge("gregor_raft_current_leader", "kafka_server_raft_metrics_current_leader", "The metadata quorum's leader as this node knows it, -1 when none (gregor_raft_current_leader)"),
    gauge("gregor_raft_current_epoch", "kafka_server_raft_metrics_current_epoch", "The metadata quorum's term on this voter (gregor_raft_current_epoch)"),
    Rename { scale: 100.0, ..gauge("gregor_log_cleaner_max_dirty_ratio", "kafka_log_logcleanermanager_max_dirty_percent", "Dirty percent of the dirtiest compacted log at the cleaner's last pass (gregor_log_cleaner_max_dirty_ratio)") },
    Rename { scale: 100.0, ..gauge("gregor_log_cleaner_recopy_ratio", "kafka_log_logcleaner_cleaner_recopy_percent", "Bytes written over bytes read by the cleaner's last compacting pass, in percent (gregor_log_cleaner_recopy_ratio)") },
    Rename { scale: 1000.0, ..gauge("gregor_log_cleaner_time_since_last_run_seconds", "kafka_log_logcleanermanager_time_since_last_run_ms", "Milliseconds since the cleaner's last pass (gregor_log_cleaner_time_since_last_run_seconds)") },
    Rename { labels: &[("group", "consumergroup", same), TOPIC, PARTITION], ..gauge("gregor_consumer_group_lag_offsets", "kafka_consumergroup_lag", "A group's lag on a partition, from its coordinator (gregor_consumer_group_lag_offsets)") },
    Rename { labels: &[("group", "consumergroup", same), TOPIC, PARTITION], ..gauge("gregor_consumer_group_committed_offset", "kafka_consumergroup_current_offset", "A group's committed offset, from its coordinator (gregor_consumer_group_committed_offset)") },
];

/// Label-less totals of a Gregor counter's samples (Kafka's all-topics MBeans), exported once
/// the `when` series exists: a sum over no samples is then a true zero (nothing failed).
struct Total {
    sample: &'static str,
    only: Option<(&'static str, &'static str, bool)>,
    to: &'static str,
    help: &'static str,
    when: (&'static str, Option<(&'static str, &'static str, bool)>),
}

/// The sum of every topic's series, once one topic has one.
const fn all_topics(sample: &'static str, to: &'static str) -> Total {
    Total {
        sample,
        only: None,
        to,
        help: "",
        when: (sample, None),
    }
}

const TOTALS: &[Total] = &[
    all_topics(
        "gregor_topic_messages_in_total",
        "kafka_server_brokertopicmetrics_messagesin",
    ),
    all_topics(
        "gregor_topic_bytes_in_total",
        "kafka_server_brokertopicmetrics_bytesin",
    ),
    all_topics(
        "gregor_topic_bytes_out_total",
        "kafka_server_brokertopicmetrics_bytesout",
    ),
    all_topics(
        "gregor_topic_replication_bytes_out_total",
        "kafka_server_brokertopicmetrics_replicationbytesout",
    ),
    Total {
        sample: "gregor_request_errors_total",
        only: Some(("api", "Produce", true)),
        to: "kafka_server_brokertopicmetrics_failedproducerequests",
        help:
            "Partition errors in Produce responses (gregor_request_errors_total{api=\"Produce\"})",
        when: ("gregor_requests_total", Some(("api", "Produce", true))),
    },
    Total {
        sample: "gregor_request_errors_total",
        only: Some(("api", "Fetch", true)),
        to: "kafka_server_brokertopicmetrics_failedfetchrequests",
        help: "Partition errors in Fetch responses (gregor_request_errors_total{api=\"Fetch\"})",
        when: ("gregor_requests_total", Some(("api", "Fetch", true))),
    },
];

/// A Gregor histogram exported as Kafka's (a summary of quantiles, with count and sum).
struct Summary {
    from: &'static str,
    to: &'static str,
    help: &'static str,
    /// Gregor label -> Kafka label.
    label: Option<(&'static str, &'static str)>,
    only: Option<(&'static str, &'static str, bool)>,
    /// Seconds -> milliseconds.
    scale: f64,
}

const SUMMARIES: &[Summary] = &[
    Summary { from: "gregor_request_duration_seconds", to: "kafka_network_requestmetrics_totaltimems", help: "Request time in ms, from decoded to response ready, since start (gregor_request_duration_seconds; Fetch from gregor_fetch_request_duration_seconds)", label: Some(("api", "request")), only: Some(("api", "Fetch", false)), scale: 1000.0 },
    Summary { from: "gregor_fetch_request_duration_seconds", to: "kafka_network_requestmetrics_totaltimems", help: "", label: Some(("request", "request")), only: None, scale: 1000.0 },
    Summary { from: "gregor_request_queue_time_seconds", to: "kafka_network_requestmetrics_requestqueuetimems", help: "Time in ms a request waited for a handler, since start (gregor_request_queue_time_seconds)", label: Some(("request", "request")), only: None, scale: 1000.0 },
    Summary { from: "gregor_request_size_bytes", to: "kafka_network_requestmetrics_requestbytes", help: "Request sizes in bytes, since start (gregor_request_size_bytes)", label: Some(("request", "request")), only: None, scale: 1.0 },
    Summary { from: "gregor_log_flush_duration_seconds", to: "kafka_log_logflushstats_logflushrateandtimems", help: "fdatasync time in ms, since start (gregor_log_flush_duration_seconds)", label: None, only: None, scale: 1000.0 },
];

/// The percentiles of Kafka's histograms, as the JMX exporter labels them.
const QUANTILES: &[(f64, &str)] = &[
    (0.5, "0.50"),
    (0.75, "0.75"),
    (0.95, "0.95"),
    (0.98, "0.98"),
    (0.99, "0.99"),
    (0.999, "0.999"),
];

fn selected(s: &Sample<'_>, only: Option<(&str, &str, bool)>) -> bool {
    only.is_none_or(|(k, v, equal)| (s.label(k) == Some(v)) == equal)
}

/// The Kafka families of a Gregor exposition (without `# EOF`); empty when none applies.
pub fn render(gregor: &str) -> String {
    let samples = parse(gregor);
    let mut out = Out::default();
    for r in RENAMES {
        rename(&samples, r, &mut out);
    }
    for t in TOTALS {
        sum(&samples, t, &mut out);
    }
    for s in SUMMARIES {
        summary(&samples, s, &mut out);
    }
    average(
        &samples,
        "gregor_raft_commit_latency_seconds",
        "kafka_server_raft_metrics_commit_latency_avg",
        &mut out,
    );
    out.encode()
}

fn rename(e: &[Sample<'_>], r: &Rename, out: &mut Out) {
    let f = out.family(r.to, r.kind, r.help);
    let suffix = if r.kind == "counter" { "_total" } else { "" };
    for s in e.iter().filter(|s| s.name == r.from && selected(s, r.only)) {
        let labels = r
            .labels
            .iter()
            .filter_map(|(from, to, spell)| s.label(from).map(|v| (to.to_string(), spell(v))))
            .collect();
        f.samples.push((suffix, labels, s.value * r.scale));
    }
}

/// A histogram's mean in ms since start, as Kafka's `*-avg` gauges (whose window is shorter);
/// nothing before the first observation.
fn average(e: &[Sample<'_>], from: &str, to: &'static str, out: &mut Out) {
    let value = |suffix: &str| {
        e.iter()
            .find(|s| s.name.strip_prefix(from) == Some(suffix))
            .map(|s| s.value)
    };
    if let (Some(count), Some(total)) = (value("_count"), value("_sum")) {
        if count > 0.0 {
            out.family(
                to,
                "gauge",
                "Mean Raft commit latency in ms since start (gregor_raft_commit_latency_seconds)",
            )
            .samples
            .push(("", Vec::new(), total / count * 1000.0));
        }
    }
}

fn sum(e: &[Sample<'_>], t: &Total, out: &mut Out) {
    let (guard, only) = t.when;
    if !e.iter().any(|s| s.name == guard && selected(s, only)) {
        return;
    }
    let total = e
        .iter()
        .filter(|s| s.name == t.sample && selected(s, t.only))
        .map(|s| s.value)
        .sum();
    out.family(t.to, "counter", t.help)
        .samples
        .push(("_total", Vec::new(), total));
}

/// One histogram series: its label value, count, sum and cumulative buckets `(le, count)`.
#[derive(Default)]
struct Histogram {
    count: f64,
    sum: f64,
    buckets: Vec<(f64, f64)>,
}

fn summary(e: &[Sample<'_>], s: &Summary, out: &mut Out) {
    let mut series: Vec<(Option<&str>, Histogram)> = Vec::new();
    let (bucket, count, total) = (
        format!("{}_bucket", s.from),
        format!("{}_count", s.from),
        format!("{}_sum", s.from),
    );
    let ours = |x: &Sample<'_>| x.name == bucket || x.name == count || x.name == total;
    for x in e.iter().filter(|x| ours(x) && selected(x, s.only)) {
        let key = s.label.and_then(|(from, _)| x.label(from));
        let i = match series.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                series.push((key, Histogram::default()));
                series.len() - 1
            }
        };
        let h = &mut series[i].1;
        if x.name == count {
            h.count = x.value;
        } else if x.name == total {
            h.sum = x.value * s.scale;
        } else if x.name == bucket {
            let le = x
                .label("le")
                .and_then(|v| v.parse().ok())
                .unwrap_or(f64::INFINITY);
            h.buckets.push((le * s.scale, x.value));
        }
    }
    let f = out.family(s.to, "summary", s.help);
    for (key, h) in series {
        let base: Vec<(String, String)> = s
            .label
            .zip(key)
            .map(|((_, to), v)| (to.to_string(), v.to_string()))
            .into_iter()
            .collect();
        for (q, name) in QUANTILES {
            if let Some(v) = quantile(&h, *q) {
                let mut labels = base.clone();
                labels.push(("quantile".to_string(), name.to_string()));
                f.samples.push(("", labels, v));
            }
        }
        f.samples.push(("_count", base.clone(), h.count));
        f.samples.push(("_sum", base, h.sum));
    }
}

/// The `q` quantile of a histogram, interpolated inside its bucket as PromQL's
/// `histogram_quantile` does; `None` with no observations.
fn quantile(h: &Histogram, q: f64) -> Option<f64> {
    if h.count <= 0.0 {
        return None;
    }
    let rank = q * h.count;
    let mut lower = (0.0, 0.0);
    for &(le, cumulative) in &h.buckets {
        if cumulative >= rank {
            if le.is_infinite() {
                // Beyond the last bound: the bound is all that is known.
                return Some(lower.0);
            }
            let width = cumulative - lower.1;
            let within = if width > 0.0 {
                (rank - lower.1) / width
            } else {
                1.0
            };
            return Some(lower.0 + (le - lower.0) * within);
        }
        lower = (le, cumulative);
    }
    Some(lower.0)
}

#[cfg(test)]
mod tests;
