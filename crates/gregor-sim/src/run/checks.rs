//! The driver's checks of what it observes, as functions of what it saw, so that each can be
//! shown failing on a hand-built observation.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::Hasher;
use std::sync::Arc;

use gregor_meta::MetadataImage;

use crate::property::{Property, Violation};

/// A digest of a node's image, to compare images across nodes cheaply.
pub(super) fn image_digest(image: &MetadataImage) -> u64 {
    let mut h = fnv::FnvHasher::default();
    h.write(format!("{image:?}").as_bytes());
    h.finish()
}

/// `applied-entries-differ`: the entry `node` applied at `index` (its leader id) against the
/// first one any node was seen applying there.
pub(super) fn applied_entry(
    applied_ids: &mut BTreeMap<u64, (String, usize)>,
    index: u64,
    leader_id: String,
    node: usize,
) -> Option<Violation> {
    match applied_ids.get(&index) {
        Some((other, first)) if *other != leader_id => Some(Violation::new(
            Property::AppliedEntriesDiffer,
            format!("index {index}: n{first} applied the entry of leader {other}, n{node} the entry of leader {leader_id}"),
        )),
        Some(_) => None,
        None => {
            applied_ids.insert(index, (leader_id, node));
            None
        }
    }
}

/// `applied-went-back`: `node`'s applied index against the last one seen, `(start count,
/// index)`; a restart (another start count) may replay from its snapshot.
pub(super) fn applied_went_back(
    (start, last): (u64, u64),
    starts: u64,
    applied: u64,
    node: usize,
) -> Option<Violation> {
    (start == starts && applied < last).then(|| {
        Violation::new(
            Property::AppliedWentBack,
            format!("n{node} applied index went from {last} to {applied} without a restart"),
        )
    })
}

/// `term-went-back`: a voter's term (with its vote, Raft's persistent state) never goes back,
/// not even across a restart or a power loss: it is synced before the vote counts. `highest`
/// is the highest term seen on `node`.
pub(super) fn term_went_back(highest: &mut u64, term: u64, node: usize) -> Option<Violation> {
    if term < *highest {
        return Some(Violation::new(
            Property::TermWentBack,
            format!("n{node} is at term {term} after term {highest}"),
        ));
    }
    *highest = term;
    None
}

/// `node-failed-to-start`: every start of a node on its own files that failed (starts the
/// driver expected to fail, on a disk it made fail, are not among them).
pub(super) fn start_failures(errors: &[(usize, String)]) -> Vec<Violation> {
    errors
        .iter()
        .map(|(node, e)| Violation::new(Property::NodeFailedToStart, format!("n{node}: {e}")))
        .collect()
}

/// `disk-bypassed`: paths under `node`'s data directory (`root`) written around its simulated
/// disk, whose power model then cannot say what survives a power loss.
pub(super) fn disk_bypassed(
    node: usize,
    paths: &[std::path::PathBuf],
    root: &std::path::Path,
) -> Option<Violation> {
    let first = paths.first()?;
    Some(Violation::new(
        Property::DiskBypassed,
        format!(
            "n{node}: {} paths written around the simulated disk, first {}",
            paths.len(),
            first.strip_prefix(root).unwrap_or(first).display()
        ),
    ))
}

/// `two-leaders-in-epoch`: the leader `node`'s image names for (topic, partition, leader
/// epoch) against the first image that named one. `Ok(true)` the first time the key is seen.
pub(super) fn partition_leader(
    seen: &mut BTreeMap<(String, i32, i32), (i32, usize)>,
    key: (String, i32, i32),
    leader: i32,
    node: usize,
) -> Result<bool, Violation> {
    match seen.get(&key) {
        Some(&(first, seen_on)) if first != leader => Err(Violation::new(
            Property::TwoLeadersInEpoch,
            format!(
                "{}-{} epoch {}: n{seen_on}'s image names leader {first}, n{node}'s {leader}",
                key.0, key.1, key.2
            ),
        )),
        Some(_) => Ok(false),
        None => {
            seen.insert(key, (leader, node));
            Ok(true)
        }
    }
}

/// `hosted-logs-differ`, for one node: the side-topic partitions its metadata gives it against
/// the logs it has open.
pub(super) fn side_logs_differ(
    node: usize,
    wanted: &BTreeSet<(String, i32)>,
    hosted: &BTreeSet<(String, i32)>,
    on_disk: &BTreeSet<(String, i32)>,
) -> Option<String> {
    let missing: Vec<_> = wanted.difference(hosted).collect();
    let extra: Vec<_> = hosted.difference(wanted).collect();
    let left: Vec<_> = on_disk.difference(wanted).collect();
    (!missing.is_empty() || !extra.is_empty() || !left.is_empty()).then(|| {
        format!("n{node}: missing {missing:?}, not deleted {extra:?}, left on disk {left:?}")
    })
}

