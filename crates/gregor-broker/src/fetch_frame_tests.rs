//! The framed fetch response must be, byte for byte, what the encoder writes with the records
//! in memory: for every Fetch version the broker serves, with errors, empty and null records,
//! tagged fields, truncated last batches and records long enough for multi-byte lengths.

use std::io::{Read, Write};
use std::sync::Arc;

use bytes::Bytes;
use gregor_log::FileSlice;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, NodeEndpoint, PartitionData,
};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchResponse, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::*;
use crate::frame::encode_response;
use crate::zero_copy::{write_copying, SendfileCounters, ZeroCopy};

/// A file holding `bytes` after `skip` bytes of other data, and the slice naming them.
fn file_with(bytes: &[u8], skip: usize) -> (tempfile::NamedTempFile, FileSlice) {
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    f.write_all(&vec![0xAB; skip]).expect("write");
    f.write_all(bytes).expect("write");
    f.flush().expect("flush");
    let file = Arc::new(f.reopen().expect("reopen"));
    let slice = FileSlice::new(file, f.path().to_path_buf(), skip as u64, bytes.len());
    (f, slice)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn partition(index: i32, version: i16) -> PartitionData {
    let mut p = PartitionData::default();
    p.partition_index = index;
    p.high_watermark = 1000 + i64::from(index);
    p.last_stable_offset = 990;
    p.log_start_offset = 7;
    p.aborted_transactions = Some(Vec::new());
    if version >= 11 {
        p.preferred_read_replica = BrokerId(-1);
    }
    p
}

/// What one partition of a test response holds.
enum Case {
    /// An error, records null.
    Error,
    /// No records (empty, in memory).
    Empty,
    /// Records from a file.
    File(Vec<u8>),
    /// Records from a file, with tagged fields and aborted transactions set.
    Tagged(Vec<u8>),
}

/// The response with its records in memory (what `encode_response` writes) and the reply the
/// fetch handler would give for it, with the files that back the reply's slices.
fn build(
    version: i16,
    topics: Vec<Vec<Case>>,
) -> (FetchResponse, FetchReply, Vec<tempfile::NamedTempFile>) {
    let mut expected = FetchResponse::default();
    let mut reply = FetchResponse::default();
    let mut slices = Vec::new();
    let mut files = Vec::new();
    expected.throttle_time_ms = 17;
    expected.session_id = 0;
    if version >= 16 {
        let mut e = NodeEndpoint::default();
        e.node_id = BrokerId(3);
        e.host = StrBytes::from_static_str("gregor-3");
        e.port = 9092;
        expected.node_endpoints = vec![e];
    }
    reply.throttle_time_ms = expected.throttle_time_ms;
    reply.node_endpoints = expected.node_endpoints.clone();
    for (ti, parts) in topics.into_iter().enumerate() {
        let mut t = FetchableTopicResponse::default();
        t.topic = TopicName(StrBytes::from_string(format!("topic-{ti}")));
        t.topic_id = uuid::Uuid::from_u128(0x1234_5678 + ti as u128);
        let mut rt = t.clone();
        for (pi, case) in parts.into_iter().enumerate() {
            let mut p = partition(pi as i32, version);
            match case {
                Case::Error => {
                    p.error_code = 6;
                    p.records = None;
                    rt.partitions.push(p.clone());
                    slices.push(FileSlice::empty());
                }
                Case::Empty => {
                    p.records = Some(Bytes::new());
                    rt.partitions.push(p.clone());
                    slices.push(FileSlice::empty());
                }
                Case::File(bytes) => {
                    let (f, slice) = file_with(&bytes, 100 + pi);
                    files.push(f);
                    slices.push(slice);
                    let mut r = p.clone();
                    r.records = Some(Bytes::new());
                    rt.partitions.push(r);
                    p.records = Some(Bytes::from(bytes));
                }
                Case::Tagged(bytes) => {
                    if version >= 12 {
                        p.diverging_epoch.epoch = 4;
                        p.diverging_epoch.end_offset = 55;
                        p.current_leader.leader_id = BrokerId(2);
                        p.current_leader.leader_epoch = 9;
                    }
                    let mut a = AbortedTransaction::default();
                    a.first_offset = 12;
                    p.aborted_transactions = Some(vec![a]);
                    let (f, slice) = file_with(&bytes, 3);
                    files.push(f);
                    slices.push(slice);
                    let mut r = p.clone();
                    r.records = Some(Bytes::new());
                    rt.partitions.push(r);
                    p.records = Some(Bytes::from(bytes));
                }
            }
            t.partitions.push(p);
        }
        expected.responses.push(t);
        reply.responses.push(rt);
    }
    (
        expected,
        FetchReply {
            response: reply,
            records: slices,
        },
        files,
    )
}

/// The frame's bytes, file slices read in.
fn flatten(chunks: &[Chunk]) -> Vec<u8> {
    let mut out = Vec::new();
    for c in chunks {
        match c {
            Chunk::Bytes(b) => out.extend_from_slice(b),
            Chunk::File(f) => out.extend(f.read().expect("read slice")),
        }
    }
    out
}

fn cases() -> Vec<Vec<Case>> {
    vec![
        vec![
            Case::Error,
            Case::File(pattern(300, 1)),
            Case::Empty,
            // A last batch cut short by the size limit: whatever the bytes, they are sent as
            // they lie in the file.
            Case::File(pattern(61 + 7, 2)),
            Case::Tagged(pattern(20_000, 3)),
        ],
        vec![],
        vec![
            Case::File(pattern(1, 4)),
            Case::File(pattern(126, 5)),
            Case::File(pattern(127, 6)),
        ],
        vec![Case::Empty, Case::Error],
    ]
}

#[test]
fn every_fetch_version_frames_byte_for_byte_as_the_encoder_does() {
    let (lo, hi) = crate::api::supported(ApiKey::Fetch).expect("fetch is served");
    for version in lo..=hi {
        let (expected, reply, _files) = build(version, cases());
        let want = encode_response(ApiKey::Fetch, version, 42, &ResponseKind::Fetch(expected))
            .expect("encode");
        let chunks = frame(version, 42, &reply).expect("frame");
        let got = flatten(&chunks);
        assert_eq!(got.len(), want.len(), "v{version} length");
        assert_eq!(got, want.to_vec(), "v{version} bytes");
        let files = chunks
            .iter()
            .filter(|c| matches!(c, Chunk::File(_)))
            .count();
        assert_eq!(
            files, 6,
            "v{version}: every non-empty slice is sent from its file"
        );
    }
}

#[test]
fn a_response_without_file_records_is_the_plain_encoding() {
    for version in [4, 11, 12, 17] {
        let (expected, reply, _files) = build(
            version,
            vec![vec![Case::Error, Case::Empty], vec![Case::Empty]],
        );
        let want = encode_response(ApiKey::Fetch, version, 1, &ResponseKind::Fetch(expected))
            .expect("encode");
        let chunks = frame(version, 1, &reply).expect("frame");
        assert_eq!(chunks.len(), 1);
        assert_eq!(flatten(&chunks), want.to_vec());
    }
}

#[test]
fn slices_that_do_not_match_the_partitions_are_an_encode_error() {
    let (_, mut reply, _files) = build(12, vec![vec![Case::File(pattern(10, 1))]]);
    reply.records.push(FileSlice::empty());
    assert!(frame(12, 1, &reply).is_err());
    let (_, mut reply, _files) = build(12, vec![vec![Case::File(pattern(10, 1))]]);
    // Records both in memory and in a file would send them twice.
    reply.response.responses[0].partitions[0].records = Some(Bytes::from_static(b"x"));
    assert!(frame(12, 1, &reply).is_err());
}

/// A real socket pair: the server side writes `chunks` with sendfile counting into
/// `zero_copy` (or by copying, without), the client reads the frame.
async fn send_over_tcp(
    chunks: Vec<Chunk>,
    zero_copy: Option<&SendfileCounters>,
    expect: usize,
) -> std::io::Result<Vec<u8>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let reader = std::thread::spawn(move || {
        let mut s = std::net::TcpStream::connect(addr).expect("connect");
        let mut out = Vec::new();
        // Read slowly at first so that the server's socket buffer fills and it must wait for
        // writability.
        let mut first = vec![0u8; 1024];
        std::thread::sleep(std::time::Duration::from_millis(50));
        let n = s.read(&mut first).expect("read");
        out.extend_from_slice(&first[..n]);
        s.read_to_end(&mut out).expect("read");
        out
    });
    let (stream, _) = listener.accept().await?;
    // Every descriptor of the socket is closed once written, so that the reader sees the end.
    let result = if let Some(counters) = zero_copy {
        let z = ZeroCopy::new(&stream, counters.clone()).expect("zero copy");
        let r = z.write(chunks).await;
        drop(z);
        drop(stream);
        r
    } else {
        let (_rd, mut wr) = stream.into_split();
        write_copying(&mut wr, chunks, Vec::new()).await.map(|_| ())
    };
    let got = reader.join().expect("reader");
    result?;
    assert!(got.len() <= expect);
    Ok(got)
}

