//! `replica-logs-diverge`: at the end of a replicated run, every in-sync replica's log is the
//! leader's, byte for byte, below the leader's high watermark. A consumer reads only the
//! leader, so a follower whose committed records differ (another value, another leader epoch
//! stamped on a batch, a batch missing) shows nowhere else until it is elected.

use std::collections::BTreeMap;

use bytes::Bytes;
use gregor_log::batch::BatchHeader;

/// One hosted replica's log below its partition leader's high watermark, as the driver read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaLog {
    pub node: usize,
    pub topic: String,
    pub partition: i32,
    pub is_leader: bool,
    pub leader_epoch: i32,
    /// The committed ISR, on a leader (empty on a follower).
    pub isr: Vec<i32>,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    /// A compacted log (`__consumer_offsets`): each replica cleans its own, so their bytes may
    /// differ below the high watermark; not compared.
    pub compacted: bool,
    /// Whole batches, by base offset.
    pub batches: BTreeMap<i64, Bytes>,
}

/// Splits concatenated record batches into (base offset, batch bytes).
pub fn split_batches(mut bytes: Bytes, into: &mut BTreeMap<i64, Bytes>) {
    while let Some(h) = BatchHeader::parse(&bytes) {
        let size = h.size();
        if size == 0 || size > bytes.len() {
            break;
        }
        into.insert(h.base_offset, bytes.split_to(size));
    }
}

/// For each partition, the in-sync followers whose batches below the leader's high watermark
/// are not the leader's. The leader is the replica leading in the highest epoch; a follower
/// is compared from the later of the two log start offsets. Compacted logs are left out.
pub fn diverging(logs: &[ReplicaLog]) -> Vec<String> {
    let mut by_partition: BTreeMap<(&str, i32), Vec<&ReplicaLog>> = BTreeMap::new();
    for l in logs {
        by_partition
            .entry((l.topic.as_str(), l.partition))
            .or_default()
            .push(l);
    }
    let mut out = Vec::new();
    for ((topic, partition), replicas) in by_partition {
        let Some(leader) = replicas
            .iter()
            .filter(|r| r.is_leader)
            .max_by_key(|r| r.leader_epoch)
        else {
            continue;
        };
        if leader.compacted {
            continue;
        }
        let hw = leader.high_watermark;
        for f in &replicas {
            if f.node == leader.node || !leader.isr.contains(&(f.node as i32)) {
                continue;
            }
            let from = leader.log_start_offset.max(f.log_start_offset);
            let below = |l: &'_ ReplicaLog| -> Vec<(i64, Bytes)> {
                l.batches
                    .range(from..hw)
                    .map(|(o, b)| (*o, b.clone()))
                    .collect()
            };
            let (ours, theirs) = (below(leader), below(f));
            let first = ours
                .iter()
                .zip(theirs.iter().map(Some).chain(std::iter::repeat(None)))
                .find(|(a, b)| b.is_none_or(|b| a != &b));
            if let Some(((offset, _), b)) = first {
                let what = match b {
                    None => "has no batch there".to_string(),
                    Some((o, _)) if o != offset => format!("has a batch at {o} instead"),
                    Some(_) => "holds other bytes".to_string(),
                };
                out.push(format!(
                    "{topic}-{partition}: n{} (in the ISR of leader n{} in epoch {}) {what} at offset {offset}, below the high watermark {hw}",
                    f.node, leader.node, leader.leader_epoch
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch header (61 bytes) followed by `payload`, as `BatchHeader::parse` reads it.
    fn batch(base: i64, records: i32, epoch: i32, payload: &[u8]) -> Bytes {
        let mut b = Vec::new();
        b.extend_from_slice(&base.to_be_bytes());
        b.extend_from_slice(&((49 + payload.len()) as i32).to_be_bytes());
        b.extend_from_slice(&epoch.to_be_bytes());
        b.push(2); // magic
        b.extend_from_slice(&0u32.to_be_bytes()); // crc (not checked here)
        b.extend_from_slice(&0i16.to_be_bytes()); // attributes
        b.extend_from_slice(&(records - 1).to_be_bytes()); // last offset delta
        b.extend_from_slice(&[0; 16]); // timestamps
        b.extend_from_slice(&(-1i64).to_be_bytes()); // producer id
        b.extend_from_slice(&(-1i16).to_be_bytes());
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b.extend_from_slice(&records.to_be_bytes());
        b.extend_from_slice(payload);
        Bytes::from(b)
    }

    fn replica(node: usize, leader: bool, hw: i64, batches: &[Bytes]) -> ReplicaLog {
        let mut all = Bytes::from(batches.iter().flat_map(|b| b.to_vec()).collect::<Vec<u8>>());
        let mut map = BTreeMap::new();
        split_batches(std::mem::take(&mut all), &mut map);
        ReplicaLog {
            node,
            topic: "data".into(),
            partition: 0,
            is_leader: leader,
            leader_epoch: 3,
            isr: if leader { vec![0, 1] } else { Vec::new() },
            high_watermark: hw,
            log_start_offset: 0,
            compacted: false,
            batches: map,
        }
    }

    #[test]
    fn equal_logs_below_the_high_watermark_do_not_diverge() {
        let a = [batch(0, 2, 1, b"xy"), batch(2, 1, 3, b"z")];
        // The follower lacks the batch at the high watermark and past it: not yet committed.
        let leader = replica(0, true, 2, &a);
        let follower = replica(1, false, 2, &a[..1]);
        assert_eq!(diverging(&[leader, follower]), Vec::<String>::new());
    }

    #[test]
    fn a_batch_restamped_with_another_epoch_below_the_high_watermark_diverges() {
        let leader = replica(0, true, 3, &[batch(0, 2, 1, b"xy"), batch(2, 1, 3, b"z")]);
        let follower = replica(1, false, 3, &[batch(0, 2, 3, b"xy"), batch(2, 1, 3, b"z")]);
        let d = diverging(&[leader, follower]);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].contains("holds other bytes at offset 0"), "{d:?}");
    }

    #[test]
    fn a_missing_committed_batch_diverges_but_an_out_of_sync_replica_is_not_compared() {
        let leader = replica(0, true, 3, &[batch(0, 2, 1, b"xy"), batch(2, 1, 3, b"z")]);
        let short = replica(1, false, 3, &[batch(0, 2, 1, b"xy")]);
        let d = diverging(&[leader.clone(), short.clone()]);
        assert!(d[0].contains("has no batch there at offset 2"), "{d:?}");
        // Replica 2 is not in the ISR: it may lag or hold an uncommitted suffix.
        let outside = ReplicaLog {
            node: 2,
            ..short.clone()
        };
        assert!(diverging(&[leader.clone(), outside]).is_empty());
        // Replicas of a compacted log clean on their own: their bytes may differ.
        let compacted = |r: &ReplicaLog| ReplicaLog {
            compacted: true,
            ..r.clone()
        };
        assert!(diverging(&[compacted(&leader), compacted(&short)]).is_empty());
    }
}
