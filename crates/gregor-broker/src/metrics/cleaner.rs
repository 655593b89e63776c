//! The log cleaner's progress: bytes read and written by compaction, when it last looked at
//! the logs, how dirty the dirtiest compacted log was and how much of what it read it had to
//! copy (Kafka's LogCleaner and LogCleanerManager metrics). The cleaner records each pass;
//! the scrape reads the counters and gauges.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use gregor_log::CompactionStats;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type FloatGauge = Gauge<f64, AtomicU64>;

/// What one pass of the cleaner over the hosted logs did, summed from each log's stats.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CleanerPass {
    /// Bytes of the segments compaction rewrote, before.
    pub bytes_read: u64,
    /// The same segments' bytes after.
    pub bytes_written: u64,
    /// The largest dirty share (dirty bytes over cleanable bytes) of the logs looked at.
    pub max_dirty_ratio: f64,
}

impl CleanerPass {
    /// Adds one log's compaction.
    pub fn add(&mut self, stats: &CompactionStats) {
        self.bytes_read += stats.bytes_before;
        self.bytes_written += stats.bytes_after;
        if stats.cleanable_bytes > 0 {
            let ratio = stats.dirty_bytes as f64 / stats.cleanable_bytes as f64;
            self.max_dirty_ratio = self.max_dirty_ratio.max(ratio);
        }
    }

    /// Bytes written over bytes read (Kafka's cleaner-recopy-percent, as a ratio); `None`
    /// when the pass rewrote nothing.
    pub fn recopy_ratio(&self) -> Option<f64> {
        (self.bytes_read > 0).then(|| self.bytes_written as f64 / self.bytes_read as f64)
    }
}

/// The cleaner's series, registered with the broker's event metrics.
#[derive(Clone, Debug)]
pub struct LogCleanerMetrics {
    bytes_read: Counter,
    bytes_written: Counter,
    max_dirty_ratio: FloatGauge,
    recopy_ratio: FloatGauge,
    /// Wall clock of the end of the last pass (ms); 0 before the first.
    last_run_ms: Arc<AtomicI64>,
}

impl LogCleanerMetrics {
    pub fn register(r: &mut Registry) -> LogCleanerMetrics {
        let m = LogCleanerMetrics {
            bytes_read: Counter::default(),
            bytes_written: Counter::default(),
            max_dirty_ratio: FloatGauge::default(),
            recopy_ratio: FloatGauge::default(),
            last_run_ms: Arc::new(AtomicI64::new(0)),
        };
        r.register(
            "gregor_log_cleaner_read_bytes",
            "Bytes of log segments the cleaner compacted (read before rewriting them)",
            m.bytes_read.clone(),
        );
        r.register(
            "gregor_log_cleaner_written_bytes",
            "Bytes the cleaner wrote in place of the segments it compacted",
            m.bytes_written.clone(),
        );
        r.register(
            "gregor_log_cleaner_max_dirty_ratio",
            "Largest dirty share (not yet compacted bytes over cleanable bytes) of the compacted logs at the cleaner's last pass (Kafka max-dirty-percent, as a ratio)",
            m.max_dirty_ratio.clone(),
        );
        r.register(
            "gregor_log_cleaner_recopy_ratio",
            "Bytes written over bytes read by the last cleaner pass that compacted anything (Kafka cleaner-recopy-percent, as a ratio)",
            m.recopy_ratio.clone(),
        );
        m
    }

    /// A pass ended at `now_ms`.
    pub fn record(&self, pass: &CleanerPass, now_ms: i64) {
        self.bytes_read.inc_by(pass.bytes_read);
        self.bytes_written.inc_by(pass.bytes_written);
        self.max_dirty_ratio.set(pass.max_dirty_ratio);
        if let Some(r) = pass.recopy_ratio() {
            self.recopy_ratio.set(r);
        }
        self.last_run_ms.store(now_ms, Ordering::Relaxed);
    }

    /// When the last pass ended (wall clock, ms); `None` before the first.
    pub fn last_run_ms(&self) -> Option<i64> {
        Some(self.last_run_ms.load(Ordering::Relaxed)).filter(|t| *t > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(before: u64, after: u64, dirty: u64, cleanable: u64) -> CompactionStats {
        CompactionStats {
            bytes_before: before,
            bytes_after: after,
            dirty_bytes: dirty,
            cleanable_bytes: cleanable,
            ..CompactionStats::default()
        }
    }

    #[test]
    fn a_pass_sums_bytes_and_keeps_the_dirtiest_log() {
        let mut pass = CleanerPass::default();
        assert_eq!(pass.recopy_ratio(), None);
        pass.add(&stats(1000, 250, 600, 1000));
        pass.add(&stats(0, 0, 0, 0));
        pass.add(&stats(3000, 750, 900, 1200));
        assert_eq!(pass.bytes_read, 4000);
        assert_eq!(pass.bytes_written, 1000);
        assert_eq!(pass.max_dirty_ratio, 0.75);
        assert_eq!(pass.recopy_ratio(), Some(0.25));
    }

    #[test]
    fn recorded_passes_add_up_and_stamp_the_last_run() {
        let m = LogCleanerMetrics::register(&mut Registry::default());
        assert_eq!(m.last_run_ms(), None);
        let mut pass = CleanerPass::default();
        pass.add(&stats(1000, 500, 10, 20));
        m.record(&pass, 5_000);
        // A pass that compacted nothing keeps the last recopy ratio.
        m.record(&CleanerPass::default(), 9_000);
        assert_eq!(m.bytes_read.get(), 1000);
        assert_eq!(m.bytes_written.get(), 500);
        assert_eq!(m.recopy_ratio.get(), 0.5);
        assert_eq!(m.max_dirty_ratio.get(), 0.0);
        assert_eq!(m.last_run_ms(), Some(9_000));
    }
}
