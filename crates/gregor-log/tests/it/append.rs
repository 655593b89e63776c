use crate::common::*;
use gregor_log::batch::{BatchHeader, Codec};
use gregor_log::error::kafka_code;
use gregor_log::records::decode_batch;
use gregor_log::{LogConfig, LogError, OffsetSpec, TimestampOffset, TimestampType};

#[test]
fn leader_append_assigns_offsets_and_reads_back() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = open(dir.path(), LogConfig::default());
    let a = log
        .append_as_leader(&batch(3, "a", NOW), 5, NOW)
        .expect("append");
    assert_eq!((a.first_offset, a.last_offset), (0, 2));
    let b = log
        .append_as_leader(&batch(2, "b", NOW + 1), 5, NOW)
        .expect("append");
    assert_eq!((b.first_offset, b.last_offset), (3, 4));
    assert_eq!(log.log_end_offset(), 5);
    let recs = read_all(&log);
    assert_eq!(values(&recs), ["a-0", "a-1", "a-2", "b-0", "b-1"]);
    assert_eq!(
        recs.iter().map(|r| r.offset).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4]
    );
    // the stored batch carries the leader epoch and the original CRC
    let r = log.read(3, 1, None).expect("read");
    let h = BatchHeader::parse(&r.records).expect("header");
    assert_eq!((h.base_offset, h.partition_leader_epoch), (3, 5));
    assert_eq!(log.end_offset_for_epoch(5), (5, 5));
}

#[test]
fn every_codec_is_stored_as_received() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = open(dir.path(), LogConfig::default());
    for codec in [
        Codec::None,
        Codec::Gzip,
        Codec::Snappy,
        Codec::Lz4,
        Codec::Zstd,
    ] {
        let b = batch_codec(10, "z", NOW, codec);
        let info = log.append_as_leader(&b, 0, NOW).expect("append");
        let r = log.read(info.first_offset, 1 << 20, None).expect("read");
        // identical except the base offset (bytes 0..8) and leader epoch (12..16)
        assert_eq!(r.records.len(), b.len());
        assert_eq!(&r.records[16..], &b[16..], "{codec:?}");
        let (_, recs) = decode_batch(&r.records).expect("decode");
        assert_eq!(recs.len(), 10);
        assert_eq!(recs[0].offset, info.first_offset);
    }
}

#[test]
fn invalid_batches_are_rejected_whole_with_kafka_codes() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = LogConfig {
        max_message_bytes: 2000,
        ..LogConfig::default()
    };
    let log = open(dir.path(), cfg);
    let good = batch(2, "g", NOW);
    // CRC: flip a value byte
    let mut bad_crc = good.clone();
    let n = bad_crc.len();
    bad_crc[n - 2] ^= 0xff;
    // magic
    let mut bad_magic = good.clone();
    bad_magic[16] = 1;
    // record count mismatch (header count 3, lastOffsetDelta 1) -- fix the CRC so only the
    // count is wrong
    let mut bad_count = good.clone();
    bad_count[57..61].copy_from_slice(&3i32.to_be_bytes());
    let crc = crc32c::crc32c(&bad_count[21..]);
    bad_count[17..21].copy_from_slice(&crc.to_be_bytes());
    // truncated
    let truncated = good[..good.len() - 1].to_vec();
    let too_big = batch(40, &"x".repeat(100), NOW);
    let cases: Vec<(Vec<u8>, i16)> = vec![
        (bad_crc, kafka_code::CORRUPT_MESSAGE),
        (bad_magic, kafka_code::CORRUPT_MESSAGE),
        (bad_count, kafka_code::INVALID_RECORD),
        (truncated, kafka_code::CORRUPT_MESSAGE),
        (too_big, kafka_code::MESSAGE_TOO_LARGE),
        (vec![0; 11], kafka_code::CORRUPT_MESSAGE),
    ];
    for (i, (bad, code)) in cases.into_iter().enumerate() {
        // a good batch followed by a bad one: nothing of the request is written
        let mut req = good.clone();
        req.extend_from_slice(&bad);
        let e = log.append_as_leader(&req, 0, NOW).expect_err("must reject");
        assert_eq!(e.kafka_error_code(), code, "case {i}: {e}");
        assert_eq!(log.log_end_offset(), 0, "case {i}");
        assert_eq!(log.size_bytes(), 0, "case {i}");
    }
    let e = log.append_as_leader(&[], 0, NOW).expect_err("empty");
    assert_eq!(e.kafka_error_code(), kafka_code::INVALID_RECORD);
    log.append_as_leader(&good, 0, NOW)
        .expect("good batch still works");
    assert_eq!(log.log_end_offset(), 2);
}

