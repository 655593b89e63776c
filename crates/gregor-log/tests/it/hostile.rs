//! Hostile record batches: lying counts and offset deltas, compressed or not, timestamps out
//! of bounds, keyless records on compacted topics, decompression bombs; and the settings the
//! validator applies (`compression.type`, `message.timestamp.*`).

use gregor_log::batch::{compute_crc, BatchHeader, Codec, ATTR_LOG_APPEND_TIME};
use gregor_log::codec::MAX_DECOMPRESSED_BYTES;
use gregor_log::error::kafka_code;
use gregor_log::records::{decode_batch, simple_batch};
use gregor_log::{CleanupPolicy, CompressionType, LogConfig, LogError, OffsetSpec};

use crate::common::{batch, batch_codec, open, read_all, split_batches, values, NOW};

/// Rewrite header fields of a batch and recompute its CRC, as a hostile producer would.
pub fn patch(mut b: Vec<u8>, record_count: Option<i32>, last_offset_delta: Option<i32>) -> Vec<u8> {
    if let Some(n) = record_count {
        b[57..61].copy_from_slice(&n.to_be_bytes());
    }
    if let Some(d) = last_offset_delta {
        b[23..27].copy_from_slice(&d.to_be_bytes());
    }
    let crc = compute_crc(&b);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

/// Issue 9's batch: gzip, one real record, `record_count = 2147483647`,
/// `last_offset_delta = 2147483646`, valid CRC.
pub fn lying_gzip_batch() -> Vec<u8> {
    let b = simple_batch(Codec::Gzip, NOW, &[(Some(b"k"), Some(b"v"))]).expect("encode");
    patch(b, Some(i32::MAX), Some(i32::MAX - 1))
}

fn code(e: &LogError) -> i16 {
    e.kafka_error_code()
}

#[test]
fn lying_count_batch_is_refused_on_ordinary_and_compacted_logs() {
    for policy in [CleanupPolicy::DELETE, CleanupPolicy::COMPACT] {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = LogConfig {
            cleanup_policy: policy,
            ..LogConfig::default()
        };
        let log = open(dir.path(), config.clone());
        log.append_as_leader(&batch(3, "ok", NOW), 0, NOW)
            .expect("a normal batch");
        let leo = log.log_end_offset();
        let size = log.size_bytes();
        let err = log
            .append_as_leader(&lying_gzip_batch(), 0, NOW)
            .expect_err("the lying batch is refused");
        assert_eq!(code(&err), kafka_code::INVALID_RECORD, "{policy:?}: {err}");
        assert_eq!(log.log_end_offset(), leo, "{policy:?}");
        assert_eq!(log.size_bytes(), size, "{policy:?}");
        // ListOffsets by timestamp still answers, and the log keeps serving.
        let hit = log
            .list_offset(OffsetSpec::Timestamp(NOW))
            .expect("list offsets")
            .expect("a hit");
        assert_eq!(hit.offset, 0);
        log.append_as_leader(&batch(1, "after", NOW), 0, NOW)
            .expect("still serving");
        log.close().expect("close");
        let log = open(dir.path(), config);
        assert_eq!(values(&read_all(&log)), ["ok-0", "ok-1", "ok-2", "after-0"]);
    }
}

#[test]
fn lying_counts_and_deltas_are_refused_for_every_codec() {
    for codec in [
        Codec::None,
        Codec::Gzip,
        Codec::Snappy,
        Codec::Lz4,
        Codec::Zstd,
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = open(dir.path(), LogConfig::default());
        let good = batch_codec(2, "g", NOW, codec);
        let cases = [
            ("count too high", patch(good.clone(), Some(3), Some(2))),
            ("count too low", patch(good.clone(), Some(1), Some(0))),
            (
                "count huge",
                patch(good.clone(), Some(i32::MAX), Some(i32::MAX - 1)),
            ),
            ("delta mismatch", patch(good.clone(), None, Some(5))),
            ("negative count", patch(good.clone(), Some(-1), None)),
        ];
        for (what, bad) in cases {
            let err = log.append_as_leader(&bad, 0, NOW).expect_err(what);
            assert_eq!(
                code(&err),
                kafka_code::INVALID_RECORD,
                "{codec:?} {what}: {err}"
            );
            assert_eq!(log.log_end_offset(), 0, "{codec:?} {what}");
        }
        log.append_as_leader(&good, 0, NOW)
            .expect("the honest batch");
        assert_eq!(log.log_end_offset(), 2);
    }
}

#[test]
fn a_follower_refuses_a_lying_count_but_accepts_compacted_gaps() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path(), LogConfig::default());
    let err = log
        .append_as_follower(&lying_gzip_batch(), NOW)
        .expect_err("refused");
    assert_eq!(code(&err), kafka_code::INVALID_RECORD, "{err}");
    // One record at delta 0 with lastOffsetDelta 9: a compacted batch, valid for a follower.
    let gap = patch(batch_codec(1, "c", NOW, Codec::Gzip), None, Some(9));
    log.append_as_follower(&gap, NOW).expect("compacted batch");
    assert_eq!(log.log_end_offset(), 10);
}

