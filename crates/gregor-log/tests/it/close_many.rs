//! Closing many logs at once (a broker's clean shutdown): a log unchanged since its open
//! writes nothing but its marker, markers left unsynced become durable with one `sync_fs`, and
//! a power loss at any point of it loses no data.

use crate::common::*;
use gregor_log::{Disk, FaultInjector, Log, LogConfig};
use std::fs;
use std::path::Path;
use std::sync::Arc;

const MARKER: &str = gregor_log::checkpoint::CLEAN_SHUTDOWN;

fn open_on(dir: &Path, faults: &Arc<FaultInjector>) -> Log {
    Log::open_on(
        dir,
        small_config(),
        NOW,
        Disk::with_faults(Arc::clone(faults)),
    )
    .expect("open")
}

/// 30 records over several segments, a high watermark and a log start offset of their own.
fn fill(log: &Log) {
    for i in 0..10 {
        log.append_as_leader(&batch(3, &format!("s{i}"), NOW), 1, NOW)
            .expect("append");
    }
    log.flush().expect("flush");
    log.set_high_watermark(25);
    log.delete_records_before(4).expect("DeleteRecords");
}

fn offsets(log: &Log) -> (i64, i64, i64) {
    (
        log.log_start_offset(),
        log.high_watermark(),
        log.log_end_offset(),
    )
}

#[test]
fn an_unchanged_log_closes_without_a_sync_and_a_changed_one_still_syncs() {
    let dir = tempfile::tempdir().expect("tmp");
    let faults = FaultInjector::new();
    let log = open_on(dir.path(), &faults);
    fill(&log);
    let before = offsets(&log);
    log.close().expect("close");
    drop(log);

    let log = open_on(dir.path(), &faults);
    faults.set_fail_sync(true);
    log.checkpoint()
        .expect("the checkpoint files hold what the open left");
    log.close_leaving_marker_unsynced()
        .expect("an unchanged log needs no sync to close");
    assert!(dir.path().join(MARKER).exists(), "marker written");
    faults.set_fail_sync(false);
    drop(log);

    let log = open_on(dir.path(), &faults);
    assert_eq!(offsets(&log), before, "every checkpoint still holds");
    log.append_as_leader(&batch(1, "late", NOW), 1, NOW)
        .expect("append");
    faults.set_fail_sync(true);
    assert!(
        log.close_leaving_marker_unsynced().is_err(),
        "a changed log syncs its data and checkpoints before its marker"
    );
    assert!(!dir.path().join(MARKER).exists(), "no marker without them");
}

#[test]
fn markers_left_unsynced_survive_a_power_loss_after_sync_fs_and_data_survives_without() {
    let root = tempfile::tempdir().expect("tmp");
    let faults = FaultInjector::power_model(root.path()).expect("model");
    let dirs: Vec<_> = (0..3).map(|i| root.path().join(format!("t-{i}"))).collect();
    let mut expected = Vec::new();
    for dir in &dirs {
        let log = open_on(dir, &faults);
        fill(&log);
        expected.push((offsets(&log), values(&read_all(&log))));
        log.close_leaving_marker_unsynced().expect("close");
    }
    // No sync of the markers: they are lost, the data is not.
    faults.power_loss(None).expect("power loss");
    for (dir, want) in dirs.iter().zip(&expected) {
        assert!(!dir.join(MARKER).exists(), "an unsynced marker is volatile");
        let log = open_on(dir, &faults);
        assert_eq!(&(offsets(&log), values(&read_all(&log))), want);
        // Unchanged since this (recovering) open: only the marker is written.
        log.close_leaving_marker_unsynced().expect("close");
    }
    Disk::with_faults(Arc::clone(&faults))
        .sync_fs(root.path())
        .expect("sync_fs");
    faults.power_loss(None).expect("power loss");
    for (dir, want) in dirs.iter().zip(&expected) {
        assert!(dir.join(MARKER).exists(), "sync_fs made the marker durable");
        let log = open_on(dir, &faults);
        assert_eq!(&(offsets(&log), values(&read_all(&log))), want);
    }
    assert!(faults.untracked_paths().is_empty());
}

#[test]
fn a_new_empty_log_closes_without_index_files_and_reopens_clean() {
    let root = tempfile::tempdir().expect("tmp");
    let faults = FaultInjector::power_model(root.path()).expect("model");
    let dir = root.path().join("t-0");
    let log = open_on(&dir, &faults);
    log.close_leaving_marker_unsynced().expect("close");
    let indexes: Vec<_> = fs::read_dir(&dir)
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with("index"))
        .collect();
    assert!(
        indexes.is_empty(),
        "no index files for an empty segment: {indexes:?}"
    );
    Disk::with_faults(Arc::clone(&faults))
        .sync_fs(root.path())
        .expect("sync_fs");
    faults.power_loss(None).expect("power loss");
    assert!(dir.join(MARKER).exists());
    let log = open_on(&dir, &faults);
    assert_eq!(offsets(&log), (0, 0, 0));
    let config = LogConfig {
        index_interval_bytes: 1,
        ..small_config()
    };
    log.set_config(config).expect("config");
    for i in 0..5 {
        log.append_as_leader(&batch(2, &format!("n{i}"), NOW + i), 1, NOW)
            .expect("append");
    }
    assert_eq!(read_all(&log).len(), 10, "the indexes start empty and grow");
    log.close().expect("close");
    drop(log);
    let log = open_on(&dir, &faults);
    assert_eq!(log.log_end_offset(), 10);
}
