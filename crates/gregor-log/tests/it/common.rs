use gregor_log::batch::{BatchHeader, Codec};
use gregor_log::records::{decode_batch, simple_batch, KeyValue, Record};
use gregor_log::{Log, LogConfig};
use std::path::Path;

pub const NOW: i64 = 1_700_000_000_000;

/// A producer batch of `n` records `key-i`/`value-i` padded to `pad` bytes.
pub fn batch(n: usize, tag: &str, ts: i64) -> Vec<u8> {
    batch_codec(n, tag, ts, Codec::None)
}

pub fn batch_codec(n: usize, tag: &str, ts: i64, codec: Codec) -> Vec<u8> {
    let keys: Vec<String> = (0..n).map(|i| format!("k{i}")).collect();
    let vals: Vec<String> = (0..n).map(|i| format!("{tag}-{i}")).collect();
    let kvs: Vec<KeyValue> = keys
        .iter()
        .zip(&vals)
        .map(|(k, v)| (Some(k.as_bytes()), Some(v.as_bytes())))
        .collect();
    simple_batch(codec, ts, &kvs).expect("encode")
}

pub fn kv_batch(kvs: &[(&str, Option<&str>)], ts: i64) -> Vec<u8> {
    let kvs: Vec<KeyValue> = kvs
        .iter()
        .map(|(k, v)| (Some(k.as_bytes()), v.map(str::as_bytes)))
        .collect();
    simple_batch(Codec::None, ts, &kvs).expect("encode")
}

pub fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        index_interval_bytes: 256,
        retention_ms: None,
        ..LogConfig::default()
    }
}

pub fn open(dir: &Path, config: LogConfig) -> Log {
    Log::open(dir, config, NOW).expect("open")
}

/// Split concatenated batches.
pub fn split_batches(mut bytes: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while let Some(h) = BatchHeader::parse(bytes) {
        out.push(&bytes[..h.size()]);
        bytes = &bytes[h.size()..];
    }
    assert!(bytes.is_empty(), "read returned a partial batch");
    out
}

/// Every record from the log start to the end, in order.
pub fn read_all(log: &Log) -> Vec<Record> {
    let mut out = Vec::new();
    let mut at = log.log_start_offset();
    let leo = log.log_end_offset();
    while at < leo {
        let r = log.read(at, 10_000, None).expect("read");
        let Some(next) = r.next_offset else { break };
        for b in split_batches(&r.records) {
            let (_, recs) = decode_batch(b).expect("decode");
            out.extend(recs.into_iter().filter(|r| r.offset >= at));
        }
        at = next;
    }
    out
}

pub fn values(recs: &[Record]) -> Vec<String> {
    recs.iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or(b"<null>")).into_owned())
        .collect()
}

/// Every batch of the log with its records, in order.
pub fn batches(log: &Log) -> Vec<(BatchHeader, Vec<Record>)> {
    let mut out = Vec::new();
    let mut at = log.log_start_offset();
    while at < log.log_end_offset() {
        let r = log.read(at, 1 << 20, None).expect("read");
        let Some(next) = r.next_offset else { break };
        for b in split_batches(&r.records) {
            let h = BatchHeader::parse(b).expect("header");
            let (_, recs) = decode_batch(b).expect("decode");
            out.push((h, recs));
        }
        at = next;
    }
    out
}
