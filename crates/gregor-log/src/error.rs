//! Typed errors of the partition log and their Kafka error codes.

use std::io;
use std::path::PathBuf;

/// Kafka protocol error codes that the log's errors map to.
pub mod kafka_code {
    /// `UNKNOWN_SERVER_ERROR`
    pub const UNKNOWN_SERVER_ERROR: i16 = -1;
    /// `OFFSET_OUT_OF_RANGE`
    pub const OFFSET_OUT_OF_RANGE: i16 = 1;
    /// `NOT_LEADER_OR_FOLLOWER`
    pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
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
    /// The batch is well formed but breaks a rule of the whole batch (offset deltas, record
    /// count, control batch from a client, ...).
    #[error("invalid record batch: {0}")]
    InvalidRecord(String),
    /// Records of the batch break a per-record rule (missing key on a compacted topic,
    /// timestamp out of bounds, LogAppendTime from a producer): the batch is refused whole, and
    /// Produce v8+ answers which records and why (KIP-467).
    #[error("{0}")]
    RecordErrors(RecordErrors),
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
    /// The log was closed (a clean shutdown): it refuses writes, so that the clean-shutdown
    /// marker it left stays true.
    #[error("log {0} is closed")]
    Closed(PathBuf),
}

impl LogError {
    /// The Kafka error code that a broker should answer with.
    pub fn kafka_error_code(&self) -> i16 {
        match self {
            LogError::CorruptMessage(_) => kafka_code::CORRUPT_MESSAGE,
            LogError::InvalidRecord(_) => kafka_code::INVALID_RECORD,
            LogError::RecordErrors(r) => r.kafka_error_code(),
            LogError::MessageTooLarge { .. } => kafka_code::MESSAGE_TOO_LARGE,
            LogError::OffsetOutOfRange { .. } => kafka_code::OFFSET_OUT_OF_RANGE,
            // The replica is going away: a client finds the partition's next leader.
            LogError::Closed(_) => kafka_code::NOT_LEADER_OR_FOLLOWER,
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

/// Why one record of a batch is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecordProblem {
    /// `cleanup.policy` includes `compact` and the record has no key (`INVALID_RECORD`).
    #[error("compacted topic cannot accept a record without a key")]
    NoKeyOnCompactedTopic,
    /// A CreateTime timestamp outside `[now - message.timestamp.before.max.ms, now +
    /// message.timestamp.after.max.ms]` (`INVALID_TIMESTAMP`).
    #[error("timestamp {timestamp} is out of range [{earliest}, {latest}]")]
    TimestampOutOfRange {
        /// The record's timestamp.
        timestamp: i64,
        /// Earliest accepted timestamp.
        earliest: i64,
        /// Latest accepted timestamp.
        latest: i64,
    },
    /// The producer's batch claims the LogAppendTime timestamp type (`INVALID_TIMESTAMP`).
    #[error("producers may not set the LogAppendTime timestamp type")]
    LogAppendTimeFromProducer,
}

impl RecordProblem {
    /// The Kafka error code of this problem.
    pub fn kafka_error_code(&self) -> i16 {
        match self {
            RecordProblem::NoKeyOnCompactedTopic => kafka_code::INVALID_RECORD,
            RecordProblem::TimestampOutOfRange { .. }
            | RecordProblem::LogAppendTimeFromProducer => kafka_code::INVALID_TIMESTAMP,
        }
    }
}

/// One refused record: where it sits in its batch (KIP-467's `batch_index`, from 0) and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordError {
    /// Position of the record in its batch, from 0.
    pub batch_index: u32,
    /// What is wrong with it.
    pub problem: RecordProblem,
}

/// The refused records of one batch, in batch order, each listed once (with its first problem).
/// The list holds at most `limit` records (see [`RecordErrors::new`]); `total` counts them all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordErrors {
    errors: Vec<RecordError>,
    total: u32,
    limit: usize,
    invalid_timestamp: bool,
}

/// How many refused records the partition-level message names.
const NAMED_IN_MESSAGE: usize = 3;

impl RecordErrors {
    /// An empty list that keeps at most `limit` records.
    pub fn new(limit: usize) -> RecordErrors {
        RecordErrors {
            errors: Vec::new(),
            total: 0,
            limit,
            invalid_timestamp: false,
        }
    }

    /// Record `problem` for the record at `batch_index` (indexes must ascend).
    pub fn push(&mut self, batch_index: u32, problem: RecordProblem) {
        self.total = self.total.saturating_add(1);
        self.invalid_timestamp |= problem.kafka_error_code() == kafka_code::INVALID_TIMESTAMP;
        if self.errors.len() < self.limit {
            self.errors.push(RecordError {
                batch_index,
                problem,
            });
        }
    }

    /// The listed records, in batch order.
    pub fn errors(&self) -> &[RecordError] {
        &self.errors
    }

    /// How many records were refused (more than [`RecordErrors::errors`] holds past its limit).
    pub fn total(&self) -> u32 {
        self.total
    }

    /// Whether no record was refused.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The partition's error code: `INVALID_TIMESTAMP` when any refused record has a bad
    /// timestamp, `INVALID_RECORD` otherwise.
    pub fn kafka_error_code(&self) -> i16 {
        if self.invalid_timestamp {
            kafka_code::INVALID_TIMESTAMP
        } else {
            kafka_code::INVALID_RECORD
        }
    }
}

impl std::fmt::Display for RecordErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = if self.total == 1 { "" } else { "s" };
        write!(
            f,
            "{} record{s} refused, so the batch was not appended",
            self.total
        )?;
        for (i, e) in self.errors.iter().take(NAMED_IN_MESSAGE).enumerate() {
            let sep = if i == 0 { ": " } else { "; " };
            write!(f, "{sep}record {}: {}", e.batch_index, e.problem)?;
        }
        let named = self.errors.len().min(NAMED_IN_MESSAGE);
        if self.total as usize > named {
            write!(f, "; {} more", self.total as usize - named)?;
            if self.total as usize > self.errors.len() {
                write!(f, " (the first {} are listed)", self.errors.len())?;
            }
        }
        Ok(())
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
