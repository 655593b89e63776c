//! Criterion benchmark of the broker's work per incremental fetch (KIP-227) for the session
//! itself: rewriting the request into the partitions to read, then cutting the answer down
//! to what changed. A follower or consumer of many partitions sends several such fetches a
//! second, and the broker pays this once per fetch before reading any log:
//! `cargo bench -p gregor-broker --bench fetch_session`. `incremental_fetch`: every partition
//! is read each round (none settles); `idle_fetch`: every partition settled, nothing changed.

use std::path::PathBuf;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use gregor_broker::fetch_frame::FetchReply;
use gregor_broker::fetch_session::{FetchSessionCache, SessionLimits, INITIAL_EPOCH};
use gregor_broker::fetch_signal::{Listeners, ReadState};
use gregor_log::FileSlice;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

const LIMITS: SessionLimits = SessionLimits {
    slots: 1000,
    eviction_ms: 120_000,
};

/// A request of `topics` topics of `partitions` partitions each, by name, as a consumer of
/// Fetch v12 sends it (a full fetch creating a session when `epoch` is 0).
fn request(session_id: i32, epoch: i32, topics: usize, partitions: i32) -> FetchRequest {
    let mut r = FetchRequest::default();
    r.session_id = session_id;
    r.session_epoch = epoch;
    if epoch == INITIAL_EPOCH {
        r.topics = (0..topics)
            .map(|t| {
                let mut ft = FetchTopic::default();
                ft.topic = TopicName(StrBytes::from_string(format!("orders-{t:04}")));
                ft.partitions = (0..partitions)
                    .map(|p| {
                        let mut fp = FetchPartition::default();
                        fp.partition = p;
                        fp.partition_max_bytes = 1 << 20;
                        fp
                    })
                    .collect();
                ft
            })
            .collect();
    }
    r
}

/// The handler's answer to `r`: every partition at high watermark `hw`, the first one with
/// a megabyte of records (so it moves to the end of the session's order).
fn reply(r: &FetchRequest, hw: i64) -> FetchReply {
    let mut response = FetchResponse::default();
    let mut records = Vec::new();
    for t in &r.topics {
        let mut out = FetchableTopicResponse::default();
        out.topic = t.topic.clone();
        for p in &t.partitions {
            let mut pd = PartitionData::default();
            pd.partition_index = p.partition;
            pd.high_watermark = hw;
            out.partitions.push(pd);
            records.push(FileSlice {
                file: None,
                path: PathBuf::new(),
                pos: 0,
                len: if records.is_empty() { 1 << 20 } else { 0 },
            });
        }
        response.responses.push(out);
    }
    FetchReply { response, records }
}

fn incremental(c: &mut Criterion) {
    let mut g = c.benchmark_group("incremental_fetch");
    g.sample_size(20).measurement_time(Duration::from_secs(3));
    for (topics, partitions) in [(1usize, 8i32), (1, 256), (16, 64)] {
        let mut cache = FetchSessionCache::new(7);
        let mut full = request(0, INITIAL_EPOCH, topics, partitions);
        let ctx = cache.begin(&mut full, 12, 0).expect("a full fetch");
        let mut answer = reply(&full, 0);
        cache.finish(ctx, &full, &mut answer, false, LIMITS, 0, &[]);
        let id = answer.response.session_id;
        assert!(id > 0, "the cache has room for the session");
        let mut epoch = 1;
        let total = topics as u64 * partitions as u64;
        g.throughput(Throughput::Elements(total));
        g.bench_function(
            BenchmarkId::from_parameter(format!("{topics}x{partitions}")),
            |b| {
                b.iter(|| {
                    let mut r = request(id, epoch, topics, partitions);
                    let ctx = cache.begin(&mut r, 12, 1).expect("in session");
                    let mut answer = reply(&r, 0);
                    cache.finish(ctx, &r, &mut answer, false, LIMITS, 1, &[]);
                    epoch += 1;
                    answer
                })
            },
        );
    }
    g.finish();
}

/// Rounds of a session whose partitions all settled and did not change: the cost is the
/// round's, not the session's.
fn idle(c: &mut Criterion) {
    let mut g = c.benchmark_group("idle_fetch");
    g.sample_size(20).measurement_time(Duration::from_secs(3));
    for (topics, partitions) in [(1usize, 8i32), (16, 64), (64, 64)] {
        let mut cache = FetchSessionCache::new(7);
        let mut full = request(0, INITIAL_EPOCH, topics, partitions);
        let total = topics * partitions as usize;
        let listeners: Vec<std::sync::Arc<Listeners>> =
            (0..total).map(|_| std::sync::Arc::default()).collect();
        let settled = |l: &std::sync::Arc<Listeners>| ReadState {
            settled: true,
            listeners: Some(l.clone()),
        };
        let reads: Vec<ReadState> = listeners.iter().map(settled).collect();
        let ctx = cache.begin(&mut full, 12, 0).expect("a full fetch");
        let mut answer = reply(&full, 0);
        cache.finish(ctx, &full, &mut answer, false, LIMITS, 0, &reads);
        let id = answer.response.session_id;
        // The first incremental round reads (and settles) what the session was registered
        // with only after its first read.
        let mut r = request(id, 1, topics, partitions);
        let ctx = cache.begin(&mut r, 12, 1).expect("in session");
        let mut answer = reply(&r, 0);
        cache.finish(ctx, &r, &mut answer, false, LIMITS, 1, &reads);
        let mut epoch = 2;
        g.throughput(Throughput::Elements(total as u64));
        g.bench_function(
            BenchmarkId::from_parameter(format!("{topics}x{partitions}")),
            |b| {
                b.iter(|| {
                    let mut r = request(id, epoch, topics, partitions);
                    let ctx = cache.begin(&mut r, 12, 1).expect("in session");
                    assert!(r.topics.is_empty(), "an idle round reads nothing");
                    let mut answer = reply(&r, 0);
                    cache.finish(ctx, &r, &mut answer, false, LIMITS, 1, &[]);
                    epoch += 1;
                    answer
                })
            },
        );
    }
    g.finish();
}

criterion_group!(benches, incremental, idle);
criterion_main!(benches);