#[test]
fn log_append_time_rewrites_header_and_crc() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = LogConfig {
        timestamp_type: TimestampType::LogAppendTime,
        ..LogConfig::default()
    };
    let log = open(dir.path(), cfg);
    let info = log
        .append_as_leader(&batch(3, "t", 5), 0, NOW)
        .expect("append");
    assert_eq!(info.log_append_time, Some(NOW));
    let r = log.read(0, 1 << 20, None).expect("read");
    let h = BatchHeader::parse(&r.records).expect("hdr");
    assert!(h.is_log_append_time());
    assert_eq!(h.max_timestamp, NOW);
    assert_eq!(h.crc, crc32c::crc32c(&r.records[21..]));
    let (_, recs) = decode_batch(&r.records).expect("decode");
    assert!(recs.iter().all(|r| r.timestamp == NOW));
}

#[test]
fn follower_keeps_offsets_and_checks_contiguity() {
    let leader_dir = tempfile::tempdir().expect("tmp");
    let follower_dir = tempfile::tempdir().expect("tmp");
    let leader = open(leader_dir.path(), LogConfig::default());
    leader
        .append_as_leader(&batch(3, "a", NOW), 1, NOW)
        .expect("append");
    leader
        .append_as_leader(&batch(3, "b", NOW), 2, NOW)
        .expect("append");
    let fetched = leader.read(0, 1 << 20, None).expect("read");
    let follower = open(follower_dir.path(), LogConfig::default());
    follower
        .append_as_follower(&fetched.records, NOW)
        .expect("follow");
    assert_eq!(follower.log_end_offset(), 6);
    assert_eq!(follower.epoch_entries(), vec![(1, 0), (2, 3)]);
    assert_eq!(follower.end_offset_for_epoch(1), (1, 3));
    // re-sending the same batches is not contiguous
    let e = follower
        .append_as_follower(&fetched.records, NOW)
        .expect_err("overlap");
    assert!(matches!(
        e,
        LogError::NonContiguousAppend {
            expected: 6,
            got: 0
        }
    ));
    assert_eq!(values(&read_all(&follower)), values(&read_all(&leader)));
}

#[test]
fn segments_roll_by_size_and_time_with_kafka_names() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = LogConfig {
        segment_ms: 60_000,
        ..small_config()
    };
    let log = open(dir.path(), cfg);
    let mut ts = NOW;
    for i in 0..40 {
        log.append_as_leader(&batch(5, &format!("r{i}"), ts), 0, ts)
            .expect("append");
        ts += 10;
    }
    let bases = log.segment_base_offsets();
    assert!(bases.len() > 3, "size rolls: {bases:?}");
    assert!(dir.path().join("00000000000000000000.log").exists());
    assert!(dir.path().join("00000000000000000000.index").exists());
    assert!(dir.path().join("00000000000000000000.timeindex").exists());
    let last = *bases.last().expect("segments");
    assert!(dir.path().join(format!("{last:020}.log")).exists());
    // time roll: a batch more than segment.ms after the active segment's first batch
    let n = log.segment_base_offsets().len();
    log.append_as_leader(&batch(1, "late", ts + 61_000), 0, ts + 61_000)
        .expect("append");
    assert_eq!(log.segment_base_offsets().len(), n + 1);
    assert_eq!(read_all(&log).len(), 201);
}

