//! Charts over time: what this node saw in the last hour, sampled every [`SAMPLE_EVERY_MS`] into
//! fixed-size rings kept in memory (lost at restart). A pure state machine: the shell feeds it
//! `now` and the cumulative values it read ([`Reading`]); counters become rates between two
//! samples. Memory is bounded whatever the number of topics or groups: at most [`MAX_SERIES`]
//! series per chart, each of at most [`POINTS`] points; a series that does not fit is refused
//! (counted) until an older one ages out.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use serde_json::{json, Value};

/// How often a sample is taken.
pub const SAMPLE_EVERY_MS: i64 = 10_000;
/// How far back the charts go.
pub const WINDOW_MS: i64 = 3_600_000;
/// Points kept per series: one hour of samples.
pub const POINTS: usize = (WINDOW_MS / SAMPLE_EVERY_MS) as usize;
/// Series kept per chart (topics, groups, request types).
pub const MAX_SERIES: usize = 50;

/// One chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Chart {
    /// Bytes produced to the partitions this node leads, per topic, per second.
    BytesIn,
    /// Bytes fetched by consumers (not followers) from this node, per topic, per second.
    BytesOut,
    /// The lag of the groups this node coordinates, in records.
    GroupLag,
    /// The time lag of the groups this node coordinates: the age of the oldest record they have
    /// not consumed, over the partitions this node leads, in milliseconds.
    GroupTimeLag,
    /// The mean time to answer a request, per request type, in milliseconds.
    RequestLatency,
    /// ISR shrinks and expansions of the partitions this node leads, per sample.
    IsrChanges,
}

/// Who a chart's series are about, for what a viewer may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    Topic,
    Group,
    Cluster,
}

impl Chart {
    const ALL: [Chart; 6] = [
        Chart::BytesIn,
        Chart::BytesOut,
        Chart::GroupLag,
        Chart::GroupTimeLag,
        Chart::RequestLatency,
        Chart::IsrChanges,
    ];

    /// `(id, title, unit, what a series is)`.
    fn describe(self) -> (&'static str, &'static str, &'static str, Subject) {
        match self {
            Chart::BytesIn => ("bytes_in", "Bytes in per topic", "bytes/s", Subject::Topic),
            Chart::BytesOut => (
                "bytes_out",
                "Bytes out per topic (consumers)",
                "bytes/s",
                Subject::Topic,
            ),
            Chart::GroupLag => (
                "group_lag",
                "Consumer lag per group",
                "records",
                Subject::Group,
            ),
            Chart::GroupTimeLag => (
                "group_time_lag",
                "Time lag per group (age of the oldest unconsumed record)",
                "ms",
                Subject::Group,
            ),
            Chart::RequestLatency => (
                "request_latency",
                "Mean request latency per request type",
                "ms",
                Subject::Cluster,
            ),
            Chart::IsrChanges => (
                "isr_changes",
                "ISR shrinks and expansions",
                "per sample",
                Subject::Cluster,
            ),
        }
    }
}

/// Cumulative values read at one instant (counters since the process started; lag as it is).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    pub bytes_in: Vec<(String, f64)>,
    pub bytes_out: Vec<(String, f64)>,
    /// Per request type: seconds spent answering, and requests answered.
    pub request_seconds: Vec<(String, f64, f64)>,
    pub isr_shrinks: Option<f64>,
    pub isr_expands: Option<f64>,
    /// Per group this node coordinates: its lag, when every partition's is known.
    pub group_lag: Vec<(String, f64)>,
    /// Per group this node coordinates, over its partitions this node leads: the timestamp
    /// (ms) of the oldest record it has not consumed, `None` when it has consumed them all.
    /// Groups without such a partition are not listed.
    pub group_oldest_unconsumed: Vec<(String, Option<i64>)>,
}

/// The series `reading` holds, by chart.
fn read_keys(reading: &Reading) -> HashSet<(Chart, String)> {
    let names = |chart: Chart, names: &mut dyn Iterator<Item = &String>| {
        names.map(move |n| (chart, n.clone())).collect::<Vec<_>>()
    };
    let mut keys = HashSet::new();
    keys.extend(names(
        Chart::BytesIn,
        &mut reading.bytes_in.iter().map(|x| &x.0),
    ));
    keys.extend(names(
        Chart::BytesOut,
        &mut reading.bytes_out.iter().map(|x| &x.0),
    ));
    keys.extend(names(
        Chart::RequestLatency,
        &mut reading.request_seconds.iter().map(|x| &x.0),
    ));
    keys.extend(names(
        Chart::GroupLag,
        &mut reading.group_lag.iter().map(|x| &x.0),
    ));
    keys.extend(names(
        Chart::GroupTimeLag,
        &mut reading.group_oldest_unconsumed.iter().map(|x| &x.0),
    ));
    let isr = [
        ("shrinks", reading.isr_shrinks),
        ("expands", reading.isr_expands),
    ];
    for (name, v) in isr {
        if v.is_some() {
            keys.insert((Chart::IsrChanges, name.to_string()));
        }
    }
    keys
}

