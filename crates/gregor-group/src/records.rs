//! Kafka's `__consumer_offsets` record formats, so that Kafka tooling can read what Gregor writes
//! and Gregor can load what Kafka wrote.
//!
//! Key and value each start with an `int16` version. Keys: version 0/1 = `OffsetCommitKey`
//! (group, topic, partition), version 2 = `GroupMetadataKey` (group); higher versions belong to
//! the KIP-848 consumer-group records, which this coordinator does not use. Values are written at
//! `OffsetCommitValue` v3 and `GroupMetadataValue` v3 (what Kafka writes for the classic protocol)
//! and read at every version 0-4 (v4 is the first flexible version: compact strings, tagged fields).

use bytes::{BufMut, Bytes, BytesMut};

/// Why record bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("{what}: truncated")]
    Truncated { what: &'static str },
    #[error("{what}: unsupported version {version}")]
    UnsupportedVersion { what: &'static str, version: i16 },
    #[error("{what}: invalid length {length}")]
    InvalidLength { what: &'static str, length: i64 },
    #[error("{what}: string is not UTF-8")]
    InvalidUtf8 { what: &'static str },
    #[error("{what}: null where a value is required")]
    UnexpectedNull { what: &'static str },
    #[error("{what}: {trailing} trailing bytes")]
    TrailingBytes { what: &'static str, trailing: usize },
    #[error("{what}: unknown code {code}")]
    UnknownCode { what: &'static str, code: i64 },
}

/// A decoded `__consumer_offsets` key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordKey {
    OffsetCommit {
        group: String,
        topic: String,
        partition: i32,
    },
    GroupMetadata {
        group: String,
    },
    /// A key version this coordinator does not handle (KIP-848 consumer groups, share groups...).
    Other {
        version: i16,
    },
}

/// `OffsetCommitValue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommitValue {
    pub offset: i64,
    /// -1 when unknown (and for versions before 3).
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp: i64,
    /// Only version 1 carries it; -1 otherwise.
    pub expire_timestamp: i64,
}

/// `GroupMetadataValue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadataValue {
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    /// -1 when unknown (and for versions before 2).
    pub current_state_timestamp: i64,
    pub members: Vec<MemberMetadata>,
}

/// `GroupMetadataValue.MemberMetadata`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberMetadata {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// -1 when unknown (version 0).
    pub rebalance_timeout: i32,
    pub session_timeout: i32,
    pub subscription: Bytes,
    pub assignment: Bytes,
}

const OFFSET_COMMIT_KEY_VERSION: i16 = 1;
const GROUP_METADATA_KEY_VERSION: i16 = 2;
const OFFSET_COMMIT_VALUE_VERSION: i16 = 3;
const GROUP_METADATA_VALUE_VERSION: i16 = 3;

// ---------------------------------------------------------------------------------------------
// Encoding (non-flexible versions only: that is all we write).

pub(crate) fn put_string(buf: &mut BytesMut, s: &str) {
    // Strings longer than i16::MAX cannot be represented; callers bound them (group ids, topic
    // names, metadata <= offset.metadata.max.bytes). Truncating silently would corrupt keys, so
    // the length is clamped only as a last resort and logged.
    let len = s.len().min(i16::MAX as usize);
    if len < s.len() {
        tracing::error!(
            length = s.len(),
            "string too long for an int16 length; truncated"
        );
    }
    buf.put_i16(len as i16);
    buf.put_slice(&s.as_bytes()[..len]);
}

fn put_nullable_string(buf: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_string(buf, s),
        None => buf.put_i16(-1),
    }
}

fn put_bytes(buf: &mut BytesMut, b: &[u8]) {
    buf.put_i32(i32::try_from(b.len()).unwrap_or(i32::MAX));
    buf.put_slice(b);
}

/// Encodes a key at Kafka's current versions (offset commit v1, group metadata v2).
pub fn encode_key(key: &RecordKey) -> Bytes {
    let mut buf = BytesMut::new();
    match key {
        RecordKey::OffsetCommit {
            group,
            topic,
            partition,
        } => {
            buf.put_i16(OFFSET_COMMIT_KEY_VERSION);
            put_string(&mut buf, group);
            put_string(&mut buf, topic);
            buf.put_i32(*partition);
        }
        RecordKey::GroupMetadata { group } => {
            buf.put_i16(GROUP_METADATA_KEY_VERSION);
            put_string(&mut buf, group);
        }
        RecordKey::Other { version } => buf.put_i16(*version),
    }
    buf.freeze()
}

/// Encodes an offset commit value at version 3.
pub fn encode_offset_commit_value(value: &OffsetCommitValue) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_i16(OFFSET_COMMIT_VALUE_VERSION);
    buf.put_i64(value.offset);
    buf.put_i32(value.leader_epoch);
    put_string(&mut buf, &value.metadata);
    buf.put_i64(value.commit_timestamp);
    buf.freeze()
}

