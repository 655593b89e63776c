//! When to fetch an OAUTHBEARER JSON Web Key Set from its http(s) endpoint (KIP-768): every
//! `sasl.oauthbearer.jwks.endpoint.refresh.ms`, sooner after a failure (exponential backoff from
//! `...retry.backoff.ms` up to `...retry.backoff.max.ms`), and at once when a token names a key id
//! the set lacks, at most once per `...retry.backoff.max.ms` so a flood of such tokens cannot
//! flood the identity provider. Pure: `now` is a monotonic time since any origin the caller picks.

use std::time::Duration;

/// A failed fetch is logged as a warning at most this often; the retries between are debug.
pub const JWKS_WARN_INTERVAL: Duration = Duration::from_secs(60);

/// How loud a failed fetch should be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchFailureLog {
    Warn,
    Debug,
}

/// The refresh schedule of one JWKS endpoint.
#[derive(Debug, Clone)]
pub struct JwksRefresh {
    refresh: Duration,
    backoff: Duration,
    backoff_max: Duration,
    /// When the next fetch is due.
    next: Duration,
    /// Failed fetches since the last good one.
    failures: u32,
    last_attempt: Option<Duration>,
    last_warn: Option<Duration>,
}

impl JwksRefresh {
    /// A schedule whose first fetch is due at `now`.
    pub fn new(
        refresh: Duration,
        backoff: Duration,
        backoff_max: Duration,
        now: Duration,
    ) -> JwksRefresh {
        JwksRefresh {
            refresh,
            backoff,
            backoff_max: backoff_max.max(backoff),
            next: now,
            failures: 0,
            last_attempt: None,
            last_warn: None,
        }
    }

    /// When the next fetch is due.
    pub fn due_at(&self) -> Duration {
        self.next
    }

    /// Failed fetches since the last good one.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// A fetch starts at `now`.
    pub fn started(&mut self, now: Duration) {
        self.last_attempt = Some(now);
    }

    /// A token named a key id the set lacks: whether to fetch now. Not when a fetch started
    /// less than `retry.backoff.max.ms` ago.
    pub fn key_missing(&mut self, now: Duration) -> bool {
        let recent = self
            .last_attempt
            .is_some_and(|at| now.saturating_sub(at) < self.backoff_max);
        if recent {
            return false;
        }
        self.next = self.next.min(now);
        true
    }

    /// The fetch gave a usable key set: the next is a refresh interval away.
    pub fn fetched(&mut self, now: Duration) {
        self.failures = 0;
        self.last_warn = None;
        self.next = now + self.refresh;
    }

    /// The fetch failed (or its document was refused): retry after the backoff, which doubles
    /// per failure up to `retry.backoff.max.ms`, and never later than a normal refresh.
    pub fn failed(&mut self, now: Duration) -> FetchFailureLog {
        self.failures = self.failures.saturating_add(1);
        let doublings = (self.failures - 1).min(31);
        let delay = self
            .backoff
            .saturating_mul(1u32 << doublings)
            .min(self.backoff_max)
            .min(self.refresh);
        self.next = now + delay;
        let quiet = self
            .last_warn
            .is_some_and(|at| now.saturating_sub(at) < JWKS_WARN_INTERVAL);
        if quiet {
            return FetchFailureLog::Debug;
        }
        self.last_warn = Some(now);
        FetchFailureLog::Warn
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn schedule() -> JwksRefresh {
        JwksRefresh::new(ms(3_600_000), ms(100), ms(10_000), ms(0))
    }

    #[test]
    fn refreshes_every_interval_after_a_good_fetch() {
        let mut s = schedule();
        assert_eq!(s.due_at(), ms(0));
        s.started(ms(0));
        s.fetched(ms(20));
        assert_eq!(s.due_at(), ms(3_600_020));
        s.started(ms(3_600_020));
        s.fetched(ms(3_600_030));
        assert_eq!(s.due_at(), ms(7_200_030));
    }

    #[test]
    fn failures_back_off_exponentially_up_to_the_maximum_then_reset() {
        let mut s = schedule();
        let mut now = ms(0);
        let mut delays = Vec::new();
        for _ in 0..10 {
            s.started(now);
            s.failed(now);
            delays.push(s.due_at() - now);
            now = s.due_at();
        }
        let expected: Vec<Duration> =
            [100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000, 10_000]
                .into_iter()
                .map(ms)
                .collect();
        assert_eq!(delays, expected);
        assert_eq!(s.failures(), 10);
        s.fetched(now);
        assert_eq!(s.failures(), 0);
        assert_eq!(s.due_at(), now + ms(3_600_000));
        s.failed(now + ms(5));
        assert_eq!(s.due_at(), now + ms(105));
    }

    #[test]
    fn backoff_never_exceeds_the_refresh_interval() {
        let mut s = JwksRefresh::new(ms(500), ms(400), ms(10_000), ms(0));
        s.failed(ms(0));
        s.failed(ms(400));
        assert_eq!(s.due_at(), ms(900));
    }

    #[test]
    fn failures_warn_once_a_minute_and_debug_between() {
        let mut s = schedule();
        assert_eq!(s.failed(ms(0)), FetchFailureLog::Warn);
        assert_eq!(s.failed(ms(100)), FetchFailureLog::Debug);
        assert_eq!(s.failed(ms(59_999)), FetchFailureLog::Debug);
        assert_eq!(s.failed(ms(60_000)), FetchFailureLog::Warn);
        s.fetched(ms(60_100));
        // A new run of failures is told at once.
        assert_eq!(s.failed(ms(61_000)), FetchFailureLog::Warn);
    }

    #[test]
    fn an_unknown_key_id_fetches_at_once_but_rate_limited() {
        let mut s = schedule();
        s.started(ms(0));
        s.fetched(ms(10));
        // Within retry.backoff.max.ms of the last fetch: no new fetch.
        assert!(!s.key_missing(ms(9_999)));
        assert_eq!(s.due_at(), ms(3_600_010));
        assert!(s.key_missing(ms(10_000)));
        assert_eq!(s.due_at(), ms(10_000));
        s.started(ms(10_000));
        s.fetched(ms(10_050));
        assert!(!s.key_missing(ms(10_100)));
        assert!(s.key_missing(ms(20_000)));
    }

    #[test]
    fn an_unknown_key_id_never_postpones_a_due_retry() {
        let mut s = schedule();
        s.started(ms(0));
        s.failed(ms(0));
        assert_eq!(s.due_at(), ms(100));
        assert!(!s.key_missing(ms(50)));
        assert_eq!(s.due_at(), ms(100));
    }
}
