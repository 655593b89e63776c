//! The message browser's pure part: the `/ui/api/messages` query, and the page of records a
//! read of the partition's log yields, filtered and decoded for display.
//!
//! A page holds at most [`MAX_LIMIT`] records and about [`ANSWER_BUDGET`] bytes of shown text;
//! a read examines at most [`SCAN_BUDGET`] bytes of log, so a filter that matches nothing
//! answers with where to continue (`next_offset`) rather than reading the whole partition.

use gregor_log::batch::BatchHeader;
use gregor_log::records::Record;
use gregor_log::txn::AbortedTxn;
use serde_json::{json, Value};

/// The most records one page holds.
pub const MAX_LIMIT: u32 = 500;
/// Records per page when the query names no `limit`.
pub const DEFAULT_LIMIT: u32 = 50;
/// The most bytes of log one request examines (whole batches, so one batch may exceed it).
pub const SCAN_BUDGET: usize = 8 << 20;
/// About the most bytes of key, value and header text one page shows.
pub const ANSWER_BUDGET: usize = 1 << 20;
/// The most bytes of one key, value or header value shown (the rest is cut, and said so).
pub const SHOWN_PER_FIELD: usize = 4096;
/// The longest `filter`.
pub const MAX_FILTER: usize = 128;
/// The largest value pretty-printed as JSON; larger ones are shown as text.
const MAX_JSON_FORMAT: usize = 64 << 10;
/// Kafka's longest topic name.
const MAX_TOPIC_LEN: usize = 249;

/// Where a page starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seek {
    /// The log start (no seek parameter).
    Earliest,
    /// This offset (moved into the readable range).
    Offset(i64),
    /// The first record whose timestamp is at or after this one (ListOffsets by timestamp).
    Timestamp(i64),
    /// The last `limit` offsets below the readable end.
    Newest,
}

/// How keys, values and headers are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decode {
    Utf8,
    Json,
    Hex,
}

/// Where `filter` must occur.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterOn {
    Any,
    Key,
    Value,
    Header,
}

/// A parsed `/ui/api/messages` query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrowseQuery {
    pub topic: String,
    pub partition: i32,
    pub seek: Seek,
    pub limit: u32,
    /// A byte substring the shown records contain; `None`: all records.
    pub filter: Option<String>,
    pub filter_on: FilterOn,
    pub decode: Decode,
    /// read_committed (the default): up to the last stable offset, aborted records left out.
    /// read_uncommitted: up to the high watermark, aborted records shown flagged.
    pub read_committed: bool,
}

/// Why a `/ui/api/messages` query was refused (HTTP 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BrowseError {
    #[error("{0}")]
    Query(String),
    #[error("missing parameter {0}: /ui/api/messages?topic=<topic>&partition=<n>")]
    Missing(&'static str),
    #[error("parameter {0} given more than once")]
    Repeated(&'static str),
    #[error("parameter {name} must be {want}, not {got:?}")]
    Bad {
        name: &'static str,
        want: &'static str,
        got: String,
    },
    #[error("give at most one of offset, timestamp and newest")]
    SeveralSeeks,
}

/// At most one value of parameter `name`, read with `get`.
fn one(
    get: &dyn Fn(&str) -> Result<Vec<String>, String>,
    name: &'static str,
) -> Result<Option<String>, BrowseError> {
    let mut values = get(name).map_err(BrowseError::Query)?;
    if values.len() > 1 {
        return Err(BrowseError::Repeated(name));
    }
    Ok(values.pop())
}

fn bad(name: &'static str, want: &'static str, got: &str) -> BrowseError {
    BrowseError::Bad {
        name,
        want,
        got: got.chars().take(64).collect(),
    }
}

/// A number parameter within `[min, max]`.
fn number(
    get: &dyn Fn(&str) -> Result<Vec<String>, String>,
    name: &'static str,
    want: &'static str,
    (min, max): (i64, i64),
) -> Result<Option<i64>, BrowseError> {
    let Some(v) = one(get, name)? else {
        return Ok(None);
    };
    match v.parse::<i64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(Some(n)),
        _ => Err(bad(name, want, &v)),
    }
}

/// One of `choices` (the first when absent).
fn choice<T: Copy>(
    get: &dyn Fn(&str) -> Result<Vec<String>, String>,
    name: &'static str,
    want: &'static str,
    choices: &[(&str, T)],
) -> Result<T, BrowseError> {
    let v = one(get, name)?;
    let Some(v) = v else {
        return Ok(choices[0].1);
    };
    choices
        .iter()
        .find(|(n, _)| *n == v)
        .map(|(_, t)| *t)
        .ok_or_else(|| bad(name, want, &v))
}