/// Encodes a group metadata value at version 3.
pub fn encode_group_metadata_value(value: &GroupMetadataValue) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_i16(GROUP_METADATA_VALUE_VERSION);
    put_string(&mut buf, &value.protocol_type);
    buf.put_i32(value.generation);
    put_nullable_string(&mut buf, value.protocol.as_deref());
    put_nullable_string(&mut buf, value.leader.as_deref());
    buf.put_i64(value.current_state_timestamp);
    buf.put_i32(i32::try_from(value.members.len()).unwrap_or(i32::MAX));
    for m in &value.members {
        put_string(&mut buf, &m.member_id);
        put_nullable_string(&mut buf, m.group_instance_id.as_deref());
        put_string(&mut buf, &m.client_id);
        put_string(&mut buf, &m.client_host);
        buf.put_i32(m.rebalance_timeout);
        buf.put_i32(m.session_timeout);
        put_bytes(&mut buf, &m.subscription);
        put_bytes(&mut buf, &m.assignment);
    }
    buf.freeze()
}

// ---------------------------------------------------------------------------------------------
// Decoding.

pub(crate) struct Reader<'a> {
    pub(crate) buf: &'a [u8],
    pub(crate) what: &'static str,
    pub(crate) flexible: bool,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader {
            buf,
            what,
            flexible: false,
        }
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        if self.buf.len() < n {
            return Err(CodecError::Truncated { what: self.what });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub(crate) fn i16(&mut self) -> Result<i16, CodecError> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    pub(crate) fn i32(&mut self) -> Result<i32, CodecError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn i64(&mut self) -> Result<i64, CodecError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }

    pub(crate) fn uvarint(&mut self) -> Result<u64, CodecError> {
        let mut value = 0u64;
        for shift in (0..35).step_by(7) {
            let b = self.take(1)?[0];
            value |= u64::from(b & 0x7F) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(CodecError::InvalidLength {
            what: self.what,
            length: -1,
        })
    }

    /// A length prefix: `int16`/`int32` in classic versions, `uvarint(n + 1)` in flexible ones.
    /// `None` is null.
    pub(crate) fn length(&mut self, wide: bool) -> Result<Option<usize>, CodecError> {
        let n: i64 = if self.flexible {
            self.uvarint()? as i64 - 1
        } else if wide {
            i64::from(self.i32()?)
        } else {
            i64::from(self.i16()?)
        };
        match n {
            -1 => Ok(None),
            n if n < -1 => Err(CodecError::InvalidLength {
                what: self.what,
                length: n,
            }),
            n => Ok(Some(n as usize)),
        }
    }

    pub(crate) fn nullable_string(&mut self) -> Result<Option<String>, CodecError> {
        match self.length(false)? {
            None => Ok(None),
            Some(n) => {
                let b = self.take(n)?;
                String::from_utf8(b.to_vec())
                    .map(Some)
                    .map_err(|_| CodecError::InvalidUtf8 { what: self.what })
            }
        }
    }

    pub(crate) fn string(&mut self) -> Result<String, CodecError> {
        self.nullable_string()?
            .ok_or(CodecError::UnexpectedNull { what: self.what })
    }

    pub(crate) fn bytes(&mut self) -> Result<Bytes, CodecError> {
        match self.length(true)? {
            None => Err(CodecError::UnexpectedNull { what: self.what }),
            Some(n) => Ok(Bytes::copy_from_slice(self.take(n)?)),
        }
    }

    pub(crate) fn array_len(&mut self) -> Result<usize, CodecError> {
        self.length(true)?
            .ok_or(CodecError::UnexpectedNull { what: self.what })
    }

    /// Skips a flexible version's tagged fields (none of them are known to us).
    pub(crate) fn tagged_fields(&mut self) -> Result<(), CodecError> {
        self.tagged_fields_each(|_, _| {})
    }

    /// Reads the tagged fields, handing each (tag, bytes) to `on`.
    pub(crate) fn tagged_fields_each(
        &mut self,
        mut on: impl FnMut(u64, &'a [u8]),
    ) -> Result<(), CodecError> {
        if !self.flexible {
            return Ok(());
        }
        let count = self.uvarint()?;
        for _ in 0..count {
            let tag = self.uvarint()?;
            let size = self.uvarint()?;
            on(tag, self.take(usize::try_from(size).unwrap_or(usize::MAX))?);
        }
        Ok(())
    }

    pub(crate) fn finish(self) -> Result<(), CodecError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(CodecError::TrailingBytes {
                what: self.what,
                trailing: self.buf.len(),
            })
        }
    }
}

