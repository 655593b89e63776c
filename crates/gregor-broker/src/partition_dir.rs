//! Partition directories in the data directory, and which of them this broker may keep.
//!
//! Each partition directory is stamped with its topic's id (`partition.metadata`, the file Kafka
//! keeps for the same purpose), so that a directory left behind by a deleted topic is never
//! served as a new topic of the same name. Directories of replicas this broker no longer hosts
//! ("stray" replicas: reassigned away or deleted while the node was down, when no one could tell
//! it to delete them) are found once the broker has caught up with the metadata, and removed.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use gregor_log::{Disk, LogError};
use uuid::Uuid;

/// The topic-id stamp in every partition directory.
pub const PARTITION_METADATA: &str = "partition.metadata";

/// Directory of the metadata log inside the data directory (never a partition's, never a
/// stray).
pub const METADATA_LOG_DIR: &str = "__cluster_metadata-0";

/// Larger than any stamp this broker writes: a bigger file is not read at all.
const MAX_STAMP_BYTES: u64 = 1024;

/// What a partition directory's stamp says about the topic it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stamp {
    /// No directory, or a directory without a stamp (new, or written before stamps existed).
    Missing,
    /// Stamped with the expected topic id.
    Matches,
    /// Stamped with another topic's id: a topic of this name that has since been deleted.
    OtherTopic(String),
    /// A stamp that cannot be read or parsed.
    Unreadable(String),
}

fn stamp_text(topic_id: Uuid) -> String {
    format!(
        "version: 0\ntopic_id: {}\n",
        gregor_meta::kafka_uuid_string(topic_id)
    )
}

/// Reads the stamp of the partition directory `dir` against the topic id it should carry.
pub fn read_stamp(dir: &Path, topic_id: Uuid) -> Stamp {
    let path = dir.join(PARTITION_METADATA);
    let len = match fs::metadata(&path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Stamp::Missing,
        Err(e) => return Stamp::Unreadable(e.to_string()),
    };
    if len > MAX_STAMP_BYTES {
        return Stamp::Unreadable(format!("{len} bytes, more than a stamp can hold"));
    }
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => return Stamp::Unreadable(e.to_string()),
    };
    let mut version = None;
    let mut id = None;
    for line in text.lines() {
        match line.split_once(':') {
            Some(("version", v)) => version = Some(v.trim()),
            Some(("topic_id", v)) => id = Some(v.trim()),
            _ => {}
        }
    }
    match (version, id) {
        (Some("0"), Some(id)) if id == gregor_meta::kafka_uuid_string(topic_id) => Stamp::Matches,
        (Some("0"), Some(id)) => Stamp::OtherTopic(id.to_string()),
        _ => Stamp::Unreadable(format!("unexpected contents {text:?}")),
    }
}

/// Stamps `dir` with `topic_id`, durably (written aside, fsynced, renamed, directory fsynced).
pub fn write_stamp(disk: &Disk, dir: &Path, topic_id: Uuid) -> Result<(), LogError> {
    disk.write_atomic(
        &dir.join(PARTITION_METADATA),
        stamp_text(topic_id).as_bytes(),
    )
}

/// Splits a partition directory name `<topic>-<partition>`; `None` for anything else.
pub fn parse_dir_name(name: &str) -> Option<(&str, i32)> {
    let (topic, index) = name.rsplit_once('-')?;
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if topic.is_empty() || topic.len() > 249 || !topic.chars().all(legal) {
        return None;
    }
    if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let partition = index.parse::<i32>().ok()?;
    Some((topic, partition))
}

/// The partition directories in `data_dir` that `hosted(topic, partition)` says this broker does
/// not host. Only directories that look like partition logs (a stamp or a segment file inside)
/// are considered, and `keep` names directories never to touch (the metadata log).
pub fn stray_dirs(
    data_dir: &Path,
    keep: &[&str],
    hosted: impl Fn(&str, i32) -> bool,
) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(data_dir)? {
        let entry = entry?;
        if !entry.file_type()?.is_dir() {
            continue;
        }
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        if keep.contains(&name) {
            continue;
        }
        let Some((topic, partition)) = parse_dir_name(name) else {
            continue;
        };
        if hosted(topic, partition) || !looks_like_partition_log(&entry.path())? {
            continue;
        }
        out.push(entry.path());
    }
    out.sort();
    Ok(out)
}

fn looks_like_partition_log(dir: &Path) -> io::Result<bool> {
    for entry in fs::read_dir(dir)? {
        let name = entry?.file_name();
        let name = name.to_string_lossy();
        if name == PARTITION_METADATA || name.ends_with(".log") {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    #[test]
    fn a_stamp_is_read_back_and_tells_topics_apart() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().join("orders-0");
        fs::create_dir(&dir).expect("mkdir");
        assert_eq!(read_stamp(&dir, id(1)), Stamp::Missing);
        write_stamp(&Disk::real(), &dir, id(1)).expect("stamp");
        assert_eq!(read_stamp(&dir, id(1)), Stamp::Matches);
        assert!(matches!(read_stamp(&dir, id(2)), Stamp::OtherTopic(_)));
        let text = fs::read_to_string(dir.join(PARTITION_METADATA)).expect("read");
        assert!(text.starts_with("version: 0\ntopic_id: "), "{text}");
    }

    #[test]
    fn a_damaged_or_oversized_stamp_is_unreadable_not_a_match() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let path = tmp.path().join(PARTITION_METADATA);
        fs::write(&path, "garbage").expect("write");
        assert!(matches!(
            read_stamp(tmp.path(), id(1)),
            Stamp::Unreadable(_)
        ));
        fs::write(&path, "version: 7\ntopic_id: x\n").expect("write");
        assert!(matches!(
            read_stamp(tmp.path(), id(1)),
            Stamp::Unreadable(_)
        ));
        fs::write(&path, vec![b'v'; 4096]).expect("write");
        assert!(matches!(
            read_stamp(tmp.path(), id(1)),
            Stamp::Unreadable(_)
        ));
    }

    #[test]
    fn directory_names_parse_as_topic_and_partition() {
        assert_eq!(parse_dir_name("orders-3"), Some(("orders", 3)));
        assert_eq!(parse_dir_name("my-topic-12"), Some(("my-topic", 12)));
        assert_eq!(parse_dir_name("orders-3-delete"), None);
        assert_eq!(parse_dir_name("orders-"), None);
        assert_eq!(parse_dir_name("-3"), None);
        assert_eq!(parse_dir_name("orders-+3"), None);
        assert_eq!(parse_dir_name("orders-99999999999"), None);
        assert_eq!(parse_dir_name("lost+found"), None);
    }

    #[test]
    fn only_unhosted_partition_logs_are_strays() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let mk = |name: &str, file: Option<&str>| {
            let d = tmp.path().join(name);
            fs::create_dir(&d).expect("mkdir");
            if let Some(f) = file {
                fs::write(d.join(f), b"").expect("write");
            }
        };
        mk("kept-0", Some("00000000000000000000.log"));
        mk("gone-0", Some("00000000000000000000.log"));
        mk("gone-1", Some(PARTITION_METADATA));
        mk("__cluster_metadata-0", Some("00000000000000000000.log"));
        mk("empty-0", None);
        mk("gone-2-delete", Some("00000000000000000000.log"));
        fs::write(tmp.path().join("meta.properties"), b"").expect("write");
        let strays = stray_dirs(tmp.path(), &["__cluster_metadata-0"], |t, p| {
            t == "kept" && p == 0
        })
        .expect("scan");
        let names: Vec<_> = strays
            .iter()
            .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["gone-0", "gone-1"]);
    }
}