#[test]
fn read_respects_max_bytes_upper_bound_and_kip74() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = open(dir.path(), LogConfig::default());
    let mut sizes = Vec::new();
    for i in 0..5 {
        let b = batch(4, &format!("b{i}"), NOW);
        sizes.push(b.len());
        log.append_as_leader(&b, 0, NOW).expect("append");
    }
    // KIP-74: one batch even if larger than max_bytes
    let r = log.read(0, 1, None).expect("read");
    assert_eq!(r.records.len(), sizes[0]);
    assert_eq!(r.next_offset, Some(4));
    // a read in the middle of a batch returns that whole batch
    let r = log.read(6, sizes[1] + sizes[2], None).expect("read");
    assert_eq!(r.first_batch_offset, Some(4));
    assert_eq!(split_batches(&r.records).len(), 2);
    // upper bound (high watermark) excludes batches that reach it
    let r = log.read(0, 1 << 20, Some(9)).expect("read");
    assert_eq!(split_batches(&r.records).len(), 2);
    let r = log.read(8, 1 << 20, Some(8)).expect("read");
    assert!(r.records.is_empty());
    // at the end: empty; past the end: out of range
    assert!(log.read(20, 100, None).expect("read").records.is_empty());
    let e = log.read(21, 100, None).expect_err("oor");
    assert_eq!(e.kafka_error_code(), kafka_code::OFFSET_OUT_OF_RANGE);
}

#[test]
fn list_offsets_earliest_latest_max_and_by_time() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = open(dir.path(), small_config());
    assert_eq!(
        log.list_offset(OffsetSpec::MaxTimestamp).expect("list"),
        None
    );
    // timestamps 1000, 1010, ... one batch of 3 records each; one out-of-order batch
    for i in 0..60i64 {
        let ts = if i == 30 { 999_999 } else { 1000 + i * 10 };
        log.append_as_leader(&batch(3, "x", ts), 0, NOW)
            .expect("append");
    }
    assert!(log.segment_base_offsets().len() > 2);
    let at = |spec| log.list_offset(spec).expect("list");
    assert_eq!(
        at(OffsetSpec::Earliest),
        Some(TimestampOffset {
            offset: 0,
            timestamp: -1
        })
    );
    assert_eq!(
        at(OffsetSpec::Latest),
        Some(TimestampOffset {
            offset: 180,
            timestamp: -1
        })
    );
    assert_eq!(
        at(OffsetSpec::MaxTimestamp),
        Some(TimestampOffset {
            offset: 90,
            timestamp: 999_999
        })
    );
    assert_eq!(
        at(OffsetSpec::Timestamp(1000)),
        Some(TimestampOffset {
            offset: 0,
            timestamp: 1000
        })
    );
    assert_eq!(
        at(OffsetSpec::Timestamp(1205)),
        Some(TimestampOffset {
            offset: 63,
            timestamp: 1210
        })
    );
    // beyond every ordinary timestamp: the out-of-order batch is the first at or after it
    assert_eq!(
        at(OffsetSpec::Timestamp(5000)),
        Some(TimestampOffset {
            offset: 90,
            timestamp: 999_999
        })
    );
    assert_eq!(at(OffsetSpec::Timestamp(1_000_000)), None);
    // the answer is the same whatever the index interval (brute force over all records)
    let recs = read_all(&log);
    for t in (990..1700).step_by(7) {
        let want = recs.iter().find(|r| r.timestamp >= t).map(|r| r.offset);
        assert_eq!(
            at(OffsetSpec::Timestamp(t)).map(|x| x.offset),
            want,
            "t={t}"
        );
    }
}

/// A deferred append is written (its offsets are taken) before it is durable; awaiting the
/// token makes it so, and concurrent deferred appends can share one sync.
#[test]
fn deferred_append_assigns_offsets_then_becomes_durable() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = gregor_log::Log::open(dir.path(), gregor_log::LogConfig::default(), 0).expect("open");
    let kvs = [(None, Some(b"a".as_slice())), (None, Some(b"b".as_slice()))];
    let batch =
        gregor_log::records::simple_batch(gregor_log::batch::Codec::None, 0, &kvs).expect("batch");
    let (first, t1) = log.append_as_leader_deferred(&batch, 0, 0).expect("append");
    let (second, t2) = log.append_as_leader_deferred(&batch, 0, 0).expect("append");
    assert_eq!((first.first_offset, first.last_offset), (0, 1));
    assert_eq!((second.first_offset, second.last_offset), (2, 3));
    assert_eq!(log.log_end_offset(), 4);
    let syncs_before = log.stats().syncs;
    log.await_durable(t2).expect("durable");
    log.await_durable(t1).expect("already covered");
    assert_eq!(
        log.stats().syncs,
        syncs_before + 1,
        "one fdatasync covers both appends"
    );
}