/// Decodes a key. Key versions this coordinator does not handle decode to [`RecordKey::Other`].
pub fn decode_key(bytes: &[u8]) -> Result<RecordKey, CodecError> {
    let mut r = Reader::new(bytes, "record key");
    let version = r.i16()?;
    let key = match version {
        0 | 1 => {
            r.what = "OffsetCommitKey";
            RecordKey::OffsetCommit {
                group: r.string()?,
                topic: r.string()?,
                partition: r.i32()?,
            }
        }
        2 => {
            r.what = "GroupMetadataKey";
            RecordKey::GroupMetadata { group: r.string()? }
        }
        v if v < 0 => {
            return Err(CodecError::UnsupportedVersion {
                what: "record key",
                version: v,
            })
        }
        v => return Ok(RecordKey::Other { version: v }),
    };
    r.finish()?;
    Ok(key)
}

/// Decodes an offset commit value of any version 0-4.
pub fn decode_offset_commit_value(bytes: &[u8]) -> Result<OffsetCommitValue, CodecError> {
    let what = "OffsetCommitValue";
    let mut r = Reader::new(bytes, what);
    let version = r.i16()?;
    if !(0..=4).contains(&version) {
        return Err(CodecError::UnsupportedVersion { what, version });
    }
    r.flexible = version >= 4;
    let offset = r.i64()?;
    let leader_epoch = if version >= 3 { r.i32()? } else { -1 };
    let metadata = r.string()?;
    let commit_timestamp = r.i64()?;
    let expire_timestamp = if version == 1 { r.i64()? } else { -1 };
    r.tagged_fields()?;
    r.finish()?;
    Ok(OffsetCommitValue {
        offset,
        leader_epoch,
        metadata,
        commit_timestamp,
        expire_timestamp,
    })
}

