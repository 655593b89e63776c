//! The broker's metrics in the Prometheus (OpenMetrics) text format, and the HTTP listener
//! (`metrics.listener`) that serves them with `/healthz` and `/readyz`.
//!
//! Two kinds of metric: counters and histograms updated where things happen (bytes in and out,
//! requests, ISR changes, fsyncs), held in [`BrokerMetrics`]; and gauges read from the broker's
//! state when Prometheus scrapes (`collect`): partitions, replication health, log sizes,
//! connections, groups and consumer lag. Nothing is computed between scrapes for the second
//! kind, so it costs nothing on the request path. docs/metrics.md lists every metric.

mod collect;
pub mod errors;
pub mod http;

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::connection::Reply;
use crate::isr::IsrChange;
use crate::server::ConnectionQuotas;
use crate::zero_copy::SendfileCounters;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TopicLabels {
    pub topic: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiLabels {
    pub api: String,
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

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn request_histogram() -> Histogram {
    // 0.25 ms .. ~65 s
    Histogram::new(exponential_buckets(0.000_25, 2.0, 19))
}

/// The broker's event metrics and the registry they are encoded from.
pub struct BrokerMetrics {
    registry: Registry,
    bytes_in: Family<TopicLabels, Counter>,
    messages_in: Family<TopicLabels, Counter>,
    bytes_out: Family<TopicLabels, Counter>,
    messages_out: Family<TopicLabels, Counter>,
    replication_bytes_out: Family<TopicLabels, Counter>,
    requests: Family<ApiLabels, Counter>,
    request_errors: Family<ApiErrorLabels, Counter>,
    request_duration: HistogramFamily<ApiLabels>,
    purgatory: Family<PurgatoryLabels, Gauge>,
    isr_changes: IsrChangeCounters,
    sendfile: SendfileCounters,
    latency_capped: Counter,
    log_flush: Histogram,
    group_commit: Histogram,
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
        let mut registry = Registry::default();
        let bytes_in = Family::<TopicLabels, Counter>::default();
        registry.register(
            "gregor_topic_bytes_in",
            "Record bytes appended by producers, per topic (Kafka BytesInPerSec)",
            bytes_in.clone(),
        );
        let messages_in = Family::<TopicLabels, Counter>::default();
        registry.register(
            "gregor_topic_messages_in",
            "Records appended by producers, per topic (Kafka MessagesInPerSec)",
            messages_in.clone(),
        );
        let bytes_out = Family::<TopicLabels, Counter>::default();
        registry.register(
            "gregor_topic_bytes_out",
            "Record bytes sent to consumers, per topic (Kafka BytesOutPerSec)",
            bytes_out.clone(),
        );
        let messages_out = Family::<TopicLabels, Counter>::default();
        registry.register(
            "gregor_topic_messages_out",
            "Records in the batches sent to consumers, per topic (a batch is sent whole, so a fetch from inside a batch counts the records before the fetch offset too)",
            messages_out.clone(),
        );
        let replication_bytes_out = Family::<TopicLabels, Counter>::default();
        registry.register(
            "gregor_topic_replication_bytes_out",
            "Record bytes sent to follower replicas, per topic (Kafka ReplicationBytesOutPerSec)",
            replication_bytes_out.clone(),
        );
        let requests = Family::<ApiLabels, Counter>::default();
        registry.register(
            "gregor_requests",
            "Requests handled, per API (Kafka RequestsPerSec)",
            requests.clone(),
        );
        let request_errors = Family::<ApiErrorLabels, Counter>::default();
        registry.register(
            "gregor_request_errors",
            "Error codes in responses, per API and error (each partition's error counts; Kafka ErrorsPerSec)",
            request_errors.clone(),
        );
        let request_duration: HistogramFamily<ApiLabels> =
            Family::new_with_constructor(request_histogram);
        registry.register(
            "gregor_request_duration_seconds",
            "Time from a request's decoding to its response being ready, per API (includes time parked in purgatory)",
            request_duration.clone(),
        );
        let purgatory = Family::<PurgatoryLabels, Gauge>::default();
        registry.register(
            "gregor_purgatory_size",
            "Requests parked: produce (acks=all waiting for the high watermark) and fetch (waiting for min_bytes)",
            purgatory.clone(),
        );
        let isr_shrinks = Counter::default();
        registry.register(
            "gregor_isr_shrinks",
            "ISR shrinks committed for partitions this broker leads (Kafka IsrShrinksPerSec)",
            isr_shrinks.clone(),
        );
        let isr_expands = Counter::default();
        registry.register(
            "gregor_isr_expands",
            "ISR expansions committed for partitions this broker leads (Kafka IsrExpandsPerSec)",
            isr_expands.clone(),
        );
        let sendfile_bytes = Family::<SendfileLabels, Counter>::default();
        registry.register(
            "gregor_fetch_sendfile_bytes",
            "Record bytes of fetch responses sent with sendfile, by thread: worker (every page was in the page cache) or blocking_pool (some page was not, so the read could wait for the disk)",
            sendfile_bytes.clone(),
        );
        // One statement per label: `get_or_create`'s guard lives to the end of its statement,
        // and a second call in the same one would wait for it forever.
        let worker = sendfile_bytes
            .get_or_create(&SendfileLabels { thread: "worker" })
            .clone();
        let blocking_pool = sendfile_bytes
            .get_or_create(&SendfileLabels {
                thread: "blocking_pool",
            })
            .clone();
        let sendfile = SendfileCounters {
            worker,
            blocking_pool,
        };
        let latency_capped = Counter::default();
        registry.register(
            "gregor_fetch_latency_capped",
            "Consumer Fetches whose answer limit fetch.low.latency.max.bytes lowered below what the request and fetch.max.bytes allowed (the connection's round trip was short)",
            latency_capped.clone(),
        );
        let log_flush = Histogram::new(exponential_buckets(0.000_05, 2.0, 18));
        registry.register(
            "gregor_log_flush_duration_seconds",
            "Duration of each fdatasync that makes appends durable (Kafka LogFlushRateAndTimeMs)",
            log_flush.clone(),
        );
        let group_commit = Histogram::new(exponential_buckets(1.0, 2.0, 12));
        registry.register(
            "gregor_log_flush_batch_appends",
            "Appends made durable by one fdatasync (group commit)",
            group_commit.clone(),
        );
        BrokerMetrics {
            registry,
            bytes_in,
            messages_in,
            bytes_out,
            messages_out,
            replication_bytes_out,
            requests,
            request_errors,
            request_duration,
            purgatory,
            isr_changes: IsrChangeCounters {
                shrinks: isr_shrinks,
                expands: isr_expands,
            },
            sendfile,
            latency_capped,
            log_flush,
            group_commit,
            connections: Mutex::new(Weak::new()),
        }
    }

    /// Reports every log's fdatasyncs to this broker's histograms (process-wide: the last
    /// broker started in a process gets them).
    pub fn observe_log_syncs(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        gregor_log::set_sync_observer(Some(Arc::new(move |took: Duration, appends: u64| {
            if let Some(m) = weak.upgrade() {
                m.log_flush.observe(took.as_secs_f64());
                m.group_commit.observe(appends as f64);
            }
        })));
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

    fn open_connections(&self) -> Option<usize> {
        self.connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .upgrade()
            .map(|q| q.open())
    }

    /// A request was answered (or not, for `acks=0`) after `started`.
    pub fn request_done(&self, api: ApiKey, started: Instant, reply: &Reply) {
        let labels = ApiLabels {
            api: format!("{api:?}"),
        };
        self.request_duration
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
        self.requests.get_or_create(&labels).inc();
        match reply {
            Reply::Respond(response) => {
                self.count_errors(&labels.api, errors::error_codes(response))
            }
            Reply::Fetch(f) => {
                self.count_errors(&labels.api, errors::fetch_error_codes(&f.response))
            }
            Reply::Nothing | Reply::Close => {}
        }
    }

    fn count_errors(&self, api: &str, codes: Vec<i16>) {
        for code in codes {
            self.request_errors
                .get_or_create(&ApiErrorLabels {
                    api: api.to_string(),
                    error: errors::error_name(code),
                })
                .inc();
        }
    }

    /// A producer's batch was appended to `topic`.
    pub fn produced(&self, topic: &str, bytes: usize, records: i64) {
        let labels = TopicLabels {
            topic: topic.to_string(),
        };
        self.bytes_in.get_or_create(&labels).inc_by(bytes as u64);
        self.messages_in
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
            self.replication_bytes_out
                .get_or_create(&labels)
                .inc_by(bytes as u64);
            return;
        }
        self.bytes_out.get_or_create(&labels).inc_by(bytes as u64);
        self.messages_out.get_or_create(&labels).inc_by(records);
    }

    /// Counts a request parked in the produce or fetch purgatory until the guard drops.
    pub fn parked(&self, kind: &'static str) -> Parked {
        let gauge = self
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

    /// Requests parked now in the `kind` purgatory (`produce` or `fetch`).
    pub fn parked_now(&self, kind: &'static str) -> i64 {
        self.purgatory
            .get_or_create(&PurgatoryLabels { kind })
            .get()
    }

    /// The ISR change counters, for whoever applies committed partition states.
    pub fn isr_change_counters(&self) -> IsrChangeCounters {
        self.isr_changes.clone()
    }

    /// The event metrics in the text format (without the end marker).
    fn encode_events(&self, out: &mut String) -> std::fmt::Result {
        prometheus_client::encoding::text::encode_registry(out, &self.registry)
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

/// The whole scrape: the event metrics and the state read now.
pub async fn render(broker: &crate::Broker) -> String {
    let state = collect::registry(broker).await;
    let mut out = String::with_capacity(16 * 1024);
    let encoded = broker
        .metrics
        .encode_events(&mut out)
        .and_then(|()| prometheus_client::encoding::text::encode_registry(&mut out, &state))
        .and_then(|()| prometheus_client::encoding::text::encode_eof(&mut out));
    if let Err(e) = encoded {
        tracing::warn!(error = %e, "cannot encode metrics");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parked_requests_leave_the_gauge_when_done() {
        let m = BrokerMetrics::new();
        let a = m.parked("fetch");
        let b = m.parked("fetch");
        let gauge = || {
            m.purgatory
                .get_or_create(&PurgatoryLabels { kind: "fetch" })
                .get()
        };
        assert_eq!(gauge(), 2);
        drop(a);
        drop(b);
        assert_eq!(gauge(), 0);
    }
}
