//! Fetch responses framed without copying record bytes (the functional core of the zero-copy
//! fetch path; `zero_copy.rs` writes the frames).
//!
//! A fetch response is mostly record bytes. Instead of copying them from the segment file into
//! the response buffer and from there to the socket, the handler names where they lie in the
//! file ([`FileSlice`]), and the frame becomes a list of [`Chunk`]s: the encoded bytes around
//! each partition's records, and the file ranges between them.
//!
//! Everything but the record bytes is still encoded by kafka-protocol, so that every Fetch
//! version (flexible or not, with tagged fields) stays exactly what its encoder writes. The
//! records field's position is found by encoding the response twice, once with the
//! file-backed partitions' records null and once empty: the two encodings differ exactly in
//! those records' length fields (`ff ff ff ff` / `00 00 00 00` before v12, varint `0` / `1`
//! from v12), and nowhere else. The real length then replaces the empty one, and the file's
//! bytes follow it.

use bytes::{BufMut, Bytes, BytesMut};
use gregor_log::FileSlice;
use kafka_protocol::messages::{ApiKey, FetchResponse, ResponseHeader};
use kafka_protocol::protocol::Encodable;

use crate::frame::EncodeError;

/// The first Fetch version with compact (varint-length) records.
const FIRST_FLEXIBLE: i16 = 12;

/// A fetch response whose record bytes stay in the segment files until written.
#[derive(Debug)]
pub struct FetchReply {
    /// The response; a partition whose bytes come from a file has empty records here.
    pub response: FetchResponse,
    /// One per partition of `response`, in its order (topic by topic): the record bytes to
    /// send from a file, empty where the response carries the partition's records itself.
    pub records: Vec<FileSlice>,
}

impl FetchReply {
    /// Record bytes the response carries, from files and in memory.
    pub fn record_bytes(&self) -> usize {
        let in_memory: usize = self
            .response
            .responses
            .iter()
            .flat_map(|t| &t.partitions)
            .map(|p| p.records.as_ref().map_or(0, Bytes::len))
            .sum();
        in_memory + self.records.iter().map(|s| s.len).sum::<usize>()
    }
}

/// A piece of a response frame.
#[derive(Debug, Clone)]
pub enum Chunk {
    /// Encoded bytes.
    Bytes(Bytes),
    /// Record bytes to send from a segment file.
    File(FileSlice),
}

