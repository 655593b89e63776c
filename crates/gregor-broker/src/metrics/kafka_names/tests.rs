use super::*;

/// A fixed scrape of Gregor's own names, as `collect` renders them.
const GREGOR: &str = r#"# HELP gregor_topic_messages_in Records appended by producers.
# TYPE gregor_topic_messages_in counter
gregor_topic_messages_in_total{topic="orders"} 7
gregor_topic_messages_in_total{topic="pay\"ments"} 3
# HELP gregor_requests Requests.
# TYPE gregor_requests counter
gregor_requests_total{api="Produce"} 4
gregor_requests_total{api="Fetch"} 9
# HELP gregor_request_errors Errors.
# TYPE gregor_request_errors counter
gregor_request_errors_total{api="Produce",error="NOT_LEADER_OR_FOLLOWER"} 2
gregor_request_errors_total{api="Produce",error="UNKNOWN_TOPIC_OR_PARTITION"} 1
# HELP gregor_fetch_requests Fetches.
# TYPE gregor_fetch_requests counter
gregor_fetch_requests_total{request="FetchConsumer"} 6
gregor_fetch_requests_total{request="FetchFollower"} 3
# HELP gregor_request_duration_seconds Durations.
# TYPE gregor_request_duration_seconds histogram
gregor_request_duration_seconds_sum{api="Produce"} 0.5
gregor_request_duration_seconds_count{api="Produce"} 4
gregor_request_duration_seconds_bucket{le="0.001",api="Produce"} 2
gregor_request_duration_seconds_bucket{le="0.002",api="Produce"} 3
gregor_request_duration_seconds_bucket{le="+Inf",api="Produce"} 4
gregor_request_duration_seconds_sum{api="Fetch"} 1.0
gregor_request_duration_seconds_count{api="Fetch"} 9
gregor_request_duration_seconds_bucket{le="+Inf",api="Fetch"} 9
# HELP gregor_purgatory_size Parked.
# TYPE gregor_purgatory_size gauge
gregor_purgatory_size{kind="produce"} 1
# HELP gregor_controller_active Active.
# TYPE gregor_controller_active gauge
gregor_controller_active 1
# HELP gregor_log_size_bytes Size.
# TYPE gregor_log_size_bytes gauge
gregor_log_size_bytes{topic="orders",partition="0"} 1234
# HELP gregor_consumer_group_lag_offsets Lag.
# TYPE gregor_consumer_group_lag_offsets gauge
gregor_consumer_group_lag_offsets{group="g1",topic="orders",partition="0"} 5
"#;

fn rendered() -> Vec<Sample<'static>> {
    let text: &'static str = Box::leak(render(GREGOR).into_boxed_str());
    parse(text)
}

fn find<'a>(samples: &'a [Sample<'a>], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| s.name == name && s.labels == labels)
        .map(|s| s.value)
}

#[test]
fn per_topic_counters_keep_their_topic_and_get_an_all_topics_total() {
    let s = rendered();
    let name = "kafka_server_brokertopicmetrics_messagesin_total";
    assert_eq!(find(&s, name, &[("topic", "orders")]), Some(7.0));
    assert_eq!(find(&s, name, &[("topic", "pay\\\"ments")]), Some(3.0));
    assert_eq!(find(&s, name, &[]), Some(10.0));
    // No topic has a series yet: no total either.
    assert_eq!(
        find(&s, "kafka_server_brokertopicmetrics_bytesin_total", &[]),
        None
    );
}

#[test]
fn families_gregor_does_not_declare_are_not_exported() {
    let text = render(GREGOR);
    assert!(
        !text.contains("kafka_server_brokertopicmetrics_bytesout"),
        "{text}"
    );
    assert!(
        !text.contains("kafka_server_replicamanager_partitioncount"),
        "{text}"
    );
    assert!(!text.contains("requestqueuetimems"), "{text}");
    assert_eq!(render(""), "");
}

#[test]
fn requests_split_fetch_into_consumer_and_follower_as_kafka_does() {
    let s = rendered();
    let name = "kafka_network_requestmetrics_requests_total";
    assert_eq!(find(&s, name, &[("request", "Produce")]), Some(4.0));
    assert_eq!(find(&s, name, &[("request", "FetchConsumer")]), Some(6.0));
    assert_eq!(find(&s, name, &[("request", "FetchFollower")]), Some(3.0));
    assert_eq!(find(&s, name, &[("request", "Fetch")]), None);
}

#[test]
fn produce_errors_become_failed_produce_requests_and_error_counts() {
    let s = rendered();
    let failed = "kafka_server_brokertopicmetrics_failedproducerequests_total";
    assert_eq!(find(&s, failed, &[]), Some(3.0));
    assert_eq!(
        find(
            &s,
            "kafka_server_brokertopicmetrics_failedfetchrequests_total",
            &[]
        ),
        Some(0.0)
    );
    let errors = "kafka_network_requestmetrics_errors_total";
    assert_eq!(
        find(
            &s,
            errors,
            &[("request", "Produce"), ("error", "NOT_LEADER_OR_FOLLOWER")]
        ),
        Some(2.0)
    );
}

