//! Producer ids for idempotent producers (InitProducerId). Ids are handed out from blocks whose
//! upper end is persisted before any id of the block is used, so a restart never reuses an id.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Ids reserved per persisted block.
const BLOCK: i64 = 1000;

pub struct ProducerIdAllocator {
    path: PathBuf,
    state: Mutex<(i64, i64)>, // (next id, end of the persisted block)
}

impl ProducerIdAllocator {
    pub fn open(data_dir: &Path) -> std::io::Result<ProducerIdAllocator> {
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
            let tmp = self.path.with_extension("tmp");
            std::fs::write(&tmp, end.to_string())?;
            std::fs::File::open(&tmp)?.sync_all()?;
            std::fs::rename(&tmp, &self.path)?;
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
}
