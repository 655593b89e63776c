//! A leader's or follower's batches, validated and made ready to write: Kafka's log validator
//! (see `validate.rs`) plus the leader's rewrites (recompression, LogAppendTime, a corrected
//! max timestamp).

use crate::batch::{self, BatchHeader, Origin, HEADER_LEN};
use crate::codec::{self, MAX_DECOMPRESSED_BYTES};
use crate::config::{CompressionType, LogConfig, TimestampType};
use crate::error::{LogError, Result};
use crate::validate::{validate_batch, Rules, TimestampBounds};

/// Batches validated and ready to write: each batch is its (possibly rewritten) header plus
/// the untouched rest of the caller's bytes, written with one vectored write (no copy), or a
/// batch rebuilt by the leader (recompressed for `compression.type`).
pub(crate) struct Prepared<'a> {
    pub input: &'a [u8],
    /// Start of each batch in `input`.
    pub starts: Vec<usize>,
    pub patched: Vec<[u8; HEADER_LEN]>,
    pub headers: Vec<BatchHeader>,
    /// A rebuilt batch replacing the caller's bytes, per batch.
    pub rebuilt: Vec<Option<Vec<u8>>>,
    pub records: u64,
}

impl Prepared<'_> {
    pub fn parts(&self) -> Vec<&[u8]> {
        let mut v = Vec::with_capacity(self.headers.len() * 2);
        for (((start, h), hdr), rebuilt) in self
            .starts
            .iter()
            .zip(&self.headers)
            .zip(&self.patched)
            .zip(&self.rebuilt)
        {
            v.push(&hdr[..]);
            match rebuilt {
                Some(b) => v.push(&b[HEADER_LEN..]),
                None => v.push(&self.input[start + HEADER_LEN..start + h.size()]),
            }
        }
        v
    }
    pub fn len(&self) -> usize {
        self.headers.iter().map(|h| h.size()).sum()
    }
}

/// The rules records must satisfy for an append from `origin` at `now_ms`.
pub(crate) fn rules(config: &LogConfig, origin: Origin, now_ms: i64) -> Rules {
    let create_time = config.timestamp_type == TimestampType::CreateTime;
    Rules {
        origin,
        compacted: config.cleanup_policy.compact,
        timestamps: (origin == Origin::Leader && create_time).then(|| TimestampBounds {
            earliest: now_ms.saturating_sub(config.timestamp_before_max_ms),
            latest: now_ms.saturating_add(config.timestamp_after_max_ms),
        }),
        cap: MAX_DECOMPRESSED_BYTES,
    }
}

/// Validate every batch (Kafka's log validator: see [`validate_batch`]) and, for a
/// leader, apply the topic's settings: recompression (`compression.type`), LogAppendTime,
/// and the max timestamp the records actually hold.
pub(crate) fn prepare<'a>(
    records: &'a [u8],
    config: &LogConfig,
    origin: Origin,
    now_ms: i64,
) -> Result<Prepared<'a>> {
    if records.is_empty() {
        return Err(LogError::InvalidRecord("no record batches".into()));
    }
    let rules = rules(config, origin, now_ms);
    let mut p = Prepared {
        input: records,
        starts: Vec::new(),
        patched: Vec::new(),
        headers: Vec::new(),
        rebuilt: Vec::new(),
        records: 0,
    };
    let mut pos = 0;
    while pos < records.len() {
        let (mut h, summary) = validate_batch(&records[pos..], config.max_message_bytes, &rules)?;
        let end = pos + h.size();
        let mut rebuilt = None;
        if origin == Origin::Leader {
            if h.is_control() {
                return Err(LogError::InvalidRecord(
                    "clients may not send control batches".into(),
                ));
            }
            if let CompressionType::Codec(target) = config.compression {
                if h.codec() != Some(target) {
                    let b = codec::recompress(&records[pos..end], &h, target, rules.cap)?;
                    if b.len() > config.max_message_bytes {
                        return Err(LogError::MessageTooLarge {
                            size: b.len(),
                            max: config.max_message_bytes,
                        });
                    }
                    h = BatchHeader::parse(&b).expect("a rebuilt batch has a header");
                    rebuilt = Some(b);
                }
            }
        }
        let bytes = rebuilt.as_deref().unwrap_or(&records[pos..end]);
        let mut hdr = [0u8; HEADER_LEN];
        hdr.copy_from_slice(&bytes[..HEADER_LEN]);
        if origin == Origin::Leader {
            if config.timestamp_type == TimestampType::LogAppendTime {
                batch::set_log_append_time(&mut hdr, &bytes[HEADER_LEN..], now_ms);
                h.attributes |= batch::ATTR_LOG_APPEND_TIME;
                h.max_timestamp = now_ms;
            } else if h.max_timestamp != summary.max_timestamp {
                // The time index and ListOffsets rely on it: what the records say wins.
                batch::set_max_timestamp(&mut hdr, &bytes[HEADER_LEN..], summary.max_timestamp);
                h.max_timestamp = summary.max_timestamp;
            }
        }
        p.records += u64::from(summary.records);
        p.starts.push(pos);
        p.patched.push(hdr);
        p.headers.push(h);
        p.rebuilt.push(rebuilt);
        pos = end;
    }
    Ok(p)
}
