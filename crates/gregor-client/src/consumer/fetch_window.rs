//! How many bytes a consumer keeps on their way from one broker: buffered (fetched, not yet
//! returned by `poll`) plus the answer awaited. Pure: the consumer's fetcher feeds it each
//! answer's size and timings and hands the window to the prefetch plan in place of
//! `fetch.max.bytes`.
//!
//! With one Fetch in flight per broker (a fetch session takes one request at a time), the plan
//! sends the next Fetch once at most half the window is buffered, asking for the other half.
//! The application then has half a window to work through while that Fetch makes its round
//! trip, so a window of twice the round trip's worth of the consumer's pace never leaves it
//! waiting. The window aims at twice that again, [`ROUND_TRIPS_AHEAD`] round trips' worth,
//! and stays within `[floor, fetch.max.bytes]`:
//!
//!   - On a short round trip it stays at the floor ([`WINDOW_FLOOR`], 8 MiB). A consumer's
//!     answers then fit the CPU's caches between the socket and `poll`, and it holds a few MiB
//!     per broker rather than `fetch.max.bytes`. On the project's machine a consumer of 256
//!     partitions read 1.2-1.3 times as fast this way, at 25% less CPU (BENCHMARKS.md).
//!     Below the floor the broker's work per Fetch took the gain back.
//!   - Over a long one the consumer's pace is what one answer per round trip carries, so the
//!     window grows (at most doubling per answer) until the transfer, not the round trip,
//!     takes the time, up to `fetch.max.bytes`: Kafka's 50 MiB by default.

use std::time::Duration;

use super::fetch::ByteLimits;

/// The least window: 8 MiB, or two partitions' worth when `max.partition.fetch.bytes` is
/// larger, within `fetch.max.bytes`.
pub const WINDOW_FLOOR: usize = 8 << 20;

/// How many round trips' worth of the consumer's pace the window aims at (see the module).
pub const ROUND_TRIPS_AHEAD: f64 = 4.0;

/// Round trips the estimate takes the least of. A round trip is only ever measured too long
/// (on a current-thread runtime the connection's reader notices an answer when the
/// application next waits), never too short.
const ROUND_TRIPS_KEPT: usize = 8;

/// One answer as [`FetchWindow::on_answer`] weighs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answered {
    /// The Fetch's `max_bytes`.
    pub asked: usize,
    /// Bytes of record batches it brought.
    pub bytes: usize,
    /// From sending the Fetch to reading its answer's first bytes.
    pub round_trip: Duration,
    /// Since the previous answer from the same broker landed (since this Fetch was sent, for
    /// the first): the consumer's pace is `bytes` over this.
    pub since_previous: Duration,
}

/// One broker's window (see the module).
#[derive(Debug, Clone, PartialEq)]
pub struct FetchWindow {
    bytes: usize,
    /// The last round trips measured (zero: not yet), the next one written at `next`.
    round_trips: [Duration; ROUND_TRIPS_KEPT],
    next: usize,
    /// The consumer's pace in bytes per second, smoothed over answers (0: none yet).
    pace: f64,
}

impl FetchWindow {
    /// A broker's window before its first answer: the floor.
    pub fn new(limits: ByteLimits) -> FetchWindow {
        FetchWindow {
            bytes: floor(limits),
            round_trips: [Duration::ZERO; ROUND_TRIPS_KEPT],
            next: 0,
            pace: 0.0,
        }
    }

    /// The window now, within `fetch.max.bytes`.
    pub fn bytes(&self, limits: ByteLimits) -> usize {
        self.bytes.clamp(floor(limits), limits.fetch_max.max(1))
    }

    /// Adapts the window to an answer that landed.
    pub fn on_answer(&mut self, a: Answered, limits: ByteLimits) {
        let window = self.bytes(limits);
        if a.bytes.saturating_mul(2) < a.asked {
            // A short answer says the broker had little to give (a consumer caught up, or few
            // partitions each bounded by `max.partition.fetch.bytes`), not what the link can
            // carry; its round trip may include the broker's `fetch.max.wait.ms`.
            self.bytes = window;
            return;
        }
        self.round_trips[self.next] = a.round_trip;
        self.next = (self.next + 1) % ROUND_TRIPS_KEPT;
        let round_trip = self
            .round_trips
            .iter()
            .filter(|d| !d.is_zero())
            .min()
            .copied()
            .unwrap_or(a.round_trip);
        let pace = a.bytes as f64 / a.since_previous.as_secs_f64().max(1e-6);
        self.pace = if self.pace > 0.0 {
            self.pace + (pace - self.pace) / 4.0
        } else {
            pace
        };
        // `as` saturates: an absurd estimate lands on a bound.
        let wanted = (self.pace * round_trip.as_secs_f64() * ROUND_TRIPS_AHEAD) as usize;
        self.bytes = wanted
            .clamp(window / 2, window.saturating_mul(2))
            .clamp(floor(limits), limits.fetch_max.max(1));
    }
}

