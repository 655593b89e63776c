//! Per-log configuration, with Kafka's topic-level names and defaults.

use crate::batch::Codec;
use crate::error::{LogError, Result};

/// `message.timestamp.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimestampType {
    /// `CreateTime`: keep the producer's timestamps.
    #[default]
    CreateTime,
    /// `LogAppendTime`: the leader stamps each batch with its append time.
    LogAppendTime,
}

/// `compression.type`: what the leader stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CompressionType {
    /// `producer`: keep each batch as the producer compressed it.
    #[default]
    Producer,
    /// `uncompressed`, `gzip`, `snappy`, `lz4` or `zstd`: a batch in another codec is
    /// recompressed at the leader.
    Codec(Codec),
}

impl CompressionType {
    /// Parse Kafka's value (`producer`, `uncompressed`, `gzip`, `snappy`, `lz4`, `zstd`).
    pub fn parse(v: &str) -> Option<CompressionType> {
        Some(match v {
            "producer" => CompressionType::Producer,
            "uncompressed" => CompressionType::Codec(Codec::None),
            "gzip" => CompressionType::Codec(Codec::Gzip),
            "snappy" => CompressionType::Codec(Codec::Snappy),
            "lz4" => CompressionType::Codec(Codec::Lz4),
            "zstd" => CompressionType::Codec(Codec::Zstd),
            _ => return None,
        })
    }
}

/// When appended data is forced to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushPolicy {
    /// Every append is durable (fdatasync) before `append_*` returns. Concurrent appends share
    /// one sync (group commit). Gregor's default.
    EveryAppend,
    /// Kafka's page-cache mode: sync after `flush.messages` records or when `flush.ms` has passed
    /// since the last sync (checked on append and by [`crate::Log::flush_if_due`]). `None` means
    /// that trigger is off (Kafka's `Long.MAX_VALUE`).
    Interval {
        /// `flush.messages`
        messages: Option<u64>,
        /// `flush.ms`
        ms: Option<i64>,
    },
}

/// `cleanup.policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupPolicy {
    /// `delete`: retention by time and size.
    pub delete: bool,
    /// `compact`: keep the last record per key.
    pub compact: bool,
}

impl CleanupPolicy {
    /// `cleanup.policy=delete` (Kafka's default).
    pub const DELETE: CleanupPolicy = CleanupPolicy {
        delete: true,
        compact: false,
    };
    /// `cleanup.policy=compact`.
    pub const COMPACT: CleanupPolicy = CleanupPolicy {
        delete: false,
        compact: true,
    };
}

/// Configuration of one partition log. Field names follow Kafka's topic configs.
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// `segment.bytes` (default 1 GiB).
    pub segment_bytes: u64,
    /// `segment.ms` (default 7 days).
    pub segment_ms: i64,
    /// `index.interval.bytes` (default 4096).
    pub index_interval_bytes: u64,
    /// `max.message.bytes` (default 1048588): the largest batch accepted.
    pub max_message_bytes: usize,
    /// `message.timestamp.type`.
    pub timestamp_type: TimestampType,
    /// `message.timestamp.before.max.ms` (default unlimited, `i64::MAX`): how far a CreateTime
    /// record's timestamp may lie behind the broker's clock (else `INVALID_TIMESTAMP`). The
    /// broker maps the older `message.timestamp.difference.max.ms` here when this is unset.
    pub timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms` (default unlimited): how far it may lie ahead.
    pub timestamp_after_max_ms: i64,
    /// `compression.type` (default `producer`).
    pub compression: CompressionType,
    /// `retention.ms`; `None` is Kafka's `-1` (keep forever). Default 7 days.
    pub retention_ms: Option<i64>,
    /// `retention.bytes`; `None` is Kafka's `-1` (no limit, the default).
    pub retention_bytes: Option<u64>,
    /// `cleanup.policy`.
    pub cleanup_policy: CleanupPolicy,
    /// `delete.retention.ms` (default 1 day): how long tombstones survive compaction.
    pub delete_retention_ms: i64,
    /// `min.cleanable.dirty.ratio` (default 0.5): compaction runs once the bytes appended
    /// since the last one make up this share of the cleanable log (or a tombstone's delete
    /// horizon has passed).
    pub min_cleanable_dirty_ratio: f64,
    /// `min.compaction.lag.ms` (default 0): a segment whose newest record is younger stays
    /// out of compaction (with every segment after it).
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms` (default unlimited): once the oldest uncompacted record is
    /// this old, compaction runs whatever the dirty ratio.
    pub max_compaction_lag_ms: i64,
    /// `file.delete.delay.ms` (default 60000): a segment removed by retention, DeleteRecords,
    /// truncation or compaction is renamed to `<file>.deleted` at once and unlinked this long
    /// after (0: unlinked at once).
    pub file_delete_delay_ms: i64,
    /// Durability mode.
    pub flush: FlushPolicy,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1024 * 1024 * 1024,
            segment_ms: 7 * 24 * 3600 * 1000,
            index_interval_bytes: 4096,
            max_message_bytes: 1_048_588,
            timestamp_type: TimestampType::CreateTime,
            timestamp_before_max_ms: i64::MAX,
            timestamp_after_max_ms: i64::MAX,
            compression: CompressionType::Producer,
            retention_ms: Some(7 * 24 * 3600 * 1000),
            retention_bytes: None,
            cleanup_policy: CleanupPolicy::DELETE,
            delete_retention_ms: 24 * 3600 * 1000,
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            file_delete_delay_ms: 60_000,
            flush: FlushPolicy::EveryAppend,
        }
    }
}

impl LogConfig {
    /// Reject configurations Kafka would reject.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(LogError::InvalidArgument(m.to_string()));
        if self.segment_bytes < 14 {
            return bad("segment.bytes must be at least 14");
        }
        if self.segment_ms < 1 {
            return bad("segment.ms must be at least 1");
        }
        if self.index_interval_bytes == 0 {
            return bad("index.interval.bytes must be positive");
        }
        if self.max_message_bytes < crate::batch::HEADER_LEN {
            return bad("max.message.bytes is smaller than a batch header");
        }
        if self.timestamp_before_max_ms < 0 || self.timestamp_after_max_ms < 0 {
            return bad("message.timestamp.before.max.ms and after.max.ms must not be negative");
        }
        if self.delete_retention_ms < 0 {
            return bad("delete.retention.ms must not be negative");
        }
        if self.min_compaction_lag_ms < 0 || self.max_compaction_lag_ms < 1 {
            return bad("min.compaction.lag.ms must be >= 0 and max.compaction.lag.ms >= 1");
        }
        if self.file_delete_delay_ms < 0 {
            return bad("file.delete.delay.ms must not be negative");
        }
        if !(0.0..=1.0).contains(&self.min_cleanable_dirty_ratio) {
            return bad("min.cleanable.dirty.ratio must be between 0 and 1");
        }
        if matches!(self.retention_ms, Some(ms) if ms < 0) {
            return bad("retention.ms must be -1 (None) or non-negative");
        }
        if let FlushPolicy::Interval { messages, ms } = self.flush {
            if messages == Some(0) || matches!(ms, Some(m) if m < 0) {
                return bad("flush.messages must be >= 1 and flush.ms >= 0");
            }
        }
        Ok(())
    }
}
