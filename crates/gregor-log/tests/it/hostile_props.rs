//! Structured fuzzing of the record-batch trust boundary, run by `cargo test`: hostile batches
//! (lying counts, deltas, lengths, timestamps; compressed or not; bit flips with the CRC
//! recomputed) go through validation, append, read, ListOffsets, compaction and recovery of a
//! real log. What must hold: no panic; no single allocation beyond a small multiple of the
//! batch's size (the decoded data of these small batches stays far below the decompression
//! cap); a refused batch leaves the log unchanged; an accepted one reads back byte for byte
//! (only the fields the leader owns differ); recovery after appending never fails and keeps
//! everything.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use gregor_log::batch::{compute_crc, BatchHeader, Codec};
use gregor_log::records::{simple_batch, KeyValue};
use gregor_log::{CleanupPolicy, Log, LogConfig, OffsetSpec};
use proptest::prelude::*;

use crate::common::{read_all, split_batches, NOW};

/// Counts, per thread, the largest single allocation while tracking is on.
struct Tracking;

thread_local! {
    static TRACK: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // `try_with`: allocations during thread teardown must not panic.
    let _ = TRACK.try_with(|t| {
        if t.get() {
            let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
        }
    });
}

// SAFETY: delegates to the system allocator; only records sizes on the side.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Tracking = Tracking;

/// Runs `f` and returns its result with the largest single allocation it made.
pub fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|l| l.set(0));
    TRACK.with(|t| t.set(true));
    let out = f();
    TRACK.with(|t| t.set(false));
    (out, LARGEST.with(Cell::get))
}

/// Fixed buffers the log uses whatever the input: the 1 MiB read chunk of a validating scan,
/// decoder state (lz4's and gzip's windows), the read buffer of `Log::read(.., 1 MiB)`.
const FIXED: usize = 1 << 21;

#[derive(Debug, Clone)]
enum Mutation {
    None,
    RecordCount(i32),
    LastOffsetDelta(i32),
    BatchLength(i32),
    MaxTimestamp(i64),
    /// Flip one bit at this position (mod the batch length) and recompute the CRC.
    BitFlip(usize, u8),
    /// Flip a bit and leave the CRC as it is.
    RawFlip(usize, u8),
    Truncate(usize),
}

