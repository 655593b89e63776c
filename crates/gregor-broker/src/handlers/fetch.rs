//! Fetch: consumers read up to the high watermark (followers would read to the log end). A
//! fetch that finds fewer than `min_bytes` parks until an append moves a high watermark it
//! reads, or until `max_wait_ms`; it returns as soon as `min_bytes` are there. Fetch sessions
//! (KIP-227) are answered as full fetches (session id 0), which every client accepts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::select_all;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{FetchRequest, FetchResponse};
use kafka_protocol::ResponseError;
use tokio::sync::watch;

use super::produce::locate;
use crate::broker::Broker;
use crate::replica::Partition;

struct Target {
    topic_index: usize,
    partition: i32,
    fetch_offset: i64,
    max_bytes: usize,
    current_leader_epoch: i32,
    part: Result<Arc<Partition>, ResponseError>,
}

pub async fn fetch(b: &Broker, r: FetchRequest, version: i16) -> FetchResponse {
    let follower = r.replica_id.0 >= 0 || (version >= 15 && r.replica_state.replica_id.0 >= 0);
    let mut targets = Vec::new();
    let mut topics_out = Vec::new();
    for (ti, t) in r.topics.iter().enumerate() {
        let name = t.topic.0.to_string();
        let mut out = FetchableTopicResponse::default();
        out.topic = t.topic.clone();
        out.topic_id = t.topic_id;
        topics_out.push(out);
        for p in &t.partitions {
            targets.push(Target {
                topic_index: ti,
                partition: p.partition,
                fetch_offset: p.fetch_offset,
                max_bytes: p.partition_max_bytes.max(0) as usize,
                current_leader_epoch: p.current_leader_epoch,
                part: locate(b, &name, t.topic_id, p.partition),
            });
        }
    }
    let min_bytes = r.min_bytes.max(0) as usize;
    let max_bytes = if version >= 3 {
        r.max_bytes.max(0) as usize
    } else {
        usize::MAX
    };
    let deadline = Instant::now() + Duration::from_millis(r.max_wait_ms.max(0) as u64);
    // Subscribe before the first read so that an append between read and wait is not missed.
    let mut watches: Vec<watch::Receiver<i64>> = targets
        .iter()
        .filter_map(|t| t.part.as_ref().ok().map(|p| p.watch_hw()))
        .collect();
    let mut first = true;
    let results = loop {
        for w in &mut watches {
            w.borrow_and_update();
        }
        // After a wake-up, look the partitions up again: one may have been deleted or moved.
        if !first {
            targets = relocated(b, &r, &targets);
        }
        first = false;
        let (results, bytes) = read_all(&targets, max_bytes, follower, version);
        let any_error = results.iter().any(|p| p.error_code != 0);
        if bytes >= min_bytes || any_error || watches.is_empty() || Instant::now() >= deadline {
            break results;
        }
        let changed = select_all(watches.iter_mut().map(|w| Box::pin(w.changed())));
        match tokio::time::timeout_at(deadline.into(), changed).await {
            // An append (or a partition stopping) woke us, or a partition went away.
            Ok(_) => continue,
            Err(_) => {
                let (results, _) =
                    read_all(&relocated(b, &r, &targets), max_bytes, follower, version);
                break results;
            }
        }
    };
    for (t, pd) in targets.iter().zip(results) {
        topics_out[t.topic_index].partitions.push(pd);
    }
    let mut resp = FetchResponse::default();
    resp.responses = topics_out;
    resp
}

/// Looks the targets' partitions up again (after one was removed).
fn relocated(b: &Broker, r: &FetchRequest, targets: &[Target]) -> Vec<Target> {
    targets
        .iter()
        .map(|t| {
            let topic = &r.topics[t.topic_index];
            Target {
                topic_index: t.topic_index,
                partition: t.partition,
                fetch_offset: t.fetch_offset,
                max_bytes: t.max_bytes,
                current_leader_epoch: t.current_leader_epoch,
                part: locate(b, &topic.topic.0, topic.topic_id, t.partition),
            }
        })
        .collect()
}

fn read_all(
    targets: &[Target],
    max_bytes: usize,
    follower: bool,
    version: i16,
) -> (Vec<PartitionData>, usize) {
    let mut total = 0usize;
    let mut out = Vec::with_capacity(targets.len());
    for t in targets {
        let budget = if total == 0 {
            t.max_bytes
        } else {
            t.max_bytes.min(max_bytes.saturating_sub(total))
        };
        // KIP-74: the first non-empty partition may exceed the limits; later ones may not.
        let pd = read_one(
            t,
            if total > 0 && budget == 0 {
                0
            } else {
                budget.max(1)
            },
            follower,
            version,
        );
        total += pd.records.as_ref().map_or(0, Bytes::len);
        out.push(pd);
    }
    (out, total)
}

fn read_one(t: &Target, budget: usize, follower: bool, version: i16) -> PartitionData {
    let mut pd = PartitionData::default();
    pd.partition_index = t.partition;
    pd.high_watermark = -1;
    pd.last_stable_offset = -1;
    pd.log_start_offset = -1;
    if version >= 4 {
        pd.aborted_transactions = Some(Vec::new());
    }
    let part = match &t.part {
        Ok(p) => p,
        Err(e) => {
            pd.error_code = e.code();
            return pd;
        }
    };
    let role = part.role();
    if !role.is_leader {
        pd.error_code = ResponseError::NotLeaderOrFollower.code();
        return pd;
    }
    if t.current_leader_epoch >= 0 && t.current_leader_epoch != role.leader_epoch {
        pd.error_code = if t.current_leader_epoch < role.leader_epoch {
            ResponseError::FencedLeaderEpoch.code()
        } else {
            ResponseError::UnknownLeaderEpoch.code()
        };
        return pd;
    }
    let log = &part.log;
    let hw = part.high_watermark();
    pd.high_watermark = hw;
    if version >= 4 {
        pd.last_stable_offset = hw;
    }
    if version >= 5 {
        pd.log_start_offset = log.log_start_offset();
    }
    let end = log.log_end_offset();
    if t.fetch_offset < log.log_start_offset() || t.fetch_offset > end {
        pd.error_code = ResponseError::OffsetOutOfRange.code();
        return pd;
    }
    let upper = if follower { None } else { Some(hw) };
    if !follower && t.fetch_offset >= hw {
        pd.records = Some(Bytes::new());
        return pd;
    }
    if budget == 0 {
        pd.records = Some(Bytes::new());
        return pd;
    }
    match log.read(t.fetch_offset, budget, upper) {
        Ok(read) => pd.records = Some(read.records),
        Err(e) => pd.error_code = crate::replica::log_error(&e).code(),
    }
    pd
}