impl Chunk {
    pub fn len(&self) -> usize {
        match self {
            Chunk::Bytes(b) => b.len(),
            Chunk::File(f) => f.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Encodes a size-prefixed response frame (size, header, body) as `encode_response` does.
fn encode(
    version: i16,
    correlation_id: i32,
    body: &FetchResponse,
) -> Result<BytesMut, EncodeError> {
    let mut buf = BytesMut::with_capacity(64 + body.compute_size(version).unwrap_or(0));
    buf.put_i32(0);
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    header
        .encode(&mut buf, ApiKey::Fetch.response_header_version(version))
        .map_err(|e| EncodeError(e.to_string()))?;
    body.encode(&mut buf, version)
        .map_err(|e| EncodeError(e.to_string()))?;
    Ok(buf)
}

/// Frames `reply` for the wire: the chunks, written in order, are byte for byte the frame
/// `encode_response` would write for the response with the files' bytes in it.
pub fn frame(
    version: i16,
    correlation_id: i32,
    reply: &FetchReply,
) -> Result<Vec<Chunk>, EncodeError> {
    let nulled = null_file_records(reply)?;
    let mut empty = encode(version, correlation_id, &reply.response)?;
    let null = encode(version, correlation_id, &nulled)?;
    if empty.len() != null.len() {
        return Err(EncodeError(
            "null and empty records encode to different sizes".into(),
        ));
    }
    let flexible = version >= FIRST_FLEXIBLE;
    let files: Vec<&FileSlice> = reply.records.iter().filter(|s| !s.is_empty()).collect();
    let holes = records_length_fields(&empty, &null, flexible)?;
    if holes.len() != files.len() {
        return Err(EncodeError(format!(
            "found {} records fields for {} file slices",
            holes.len(),
            files.len()
        )));
    }
    let total = frame_size(empty.len() - 4, flexible, &files)?;
    empty[..4].copy_from_slice(&total.to_be_bytes());
    Ok(splice(empty.freeze(), flexible, &holes, &files))
}

/// The response with the file-backed partitions' records null, to find their fields; checks
/// that `reply` has one slice per partition and no partition's records in both places.
fn null_file_records(reply: &FetchReply) -> Result<FetchResponse, EncodeError> {
    let partitions = reply
        .response
        .responses
        .iter()
        .map(|t| t.partitions.len())
        .sum::<usize>();
    if partitions != reply.records.len() {
        return Err(EncodeError(format!(
            "fetch response has {partitions} partitions but {} record slices",
            reply.records.len()
        )));
    }
    let mut nulled = reply.response.clone();
    let partitions = nulled
        .responses
        .iter_mut()
        .flat_map(|t| t.partitions.iter_mut());
    for (p, slice) in partitions.zip(&reply.records) {
        if slice.is_empty() {
            continue;
        }
        if p.records.as_ref().is_some_and(|r| !r.is_empty()) {
            return Err(EncodeError(format!(
                "partition {} carries records both in memory and in a file",
                p.partition_index
            )));
        }
        p.records = None;
    }
    Ok(nulled)
}

/// Where the file-backed records' length fields are, in response order: the bytes where the
/// encodings with empty and with null records differ.
fn records_length_fields(
    empty: &[u8],
    null: &[u8],
    flexible: bool,
) -> Result<Vec<usize>, EncodeError> {
    let width = length_field_width(flexible);
    let mut holes = Vec::new();
    let mut i = 0;
    while i < empty.len() {
        if empty[i] == null[i] {
            i += 1;
            continue;
        }
        let field_ok = if flexible {
            empty[i] == 1 && null[i] == 0
        } else {
            empty.get(i..i + 4) == Some(&[0u8; 4][..])
                && null.get(i..i + 4) == Some(&[0xffu8; 4][..])
        };
        if !field_ok {
            return Err(EncodeError(format!("unexpected difference at byte {i}")));
        }
        holes.push(i);
        i += width;
    }
    Ok(holes)
}

/// The frame's size field: the encoded response (`encoded` bytes after the size) with each
/// empty records field replaced by the file's length and bytes.
fn frame_size(encoded: usize, flexible: bool, files: &[&FileSlice]) -> Result<i32, EncodeError> {
    let width = length_field_width(flexible);
    let mut total = encoded;
    for f in files {
        if f.len >= i32::MAX as usize {
            return Err(EncodeError(format!(
                "{} record bytes do not fit a frame",
                f.len
            )));
        }
        total = total - width + length_field_len(flexible, f.len) + f.len;
    }
    i32::try_from(total)
        .map_err(|_| EncodeError(format!("a response of {total} bytes does not fit a frame")))
}

/// The encoded frame cut at the records length fields (`holes`), each followed by the real
/// length and its file's bytes.
fn splice(encoded: Bytes, flexible: bool, holes: &[usize], files: &[&FileSlice]) -> Vec<Chunk> {
    let width = length_field_width(flexible);
    let mut chunks = Vec::with_capacity(2 * files.len() + 1);
    let mut prev = 0;
    for (&hole, &file) in holes.iter().zip(files) {
        let mut head = BytesMut::with_capacity(hole - prev + 5);
        head.extend_from_slice(&encoded[prev..hole]);
        if flexible {
            put_uvarint(&mut head, (file.len + 1) as u32);
        } else {
            head.put_i32(file.len as i32);
        }
        chunks.push(Chunk::Bytes(head.freeze()));
        chunks.push(Chunk::File(file.clone()));
        prev = hole + width;
    }
    chunks.push(Chunk::Bytes(encoded.slice(prev..)));
    chunks
}

/// Bytes of an empty records length field: varint `1` from v12, an i32 `0` before.
fn length_field_width(flexible: bool) -> usize {
    if flexible {
        1
    } else {
        4
    }
}

/// Kafka's unsigned varint, as compact lengths are written (kafka-protocol's encoder of it
/// is private to that crate).
fn put_uvarint(buf: &mut BytesMut, mut v: u32) {
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

/// Bytes of a records length field for `len` bytes of records.
fn length_field_len(flexible: bool, len: usize) -> usize {
    if !flexible {
        return 4;
    }
    let mut v = (len + 1) as u64;
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

#[cfg(test)]
#[path = "fetch_frame_tests.rs"]
mod tests;
