//! Sparse offset and time indexes of one segment, in Kafka's file formats:
//! `.index` = entries of (relative offset u32, position u32), 8 bytes each;
//! `.timeindex` = entries of (timestamp i64, relative offset u32), 12 bytes each; big endian.
//!
//! Entries are kept in memory (binary search) and written to disk when a segment is rolled or the
//! log is closed. The active segment's index files on disk may lag; recovery rebuilds them.

/// Size of an offset index entry.
pub const OFFSET_ENTRY: usize = 8;
/// Size of a time index entry.
pub const TIME_ENTRY: usize = 12;

/// One offset index entry: the last offset of a batch (relative to the segment base) and the
/// file position where that batch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OffsetEntry {
    pub rel: u32,
    pub pos: u32,
}

/// One time index entry: the largest timestamp seen so far and the (relative) last offset of
/// the batch that carried it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimeEntry {
    pub ts: i64,
    pub rel: u32,
}

#[derive(Debug, Default, Clone)]
pub(crate) struct OffsetIndex {
    pub entries: Vec<OffsetEntry>,
}

impl OffsetIndex {
    /// Position of the indexed batch with the largest offset `<= rel`, or 0.
    pub fn lookup(&self, rel: u32) -> u32 {
        let i = self.entries.partition_point(|e| e.rel <= rel);
        if i == 0 {
            0
        } else {
            self.entries[i - 1].pos
        }
    }

    /// The start of the last indexed batch but one among those starting after `after` and at
    /// or before `upto`; `None` when fewer than two do.
    pub fn second_last_start_within(&self, after: u64, upto: u64) -> Option<u32> {
        let lo = self.entries.partition_point(|e| u64::from(e.pos) <= after);
        let hi = self.entries.partition_point(|e| u64::from(e.pos) <= upto);
        let within = self.entries.get(lo..hi)?;
        within.len().checked_sub(2).map(|i| within[i].pos)
    }

    pub fn last(&self) -> Option<OffsetEntry> {
        self.entries.last().copied()
    }

    pub fn push(&mut self, rel: u32, pos: u32) {
        if self
            .entries
            .last()
            .is_none_or(|l| rel > l.rel && pos > l.pos)
        {
            self.entries.push(OffsetEntry { rel, pos });
        }
    }

    /// Drop entries for batches at or after `pos`.
    pub fn truncate_to_position(&mut self, pos: u32) {
        let i = self.entries.partition_point(|e| e.pos < pos);
        self.entries.truncate(i);
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * OFFSET_ENTRY);
        for e in &self.entries {
            out.extend_from_slice(&e.rel.to_be_bytes());
            out.extend_from_slice(&e.pos.to_be_bytes());
        }
        out
    }

    /// Parse and sanity-check an index file against its segment (`size` bytes, offsets below
    /// `rel_limit`). Kafka's `sanityCheck` plus monotonicity.
    pub fn decode(bytes: &[u8], size: u64, rel_limit: u64) -> Result<OffsetIndex, String> {
        if !bytes.len().is_multiple_of(OFFSET_ENTRY) {
            return Err(format!("length {} is not a multiple of 8", bytes.len()));
        }
        let mut idx = OffsetIndex::default();
        for c in bytes.chunks_exact(OFFSET_ENTRY) {
            let rel = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
            let pos = u32::from_be_bytes([c[4], c[5], c[6], c[7]]);
            if let Some(l) = idx.entries.last() {
                if rel <= l.rel || pos <= l.pos {
                    return Err(format!(
                        "entry ({rel}, {pos}) not after ({}, {})",
                        l.rel, l.pos
                    ));
                }
            }
            if u64::from(pos) >= size || u64::from(rel) >= rel_limit {
                return Err(format!("entry ({rel}, {pos}) beyond the segment"));
            }
            idx.entries.push(OffsetEntry { rel, pos });
        }
        Ok(idx)
    }
}

#[derive(Debug, Default, Clone)]
pub(crate) struct TimeIndex {
    pub entries: Vec<TimeEntry>,
}