/// The least window for these limits (see [`WINDOW_FLOOR`]).
fn floor(limits: ByteLimits) -> usize {
    WINDOW_FLOOR
        .max(limits.partition_max.saturating_mul(2))
        .min(limits.fetch_max.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    fn kafka_defaults() -> ByteLimits {
        ByteLimits {
            fetch_max: 50 * MIB,
            partition_max: MIB,
        }
    }

    fn ms(n: f64) -> Duration {
        Duration::from_secs_f64(n / 1000.0)
    }

    /// Feeds `w` answers of a consumer over a link of `round_trip_ms` and `link` bytes per
    /// second, whose application takes `app` bytes per second, each answer as large as asked
    /// (half the window, as the plan asks), and returns the windows after each answer.
    fn run(
        w: &mut FetchWindow,
        limits: ByteLimits,
        round_trip_ms: f64,
        link: f64,
        app: f64,
        answers: usize,
    ) -> Vec<usize> {
        (0..answers)
            .map(|_| {
                let asked = w.bytes(limits) / 2;
                let transfer = asked as f64 / link;
                let consumed = asked as f64 / app;
                // One Fetch in flight: answers come no faster than a round trip plus the
                // transfer, nor faster than the application uses them.
                let since = (round_trip_ms / 1000.0 + transfer).max(consumed);
                w.on_answer(
                    Answered {
                        asked,
                        bytes: asked,
                        round_trip: ms(round_trip_ms),
                        since_previous: Duration::from_secs_f64(since),
                    },
                    limits,
                );
                w.bytes(limits)
            })
            .collect()
    }

    #[test]
    fn on_a_short_round_trip_the_window_stays_at_the_floor() {
        let limits = kafka_defaults();
        let mut w = FetchWindow::new(limits);
        assert_eq!(w.bytes(limits), 8 * MIB);
        // Loopback: 0.2 ms, 5 GB/s, an application reading 3 GB/s.
        let windows = run(&mut w, limits, 0.2, 5e9, 3e9, 50);
        assert!(windows.iter().all(|b| *b == 8 * MIB), "{windows:?}");
    }

    #[test]
    fn over_a_long_round_trip_the_window_grows_to_fetch_max_bytes_at_most_doubling() {
        let limits = kafka_defaults();
        let mut w = FetchWindow::new(limits);
        // 50 ms and 1 GB/s: twice the round trip's worth is 100 MB, above 50 MiB.
        let windows = run(&mut w, limits, 50.0, 1e9, 3e9, 20);
        assert_eq!(*windows.last().unwrap(), 50 * MIB, "{windows:?}");
        let mut before = 8 * MIB;
        for b in &windows {
            assert!(*b <= before * 2 && *b >= before, "{windows:?}");
            before = *b;
        }
    }

    #[test]
    fn an_application_slower_than_the_link_settles_the_window_at_its_round_trips_worth() {
        let limits = kafka_defaults();
        let mut w = FetchWindow::new(limits);
        // 20 ms, a 1 GB/s link, an application taking 400 MB/s: four round trips of its
        // pace are 32 MB.
        let windows = run(&mut w, limits, 20.0, 1e9, 400e6, 60);
        let settled = *windows.last().unwrap() as f64;
        assert!((settled - 32e6).abs() < 2e6, "{windows:?}");
    }

    #[test]
    fn the_window_shrinks_back_at_most_halving_once_the_round_trip_is_short_again() {
        let limits = kafka_defaults();
        let mut w = FetchWindow::new(limits);
        run(&mut w, limits, 50.0, 1e9, 3e9, 20);
        assert_eq!(w.bytes(limits), 50 * MIB);
        // The least of the last eight round trips: a short one counts at once.
        let windows = run(&mut w, limits, 0.2, 5e9, 3e9, 10);
        let mut before = 50 * MIB;
        for b in &windows {
            assert!(*b >= before / 2 && *b <= before, "{windows:?}");
            before = *b;
        }
        assert_eq!(*windows.last().unwrap(), 8 * MIB, "{windows:?}");
    }

    #[test]
    fn short_answers_leave_the_window_as_it_is() {
        let limits = kafka_defaults();
        let mut w = FetchWindow::new(limits);
        run(&mut w, limits, 50.0, 1e9, 3e9, 2);
        let before = w.bytes(limits);
        for _ in 0..10 {
            // A consumer caught up: the broker parks each Fetch and answers with a little.
            w.on_answer(
                Answered {
                    asked: before / 2,
                    bytes: 1000,
                    round_trip: ms(500.0),
                    since_previous: ms(500.0),
                },
                limits,
            );
        }
        assert_eq!(w.bytes(limits), before);
    }

    #[test]
    fn the_floor_respects_fetch_max_bytes_and_large_partition_fetches() {
        let small = ByteLimits {
            fetch_max: 4 * MIB,
            partition_max: MIB,
        };
        let mut w = FetchWindow::new(small);
        assert_eq!(w.bytes(small), 4 * MIB);
        run(&mut w, small, 50.0, 1e9, 3e9, 10);
        assert_eq!(w.bytes(small), 4 * MIB, "never past fetch.max.bytes");
        let large = ByteLimits {
            fetch_max: 50 * MIB,
            partition_max: 10 * MIB,
        };
        assert_eq!(FetchWindow::new(large).bytes(large), 20 * MIB);
    }

    #[test]
    fn absurd_timings_land_on_a_bound() {
        let limits = kafka_defaults();
        let mut w = FetchWindow::new(limits);
        for (round_trip, since) in [
            (Duration::ZERO, Duration::ZERO),
            (Duration::MAX, Duration::ZERO),
            (Duration::from_secs(3600), Duration::from_nanos(1)),
        ] {
            w.on_answer(
                Answered {
                    asked: w.bytes(limits) / 2,
                    bytes: usize::MAX / 4,
                    round_trip,
                    since_previous: since,
                },
                limits,
            );
            let b = w.bytes(limits);
            assert!((8 * MIB..=50 * MIB).contains(&b), "{b}");
        }
    }
}
