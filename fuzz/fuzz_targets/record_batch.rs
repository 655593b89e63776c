//! The record-batch trust boundary on a real log: any bytes go through validation and append
//! (ordinary and compacted, leader and follower), and whatever was accepted must read back
//! byte for byte, answer ListOffsets, survive compaction and recovery. Nothing may panic.
//! `cargo test -p gregor-log` runs a structured counterpart (tests/it/hostile_props.rs).
#![no_main]
use gregor_log::batch::BatchHeader;
use gregor_log::{CleanupPolicy, Log, LogConfig, OffsetSpec};
use libfuzzer_sys::fuzz_target;

const NOW: i64 = 1_700_000_000_000;

fn config(compact: bool) -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 256,
        retention_ms: None,
        min_cleanable_dirty_ratio: 0.0,
        cleanup_policy: if compact { CleanupPolicy::COMPACT } else { CleanupPolicy::DELETE },
        ..LogConfig::default()
    }
}

fn everything(log: &Log) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = log.log_start_offset();
    while at < log.log_end_offset() {
        let r = log.read(at, 1 << 20, None).expect("a stored log reads back");
        let Some(next) = r.next_offset else { break };
        out.extend_from_slice(&r.records);
        at = next;
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, data)) = data.split_first() else { return };
    let compact = flags & 1 != 0;
    let follower = flags & 2 != 0;
    let _ = gregor_log::records::decode_batch(data);
    let Ok(dir) = tempfile::tempdir() else { return };
    let Ok(log) = Log::open(dir.path(), config(compact), NOW) else { return };
    // Twice, so that a second append lands after the first (and a roll can happen).
    for round in 0..2 {
        let before = everything(&log);
        let leo = log.log_end_offset();
        let result = if follower {
            log.append_as_follower(data, NOW)
        } else {
            log.append_as_leader(data, 0, NOW)
        };
        match result {
            Err(_) => {
                assert_eq!(log.log_end_offset(), leo, "a refused append moved the log end");
                assert_eq!(everything(&log), before, "a refused append changed the log");
            }
            Ok(info) => {
                let after = everything(&log);
                assert_eq!(&after[..before.len()], &before[..]);
                let new = &after[before.len()..];
                assert_eq!(new.len(), data.len(), "round {round}");
                // Byte for byte except the fields the leader owns (base offset, leader epoch,
                // max timestamp and CRC when it corrects them).
                if !follower {
                    assert_eq!(BatchHeader::parse(new).map(|h| h.base_offset), Some(info.first_offset));
                }
                let h = BatchHeader::parse(data).expect("accepted data has a header");
                if h.size() == data.len() {
                    assert_eq!(&new[43..], &data[43..]);
                }
            }
        }
        for spec in [OffsetSpec::Earliest, OffsetSpec::Latest, OffsetSpec::MaxTimestamp,
                     OffsetSpec::Timestamp(NOW), OffsetSpec::Timestamp(0)] {
            log.list_offset(spec).expect("ListOffsets on a stored log");
        }
    }
    log.set_high_watermark(log.log_end_offset());
    log.compact(NOW).expect("compaction of a stored log");
    let leo = log.log_end_offset();
    let kept = everything(&log);
    drop(log);
    let _ = std::fs::remove_file(dir.path().join(".clean-shutdown"));
    let log = Log::open(dir.path(), config(compact), NOW).expect("recovery never fails");
    assert_eq!(log.log_end_offset(), leo);
    assert_eq!(everything(&log), kept);
    drop(log);
    // The raw bytes as a segment: recovery truncates whatever is not valid.
    let _ = std::fs::write(dir.path().join("00000000000000000000.log"), data);
    let _ = std::fs::remove_file(dir.path().join(".clean-shutdown"));
    let _ = Log::open(dir.path(), config(compact), NOW);
});