/// The fetch path sends `read_slice`'s file range instead of `read`'s bytes: for every start
/// offset, limit and bound they must be the same batches, with the same counts and offsets.
#[test]
fn read_slice_names_exactly_the_bytes_read_returns() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = open(dir.path(), LogConfig::default());
    let mut sizes = Vec::new();
    for i in 0..6 {
        let b = batch(3, &format!("slice{i}"), NOW);
        sizes.push(b.len());
        log.append_as_leader(&b, 0, NOW).expect("append");
    }
    let total: usize = sizes.iter().sum();
    for from in 0..=18 {
        for max in [
            0,
            1,
            sizes[0] - 1,
            sizes[0],
            sizes[0] + 1,
            2 * sizes[0] + 5,
            total,
            1 << 20,
        ] {
            for bound in [None, Some(0), Some(4), Some(9), Some(18)] {
                let r = log.read(from, max, bound).expect("read");
                let s = log.read_slice(from, max, bound).expect("slice");
                let cached = log
                    .read_slice_cached(from, max, bound)
                    .expect("cached slice");
                let cached = cached.expect("the headers just written are in the page cache");
                assert_eq!(
                    (cached.records.pos, cached.records.len, cached.record_count),
                    (s.records.pos, s.records.len, s.record_count),
                    "{from} {max} {bound:?}"
                );
                assert_eq!(cached.next_offset, s.next_offset);
                assert_eq!(s.records.len, r.records.len(), "{from} {max} {bound:?}");
                assert_eq!(s.records.read().expect("pread"), r.records.to_vec());
                assert_eq!(s.next_offset, r.next_offset);
                assert_eq!(s.first_batch_offset, r.first_batch_offset);
                let n: i64 = split_batches(&r.records)
                    .iter()
                    .map(|b| i64::from(BatchHeader::parse(b).expect("header").record_count))
                    .sum();
                assert_eq!(s.record_count as i64, n);
            }
        }
    }
}

/// A fetch tries `read_slice_cached` on its async worker first: it must decline (not wait,
/// not answer wrongly) when the batch headers it would read left the page cache, and give
/// the blocking read's answer once they are back.
#[test]
fn a_cached_only_slice_declines_headers_not_in_the_page_cache() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = open(dir.path(), LogConfig::default());
    for i in 0..64 {
        log.append_as_leader(&batch(200, &format!("cold{i}"), NOW), 0, NOW)
            .expect("append");
    }
    let mut evicted = 0;
    for entry in std::fs::read_dir(dir.path()).expect("list") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "log") {
            let f = std::fs::File::open(&path).expect("open segment");
            gregor_log::page_cache::evict(&f).expect("evict");
            evicted += 1;
        }
    }
    assert_eq!(evicted, 1, "one segment file");
    let from = 64 * 200 / 2;
    assert!(
        log.read_slice_cached(from, 1 << 20, None)
            .expect("no error")
            .is_none(),
        "headers evicted from the page cache are declined"
    );
    let s = log.read_slice(from, 1 << 20, None).expect("blocking read");
    assert!(s.records.len > 0);
    let again = log
        .read_slice_cached(from, 1 << 20, None)
        .expect("no error")
        .expect("the blocking read brought the headers back");
    assert_eq!(
        (again.records.pos, again.records.len, again.record_count),
        (s.records.pos, s.records.len, s.record_count)
    );
}

/// tmpfs refuses `RWF_NOWAIT`; there the cached-only read asks `cachestat(2)` instead, and
/// a log in memory is read on the worker like one on a disk with its pages cached.
#[test]
fn a_cached_only_slice_reads_a_tmpfs_log_through_cachestat() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("a tmpfs at /dev/shm");
    let log = open(dir.path(), LogConfig::default());
    for i in 0..16 {
        log.append_as_leader(&batch(50, &format!("shm{i}"), NOW), 0, NOW)
            .expect("append");
    }
    for from in [0, 7, 400, 799] {
        let s = log.read_slice(from, 1 << 20, None).expect("read");
        let cached = log
            .read_slice_cached(from, 1 << 20, None)
            .expect("no error")
            .expect("a tmpfs log's pages are in memory");
        assert_eq!(
            (cached.records.pos, cached.records.len, cached.record_count),
            (s.records.pos, s.records.len, s.record_count),
            "from {from}"
        );
    }
}