/// The age at `now_ms` of the oldest unconsumed record (written at `oldest`); 0 when there is
/// none, or when its timestamp is ahead of this node's clock.
pub fn time_lag(now_ms: i64, oldest: Option<i64>) -> i64 {
    oldest.map_or(0, |t| now_ms.saturating_sub(t).max(0))
}

/// What one partition says of a group's oldest unconsumed record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unconsumed {
    /// The committed offset is at the high watermark.
    CaughtUp,
    /// The timestamp of the record at the committed offset.
    Since(i64),
    /// The record could not be read.
    Unknown,
}

/// A group's oldest unconsumed record over its partitions: the earliest timestamp among them,
/// `Some(None)` when it has consumed everything, `None` when no partition could tell.
pub fn oldest_unconsumed(partitions: &[Unconsumed]) -> Option<Option<i64>> {
    let oldest = partitions
        .iter()
        .filter_map(|u| match u {
            Unconsumed::Since(t) => Some(*t),
            _ => None,
        })
        .min();
    if oldest.is_some() {
        return Some(oldest);
    }
    partitions.contains(&Unconsumed::CaughtUp).then_some(None)
}

/// A series' points, oldest first; at most [`POINTS`].
#[derive(Debug, Default)]
struct Ring {
    points: VecDeque<(i64, f64)>,
}

impl Ring {
    fn push(&mut self, at: i64, v: f64) {
        if self.points.len() == POINTS {
            self.points.pop_front();
        }
        self.points.push_back((at, v));
    }
}

/// One chart's series, and how many the last sample refused for want of room.
#[derive(Debug, Default)]
struct ChartSeries {
    series: BTreeMap<String, Ring>,
    refused: usize,
    /// Whether a series was ever refused: one admitted later may have counted for long.
    ever_refused: bool,
}

/// The sampler: when the next sample is due, the previous cumulative values, the rings.
#[derive(Debug, Default)]
pub struct Sampler {
    next_due_ms: Option<i64>,
    last_ms: Option<i64>,
    /// The previous sample's cumulative value (and count, for latencies) per admitted series.
    previous: HashMap<(Chart, String), (f64, f64)>,
    charts: BTreeMap<Chart, ChartSeries>,
}

impl Sampler {
    /// Whether a sample is due at `now_ms` (at once for the first).
    pub fn due(&self, now_ms: i64) -> bool {
        self.next_due_ms.is_none_or(|d| now_ms >= d)
    }

    /// Takes `reading` as the sample of `now_ms` if one is due; whether it did.
    pub fn record(&mut self, now_ms: i64, reading: &Reading) -> bool {
        if !self.due(now_ms) {
            return false;
        }
        let elapsed = self.last_ms.map(|l| now_ms - l).filter(|e| *e > 0);
        for c in self.charts.values_mut() {
            c.refused = 0;
        }
        let per_second = |delta: f64, _count: f64| elapsed.map(|e| delta * 1000.0 / e as f64);
        for (name, v) in &reading.bytes_in {
            self.counter(Chart::BytesIn, name, *v, 0.0, now_ms, per_second);
        }
        for (name, v) in &reading.bytes_out {
            self.counter(Chart::BytesOut, name, *v, 0.0, now_ms, per_second);
        }
        let mean_ms = |seconds: f64, count: f64| (count > 0.0).then(|| seconds * 1000.0 / count);
        for (name, seconds, count) in &reading.request_seconds {
            self.counter(
                Chart::RequestLatency,
                name,
                *seconds,
                *count,
                now_ms,
                mean_ms,
            );
        }
        let changes = |delta: f64, _count: f64| elapsed.map(|_| delta);
        let isr = [
            ("shrinks", reading.isr_shrinks),
            ("expands", reading.isr_expands),
        ];
        for (name, v) in isr {
            if let Some(v) = v {
                self.counter(Chart::IsrChanges, name, v, 0.0, now_ms, changes);
            }
        }
        for (name, lag) in &reading.group_lag {
            if self.admit(Chart::GroupLag, name) {
                self.push(Chart::GroupLag, name, now_ms, *lag);
            }
        }
        for (name, oldest) in &reading.group_oldest_unconsumed {
            if self.admit(Chart::GroupTimeLag, name) {
                self.push(
                    Chart::GroupTimeLag,
                    name,
                    now_ms,
                    time_lag(now_ms, *oldest) as f64,
                );
            }
        }
        self.age_out(now_ms, &read_keys(reading));
        self.last_ms = Some(now_ms);
        self.next_due_ms = Some(now_ms + SAMPLE_EVERY_MS);
        true
    }

