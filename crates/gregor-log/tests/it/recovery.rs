use crate::common::*;
use gregor_log::{LogConfig, OffsetSpec};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("mkdir");
    for e in fs::read_dir(from).expect("ls") {
        let e = e.expect("entry");
        fs::copy(e.path(), to.join(e.file_name())).expect("copy");
    }
}

fn active_log_file(dir: &Path) -> std::path::PathBuf {
    let mut logs: Vec<_> = fs::read_dir(dir)
        .expect("ls")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    logs.pop().expect("a segment")
}

/// Fill a log with `n` batches of 3 records over several segments and drop it uncleanly.
/// Returns the values in order and the size of the last batch.
fn crashed_log(dir: &Path, n: usize) -> (Vec<String>, usize) {
    let log = open(dir, small_config());
    let mut last = 0;
    for i in 0..n {
        let b = batch(3, &format!("v{i}"), NOW + i as i64);
        last = b.len();
        log.append_as_leader(&b, 0, NOW).expect("append");
    }
    let vals = values(&read_all(&log));
    drop(log); // no close(): like a crash after the appends were acknowledged
    (vals, last)
}

#[test]
fn cut_at_every_byte_of_the_last_batch() {
    let src = tempfile::tempdir().expect("tmp");
    let (vals, last_size) = crashed_log(src.path(), 30);
    let active = active_log_file(src.path());
    let full = fs::metadata(&active).expect("stat").len();
    for cut in 0..=last_size as u64 {
        let work = tempfile::tempdir().expect("tmp");
        copy_dir(src.path(), work.path());
        let f = OpenOptions::new()
            .write(true)
            .open(work.path().join(active.file_name().expect("name")))
            .expect("open");
        f.set_len(full - last_size as u64 + cut).expect("cut");
        drop(f);
        let log = open(work.path(), small_config());
        let got = values(&read_all(&log));
        let expect_n = if cut == last_size as u64 { 90 } else { 87 };
        assert_eq!(got.len(), expect_n, "cut {cut}");
        assert_eq!(got[..], vals[..expect_n], "cut {cut}");
        assert_eq!(log.log_end_offset(), expect_n as i64);
        // the log keeps working and survives another crash
        log.append_as_leader(&batch(1, "after", NOW), 0, NOW)
            .expect("append");
        drop(log);
        let log = open(work.path(), small_config());
        assert_eq!(read_all(&log).len(), expect_n + 1, "cut {cut}");
    }
}

#[test]
fn garbage_tail_is_truncated_and_records_kept() {
    for garbage in [
        vec![0u8; 100],
        vec![0xffu8; 7],
        // a header-shaped tail with a wrong CRC
        {
            let mut b = batch(2, "fake", NOW);
            let n = b.len();
            b[n - 3] ^= 1;
            b
        },
    ] {
        let dir = tempfile::tempdir().expect("tmp");
        let (vals, _) = crashed_log(dir.path(), 20);
        let active = active_log_file(dir.path());
        let before = fs::metadata(&active).expect("stat").len();
        let mut f = OpenOptions::new().append(true).open(&active).expect("open");
        f.write_all(&garbage).expect("garbage");
        drop(f);
        let log = open(dir.path(), small_config());
        assert_eq!(values(&read_all(&log)), vals);
        assert_eq!(fs::metadata(&active).expect("stat").len(), before);
        let info = log
            .append_as_leader(&batch(1, "next", NOW), 0, NOW)
            .expect("append");
        assert_eq!(info.first_offset, 60);
    }
}

#[test]
fn corrupt_batch_in_the_middle_truncates_from_there() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = open(dir.path(), LogConfig::default());
    let mut sizes = Vec::new();
    for i in 0..5 {
        let b = batch(2, &format!("m{i}"), NOW);
        sizes.push(b.len());
        log.append_as_leader(&b, 0, NOW).expect("append");
    }
    drop(log);
    let path = dir.path().join("00000000000000000000.log");
    let mut bytes = fs::read(&path).expect("read");
    let third = sizes[0] + sizes[1];
    bytes[third + 40] ^= 0x55; // inside the CRC-covered part of batch 2
    fs::write(&path, &bytes).expect("write");
    let log = open(dir.path(), LogConfig::default());
    assert_eq!(values(&read_all(&log)), ["m0-0", "m0-1", "m1-0", "m1-1"]);
    assert_eq!(log.log_end_offset(), 4);
}

