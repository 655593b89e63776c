//! Errors: Kafka error codes by their protocol names, and the client's own failures.

use std::fmt;

use kafka_protocol::error::ResponseError;

/// A non-zero Kafka error code, displayed as Kafka names it: `UNKNOWN_TOPIC_OR_PARTITION (3)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KafkaCode(pub i16);

impl KafkaCode {
    pub const UNKNOWN_SERVER_ERROR: KafkaCode = KafkaCode(-1);
    pub const OFFSET_OUT_OF_RANGE: KafkaCode = KafkaCode(1);
    pub const UNKNOWN_TOPIC_OR_PARTITION: KafkaCode = KafkaCode(3);
    pub const LEADER_NOT_AVAILABLE: KafkaCode = KafkaCode(5);
    pub const NOT_LEADER_OR_FOLLOWER: KafkaCode = KafkaCode(6);
    pub const REQUEST_TIMED_OUT: KafkaCode = KafkaCode(7);
    pub const REPLICA_NOT_AVAILABLE: KafkaCode = KafkaCode(9);
    pub const NETWORK_EXCEPTION: KafkaCode = KafkaCode(13);
    pub const COORDINATOR_LOAD_IN_PROGRESS: KafkaCode = KafkaCode(14);
    pub const COORDINATOR_NOT_AVAILABLE: KafkaCode = KafkaCode(15);
    pub const NOT_COORDINATOR: KafkaCode = KafkaCode(16);
    pub const INVALID_TOPIC_EXCEPTION: KafkaCode = KafkaCode(17);
    pub const REBALANCE_IN_PROGRESS: KafkaCode = KafkaCode(27);
    pub const INVALID_REPLICATION_FACTOR: KafkaCode = KafkaCode(38);
    pub const UNSUPPORTED_SASL_MECHANISM: KafkaCode = KafkaCode(33);
    pub const ILLEGAL_SASL_STATE: KafkaCode = KafkaCode(34);
    pub const UNSUPPORTED_VERSION: KafkaCode = KafkaCode(35);
    pub const TOPIC_ALREADY_EXISTS: KafkaCode = KafkaCode(36);
    pub const INVALID_PARTITIONS: KafkaCode = KafkaCode(37);
    pub const INVALID_REPLICA_ASSIGNMENT: KafkaCode = KafkaCode(39);
    pub const INVALID_CONFIG: KafkaCode = KafkaCode(40);
    pub const NOT_CONTROLLER: KafkaCode = KafkaCode(41);
    pub const INVALID_REQUEST: KafkaCode = KafkaCode(42);
    pub const KAFKA_STORAGE_ERROR: KafkaCode = KafkaCode(56);
    pub const NON_EMPTY_GROUP: KafkaCode = KafkaCode(68);
    pub const GROUP_ID_NOT_FOUND: KafkaCode = KafkaCode(69);
    pub const FENCED_LEADER_EPOCH: KafkaCode = KafkaCode(74);
    pub const UNKNOWN_LEADER_EPOCH: KafkaCode = KafkaCode(75);
    pub const OFFSET_NOT_AVAILABLE: KafkaCode = KafkaCode(78);
    pub const ELECTION_NOT_NEEDED: KafkaCode = KafkaCode(84);
    pub const NO_REASSIGNMENT_IN_PROGRESS: KafkaCode = KafkaCode(85);
    pub const SASL_AUTHENTICATION_FAILED: KafkaCode = KafkaCode(58);
    pub const UNSTABLE_OFFSET_COMMIT: KafkaCode = KafkaCode(88);
    pub const THROTTLING_QUOTA_EXCEEDED: KafkaCode = KafkaCode(89);

    /// `None` for 0 (no error).
    pub fn from_code(code: i16) -> Option<KafkaCode> {
        (code != 0).then_some(KafkaCode(code))
    }

