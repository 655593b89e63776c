//! The shell's clock, task spawning and blocking file work. A simulation (gregor-sim, through
//! the `simulation` feature) replaces the clock and runs file work inline; a build without the
//! feature reads the wall clock and uses tokio's blocking pool directly.

use std::future::Future;
use std::time::{SystemTime, UNIX_EPOCH};

/// Whether a simulation is installed in this process (never, without the feature).
#[cfg(feature = "simulation")]
fn simulated() -> bool {
    crate::simulation::installed()
}

#[cfg(not(feature = "simulation"))]
const fn simulated() -> bool {
    false
}

/// `fut` keeping the clock of the task that wraps it, for tasks spawned some other way than
/// [`spawn`] (a `JoinSet`, another runtime's handle). Outside a simulation, `fut` itself.
pub(crate) fn inherit_clock<F: Future>(fut: F) -> impl Future<Output = F::Output> {
    #[cfg(feature = "simulation")]
    let fut = crate::simulation::inherit_clock(fut);
    fut
}

/// `tokio::spawn` for the broker's tasks: under a simulation a task keeps the clock of the
/// broker that spawned it, so one broker's clock can jump while the others' do not.
#[allow(clippy::disallowed_methods)] // the one place that may call it
pub fn spawn<F>(fut: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(inherit_clock(fut))
}

/// Wall-clock milliseconds, the only clock the shell reads (state machines get it as input).
pub fn now_ms() -> i64 {
    #[cfg(feature = "simulation")]
    if let Some(now) = crate::simulation::now_ms() {
        return now;
    }
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Runs blocking file work (log appends, fsync) off the async workers. Under a simulation the
/// calling thread waits for it (on a thread of its own, where blocking on a lock is allowed):
/// simulated time stands still meanwhile, and tasks interleave the same way on every run; the
/// caller then waits, in simulated time, whatever the syncs of a simulated slow disk owe.
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (v, owed) = blocking_owing(f).await;
    wait_simulated_disk(owed).await;
    v
}

/// [`blocking`] for a caller that holds an async lock: what a simulated slow disk's syncs owe
/// is returned, for the caller to wait out ([`wait_simulated_disk`]) once it has let go of the
/// lock. Under a simulation, file work runs inline on the simulation's one thread, so a task
/// asleep while holding a lock that other file work takes with `blocking_lock` would stop the
/// whole simulated world (zero outside a simulation).
pub async fn blocking_owing<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> (T, std::time::Duration) {
    #[cfg(feature = "simulation")]
    if simulated() {
        return crate::simulation::file_work_inline(f);
    }
    match tokio::task::spawn_blocking(f).await {
        Ok(v) => (v, std::time::Duration::ZERO),
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// Waits out, in the runtime's (simulated) time, what a simulated slow disk's syncs owe.
pub async fn wait_simulated_disk(owed: std::time::Duration) {
    if !owed.is_zero() {
        tokio::time::sleep(owed).await;
    }
}

/// Runs `f` on every item with up to `threads` threads (at least one). For file work bound by
/// fsync latency: concurrent fsyncs share the file system's journal commits, so opening or
/// closing many partition logs in parallel takes a fraction of doing it one by one.
pub fn for_each_parallel<T: Send>(items: Vec<T>, threads: usize, f: impl Fn(T) + Sync) {
    // Always on threads of its own, even one: callers may block there (a runtime thread may
    // not).
    // Under a simulation, one: file work then happens in the same order on every run.
    let threads = if simulated() {
        1
    } else {
        threads.clamp(1, items.len().max(1))
    };
    let queue = std::sync::Mutex::new(items.into_iter());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let next = queue
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .next();
                match next {
                    Some(item) => f(item),
                    None => return,
                }
            });
        }
    });
}

/// Holds back a repeated log line: [`LogEvery::due`] is `Some` at most once per interval (with
/// how many were held back since), so a peer retrying every 100 ms is told of once, not 600
/// times a minute. Time comes from the caller.
#[derive(Debug)]
pub struct LogEvery {
    every_ms: i64,
    /// When it last logged, and how many were held back since.
    state: std::sync::Mutex<(Option<i64>, u64)>,
}

impl LogEvery {
    pub const fn new(every_ms: i64) -> LogEvery {
        LogEvery {
            every_ms,
            state: std::sync::Mutex::new((None, 0)),
        }
    }

    /// Whether to log now (`now_ms`); `Some(held back since the last one)` if so.
    pub fn due(&self, now_ms: i64) -> Option<u64> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match s.0 {
            Some(last) if now_ms.saturating_sub(last) < self.every_ms => {
                s.1 += 1;
                None
            }
            _ => {
                let held = s.1;
                *s = (Some(now_ms), 0);
                Some(held)
            }
        }
    }
}

#[cfg(test)]
mod log_every_tests {
    use super::LogEvery;

    #[test]
    fn logs_once_per_interval_and_counts_what_it_held_back() {
        let l = LogEvery::new(10_000);
        assert_eq!(l.due(1_000), Some(0));
        assert_eq!(l.due(1_100), None);
        assert_eq!(l.due(10_999), None);
        assert_eq!(l.due(11_000), Some(2));
        assert_eq!(l.due(11_001), None);
        assert_eq!(l.due(30_000), Some(1));
    }
}
