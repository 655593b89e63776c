//! The leader epoch cache: `epoch -> first offset written in that epoch`, what followers use
//! (through OffsetForLeaderEpoch) to find where their log diverges from a new leader's.

/// Kafka's `UNDEFINED_EPOCH`.
pub const UNDEFINED_EPOCH: i32 = -1;
/// Kafka's `UNDEFINED_EPOCH_OFFSET`.
pub const UNDEFINED_EPOCH_OFFSET: i64 = -1;

/// Ordered `(epoch, start_offset)` entries, both strictly increasing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderEpochCache {
    entries: Vec<(i32, i64)>,
}

impl LeaderEpochCache {
    /// Build from checkpointed entries, dropping any that break the ordering.
    pub fn from_entries(entries: Vec<(i32, i64)>) -> Self {
        let mut c = LeaderEpochCache::default();
        for (e, o) in entries {
            c.assign(e, o);
        }
        c
    }

    /// The entries.
    pub fn entries(&self) -> &[(i32, i64)] {
        &self.entries
    }

    /// The latest epoch, if any.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|e| e.0)
    }

    /// Record that `epoch` starts at `start_offset`. Returns whether the cache changed.
    /// A new epoch removes entries that conflict with it (same or larger epoch, or a start
    /// offset at or after the new one), as Kafka's `assign` does.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> bool {
        if epoch < 0 || start_offset < 0 {
            return false;
        }
        if let Some(&(le, lo)) = self.entries.last() {
            if epoch == le || (epoch < le && start_offset >= lo) {
                return false;
            }
            if epoch > le && start_offset >= lo {
                self.entries.push((epoch, start_offset));
                return true;
            }
        }
        self.entries.retain(|&(e, o)| e < epoch && o < start_offset);
        self.entries.push((epoch, start_offset));
        true
    }

    /// OffsetForLeaderEpoch: `(epoch, end offset)` for a requested epoch, given the log end
    /// offset. Follows Kafka's `LeaderEpochFileCache.endOffsetFor`.
    pub fn end_offset_for(&self, requested: i32, log_end_offset: i64) -> (i32, i64) {
        if requested == UNDEFINED_EPOCH {
            return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        }
        match self.latest_epoch() {
            None => (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET),
            Some(l) if l == requested => (requested, log_end_offset),
            Some(_) => {
                let higher = self.entries.iter().find(|&&(e, _)| e > requested);
                let floor = self.entries.iter().rev().find(|&&(e, _)| e <= requested);
                match (higher, floor) {
                    (None, _) => (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET),
                    (Some(&(_, ho)), None) => (requested, ho),
                    (Some(&(_, ho)), Some(&(fe, _))) => (fe, ho),
                }
            }
        }
    }

    /// Drop entries starting at or after `end_offset` (after a truncation). Returns whether the
    /// cache changed.
    pub fn truncate_from_end(&mut self, end_offset: i64) -> bool {
        let n = self.entries.len();
        self.entries.retain(|&(_, o)| o < end_offset);
        n != self.entries.len()
    }

    /// Drop entries wholly below `start_offset`, keeping the one that covers it (moved to
    /// `start_offset`). Returns whether the cache changed.
    pub fn truncate_from_start(&mut self, start_offset: i64) -> bool {
        let below = self.entries.partition_point(|&(_, o)| o <= start_offset);
        if below == 0 {
            return false;
        }
        let covering = self.entries[below - 1].0;
        let changed = below > 1 || self.entries[0].1 != start_offset;
        self.entries.drain(..below);
        self.entries.insert(0, (covering, start_offset));
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_offsets_follow_kafka() {
        let mut c = LeaderEpochCache::default();
        assert_eq!(
            c.end_offset_for(0, 10),
            (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        );
        assert!(c.assign(1, 0));
        assert!(c.assign(3, 10));
        assert!(c.assign(5, 20));
        assert!(!c.assign(5, 25));
        assert_eq!(c.end_offset_for(5, 30), (5, 30));
        assert_eq!(c.end_offset_for(3, 30), (3, 20));
        assert_eq!(c.end_offset_for(4, 30), (3, 20));
        assert_eq!(c.end_offset_for(0, 30), (0, 0));
        assert_eq!(
            c.end_offset_for(6, 30),
            (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        );
        assert_eq!(c.end_offset_for(UNDEFINED_EPOCH, 30), (-1, -1));
        // a new epoch that starts before existing entries replaces them
        assert!(c.assign(6, 15));
        assert_eq!(c.entries(), &[(1, 0), (3, 10), (6, 15)]);
        assert!(c.truncate_from_end(15));
        assert_eq!(c.entries(), &[(1, 0), (3, 10)]);
        assert!(c.truncate_from_start(12));
        assert_eq!(c.entries(), &[(3, 12)]);
        assert!(!c.truncate_from_start(5));
    }
}