    /// Kafka's protocol name, e.g. `NOT_LEADER_OR_FOLLOWER`; `UNKNOWN_ERROR_CODE_<n>` for codes
    /// this client does not know.
    pub fn name(self) -> String {
        match ResponseError::try_from_code(self.0) {
            Some(ResponseError::Unknown(_)) | None => format!("UNKNOWN_ERROR_CODE_{}", self.0),
            // kafka-protocol names its variants in CamelCase after Kafka's Errors enum;
            // Kafka's own spelling is the upper snake case of the same words.
            Some(known) => upper_snake(&format!("{known:?}")),
        }
    }

    /// Whether Kafka's protocol marks the error retriable.
    pub fn is_retriable(self) -> bool {
        ResponseError::try_from_code(self.0).is_some_and(|e| e.is_retriable())
    }
}

fn upper_snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 8);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

impl fmt::Display for KafkaCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

/// A Kafka error code with the broker's optional message, as one entity's result in a batch
/// response (a topic, a partition, a group...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaError {
    pub code: KafkaCode,
    pub message: Option<String>,
}

impl KafkaError {
    pub fn new(code: KafkaCode, message: Option<String>) -> KafkaError {
        KafkaError {
            // An empty message adds nothing to the code's name.
            message: message.filter(|m| !m.is_empty()),
            code,
        }
    }

    /// `Ok(())` for code 0, else the error.
    pub fn check(code: i16, message: Option<&str>) -> Result<(), KafkaError> {
        match KafkaCode::from_code(code) {
            None => Ok(()),
            Some(code) => Err(KafkaError::new(code, message.map(str::to_string))),
        }
    }
}

impl fmt::Display for KafkaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.message {
            Some(m) => write!(f, "{}: {}", self.code, m),
            None => write!(f, "{}", self.code),
        }
    }
}

impl std::error::Error for KafkaError {}

/// Everything a client call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The broker answered with a Kafka error code.
    #[error("{context}: {error}")]
    Kafka { context: String, error: KafkaError },
    /// The broker refused the SASL login (wrong password, mechanism not enabled): retrying
    /// would not help.
    #[error("cannot connect to {addr}: {reason}")]
    Authentication { addr: String, reason: String },
    /// The address is a controller listener (KRaft's CONTROLLER): it answers ApiVersions but
    /// lists no client API (no Metadata), so no client can bootstrap from it. Kafka's
    /// controllers answer the same way.
    #[error(
        "{addr} is a controller listener (it serves the controller quorum, not clients); \
         bootstrap from a broker listener"
    )]
    ControllerListener { addr: String },
    /// A TCP connection could not be established.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// A deadline passed (connecting, one request, or a whole operation with its retries).
    #[error("timed out after {after_ms} ms {what}")]
    Timeout { what: String, after_ms: u64 },
    /// The connection broke while requests were in flight.
    #[error("connection to {broker} lost: {reason}")]
    Disconnected { broker: String, reason: String },
    /// The broker and this client share no version of an API.
    #[error(
        "broker {broker} does not support {api} in a version this client speaks \
         (broker {broker_versions}, client {client_versions})"
    )]
    UnsupportedVersion {
        api: &'static str,
        broker: String,
        broker_versions: String,
        client_versions: String,
    },
    /// Bytes that do not decode as the expected response.
    #[error("malformed response from {broker}: {reason}")]
    Protocol { broker: String, reason: String },
    /// A request that cannot be sent as asked (the message says why).
    #[error("{0}")]
    InvalidArgument(String),
    /// A broker id that is not in the cluster metadata.
    #[error("broker {0} is not in the cluster metadata")]
    UnknownBroker(i32),
    /// An offset commit of a group member that is not in a stable generation, refused before
    /// it is sent (Kafka's `CommitFailedException`): its partitions may be someone else's by
    /// now, and a commit it made could move their offsets back.
    #[error("offset commit cannot be completed: {0}")]
    CommitFailed(String),
    /// A transactional producer's call failed. With `requires_abort` the application calls
    /// `abort_transaction` and goes on with a new transaction (librdkafka's
    /// `txn_requires_abort`); without it the producer cannot go on (fenced by a newer
    /// instance, or a fatal error) and must be closed.
    #[error("transactional.id '{transactional_id}': {}: {error}", transaction_verdict(*requires_abort))]
    Transaction {
        transactional_id: String,
        requires_abort: bool,
        error: KafkaError,
    },
}

