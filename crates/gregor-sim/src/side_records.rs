//! Records on the side topics of `--topic-admin` runs, so that an unclean election there has
//! something to lose. While the faults run, a producer writes `acks=all` batches of one or two
//! records to random partitions of the side topics a node's metadata lists (RF 2 or 3, the
//! broker's default `min.insync.replicas=1`); after the side topics settle, every partition of
//! every side topic is read from offset 0 to its high watermark.
//!
//! The checks, on what that read returned:
//! - `acked-record-lost`: on a partition nobody asked an unclean election of, every
//!   acknowledged record is at its acknowledged offset with its value. Where an unclean
//!   election was asked for (its outcome may be unknown: the partition is exempt either way),
//!   acknowledged records may be gone, as `unclean.leader.election.enable` warns; the trace says
//!   how many were.
//! - `read-gap`: every log reads as consecutive offsets from 0, unclean elections or not (no
//!   retention or compaction here).
//! - `record-never-sent`: every value read was sent to that partition.
//! - `liveness`: every partition reads to its high watermark within a bound.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use gregor_meta::SplitMix64;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::data::{decode_records, produce_request, sleep_ms, Links};
use crate::history::History;
use crate::node::now_ms;
use crate::property::{Property, Violation};
use crate::side_view::{send, side_view, SideView};

/// After the side topics settle, each partition must read to its high watermark within this
/// much simulated time.
const READ_BOUND_MS: u64 = 10_000;

/// A batch a side-topic leader acknowledged.
#[derive(Debug, Clone)]
struct SideAcked {
    base_offset: i64,
    values: Vec<String>,
    at_ms: u64,
}

/// What was sent to, acknowledged by and asked of the side topics' partitions.
#[derive(Debug, Default)]
pub struct SideLog {
    /// (topic, partition) -> every value sent there.
    sent: BTreeMap<(String, i32), BTreeSet<String>>,
    acked: BTreeMap<(String, i32), Vec<SideAcked>>,
    /// Partitions an unclean election was asked for (whatever its answer).
    unclean: BTreeSet<(String, i32)>,
    counter: u64,
}

impl SideLog {
    pub fn unclean_asked(&mut self, topic: &str, partition: i32) {
        self.unclean.insert((topic.to_string(), partition));
    }

    fn next_values(&mut self, topic: &str, partition: i32, n: usize) -> Vec<String> {
        let values: Vec<String> = (0..n)
            .map(|_| {
                self.counter += 1;
                format!("s{}", self.counter)
            })
            .collect();
        self.sent
            .entry((topic.to_string(), partition))
            .or_default()
            .extend(values.iter().cloned());
        values
    }
}

/// While the faults run: `acks=all` batches to random side partitions from three producers at
/// once (a write to a leader that stopped answering holds one up for seconds).
pub async fn produce(
    history: Rc<RefCell<History>>,
    nodes: usize,
    seed: u64,
    log: Rc<RefCell<SideLog>>,
) {
    tokio::join!(
        produce_one(
            history.clone(),
            nodes,
            seed ^ 1,
            log.clone(),
            "sim-side-producer-1"
        ),
        produce_one(
            history.clone(),
            nodes,
            seed ^ 2,
            log.clone(),
            "sim-side-producer-2"
        ),
        produce_one(
            history.clone(),
            nodes,
            seed ^ 3,
            log.clone(),
            "sim-side-producer-3"
        ),
    );
}

/// One producer: batches to random side partitions, through their leaders as a random node's
/// metadata names them.
async fn produce_one(
    history: Rc<RefCell<History>>,
    nodes: usize,
    seed: u64,
    log: Rc<RefCell<SideLog>>,
    name: &'static str,
) {
    let mut rng = SplitMix64::new(seed ^ 0x51de_5ec0_51de_5ec0);
    let mut links = Links::new(nodes, name);
    let mut view: Option<SideView> = None;
    while !history.borrow().faults_over {
        sleep_ms(20 + rng.next_below(150) as u64).await;
        if view.is_none() || rng.next_below(4) == 0 {
            view = side_view(&mut links, rng.next_below(nodes)).await;
        }
        let Some(v) = view.as_ref() else { continue };
        let led: Vec<(String, i32, usize)> = v
            .iter()
            .flat_map(|(t, leaders)| {
                leaders.iter().enumerate().filter_map(move |(p, &l)| {
                    usize::try_from(l)
                        .ok()
                        .filter(|&l| l < nodes)
                        .map(|l| (t.clone(), p as i32, l))
                })
            })
            .collect();
        if led.is_empty() {
            continue;
        }
        let (topic, partition, leader) = led[rng.next_below(led.len())].clone();
        let values = log
            .borrow_mut()
            .next_values(&topic, partition, 1 + rng.next_below(2));
        match write(&mut links, leader, &topic, partition, &values).await {
            Ok(base_offset) => {
                history.borrow_mut().event(format!(
                    "side ack {topic}-{partition}@{base_offset} {values:?} from n{leader}"
                ));
                log.borrow_mut()
                    .acked
                    .entry((topic, partition))
                    .or_default()
                    .push(SideAcked {
                        base_offset,
                        values,
                        at_ms: now_ms() as u64,
                    });
            }
            Err(e) => {
                history
                    .borrow_mut()
                    .event(format!("side {topic}-{partition} n{leader}: {e}"));
                view = None;
            }
        }
    }
}

