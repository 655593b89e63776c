//! Criterion benchmarks of the log's hot paths (page-cache mode, so the disk is not measured):
//! `cargo bench -p gregor-log`. The disk-relative figures come from `gregor bench log`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use gregor_log::bench::make_batch;
use gregor_log::{FlushPolicy, Log, LogConfig};
use std::time::Duration;

fn config() -> LogConfig {
    LogConfig {
        retention_ms: None,
        segment_bytes: 256 << 20,
        flush: FlushPolicy::Interval {
            messages: None,
            ms: None,
        },
        ..LogConfig::default()
    }
}

fn append(c: &mut Criterion) {
    let mut g = c.benchmark_group("append");
    g.sample_size(10).measurement_time(Duration::from_secs(2));
    for kib in [16usize, 1024] {
        let batch = make_batch(kib * 1024, 1024).expect("batch");
        let dir = tempfile::tempdir().expect("tmp");
        let log = Log::open(dir.path(), config(), 0).expect("open");
        g.throughput(Throughput::Bytes(batch.len() as u64));
        g.bench_function(format!("{kib}KiB"), |b| {
            b.iter(|| log.append_as_leader(&batch, 0, 0).expect("append"))
        });
    }
    g.finish();
}

fn read(c: &mut Criterion) {
    let mut g = c.benchmark_group("read");
    g.sample_size(10).measurement_time(Duration::from_secs(2));
    let batch = make_batch(16 * 1024, 1024).expect("batch");
    let dir = tempfile::tempdir().expect("tmp");
    let log = Log::open(dir.path(), config(), 0).expect("open");
    for _ in 0..2048 {
        log.append_as_leader(&batch, 0, 0).expect("append");
    }
    let leo = log.log_end_offset();
    g.throughput(Throughput::Bytes(1 << 20));
    let mut at = 0;
    g.bench_function("1MiB", |b| {
        b.iter(|| {
            let r = log.read(at, 1 << 20, None).expect("read");
            at = match r.next_offset {
                Some(n) if n < leo => n,
                _ => 0,
            };
            r.records.len()
        })
    });
    g.finish();
}

criterion_group!(benches, append, read);
criterion_main!(benches);
