//! Partition directories a broker must not serve or keep, on a real single-node `Broker` with
//! real logs in a temporary directory: a directory stamped with another topic's id (a deleted
//! topic of the same name) is replaced by an empty log, an unstamped one (written before stamps
//! existed) is kept and stamped, and directories of partitions the metadata does not assign to
//! this node are deleted once the broker has caught up.

mod common;

use std::path::Path;
use std::time::Duration;

use common::create_topic;
use gregor_broker::partition_dir::{read_stamp, write_stamp, Stamp, PARTITION_METADATA};
use gregor_log::batch::Codec;
use gregor_log::records::simple_batch;
use gregor_log::{Disk, Log, LogConfig};
use uuid::Uuid;

/// A partition log of `records` records in `dir`, as an earlier run of a broker left it.
fn leave_log(dir: &Path, records: usize, stamp: Option<Uuid>) {
    let log = Log::open(dir, LogConfig::default(), 0).expect("open log");
    let kvs: Vec<_> = (0..records).map(|_| (None, Some(&b"old"[..]))).collect();
    let batch = simple_batch(Codec::None, 0, &kvs).expect("batch");
    log.append_as_leader(&batch, 0, 0).expect("append");
    log.close().expect("close");
    if let Some(id) = stamp {
        write_stamp(&Disk::real(), dir, id).expect("stamp");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_of_a_deleted_topic_of_the_same_name_is_not_served() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let b = common::start(tmp.path(), &[]).await;
    for topic in ["reborn", "legacy"] {
        create_topic(&b, topic).await;
        let part = b.replicas.get(topic, 0).expect("hosted");
        let kvs = [(None, Some(&b"old"[..])); 3];
        let batch = simple_batch(Codec::None, 0, &kvs).expect("batch");
        part.log.append_as_leader(&batch, 0, 0).expect("append");
    }
    let image = b.metadata.image();
    let id = |t: &str| image.topic(t).expect("created").id;
    let (reborn_id, legacy_id) = (id("reborn"), id("legacy"));
    b.shutdown().await;
    // As a node finds it after a topic of this name was deleted and created again while it was
    // down (the stamp of the deleted one), and as a broker without stamps left it.
    let (reborn_dir, legacy_dir) = (tmp.path().join("reborn-0"), tmp.path().join("legacy-0"));
    write_stamp(&Disk::real(), &reborn_dir, Uuid::from_u128(42)).expect("stamp");
    std::fs::remove_file(legacy_dir.join(PARTITION_METADATA)).expect("unstamp");

    let b = common::start(tmp.path(), &[]).await;
    let reborn = b.replicas.get("reborn", 0).expect("hosted");
    assert_eq!(
        reborn.log.log_end_offset(),
        0,
        "the other topic's records are gone"
    );
    assert_eq!(read_stamp(&reborn_dir, reborn_id), Stamp::Matches);
    // No stamp: nothing says it belongs to another topic; kept, and stamped from now on.
    let legacy = b.replicas.get("legacy", 0).expect("hosted");
    assert_eq!(legacy.log.log_end_offset(), 3);
    assert_eq!(read_stamp(&legacy_dir, legacy_id), Stamp::Matches);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_directories_the_metadata_does_not_assign_here_are_deleted() {
    let tmp = tempfile::tempdir().expect("temp dir");
    leave_log(&tmp.path().join("gone-0"), 3, Some(Uuid::from_u128(7)));
    leave_log(&tmp.path().join("gone-1"), 1, None);
    let not_a_log = tmp.path().join("notes-0");
    std::fs::create_dir(&not_a_log).expect("mkdir");
    std::fs::write(not_a_log.join("notes.txt"), b"mine").expect("write");
    let b = common::start(tmp.path(), &[]).await;
    // Set aside (renamed) at once, then removed: wait until nothing of them is left.
    let strays = || {
        std::fs::read_dir(tmp.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("gone"))
            .collect::<Vec<_>>()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !strays().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "stray directories still there: {:?}",
            strays()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        std::fs::read(not_a_log.join("notes.txt")).expect("kept"),
        b"mine"
    );
    // The name is free for a new topic, which starts empty and stamped.
    create_topic(&b, "gone").await;
    let gone = b.replicas.get("gone", 0).expect("hosted");
    assert_eq!(gone.log.log_end_offset(), 0);
    assert!(tmp.path().join("gone-0").join(PARTITION_METADATA).exists());
    b.shutdown().await;
}
