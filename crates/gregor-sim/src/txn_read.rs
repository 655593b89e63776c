//! `--transactions`: the read_committed consumer's final pass over the `txns` topic, once the
//! transactional producers are done. It fetches each partition from its leader with
//! isolation_level 1 (read_committed) and drops what the answer's aborted-transactions list
//! and the abort markers say was aborted, as a Kafka consumer does, until every partition's
//! last stable offset has reached its high watermark and the consumer has read up to it.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use bytes::{Buf, Bytes};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{BrokerId, FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Record, RecordBatchDecoder};
use kafka_protocol::ResponseError;

use crate::data::{sleep_ms, Links};
use crate::history::{History, TXN_PARTITIONS, TXN_TOPIC};
use crate::node::now_ms;

/// How long the coordinators have, once the producers are done, to end every transaction
/// (the producers' transaction timeout is 5 s) and the consumer to read to the end.
const LSO_BOUND_MS: i64 = 15_000;

/// One partition as the consumer follows it.
#[derive(Default)]
struct PartitionRead {
    next: i64,
    /// (last stable offset, high watermark) of the last answer.
    offsets: Option<(i64, i64)>,
    /// Producers whose aborted transaction the consumer is inside (until its abort marker).
    aborted: BTreeSet<i64>,
}

impl PartitionRead {
    fn done(&self) -> bool {
        self.offsets
            .is_some_and(|(lso, hw)| lso == hw && self.next >= hw)
    }
}

/// Reads every partition to its end with read_committed, recording what is visible.
pub(crate) async fn read_committed(history: Rc<RefCell<History>>, nodes: usize) {
    let mut links = Links::for_topic(nodes, "sim-txn-consumer", TXN_TOPIC);
    let mut parts: BTreeMap<i32, PartitionRead> = (0..TXN_PARTITIONS)
        .map(|p| (p, PartitionRead::default()))
        .collect();
    let start = now_ms();
    loop {
        let mut progressed = false;
        for (&p, read) in parts.iter_mut() {
            if !read.done() {
                progressed |= fetch_once(&history, &mut links, p, read).await;
            }
        }
        if parts.values().all(PartitionRead::done) {
            let mut h = history.borrow_mut();
            h.data.txn.read_done = true;
            h.event("read_committed pass done");
            return;
        }
        if now_ms() - start > LSO_BOUND_MS {
            let state: Vec<String> = parts
                .iter()
                .map(|(p, r)| format!("p{p}: read to {}, (lso, hw) {:?}", r.next, r.offsets))
                .collect();
            let msg = format!("{LSO_BOUND_MS} ms after the producers ended: {state:?}");
            let mut h = history.borrow_mut();
            h.event(format!("read_committed pass stuck: {msg}"));
            h.data.txn.lso_stuck = Some(msg);
            return;
        }
        if !progressed {
            sleep_ms(50).await;
        }
    }
}

/// One read_committed fetch of partition `p`; whether it moved the consumer on.
async fn fetch_once(
    history: &Rc<RefCell<History>>,
    links: &mut Links,
    p: i32,
    read: &mut PartitionRead,
) -> bool {
    if links.leader(p).is_none() {
        links.refresh().await;
    }
    let Some((leader, epoch)) = links.leader(p) else {
        return false;
    };
    let req = fetch_request(p, epoch, read.next);
    let resp = match links.conn(leader).await {
        Some(c) => c.send(&req, 12).await.ok(),
        None => None,
    };
    let Some(resp) = resp else {
        history
            .borrow_mut()
            .event(format!("read_committed p{p} n{leader}: no answer"));
        links.drop_conn(leader);
        links.refresh().await;
        return false;
    };
    let Some(pd) = resp
        .responses
        .into_iter()
        .next()
        .and_then(|t| t.partitions.into_iter().next())
    else {
        return false;
    };
    if pd.error_code != 0 {
        history.borrow_mut().event(format!(
            "read_committed p{p}@{} n{leader} epoch {epoch}: error {} (log start {}, hw {})",
            read.next, pd.error_code, pd.log_start_offset, pd.high_watermark
        ));
        // As a consumer resets to the earliest offset: what lay below the log start is then
        // missing from the pass, which the checker judges.
        if pd.error_code == ResponseError::OffsetOutOfRange.code()
            && pd.log_start_offset > read.next
        {
            read.next = pd.log_start_offset;
            return true;
        }
        links.refresh().await;
        return false;
    }
    read.offsets = Some((pd.last_stable_offset, pd.high_watermark));
    apply(history, p, read, pd)
}

/// Moves the consumer over one answer's records, recording the visible ones.
fn apply(
    history: &Rc<RefCell<History>>,
    p: i32,
    read: &mut PartitionRead,
    pd: PartitionData,
) -> bool {
    let mut aborted: Vec<(i64, i64)> = pd
        .aborted_transactions
        .unwrap_or_default()
        .iter()
        .map(|a| (a.first_offset, a.producer_id.0))
        .collect();
    aborted.sort_unstable();
    let mut aborted = aborted.into_iter().peekable();
    let records = pd.records.map(decode).unwrap_or_default();
    let from = read.next;
    let mut h = history.borrow_mut();
    for r in records.into_iter().filter(|r| r.offset >= from) {
        while let Some(&(first, pid)) = aborted.peek() {
            if first > r.offset {
                break;
            }
            read.aborted.insert(pid);
            aborted.next();
        }
        read.next = r.offset + 1;
        if r.control {
            if is_abort_marker(&r) {
                read.aborted.remove(&r.producer_id);
            }
            continue;
        }
        if r.transactional && read.aborted.contains(&r.producer_id) {
            continue;
        }
        let value = r
            .value
            .map(|mut v| String::from_utf8_lossy(&v.copy_to_bytes(v.len())).into_owned())
            .unwrap_or_default();
        h.data.txn.committed_reads.push((p, r.offset, value));
    }
    read.next > from
}

/// A control record's key: version (int16), then type (int16): 0 abort, 1 commit.
fn is_abort_marker(r: &Record) -> bool {
    r.key
        .as_ref()
        .is_some_and(|k| k.len() >= 4 && i16::from_be_bytes([k[2], k[3]]) == 0)
}

/// The records of a fetch answer, every batch's (control ones too).
fn decode(mut bytes: Bytes) -> Vec<Record> {
    let mut out = Vec::new();
    while bytes.len() >= 12 {
        let len = i32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        let Ok(len) = usize::try_from(len) else {
            break;
        };
        if bytes.len() < 12 + len {
            break;
        }
        let mut batch = bytes.split_to(12 + len);
        let Ok(set) = RecordBatchDecoder::decode(&mut batch) else {
            break;
        };
        out.extend(set.records);
    }
    out
}

/// A read_committed fetch (isolation_level 1) of partition `p` at `offset`.
pub(crate) fn fetch_request(p: i32, epoch: i32, offset: i64) -> FetchRequest {
    let mut req = FetchRequest::default();
    req.replica_id = BrokerId(-1);
    req.max_wait_ms = 100;
    req.min_bytes = 1;
    req.max_bytes = 1 << 20;
    req.isolation_level = 1;
    let mut fp = FetchPartition::default();
    fp.partition = p;
    fp.current_leader_epoch = epoch;
    fp.fetch_offset = offset;
    fp.log_start_offset = -1;
    fp.partition_max_bytes = 1 << 20;
    let mut ft = FetchTopic::default();
    ft.topic = TopicName(StrBytes::from_static_str(TXN_TOPIC));
    ft.partitions = vec![fp];
    req.topics = vec![ft];
    req
}
