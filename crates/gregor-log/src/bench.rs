//! `gregor bench log`: append and read throughput of the log compared with the raw bandwidth
//! of the same disk measured in the same run (plain `write` of the same bytes, with and without
//! `fdatasync`). The CLI prints each [`BenchCase`] as one JSON line.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Serialize;

use crate::error::{IoContext, LogError, Result};
use crate::records::{encode_batch, BatchSpec, Record};
use crate::{FlushPolicy, Log, LogConfig};

/// What to measure.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchOptions {
    /// Directory on the disk to measure (a scratch subdirectory is created and removed).
    pub dir: PathBuf,
    /// Duration of each case, split evenly between the raw-disk and the log measurement.
    pub seconds: f64,
    /// Size of each record's value.
    pub record_bytes: usize,
    /// Batch sizes to try.
    pub batch_bytes: Vec<usize>,
    /// Concurrent writer counts for the fsync cases.
    pub writers: Vec<usize>,
    /// Bytes a case may write in all, shared equally by its slices (bounds disk use).
    pub max_bytes_per_case: u64,
    /// Each case alternates this many pairs of slices of raw writes and log appends.
    pub rounds: usize,
}

impl BenchOptions {
    /// The default run: 1 KiB records in 16 KiB and 1 MiB batches, 1/4/16 writers, 4 s a case
    /// (about 35 s in all).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        BenchOptions {
            dir: dir.into(),
            seconds: 4.0,
            record_bytes: 1024,
            batch_bytes: vec![16 * 1024, 1024 * 1024],
            writers: vec![1, 4, 16],
            max_bytes_per_case: 2 << 30,
            rounds: 8,
        }
    }
}

/// One measured case.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchCase {
    /// `append`, `append-fsync` or `read`, with the batch size, e.g. `append-fsync/16KiB`.
    pub case: String,
    /// Whether every append waited for fdatasync.
    pub fsync: bool,
    /// Concurrent writers (1 for reads).
    pub writers: usize,
    /// Batch size in bytes.
    pub batch_bytes: usize,
    /// Record value size in bytes.
    pub record_bytes: usize,
    /// Measured throughput of the log (MB = 10^6 bytes).
    pub mb_per_s: f64,
    /// Raw throughput of the same disk for the same bytes (plain `write`, `write`+`fdatasync`
    /// from one thread, or `read`), measured in slices alternating with the log's.
    pub raw_mb_per_s: f64,
    /// `mb_per_s / raw_mb_per_s`.
    pub ratio: f64,
    /// fdatasync calls the log made (fsync cases), to show group commit at work.
    pub syncs: u64,
    /// Appends (or reads) made.
    pub operations: u64,
}

/// A batch of about `batch_bytes` made of records with `record_bytes` values.
pub fn make_batch(batch_bytes: usize, record_bytes: usize) -> Result<Vec<u8>> {
    let per = record_bytes + 16;
    let n = (batch_bytes.saturating_sub(61) / per).max(1);
    let value: Vec<u8> = (0..record_bytes).map(|i| (i * 31 % 251) as u8).collect();
    let value = Bytes::from(value);
    let recs: Vec<Record> = (0..n)
        .map(|i| Record {
            offset: i as i64,
            timestamp: 1_700_000_000_000,
            key: None,
            value: Some(value.clone()),
            headers: Vec::new(),
        })
        .collect();
    encode_batch(&BatchSpec::default(), &recs)
}

fn mb(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64().max(1e-9)
}

fn label(b: usize) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{}MiB", b >> 20)
    } else {
        format!("{}KiB", b >> 10)
    }
}

/// A file written with plain `write` (and optionally `fdatasync`) in slices of time.
struct RawWriter {
    path: PathBuf,
    file: File,
    fsync: bool,
    bytes: u64,
    time: Duration,
}

impl RawWriter {
    fn new(path: PathBuf, fsync: bool) -> Result<RawWriter> {
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&path)
            .at(&path)?;
        Ok(RawWriter {
            path,
            file,
            fsync,
            bytes: 0,
            time: Duration::ZERO,
        })
    }

    /// Writes `buf` repeatedly for `slice` or until `budget` more bytes are written.
    fn run(&mut self, buf: &[u8], slice: Duration, budget: u64) -> Result<()> {
        let start = Instant::now();
        let mut written = 0u64;
        while start.elapsed() < slice && written < budget {
            self.file.write_all(buf).at(&self.path)?;
            if self.fsync {
                self.file.sync_data().at(&self.path)?;
            }
            written += buf.len() as u64;
        }
        self.bytes += written;
        self.time += start.elapsed();
        Ok(())
    }

    /// Pushes this file's dirty pages to disk (untimed, between slices).
    fn settle(&self) -> Result<()> {
        self.file.sync_data().at(&self.path)
    }

    fn mb_per_s(&self) -> f64 {
        mb(self.bytes, self.time)
    }

    fn remove(self) -> Result<()> {
        drop(self.file);
        fs::remove_file(&self.path).at(&self.path)
    }
}