/// One `acks=all` batch of `values` to `topic`-`partition` through `leader`: its base offset.
pub async fn write(
    links: &mut Links,
    leader: usize,
    topic: &str,
    partition: i32,
    values: &[String],
) -> Result<i64, String> {
    let req = produce_request(topic, partition, values, None, 0, -1);
    let resp = send(links, leader, &req, 9).await?;
    match resp
        .responses
        .first()
        .and_then(|t| t.partition_responses.first())
        .map(|p| (p.error_code, p.base_offset))
    {
        Some((0, base)) => Ok(base),
        Some((code, _)) => Err(format!("error {code}")),
        None => Err("empty produce response".into()),
    }
}

/// Records the settle step's own acknowledged write (one per partition, after the faults).
pub fn settled_write(log: &Rc<RefCell<SideLog>>, topic: &str, partition: i32) -> Vec<String> {
    log.borrow_mut().next_values(topic, partition, 1)
}

pub fn settled_ack(
    log: &Rc<RefCell<SideLog>>,
    topic: &str,
    partition: i32,
    base: i64,
    values: Vec<String>,
) {
    log.borrow_mut()
        .acked
        .entry((topic.to_string(), partition))
        .or_default()
        .push(SideAcked {
            base_offset: base,
            values,
            at_ms: now_ms() as u64,
        });
}

/// After the side topics settled as `view` says: reads every partition from offset 0 to its
/// high watermark and checks it against what was acknowledged.
pub async fn read_and_check(
    history: &Rc<RefCell<History>>,
    links: &mut Links,
    nodes: usize,
    mut view: SideView,
    log: &Rc<RefCell<SideLog>>,
) {
    let start = now_ms() as u64;
    let partitions: Vec<(String, i32)> = view
        .iter()
        .flat_map(|(t, leaders)| (0..leaders.len() as i32).map(move |p| (t.clone(), p)))
        .collect();
    let mut logs: BTreeMap<(String, i32), Vec<(i64, String)>> = BTreeMap::new();
    let mut pending: BTreeSet<(String, i32)> = partitions.iter().cloned().collect();
    let mut ask = 0;
    while !pending.is_empty() {
        if now_ms() as u64 > start + READ_BOUND_MS {
            history.borrow_mut().data.topic_violations.push(Violation::new(
                Property::Liveness,
                format!(
                    "side partitions not read to their high watermark {READ_BOUND_MS} ms after they settled: {pending:?}"
                ),
            ));
            return;
        }
        let mut progressed = false;
        for key in pending.clone() {
            let leader = view
                .get(&key.0)
                .and_then(|l| l.get(key.1 as usize))
                .and_then(|&l| usize::try_from(l).ok())
                .filter(|&l| l < nodes);
            let Some(leader) = leader else { continue };
            let read = logs.entry(key.clone()).or_default();
            let offset = read.last().map_or(0, |(o, _)| o + 1);
            match fetch(links, leader, &key.0, key.1, offset).await {
                Ok((hw, records)) => {
                    progressed |= !records.is_empty();
                    read.extend(records.into_iter().filter(|(o, _)| *o >= offset));
                    let end = read.last().map_or(0, |(o, _)| o + 1);
                    if end >= hw {
                        pending.remove(&key);
                    }
                }
                Err(_) => {
                    if let Some(v) = side_view(links, ask % nodes).await {
                        view = v;
                    }
                    ask += 1;
                }
            }
        }
        if !progressed {
            sleep_ms(50).await;
        }
    }
    let violations = check(&log.borrow(), &logs, &mut history.borrow_mut());
    history
        .borrow_mut()
        .data
        .topic_violations
        .extend(violations);
}

/// One fetch of `topic`-`partition` from `offset` (no leader epoch: the read follows Metadata):
/// the high watermark and the records.
async fn fetch(
    links: &mut Links,
    leader: usize,
    topic: &str,
    partition: i32,
    offset: i64,
) -> Result<(i64, Vec<(i64, String)>), String> {
    let mut req = FetchRequest::default();
    req.replica_id = BrokerId(-1);
    req.max_wait_ms = 0;
    req.min_bytes = 0;
    req.max_bytes = 1 << 20;
    let mut fp = FetchPartition::default();
    fp.partition = partition;
    fp.current_leader_epoch = -1;
    fp.fetch_offset = offset;
    fp.log_start_offset = -1;
    fp.partition_max_bytes = 1 << 20;
    let mut ft = FetchTopic::default();
    ft.topic = TopicName(StrBytes::from_string(topic.to_string()));
    ft.partitions = vec![fp];
    req.topics = vec![ft];
    let resp = send(links, leader, &req, 12).await?;
    let pd = resp
        .responses
        .into_iter()
        .next()
        .and_then(|t| t.partitions.into_iter().next())
        .ok_or("empty fetch response")?;
    if pd.error_code != 0 {
        return Err(format!("error {}", pd.error_code));
    }
    Ok((
        pd.high_watermark,
        pd.records.map(decode_records).unwrap_or_default(),
    ))
}