#[test]
fn recovery_truncates_a_stored_lying_batch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path(), LogConfig::default());
    log.append_as_leader(&batch(2, "kept", NOW), 0, NOW)
        .expect("append");
    drop(log); // no clean shutdown: the next open recovers the segment
               // What an older broker stored: the lying batch at offset 2, after the good data.
    let seg = dir.path().join("00000000000000000000.log");
    let mut bytes = std::fs::read(&seg).expect("read segment");
    let mut lying = lying_gzip_batch();
    lying[..8].copy_from_slice(&2i64.to_be_bytes());
    bytes.extend_from_slice(&lying);
    std::fs::write(&seg, &bytes).expect("write segment");
    let _ = std::fs::remove_file(dir.path().join(".clean-shutdown"));
    let log = open(dir.path(), LogConfig::default());
    assert_eq!(log.log_end_offset(), 2, "the lying batch was cut off");
    assert_eq!(values(&read_all(&log)), ["kept-0", "kept-1"]);
    let hit = log
        .list_offset(OffsetSpec::Timestamp(NOW))
        .expect("list offsets")
        .expect("hit");
    assert_eq!(hit.offset, 0);
    log.append_as_leader(&batch(1, "new", NOW), 0, NOW)
        .expect("appends continue");
    assert_eq!(log.log_end_offset(), 3);
}

#[test]
fn keyless_records_are_refused_on_compacted_logs_compressed_or_not() {
    for codec in [Codec::None, Codec::Gzip, Codec::Zstd] {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = open(
            dir.path(),
            LogConfig {
                cleanup_policy: CleanupPolicy::COMPACT,
                ..LogConfig::default()
            },
        );
        let keyless = simple_batch(codec, NOW, &[(Some(b"k"), Some(b"v")), (None, Some(b"x"))])
            .expect("encode");
        let err = log.append_as_leader(&keyless, 0, NOW).expect_err("keyless");
        assert_eq!(code(&err), kafka_code::INVALID_RECORD, "{codec:?}: {err}");
        assert_eq!(log.log_end_offset(), 0);
    }
}

#[test]
fn timestamps_outside_the_bounds_are_invalid_timestamp() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig {
        timestamp_before_max_ms: 60_000,
        timestamp_after_max_ms: 1_000,
        ..LogConfig::default()
    };
    let log = open(dir.path(), config);
    for (ts, ok) in [
        (NOW, true),
        (NOW - 60_000, true),
        (NOW - 60_001, false),
        (NOW + 1_000, true),
        (NOW + 1_001, false),
    ] {
        for codec in [Codec::None, Codec::Lz4] {
            let r = log.append_as_leader(&batch_codec(1, "t", ts, codec), 0, NOW);
            match (ok, r) {
                (true, Ok(_)) => {}
                (false, Err(e)) => assert_eq!(code(&e), kafka_code::INVALID_TIMESTAMP, "{e}"),
                (ok, r) => panic!("ts {ts} {codec:?}: expected ok={ok}, got {r:?}"),
            }
        }
    }
    assert_eq!(log.log_end_offset(), 6);
    // A producer may not claim LogAppendTime.
    let mut b = batch(1, "lat", NOW);
    let attrs = i16::from_be_bytes([b[21], b[22]]) | ATTR_LOG_APPEND_TIME;
    b[21..23].copy_from_slice(&attrs.to_be_bytes());
    let b = patch(b, None, None);
    let err = log.append_as_leader(&b, 0, NOW).expect_err("LogAppendTime");
    assert_eq!(code(&err), kafka_code::INVALID_TIMESTAMP);
}

