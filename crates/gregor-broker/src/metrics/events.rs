//! The event metrics: counters and histograms updated where things happen (bytes and records in
//! and out, requests, errors and latencies per API, purgatories, ISR changes, fsyncs), and the
//! registry they are encoded from at scrape time. The services and the replica manager update
//! them; only the scrape (`metrics::collect`) reads them.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use gregor_group::txn::TxnEffect;
use gregor_group::AppendToken;
use kafka_protocol::messages::ApiKey;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::connection::Reply;
use crate::connection_quotas::ConnectionQuotas;
use crate::isr::IsrChange;
use crate::metrics::cleaner::LogCleanerMetrics;
use crate::zero_copy::SendfileCounters;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TopicLabels {
    pub topic: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiLabels {
    pub api: String,
}

/// A request as Kafka's request metrics name it (the `request` label of its JMX names): the
/// API's name, but a Fetch is `FetchConsumer` or `FetchFollower`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub request: String,
}

impl RequestLabels {
    pub fn new(api: ApiKey, follower: bool) -> RequestLabels {
        let request = match (api, follower) {
            (ApiKey::Fetch, true) => "FetchFollower".to_string(),
            (ApiKey::Fetch, false) => "FetchConsumer".to_string(),
            (api, _) => format!("{api:?}"),
        };
        RequestLabels { request }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiErrorLabels {
    pub api: String,
    pub error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PurgatoryLabels {
    /// `produce` (acks=all waiting for the high watermark) or `fetch` (waiting for min_bytes).
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SendfileLabels {
    /// `worker` (every page was in the page cache) or `blocking_pool`.
    pub thread: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TxnEndLabels {
    /// `commit` or `abort`.
    pub outcome: &'static str,
    /// Who ended it: `end_txn` (the producer), `timeout` (`transaction.timeout.ms` passed) or
    /// `fenced` (InitProducerId of a newer producer with the same transactional id).
    pub reason: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn request_histogram() -> Histogram {
    // 0.25 ms .. ~65 s
    Histogram::new(exponential_buckets(0.000_25, 2.0, 19))
}

fn queue_histogram() -> Histogram {
    // 10 µs .. ~42 s: a request is usually taken at once; it waits behind the connection's
    // in-flight limit, a quota's mute or the broker-wide budgets.
    Histogram::new(exponential_buckets(0.000_01, 2.0, 23))
}

fn size_histogram() -> Histogram {
    // 64 B .. 64 MiB, by fours.
    Histogram::new(exponential_buckets(64.0, 4.0, 11))
}

/// Per-topic byte and record counters (Kafka's BrokerTopicMetrics).
struct TopicCounters {
    bytes_in: Family<TopicLabels, Counter>,
    messages_in: Family<TopicLabels, Counter>,
    bytes_out: Family<TopicLabels, Counter>,
    messages_out: Family<TopicLabels, Counter>,
    replication_bytes_out: Family<TopicLabels, Counter>,
}

/// Per-API request counters, latencies and the purgatories (Kafka's RequestMetrics).
struct RequestMetrics {
    requests: Family<ApiLabels, Counter>,
    request_errors: Family<ApiErrorLabels, Counter>,
    request_duration: HistogramFamily<ApiLabels>,
    /// The sum of `request_duration`, which the histogram keeps to itself outside its encoding:
    /// for the console's charts, not registered.
    request_seconds: Family<ApiLabels, Counter<f64, AtomicU64>>,
    purgatory: Family<PurgatoryLabels, Gauge>,
    /// By Kafka's request name: Fetch split into consumer and follower fetches.
    fetch_requests: Family<RequestLabels, Counter>,
    fetch_duration: HistogramFamily<RequestLabels>,
    queue_time: HistogramFamily<RequestLabels>,
    request_bytes: HistogramFamily<RequestLabels>,
    response_bytes: HistogramFamily<RequestLabels>,
}

/// The durability path's fdatasyncs: their duration and the appends each made durable.
struct LogFlushMetrics {
    log_flush: Histogram,
    group_commit: Histogram,
}

/// Registers a metric under `name` and returns a handle to it (metrics are cheap clones of
/// shared atomics).
fn registered<M>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M
where
    M: prometheus_client::registry::Metric + Clone,
{
    registry.register(name, help, metric.clone());
    metric
}

impl TopicCounters {
    fn register(r: &mut Registry) -> TopicCounters {
        TopicCounters {
            bytes_in: registered(
                r,
                "gregor_topic_bytes_in",
                "Record bytes appended by producers, per topic (Kafka BytesInPerSec)",
                Family::default(),
            ),
            messages_in: registered(
                r,
                "gregor_topic_messages_in",
                "Records appended by producers, per topic (Kafka MessagesInPerSec)",
                Family::default(),
            ),
            bytes_out: registered(
                r,
                "gregor_topic_bytes_out",
                "Record bytes sent to consumers, per topic (Kafka BytesOutPerSec)",
                Family::default(),
            ),
            messages_out: registered(
                r,
                "gregor_topic_messages_out",
                "Records in the batches sent to consumers, per topic (a batch is sent whole, so a fetch from inside a batch counts the records before the fetch offset too)",
                Family::default(),
            ),
            replication_bytes_out: registered(
                r,
                "gregor_topic_replication_bytes_out",
                "Record bytes sent to follower replicas, per topic (Kafka ReplicationBytesOutPerSec)",
                Family::default(),
            ),
        }
    }
}

impl RequestMetrics {
    fn register(r: &mut Registry) -> RequestMetrics {
        RequestMetrics {
            requests: registered(
                r,
                "gregor_requests",
                "Requests handled, per API (Kafka RequestsPerSec)",
                Family::default(),
            ),
            request_errors: registered(
                r,
                "gregor_request_errors",
                "Error codes in responses, per API and error (each partition's error counts; Kafka ErrorsPerSec)",
                Family::default(),
            ),
            request_duration: registered(
                r,
                "gregor_request_duration_seconds",
                "Time from a request's decoding to its response being ready, per API (includes time parked in purgatory)",
                Family::new_with_constructor(request_histogram),
            ),
            request_seconds: Family::default(),
            purgatory: registered(
                r,
                "gregor_purgatory_size",
                "Requests parked: produce (acks=all waiting for the high watermark) and fetch (waiting for min_bytes)",
                Family::default(),
            ),
            fetch_requests: registered(
                r,
                "gregor_fetch_requests",
                "Fetch requests handled, by request: FetchConsumer or FetchFollower (Kafka RequestsPerSec of those requests)",
                Family::default(),
            ),
            fetch_duration: registered(
                r,
                "gregor_fetch_request_duration_seconds",
                "gregor_request_duration_seconds of Fetch requests, by request: FetchConsumer or FetchFollower",
                Family::new_with_constructor(request_histogram),
            ),
            queue_time: registered(
                r,
                "gregor_request_queue_time_seconds",
                "Time a request waited between being read (or for the request budgets before its body was read) and a handler taking it, per request (Kafka RequestQueueTimeMs)",
                Family::new_with_constructor(queue_histogram),
            ),
            request_bytes: registered(
                r,
                "gregor_request_size_bytes",
                "Size of each request frame, per request (Kafka RequestBytes)",
                Family::new_with_constructor(size_histogram),
            ),
            response_bytes: registered(
                r,
                "gregor_response_size_bytes",
                "Size of each response frame written, record bytes included, per request",
                Family::new_with_constructor(size_histogram),
            ),
        }
    }
}

impl LogFlushMetrics {
    fn register(r: &mut Registry) -> LogFlushMetrics {
        LogFlushMetrics {
            log_flush: registered(
                r,
                "gregor_log_flush_duration_seconds",
                "Duration of each fdatasync that makes appends durable (Kafka LogFlushRateAndTimeMs)",
                Histogram::new(exponential_buckets(0.000_05, 2.0, 18)),
            ),
            group_commit: registered(
                r,
                "gregor_log_flush_batch_appends",
                "Appends made durable by one fdatasync (group commit)",
                Histogram::new(exponential_buckets(1.0, 2.0, 12)),
            ),
        }
    }
}

impl IsrChangeCounters {
    fn register(r: &mut Registry) -> IsrChangeCounters {
        IsrChangeCounters {
            shrinks: registered(
                r,
                "gregor_isr_shrinks",
                "ISR shrinks committed for partitions this broker leads (Kafka IsrShrinksPerSec)",
                Counter::default(),
            ),
            expands: registered(
                r,
                "gregor_isr_expands",
                "ISR expansions committed for partitions this broker leads (Kafka IsrExpandsPerSec)",
                Counter::default(),
            ),
        }
    }
}

/// The sendfile byte counters, one series per thread kind.
fn register_sendfile(r: &mut Registry) -> SendfileCounters {
    let bytes = registered(
        r,
        "gregor_fetch_sendfile_bytes",
        "Record bytes of fetch responses sent with sendfile, by thread: worker (every page was in the page cache) or blocking_pool (some page was not, so the read could wait for the disk)",
        Family::<SendfileLabels,
        Counter>::default(),
    );
    // One statement per label: `get_or_create`'s guard lives to the end of its statement,
    // and a second call in the same one would wait for it forever.
    let worker = bytes
        .get_or_create(&SendfileLabels { thread: "worker" })
        .clone();
    let blocking_pool = bytes
        .get_or_create(&SendfileLabels {
            thread: "blocking_pool",
        })
        .clone();
    SendfileCounters {
        worker,
        blocking_pool,
    }
}

/// Why a transaction coordinator wrote a decision, for `gregor_transactions_ended_total`.
pub mod txn_reason {
    pub const END_TXN: &str = "end_txn";
    pub const TIMEOUT: &str = "timeout";
    pub const FENCED: &str = "fenced";
}

/// The outcomes and reasons of `gregor_transactions_ended_total`, in the order of
/// [`TxnEnded`]'s counters.
const TXN_ENDINGS: [(&str, &str); 4] = [
    ("commit", txn_reason::END_TXN),
    ("abort", txn_reason::END_TXN),
    ("abort", txn_reason::TIMEOUT),
    ("abort", txn_reason::FENCED),
];

/// `gregor_transactions_ended_total`: one counter per (outcome, reason), a fixed set. Not a
/// `Family`: that holds a hash map, whose random keys, drawn at every broker start, would move
/// the simulator's schedules.
#[derive(Clone, Debug, Default)]
pub struct TxnEnded {
    counters: [Counter; 4],
}

impl TxnEnded {
    fn get(&self, outcome: &str, reason: &str) -> Option<&Counter> {
        let i = TXN_ENDINGS
            .iter()
            .position(|(o, r)| *o == outcome && *r == reason)?;
        self.counters.get(i)
    }
}

impl prometheus_client::encoding::EncodeMetric for TxnEnded {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::MetricEncoder,
    ) -> Result<(), std::fmt::Error> {
        for ((outcome, reason), c) in TXN_ENDINGS.iter().zip(&self.counters) {
            let labels = TxnEndLabels { outcome, reason };
            c.encode(encoder.encode_family(&labels)?)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        prometheus_client::metrics::MetricType::Counter
    }
}

/// The transaction coordinator's event metrics, shared by its shards (cheap clones of shared
/// atomics; the default one is registered nowhere, for tests and tools).
#[derive(Clone, Debug)]
pub struct TxnMetrics {
    ended: TxnEnded,
    marker_latency: Histogram,
}

fn marker_histogram() -> Histogram {
    // 1 ms .. ~65 s: a local marker takes an fsync, a remote one a round trip and the ISR, a
    // leader election pushes it to seconds.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

impl Default for TxnMetrics {
    fn default() -> Self {
        TxnMetrics {
            ended: TxnEnded::default(),
            marker_latency: marker_histogram(),
        }
    }
}

impl TxnMetrics {
    fn register(r: &mut Registry) -> TxnMetrics {
        let ended = registered(
            r,
            "gregor_transactions_ended",
            "Transactions this node's coordinator decided to commit or abort (the decision durable in __transaction_state), by outcome and reason: end_txn (EndTxn), timeout (transaction.timeout.ms) or fenced (a newer producer's InitProducerId)",
            // Every series exists from the start, zero until it happens.
            TxnEnded::default(),
        );
        let marker_latency = registered(
            r,
            "gregor_transaction_marker_latency_seconds",
            "From a coordinator's decision being durable (PrepareCommit or PrepareAbort) to its marker being written in every partition of the transaction",
            marker_histogram(),
        );
        TxnMetrics {
            ended,
            marker_latency,
        }
    }

    /// A decision to commit or abort became durable.
    pub fn ended(&self, commit: bool, reason: &'static str) {
        let outcome = if commit { "commit" } else { "abort" };
        debug_assert!(
            self.ended.get(outcome, reason).is_some(),
            "{outcome} {reason}"
        );
        if let Some(c) = self.ended.get(outcome, reason) {
            c.inc();
        }
    }

    /// Every marker of a decision was written `took_ms` after it became durable.
    pub fn markers_written(&self, took_ms: i64) {
        self.marker_latency.observe(took_ms.max(0) as f64 / 1000.0);
    }
}

/// Which of a coordinator shard's appends are decisions, and why each was made: the shard
/// tags its appends as it queues them and, when one is durable, the coordinator's answer says
/// whether it was a PrepareCommit/PrepareAbort (it asks for markers). Pure bookkeeping;
/// holds at most the shard's pending appends.
#[derive(Debug, Default)]
pub struct TxnDecisions {
    reasons: BTreeMap<AppendToken, &'static str>,
}

impl TxnDecisions {
    /// `effects` came of a request or timeout whose decision would be for `reason`.
    pub fn queued(&mut self, reason: &'static str, effects: &[TxnEffect]) {
        for e in effects {
            if let TxnEffect::Append { token, .. } = e {
                self.reasons.insert(*token, reason);
            }
        }
    }

    /// The append of `token` completed and the coordinator answered `effects`: counts the
    /// decision it made durable, if it was one.
    pub fn completed(&mut self, token: AppendToken, effects: &[TxnEffect], metrics: &TxnMetrics) {
        let Some(reason) = self.reasons.remove(&token) else {
            return;
        };
        for e in effects {
            if let TxnEffect::WriteMarkers { commit, .. } = e {
                metrics.ended(*commit, reason);
            }
        }
    }
}

/// The broker's event metrics and the registry they are encoded from.
pub struct BrokerMetrics {
    registry: Registry,
    topics: TopicCounters,
    requests: RequestMetrics,
    isr_changes: IsrChangeCounters,
    sendfile: SendfileCounters,
    latency_capped: Counter,
    partitions_read: Counter,
    flushes: LogFlushMetrics,
    txns: TxnMetrics,
    cleaner: LogCleanerMetrics,
    /// The client listener's connection counts, once it serves.
    connections: Mutex<Weak<ConnectionQuotas>>,
}

impl std::fmt::Debug for BrokerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerMetrics").finish_non_exhaustive()
    }
}

impl Default for BrokerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl BrokerMetrics {
    pub fn new() -> BrokerMetrics {
        // Registration order is the order of the scrape's text.
        let mut r = Registry::default();
        let topics = TopicCounters::register(&mut r);
        let requests = RequestMetrics::register(&mut r);
        let isr_changes = IsrChangeCounters::register(&mut r);
        let sendfile = register_sendfile(&mut r);
        let latency_capped = registered(
            &mut r,
            "gregor_fetch_latency_capped",
            "Consumer Fetches whose answer limit fetch.low.latency.max.bytes lowered below what the request and fetch.max.bytes allowed (the connection's round trip was short)",
            Counter::default(),
        );
        let partitions_read = registered(
            &mut r,
            "gregor_fetch_partitions_read",
            "Partition reads by Fetches (one per partition each time a Fetch reads it); an idle incremental fetch reads none",
            Counter::default(),
        );
        let flushes = LogFlushMetrics::register(&mut r);
        let txns = TxnMetrics::register(&mut r);
        let cleaner = LogCleanerMetrics::register(&mut r);
        BrokerMetrics {
            registry: r,
            topics,
            requests,
            isr_changes,
            sendfile,
            latency_capped,
            partitions_read,
            flushes,
            txns,
            cleaner,
            connections: Mutex::new(Weak::new()),
        }
    }

    /// Reports every log's fdatasyncs to this broker's histograms (process-wide: the last
    /// broker started in a process gets them).
    pub fn observe_log_syncs(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        gregor_log::set_sync_observer(Some(Arc::new(move |took: Duration, appends: u64| {
            if let Some(m) = weak.upgrade() {
                m.flushes.log_flush.observe(took.as_secs_f64());
                m.flushes.group_commit.observe(appends as f64);
            }
        })));
    }

    /// The log cleaner's progress: recorded by the cleaner, read by the scrape.
    pub fn log_cleaner(&self) -> &LogCleanerMetrics {
        &self.cleaner
    }

    /// The transaction coordinator's metrics, for its shards.
    pub fn txn_metrics(&self) -> TxnMetrics {
        self.txns.clone()
    }

    /// The counters connections add their `sendfile` bytes to.
    pub fn sendfile_counters(&self) -> SendfileCounters {
        self.sendfile.clone()
    }

    /// The client listener's connection counts, read at scrape time.
    pub fn track_connections(&self, quotas: &Arc<ConnectionQuotas>) {
        *self
            .connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Arc::downgrade(quotas);
    }

    pub(crate) fn open_connections(&self) -> Option<usize> {
        self.connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .upgrade()
            .map(|q| q.open())
    }

    /// A request was answered (or not, for `acks=0`) after `started`; `follower` for a Fetch
    /// from a follower replica.
    pub fn request_done(&self, api: ApiKey, follower: bool, started: Instant, reply: &Reply) {
        let labels = ApiLabels {
            api: format!("{api:?}"),
        };
        let took = started.elapsed().as_secs_f64();
        self.requests
            .request_duration
            .get_or_create(&labels)
            .observe(took);
        self.requests
            .request_seconds
            .get_or_create(&labels)
            .inc_by(took);
        self.requests.requests.get_or_create(&labels).inc();
        if api == ApiKey::Fetch {
            let split = RequestLabels::new(api, follower);
            self.requests
                .fetch_duration
                .get_or_create(&split)
                .observe(took);
            self.requests.fetch_requests.get_or_create(&split).inc();
        }
        match reply {
            Reply::Respond(response) => {
                self.count_errors(&labels.api, super::errors::error_codes(response))
            }
            Reply::Fetch(f) => {
                self.count_errors(&labels.api, super::errors::fetch_error_codes(&f.response))
            }
            Reply::Nothing | Reply::Close => {}
        }
    }

    /// A handler took a request of `bytes` that waited `queued` for it.
    pub fn request_taken(&self, api: ApiKey, follower: bool, bytes: usize, queued: Duration) {
        let labels = RequestLabels::new(api, follower);
        self.requests
            .queue_time
            .get_or_create(&labels)
            .observe(queued.as_secs_f64());
        self.requests
            .request_bytes
            .get_or_create(&labels)
            .observe(bytes as f64);
    }

    /// A response of `bytes` was written.
    pub fn response_written(&self, api: ApiKey, follower: bool, bytes: usize) {
        self.requests
            .response_bytes
            .get_or_create(&RequestLabels::new(api, follower))
            .observe(bytes as f64);
    }

    fn count_errors(&self, api: &str, codes: Vec<i16>) {
        for code in codes {
            self.requests
                .request_errors
                .get_or_create(&ApiErrorLabels {
                    api: api.to_string(),
                    error: super::errors::error_name(code),
                })
                .inc();
        }
    }

    /// A producer's batch was appended to `topic`.
    pub fn produced(&self, topic: &str, bytes: usize, records: i64) {
        let labels = TopicLabels {
            topic: topic.to_string(),
        };
        self.topics
            .bytes_in
            .get_or_create(&labels)
            .inc_by(bytes as u64);
        self.topics
            .messages_in
            .get_or_create(&labels)
            .inc_by(u64::try_from(records).unwrap_or(0));
    }

    /// Record batches were sent from `topic` to a consumer or, with `replication`, a follower.
    pub fn fetched(&self, topic: &str, bytes: usize, records: u64, replication: bool) {
        if bytes == 0 {
            return;
        }
        let labels = TopicLabels {
            topic: topic.to_string(),
        };
        if replication {
            self.topics
                .replication_bytes_out
                .get_or_create(&labels)
                .inc_by(bytes as u64);
            return;
        }
        self.topics
            .bytes_out
            .get_or_create(&labels)
            .inc_by(bytes as u64);
        self.topics
            .messages_out
            .get_or_create(&labels)
            .inc_by(records);
    }

    /// Counts a request parked in the produce or fetch purgatory until the guard drops.
    pub fn parked(&self, kind: &'static str) -> Parked {
        let gauge = self
            .requests
            .purgatory
            .get_or_create(&PurgatoryLabels { kind })
            .clone();
        gauge.inc();
        Parked(gauge)
    }

    /// A consumer Fetch whose answer limit the latency cap lowered.
    pub fn latency_capped(&self) {
        self.latency_capped.inc();
    }

    /// Consumer Fetches whose answer limit the latency cap lowered, so far.
    pub fn latency_capped_total(&self) -> u64 {
        self.latency_capped.get()
    }

    /// A Fetch read `n` partitions.
    pub fn partitions_read(&self, n: usize) {
        self.partitions_read.inc_by(n as u64);
    }

    /// Partition reads by Fetches, so far.
    pub fn partitions_read_total(&self) -> u64 {
        self.partitions_read.get()
    }

    /// Requests parked now in the `kind` purgatory (`produce` or `fetch`).
    pub fn parked_now(&self, kind: &'static str) -> i64 {
        self.requests
            .purgatory
            .get_or_create(&PurgatoryLabels { kind })
            .get()
    }

    /// The ISR change counters, for whoever applies committed partition states.
    pub fn isr_change_counters(&self) -> IsrChangeCounters {
        self.isr_changes.clone()
    }

    /// The event metrics in the text format (without the end marker).
    pub(crate) fn encode_events(&self, out: &mut String) -> std::fmt::Result {
        prometheus_client::encoding::text::encode_registry(out, &self.registry)
    }
}

/// What the console's charts read of the event metrics: the counters themselves, by topic and
/// API, never their text.
#[derive(Clone, Copy)]
pub struct ChartCounters<'a>(&'a BrokerMetrics);

impl BrokerMetrics {
    /// The counters the console's charts sample.
    pub fn chart_counters(&self) -> ChartCounters<'_> {
        ChartCounters(self)
    }
}

impl ChartCounters<'_> {
    /// Bytes produced to `topic` and fetched from it by consumers since start; `None` for a
    /// counter that has not counted yet (`/metrics` shows one from its first event too).
    pub fn topic_bytes(&self, topic: &str) -> (Option<u64>, Option<u64>) {
        let labels = TopicLabels {
            topic: topic.to_string(),
        };
        let t = &self.0.topics;
        let read = |f: &Family<TopicLabels, Counter>| f.get(&labels).map(|c| c.get());
        (read(&t.bytes_in), read(&t.bytes_out))
    }

    /// Seconds spent answering requests of `api` and how many were answered, since start;
    /// `None` before the first.
    pub fn request_seconds(&self, api: ApiKey) -> Option<(f64, u64)> {
        let labels = ApiLabels {
            api: format!("{api:?}"),
        };
        let r = &self.0.requests;
        let seconds = r.request_seconds.get(&labels)?.get();
        let count = r.requests.get(&labels)?.get();
        Some((seconds, count))
    }

    /// ISR shrinks and expansions of the partitions this node leads, since start.
    pub fn isr_changes(&self) -> (u64, u64) {
        let c = &self.0.isr_changes;
        (c.shrinks.get(), c.expands.get())
    }
}

/// Counts committed ISR changes of partitions this broker leads (shared with the replica
/// manager, which applies them).
#[derive(Clone, Debug, Default)]
pub struct IsrChangeCounters {
    shrinks: Counter,
    expands: Counter,
}

impl IsrChangeCounters {
    pub fn count(&self, change: IsrChange) {
        match change {
            IsrChange::Shrink => self.shrinks.inc(),
            IsrChange::Expand => self.expands.inc(),
        };
    }
}

/// A request in a purgatory; dropping it takes it out.
pub struct Parked(Gauge);

impl Drop for Parked {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_charts_read_the_counters_themselves() {
        let m = BrokerMetrics::new();
        let c = m.chart_counters();
        assert_eq!(c.topic_bytes("orders"), (None, None));
        assert_eq!(c.request_seconds(ApiKey::Produce), None);
        m.produced("orders", 100, 2);
        m.produced("orders", 50, 1);
        m.fetched("orders", 30, 1, false);
        m.fetched("orders", 500, 3, true); // a follower's: not a consumer's bytes out
        assert_eq!(c.topic_bytes("orders"), (Some(150), Some(30)));
        assert_eq!(c.topic_bytes("other"), (None, None));
        let started = Instant::now();
        m.request_done(ApiKey::Produce, false, started, &Reply::Nothing);
        m.request_done(ApiKey::Produce, false, started, &Reply::Nothing);
        let (seconds, count) = c.request_seconds(ApiKey::Produce).expect("counted");
        assert_eq!(count, 2);
        assert!(seconds >= 0.0);
        m.isr_change_counters().count(IsrChange::Shrink);
        assert_eq!(c.isr_changes(), (1, 0));
    }

    #[test]
    fn parked_requests_leave_the_gauge_when_done() {
        let m = BrokerMetrics::new();
        let a = m.parked("fetch");
        let b = m.parked("fetch");
        let gauge = || {
            m.requests
                .purgatory
                .get_or_create(&PurgatoryLabels { kind: "fetch" })
                .get()
        };
        assert_eq!(gauge(), 2);
        drop(a);
        drop(b);
        assert_eq!(gauge(), 0);
    }

    fn append(token: u64) -> TxnEffect {
        TxnEffect::Append {
            token: AppendToken(token),
            record: gregor_group::Record {
                key: bytes::Bytes::from_static(b"k"),
                value: None,
                transactional: None,
            },
        }
    }

    fn markers(commit: bool) -> TxnEffect {
        TxnEffect::WriteMarkers {
            transactional_id: "tx".to_string(),
            producer: gregor_group::txn::ProducerIdAndEpoch {
                producer_id: 1,
                epoch: 0,
            },
            commit,
            partitions: vec![("t".to_string(), 0)],
        }
    }

    fn encoded(m: &BrokerMetrics) -> String {
        let mut out = String::new();
        m.encode_events(&mut out).expect("encoded");
        out
    }

    #[test]
    fn fetches_split_into_consumer_and_follower_and_keep_the_api_series() {
        let m = BrokerMetrics::new();
        let started = Instant::now();
        let reply = Reply::Nothing;
        m.request_done(ApiKey::Fetch, false, started, &reply);
        m.request_done(ApiKey::Fetch, true, started, &reply);
        m.request_done(ApiKey::Fetch, true, started, &reply);
        m.request_done(ApiKey::Produce, false, started, &reply);
        m.request_taken(ApiKey::Fetch, true, 120, Duration::from_micros(30));
        m.request_taken(ApiKey::Metadata, false, 40, Duration::ZERO);
        m.response_written(ApiKey::Fetch, false, 5000);
        let text = encoded(&m);
        for line in [
            r#"gregor_requests_total{api="Fetch"} 3"#,
            r#"gregor_requests_total{api="Produce"} 1"#,
            r#"gregor_fetch_requests_total{request="FetchConsumer"} 1"#,
            r#"gregor_fetch_requests_total{request="FetchFollower"} 2"#,
            r#"gregor_fetch_request_duration_seconds_count{request="FetchFollower"} 2"#,
            r#"gregor_request_queue_time_seconds_count{request="FetchFollower"} 1"#,
            r#"gregor_request_size_bytes_sum{request="FetchFollower"} 120.0"#,
            r#"gregor_request_size_bytes_bucket{le="64.0",request="Metadata"} 1"#,
            r#"gregor_response_size_bytes_sum{request="FetchConsumer"} 5000.0"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        // A Produce is never split, whatever the flag says.
        assert!(!text.contains(r#"gregor_fetch_requests_total{request="Produce"}"#));
        assert_eq!(RequestLabels::new(ApiKey::Produce, true).request, "Produce");
    }

    #[test]
    fn decisions_count_once_durable_with_the_reason_they_were_made_for() {
        let m = BrokerMetrics::new();
        let metrics = m.txn_metrics();
        let mut d = TxnDecisions::default();
        d.queued(txn_reason::END_TXN, &[append(1)]);
        d.queued(txn_reason::TIMEOUT, &[append(2), append(3)]);
        d.queued(txn_reason::FENCED, &[append(4)]);
        // An AddPartitionsToTxn-like completion (no markers) is no decision.
        d.completed(AppendToken(1), &[], &metrics);
        d.completed(AppendToken(2), &[markers(false)], &metrics);
        // A completion nobody tagged (a shard's load resuming a decision) is not counted again.
        d.completed(AppendToken(9), &[markers(true)], &metrics);
        d.completed(AppendToken(4), &[markers(false)], &metrics);
        let text = encoded(&m);
        let count = |labels: &str| {
            let line = format!("gregor_transactions_ended_total{{{labels}}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(line.as_str()))
                .map(str::to_string)
        };
        assert_eq!(
            count(r#"outcome="commit",reason="end_txn""#).as_deref(),
            Some("0")
        );
        assert_eq!(
            count(r#"outcome="abort",reason="timeout""#).as_deref(),
            Some("1")
        );
        assert_eq!(
            count(r#"outcome="abort",reason="fenced""#).as_deref(),
            Some("1")
        );
        assert_eq!(
            count(r#"outcome="abort",reason="end_txn""#).as_deref(),
            Some("0")
        );
        // Token 3 is still pending; 1, 2 and 4 are forgotten.
        assert_eq!(d.reasons.len(), 1);
        metrics.markers_written(12);
        assert!(text.contains("gregor_transaction_marker_latency_seconds_count 0"));
        assert!(encoded(&m).contains("gregor_transaction_marker_latency_seconds_count 1"));
    }
}
