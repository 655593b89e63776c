//! Kafka 4.x's `__consumer_offsets` records of a consumer group (KIP-848), so that a group
//! survives a coordinator failover and Kafka's tools can read what Gregor writes. A key is an
//! `int16` record type and non-flexible strings; a value is version 0, flexible (compact
//! strings and arrays, tagged fields, which are skipped when read). A `None` value is a
//! tombstone.

#[cfg(test)]
#[path = "records_tests.rs"]
mod tests;

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

use super::model::{
    Assignment, ClassicMemberMetadata, ConsumerGroup, ConsumerMember, MemberState, Subscription,
};
use crate::records::{put_string, CodecError, Reader};

/// A consumer group record's key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum ConsumerKey {
    /// Type 3: the group epoch.
    GroupMetadata { group: String },
    /// Type 5: a member's subscription and client.
    MemberMetadata { group: String, member: String },
    /// Type 6: the epoch of the target assignment.
    TargetAssignmentMetadata { group: String },
    /// Type 7: a member's target assignment.
    TargetAssignmentMember { group: String, member: String },
    /// Type 8: a member's epochs, state and current assignment.
    CurrentMemberAssignment { group: String, member: String },
}

/// A consumer group record's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsumerValue {
    /// `metadata_hash`: tagged field 0, as Kafka 4.1 writes it (0: not written).
    GroupMetadata {
        epoch: i32,
        metadata_hash: i64,
    },
    MemberMetadata(MemberMetadata),
    TargetAssignmentMetadata {
        assignment_epoch: i32,
    },
    TargetAssignmentMember(Assignment),
    CurrentMemberAssignment(CurrentAssignment),
}

/// `ConsumerGroupMemberMetadataValue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberMetadata {
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscription: Subscription,
    /// Tagged field 0: set for a member that speaks the classic protocol.
    pub classic: Option<ClassicMemberMetadata>,
}

/// `ConsumerGroupCurrentMemberAssignmentValue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentAssignment {
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub state: MemberState,
    pub assigned: Assignment,
    pub pending_revocation: Assignment,
}

pub const GROUP_METADATA: i16 = 3;
pub const MEMBER_METADATA: i16 = 5;
pub const TARGET_ASSIGNMENT_METADATA: i16 = 6;
pub const TARGET_ASSIGNMENT_MEMBER: i16 = 7;
pub const CURRENT_MEMBER_ASSIGNMENT: i16 = 8;

impl ConsumerKey {
    pub fn group(&self) -> &str {
        match self {
            ConsumerKey::GroupMetadata { group }
            | ConsumerKey::MemberMetadata { group, .. }
            | ConsumerKey::TargetAssignmentMetadata { group }
            | ConsumerKey::TargetAssignmentMember { group, .. }
            | ConsumerKey::CurrentMemberAssignment { group, .. } => group,
        }
    }

    pub fn encode(&self) -> Bytes {
        let mut buf = BytesMut::new();
        let (kind, group, member) = match self {
            ConsumerKey::GroupMetadata { group } => (GROUP_METADATA, group, None),
            ConsumerKey::MemberMetadata { group, member } => (MEMBER_METADATA, group, Some(member)),
            ConsumerKey::TargetAssignmentMetadata { group } => {
                (TARGET_ASSIGNMENT_METADATA, group, None)
            }
            ConsumerKey::TargetAssignmentMember { group, member } => {
                (TARGET_ASSIGNMENT_MEMBER, group, Some(member))
            }
            ConsumerKey::CurrentMemberAssignment { group, member } => {
                (CURRENT_MEMBER_ASSIGNMENT, group, Some(member))
            }
        };
        buf.put_i16(kind);
        put_string(&mut buf, group);
        if let Some(m) = member {
            put_string(&mut buf, m);
        }
        buf.freeze()
    }

