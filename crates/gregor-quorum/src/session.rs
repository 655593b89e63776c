//! KIP-368 on controller connections, as pure decisions (time comes from the caller).
//!
//! A controller listener with `connections.max.reauth.ms` tells each login how long its session
//! lasts and closes the connection once that has passed. The controller RPC is not Kafka
//! framing after the login, so a session cannot be renewed in band: the client opens a new
//! connection with a fresh login before the old session ends, moves new RPCs to it and drops
//! the old one (make before break). Kafka's clients re-authenticate at a random point between
//! 85% and 95% of the lifetime, on the same connection; here the fresh login starts at a random
//! point between 85% and 90% (the jitter keeps connections made together from logging in
//! again together), so that it is done by 95%, when the old connection stops taking new
//! requests: the last 5% is room for a request in flight to reach the server before the
//! session ends there.

use std::time::Duration;

use tokio::time::Instant;

/// Where a session stands at a given moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Keep using it.
    Fresh,
    /// Keep using it, and log in afresh on a new connection to replace it.
    Renew,
    /// Send nothing more on it: a request might reach the server after the session ended
    /// there, and be cut off.
    Retired,
}

/// A login's session: when it started (on the client, before its first byte was sent, so
/// never later than the server's start) and how long the server said it lasts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lifetime {
    pub started: Instant,
    pub lasts: Duration,
    /// Where in the 85-90% window this session renews: 0.0 (at 85%) to 1.0 (at 90%).
    pub jitter: f64,
}

impl Lifetime {
    /// When the fresh login starts.
    pub fn renew_at(&self) -> Instant {
        let fraction = 0.85 + 0.05 * self.jitter.clamp(0.0, 1.0);
        self.started + self.lasts.mul_f64(fraction)
    }

    /// When new requests stop going out on it: 5% of the lifetime before the server's end,
    /// room for a request in flight to arrive while the session is still open there.
    pub fn retire_at(&self) -> Instant {
        self.started + self.lasts - self.lasts / 20
    }

    /// Where the session stands at `now`.
    pub fn phase(&self, now: Instant) -> Phase {
        if now >= self.retire_at() {
            Phase::Retired
        } else if now >= self.renew_at() {
            Phase::Renew
        } else {
            Phase::Fresh
        }
    }
}

/// A session without a lifetime never needs renewing.
pub fn phase(lifetime: Option<&Lifetime>, now: Instant) -> Phase {
    lifetime.map_or(Phase::Fresh, |l| l.phase(now))
}

/// How long to wait before trying a fresh login again after `failures` refused ones in a row:
/// 100 ms doubling to 2 s (the old session keeps serving meanwhile, until it retires).
pub fn retry_after(failures: u32) -> Duration {
    Duration::from_millis(100u64.saturating_mul(1 << failures.saturating_sub(1).min(5)))
        .min(Duration::from_secs(2))
}

/// The server's side: whether a session ending at `end` (`None`: never) is still open at
/// `now`. A request read once it is not is not served; the connection closes.
pub fn open(end: Option<Instant>, now: Instant) -> bool {
    end.is_none_or(|end| now < end)
}

/// A jitter for a new session: 0.0 to 1.0, different for each call.
pub fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    // Each RandomState is seeded afresh; enough to spread logins apart.
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// Holds back a repeated log line: [`Quiet::due`] is `Some(held back since)` at most once per
/// interval, so a refused fresh login retried every few hundred milliseconds is told of once.
#[derive(Debug)]
pub struct Quiet {
    every: Duration,
    state: std::sync::Mutex<(Option<Instant>, u64)>,
}

impl Quiet {
    pub const fn new(every: Duration) -> Quiet {
        Quiet {
            every,
            state: std::sync::Mutex::new((None, 0)),
        }
    }

    pub fn due(&self, now: Instant) -> Option<u64> {
        let mut s = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match s.0 {
            Some(last) if now.saturating_duration_since(last) < self.every => {
                s.1 += 1;
                None
            }
            _ => {
                let held = s.1;
                *s = (Some(now), 0);
                Some(held)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lifetime(jitter: f64) -> (Instant, Lifetime) {
        let t0 = Instant::now();
        let l = Lifetime {
            started: t0,
            lasts: Duration::from_millis(3000),
            jitter,
        };
        (t0, l)
    }

    #[test]
    fn renews_between_85_and_90_percent_and_retires_at_95() {
        let ms = Duration::from_millis;
        let (t0, early) = lifetime(0.0);
        assert_eq!(early.phase(t0), Phase::Fresh);
        assert_eq!(early.phase(t0 + ms(2549)), Phase::Fresh);
        assert_eq!(early.phase(t0 + ms(2550)), Phase::Renew);
        assert_eq!(early.phase(t0 + ms(2849)), Phase::Renew);
        assert_eq!(early.phase(t0 + ms(2850)), Phase::Retired);
        assert_eq!(early.phase(t0 + ms(9000)), Phase::Retired);
        let (t0, late) = lifetime(1.0);
        assert_eq!(late.phase(t0 + ms(2699)), Phase::Fresh);
        assert_eq!(late.phase(t0 + ms(2700)), Phase::Renew);
        assert_eq!(late.phase(t0 + ms(2850)), Phase::Retired);
        // Out-of-range jitter stays in the window.
        let (t0, odd) = lifetime(7.0);
        assert_eq!(odd.renew_at(), t0 + ms(2700));
        assert_eq!(phase(None, t0 + ms(1_000_000)), Phase::Fresh);
    }

    #[test]
    fn jitter_spreads_renewals_over_the_window() {
        let samples: Vec<f64> = (0..200).map(|_| jitter()).collect();
        assert!(samples.iter().all(|j| (0.0..1.0).contains(j)));
        assert!(samples.iter().any(|j| *j < 0.3) && samples.iter().any(|j| *j > 0.7));
    }

    #[test]
    fn refused_logins_back_off_up_to_two_seconds() {
        let got: Vec<u64> = (1..9).map(|f| retry_after(f).as_millis() as u64).collect();
        assert_eq!(got, [100, 200, 400, 800, 1600, 2000, 2000, 2000]);
        assert_eq!(retry_after(0), Duration::from_millis(100));
        assert_eq!(retry_after(u32::MAX), Duration::from_secs(2));
    }

    #[test]
    fn the_server_serves_until_the_session_end() {
        let t0 = Instant::now();
        let end = t0 + Duration::from_secs(3);
        assert!(open(None, t0 + Duration::from_secs(1_000_000)));
        assert!(open(Some(end), t0));
        assert!(open(Some(end), end - Duration::from_millis(1)));
        assert!(!open(Some(end), end));
        assert!(!open(Some(end), end + Duration::from_secs(1)));
    }

    #[test]
    fn quiet_logs_once_per_interval_counting_the_rest() {
        let q = Quiet::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(q.due(t0), Some(0));
        assert_eq!(q.due(t0 + Duration::from_secs(1)), None);
        assert_eq!(q.due(t0 + Duration::from_secs(9)), None);
        assert_eq!(q.due(t0 + Duration::from_secs(10)), Some(2));
    }
}