fn bench_config(fsync: bool) -> LogConfig {
    LogConfig {
        retention_ms: None,
        flush: if fsync {
            FlushPolicy::EveryAppend
        } else {
            FlushPolicy::Interval {
                messages: None,
                ms: None,
            }
        },
        ..LogConfig::default()
    }
}

/// Totals of a log append measurement.
#[derive(Default)]
struct LogTotals {
    bytes: u64,
    ops: u64,
    time: Duration,
}

/// Append `batch` from `writers` threads for `slice` or until `budget` bytes are written.
fn log_append(
    log: &Log,
    batch: &[u8],
    writers: usize,
    slice: Duration,
    budget: u64,
    t: &mut LogTotals,
) -> Result<()> {
    let stop = AtomicBool::new(false);
    let written = AtomicU64::new(0);
    let ops = AtomicU64::new(0);
    let start = Instant::now();
    let errors: Vec<LogError> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..writers)
            .map(|_| {
                s.spawn(|| -> Result<()> {
                    while !stop.load(Ordering::Relaxed) {
                        log.append_as_leader(batch, 0, 0)?;
                        ops.fetch_add(1, Ordering::Relaxed);
                        let w = written.fetch_add(batch.len() as u64, Ordering::Relaxed);
                        if start.elapsed() >= slice || w + batch.len() as u64 >= budget {
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|h| match h.join() {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e),
                Err(_) => Some(LogError::InvalidArgument("bench writer panicked".into())),
            })
            .collect()
    });
    t.time += start.elapsed();
    t.bytes += written.load(Ordering::Relaxed);
    t.ops += ops.load(Ordering::Relaxed);
    match errors.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Alternate slices of raw writes and log appends so both see the same disk conditions
/// (shared or throttled disks drift a lot within seconds). Each slice has an equal share of the
/// case's byte budget and starts with no dirty pages of either file (both are synced, untimed,
/// before every slice): otherwise whichever side writes after the other pays for its
/// writeback, and a fast side can spend the whole budget in its first slice, leaving the other
/// to run alone against gigabytes of dirty pages. Returns the log (for the read case), its
/// totals and the raw MB/s.
fn paired(
    scratch: &Path,
    name: &str,
    batch: &[u8],
    fsync: bool,
    writers: usize,
    o: &BenchOptions,
) -> Result<(Log, LogTotals, f64)> {
    let dir = scratch.join(name);
    let log = Log::open(&dir, bench_config(fsync), 0)?;
    let mut raw = RawWriter::new(scratch.join(format!("{name}.raw")), fsync)?;
    let rounds = o.rounds.max(1);
    let slice = Duration::from_secs_f64(o.seconds / rounds as f64 / 2.0);
    let budget = (o.max_bytes_per_case / (2 * rounds as u64)).max(batch.len() as u64);
    let mut t = LogTotals::default();
    let settle = |raw: &RawWriter| -> Result<()> {
        raw.settle()?;
        log.flush()
    };
    for round in 0..rounds {
        // Swap the order every round as well, so neither side always runs first.
        if round % 2 == 0 {
            settle(&raw)?;
            raw.run(batch, slice, budget)?;
            settle(&raw)?;
            log_append(&log, batch, writers, slice, budget, &mut t)?;
        } else {
            settle(&raw)?;
            log_append(&log, batch, writers, slice, budget, &mut t)?;
            settle(&raw)?;
            raw.run(batch, slice, budget)?;
        }
    }
    let raw_mb = raw.mb_per_s();
    raw.remove()?;
    Ok((log, t, raw_mb))
}

/// Read the whole log sequentially with 1 MiB reads, and the same file with plain `read`.
fn read_case(log: &Log, o: &BenchOptions, batch_bytes: usize) -> Result<BenchCase> {
    log.flush()?;
    let start = Instant::now();
    let mut at = log.log_start_offset();
    let leo = log.log_end_offset();
    let mut bytes = 0u64;
    let mut ops = 0u64;
    while at < leo {
        let r = log.read(at, 1 << 20, None)?;
        let Some(next) = r.next_offset else { break };
        bytes += r.records.len() as u64;
        ops += 1;
        at = next;
    }
    let log_mb = mb(bytes, start.elapsed());
    let start = Instant::now();
    let mut raw = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    for base in log.segment_base_offsets() {
        let p = log.dir().join(crate::segment::file_name(base, ".log"));
        let mut f = File::open(&p).at(&p)?;
        loop {
            let n = f.read(&mut buf).at(&p)?;
            if n == 0 {
                break;
            }
            raw += n as u64;
        }
    }
    let raw_mb = mb(raw, start.elapsed());
    Ok(BenchCase {
        case: format!("read/{}", label(batch_bytes)),
        fsync: false,
        writers: 1,
        batch_bytes,
        record_bytes: o.record_bytes,
        mb_per_s: log_mb,
        raw_mb_per_s: raw_mb,
        ratio: log_mb / raw_mb.max(1e-9),
        syncs: 0,
        operations: ops,
    })
}

/// Run every case. Scratch data lives in `opts.dir/gregor-bench-<pid>` and is removed.
pub fn run(opts: &BenchOptions) -> Result<Vec<BenchCase>> {
    if opts.seconds <= 0.0 || opts.batch_bytes.is_empty() || opts.record_bytes == 0 {
        return Err(LogError::InvalidArgument("bench: empty run".into()));
    }
    let scratch = opts
        .dir
        .join(format!("gregor-bench-{}", std::process::id()));
    fs::create_dir_all(&scratch).at(&scratch)?;
    let r = run_in(&scratch, opts);
    let cleanup = fs::remove_dir_all(&scratch).at(&scratch);
    let cases = r?;
    cleanup?;
    Ok(cases)
}

fn run_in(scratch: &Path, o: &BenchOptions) -> Result<Vec<BenchCase>> {
    let mut cases = Vec::new();
    for &bb in &o.batch_bytes {
        let batch = make_batch(bb, o.record_bytes)?;
        let case =
            |name: &str, fsync: bool, writers: usize, t: &LogTotals, raw: f64, syncs: u64| {
                let m = mb(t.bytes, t.time);
                BenchCase {
                    case: format!("{name}/{}", label(bb)),
                    fsync,
                    writers,
                    batch_bytes: batch.len(),
                    record_bytes: o.record_bytes,
                    mb_per_s: m,
                    raw_mb_per_s: raw,
                    ratio: m / raw.max(1e-9),
                    syncs,
                    operations: t.ops,
                }
            };
        // (a) no fsync, then sequential reads of what was written
        let name = format!("nofsync-{bb}");
        let (log, t, raw) = paired(scratch, &name, &batch, false, 1, o)?;
        cases.push(case("append", false, 1, &t, raw, 0));
        cases.push(read_case(&log, o, bb)?);
        drop(log);
        let dir = scratch.join(&name);
        fs::remove_dir_all(&dir).at(&dir)?;
        // (b) fsync with group commit
        for &w in &o.writers {
            let name = format!("fsync-{bb}-{w}");
            let (log, t, raw) = paired(scratch, &name, &batch, true, w, o)?;
            let syncs = log.stats().syncs;
            drop(log);
            let dir = scratch.join(&name);
            fs::remove_dir_all(&dir).at(&dir)?;
            cases.push(case("append-fsync", true, w, &t, raw, syncs));
        }
    }
    Ok(cases)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_run_reports_every_case() {
        let dir = tempfile::tempdir().expect("tmp");
        let opts = BenchOptions {
            seconds: 0.05,
            batch_bytes: vec![16 * 1024],
            writers: vec![1, 4],
            ..BenchOptions::new(dir.path())
        };
        let cases = run(&opts).expect("bench");
        let names: Vec<_> = cases.iter().map(|c| (c.case.as_str(), c.writers)).collect();
        assert_eq!(
            names,
            [
                ("append/16KiB", 1),
                ("read/16KiB", 1),
                ("append-fsync/16KiB", 1),
                ("append-fsync/16KiB", 4)
            ]
        );
        for c in &cases {
            assert!(
                c.mb_per_s > 0.0 && c.raw_mb_per_s > 0.0 && c.operations > 0,
                "{c:?}"
            );
            assert!((c.ratio - c.mb_per_s / c.raw_mb_per_s).abs() < 1e-9);
        }
        assert!(cases[2].syncs > 0);
        let json = serde_json::to_string(&cases[0]).expect("json");
        for field in [
            "\"case\"",
            "\"fsync\"",
            "\"writers\"",
            "\"mb_per_s\"",
            "\"raw_mb_per_s\"",
            "\"ratio\"",
        ] {
            assert!(json.contains(field), "{json}");
        }
        assert_eq!(
            std::fs::read_dir(dir.path()).expect("ls").count(),
            0,
            "scratch removed"
        );
    }
}