/// `images-diverge`: two nodes that applied the same index hold equal images (always: a
/// liveness failure does not excuse it), and once the nodes converged, every node applied the
/// same index.
pub(super) fn images_diverge(
    finals: &[Option<(u64, Arc<MetadataImage>)>],
    converged: bool,
) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut at_index: BTreeMap<u64, (usize, &MetadataImage)> = BTreeMap::new();
    let first = finals.iter().flatten().next();
    for (i, f) in finals.iter().enumerate() {
        let Some((applied, image)) = f else { continue };
        let (n0, i0) = *at_index.entry(*applied).or_insert((i, image));
        if i0 != &**image {
            out.push(Violation::new(
                Property::ImagesDiverge,
                format!(
                    "n{i} and n{n0} both applied {applied}, with images {:016x} and {:016x}",
                    image_digest(image),
                    image_digest(i0)
                ),
            ));
        } else if let Some((a0, _)) = first.filter(|(a0, _)| converged && a0 != applied) {
            out.push(Violation::new(
                Property::ImagesDiverge,
                format!("n{i} applied {applied}; the first node applied {a0}"),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gregor_meta::{MetadataRecord, TopicRecord, Uuid};

    #[test]
    fn two_entries_applied_at_one_index_differ() {
        let mut ids = BTreeMap::new();
        assert!(applied_entry(&mut ids, 5, "T2-N0".into(), 0).is_none());
        assert!(applied_entry(&mut ids, 5, "T2-N0".into(), 1).is_none());
        let v = applied_entry(&mut ids, 5, "T2-N1".into(), 2).expect("a violation");
        assert_eq!(v.property, Property::AppliedEntriesDiffer);
    }

    #[test]
    fn an_applied_index_may_go_back_only_across_a_restart() {
        assert!(applied_went_back((1, 10), 1, 10, 0).is_none());
        assert!(applied_went_back((1, 10), 2, 3, 0).is_none());
        let v = applied_went_back((1, 10), 1, 9, 0).expect("a violation");
        assert_eq!(v.property, Property::AppliedWentBack);
    }

    #[test]
    fn a_failed_start_and_a_path_written_around_the_disk_are_reported() {
        assert!(start_failures(&[]).is_empty());
        let v = start_failures(&[(2, "corrupt log".into())]);
        assert_eq!(v[0].property, Property::NodeFailedToStart);
        assert_eq!(v[0].detail, "n2: corrupt log");
        let root = std::path::Path::new("/sim/n1");
        assert!(disk_bypassed(1, &[], root).is_none());
        let v = disk_bypassed(1, &[root.join("data-0/x.log")], root).expect("a violation");
        assert_eq!(v.property, Property::DiskBypassed);
        assert!(v
            .detail
            .ends_with("1 paths written around the simulated disk, first data-0/x.log"));
    }

    #[test]
    fn a_term_never_goes_back() {
        let mut highest = 0;
        assert!(term_went_back(&mut highest, 3, 0).is_none());
        assert!(term_went_back(&mut highest, 3, 0).is_none());
        assert!(term_went_back(&mut highest, 5, 0).is_none());
        let v = term_went_back(&mut highest, 0, 0).expect("a violation");
        assert_eq!(v.property, Property::TermWentBack);
        assert_eq!(highest, 5);
    }

    #[test]
    fn two_leaders_named_for_one_epoch_is_a_violation() {
        let mut seen = BTreeMap::new();
        let key = || ("data".to_string(), 0, 3);
        assert_eq!(partition_leader(&mut seen, key(), 1, 0).ok(), Some(true));
        assert_eq!(partition_leader(&mut seen, key(), 1, 2).ok(), Some(false));
        // Another epoch may name another leader.
        let next = ("data".to_string(), 0, 4);
        assert_eq!(partition_leader(&mut seen, next, 2, 2).ok(), Some(true));
        let v = partition_leader(&mut seen, key(), 2, 1).expect_err("a violation");
        assert_eq!(v.property, Property::TwoLeadersInEpoch);
    }

    #[test]
    fn a_deleted_topics_log_left_or_an_added_partitions_missing_differs() {
        let set = |ps: &[i32]| ps.iter().map(|&p| ("side-0".to_string(), p)).collect();
        let wanted: BTreeSet<_> = set(&[0, 1]);
        let none = BTreeSet::new();
        assert!(side_logs_differ(0, &wanted, &set(&[0, 1]), &set(&[0, 1])).is_none());
        let d = side_logs_differ(0, &wanted, &set(&[0, 2]), &none).expect("a difference");
        assert!(d.contains("missing [(\"side-0\", 1)]"), "{d}");
        assert!(d.contains("not deleted [(\"side-0\", 2)]"), "{d}");
        // A directory of a deleted partition still on disk, though no log of it is open.
        let d = side_logs_differ(0, &wanted, &wanted, &set(&[0, 1, 3])).expect("a difference");
        assert!(d.contains("left on disk [(\"side-0\", 3)]"), "{d}");
    }

    fn image(topic: &str) -> Arc<MetadataImage> {
        let r = MetadataRecord::Topic(TopicRecord {
            name: topic.into(),
            topic_id: Uuid::from_u128(1),
        });
        Arc::new(MetadataImage::from_records([&r]).expect("a valid image"))
    }

    #[test]
    fn images_at_one_index_must_be_equal_whatever_the_liveness() {
        let same = vec![Some((4, image("a"))), None, Some((4, image("a")))];
        assert!(images_diverge(&same, true).is_empty());
        let differ = vec![Some((4, image("a"))), Some((4, image("b")))];
        for converged in [true, false] {
            let v = images_diverge(&differ, converged);
            assert_eq!(v.len(), 1, "{v:?}");
            assert_eq!(v[0].property, Property::ImagesDiverge);
        }
    }

    #[test]
    fn converged_nodes_must_have_applied_the_same_index() {
        let behind = vec![Some((4, image("a"))), Some((3, image("a")))];
        assert_eq!(images_diverge(&behind, true).len(), 1);
        // Without convergence (a liveness failure reported already) a node may lag.
        assert!(images_diverge(&behind, false).is_empty());
    }
}
