//! The log cleaner (compaction of `cleanup.policy=compact` logs) and the deletion of removed
//! segments' files once `file.delete.delay.ms` has passed. Retention (`cleanup.policy=delete`)
//! stays on `log.retention.check.interval.ms`, in the broker's background duties.
//!
//! As in Kafka, the cleaner compacts while there is something to compact (a log whose dirty
//! share reached `min.cleanable.dirty.ratio`, whose oldest dirty record is
//! `max.compaction.lag.ms` old, or whose kept tombstones' delete horizon passed; the log decides
//! in [`gregor_log::Log::compact_within`]) and otherwise looks again after
//! `log.cleaner.backoff.ms`. [`CleanerSchedule`] is that decision, on injected time.

use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, warn};

use crate::config::BrokerConfig;
use crate::metrics::cleaner::{CleanerPass, LogCleanerMetrics};
use crate::replica::ReplicaManager;
use crate::runtime::now_ms;

/// How often removed segments' files are checked for a passed `file.delete.delay.ms`: the delay
/// is honoured to within this.
pub const RETIRED_FILES_CHECK: Duration = Duration::from_secs(1);

/// When the log cleaner next looks for logs to compact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanerSchedule {
    next_check_ms: i64,
}

impl CleanerSchedule {
    /// A cleaner started at `now_ms` looks at once.
    pub fn new(now_ms: i64) -> CleanerSchedule {
        CleanerSchedule {
            next_check_ms: now_ms,
        }
    }

    /// When the next check is due.
    pub fn next_check_ms(&self) -> i64 {
        self.next_check_ms
    }

    /// How long to wait from `now_ms` for the next check (zero once due).
    pub fn wait(&self, now_ms: i64) -> Duration {
        Duration::from_millis(u64::try_from(self.next_check_ms - now_ms).unwrap_or(0))
    }

    /// After a pass that ended at `now_ms`: one that compacted something is followed at once
    /// by another (more may be due: a key map that filled up, segments rolled meanwhile); one
    /// that found nothing by a pause of `backoff_ms` (`log.cleaner.backoff.ms`).
    pub fn after_pass(&mut self, now_ms: i64, cleaned: bool, backoff_ms: i64) {
        self.next_check_ms = if cleaned {
            now_ms
        } else {
            now_ms.saturating_add(backoff_ms.max(0))
        };
    }
}

/// The log cleaner of the logs this broker hosts.
pub struct LogCleaner<B> {
    replicas: Arc<ReplicaManager>,
    /// `log.cleaner.dedupe.buffer.size` (static).
    map_budget: usize,
    /// `log.cleaner.backoff.ms` now (a dynamic setting).
    backoff_ms: B,
    /// Where each pass's progress goes.
    metrics: LogCleanerMetrics,
}

impl<B: Fn() -> i64> LogCleaner<B> {
    pub fn new(
        replicas: Arc<ReplicaManager>,
        config: &BrokerConfig,
        backoff_ms: B,
        metrics: LogCleanerMetrics,
    ) -> Self {
        let map_budget = usize::try_from(config.int("log.cleaner.dedupe.buffer.size"))
            .unwrap_or(gregor_log::DEFAULT_MAP_BUDGET);
        LogCleaner {
            replicas,
            map_budget,
            backoff_ms,
            metrics,
        }
    }

    /// The log cleaner, until `shutdown` changes. Started by the background duties when
    /// `log.cleaner.enable` is true; `log.cleaner.backoff.ms` is read before every pause, so a
    /// change through IncrementalAlterConfigs applies from the next one.
    pub async fn run(self, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let mut schedule = CleanerSchedule::new(now_ms());
        loop {
            tokio::select! {
                _ = tokio::time::sleep(schedule.wait(now_ms())) => {}
                _ = shutdown.changed() => return,
            }
            let (cleaned, pass) = self.clean_logs().await;
            self.metrics.record(&pass, now_ms());
            let backoff_ms = (self.backoff_ms)();
            schedule.after_pass(now_ms(), cleaned, backoff_ms);
            debug!(
                cleaned,
                next_check_ms = schedule.next_check_ms(),
                "log cleaner pass done"
            );
        }
    }

    /// One pass of the cleaner over the hosted logs that have rolled segments to look at:
    /// whether it compacted anything, and what it did.
    async fn clean_logs(&self) -> (bool, CleanerPass) {
        let parts: Vec<_> = self
            .replicas
            .all()
            .into_iter()
            .filter(|p| p.log.has_cleanable_segments())
            .collect();
        if parts.is_empty() {
            return (false, CleanerPass::default());
        }
        let map_budget = self.map_budget;
        crate::runtime::blocking(move || {
            let mut cleaned = false;
            let mut pass = CleanerPass::default();
            for p in parts {
                // Below the last stable offset only: an open transaction may yet abort.
                let stable = p.last_stable_offset(p.high_watermark());
                match p.log.compact_below(now_ms(), map_budget, stable) {
                    Ok(stats) => {
                        cleaned |= stats.cleaned();
                        pass.add(&stats);
                    }
                    Err(e) => {
                        warn!(topic = %p.topic, partition = p.index, error = %e, "compaction failed")
                    }
                }
            }
            (cleaned, pass)
        })
        .await
    }
}

/// Unlinks the files of removed segments whose `file.delete.delay.ms` has passed.
pub(crate) async fn delete_retired_files(replicas: &ReplicaManager) {
    let now = now_ms();
    let parts: Vec<_> = replicas
        .all()
        .into_iter()
        .filter(|p| p.log.retired_files_pending(now))
        .collect();
    if parts.is_empty() {
        return;
    }
    crate::runtime::blocking(move || {
        for p in parts {
            if let Err(e) = p.log.delete_retired_files(now) {
                warn!(topic = %p.topic, partition = p.index, error = %e, "cannot delete retired segment files");
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    const BACKOFF: i64 = 15_000;

    #[test]
    fn the_first_check_is_at_start() {
        let s = CleanerSchedule::new(1_000);
        assert_eq!(s.wait(1_000), Duration::ZERO);
        assert_eq!(s.next_check_ms(), 1_000);
    }

    #[test]
    fn a_pass_that_found_nothing_backs_off() {
        let mut s = CleanerSchedule::new(0);
        s.after_pass(200, false, BACKOFF);
        assert_eq!(s.next_check_ms(), 15_200);
        assert_eq!(s.wait(200), Duration::from_millis(15_000));
        assert_eq!(s.wait(10_200), Duration::from_millis(5_000));
        assert_eq!(s.wait(15_200), Duration::ZERO);
        // Late (a long pass elsewhere): due, never a negative wait.
        assert_eq!(s.wait(20_000), Duration::ZERO);
    }

    #[test]
    fn a_pass_that_compacted_is_followed_at_once() {
        let mut s = CleanerSchedule::new(0);
        s.after_pass(300, false, BACKOFF);
        s.after_pass(15_300, true, BACKOFF);
        assert_eq!(s.wait(15_300), Duration::ZERO);
        s.after_pass(15_900, false, BACKOFF);
        assert_eq!(s.next_check_ms(), 30_900);
    }

    #[test]
    fn the_backoff_in_force_at_the_end_of_a_pass_applies() {
        let mut s = CleanerSchedule::new(0);
        s.after_pass(0, false, 1_000);
        assert_eq!(s.next_check_ms(), 1_000);
        s.after_pass(1_000, false, 0);
        assert_eq!(s.wait(1_000), Duration::ZERO);
        s.after_pass(1_000, false, -5);
        assert_eq!(s.next_check_ms(), 1_000, "a negative backoff is no pause");
    }
}