fn transaction_verdict(requires_abort: bool) -> &'static str {
    match requires_abort {
        true => "the transaction must be aborted",
        false => "the producer failed for good",
    }
}

impl Error {
    pub(crate) fn kafka(context: impl Into<String>, error: KafkaError) -> Error {
        Error::Kafka {
            context: context.into(),
            error,
        }
    }

    /// The Kafka error code, when the broker sent one.
    pub fn kafka_code(&self) -> Option<KafkaCode> {
        match self {
            Error::Kafka { error, .. } | Error::Transaction { error, .. } => Some(error.code),
            _ => None,
        }
    }

    /// Whether a transactional call failed in a way `abort_transaction` recovers from.
    pub fn txn_requires_abort(&self) -> bool {
        matches!(
            self,
            Error::Transaction {
                requires_abort: true,
                ..
            }
        )
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A broker refused a SASL login (`sasl`): its answer, for the caller's error. Carried inside
/// the `io::Error` a dialer returns (kind `PermissionDenied`), so that the client reports it
/// instead of retrying.
#[derive(Debug, thiserror::Error)]
#[error("SASL authentication failed: {0}")]
pub struct AuthenticationFailed(pub String);

/// The refusal an `io::Error` carries, if it is one.
pub fn authentication_failure(e: &std::io::Error) -> Option<&AuthenticationFailed> {
    e.get_ref()?.downcast_ref::<AuthenticationFailed>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_display_with_kafka_protocol_names() {
        assert_eq!(
            KafkaCode::NOT_LEADER_OR_FOLLOWER.to_string(),
            "NOT_LEADER_OR_FOLLOWER (6)"
        );
        assert_eq!(
            KafkaCode::UNKNOWN_TOPIC_OR_PARTITION.name(),
            "UNKNOWN_TOPIC_OR_PARTITION"
        );
        assert_eq!(
            KafkaCode::UNKNOWN_SERVER_ERROR.name(),
            "UNKNOWN_SERVER_ERROR"
        );
        assert_eq!(KafkaCode(36).name(), "TOPIC_ALREADY_EXISTS");
        assert_eq!(KafkaCode(69).name(), "GROUP_ID_NOT_FOUND");
        assert_eq!(KafkaCode(17).name(), "INVALID_TOPIC_EXCEPTION");
        assert_eq!(KafkaCode(9999).name(), "UNKNOWN_ERROR_CODE_9999");
    }

    #[test]
    fn zero_is_no_error() {
        assert_eq!(KafkaCode::from_code(0), None);
        assert!(KafkaError::check(0, Some("ignored")).is_ok());
        let e =
            KafkaError::check(37, Some("Number of partitions must be larger than 0.")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "INVALID_PARTITIONS (37): Number of partitions must be larger than 0."
        );
        // An empty broker message is dropped rather than printed as a dangling colon.
        assert_eq!(
            KafkaError::check(36, Some("")).unwrap_err().to_string(),
            "TOPIC_ALREADY_EXISTS (36)"
        );
    }

    #[test]
    fn protocol_retriability_follows_kafka() {
        assert!(KafkaCode::NOT_COORDINATOR.is_retriable());
        assert!(KafkaCode::LEADER_NOT_AVAILABLE.is_retriable());
        assert!(!KafkaCode::TOPIC_ALREADY_EXISTS.is_retriable());
        assert!(!KafkaCode(9999).is_retriable());
    }
}
