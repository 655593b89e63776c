use super::*;

fn entry(pid: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
    AbortedTxn {
        producer_id: pid,
        first_offset: first,
        last_offset: last,
        last_stable_offset: lso,
    }
}

fn bytes_of(entries: &[AbortedTxn]) -> Vec<u8> {
    entries.iter().flat_map(|e| e.encode()).collect()
}

/// A segment at 100 ending at 200 with room for 100 batches (any entry count up to 100 fits).
const BASE: i64 = 100;
const NEXT: i64 = 200;
const SIZE: u64 = 100 * HEADER_LEN as u64;

fn three() -> Vec<AbortedTxn> {
    vec![
        // Producer 2's transaction was still open when producer 1's aborted.
        entry(1, 100, 110, 105),
        entry(2, 105, 120, 121),
        entry(3, 130, 150, 151),
    ]
}

fn load(path: &std::path::Path) -> TxnIndex {
    TxnIndex::load(path.to_path_buf(), BASE, NEXT, SIZE, &Disk::real()).expect("load")
}

#[test]
fn a_sound_index_is_read_whole() {
    let (got, problem) = valid_prefix(&bytes_of(&three()), BASE, NEXT);
    assert_eq!(got, three());
    assert_eq!(problem, None);
}

#[test]
fn the_first_damaged_entry_ends_the_valid_prefix() {
    let mut bad_version = bytes_of(&three());
    bad_version[AbortedTxn::ENTRY_LEN + 1] = 1;
    let mut out_of_order = three();
    out_of_order[2] = entry(3, 112, 120, 121);
    let mut below_base = three();
    below_base[0] = entry(1, 90, 99, 100);
    let mut past_end = three();
    past_end[2].last_offset = NEXT;
    for (bytes, kept, what) in [
        (bad_version, 1, "version 0"),
        (bytes_of(&out_of_order), 2, "out of order"),
        (bytes_of(&below_base), 0, "outside the segment"),
        (bytes_of(&past_end), 2, "outside the segment"),
    ] {
        let (got, problem) = valid_prefix(&bytes, BASE, NEXT);
        assert_eq!(got, three()[..kept].to_vec(), "{what}");
        let problem = problem.expect("a problem");
        assert!(problem.contains(what), "{problem}");
        assert!(problem.starts_with(&format!("entry {kept}:")), "{problem}");
    }
}

#[test]
fn a_missing_file_is_an_empty_index_and_no_file_is_made() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("x.txnindex");
    let idx = load(&path);
    assert!(idx.entries().is_empty());
    assert!(!path.exists());
}

#[test]
fn the_file_is_created_on_the_first_append_and_read_back() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("x.txnindex");
    let disk = Disk::real();
    let mut idx = TxnIndex::new(path.clone());
    assert!(!path.exists());
    for e in three() {
        idx.append(e, &disk).expect("append");
    }
    assert!(
        idx.sync(&disk).expect("sync"),
        "a new file's name needs its directory synced"
    );
    idx.name_synced();
    assert!(!idx.sync(&disk).expect("sync"));
    assert_eq!(std::fs::read(&path).expect("read"), bytes_of(&three()));
    assert_eq!(load(&path).entries(), &three()[..]);
}

#[test]
fn a_damaged_file_is_cut_back_at_its_first_bad_entry() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("x.txnindex");
    let mut torn = bytes_of(&three());
    torn.extend_from_slice(&[0u8; 10]);
    let mut reordered = three();
    reordered.swap(1, 2);
    let mut bad_version = bytes_of(&three());
    bad_version[2 * AbortedTxn::ENTRY_LEN] = 7;
    for (bytes, kept) in [(torn, 3), (bytes_of(&reordered), 2), (bad_version, 2)] {
        std::fs::write(&path, &bytes).expect("write");
        let idx = load(&path);
        assert_eq!(idx.entries(), &bytes_of_prefix(&bytes, kept)[..]);
        let on_disk = std::fs::metadata(&path).expect("stat").len();
        assert_eq!(on_disk, (kept * AbortedTxn::ENTRY_LEN) as u64);
        assert_eq!(load(&path).entries(), idx.entries(), "the cut is stable");
    }
}