/// Where the page starts: at most one of `offset`, `timestamp`, `newest`.
fn seek(get: &dyn Fn(&str) -> Result<Vec<String>, String>) -> Result<Seek, BrowseError> {
    let offset = number(get, "offset", "an offset, 0 or more", (0, i64::MAX))?;
    let timestamp = number(
        get,
        "timestamp",
        "a time in milliseconds since the epoch, 0 or more",
        (0, i64::MAX),
    )?;
    let newest = match one(get, "newest")?.as_deref() {
        None | Some("false") => false,
        Some("" | "true" | "1") => true,
        Some(other) => return Err(bad("newest", "empty, true or false", other)),
    };
    match (offset, timestamp, newest) {
        (None, None, false) => Ok(Seek::Earliest),
        (Some(o), None, false) => Ok(Seek::Offset(o)),
        (None, Some(t), false) => Ok(Seek::Timestamp(t)),
        (None, None, true) => Ok(Seek::Newest),
        _ => Err(BrowseError::SeveralSeeks),
    }
}

/// Parses a query, given `get`, which answers the decoded values of one parameter. Every
/// number is checked against its bounds before anything uses it.
pub fn parse(
    get: &dyn Fn(&str) -> Result<Vec<String>, String>,
) -> Result<BrowseQuery, BrowseError> {
    let topic = one(get, "topic")?.ok_or(BrowseError::Missing("topic"))?;
    if topic.is_empty() || topic.len() > MAX_TOPIC_LEN {
        return Err(bad("topic", "a topic name of 1 to 249 bytes", &topic));
    }
    let partition = number(
        get,
        "partition",
        "a partition index, 0 or more",
        (0, i32::MAX.into()),
    )?
    .ok_or(BrowseError::Missing("partition"))?;
    let limit = number(
        get,
        "limit",
        "a record count from 1 to 500",
        (1, MAX_LIMIT.into()),
    )?
    .unwrap_or(DEFAULT_LIMIT.into());
    let filter = one(get, "filter")?.filter(|f| !f.is_empty());
    if filter.as_ref().is_some_and(|f| f.len() > MAX_FILTER) {
        return Err(bad("filter", "at most 128 bytes", ""));
    }
    let filter_on = choice(
        get,
        "filter_on",
        "any, key, value or header",
        &[
            ("any", FilterOn::Any),
            ("key", FilterOn::Key),
            ("value", FilterOn::Value),
            ("header", FilterOn::Header),
        ],
    )?;
    let decode = choice(
        get,
        "decode",
        "utf8, json or hex",
        &[
            ("utf8", Decode::Utf8),
            ("json", Decode::Json),
            ("hex", Decode::Hex),
        ],
    )?;
    let read_committed = choice(
        get,
        "isolation",
        "read_committed or read_uncommitted",
        &[("read_committed", true), ("read_uncommitted", false)],
    )?;
    Ok(BrowseQuery {
        topic,
        partition: i32::try_from(partition).map_err(|_| bad("partition", "an i32", ""))?,
        seek: seek(get)?,
        limit: u32::try_from(limit).map_err(|_| bad("limit", "1 to 500", ""))?,
        filter,
        filter_on,
        decode,
        read_committed,
    })
}

impl BrowseQuery {
    /// The query again, for the partition's leader (`encode` percent-encodes a value).
    pub fn to_query(&self, encode: &dyn Fn(&str) -> String) -> String {
        let mut q = format!(
            "topic={}&partition={}&limit={}&decode={}&filter_on={}&isolation={}",
            encode(&self.topic),
            self.partition,
            self.limit,
            decode_name(self.decode),
            filter_on_name(self.filter_on),
            if self.read_committed {
                "read_committed"
            } else {
                "read_uncommitted"
            },
        );
        match self.seek {
            Seek::Earliest => {}
            Seek::Offset(o) => q.push_str(&format!("&offset={o}")),
            Seek::Timestamp(t) => q.push_str(&format!("&timestamp={t}")),
            Seek::Newest => q.push_str("&newest=true"),
        }
        if let Some(f) = &self.filter {
            q.push_str(&format!("&filter={}", encode(f)));
        }
        q
    }
}

fn decode_name(d: Decode) -> &'static str {
    match d {
        Decode::Utf8 => "utf8",
        Decode::Json => "json",
        Decode::Hex => "hex",
    }
}

fn filter_on_name(f: FilterOn) -> &'static str {
    match f {
        FilterOn::Any => "any",
        FilterOn::Key => "key",
        FilterOn::Value => "value",
        FilterOn::Header => "header",
    }
}