    /// Decodes a key of a consumer group record type; `None` for other record types.
    pub fn decode(bytes: &[u8]) -> Result<Option<ConsumerKey>, CodecError> {
        let mut r = Reader::new(bytes, "consumer group record key");
        let kind = r.i16()?;
        let key = match kind {
            GROUP_METADATA => ConsumerKey::GroupMetadata { group: r.string()? },
            TARGET_ASSIGNMENT_METADATA => {
                ConsumerKey::TargetAssignmentMetadata { group: r.string()? }
            }
            MEMBER_METADATA | TARGET_ASSIGNMENT_MEMBER | CURRENT_MEMBER_ASSIGNMENT => {
                let (group, member) = (r.string()?, r.string()?);
                match kind {
                    MEMBER_METADATA => ConsumerKey::MemberMetadata { group, member },
                    TARGET_ASSIGNMENT_MEMBER => {
                        ConsumerKey::TargetAssignmentMember { group, member }
                    }
                    _ => ConsumerKey::CurrentMemberAssignment { group, member },
                }
            }
            _ => return Ok(None),
        };
        r.finish()?;
        Ok(Some(key))
    }
}

fn put_uvarint(buf: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        buf.put_u8((v as u8 & 0x7F) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

fn put_compact_string(buf: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => {
            put_uvarint(buf, s.len() as u64 + 1);
            buf.put_slice(s.as_bytes());
        }
        None => put_uvarint(buf, 0),
    }
}

fn put_assignment(buf: &mut BytesMut, a: &Assignment) {
    put_uvarint(buf, a.len() as u64 + 1);
    for (topic, ps) in a {
        buf.put_u128(*topic);
        put_uvarint(buf, ps.len() as u64 + 1);
        ps.iter().for_each(|p| buf.put_i32(*p));
        buf.put_u8(0); // no tagged fields
    }
}

fn state_code(s: MemberState) -> i8 {
    match s {
        MemberState::Stable => 0,
        MemberState::UnrevokedPartitions => 1,
        MemberState::UnreleasedPartitions => 2,
    }
}

impl ConsumerValue {
    pub fn encode(&self) -> Bytes {
        let mut buf = BytesMut::new();
        buf.put_i16(0);
        match self {
            ConsumerValue::GroupMetadata {
                epoch,
                metadata_hash,
            } => {
                buf.put_i32(*epoch);
                if *metadata_hash != 0 {
                    // One tagged field: tag 0, 8 bytes.
                    buf.put_slice(&[1, 0, 8]);
                    buf.put_i64(*metadata_hash);
                    return buf.freeze();
                }
            }
            ConsumerValue::TargetAssignmentMetadata { assignment_epoch } => {
                buf.put_i32(*assignment_epoch)
            }
            ConsumerValue::TargetAssignmentMember(a) => put_assignment(&mut buf, a),
            ConsumerValue::MemberMetadata(m) => {
                put_member_metadata(&mut buf, m);
                if let Some(c) = &m.classic {
                    let field = classic_field(c);
                    // One tagged field: tag 0, its size, the struct.
                    put_uvarint(&mut buf, 1);
                    put_uvarint(&mut buf, 0);
                    put_uvarint(&mut buf, field.len() as u64);
                    buf.put_slice(&field);
                    return buf.freeze();
                }
            }
            ConsumerValue::CurrentMemberAssignment(c) => {
                buf.put_i32(c.member_epoch);
                buf.put_i32(c.previous_member_epoch);
                buf.put_i8(state_code(c.state));
                put_assignment(&mut buf, &c.assigned);
                put_assignment(&mut buf, &c.pending_revocation);
            }
        }
        buf.put_u8(0); // no tagged fields
        buf.freeze()
    }

    /// Decodes the value of a record whose key is `key`.
    pub fn decode(key: &ConsumerKey, bytes: &[u8]) -> Result<ConsumerValue, CodecError> {
        let mut r = Reader::new(bytes, "consumer group record value");
        let version = r.i16()?;
        if version != 0 {
            return Err(CodecError::UnsupportedVersion {
                what: r.what,
                version,
            });
        }
        r.flexible = true;
        let value = match key {
            ConsumerKey::GroupMetadata { .. } => {
                let epoch = r.i32()?;
                let mut metadata_hash = 0;
                r.tagged_fields_each(|tag, b| {
                    if let (0, Ok(b)) = (tag, <[u8; 8]>::try_from(b)) {
                        metadata_hash = i64::from_be_bytes(b);
                    }
                })?;
                r.finish()?;
                return Ok(ConsumerValue::GroupMetadata {
                    epoch,
                    metadata_hash,
                });
            }
            ConsumerKey::TargetAssignmentMetadata { .. } => {
                ConsumerValue::TargetAssignmentMetadata {
                    assignment_epoch: r.i32()?,
                }
            }
            ConsumerKey::TargetAssignmentMember { .. } => {
                ConsumerValue::TargetAssignmentMember(read_assignment(&mut r)?)
            }
            ConsumerKey::MemberMetadata { .. } => {
                let mut m = read_member_metadata(&mut r)?;
                let mut classic = None;
                r.tagged_fields_each(|tag, b| {
                    if tag == 0 {
                        classic = Some(b);
                    }
                })?;
                r.finish()?;
                m.classic = classic.map(read_classic_field).transpose()?;
                return Ok(ConsumerValue::MemberMetadata(m));
            }
            ConsumerKey::CurrentMemberAssignment { .. } => {
                ConsumerValue::CurrentMemberAssignment(read_current(&mut r)?)
            }
        };
        r.tagged_fields()?;
        r.finish()?;
        Ok(value)
    }
}

fn put_member_metadata(buf: &mut BytesMut, m: &MemberMetadata) {
    let s = &m.subscription;
    put_compact_string(buf, m.instance_id.as_deref());
    put_compact_string(buf, s.rack.as_deref());
    put_compact_string(buf, Some(&m.client_id));
    put_compact_string(buf, Some(&m.client_host));
    put_uvarint(buf, s.topic_names.len() as u64 + 1);
    s.topic_names
        .iter()
        .for_each(|t| put_compact_string(buf, Some(t)));
    put_compact_string(buf, s.topic_regex.as_deref());
    buf.put_i32(s.rebalance_timeout_ms);
    put_compact_string(buf, s.server_assignor.as_deref());
}

/// The `ClassicMemberMetadata` struct of tagged field 0, as its own bytes.
fn classic_field(c: &ClassicMemberMetadata) -> BytesMut {
    let mut b = BytesMut::new();
    b.put_i32(c.session_timeout_ms);
    put_uvarint(&mut b, c.supported_protocols.len() as u64 + 1);
    for (name, metadata) in &c.supported_protocols {
        put_compact_string(&mut b, Some(name));
        put_uvarint(&mut b, metadata.len() as u64 + 1);
        b.put_slice(metadata);
        b.put_u8(0); // no tagged fields
    }
    b.put_u8(0); // no tagged fields
    b
}

fn read_classic_field(bytes: &[u8]) -> Result<ClassicMemberMetadata, CodecError> {
    let mut r = Reader::new(bytes, "classic member metadata");
    r.flexible = true;
    let session_timeout_ms = r.i32()?;
    let count = checked_count(&mut r, 2)?;
    let mut supported_protocols = Vec::with_capacity(count);
    for _ in 0..count {
        let name = r.string()?;
        let metadata = r.bytes()?;
        r.tagged_fields()?;
        supported_protocols.push((name, metadata));
    }
    r.tagged_fields()?;
    r.finish()?;
    Ok(ClassicMemberMetadata {
        session_timeout_ms,
        supported_protocols,
    })
}

fn read_member_metadata(r: &mut Reader<'_>) -> Result<MemberMetadata, CodecError> {
    let instance_id = r.nullable_string()?;
    let rack = r.nullable_string()?;
    let client_id = r.string()?;
    let client_host = r.string()?;
    let count = checked_count(r, 1)?;
    let mut topic_names = std::collections::BTreeSet::new();
    for _ in 0..count {
        topic_names.insert(r.string()?);
    }
    let topic_regex = r.nullable_string()?;
    let rebalance_timeout_ms = r.i32()?;
    let server_assignor = r.nullable_string()?;
    let subscription = Subscription {
        topic_names,
        topic_regex,
        server_assignor,
        rack,
        rebalance_timeout_ms,
    };
    Ok(MemberMetadata {
        instance_id,
        client_id,
        client_host,
        subscription,
        classic: None,
    })
}

fn read_current(r: &mut Reader<'_>) -> Result<CurrentAssignment, CodecError> {
    let member_epoch = r.i32()?;
    let previous_member_epoch = r.i32()?;
    let state = match r.take(1)?[0] as i8 {
        0 => MemberState::Stable,
        1 => MemberState::UnrevokedPartitions,
        2 => MemberState::UnreleasedPartitions,
        code => {
            return Err(CodecError::UnknownCode {
                what: "member state",
                code: code.into(),
            })
        }
    };
    let assigned = read_assignment(r)?;
    let pending_revocation = read_assignment(r)?;
    Ok(CurrentAssignment {
        member_epoch,
        previous_member_epoch,
        state,
        assigned,
        pending_revocation,
    })
}

/// An array's element count, checked against the bytes left (each element takes at least
/// `min_size` bytes) before any loop runs on it.
fn checked_count(r: &mut Reader<'_>, min_size: usize) -> Result<usize, CodecError> {
    let n = r.array_len()?;
    if n.saturating_mul(min_size) > r.buf.len() {
        return Err(CodecError::InvalidLength {
            what: r.what,
            length: n as i64,
        });
    }
    Ok(n)
}

fn read_assignment(r: &mut Reader<'_>) -> Result<Assignment, CodecError> {
    let topics = checked_count(r, 18)?;
    let mut a = Assignment::new();
    for _ in 0..topics {
        let topic = u128::from_be_bytes(r.take(16)?.try_into().expect("16 bytes"));
        let n = checked_count(r, 4)?;
        let mut ps = std::collections::BTreeSet::new();
        for _ in 0..n {
            ps.insert(r.i32()?);
        }
        r.tagged_fields()?;
        if !ps.is_empty() {
            a.entry(topic).or_default().extend(ps);
        }
    }
    Ok(a)
}

/// A member's metadata record.
pub fn member_metadata_record(group_id: &str, m: &ConsumerMember) -> (ConsumerKey, ConsumerValue) {
    (
        ConsumerKey::MemberMetadata {
            group: group_id.to_string(),
            member: m.member_id.clone(),
        },
        ConsumerValue::MemberMetadata(MemberMetadata {
            instance_id: m.instance_id.clone(),
            client_id: m.client_id.clone(),
            client_host: m.client_host.clone(),
            subscription: m.subscription.clone(),
            classic: m.classic.clone(),
        }),
    )
}

/// A member's current assignment record.
pub fn current_record(group_id: &str, m: &ConsumerMember) -> (ConsumerKey, ConsumerValue) {
    (
        ConsumerKey::CurrentMemberAssignment {
            group: group_id.to_string(),
            member: m.member_id.clone(),
        },
        ConsumerValue::CurrentMemberAssignment(CurrentAssignment {
            member_epoch: m.member_epoch,
            previous_member_epoch: m.previous_member_epoch,
            state: m.state,
            assigned: m.assigned.clone(),
            pending_revocation: m.pending_revocation.clone(),
        }),
    )
}

/// A member's target assignment record.
pub fn target_record(group_id: &str, member: &str, a: &Assignment) -> (ConsumerKey, ConsumerValue) {
    (
        ConsumerKey::TargetAssignmentMember {
            group: group_id.to_string(),
            member: member.to_string(),
        },
        ConsumerValue::TargetAssignmentMember(a.clone()),
    )
}

/// The group's epoch record.
pub fn group_metadata_record(group: &ConsumerGroup) -> (ConsumerKey, ConsumerValue) {
    (
        ConsumerKey::GroupMetadata {
            group: group.group_id.clone(),
        },
        ConsumerValue::GroupMetadata {
            epoch: group.group_epoch,
            metadata_hash: group.metadata_hash,
        },
    )
}

/// The target assignment's epoch record.
pub fn target_metadata_record(group: &ConsumerGroup) -> (ConsumerKey, ConsumerValue) {
    (
        ConsumerKey::TargetAssignmentMetadata {
            group: group.group_id.clone(),
        },
        ConsumerValue::TargetAssignmentMetadata {
            assignment_epoch: group.target_epoch,
        },
    )
}

/// Every record that describes `group` whole, as a compaction would leave them: each member's
/// metadata, the group epoch, each member's target, the target's epoch and each member's current
/// assignment (the order a whole write uses).
pub fn group_records(group: &ConsumerGroup) -> Vec<(ConsumerKey, ConsumerValue)> {
    let id = group.group_id.as_str();
    let mut out: Vec<_> = group
        .members
        .values()
        .map(|m| member_metadata_record(id, m))
        .collect();
    out.push(group_metadata_record(group));
    out.extend(group.target.iter().map(|(m, a)| target_record(id, m, a)));
    out.push(target_metadata_record(group));
    out.extend(group.members.values().map(|m| current_record(id, m)));
    out
}

/// Applies one record (a tombstone when `value` is `None`) to the groups being loaded.
pub fn replay(
    groups: &mut std::collections::BTreeMap<String, ConsumerGroup>,
    key: &ConsumerKey,
    value: Option<&ConsumerValue>,
) {
    let group = groups
        .entry(key.group().to_string())
        .or_insert_with(|| ConsumerGroup::new(key.group()));
    match (key, value) {
        (ConsumerKey::GroupMetadata { group: id }, None) => {
            groups.remove(id);
        }
        (
            ConsumerKey::GroupMetadata { .. },
            Some(ConsumerValue::GroupMetadata {
                epoch,
                metadata_hash,
            }),
        ) => {
            group.group_epoch = *epoch;
            group.metadata_hash = *metadata_hash;
        }
        (
            ConsumerKey::TargetAssignmentMetadata { .. },
            Some(ConsumerValue::TargetAssignmentMetadata { assignment_epoch }),
        ) => group.target_epoch = *assignment_epoch,
        (
            ConsumerKey::TargetAssignmentMember { member, .. },
            Some(ConsumerValue::TargetAssignmentMember(a)),
        ) => {
            Arc::make_mut(&mut group.target).insert(member.clone(), a.clone());
        }
        (ConsumerKey::TargetAssignmentMember { member, .. }, None) => {
            Arc::make_mut(&mut group.target).remove(member);
        }
        (ConsumerKey::MemberMetadata { member, .. }, Some(ConsumerValue::MemberMetadata(meta))) => {
            let mut m =
                group.members.get(member).cloned().unwrap_or_else(|| {
                    ConsumerMember::new(member.clone(), meta.instance_id.clone())
                });
            m.instance_id = meta.instance_id.clone();
            m.client_id = meta.client_id.clone();
            m.client_host = meta.client_host.clone();
            m.subscription = meta.subscription.clone();
            m.classic = meta.classic.clone();
            group.put_member_unchecked(m);
        }
        (ConsumerKey::MemberMetadata { member, .. }, None) => {
            let target = group.target.get(member).cloned();
            group.remove_member(member);
            // The target member record has its own tombstone.
            if let Some(t) = target {
                Arc::make_mut(&mut group.target).insert(member.clone(), t);
            }
        }
        (
            ConsumerKey::CurrentMemberAssignment { member, .. },
            Some(ConsumerValue::CurrentMemberAssignment(c)),
        ) => {
            let mut m = group
                .members
                .get(member)
                .cloned()
                .unwrap_or_else(|| ConsumerMember::new(member.clone(), None));
            m.member_epoch = c.member_epoch;
            m.previous_member_epoch = c.previous_member_epoch;
            m.state = c.state;
            m.assigned = c.assigned.clone();
            m.pending_revocation = c.pending_revocation.clone();
            group.put_member_unchecked(m);
        }
        // A current assignment's tombstone comes with its member's; a mismatched value is
        // skipped (the key decides the value's type, so it cannot happen for decoded records).
        _ => {}
    }
}
