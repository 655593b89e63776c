//! Which failures are worth retrying, what to do before the retry, and how long to wait.
//!
//! Pure policy: the client's shell asks `action` what a failure means and `Backoff::delay_ms`
//! how long to pause, and owns the clock and the deadline.

use crate::error::{Error, KafkaCode};

/// What the caller does with a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryAction {
    /// Give up: the error is final (bad request, missing topic, authorization...).
    Fail,
    /// Retry against the same target after a pause.
    Backoff,
    /// Leadership or the controller moved: refresh metadata, then retry.
    RefreshMetadata,
    /// The group coordinator moved or is unknown: find it again, then retry.
    FindCoordinator,
}

/// What an error code means for a retry. Only codes where a later attempt can succeed without
/// the user changing anything are retried; e.g. `UNKNOWN_TOPIC_OR_PARTITION` is "retriable" in
/// Kafka's table but for an admin call it almost always means the topic does not exist, so it
/// is reported rather than retried until the deadline.
pub fn action_for_code(code: KafkaCode) -> RetryAction {
    match code {
        KafkaCode::NOT_LEADER_OR_FOLLOWER
        | KafkaCode::LEADER_NOT_AVAILABLE
        | KafkaCode::FENCED_LEADER_EPOCH
        | KafkaCode::UNKNOWN_LEADER_EPOCH
        | KafkaCode::REPLICA_NOT_AVAILABLE
        | KafkaCode::NOT_CONTROLLER => RetryAction::RefreshMetadata,
        KafkaCode::NOT_COORDINATOR | KafkaCode::COORDINATOR_NOT_AVAILABLE => {
            RetryAction::FindCoordinator
        }
        KafkaCode::COORDINATOR_LOAD_IN_PROGRESS
        | KafkaCode::REQUEST_TIMED_OUT
        | KafkaCode::NETWORK_EXCEPTION
        | KafkaCode::OFFSET_NOT_AVAILABLE
        | KafkaCode::UNSTABLE_OFFSET_COMMIT
        | KafkaCode::KAFKA_STORAGE_ERROR => RetryAction::Backoff,
        _ => RetryAction::Fail,
    }
}

/// What a client error means for a retry.
pub fn action(error: &Error) -> RetryAction {
    match error {
        Error::Kafka { error, .. } => action_for_code(error.code),
        // The broker may have restarted or moved: look again at who is where.
        Error::Disconnected { .. } | Error::Connect { .. } => RetryAction::RefreshMetadata,
        // One request timing out says nothing final; the operation deadline bounds the retries.
        Error::Timeout { .. } => RetryAction::Backoff,
        // A broker missing from the metadata may be one that just joined.
        Error::UnknownBroker(_) => RetryAction::RefreshMetadata,
        Error::UnsupportedVersion { .. }
        | Error::Protocol { .. }
        | Error::InvalidArgument(_)
        | Error::CommitFailed(_)
        | Error::Transaction { .. }
        | Error::Authentication { .. }
        | Error::ControllerListener { .. } => RetryAction::Fail,
    }
}

/// Exponential backoff between attempts, capped (Kafka's `retry.backoff.ms` 100 and
/// `retry.backoff.max.ms` 1000). No jitter: an admin tool has a handful of requests in flight,
/// and a deterministic schedule keeps the policy testable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub initial_ms: u64,
    pub max_ms: u64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial_ms: 100,
            max_ms: 1000,
        }
    }
}

impl Backoff {
    /// Pause before retry number `attempt` (0 for the first retry).
    pub fn delay_ms(&self, attempt: u32) -> u64 {
        let factor = 1u64.checked_shl(attempt.min(32)).unwrap_or(u64::MAX);
        self.initial_ms.saturating_mul(factor).min(self.max_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::KafkaError;

    fn kafka(code: i16) -> Error {
        Error::kafka("test", KafkaError::new(KafkaCode(code), None))
    }

    #[test]
    fn leadership_errors_refresh_metadata() {
        for code in [6, 5, 74, 75, 41] {
            assert_eq!(
                action(&kafka(code)),
                RetryAction::RefreshMetadata,
                "code {code}"
            );
        }
    }

    #[test]
    fn coordinator_errors_find_the_coordinator_again() {
        assert_eq!(action(&kafka(16)), RetryAction::FindCoordinator);
        assert_eq!(action(&kafka(15)), RetryAction::FindCoordinator);
        assert_eq!(action(&kafka(14)), RetryAction::Backoff);
    }

    #[test]
    fn transient_errors_back_off_and_final_errors_fail() {
        assert_eq!(action(&kafka(7)), RetryAction::Backoff);
        assert_eq!(action(&kafka(13)), RetryAction::Backoff);
        for code in [3, 36, 37, 38, 39, 40, 42, 68, 69, -1] {
            assert_eq!(action(&kafka(code)), RetryAction::Fail, "code {code}");
        }
        assert_eq!(
            action(&Error::InvalidArgument("x".into())),
            RetryAction::Fail
        );
        assert_eq!(
            action(&Error::Disconnected {
                broker: "b".into(),
                reason: "eof".into()
            }),
            RetryAction::RefreshMetadata
        );
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let b = Backoff::default();
        let delays: Vec<u64> = (0..6).map(|a| b.delay_ms(a)).collect();
        assert_eq!(delays, vec![100, 200, 400, 800, 1000, 1000]);
        assert_eq!(b.delay_ms(u32::MAX), 1000);
    }
}
