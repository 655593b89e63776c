//! Errors: [`ApiError`] is what a request path answers (a Kafka error code plus a message for the
//! client); [`DecodeError`] and [`ImageError`] are for records that cannot be read or applied.

use kafka_protocol::ResponseError;
use uuid::Uuid;

/// A Kafka error code with the message Kafka would put in the response's `error_message`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct ApiError {
    /// The Kafka error code (`code.code()` is the wire value).
    pub code: ResponseError,
    /// Human-readable detail for the response's `error_message`.
    pub message: String,
}

impl ApiError {
    /// An error with a message.
    pub fn new(code: ResponseError, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
        }
    }

    /// `INVALID_REQUEST`.
    pub fn invalid_request(message: impl Into<String>) -> Self {
        ApiError::new(ResponseError::InvalidRequest, message)
    }

    /// `INVALID_CONFIG`.
    pub fn invalid_config(message: impl Into<String>) -> Self {
        ApiError::new(ResponseError::InvalidConfig, message)
    }

    /// `UNKNOWN_TOPIC_OR_PARTITION`.
    pub fn unknown_topic_or_partition(message: impl Into<String>) -> Self {
        ApiError::new(ResponseError::UnknownTopicOrPartition, message)
    }
}

/// A metadata record's bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The input ended inside a field.
    #[error("record truncated while reading {0}")]
    Truncated(&'static str),
    /// The record type byte is not one this version knows.
    #[error("unknown metadata record type {0}")]
    UnknownType(u8),
    /// The record's version is newer than this code understands.
    #[error("unsupported version {version} of metadata record type {record_type}")]
    UnsupportedVersion {
        /// The record type byte.
        record_type: u8,
        /// The version byte.
        version: u8,
    },
    /// A field holds a value no encoder produces.
    #[error("invalid {field}: {detail}")]
    Invalid {
        /// Field name.
        field: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// Bytes were left after the record.
    #[error("{0} trailing bytes after metadata record")]
    TrailingBytes(usize),
}

/// A record does not fit the image it is applied to (a corrupt or misordered metadata log).
/// Applying such a record leaves the image unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// The record names a topic id the image does not have.
    #[error("unknown topic id {0}")]
    UnknownTopicId(Uuid),
    /// The record names a partition the image does not have.
    #[error("unknown partition {topic_id}-{partition}")]
    UnknownPartition {
        /// Topic id.
        topic_id: Uuid,
        /// Partition index.
        partition: i32,
    },
    /// A topic with that name or id already exists.
    #[error("topic {name} ({topic_id}) conflicts with an existing topic")]
    TopicExists {
        /// Topic name.
        name: String,
        /// Topic id.
        topic_id: Uuid,
    },
    /// The record names a broker that is not registered.
    #[error("unknown broker {0}")]
    UnknownBroker(i32),
    /// The record's broker epoch is not the registered one.
    #[error("broker {broker} epoch {got} does not match registered epoch {registered}")]
    StaleBrokerEpoch {
        /// Broker id.
        broker: i32,
        /// Epoch in the record.
        got: i64,
        /// Epoch in the image.
        registered: i64,
    },
    /// The record's contents are inconsistent (e.g. a leader that is not a replica).
    #[error("invalid record: {0}")]
    Invalid(String),
}
