//! Whether a peer voter answers this node's controller RPCs, as pure decisions (time comes from
//! the caller): the operator is told once when a peer stops answering, once when it answers
//! again, and reminded at most every [`REMIND_EVERY`] in between. openraft retries an
//! unreachable peer every 100 ms and would narrate each attempt; this is what replaces it.

use std::time::Duration;

use tokio::time::Instant;

/// How often a peer that stays away is mentioned again.
pub const REMIND_EVERY: Duration = Duration::from_secs(60);

/// Timed-out messages in a row before a peer counts as gone: one timeout is a busy peer or a
/// loaded machine, a refused or reset connection is a gone process at once.
pub const TIMEOUTS_BEFORE_DOWN: u32 = 3;

/// What to tell the operator after an RPC outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The peer stopped answering. `ever_answered` is false at start-up, while the peers are
    /// still starting: that is normal, not a warning.
    Down { ever_answered: bool },
    /// Still not answering: `failures` messages failed since it went, over `down_for`.
    StillDown { down_for: Duration, failures: u64 },
    /// Answering again after `down_for`.
    Back { down_for: Duration, failures: u64 },
}

/// One peer's health, fed with the outcome of every RPC to it.
#[derive(Debug, Default)]
pub struct PeerHealth {
    ever_answered: bool,
    timeouts_in_a_row: u32,
    down: Option<Down>,
}

#[derive(Debug, Clone, Copy)]
struct Down {
    since: Instant,
    told: Instant,
    failures: u64,
}

impl PeerHealth {
    /// The peer answered an RPC.
    pub fn answered(&mut self, now: Instant) -> Option<Change> {
        self.ever_answered = true;
        self.timeouts_in_a_row = 0;
        let down = self.down.take()?;
        Some(Change::Back {
            down_for: now.saturating_duration_since(down.since),
            failures: down.failures,
        })
    }

    /// An RPC to the peer failed; `timed_out` if it went unanswered rather than refused.
    pub fn failed(&mut self, now: Instant, timed_out: bool) -> Option<Change> {
        if let Some(down) = &mut self.down {
            down.failures = down.failures.saturating_add(1);
            if now.saturating_duration_since(down.told) < REMIND_EVERY {
                return None;
            }
            down.told = now;
            return Some(Change::StillDown {
                down_for: now.saturating_duration_since(down.since),
                failures: down.failures,
            });
        }
        if timed_out {
            self.timeouts_in_a_row = self.timeouts_in_a_row.saturating_add(1);
            if self.timeouts_in_a_row < TIMEOUTS_BEFORE_DOWN {
                return None;
            }
        }
        self.timeouts_in_a_row = 0;
        self.down = Some(Down {
            since: now,
            told: now,
            failures: 1,
        });
        Some(Change::Down {
            ever_answered: self.ever_answered,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    #[test]
    fn a_refused_peer_is_down_once_reminded_then_back() {
        let t0 = Instant::now();
        let mut h = PeerHealth::default();
        assert_eq!(h.answered(t0), None);
        assert_eq!(
            h.failed(at(t0, 100), false),
            Some(Change::Down {
                ever_answered: true
            })
        );
        for ms in (200..60_100).step_by(100) {
            assert_eq!(h.failed(at(t0, ms), false), None, "at {ms} ms");
        }
        assert_eq!(
            h.failed(at(t0, 60_100), false),
            Some(Change::StillDown {
                down_for: Duration::from_secs(60),
                failures: 601
            })
        );
        assert_eq!(h.failed(at(t0, 60_200), false), None);
        assert_eq!(
            h.answered(at(t0, 70_100)),
            Some(Change::Back {
                down_for: Duration::from_secs(70),
                failures: 602
            })
        );
        assert_eq!(h.answered(at(t0, 70_200)), None);
    }

    #[test]
    fn timeouts_count_only_in_a_row() {
        let t0 = Instant::now();
        let mut h = PeerHealth::default();
        h.answered(t0);
        assert_eq!(h.failed(at(t0, 1), true), None);
        assert_eq!(h.failed(at(t0, 2), true), None);
        assert_eq!(h.answered(at(t0, 3)), None);
        assert_eq!(h.failed(at(t0, 4), true), None);
        assert_eq!(h.failed(at(t0, 5), true), None);
        assert_eq!(
            h.failed(at(t0, 6), true),
            Some(Change::Down {
                ever_answered: true
            })
        );
    }

    #[test]
    fn a_peer_never_reached_is_not_a_loss() {
        let t0 = Instant::now();
        let mut h = PeerHealth::default();
        assert_eq!(
            h.failed(t0, false),
            Some(Change::Down {
                ever_answered: false
            })
        );
        assert_eq!(
            h.answered(at(t0, 500)),
            Some(Change::Back {
                down_for: Duration::from_millis(500),
                failures: 1
            })
        );
    }
}
