//! Typed errors of the partition log and their Kafka error codes.

use std::io;
use std::path::PathBuf;

/// Kafka protocol error codes that the log's errors map to.
pub mod kafka_code {
    /// `UNKNOWN_SERVER_ERROR`
    pub const UNKNOWN_SERVER_ERROR: i16 = -1;
    /// `OFFSET_OUT_OF_RANGE`
    pub const OFFSET_OUT_OF_RANGE: i16 = 1;
    /// `CORRUPT_MESSAGE`
    pub const CORRUPT_MESSAGE: i16 = 2;
    /// `MESSAGE_TOO_LARGE`
    pub const MESSAGE_TOO_LARGE: i16 = 10;
    /// `KAFKA_STORAGE_ERROR`
    pub const KAFKA_STORAGE_ERROR: i16 = 56;
    /// `INVALID_TIMESTAMP`
    pub const INVALID_TIMESTAMP: i16 = 32;
    /// `INVALID_RECORD`
    pub const INVALID_RECORD: i16 = 87;
}

/// Everything that can go wrong in the log.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The batch bytes are damaged: bad magic, impossible length, truncated or CRC mismatch.
    #[error("corrupt record batch: {0}")]
    CorruptMessage(String),
    /// The batch is well formed but breaks a rule (offset deltas, record count, missing key on a
    /// compacted topic, control batch from a client, ...).
    #[error("invalid record batch: {0}")]
    InvalidRecord(String),
    /// A CreateTime record timestamp outside `message.timestamp.before.max.ms` /
    /// `after.max.ms`, or a producer batch claiming LogAppendTime.
    #[error("invalid timestamp: {0}")]
    InvalidTimestamp(String),
    /// The batch is larger than `max.message.bytes`.
    #[error("record batch of {size} bytes exceeds max.message.bytes={max}")]
    MessageTooLarge {
        /// Size of the offending batch in bytes.
        size: usize,
        /// The configured limit.
        max: usize,
    },
    /// A requested offset lies outside `[log_start_offset, log_end_offset]`.
    #[error("offset {offset} is out of range [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange {
        /// The requested offset.
        offset: i64,
        /// Current log start offset.
        log_start_offset: i64,
        /// Current log end offset.
        log_end_offset: i64,
    },
    /// A follower append whose first offset does not continue the log.
    #[error("non-contiguous follower append: expected offset >= {expected}, got {got}")]
    NonContiguousAppend {
        /// The log end offset the batch should start at or after.
        expected: i64,
        /// The base offset of the batch that was offered.
        got: i64,
    },
    /// A caller passed an argument that makes no sense (negative offset, bad config, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// An I/O error on a log file.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A checkpoint or index file has contents that cannot be parsed.
    #[error("corrupt file {path}: {reason}")]
    CorruptFile {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// An earlier fsync failed, so the page cache can no longer be trusted: the log refuses
    /// further writes until it is reopened (and recovered).
    #[error("log {0} is offline after an earlier I/O failure; reopen it to recover")]
    Offline(PathBuf),
}

impl LogError {
    /// The Kafka error code that a broker should answer with.
    pub fn kafka_error_code(&self) -> i16 {
        match self {
            LogError::CorruptMessage(_) => kafka_code::CORRUPT_MESSAGE,
            LogError::InvalidRecord(_) => kafka_code::INVALID_RECORD,
            LogError::InvalidTimestamp(_) => kafka_code::INVALID_TIMESTAMP,
            LogError::MessageTooLarge { .. } => kafka_code::MESSAGE_TOO_LARGE,
            LogError::OffsetOutOfRange { .. } => kafka_code::OFFSET_OUT_OF_RANGE,
            LogError::Io { .. } | LogError::CorruptFile { .. } | LogError::Offline(_) => {
                kafka_code::KAFKA_STORAGE_ERROR
            }
            LogError::NonContiguousAppend { .. } | LogError::InvalidArgument(_) => {
                kafka_code::UNKNOWN_SERVER_ERROR
            }
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        LogError::Io {
            path: path.into(),
            source,
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = LogError> = std::result::Result<T, E>;

/// Attach a path to an `io::Result`.
pub(crate) trait IoContext<T> {
    fn at(self, path: &std::path::Path) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn at(self, path: &std::path::Path) -> Result<T> {
        self.map_err(|e| LogError::io(path, e))
    }
}