    /// A counter's new cumulative `value` (and `count`): a point from its change since the
    /// previous sample (`point(delta, delta_count)`), none on the first sample or after a reset.
    /// A series new since the previous sample counts from 0: counters appear at their first
    /// event (a topic's first produce). Not so in a chart that ever refused a series for want
    /// of room, whose newcomer may have been counting for long: it starts at its second sample.
    fn counter(
        &mut self,
        chart: Chart,
        name: &str,
        value: f64,
        count: f64,
        now_ms: i64,
        point: impl Fn(f64, f64) -> Option<f64>,
    ) {
        if !self.admit(chart, name) {
            return;
        }
        let fresh =
            self.last_ms.is_some() && !self.charts.get(&chart).is_some_and(|c| c.ever_refused);
        let key = (chart, name.to_string());
        let previous = self
            .previous
            .insert(key, (value, count))
            .or(fresh.then_some((0.0, 0.0)));
        let delta = previous
            .filter(|(v, c)| value >= *v && count >= *c)
            .and_then(|(v, c)| point(value - v, count - c));
        if let Some(p) = delta {
            self.push(chart, name, now_ms, p);
        }
    }

    /// Whether `chart` has a series `name`, made if there is room (refusals counted).
    fn admit(&mut self, chart: Chart, name: &str) -> bool {
        let c = self.charts.entry(chart).or_default();
        if !c.series.contains_key(name) {
            if c.series.len() >= MAX_SERIES {
                c.refused += 1;
                c.ever_refused = true;
                return false;
            }
            c.series.insert(name.to_string(), Ring::default());
        }
        true
    }

    /// Adds a point to an admitted series.
    fn push(&mut self, chart: Chart, name: &str, at: i64, v: f64) {
        if let Some(ring) = self
            .charts
            .get_mut(&chart)
            .and_then(|c| c.series.get_mut(name))
        {
            ring.push(at, v);
        }
    }

    /// Forgets the previous values of series this sample did not read (a deleted topic, a
    /// group gone), drops points older than the window, then series left without points and no
    /// longer read: room for others.
    fn age_out(&mut self, now_ms: i64, read: &HashSet<(Chart, String)>) {
        self.previous.retain(|key, _| read.contains(key));
        let oldest = now_ms - WINDOW_MS;
        for (chart, c) in &mut self.charts {
            for ring in c.series.values_mut() {
                while ring.points.front().is_some_and(|(t, _)| *t < oldest) {
                    ring.points.pop_front();
                }
            }
            c.series.retain(|name, ring| {
                !ring.points.is_empty() || read.contains(&(*chart, name.clone()))
            });
        }
    }

    /// The charts as JSON, with the series `may_see` lets through.
    pub fn to_json(
        &self,
        node_id: i32,
        now_ms: i64,
        may_see: &dyn Fn(Subject, &str) -> bool,
    ) -> Value {
        let charts: Vec<Value> = Chart::ALL
            .iter()
            .map(|chart| {
                let (id, title, unit, subject) = chart.describe();
                let c = self.charts.get(chart);
                let series: Vec<Value> = c
                    .map(|c| &c.series)
                    .into_iter()
                    .flatten()
                    .filter(|(name, _)| may_see(subject, name))
                    .map(|(name, ring)| {
                        let points: Vec<[f64; 2]> =
                            ring.points.iter().map(|(t, v)| [*t as f64, *v]).collect();
                        json!({ "name": name, "points": points })
                    })
                    .collect();
                json!({
                    "id": id,
                    "title": title,
                    "unit": unit,
                    "series": series,
                    "refused": c.map_or(0, |c| c.refused),
                })
            })
            .collect();
        json!({
            "node_id": node_id,
            "now_ms": now_ms,
            "sample_every_ms": SAMPLE_EVERY_MS,
            "window_ms": WINDOW_MS,
            "max_series": MAX_SERIES,
            "last_sample_ms": self.last_ms,
            "charts": charts,
        })
    }
}

#[cfg(test)]
#[path = "charts_tests.rs"]
mod tests;
