//! The oldest unconsumed record of each group this node coordinates, for the charts' time lag
//! (`charts::Chart::GroupTimeLag`): read from the logs of the partitions this node leads, one
//! batch (the one holding the committed offset) per partition and committed offset per sample.
//! Partitions led by other nodes are not covered.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use gregor_log::batch::BatchHeader;

use super::charts::{self, Unconsumed};
use crate::broker_view::BrokerView;
use crate::groups::GroupObservation;
use crate::partition::Partition;

/// A committed offset: topic, partition, offset.
type Committed = (String, i32, i64);

/// Each group of `groups` with a partition this node leads: the timestamp of its oldest
/// unconsumed record there (`None` when it consumed them all). Groups none of whose records
/// could be read are left out.
pub async fn oldest_unconsumed(
    b: BrokerView<'_>,
    groups: &[GroupObservation],
) -> Vec<(String, Option<i64>)> {
    let node = b.config.node_id;
    let image = b.metadata.image();
    let leads = |t: &str, p: i32| {
        image
            .topic(t)
            .and_then(|x| x.partitions.get(&p))
            .is_some_and(|r| r.leader == node)
    };
    // Groups committed at the same offset share one read.
    let mut reads: BTreeMap<Committed, Option<Arc<Partition>>> = BTreeMap::new();
    let mut mine: Vec<(String, Vec<Committed>)> = Vec::new();
    for g in groups {
        let led: Vec<Committed> = g
            .offsets
            .iter()
            .filter(|(t, p, _)| leads(t, *p))
            .cloned()
            .collect();
        if led.is_empty() {
            continue;
        }
        for c in &led {
            reads
                .entry(c.clone())
                .or_insert_with(|| b.replicas.get(&c.0, c.1).filter(|p| p.role().is_leader));
        }
        mine.push((g.summary.group_id.clone(), led));
    }
    let found: HashMap<Committed, Unconsumed> = crate::runtime::blocking(move || {
        reads
            .into_iter()
            .map(|(c, part)| {
                let u = part.map_or(Unconsumed::Unknown, |p| record_at(&p, c.2));
                (c, u)
            })
            .collect()
    })
    .await;
    mine.into_iter()
        .filter_map(|(id, led)| {
            let parts: Vec<Unconsumed> = led
                .iter()
                .map(|c| found.get(c).copied().unwrap_or(Unconsumed::Unknown))
                .collect();
            charts::oldest_unconsumed(&parts).map(|oldest| (id, oldest))
        })
        .collect()
}

/// The record at `committed` in `part`'s log: caught up at the high watermark, else the
/// timestamp of the first record at or after it in the one batch holding it (a transaction
/// marker's batch: its timestamp). Blocking file work.
fn record_at(part: &Partition, committed: i64) -> Unconsumed {
    let hw = part.high_watermark();
    if committed >= hw {
        return Unconsumed::CaughtUp;
    }
    let from = committed.max(part.log.log_start_offset());
    // One byte asked: the read returns exactly the one whole batch holding `from`.
    let read = match part.log.read(from, 1, Some(hw)) {
        Ok(read) => read,
        Err(e) => {
            tracing::debug!(topic = %part.topic, partition = part.index, offset = from, error = %e,
                "cannot read a record's timestamp for the console's time lag");
            return Unconsumed::Unknown;
        }
    };
    let Some(h) = BatchHeader::parse(&read.records) else {
        return Unconsumed::Unknown;
    };
    if h.is_control() {
        return Unconsumed::Since(h.max_timestamp);
    }
    let Some(batch) = read.records.get(..h.size()) else {
        return Unconsumed::Unknown;
    };
    match gregor_log::records::decode_batch(batch) {
        Ok((_, records)) => records
            .iter()
            .find(|r| r.offset >= from)
            .map_or(Unconsumed::Unknown, |r| Unconsumed::Since(r.timestamp)),
        Err(_) => Unconsumed::Unknown,
    }
}