/// Where a page starts, given the readable range `[log_start, end)` and, for a timestamp
/// seek, the offset ListOffsets found for it (`None`: no record that late).
pub fn start_offset(seek: Seek, limit: u32, log_start: i64, end: i64, found: Option<i64>) -> i64 {
    let wanted = match seek {
        Seek::Earliest => log_start,
        Seek::Offset(o) => o,
        Seek::Timestamp(_) => found.unwrap_or(end),
        Seek::Newest => end.saturating_sub(i64::from(limit)),
    };
    wanted.clamp(log_start, end.max(log_start))
}

/// Whether `needle` occurs in `hay`.
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
}

/// Whether `r` matches the query's filter.
pub fn matches(q: &BrowseQuery, r: &Record) -> bool {
    let Some(f) = &q.filter else { return true };
    let f = f.as_bytes();
    let in_opt = |b: &Option<bytes::Bytes>| b.as_deref().is_some_and(|b| contains(b, f));
    let key = || in_opt(&r.key);
    let value = || in_opt(&r.value);
    let header = || {
        r.headers
            .iter()
            .any(|h| contains(&h.key, f) || in_opt(&h.value))
    };
    match q.filter_on {
        FilterOn::Any => key() || value() || header(),
        FilterOn::Key => key(),
        FilterOn::Value => value(),
        FilterOn::Header => header(),
    }
}

/// The first `max` bytes of `b` in hexadecimal.
fn hex(b: &[u8], max: usize) -> String {
    b.iter()
        .take(max)
        .map(|x| format!("{x:02x}"))
        .collect::<String>()
}

/// `s` cut to at most `max` bytes, at a character boundary.
fn cut(s: &str, max: usize) -> (&str, bool) {
    if s.len() <= max {
        return (s, false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (&s[..end], true)
}

/// Bytes shown as `decode` asks: `{bytes, encoding, text, truncated, note?}`. What does not
/// decode so (not UTF-8, not JSON) falls back to the next plainer form, with a note saying so.
pub fn shown(b: &[u8], decode: Decode) -> Value {
    let text_of = |s: &str, encoding: &str, note: Option<&str>| {
        let (t, truncated) = cut(s, SHOWN_PER_FIELD);
        let mut v =
            json!({"bytes": b.len(), "encoding": encoding, "text": t, "truncated": truncated});
        if let Some(n) = note {
            v["note"] = json!(n);
        }
        v
    };
    let hex_of = |note: Option<&str>| {
        let mut v = json!({
            "bytes": b.len(),
            "encoding": "hex",
            "text": hex(b, SHOWN_PER_FIELD / 2),
            "truncated": b.len() > SHOWN_PER_FIELD / 2,
        });
        if let Some(n) = note {
            v["note"] = json!(n);
        }
        v
    };
    if decode == Decode::Hex {
        return hex_of(None);
    }
    let Ok(s) = std::str::from_utf8(b) else {
        return hex_of(Some("not UTF-8: shown in hex"));
    };
    if decode == Decode::Utf8 {
        return text_of(s, "utf8", None);
    }
    if b.len() > MAX_JSON_FORMAT {
        return text_of(
            s,
            "utf8",
            Some("too large to format as JSON: shown as text"),
        );
    }
    match serde_json::from_slice::<Value>(b) {
        Ok(v) => {
            let pretty = serde_json::to_string_pretty(&v).unwrap_or_else(|_| s.to_string());
            text_of(&pretty, "json", None)
        }
        Err(_) => text_of(s, "utf8", Some("not JSON: shown as text")),
    }
}

/// How far a field's shown form counts against the page's budget.
fn shown_len(v: &Value) -> usize {
    v["text"].as_str().map_or(0, str::len)
}

/// Whether batch `h` belongs to one of the `aborted` transactions.
pub fn is_aborted(h: &BatchHeader, aborted: &[AbortedTxn]) -> bool {
    h.is_transactional()
        && aborted.iter().any(|a| {
            a.producer_id == h.producer_id
                && (a.first_offset..=a.last_offset).contains(&h.base_offset)
        })
}

/// Why a page stopped before the readable end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Limit,
    AnswerBudget,
    ScanBudget,
}

/// A page being filled, batch by batch, from `start`.
#[derive(Debug)]
pub struct PageBuilder<'q> {
    q: &'q BrowseQuery,
    records: Vec<Value>,
    shown_bytes: usize,
    /// The next offset to examine.
    pub next_offset: i64,
    skipped_control: u64,
    skipped_aborted: u64,
    filtered_out: u64,
    pub stop: Option<Stop>,
}