fn check_lookups(log: &gregor_log::Log) {
    let recs = read_all(log);
    for r in recs.iter().step_by(5) {
        let got = log.read(r.offset, 1, None).expect("read");
        let first = split_batches(&got.records)[0];
        let (_, batch_recs) = gregor_log::records::decode_batch(first).expect("decode");
        assert!(batch_recs.iter().any(|x| x.offset == r.offset));
        let t = log
            .list_offset(OffsetSpec::Timestamp(r.timestamp))
            .expect("list")
            .expect("found");
        let want = recs
            .iter()
            .find(|x| x.timestamp >= r.timestamp)
            .expect("exists");
        assert_eq!(t.offset, want.offset);
    }
}

#[test]
fn missing_or_corrupt_index_files_are_rebuilt() {
    type Damage = (&'static str, fn(&Path));
    let damage: [Damage; 4] = [
        ("missing", |p| fs::remove_file(p).expect("rm")),
        ("odd size", |p| {
            let mut f = OpenOptions::new().append(true).open(p).expect("open");
            f.write_all(&[1, 2, 3]).expect("write");
        }),
        ("garbage", |p| {
            let len = fs::metadata(p).expect("stat").len().max(24) as usize;
            fs::write(p, vec![0xab; len / 12 * 24]).expect("write")
        }),
        ("zeroed", |p| {
            let len = fs::metadata(p).expect("stat").len().max(24) as usize;
            fs::write(p, vec![0; len / 24 * 24 + 24]).expect("write")
        }),
    ];
    for (what, f) in damage {
        for suffix in ["index", "timeindex"] {
            let dir = tempfile::tempdir().expect("tmp");
            let log = open(dir.path(), small_config());
            for i in 0..40 {
                log.append_as_leader(&batch(4, &format!("i{i}"), NOW + i), 0, NOW)
                    .expect("append");
            }
            let vals = values(&read_all(&log));
            log.close().expect("close");
            // damage the first (non-active) segment's index: trusted after a clean close
            f(&dir.path().join(format!("00000000000000000000.{suffix}")));
            let log = open(dir.path(), small_config());
            assert_eq!(values(&read_all(&log)), vals, "{what} {suffix}");
            check_lookups(&log);
        }
    }
}

#[test]
fn clean_shutdown_marker_skips_the_scan() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = open(dir.path(), LogConfig::default());
    for i in 0..4 {
        log.append_as_leader(&batch(2, &format!("c{i}"), NOW), 0, NOW)
            .expect("append");
    }
    log.close().expect("close");
    assert!(dir.path().join(".clean-shutdown").exists());
    // Damage a CRC-covered byte of the first batch. A scan would truncate the whole log;
    // after a clean shutdown the log is trusted and not scanned.
    let path = dir.path().join("00000000000000000000.log");
    let mut bytes = fs::read(&path).expect("read");
    bytes[70] ^= 1;
    fs::write(&path, &bytes).expect("write");
    let log = open(dir.path(), LogConfig::default());
    assert_eq!(log.log_end_offset(), 8);
    assert!(
        !dir.path().join(".clean-shutdown").exists(),
        "marker consumed"
    );
    drop(log);
    // Now without the marker: the same damage is found and the tail truncated.
    let log = open(dir.path(), LogConfig::default());
    assert_eq!(log.log_end_offset(), 0);
}