/// Decodes a group metadata value of any version 0-4.
pub fn decode_group_metadata_value(bytes: &[u8]) -> Result<GroupMetadataValue, CodecError> {
    let what = "GroupMetadataValue";
    let mut r = Reader::new(bytes, what);
    let version = r.i16()?;
    if !(0..=4).contains(&version) {
        return Err(CodecError::UnsupportedVersion { what, version });
    }
    r.flexible = version >= 4;
    let protocol_type = r.string()?;
    let generation = r.i32()?;
    let protocol = r.nullable_string()?;
    let leader = r.nullable_string()?;
    let current_state_timestamp = if version >= 2 { r.i64()? } else { -1 };
    let count = r.array_len()?;
    // Each member takes at least 14 bytes; refuse counts the remaining bytes cannot hold before
    // allocating for them.
    if count > r.buf.len() {
        return Err(CodecError::InvalidLength {
            what,
            length: count as i64,
        });
    }
    let mut members = Vec::with_capacity(count);
    for _ in 0..count {
        let member_id = r.string()?;
        let group_instance_id = if version >= 3 {
            r.nullable_string()?
        } else {
            None
        };
        let client_id = r.string()?;
        let client_host = r.string()?;
        let rebalance_timeout = if version >= 1 { r.i32()? } else { -1 };
        let session_timeout = r.i32()?;
        let subscription = r.bytes()?;
        let assignment = r.bytes()?;
        r.tagged_fields()?;
        members.push(MemberMetadata {
            member_id,
            group_instance_id,
            client_id,
            client_host,
            rebalance_timeout,
            session_timeout,
            subscription,
            assignment,
        });
    }
    r.tagged_fields()?;
    r.finish()?;
    Ok(GroupMetadataValue {
        protocol_type,
        generation,
        protocol,
        leader,
        current_state_timestamp,
        members,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_commit_key_bytes() {
        let key = RecordKey::OffsetCommit {
            group: "g".into(),
            topic: "t".into(),
            partition: 5,
        };
        let bytes = encode_key(&key);
        assert_eq!(
            &bytes[..],
            &[0, 1, 0, 1, b'g', 0, 1, b't', 0, 0, 0, 5],
            "version 1, group, topic, partition"
        );
        assert_eq!(decode_key(&bytes), Ok(key.clone()));
        // Version 0 has the same layout.
        assert_eq!(
            decode_key(&[0, 0, 0, 1, b'g', 0, 1, b't', 0, 0, 0, 5]),
            Ok(key)
        );
    }

    #[test]
    fn group_metadata_key_bytes() {
        let key = RecordKey::GroupMetadata {
            group: "grp".into(),
        };
        let bytes = encode_key(&key);
        assert_eq!(&bytes[..], &[0, 2, 0, 3, b'g', b'r', b'p']);
        assert_eq!(decode_key(&bytes), Ok(key));
    }

    #[test]
    fn other_key_versions_are_reported_not_rejected() {
        // Version 3 is ConsumerGroupMetadataKey (KIP-848).
        assert_eq!(
            decode_key(&[0, 3, 0, 1, b'g']),
            Ok(RecordKey::Other { version: 3 })
        );
        assert!(matches!(
            decode_key(&[0xFF, 0xFF]),
            Err(CodecError::UnsupportedVersion { .. })
        ));
        assert!(matches!(
            decode_key(&[0, 1, 0, 5, b'g']),
            Err(CodecError::Truncated { .. })
        ));
        assert!(matches!(
            decode_key(&[0, 2, 0, 1, b'g', 9]),
            Err(CodecError::TrailingBytes { .. })
        ));
    }

    #[test]
    fn offset_commit_value_v3_bytes() {
        let value = OffsetCommitValue {
            offset: 42,
            leader_epoch: 7,
            metadata: "m".into(),
            commit_timestamp: 1000,
            expire_timestamp: -1,
        };
        let bytes = encode_offset_commit_value(&value);
        let expected: Vec<u8> = [
            &[0u8, 3][..],          // version
            &42i64.to_be_bytes(),   // offset
            &7i32.to_be_bytes(),    // leader epoch
            &[0, 1, b'm'],          // metadata
            &1000i64.to_be_bytes(), // commit timestamp
        ]
        .concat();
        assert_eq!(&bytes[..], &expected[..]);
        assert_eq!(decode_offset_commit_value(&bytes), Ok(value));
    }

    #[test]
    fn offset_commit_value_older_versions() {
        // v1: offset, metadata, commit timestamp, expire timestamp.
        let v1: Vec<u8> = [
            &[0u8, 1][..],
            &9i64.to_be_bytes(),
            &[0, 0],
            &5i64.to_be_bytes(),
            &6i64.to_be_bytes(),
        ]
        .concat();
        assert_eq!(
            decode_offset_commit_value(&v1),
            Ok(OffsetCommitValue {
                offset: 9,
                leader_epoch: -1,
                metadata: String::new(),
                commit_timestamp: 5,
                expire_timestamp: 6,
            })
        );
        // v4 (flexible): compact string "ab" = len+1 = 3, then an empty tagged-field section.
        let v4: Vec<u8> = [
            &[0u8, 4][..],
            &9i64.to_be_bytes(),
            &3i32.to_be_bytes(),
            &[3, b'a', b'b'],
            &5i64.to_be_bytes(),
            &[0],
        ]
        .concat();
        let decoded = decode_offset_commit_value(&v4).expect("v4 decodes");
        assert_eq!(decoded.metadata, "ab");
        assert_eq!(decoded.leader_epoch, 3);
        assert!(matches!(
            decode_offset_commit_value(&[0, 5]),
            Err(CodecError::UnsupportedVersion { version: 5, .. })
        ));
    }

    fn sample_group() -> GroupMetadataValue {
        GroupMetadataValue {
            protocol_type: "consumer".into(),
            generation: 3,
            protocol: Some("range".into()),
            leader: Some("m1".into()),
            current_state_timestamp: 77,
            members: vec![MemberMetadata {
                member_id: "m1".into(),
                group_instance_id: Some("i".into()),
                client_id: "c".into(),
                client_host: "/h".into(),
                rebalance_timeout: 300_000,
                session_timeout: 45_000,
                subscription: Bytes::from_static(&[1, 2]),
                assignment: Bytes::from_static(&[3]),
            }],
        }
    }

    #[test]
    fn group_metadata_value_v3_bytes() {
        let value = sample_group();
        let bytes = encode_group_metadata_value(&value);
        let expected: Vec<u8> = [
            &[0u8, 3][..],
            &[0, 8],
            b"consumer",
            &3i32.to_be_bytes(),
            &[0, 5],
            b"range",
            &[0, 2, b'm', b'1'],
            &77i64.to_be_bytes(),
            &1i32.to_be_bytes(), // one member
            &[0, 2, b'm', b'1'],
            &[0, 1, b'i'],
            &[0, 1, b'c'],
            &[0, 2, b'/', b'h'],
            &300_000i32.to_be_bytes(),
            &45_000i32.to_be_bytes(),
            &[0, 0, 0, 2, 1, 2],
            &[0, 0, 0, 1, 3],
        ]
        .concat();
        assert_eq!(&bytes[..], &expected[..]);
        assert_eq!(decode_group_metadata_value(&bytes), Ok(value));
    }

    #[test]
    fn empty_group_metadata_has_null_protocol_and_leader() {
        let value = GroupMetadataValue {
            protocol_type: String::new(),
            generation: 1,
            protocol: None,
            leader: None,
            current_state_timestamp: -1,
            members: vec![],
        };
        let bytes = encode_group_metadata_value(&value);
        let expected: Vec<u8> = [
            &[0u8, 3][..],
            &[0, 0],
            &1i32.to_be_bytes(),
            &[0xFF, 0xFF],
            &[0xFF, 0xFF],
            &(-1i64).to_be_bytes(),
            &0i32.to_be_bytes(),
        ]
        .concat();
        assert_eq!(&bytes[..], &expected[..]);
        assert_eq!(decode_group_metadata_value(&bytes), Ok(value));
    }

    #[test]
    fn group_metadata_value_v0_and_v4() {
        // v0: no state timestamp, no group instance id, no rebalance timeout.
        let v0: Vec<u8> = [
            &[0u8, 0][..],
            &[0, 1, b'x'],
            &2i32.to_be_bytes(),
            &[0, 1, b'p'],
            &[0, 1, b'm'],
            &1i32.to_be_bytes(),
            &[0, 1, b'm'],
            &[0, 1, b'c'],
            &[0, 1, b'h'],
            &10_000i32.to_be_bytes(),
            &[0, 0, 0, 0],
            &[0, 0, 0, 0],
        ]
        .concat();
        let g = decode_group_metadata_value(&v0).expect("v0 decodes");
        assert_eq!(g.current_state_timestamp, -1);
        assert_eq!(g.members[0].rebalance_timeout, -1);
        assert_eq!(g.members[0].session_timeout, 10_000);
        assert_eq!(g.members[0].group_instance_id, None);

        // v4: compact fields and tagged-field sections (one unknown tagged field at the end).
        let v4: Vec<u8> = [
            &[0u8, 4][..],
            &[2, b'x'],
            &2i32.to_be_bytes(),
            &[0], // null protocol
            &[0], // null leader
            &5i64.to_be_bytes(),
            &[2], // one member
            &[2, b'm'],
            &[0], // null instance id
            &[2, b'c'],
            &[2, b'h'],
            &1i32.to_be_bytes(),
            &2i32.to_be_bytes(),
            &[2, 9],                // subscription [9]
            &[1],                   // empty assignment
            &[0],                   // member tagged fields
            &[1, 0, 2, 0xAB, 0xCD], // one tagged field: tag 0, 2 bytes
        ]
        .concat();
        let g = decode_group_metadata_value(&v4).expect("v4 decodes");
        assert_eq!(g.protocol, None);
        assert_eq!(g.members[0].subscription, Bytes::from_static(&[9]));
        assert!(g.members[0].assignment.is_empty());
    }

    #[test]
    fn corrupt_group_metadata_is_rejected() {
        let bytes = encode_group_metadata_value(&sample_group());
        for cut in 0..bytes.len() {
            assert!(
                decode_group_metadata_value(&bytes[..cut]).is_err(),
                "cut {cut}"
            );
        }
        // A huge member count does not allocate.
        let mut evil = encode_group_metadata_value(&GroupMetadataValue {
            members: vec![],
            ..sample_group()
        })
        .to_vec();
        let n = evil.len();
        evil[n - 4..].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(matches!(
            decode_group_metadata_value(&evil),
            Err(CodecError::InvalidLength { .. })
        ));
    }
}