impl TimeIndex {
    /// The last entry whose timestamp is strictly below `ts`: every record up to its offset is
    /// older than `ts`, so a search for `ts` may start after it.
    pub fn floor_below(&self, ts: i64) -> Option<TimeEntry> {
        let i = self.entries.partition_point(|e| e.ts < ts);
        (i > 0).then(|| self.entries[i - 1])
    }

    pub fn last(&self) -> Option<TimeEntry> {
        self.entries.last().copied()
    }

    /// Append if the timestamp grows (Kafka's `maybeAppend`).
    pub fn maybe_push(&mut self, ts: i64, rel: u32) {
        if self
            .entries
            .last()
            .is_none_or(|l| ts > l.ts && rel >= l.rel)
        {
            if self.entries.last().is_some_and(|l| l.rel == rel) {
                self.entries.pop();
            }
            self.entries.push(TimeEntry { ts, rel });
        }
    }

    /// Drop entries whose offset is at or after `rel`.
    pub fn truncate_to_rel(&mut self, rel: u32) {
        let i = self.entries.partition_point(|e| e.rel < rel);
        self.entries.truncate(i);
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * TIME_ENTRY);
        for e in &self.entries {
            out.extend_from_slice(&e.ts.to_be_bytes());
            out.extend_from_slice(&e.rel.to_be_bytes());
        }
        out
    }

    pub fn decode(bytes: &[u8], rel_limit: u64) -> Result<TimeIndex, String> {
        if !bytes.len().is_multiple_of(TIME_ENTRY) {
            return Err(format!("length {} is not a multiple of 12", bytes.len()));
        }
        let mut idx = TimeIndex::default();
        for c in bytes.chunks_exact(TIME_ENTRY) {
            let mut t = [0u8; 8];
            t.copy_from_slice(&c[..8]);
            let ts = i64::from_be_bytes(t);
            let rel = u32::from_be_bytes([c[8], c[9], c[10], c[11]]);
            if let Some(l) = idx.entries.last() {
                if ts <= l.ts || rel < l.rel {
                    return Err(format!(
                        "entry ({ts}, {rel}) not after ({}, {})",
                        l.ts, l.rel
                    ));
                }
            }
            if u64::from(rel) >= rel_limit {
                return Err(format!("entry ({ts}, {rel}) beyond the segment"));
            }
            idx.entries.push(TimeEntry { ts, rel });
        }
        Ok(idx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_lookup_and_codec() {
        let mut i = OffsetIndex::default();
        i.push(9, 100);
        i.push(19, 200);
        i.push(19, 300); // not increasing: ignored
        assert_eq!(i.lookup(5), 0);
        assert_eq!(i.lookup(9), 100);
        assert_eq!(i.lookup(18), 100);
        assert_eq!(i.lookup(1000), 200);
        let back = OffsetIndex::decode(&i.encode(), 1000, 100).expect("valid");
        assert_eq!(back.entries, i.entries);
        assert!(OffsetIndex::decode(&i.encode(), 150, 100).is_err());
        assert!(OffsetIndex::decode(&i.encode()[..7], 1000, 100).is_err());
        let mut zeros = vec![0u8; 16];
        assert!(OffsetIndex::decode(&zeros, 1000, 100).is_err());
        zeros.truncate(8);
        assert!(OffsetIndex::decode(&zeros, 1000, 100).is_ok());
        i.truncate_to_position(200);
        assert_eq!(i.entries.len(), 1);
    }

    #[test]
    fn time_floor_and_codec() {
        let mut t = TimeIndex::default();
        t.maybe_push(10, 0);
        t.maybe_push(5, 3); // older timestamp: ignored
        t.maybe_push(20, 4);
        assert_eq!(t.floor_below(10), None);
        assert_eq!(t.floor_below(11).map(|e| e.rel), Some(0));
        assert_eq!(t.floor_below(100).map(|e| e.rel), Some(4));
        let back = TimeIndex::decode(&t.encode(), 10).expect("valid");
        assert_eq!(back.entries, t.entries);
        assert!(TimeIndex::decode(&t.encode(), 4).is_err());
        t.truncate_to_rel(4);
        assert_eq!(t.entries.len(), 1);
    }
}
