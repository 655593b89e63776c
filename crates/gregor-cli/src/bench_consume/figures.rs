//! What `gregor bench consume` reports: each consumer's, loopback's and the replay's figures,
//! and one case (a partition count) holding them.

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct ConsumerFigure {
    pub records: u64,
    pub seconds: f64,
    pub mb_per_s: f64,
    /// Every run's MB/s, in the order run; with several (`--kcat-runs`), this figure is the
    /// median run's.
    pub runs_mb_per_s: Vec<f64>,
    /// Of loopback TCP in the same case.
    pub ratio_to_loopback: f64,
    /// Broker CPU seconds (user + system) per GB read; `None` without `--broker-pid`.
    pub broker_cpu_s_per_gb: Option<f64>,
    /// The consumer's own CPU seconds (user + system) per GB read: kcat's from this process's
    /// reaped children (`cutime` + `cstime`, its whole run), the Gregor client's from this
    /// process from its first record to its last (the window its MB/s is timed over; nothing
    /// else runs in the process then).
    pub client_cpu_s_per_gb: Option<f64>,
    /// The consumer's CPU seconds per wall second while it ran: its share of a core (above 1:
    /// more than one thread busy).
    pub client_cpu_share: Option<f64>,
    /// MB/s the consumer could reach with a whole core to itself: 1 / its CPU s/GB.
    pub client_ceiling_mb_per_s: Option<f64>,
    /// The broker's CPU seconds per wall second while this consumer ran.
    pub broker_cpu_share: Option<f64>,
    /// MB/s the broker could serve with a whole core to itself: 1 / its CPU s/GB.
    pub broker_ceiling_mb_per_s: Option<f64>,
    /// MB/s broker and consumer together could reach with all the machine's cores to
    /// themselves and nothing else running: cores / (broker + client CPU s/GB).
    pub machine_ceiling_mb_per_s: Option<f64>,
    /// The Gregor consumer's Fetch requests over the run (`None` for kcat).
    pub fetches: Option<u64>,
    /// The Gregor consumer's fetch window at the end of the run (`None` for kcat).
    pub fetch_window_bytes: Option<usize>,
    /// MB/s of the loopback run just before this run (at the baseline's read size).
    pub paired_loopback_mb_per_s: Option<f64>,
    /// Every run's MB/s over its paired loopback run's, in the order run.
    pub runs_paired_ratio: Vec<f64>,
    /// The median of `runs_paired_ratio` (the lower middle one for an even count).
    pub paired_ratio: Option<f64>,
}

impl ConsumerFigure {
    /// Pairs this run with the loopback run just before it.
    pub(super) fn pair(&mut self, loopback_mb_per_s: f64) {
        let ratio = self.mb_per_s / loopback_mb_per_s.max(1e-9);
        self.paired_loopback_mb_per_s = Some(loopback_mb_per_s);
        self.runs_paired_ratio = vec![ratio];
        self.paired_ratio = Some(ratio);
    }
}

/// Loopback TCP in the same case: its throughput and what it costs its two threads.
#[derive(Debug, Clone, Serialize)]
pub struct LoopbackFigure {
    /// The receiver's read size.
    pub read_bytes: usize,
    pub mb_per_s: f64,
    /// Every run's MB/s at this read size, in the order run; with several
    /// (`--loopback-runs`), this figure is the median run's.
    pub runs_mb_per_s: Vec<f64>,
    /// The sending thread's CPU seconds (user + system) per GB sent.
    pub sender_cpu_s_per_gb: f64,
    /// The receiving thread's CPU seconds per GB received: the least any consumer reading
    /// these bytes from a TCP socket pays (the kernel's copy to user space and the calls).
    pub receiver_cpu_s_per_gb: f64,
    /// MB/s the receiver could take with a whole core to itself: 1 / its CPU s/GB.
    pub receiver_ceiling_mb_per_s: Option<f64>,
}

/// kcat reading the topic again through the replay proxy, which recorded the broker's answers
/// to kcat with librdkafka's defaults and answers from memory every Fetch of recorded
/// partitions at recorded offsets.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayFigure {
    /// Its "broker" CPU figures are this process's, which runs the proxy.
    pub consumer: ConsumerFigure,
    pub fetches_replayed: u64,
    /// Fetches the replay could not answer (a partition at an offset not answered while
    /// recording), forwarded to the broker.
    pub fetches_forwarded: u64,
    /// Megabytes of Fetch answers held in memory.
    pub mb_held: f64,
    /// Of the Fetches, the share answered from memory (whole, or composed from recorded
    /// partitions). Well below 1 (librdkafka asked for partitions at offsets never answered
    /// while recording), the figure is not a ceiling.
    pub replayed_share: f64,
    /// librdkafka's MB/s against the broker over its MB/s against the replay: how near the
    /// broker comes to answering instantly, for this consumer.
    pub broker_of_replay: Option<f64>,
    /// The first error a proxied connection ended with, if any.
    pub proxy_error: Option<String>,
    /// The broker's cap on an answer on loopback (`fetch.max.bytes`, or
    /// `fetch.low.latency.max.bytes` where set and smaller), which answers composed by the
    /// replay keep to.
    pub answer_cap_bytes: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConsumeCase {
    pub partitions: i32,
    pub records: u64,
    /// Record batch bytes in the topic (what the consumers read).
    pub bytes: u64,
    pub loopback_mb_per_s: f64,
    /// The fastest loopback run, the baseline (`loopback_mb_per_s` is its throughput).
    pub loopback: LoopbackFigure,
    /// Every loopback run, one per `--loopback-reads` size.
    pub loopback_runs: Vec<LoopbackFigure>,
    pub page_cache_mb_per_s: f64,
    /// kcat with librdkafka's defaults.
    pub librdkafka: Option<ConsumerFigure>,
    /// kcat with the `--kcat-tuned` properties.
    pub librdkafka_tuned: Option<ConsumerFigure>,
    /// The tuned kcat's command line (topic and broker included).
    pub librdkafka_tuned_command: Option<String>,
    /// kcat with librdkafka's defaults against a replay of the broker's answers.
    pub librdkafka_replay: Option<ReplayFigure>,
    /// kcat with the `--kcat-tuned` properties against the same replay (answers composed
    /// within its smaller requests where they differ from the recorded ones).
    pub librdkafka_tuned_replay: Option<ReplayFigure>,
    pub gregor: ConsumerFigure,
    /// The Gregor consumer with `fetch.max.bytes` of `--gregor-tuned-fetch-max-bytes`.
    pub gregor_tuned: Option<ConsumerFigure>,
    pub gregor_tuned_fetch_max_bytes: Option<i32>,
    /// The Gregor consumer's group join, before its first record (the median of its runs).
    pub gregor_join_s: f64,
}