fn bytes_of_prefix(bytes: &[u8], n: usize) -> Vec<AbortedTxn> {
    bytes
        .chunks_exact(AbortedTxn::ENTRY_LEN)
        .take(n)
        .map(|c| AbortedTxn::decode(c).expect("entry"))
        .collect()
}

#[test]
fn a_file_longer_than_the_segment_could_need_is_not_read_past_that() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("x.txnindex");
    std::fs::write(&path, bytes_of(&three())).expect("write");
    // A segment of two batches holds at most two markers.
    let idx = TxnIndex::load(
        path.clone(),
        BASE,
        NEXT,
        2 * HEADER_LEN as u64,
        &Disk::real(),
    )
    .expect("load");
    assert_eq!(idx.entries(), &three()[..2]);
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), 68);
}

#[test]
fn truncation_cuts_the_file_at_the_first_entry_reaching_the_offset() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("x.txnindex");
    let disk = Disk::real();
    let mut idx = TxnIndex::new(path.clone());
    for e in three() {
        idx.append(e, &disk).expect("append");
    }
    assert!(!idx.truncate_from(151, &disk).expect("truncate"));
    assert!(idx.truncate_from(120, &disk).expect("truncate"));
    assert_eq!(idx.entries(), &three()[..1]);
    assert_eq!(load(&path).entries(), &three()[..1]);
    assert!(idx.truncate_from(0, &disk).expect("truncate"));
    assert!(load(&path).entries().is_empty());
    // Appends continue after the cut.
    idx.append(three()[2], &disk).expect("append");
    assert_eq!(load(&path).entries(), &three()[2..]);
}

fn collect(idx: &TxnIndex, fetch: i64, upper: i64) -> (Vec<i64>, bool) {
    let mut out = Vec::new();
    let complete = idx.collect(fetch, upper, &mut out);
    (out.iter().map(|e| e.producer_id).collect(), complete)
}

#[test]
fn lookups_take_the_spans_that_reach_into_the_range() {
    let dir = tempfile::tempdir().expect("tmp");
    let disk = Disk::real();
    let mut idx = TxnIndex::new(dir.path().join("x.txnindex"));
    for e in three() {
        idx.append(e, &disk).expect("append");
    }
    // Inside the first span, at its last offset, just past it. Producer 2's entry ends each
    // search: its last stable offset passes the bound.
    assert_eq!(collect(&idx, 107, 108), (vec![1, 2], true));
    assert_eq!(collect(&idx, 110, 112), (vec![1, 2], true));
    assert_eq!(collect(&idx, 111, 125), (vec![2], true));
    // An upper bound at a span's first offset excludes it.
    assert_eq!(collect(&idx, 121, 130), (vec![], true));
    assert_eq!(collect(&idx, 121, 131), (vec![3], true));
    // Producer 1's entry ends a search below 105, where producer 2 had not begun, but not
    // one past it.
    assert_eq!(collect(&idx, 100, 105), (vec![1], true));
    assert_eq!(collect(&idx, 100, 106), (vec![1, 2], true));
    // Past every entry the search goes on into later segments.
    assert_eq!(collect(&idx, 151, 500), (vec![], false));
}

#[test]
fn a_handed_on_index_leaves_its_file_behind() {
    let dir = tempfile::tempdir().expect("tmp");
    let disk = Disk::real();
    let mut idx = TxnIndex::new(dir.path().join("x.txnindex"));
    idx.append(three()[0], &disk).expect("append");
    let taken = idx.take();
    assert!(taken.owns_file());
    assert_eq!(taken.entries(), &three()[..1]);
    assert!(!idx.owns_file());
    assert!(idx.entries().is_empty());
}
