//! Producer ids for idempotent producers (InitProducerId). Ids are handed out from blocks whose
//! upper end is persisted before any id of the block is used, so a restart never reuses an id.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Ids reserved per persisted block.
const BLOCK: i64 = 1000;

pub struct ProducerIdAllocator {
    disk: gregor_log::Disk,
    path: PathBuf,
    state: Mutex<(i64, i64)>, // (next id, end of the persisted block)
}

impl ProducerIdAllocator {
    pub fn open(data_dir: &Path) -> std::io::Result<ProducerIdAllocator> {
        Self::open_on(gregor_log::Disk::real(), data_dir)
    }

    /// [`ProducerIdAllocator::open`] through `disk` (tests pass one that models power loss).
    pub fn open_on(
        disk: gregor_log::Disk,
        data_dir: &Path,
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
        let a = ProducerIdAllocator::open(dir.path()).expect("open");
        let first: Vec<i64> = (0..3).map(|_| a.next().expect("id")).collect();
        assert_eq!(first, vec![0, 1, 2]);
        drop(a);
        let b = ProducerIdAllocator::open(dir.path()).expect("reopen");
        assert_eq!(b.next().expect("id"), BLOCK);
        std::fs::write(dir.path().join("producer-id-block"), "garbage").expect("write");
        assert!(ProducerIdAllocator::open(dir.path()).is_err());
    }

    /// The block is durable, its directory entry included, before an id of it is handed out:
    /// after a power loss (the disk model drops unsynced bytes and directory entries) the next
    /// allocator starts past it instead of handing the same ids to new producers.
    #[test]
    fn ids_are_never_reused_across_a_power_loss() {
        let dir = tempfile::tempdir().expect("temp dir");
        let faults = gregor_log::FaultInjector::power_model(dir.path()).expect("model");
        let disk = gregor_log::Disk::with_faults(faults.clone());
        let a = ProducerIdAllocator::open_on(disk.clone(), dir.path()).expect("open");
        assert_eq!(a.next().expect("id"), 0);
        drop(a);
        faults.power_loss(None).expect("power loss");
        let b = ProducerIdAllocator::open_on(disk, dir.path()).expect("reopen");
        assert_eq!(b.next().expect("id"), BLOCK);
    }
}
