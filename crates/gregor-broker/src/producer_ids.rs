//! Producer ids for idempotent producers (InitProducerId). Ids are handed out from blocks whose
//! upper end is persisted before any id of the block is used, so a restart never reuses an id.
//!
//! Ids are unique across the cluster without asking the controller: node `n` hands out ids from
//! its own range `[n << 40, (n + 1) << 40)` (Kafka instead leases blocks from the controller
//! with AllocateProducerIds). Two producers given one id by two nodes would have each other's
//! batches taken for duplicates once a partition's leadership moves.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Ids reserved per persisted block.
const BLOCK: i64 = 1000;

/// Bits of a producer id below the node id: each node's range holds 2^40 ids.
const NODE_SHIFT: u32 = 40;

/// The first producer id of `node_id`'s range (node ids are checked to be below 2^23 at
/// start-up, so every id is a positive i64).
fn range_start(node_id: i32) -> i64 {
    i64::from(node_id.max(0)) << NODE_SHIFT
}

pub struct ProducerIdAllocator {
    disk: gregor_log::Disk,
    path: PathBuf,
    state: Mutex<(i64, i64)>, // (next id, end of the persisted block)
}

impl ProducerIdAllocator {
    pub fn open(data_dir: &Path, node_id: i32) -> std::io::Result<ProducerIdAllocator> {
        Self::open_on(gregor_log::Disk::real(), data_dir, node_id)
    }

    /// [`ProducerIdAllocator::open`] through `disk` (tests pass one that models power loss).
    pub fn open_on(
        disk: gregor_log::Disk,
        data_dir: &Path,
        node_id: i32,
    ) -> std::io::Result<ProducerIdAllocator> {
        let path = data_dir.join("producer-id-block");
        let end = match std::fs::read_to_string(&path) {
            Ok(text) => text.trim().parse::<i64>().map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: {e}", path.display()),
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e),
        };
        // A data directory from before ranges existed (or of another node id) continues in this
        // node's range.
        let (start, limit) = (range_start(node_id), range_start(node_id + 1));
        let end = if (start..limit).contains(&end) {
            end
        } else {
            start
        };
        Ok(ProducerIdAllocator {
            disk,
            path,
            state: Mutex::new((end, end)),
        })
    }

    /// A new producer id.
    pub fn next(&self) -> std::io::Result<i64> {
        let mut st = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if st.0 >= st.1 {
            let end = st.1 + BLOCK;
            // Durable, directory entry included, before any id of the block is handed out:
            // otherwise a power loss brings back the previous block and its ids are reused.
            self.disk
                .write_atomic(&self.path, end.to_string().as_bytes())
                .map_err(std::io::Error::other)?;
            st.1 = end;
        }
        let id = st.0;
        st.0 += 1;
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_never_reused_across_restarts() {
        let dir = tempfile::tempdir().expect("temp dir");
        let a = ProducerIdAllocator::open(dir.path(), 0).expect("open");
        let first: Vec<i64> = (0..3).map(|_| a.next().expect("id")).collect();
        assert_eq!(first, vec![0, 1, 2]);
        drop(a);
        let b = ProducerIdAllocator::open(dir.path(), 0).expect("reopen");
        assert_eq!(b.next().expect("id"), BLOCK);
        std::fs::write(dir.path().join("producer-id-block"), "garbage").expect("write");
        assert!(ProducerIdAllocator::open(dir.path(), 0).is_err());
    }

    /// Two nodes never hand out the same id: after a leadership change, one producer's batches
    /// would be taken for the other's duplicates.
    #[test]
    fn nodes_hand_out_ids_from_disjoint_ranges() {
        let dirs = [
            tempfile::tempdir().expect("dir"),
            tempfile::tempdir().expect("dir"),
        ];
        let a = ProducerIdAllocator::open(dirs[0].path(), 0).expect("open");
        let b = ProducerIdAllocator::open(dirs[1].path(), 1).expect("open");
        let ids_a: Vec<i64> = (0..5).map(|_| a.next().expect("id")).collect();
        let ids_b: Vec<i64> = (0..5).map(|_| b.next().expect("id")).collect();
        assert!(ids_a.iter().all(|id| !ids_b.contains(id)));
        assert_eq!(ids_b[0], 1 << 40);
        // An old single-node directory's block carries on where it was for node 0.
        std::fs::write(dirs[0].path().join("producer-id-block"), "5000").expect("write");
        let again = ProducerIdAllocator::open(dirs[0].path(), 0).expect("reopen");
        assert_eq!(again.next().expect("id"), 5000);
    }

    /// The block is durable, its directory entry included, before an id of it is handed out:
    /// after a power loss (the disk model drops unsynced bytes and directory entries) the next
    /// allocator starts past it instead of handing the same ids to new producers.
    #[test]
    fn ids_are_never_reused_across_a_power_loss() {
        let dir = tempfile::tempdir().expect("temp dir");
        let faults = gregor_log::FaultInjector::power_model(dir.path()).expect("model");
        let disk = gregor_log::Disk::with_faults(faults.clone());
        let a = ProducerIdAllocator::open_on(disk.clone(), dir.path(), 0).expect("open");
        assert_eq!(a.next().expect("id"), 0);
        drop(a);
        faults.power_loss(None).expect("power loss");
        let b = ProducerIdAllocator::open_on(disk, dir.path(), 0).expect("reopen");
        assert_eq!(b.next().expect("id"), BLOCK);
    }
}