#[test]
fn a_lying_max_timestamp_is_replaced_by_the_records_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path(), LogConfig::default());
    let mut b = batch(2, "m", NOW);
    b[35..43].copy_from_slice(&(NOW + 1_000_000).to_be_bytes());
    let b = patch(b, None, None);
    let info = log.append_as_leader(&b, 0, NOW).expect("append");
    assert_eq!(info.max_timestamp, NOW);
    let read = log.read(0, 1 << 20, None).expect("read");
    let h = BatchHeader::parse(&read.records).expect("header");
    assert_eq!(h.max_timestamp, NOW);
    assert_eq!(
        h.crc,
        compute_crc(&read.records[..h.size()]),
        "CRC recomputed"
    );
    let max = log
        .list_offset(OffsetSpec::MaxTimestamp)
        .expect("list")
        .expect("hit");
    assert_eq!((max.offset, max.timestamp), (0, NOW));
}

#[test]
fn a_decompression_bomb_over_the_cap_is_invalid_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path(), LogConfig::default());
    let big = vec![0u8; MAX_DECOMPRESSED_BYTES + 1];
    let bomb = simple_batch(Codec::Zstd, NOW, &[(Some(b"k"), Some(&big))]).expect("encode");
    assert!(
        bomb.len() < 1_048_588,
        "fits max.message.bytes: {}",
        bomb.len()
    );
    let err = log.append_as_leader(&bomb, 0, NOW).expect_err("bomb");
    assert_eq!(code(&err), kafka_code::INVALID_RECORD, "{err}");
    assert!(err.to_string().contains("cap"), "{err}");
    assert_eq!(log.log_end_offset(), 0);
}

#[test]
fn compression_type_recompresses_at_the_leader() {
    for (target, from) in [
        (Codec::Gzip, Codec::None),
        (Codec::None, Codec::Snappy),
        (Codec::Zstd, Codec::Lz4),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = LogConfig {
            compression: CompressionType::Codec(target),
            ..LogConfig::default()
        };
        let log = open(dir.path(), config.clone());
        let sent = batch_codec(3, "c", NOW, from);
        log.append_as_leader(&sent, 0, NOW).expect("append");
        let read = log.read(0, 1 << 20, None).expect("read");
        let stored = split_batches(&read.records);
        assert_eq!(stored.len(), 1);
        let h = BatchHeader::parse(stored[0]).expect("header");
        assert_eq!(h.codec(), Some(target), "{from:?} -> {target:?}");
        assert_eq!(h.crc, compute_crc(stored[0]));
        assert_eq!(
            decode_batch(stored[0]).expect("decode").1,
            decode_batch(&sent).expect("decode").1
        );
        // Recovery accepts what recompression wrote.
        drop(log);
        let _ = std::fs::remove_file(dir.path().join(".clean-shutdown"));
        let log = open(dir.path(), config);
        assert_eq!(values(&read_all(&log)), ["c-0", "c-1", "c-2"]);
    }
    // `producer` keeps the producer's codec byte for byte.
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path(), LogConfig::default());
    let sent = batch_codec(2, "p", NOW, Codec::Lz4);
    log.append_as_leader(&sent, 0, NOW).expect("append");
    let read = log.read(0, 1 << 20, None).expect("read");
    assert_eq!(&read.records[16..], &sent[16..]);
}

#[test]
fn a_read_loads_what_was_asked_for_up_to_the_bound_or_one_batch() {
    use crate::hostile_props::largest_allocation;
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path(), LogConfig::default());
    let value = vec![b'v'; 1000];
    for _ in 0..200 {
        let b = simple_batch(Codec::None, NOW, &[(Some(b"k"), Some(&value))]).expect("encode");
        log.append_as_leader(&b, 0, NOW).expect("append");
    }
    let big = vec![b'b'; 300_000];
    let b = simple_batch(Codec::None, NOW, &[(Some(b"k"), Some(&big))]).expect("encode");
    log.append_as_leader(&b, 0, NOW).expect("append");
    log.set_high_watermark(100);
    // A consumer's read stops at the high watermark and loads nothing beyond it, however much
    // the fetch allows.
    let (r, largest) = largest_allocation(|| log.read(0, 10 << 20, Some(100)));
    let r = r.expect("read");
    assert_eq!(r.next_offset, Some(100));
    assert!(
        largest <= r.records.len() + 8192,
        "loaded {largest} for {}",
        r.records.len()
    );
    // A small fetch loads what it asked for.
    let (r, largest) = largest_allocation(|| log.read(0, 5000, None));
    assert_eq!(split_batches(&r.expect("read").records).len(), 4);
    assert!(largest <= 5000 + 8192, "loaded {largest}");
    // KIP-74: a first batch over the limit comes whole, and nothing more is loaded.
    let (r, largest) = largest_allocation(|| log.read(200, 10, None));
    let r = r.expect("read");
    assert_eq!(r.records.len(), b.len());
    assert!(largest <= b.len() + 8192, "loaded {largest}");
}