#[test]
fn histograms_become_millisecond_summaries_with_kafka_quantiles() {
    let s = rendered();
    let name = "kafka_network_requestmetrics_totaltimems";
    // 4 observations: 2 up to 1 ms, 1 in 1..2 ms, 1 beyond. The median is at rank 2, the
    // top of the first bucket; the 0.75 quantile at rank 3, the top of the second.
    assert_eq!(
        find(&s, name, &[("request", "Produce"), ("quantile", "0.50")]),
        Some(1.0)
    );
    assert_eq!(
        find(&s, name, &[("request", "Produce"), ("quantile", "0.75")]),
        Some(2.0)
    );
    // Beyond the last finite bound, the bound.
    assert_eq!(
        find(&s, name, &[("request", "Produce"), ("quantile", "0.99")]),
        Some(2.0)
    );
    assert_eq!(
        find(&s, &format!("{name}_count"), &[("request", "Produce")]),
        Some(4.0)
    );
    assert_eq!(
        find(&s, &format!("{name}_sum"), &[("request", "Produce")]),
        Some(500.0)
    );
    // Fetch comes from the split histogram, absent here.
    assert_eq!(
        find(&s, &format!("{name}_count"), &[("request", "Fetch")]),
        None
    );
}

#[test]
fn gauges_are_renamed_with_kafka_label_names() {
    let s = rendered();
    assert_eq!(
        find(
            &s,
            "kafka_controller_kafkacontroller_activecontrollercount",
            &[]
        ),
        Some(1.0)
    );
    assert_eq!(
        find(
            &s,
            "kafka_server_delayedoperationpurgatory_purgatorysize",
            &[("delayedOperation", "Produce")]
        ),
        Some(1.0)
    );
    assert_eq!(
        find(
            &s,
            "kafka_log_log_size",
            &[("topic", "orders"), ("partition", "0")]
        ),
        Some(1234.0)
    );
    assert_eq!(
        find(
            &s,
            "kafka_consumergroup_lag",
            &[
                ("consumergroup", "g1"),
                ("topic", "orders"),
                ("partition", "0")
            ]
        ),
        Some(5.0)
    );
}

#[test]
fn every_family_is_declared_once_before_its_samples() {
    let text = render(GREGOR);
    let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE ")).collect();
    let mut unique = types.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(types.len(), unique.len(), "{text}");
    assert!(text.contains("# TYPE kafka_network_requestmetrics_totaltimems summary\n"));
    assert!(text.contains("# TYPE kafka_server_brokertopicmetrics_messagesin counter\n"));
}

#[test]
fn the_quantile_of_an_empty_histogram_is_unknown() {
    assert_eq!(quantile(&Histogram::default(), 0.5), None);
    let h = Histogram {
        count: 10.0,
        sum: 0.0,
        buckets: vec![(10.0, 10.0), (f64::INFINITY, 10.0)],
    };
    assert_eq!(quantile(&h, 0.5), Some(5.0));
}

/// The controller's elections, the quorum and the log cleaner under Kafka's names: counts
/// kept, ratios as percents, seconds as ms, the commit latency's mean.
#[test]
fn elections_raft_and_cleaner_names_are_scaled_as_kafka_spells_them() {
    let gregor = r#"# TYPE gregor_controller_leader_elections counter
gregor_controller_leader_elections_total 5
# TYPE gregor_controller_unclean_leader_elections counter
gregor_controller_unclean_leader_elections_total 1
# TYPE gregor_raft_current_leader gauge
gregor_raft_current_leader 2
# TYPE gregor_raft_commit_latency_seconds histogram
gregor_raft_commit_latency_seconds_sum 0.5
gregor_raft_commit_latency_seconds_count 4
gregor_raft_commit_latency_seconds_bucket{le="+Inf"} 4
# TYPE gregor_log_cleaner_recopy_ratio gauge
gregor_log_cleaner_recopy_ratio 0.25
# TYPE gregor_log_cleaner_time_since_last_run_seconds gauge
gregor_log_cleaner_time_since_last_run_seconds 1.5
"#;
    let text: &'static str = Box::leak(render(gregor).into_boxed_str());
    let s = parse(text);
    let one = |name: &str| find(&s, name, &[]);
    assert_eq!(
        one("kafka_controller_controllerstats_leaderelectionrateandtimems_count"),
        Some(5.0)
    );
    assert_eq!(
        one("kafka_controller_controllerstats_uncleanleaderelections_total"),
        Some(1.0)
    );
    assert_eq!(one("kafka_server_raft_metrics_current_leader"), Some(2.0));
    assert_eq!(
        one("kafka_server_raft_metrics_commit_latency_avg"),
        Some(125.0)
    );
    assert_eq!(
        one("kafka_log_logcleaner_cleaner_recopy_percent"),
        Some(25.0)
    );
    assert_eq!(
        one("kafka_log_logcleanermanager_time_since_last_run_ms"),
        Some(1500.0)
    );
    // Nothing for what the scrape did not carry, and no mean before the first commit.
    assert_eq!(one("kafka_log_logcleanermanager_max_dirty_percent"), None);
    let none = render(
        "gregor_raft_commit_latency_seconds_sum 0\ngregor_raft_commit_latency_seconds_count 0\n",
    );
    assert!(!none.contains("commit_latency_avg"), "{none}");
}