/// A file cut shorter under a slice (a segment truncated while a fetch is in flight) shows as
/// a short read, never as other bytes: the sender can tell the frame cannot be finished.
#[test]
fn a_slice_reads_short_when_its_file_shrinks() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = open(dir.path(), LogConfig::default());
    for i in 0..3 {
        log.append_as_leader(&batch(2, &format!("t{i}"), NOW), 0, NOW)
            .expect("append");
    }
    let s = log.read_slice(0, 1 << 20, None).expect("slice");
    let before = s.records.read().expect("read");
    assert_eq!(split_batches(&before).len(), 3);
    let file = s.records.file.clone().expect("a file");
    file.set_len(s.records.pos + 10).expect("cut the file");
    let after = s.records.read().expect("read");
    assert_eq!(after.len(), 10);
    assert_eq!(&after[..], &before[..10]);
}

/// What a fetch must answer, from the batches appended ((base, last, size) each): whole
/// batches from the one holding `from`, below `bound`, within `max` bytes except that the
/// first is always whole (KIP-74). (position, length, records, offset after, first base).
fn expected_slice(
    batches: &[(i64, i64, usize)],
    from: i64,
    max: usize,
    bound: i64,
) -> Option<(usize, usize, u64, i64, i64)> {
    let k = batches.iter().position(|b| b.1 >= from)?;
    let pos: usize = batches[..k].iter().map(|b| b.2).sum();
    let (mut len, mut count, mut next) = (0, 0, None);
    for &(base, last, size) in &batches[k..] {
        if last >= bound || (len > 0 && len + size > max) {
            break;
        }
        len += size;
        count += (last - base + 1) as u64;
        next = Some(last + 1);
    }
    next.map(|n| (pos, len, count, n, batches[k].0))
}

/// A fetch does not read the headers of the batches that the offset index places inside its
/// answer. With every batch indexed, some, or none, and after the index is reloaded from its
/// file, the answer is the one a walk over every header gives.
#[test]
fn read_slice_skips_indexed_batches_and_answers_as_a_walk_would() {
    for interval in [1, 300, 4096, 1 << 30] {
        let dir = tempfile::tempdir().expect("tmp");
        let cfg = LogConfig {
            index_interval_bytes: interval,
            ..LogConfig::default()
        };
        let log = open(dir.path(), cfg.clone());
        let mut batches = Vec::new();
        for i in 0..30 {
            let b = batch([1, 3, 40, 7, 120][i % 5], &format!("skip{i}"), NOW);
            let info = log.append_as_leader(&b, 0, NOW).expect("append");
            batches.push((info.first_offset, info.last_offset, b.len()));
        }
        let leo = log.log_end_offset();
        let total: usize = batches.iter().map(|b| b.2).sum();
        let check = |log: &gregor_log::Log| {
            let froms = batches
                .iter()
                .flat_map(|b| [b.0, b.0 + (b.1 - b.0) / 2, b.1]);
            for from in froms {
                for max in [0, 1, 500, 1_000, 2_345, 5_000, total / 3, total] {
                    for bound in [None, Some(leo / 3), Some(leo - 1)] {
                        let s = log.read_slice(from, max, bound).expect("slice");
                        let got = s.next_offset.map(|n| {
                            (
                                s.records.pos as usize,
                                s.records.len,
                                s.record_count,
                                n,
                                s.first_batch_offset.expect("a first batch"),
                            )
                        });
                        let want = expected_slice(&batches, from, max, bound.unwrap_or(leo));
                        assert_eq!(got, want, "interval {interval}, {from} {max} {bound:?}");
                        let cached = log
                            .read_slice_cached(from, max, bound)
                            .expect("cached slice")
                            .expect("the headers just written are in the page cache");
                        assert_eq!(
                            (cached.records.pos, cached.records.len, cached.next_offset),
                            (s.records.pos, s.records.len, s.next_offset)
                        );
                    }
                }
            }
        };
        check(&log);
        log.close().expect("close");
        let reopened = open(dir.path(), cfg);
        check(&reopened);
    }
}