impl<'q> PageBuilder<'q> {
    pub fn new(q: &'q BrowseQuery, start: i64) -> PageBuilder<'q> {
        PageBuilder {
            q,
            records: Vec::new(),
            shown_bytes: 0,
            next_offset: start,
            skipped_control: 0,
            skipped_aborted: 0,
            filtered_out: 0,
            stop: None,
        }
    }

    /// Whether the page takes no more records.
    pub fn full(&self) -> bool {
        self.stop.is_some()
    }

    /// A control batch (a transaction marker): never data, only counted.
    pub fn control_batch(&mut self, h: &BatchHeader) {
        self.skipped_control += 1;
        self.next_offset = self.next_offset.max(h.next_offset());
    }

    /// Takes the records of one data batch at or after `next_offset`, until the page is full.
    pub fn take_batch(&mut self, h: &BatchHeader, records: &[Record], aborted: bool) {
        let from = self.next_offset;
        for r in records.iter().filter(|r| r.offset >= from) {
            if self.full() {
                return;
            }
            self.next_offset = r.offset + 1;
            if aborted && self.q.read_committed {
                self.skipped_aborted += 1;
            } else if !matches(self.q, r) {
                self.filtered_out += 1;
            } else {
                self.push(h, r, aborted);
            }
        }
        if !self.full() {
            self.next_offset = self.next_offset.max(h.next_offset());
        }
    }

    fn push(&mut self, h: &BatchHeader, r: &Record, aborted: bool) {
        let d = self.q.decode;
        let key = r.key.as_deref().map(|k| shown(k, d));
        let value = r.value.as_deref().map(|v| shown(v, d));
        let headers: Vec<Value> = r
            .headers
            .iter()
            .map(|x| {
                let k = String::from_utf8_lossy(&x.key);
                let (k, _) = cut(&k, SHOWN_PER_FIELD);
                json!({"key": k, "value": x.value.as_deref().map(|v| shown(v, d))})
            })
            .collect();
        let used = key.as_ref().map_or(0, shown_len)
            + value.as_ref().map_or(0, shown_len)
            + headers
                .iter()
                .map(|x| x["key"].as_str().map_or(0, str::len) + shown_len(&x["value"]))
                .sum::<usize>();
        self.shown_bytes += used;
        self.records.push(json!({
            "offset": r.offset,
            "timestamp": r.timestamp,
            "timestamp_type": if h.is_log_append_time() { "LogAppendTime" } else { "CreateTime" },
            "key": key,
            "value": value,
            "headers": headers,
            "transactional": h.is_transactional(),
            "aborted": aborted,
            "producer_id": h.producer_id,
        }));
        if self.records.len() >= self.q.limit as usize {
            self.stop = Some(Stop::Limit);
        } else if self.shown_bytes >= ANSWER_BUDGET {
            self.stop = Some(Stop::AnswerBudget);
        }
    }

    /// The page's JSON: the records and what was passed over, with `range` (log start, high
    /// watermark, last stable offset, the end read to) and where it started.
    pub fn finish(self, start: i64, range: Range, scanned_bytes: usize) -> Value {
        let stop = self.stop.map(|s| match s {
            Stop::Limit => "limit",
            Stop::AnswerBudget => "answer budget",
            Stop::ScanBudget => "scan budget",
        });
        json!({
            "topic": self.q.topic,
            "partition": self.q.partition,
            "isolation": if self.q.read_committed { "read_committed" } else { "read_uncommitted" },
            "decode": decode_name(self.q.decode),
            "filter": self.q.filter,
            "filter_on": filter_on_name(self.q.filter_on),
            "limit": self.q.limit,
            "start_offset": start,
            "next_offset": self.next_offset,
            "more": self.next_offset < range.end,
            "stopped_by": stop,
            "log_start_offset": range.log_start,
            "high_watermark": range.high_watermark,
            "last_stable_offset": range.last_stable,
            "end_offset": range.end,
            "scanned_bytes": scanned_bytes,
            "skipped": {
                "control_batches": self.skipped_control,
                "aborted_records": self.skipped_aborted,
                "filtered_out": self.filtered_out,
            },
            "records": self.records,
        })
    }
}

/// The readable range of a partition at a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub log_start: i64,
    pub high_watermark: i64,
    pub last_stable: i64,
    /// What the page reads to: the last stable offset (read_committed) or the high watermark.
    pub end: i64,
}

#[cfg(test)]
#[path = "browse_tests.rs"]
mod tests;