/// The checks of the module comment, over each partition's log as read.
fn check(
    log: &SideLog,
    logs: &BTreeMap<(String, i32), Vec<(i64, String)>>,
    history: &mut History,
) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut records = 0;
    for ((topic, partition), read) in logs {
        records += read.len();
        let name = format!("{topic}-{partition}");
        if let Some((i, (o, _))) = read.iter().enumerate().find(|(i, (o, _))| *o != *i as i64) {
            out.push(Violation::new(
                Property::ReadGap,
                format!("{name}: offset {o} read where offset {i} belongs"),
            ));
        }
        let sent = log.sent.get(&(topic.clone(), *partition));
        for (o, v) in read {
            if !sent.is_some_and(|s| s.contains(v)) {
                out.push(Violation::new(
                    Property::RecordNeverSent,
                    format!("{name}@{o}: {v:?} read, never sent there"),
                ));
            }
        }
        let key = (topic.clone(), *partition);
        let unclean = log.unclean.contains(&key);
        let mut gone = 0;
        let mut acked = 0;
        for a in log.acked.get(&key).into_iter().flatten() {
            for (i, v) in a.values.iter().enumerate() {
                acked += 1;
                let offset = a.base_offset + i as i64;
                let got = usize::try_from(offset)
                    .ok()
                    .and_then(|o| read.get(o))
                    .filter(|(o, _)| *o == offset)
                    .map(|(_, v)| v);
                if got == Some(v) {
                    continue;
                }
                gone += 1;
                if !unclean {
                    out.push(Violation::new(
                        Property::AckedRecordLost,
                        format!(
                            "{name}@{offset}: {v:?} acknowledged (acks=all) at {} ms; the log now holds {got:?}",
                            a.at_ms
                        ),
                    ));
                }
            }
        }
        if unclean {
            history.event(format!(
                "{name} (an unclean election asked for): {gone} of {acked} acknowledged records gone"
            ));
        }
    }
    history.event(format!(
        "side records: {records} read back from {} partitions",
        logs.len()
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A side log in which `s1`-`s3` were sent to side-0-0 and acknowledged at offsets 0-2.
    fn acked_three() -> SideLog {
        let mut log = SideLog::default();
        let values = log.next_values("side-0", 0, 3);
        log.acked.insert(
            ("side-0".into(), 0),
            vec![SideAcked {
                base_offset: 0,
                values,
                at_ms: 1,
            }],
        );
        log
    }

    fn read(records: &[(i64, &str)]) -> BTreeMap<(String, i32), Vec<(i64, String)>> {
        BTreeMap::from([(
            ("side-0".to_string(), 0),
            records.iter().map(|&(o, v)| (o, v.to_string())).collect(),
        )])
    }

    fn properties(
        log: &SideLog,
        logs: &BTreeMap<(String, i32), Vec<(i64, String)>>,
    ) -> Vec<Property> {
        check(log, logs, &mut History::default())
            .into_iter()
            .map(|v| v.property)
            .collect()
    }

    #[test]
    fn every_acknowledged_record_read_back_passes() {
        let log = acked_three();
        assert!(properties(&log, &read(&[(0, "s1"), (1, "s2"), (2, "s3")])).is_empty());
    }

    #[test]
    fn a_lost_record_is_reported_unless_an_unclean_election_was_asked_for() {
        let mut log = acked_three();
        let truncated = read(&[(0, "s1"), (1, "s2")]);
        assert_eq!(
            properties(&log, &truncated),
            vec![Property::AckedRecordLost]
        );
        log.unclean_asked("side-0", 0);
        let mut history = History::default();
        assert!(check(&log, &truncated, &mut history).is_empty());
        assert!(
            history
                .trace
                .iter()
                .any(|l| l.contains("1 of 3 acknowledged records gone")),
            "{:?}",
            history.trace
        );
    }

    #[test]
    fn an_unclean_election_excuses_no_gap_and_no_record_from_nowhere() {
        let mut log = acked_three();
        log.unclean_asked("side-0", 0);
        assert_eq!(
            properties(&log, &read(&[(0, "s1"), (2, "s3")])),
            vec![Property::ReadGap]
        );
        assert_eq!(
            properties(&log, &read(&[(0, "s1"), (1, "s9")])),
            vec![Property::RecordNeverSent]
        );
    }

    #[test]
    fn a_record_sent_to_another_partition_was_never_sent_here() {
        let mut log = acked_three();
        log.next_values("side-0", 1, 1); // s4, sent to partition 1
        assert_eq!(
            properties(&log, &read(&[(0, "s1"), (1, "s2"), (2, "s3"), (3, "s4")])),
            vec![Property::RecordNeverSent]
        );
    }
}
