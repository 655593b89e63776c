//! Partitions' load for the `load` assignor, from samples of each partition's high watermark and
//! log size as its leader reports them: bytes per second in (records appended between two
//! samples times the mean record size, averaged over samples) and the mean record size (the log's
//! growth over the records it gained, or its size over its high watermark before that). Pure:
//! the samples and the time come in.

use std::collections::BTreeMap;

use gregor_group::{PartitionLoad, PartitionLoads};

/// Weight of the newest sample in the running averages.
const NEWEST_WEIGHT: f64 = 0.5;

/// A partition's state on its leader at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub high_watermark: i64,
    /// The log's size in bytes, when the leader said.
    pub size_bytes: Option<i64>,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    last: Sample,
    at_ms: i64,
    bytes_per_sec: Option<f64>,
    bytes_per_record: Option<f64>,
}

/// The running figures of the partitions sampled last; see the module documentation.
#[derive(Debug, Default)]
pub struct LoadMeter {
    entries: BTreeMap<(String, i32), Entry>,
}

impl LoadMeter {
    /// Takes one round of samples at `now_ms`; partitions missing from it are forgotten (no
    /// group on the `load` assignor wants them, or their leader did not answer).
    pub fn record(&mut self, samples: BTreeMap<(String, i32), Sample>, now_ms: i64) {
        let mut old = std::mem::take(&mut self.entries);
        for (tp, s) in samples {
            let entry = match old.remove(&tp) {
                Some(e) => advance(e, s, now_ms),
                None => Entry {
                    last: s,
                    at_ms: now_ms,
                    bytes_per_sec: None,
                    bytes_per_record: whole_log_record_size(s),
                },
            };
            self.entries.insert(tp, entry);
        }
    }

    /// The partitions whose rate is known (sampled at least twice).
    pub fn loads(&self) -> PartitionLoads {
        let mut out = PartitionLoads::new();
        for ((topic, partition), e) in &self.entries {
            let Some(rate) = e.bytes_per_sec else {
                continue;
            };
            let load = PartitionLoad {
                bytes_in_per_sec: rate,
                high_watermark: e.last.high_watermark,
                bytes_per_record: e.bytes_per_record.unwrap_or(0.0),
            };
            out.entry(topic.clone())
                .or_default()
                .insert(*partition, load);
        }
        out
    }
}

/// Mean record size over the whole log, as a first estimate.
fn whole_log_record_size(s: Sample) -> Option<f64> {
    let size = s.size_bytes?;
    (s.high_watermark > 0 && size >= 0).then(|| size as f64 / s.high_watermark as f64)
}

fn average(old: Option<f64>, new: f64) -> f64 {
    old.map_or(new, |o| o + NEWEST_WEIGHT * (new - o))
}

/// An entry after sample `s` at `now_ms`.
fn advance(e: Entry, s: Sample, now_ms: i64) -> Entry {
    let elapsed_ms = now_ms - e.at_ms;
    if elapsed_ms <= 0 {
        return e;
    }
    // A high watermark that went back (the log was truncated or recreated) starts over.
    let records = s.high_watermark - e.last.high_watermark;
    if records < 0 {
        return Entry {
            last: s,
            at_ms: now_ms,
            bytes_per_sec: None,
            bytes_per_record: whole_log_record_size(s),
        };
    }
    // Growth in bytes says the record size only while nothing was deleted meanwhile.
    let grown = match (e.last.size_bytes, s.size_bytes) {
        (Some(a), Some(b)) if b >= a && records > 0 => Some((b - a) as f64 / records as f64),
        _ => None,
    };
    let bytes_per_record = match grown {
        Some(size) => Some(average(e.bytes_per_record, size)),
        None => e.bytes_per_record.or_else(|| whole_log_record_size(s)),
    };
    let bytes = records as f64 * bytes_per_record.unwrap_or(0.0);
    let rate = bytes * 1000.0 / elapsed_ms as f64;
    Entry {
        last: s,
        at_ms: now_ms,
        bytes_per_sec: Some(average(e.bytes_per_sec, rate)),
        bytes_per_record,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(meter: &mut LoadMeter, hw: i64, size: i64, now_ms: i64) {
        let s = Sample {
            high_watermark: hw,
            size_bytes: Some(size),
        };
        meter.record(BTreeMap::from([(("t".to_string(), 0), s)]), now_ms);
    }

    fn load(meter: &LoadMeter) -> Option<PartitionLoad> {
        meter.loads().get("t").and_then(|ps| ps.get(&0)).copied()
    }

    #[test]
    fn the_rate_is_known_from_the_second_sample_on() {
        let mut m = LoadMeter::default();
        round(&mut m, 100, 10_000, 0);
        assert_eq!(load(&m), None);
        // 100 records of 100 bytes in one second.
        round(&mut m, 200, 20_000, 1_000);
        let l = load(&m).unwrap();
        assert_eq!(l.bytes_per_record, 100.0);
        assert_eq!(l.bytes_in_per_sec, 10_000.0);
        assert_eq!(l.high_watermark, 200);
        // Idle for a second: the average halves.
        round(&mut m, 200, 20_000, 2_000);
        assert_eq!(load(&m).unwrap().bytes_in_per_sec, 5_000.0);
    }

    #[test]
    fn retention_shrinking_the_log_keeps_the_record_size_it_had() {
        let mut m = LoadMeter::default();
        round(&mut m, 100, 10_000, 0);
        round(&mut m, 200, 20_000, 1_000);
        // A segment was deleted: the log is smaller though 100 records came.
        round(&mut m, 300, 5_000, 2_000);
        let l = load(&m).unwrap();
        assert_eq!(l.bytes_per_record, 100.0);
        assert_eq!(l.bytes_in_per_sec, 10_000.0);
    }

    #[test]
    fn a_partition_not_sampled_is_forgotten_and_a_truncated_one_starts_over() {
        let mut m = LoadMeter::default();
        round(&mut m, 100, 10_000, 0);
        round(&mut m, 200, 20_000, 1_000);
        round(&mut m, 50, 5_000, 2_000);
        assert_eq!(load(&m), None, "the high watermark went back");
        m.record(BTreeMap::new(), 3_000);
        assert!(m.loads().is_empty());
    }
}