/// How a test frame is written.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Writer {
    Copying,
    /// With sendfile, the segment files' pages in the page cache.
    Cached,
    /// With sendfile, the segment files' pages evicted from the page cache first.
    Evicted,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sendfile_and_copying_writers_put_the_same_frame_on_a_socket() {
    // Large enough to fill loopback socket buffers several times over.
    let big = pattern(24 << 20, 9);
    for writer in [Writer::Cached, Writer::Evicted, Writer::Copying] {
        let version = 13;
        let (expected, reply, files) = build(
            version,
            vec![vec![
                Case::File(big.clone()),
                Case::Error,
                Case::File(pattern(5000, 8)),
            ]],
        );
        if writer == Writer::Evicted {
            for f in &files {
                gregor_log::page_cache::evict(f.as_file()).expect("evict");
            }
        }
        let want = encode_response(ApiKey::Fetch, version, 5, &ResponseKind::Fetch(expected))
            .expect("encode");
        let chunks = frame(version, 5, &reply).expect("frame");
        let counters = SendfileCounters::default();
        let got = send_over_tcp(
            chunks,
            (writer != Writer::Copying).then_some(&counters),
            want.len(),
        )
        .await
        .expect("sent");
        assert_eq!(got.len(), want.len(), "{writer:?}");
        assert!(got == want.to_vec(), "{writer:?}: bytes differ");
        let (worker, pool) = (counters.worker.get(), counters.blocking_pool.get());
        let file_bytes = (big.len() + 5000) as u64;
        match writer {
            // Cached pages never leave the worker: no thread hand-off per write.
            Writer::Cached => assert_eq!((worker, pool), (file_bytes, 0)),
            // Pages that may need the disk are read on the blocking pool.
            Writer::Evicted => {
                assert_eq!(worker + pool, file_bytes);
                assert!(pool > 0, "evicted pages were sent from the worker");
            }
            Writer::Copying => assert_eq!((worker, pool), (0, 0)),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_shorter_than_its_slice_fails_the_write_instead_of_sending_other_bytes() {
    let counters = SendfileCounters::default();
    for zero_copy in [Some(&counters), None] {
        let (_, reply, files) = build(12, vec![vec![Case::File(pattern(10_000, 1))]]);
        files[0].as_file().set_len(100 + 5_000).expect("cut");
        let chunks = frame(12, 5, &reply).expect("frame");
        let e = send_over_tcp(chunks, zero_copy, usize::MAX)
            .await
            .expect_err("cannot finish the frame");
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::UnexpectedEof,
            "zero_copy={}",
            zero_copy.is_some()
        );
    }
}
