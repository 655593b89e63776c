//! `file.delete.delay.ms`: removed segments wait as `<file>.deleted` before they are unlinked.

use std::path::Path;

use crate::common::*;
use gregor_log::{CleanupPolicy, LogConfig};

const DELAY: i64 = 10_000;

/// Names in the directory ending with `suffix`, sorted.
fn names_ending(dir: &Path, suffix: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(suffix))
        .collect();
    v.sort();
    v
}

fn delayed(config: LogConfig) -> LogConfig {
    LogConfig {
        file_delete_delay_ms: DELAY,
        ..config
    }
}

/// A log of many small segments, all below the high watermark.
fn filled(dir: &Path, config: LogConfig) -> gregor_log::Log {
    let log = open(dir, config);
    for i in 0..30 {
        log.append_as_leader(&batch(3, &format!("r{i}"), NOW + i * 1000), 0, NOW)
            .expect("append");
    }
    log.set_high_watermark(log.log_end_offset());
    log
}

#[test]
fn retention_renames_segments_and_unlinks_them_after_the_delay() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = filled(dir.path(), delayed(small_config()));
    let before = log.segment_base_offsets();
    let st = log
        .delete_records_before(before[3])
        .expect("delete records");
    assert_eq!(st, before[3]);
    let t = NOW + 100_000;
    log.apply_retention(t).expect("retention");
    // The segments are out of the log at once; their files wait under another name.
    assert_eq!(log.segment_base_offsets(), before[3..].to_vec());
    let waiting = names_ending(dir.path(), ".log.deleted");
    assert_eq!(waiting.len(), 3, "{waiting:?}");
    assert!(!dir.path().join("00000000000000000000.log").exists());
    assert!(log.retired_files_pending(t), "removed without a clock");
    // DeleteRecords knew no time: the first sweep starts the delay.
    assert_eq!(log.delete_retired_files(t).expect("sweep"), 0);
    assert!(!log.retired_files_pending(t + DELAY - 1));
    assert_eq!(log.delete_retired_files(t + DELAY - 1).expect("sweep"), 0);
    assert_eq!(names_ending(dir.path(), ".log.deleted").len(), 3);
    assert!(log.delete_retired_files(t + DELAY).expect("sweep") >= 3);
    assert!(names_ending(dir.path(), ".deleted").is_empty());
    assert!(!log.retired_files_pending(t + 10 * DELAY));
}

#[test]
fn retention_by_time_starts_the_delay_at_the_removal() {
    let dir = tempfile::tempdir().expect("tmp");
    let config = LogConfig {
        retention_ms: Some(10_000),
        ..delayed(small_config())
    };
    let log = filled(dir.path(), config);
    let t = NOW + 45_000;
    let st = log.apply_retention(t).expect("retention");
    assert!(st.segments_deleted > 0);
    assert_eq!(
        names_ending(dir.path(), ".log.deleted").len(),
        st.segments_deleted
    );
    assert!(!log.retired_files_pending(t + DELAY - 1));
    assert!(log.retired_files_pending(t + DELAY));
    log.delete_retired_files(t + DELAY).expect("sweep");
    assert!(names_ending(dir.path(), ".deleted").is_empty());
    // What is left reads from the new start.
    assert_eq!(read_all(&log)[0].offset, log.log_start_offset());
}

#[test]
fn a_delay_of_zero_unlinks_at_once() {
    let dir = tempfile::tempdir().expect("tmp");
    let config = LogConfig {
        file_delete_delay_ms: 0,
        ..small_config()
    };
    let log = filled(dir.path(), config);
    let second = log.segment_base_offsets()[1];
    log.delete_records_before(second).expect("delete records");
    assert!(names_ending(dir.path(), ".deleted").is_empty());
    assert!(!log.retired_files_pending(i64::MAX));
    assert!(!dir.path().join("00000000000000000000.log").exists());
}

#[test]
fn truncation_frees_the_names_for_new_segments_at_the_same_base() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = filled(dir.path(), delayed(small_config()));
    let bases = log.segment_base_offsets();
    let cut = bases[bases.len() - 3];
    assert!(log.truncate_to(cut).expect("truncate"));
    assert_eq!(names_ending(dir.path(), ".log.deleted").len(), 2);
    // A follower appends again from the cut: the new segments reuse the names.
    for i in 0..10 {
        log.append_as_leader(&batch(3, &format!("n{i}"), NOW), 1, NOW)
            .expect("append");
    }
    let recs = read_all(&log);
    assert_eq!(recs.len() as i64, log.log_end_offset());
    assert_eq!(values(&recs)[cut as usize], "n0-0");
    log.delete_retired_files(NOW)
        .expect("sweep starts the delay");
    log.delete_retired_files(NOW + DELAY).expect("sweep");
    assert!(names_ending(dir.path(), ".deleted").is_empty());
    // The live segments were untouched by the unlinking of their namesakes.
    assert_eq!(read_all(&log), recs);
}

#[test]
fn waiting_files_go_at_close_or_at_the_next_open() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = filled(dir.path(), delayed(small_config()));
    let third = log.segment_base_offsets()[2];
    log.delete_records_before(third).expect("delete records");
    assert_eq!(names_ending(dir.path(), ".log.deleted").len(), 2);
    log.close().expect("close");
    assert!(names_ending(dir.path(), ".deleted").is_empty());
    drop(log);

    // A stop without a close leaves them: the next open removes them.
    let log = open(dir.path(), delayed(small_config()));
    log.set_high_watermark(log.log_end_offset());
    let fourth = log.segment_base_offsets()[1];
    log.delete_records_before(fourth).expect("delete records");
    assert_eq!(names_ending(dir.path(), ".log.deleted").len(), 1);
    drop(log);
    let log = open(dir.path(), delayed(small_config()));
    assert!(names_ending(dir.path(), ".deleted").is_empty());
    assert_eq!(log.log_start_offset(), fourth);
}

#[test]
fn compaction_retires_the_segments_it_replaces() {
    let dir = tempfile::tempdir().expect("tmp");
    let config = LogConfig {
        cleanup_policy: CleanupPolicy::COMPACT,
        min_cleanable_dirty_ratio: 0.0,
        ..delayed(small_config())
    };
    let log = open(dir.path(), config.clone());
    for i in 0..20 {
        let v = format!("{i}");
        log.append_as_leader(&kv_batch(&[("a", Some(&v)), ("b", Some(&v))], NOW), 0, NOW)
            .expect("append");
    }
    log.set_high_watermark(log.log_end_offset());
    let st = log.compact(NOW).expect("compact");
    assert!(st.segments_rewritten > 0, "{st:?}");
    // Every rewritten or emptied segment's original waits; the log reads its cleaned copy.
    let waiting = names_ending(dir.path(), ".log.deleted");
    assert_eq!(waiting.len(), st.segments_rewritten, "{waiting:?}");
    let after = read_all(&log);
    assert!(after.len() < 40);
    assert_eq!(values(&after).last().map(String::as_str), Some("19"));
    assert!(!log.retired_files_pending(NOW + DELAY - 1));
    log.delete_retired_files(NOW + DELAY).expect("sweep");
    assert!(names_ending(dir.path(), ".deleted").is_empty());
    drop(log);
    let log = open(dir.path(), config);
    assert_eq!(read_all(&log), after);
}