fn interesting_i32() -> impl Strategy<Value = i32> {
    prop_oneof![
        Just(i32::MAX),
        Just(i32::MAX - 1),
        Just(i32::MIN),
        Just(-1),
        Just(0),
        0..12i32,
        any::<i32>(),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        2 => Just(Mutation::None),
        2 => interesting_i32().prop_map(Mutation::RecordCount),
        2 => interesting_i32().prop_map(Mutation::LastOffsetDelta),
        1 => interesting_i32().prop_map(Mutation::BatchLength),
        1 => any::<i64>().prop_map(Mutation::MaxTimestamp),
        4 => (any::<usize>(), 0..8u8).prop_map(|(p, b)| Mutation::BitFlip(p, b)),
        1 => (any::<usize>(), 0..8u8).prop_map(|(p, b)| Mutation::RawFlip(p, b)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
    ]
}

fn codec() -> impl Strategy<Value = Codec> {
    prop_oneof![
        Just(Codec::None),
        Just(Codec::Gzip),
        Just(Codec::Snappy),
        Just(Codec::Lz4),
        Just(Codec::Zstd),
    ]
}

/// A record: key (maybe null), value size.
fn record() -> impl Strategy<Value = (Option<u8>, usize)> {
    (proptest::option::weighted(0.9, 0..6u8), 0..200usize)
}

#[derive(Debug, Clone)]
struct Input {
    codec: Codec,
    records: Vec<(Option<u8>, usize)>,
    mutation: Mutation,
}

fn input() -> impl Strategy<Value = Input> {
    (
        codec(),
        proptest::collection::vec(record(), 1..8),
        mutation(),
    )
        .prop_map(|(codec, records, mutation)| Input {
            codec,
            records,
            mutation,
        })
}

fn build(input: &Input, tag: usize) -> Vec<u8> {
    let keys: Vec<Option<Vec<u8>>> = input
        .records
        .iter()
        .map(|(k, _)| k.map(|k| vec![b'k', k]))
        .collect();
    let vals: Vec<Vec<u8>> = input
        .records
        .iter()
        .enumerate()
        .map(|(i, (_, n))| {
            let mut v = format!("{tag}-{i}-").into_bytes();
            v.resize(v.len() + n, b'x');
            v
        })
        .collect();
    let kvs: Vec<KeyValue<'_>> = keys
        .iter()
        .zip(&vals)
        .map(|(k, v)| (k.as_deref(), Some(v.as_slice())))
        .collect();
    let mut b = simple_batch(input.codec, NOW, &kvs).expect("encode");
    let fix_crc = |b: &mut Vec<u8>| {
        if b.len() >= 61 {
            let crc = compute_crc(b);
            b[17..21].copy_from_slice(&crc.to_be_bytes());
        }
    };
    match input.mutation {
        Mutation::None => {}
        Mutation::RecordCount(n) => {
            b[57..61].copy_from_slice(&n.to_be_bytes());
            fix_crc(&mut b);
        }
        Mutation::LastOffsetDelta(d) => {
            b[23..27].copy_from_slice(&d.to_be_bytes());
            fix_crc(&mut b);
        }
        Mutation::BatchLength(l) => b[8..12].copy_from_slice(&l.to_be_bytes()),
        Mutation::MaxTimestamp(t) => {
            b[35..43].copy_from_slice(&t.to_be_bytes());
            fix_crc(&mut b);
        }
        Mutation::BitFlip(p, bit) => {
            let p = p % b.len();
            b[p] ^= 1 << bit;
            if !(17..21).contains(&p) {
                fix_crc(&mut b);
            }
        }
        Mutation::RawFlip(p, bit) => {
            let p = p % b.len();
            b[p] ^= 1 << bit;
        }
        Mutation::Truncate(n) => b.truncate(n % b.len()),
    }
    b
}

fn config(compact: bool) -> LogConfig {
    LogConfig {
        segment_bytes: 2048,
        index_interval_bytes: 256,
        retention_ms: None,
        min_cleanable_dirty_ratio: 0.0,
        cleanup_policy: if compact {
            CleanupPolicy::COMPACT
        } else {
            CleanupPolicy::DELETE
        },
        ..LogConfig::default()
    }
}

/// Every stored batch, as raw bytes, from the log start.
fn stored_batches(log: &Log) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = log.log_start_offset();
    while at < log.log_end_offset() {
        let r = log.read(at, 1 << 20, None).expect("read");
        let Some(next) = r.next_offset else { break };
        out.extend(split_batches(&r.records).into_iter().map(<[u8]>::to_vec));
        at = next;
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("GREGOR_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64),
        ..ProptestConfig::default()
    })]
    #[test]
    fn hostile_batches_never_harm_the_log(
        inputs in proptest::collection::vec(input(), 1..12),
        compact in any::<bool>(),
        probe in 0..3i64,
    ) {
        let dir = tempfile::tempdir().expect("tmp");
        let cfg = config(compact);
        let log = Log::open(dir.path(), cfg.clone(), NOW).expect("open");
        let mut accepted = 0usize;
        for (i, input) in inputs.iter().enumerate() {
            let bytes = build(input, i);
            let before = stored_batches(&log);
            let leo = log.log_end_offset();
            let (result, largest) =
                largest_allocation(|| log.append_as_leader(&bytes, 0, NOW));
            prop_assert!(
                largest <= FIXED + 4 * bytes.len(),
                "append of {} bytes allocated {largest} at once", bytes.len()
            );
            match result {
                Err(e) => {
                    prop_assert!(
                        [2, 10, 32, 87].contains(&e.kafka_error_code()),
                        "unexpected error {e}"
                    );
                    prop_assert_eq!(log.log_end_offset(), leo);
                    prop_assert_eq!(stored_batches(&log), before, "a refused batch changed the log");
                }
                Ok(info) => {
                    accepted += 1;
                    prop_assert_eq!(info.first_offset, leo);
                    let after = stored_batches(&log);
                    prop_assert_eq!(after.len(), before.len() + 1);
                    let stored = after.last().expect("the new batch");
                    let h = BatchHeader::parse(stored).expect("header");
                    prop_assert_eq!(h.base_offset, leo);
                    prop_assert_eq!(stored.len(), bytes.len());
                    // Byte for byte, except what the leader owns: base offset, leader epoch,
                    // and (with the CRC) a max timestamp the records contradict.
                    prop_assert_eq!(&stored[16..17], &bytes[16..17]);
                    prop_assert_eq!(&stored[21..35], &bytes[21..35]);
                    prop_assert_eq!(&stored[43..], &bytes[43..]);
                    prop_assert_eq!(h.crc, compute_crc(stored));
                }
            }
            let (lookups, largest) = largest_allocation(|| {
                (
                    log.list_offset(OffsetSpec::Timestamp(NOW + probe - 1)),
                    log.list_offset(OffsetSpec::MaxTimestamp),
                    log.read(0, 1 << 20, None),
                )
            });
            prop_assert!(lookups.0.is_ok() && lookups.1.is_ok() && lookups.2.is_ok(), "{lookups:?}");
            prop_assert!(largest <= FIXED + 4 * cfg.segment_bytes as usize, "lookups allocated {largest}");
        }
        log.set_high_watermark(log.log_end_offset());
        let before_compaction = read_all(&log);
        let (compacted, largest) = largest_allocation(|| log.compact(NOW));
        prop_assert!(compacted.is_ok(), "{compacted:?}");
        prop_assert!(largest <= FIXED + 8 * cfg.segment_bytes as usize, "compaction allocated {largest}");
        let leo = log.log_end_offset();
        let kept = read_all(&log);
        if !compact {
            prop_assert_eq!(&kept, &before_compaction);
        }
        // No clean shutdown: the next open recovers every segment after the recovery point.
        drop(log);
        let _ = std::fs::remove_file(dir.path().join(".clean-shutdown"));
        let log = Log::open(dir.path(), cfg, NOW).expect("recovery never fails");
        prop_assert_eq!(log.log_end_offset(), leo, "recovery lost data ({} accepted)", accepted);
        prop_assert_eq!(read_all(&log), kept);
    }
}