#[test]
fn checkpoints_survive_reopen() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = open(dir.path(), small_config());
    for i in 0..30 {
        log.append_as_leader(&batch(3, &format!("h{i}"), NOW), 2, NOW)
            .expect("append");
    }
    assert_eq!(log.set_high_watermark(45), 45);
    assert_eq!(log.set_high_watermark(1000), 90, "clamped to the log end");
    log.set_high_watermark(45);
    log.checkpoint().expect("checkpoint");
    drop(log);
    let log = open(dir.path(), small_config());
    assert_eq!(log.high_watermark(), 45);
    assert_eq!(log.log_end_offset(), 90);
    assert_eq!(log.epoch_entries(), vec![(2, 0)]);
    // a corrupt checkpoint is ignored, not fatal
    fs::write(dir.path().join("high-watermark"), b"garbage").expect("write");
    fs::write(dir.path().join("recovery-point"), b"0\nxx\n").expect("write");
    drop(log);
    let log = open(dir.path(), small_config());
    assert_eq!(log.high_watermark(), 0);
    assert_eq!(log.log_end_offset(), 90);
}

#[test]
fn concurrent_appends_share_fsyncs() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = open(dir.path(), LogConfig::default());
    let threads = 8;
    let per = 40;
    let offsets = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..threads {
            let log = &log;
            let offsets = &offsets;
            s.spawn(move || {
                for i in 0..per {
                    let info = log
                        .append_as_leader(&batch(2, &format!("t{t}-{i}"), NOW), 0, NOW)
                        .expect("append");
                    offsets.lock().expect("lock").push(info.first_offset);
                }
            });
        }
    });
    let mut offs = offsets.into_inner().expect("lock");
    offs.sort_unstable();
    let want: Vec<i64> = (0..threads * per).map(|i| i as i64 * 2).collect();
    assert_eq!(offs, want, "offsets are dense and unique");
    let stats = log.stats();
    assert_eq!(stats.appends, (threads * per) as u64);
    assert!(
        stats.syncs < stats.appends,
        "group commit shared syncs: {stats:?}"
    );
    assert!(stats.syncs > 0);
    // everything acknowledged is there after a crash
    drop(log);
    let log = open(dir.path(), LogConfig::default());
    assert_eq!(read_all(&log).len(), threads * per * 2);
}

/// Bytes the file system has allocated for a file (st_blocks counts 512-byte units).
fn allocated(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(path).expect("stat").blocks() * 512
}

#[test]
fn blocks_reserved_ahead_of_appends_are_returned_on_roll_close_and_reopen() {
    let dir = tempfile::tempdir().expect("tmp");
    let config = LogConfig {
        retention_ms: None,
        ..LogConfig::default()
    };
    let log = open(dir.path(), config.clone());
    for i in 0..4 {
        log.append_as_leader(&batch(3, &format!("v{i}"), NOW), 0, NOW)
            .expect("append");
    }
    let active = active_log_file(dir.path());
    let size = fs::metadata(&active).expect("stat").len();
    assert!(size < 4096, "a few small batches: {size}");
    // The file's size ends at the last batch; the blocks after it are reserved (1 MiB ahead).
    assert!(allocated(&active) >= 1 << 20, "{}", allocated(&active));
    let vals = values(&read_all(&log));
    drop(log); // a crash: the reservation stays on disk
    let log = open(dir.path(), config.clone());
    assert_eq!(values(&read_all(&log)), vals, "nothing lost or added");
    assert!(allocated(&active) < 64 << 10, "{}", allocated(&active));
    log.append_as_leader(&batch(3, "after", NOW), 0, NOW)
        .expect("append");
    assert!(allocated(&active) >= 1 << 20);
    log.close().expect("close");
    assert!(allocated(&active) < 64 << 10, "released on close");

    // A rolled segment gives its reserve back too.
    let log = open(dir.path(), small_config());
    for i in 0..20 {
        log.append_as_leader(&batch(3, &format!("r{i}"), NOW), 0, NOW)
            .expect("append");
    }
    let mut logs: Vec<_> = fs::read_dir(dir.path())
        .expect("ls")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    assert!(logs.len() > 2, "{logs:?}");
    for old in &logs[..logs.len() - 1] {
        assert!(allocated(old) < 64 << 10, "{old:?}: {}", allocated(old));
    }
    let total: usize = values(&read_all(&log)).len();
    assert_eq!(total, vals.len() + 3 + 60);
}
