//! The consumer protocol's embedded formats, byte-compatible with Kafka clients.
//!
//! * JoinGroup metadata is a `ConsumerProtocolSubscription` and SyncGroup assignments are a
//!   `ConsumerProtocolAssignment`, each preceded by a big-endian `int16` version. The messages
//!   come from `kafka-protocol`; this module adds the version header and Kafka's rule that a
//!   newer version than we know is read as the newest we know (fields are only ever appended).
//! * The `sticky` strategy's subscription user data: `[topic: string, partitions: [int32]]` and,
//!   from its second version on, an `int32` generation.
//! * The `cooperative-sticky` strategy's user data: an `int32` generation.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as AssignedTopic;
use kafka_protocol::messages::consumer_protocol_subscription::TopicPartition as OwnedTopic;
use kafka_protocol::messages::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::model::Member;
use crate::AssignError;

/// Newest `ConsumerProtocolSubscription` version (3 adds the rack id).
pub const SUBSCRIPTION_VERSION: i16 = 3;
/// Newest `ConsumerProtocolAssignment` version.
pub const ASSIGNMENT_VERSION: i16 = 3;
/// The protocol type consumer groups use in JoinGroup.
pub const PROTOCOL_TYPE: &str = "consumer";

/// Partitions grouped by topic, the way the consumer protocol carries them.
pub type TopicPartitions = Vec<(String, Vec<i32>)>;

/// A member's subscription (JoinGroup protocol metadata).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    pub topics: Vec<String>,
    pub user_data: Option<Bytes>,
    /// Since version 1.
    pub owned_partitions: TopicPartitions,
    /// Since version 2; -1 when unknown.
    pub generation_id: i32,
    /// Since version 3.
    pub rack_id: Option<String>,
}

impl Default for Subscription {
    fn default() -> Self {
        Subscription {
            topics: Vec::new(),
            user_data: None,
            owned_partitions: Vec::new(),
            generation_id: -1,
            rack_id: None,
        }
    }
}

impl Subscription {
    /// The member as an assignor sees it. `generation_id` -1 counts as unknown.
    pub fn into_member(self, member_id: String, group_instance_id: Option<String>) -> Member {
        Member {
            member_id,
            group_instance_id,
            rack: self.rack_id,
            topics: self.topics,
            owned_partitions: flatten(&self.owned_partitions),
            generation: (self.generation_id >= 0).then_some(self.generation_id),
            user_data: self.user_data,
        }
    }
}

/// A member's assignment (SyncGroup assignment bytes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assignment {
    pub partitions: TopicPartitions,
    pub user_data: Option<Bytes>,
}

fn decode_err(what: &'static str, reason: impl ToString) -> AssignError {
    AssignError::Decode {
        what,
        reason: reason.to_string(),
    }
}

fn read_version(buf: &mut Bytes, what: &'static str, newest: i16) -> Result<i16, AssignError> {
    if buf.remaining() < 2 {
        return Err(decode_err(what, "missing version header"));
    }
    let version = buf.get_i16();
    if version < 0 {
        return Err(decode_err(what, format!("negative version {version}")));
    }
    Ok(version.min(newest))
}

/// Groups `(topic, partition)` pairs by topic, keeping first-seen topic order.
pub fn group_by_topic<'a>(pairs: impl IntoIterator<Item = (&'a str, i32)>) -> TopicPartitions {
    let mut out: TopicPartitions = Vec::new();
    for (t, p) in pairs {
        match out.last_mut() {
            Some((last, parts)) if last == t => parts.push(p),
            _ => match out.iter_mut().find(|(name, _)| name == t) {
                Some((_, parts)) => parts.push(p),
                None => out.push((t.to_string(), vec![p])),
            },
        }
    }
    out
}

/// Flattens topic-grouped partitions.
pub fn flatten(grouped: &TopicPartitions) -> Vec<(String, i32)> {
    grouped
        .iter()
        .flat_map(|(t, ps)| ps.iter().map(move |p| (t.clone(), *p)))
        .collect()
}

/// Encodes a subscription at `version` (0..=3), with its version header.
pub fn encode_subscription(sub: &Subscription, version: i16) -> Result<Bytes, AssignError> {
    let msg = ConsumerProtocolSubscription::default()
        .with_topics(
            sub.topics
                .iter()
                .cloned()
                .map(StrBytes::from_string)
                .collect(),
        )
        .with_user_data(sub.user_data.clone())
        .with_owned_partitions(
            sub.owned_partitions
                .iter()
                .map(|(t, ps)| {
                    OwnedTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(t.clone())))
                        .with_partitions(ps.clone())
                })
                .collect(),
        )
        .with_generation_id(sub.generation_id)
        .with_rack_id(sub.rack_id.clone().map(StrBytes::from_string));
    let mut buf = BytesMut::new();
    buf.put_i16(version);
    msg.encode(&mut buf, version)
        .map_err(|e| decode_err("subscription", e))?;
    Ok(buf.freeze())
}

/// Decodes subscription bytes; returns the version they were written with (capped at the newest
/// known) and the subscription.
pub fn decode_subscription(bytes: &[u8]) -> Result<(i16, Subscription), AssignError> {
    let mut buf = Bytes::copy_from_slice(bytes);
    let version = read_version(&mut buf, "subscription", SUBSCRIPTION_VERSION)?;
    let msg = ConsumerProtocolSubscription::decode(&mut buf, version)
        .map_err(|e| decode_err("subscription", e))?;
    Ok((
        version,
        Subscription {
            topics: msg.topics.into_iter().map(|t| t.to_string()).collect(),
            user_data: msg.user_data,
            owned_partitions: msg
                .owned_partitions
                .into_iter()
                .map(|tp| (tp.topic.to_string(), tp.partitions))
                .collect(),
            generation_id: msg.generation_id,
            rack_id: msg.rack_id.map(|r| r.to_string()),
        },
    ))
}

/// Encodes an assignment at `version` (0..=3), with its version header.
pub fn encode_assignment(assignment: &Assignment, version: i16) -> Result<Bytes, AssignError> {
    let msg = ConsumerProtocolAssignment::default()
        .with_assigned_partitions(
            assignment
                .partitions
                .iter()
                .map(|(t, ps)| {
                    AssignedTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(t.clone())))
                        .with_partitions(ps.clone())
                })
                .collect(),
        )
        .with_user_data(assignment.user_data.clone());
    let mut buf = BytesMut::new();
    buf.put_i16(version);
    msg.encode(&mut buf, version)
        .map_err(|e| decode_err("assignment", e))?;
    Ok(buf.freeze())
}

/// Decodes assignment bytes. Empty bytes are an empty assignment, as Kafka clients treat them.
pub fn decode_assignment(bytes: &[u8]) -> Result<(i16, Assignment), AssignError> {
    if bytes.is_empty() {
        return Ok((0, Assignment::default()));
    }
    let mut buf = Bytes::copy_from_slice(bytes);
    let version = read_version(&mut buf, "assignment", ASSIGNMENT_VERSION)?;
    let msg = ConsumerProtocolAssignment::decode(&mut buf, version)
        .map_err(|e| decode_err("assignment", e))?;
    Ok((
        version,
        Assignment {
            partitions: msg
                .assigned_partitions
                .into_iter()
                .map(|tp| (tp.topic.to_string(), tp.partitions))
                .collect(),
            user_data: msg.user_data,
        },
    ))
}

/// The `sticky` strategy's user data: the member's previous assignment and generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StickyUserData {
    pub partitions: TopicPartitions,
    /// `None` in the first version of the format.
    pub generation: Option<i32>,
}

/// Encodes sticky user data (with the generation when present).
pub fn encode_sticky_user_data(data: &StickyUserData) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_i32(data.partitions.len() as i32);
    for (topic, partitions) in &data.partitions {
        buf.put_i16(topic.len() as i16);
        buf.put_slice(topic.as_bytes());
        buf.put_i32(partitions.len() as i32);
        for p in partitions {
            buf.put_i32(*p);
        }
    }
    if let Some(g) = data.generation {
        buf.put_i32(g);
    }
    buf.freeze()
}

/// Decodes sticky user data, with or without the trailing generation. Also accepts the framing
/// kafka-python (3.x) writes: the same struct behind a 2-byte version header (0 or 1), so that a
/// Gregor leader honours kafka-python members' previous assignments.
pub fn decode_sticky_user_data(bytes: &[u8]) -> Result<StickyUserData, AssignError> {
    match decode_sticky_struct(bytes) {
        Ok(data) => Ok(data),
        Err(e) => match bytes {
            [0, 0 | 1, rest @ ..] => decode_sticky_struct(rest).map_err(|_| e),
            _ => Err(e),
        },
    }
}

fn decode_sticky_struct(bytes: &[u8]) -> Result<StickyUserData, AssignError> {
    let what = "sticky user data";
    let mut buf = bytes;
    let need = |buf: &[u8], n: usize| {
        if buf.len() < n {
            Err(decode_err(what, "truncated"))
        } else {
            Ok(())
        }
    };
    need(buf, 4)?;
    let topics = buf.get_i32();
    if topics < 0 {
        return Err(decode_err(what, "negative topic count"));
    }
    let mut partitions = Vec::new();
    for _ in 0..topics {
        need(buf, 2)?;
        let len = buf.get_i16();
        if len < 0 {
            return Err(decode_err(what, "null topic name"));
        }
        need(buf, len as usize)?;
        let topic = std::str::from_utf8(&buf[..len as usize])
            .map_err(|e| decode_err(what, e))?
            .to_string();
        buf.advance(len as usize);
        need(buf, 4)?;
        let count = buf.get_i32();
        if count < 0 {
            return Err(decode_err(what, "negative partition count"));
        }
        need(buf, count as usize * 4)?;
        let ps = (0..count).map(|_| buf.get_i32()).collect();
        partitions.push((topic, ps));
    }
    let generation = if buf.len() >= 4 {
        Some(buf.get_i32())
    } else {
        None
    };
    Ok(StickyUserData {
        partitions,
        generation,
    })
}

/// Encodes the `cooperative-sticky` user data (the generation).
pub fn encode_cooperative_user_data(generation: i32) -> Bytes {
    Bytes::copy_from_slice(&generation.to_be_bytes())
}

/// Decodes the `cooperative-sticky` user data.
pub fn decode_cooperative_user_data(bytes: &[u8]) -> Result<i32, AssignError> {
    let b: [u8; 4] = bytes
        .get(..4)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| decode_err("cooperative-sticky user data", "truncated"))?;
    Ok(i32::from_be_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes a Kafka 3.x Java consumer sends for topics [t0, t1], no user data, owned t0-0 and
    /// t0-2, generation 5, rack "r1" (version 3), written out field by field from the schema.
    fn java_subscription_v3() -> Vec<u8> {
        let mut v = vec![0x00, 0x03]; // version
        v.extend([0, 0, 0, 2]); // topics count
        v.extend([0, 2, b't', b'0', 0, 2, b't', b'1']);
        v.extend([0xff, 0xff, 0xff, 0xff]); // null user data
        v.extend([0, 0, 0, 1]); // owned topics
        v.extend([0, 2, b't', b'0', 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2]);
        v.extend([0, 0, 0, 5]); // generation
        v.extend([0, 2, b'r', b'1']); // rack
        v
    }

    #[test]
    fn subscription_v3_bytes_match_kafka() {
        let sub = Subscription {
            topics: vec!["t0".into(), "t1".into()],
            user_data: None,
            owned_partitions: vec![("t0".into(), vec![0, 2])],
            generation_id: 5,
            rack_id: Some("r1".into()),
        };
        let bytes = encode_subscription(&sub, 3).expect("encodes");
        assert_eq!(bytes.as_ref(), java_subscription_v3().as_slice());
        let (v, back) = decode_subscription(&bytes).expect("decodes");
        assert_eq!((v, back), (3, sub));
    }

    #[test]
    fn subscription_v0_has_topics_and_user_data_only() {
        let sub = Subscription {
            topics: vec!["a".into()],
            user_data: Some(Bytes::from_static(&[1, 2])),
            owned_partitions: vec![("a".into(), vec![1])],
            generation_id: 7,
            rack_id: Some("x".into()),
        };
        let bytes = encode_subscription(&sub, 0).expect("encodes");
        assert_eq!(
            bytes.as_ref(),
            &[0, 0, 0, 0, 0, 1, 0, 1, b'a', 0, 0, 0, 2, 1, 2][..]
        );
        let (_, back) = decode_subscription(&bytes).expect("decodes");
        assert_eq!(back.owned_partitions, vec![]);
        assert_eq!(back.generation_id, -1);
        assert_eq!(back.rack_id, None);
    }

    #[test]
    fn newer_versions_decode_as_newest_known() {
        let mut bytes = java_subscription_v3();
        bytes[1] = 9; // a future version with the same leading fields
        bytes.extend([0xde, 0xad]); // and fields we do not know
        let (v, sub) = decode_subscription(&bytes).expect("decodes");
        assert_eq!(v, 3);
        assert_eq!(sub.rack_id.as_deref(), Some("r1"));
    }

    #[test]
    fn truncated_or_garbage_subscription_is_an_error() {
        let bytes = java_subscription_v3();
        for cut in 0..bytes.len() - 1 {
            assert!(decode_subscription(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        assert!(decode_subscription(&[0xff, 0xff]).is_err());
    }

    #[test]
    fn assignment_bytes_match_kafka() {
        let a = Assignment {
            partitions: vec![("t".into(), vec![3])],
            user_data: Some(Bytes::from_static(b"u")),
        };
        let bytes = encode_assignment(&a, 0).expect("encodes");
        assert_eq!(
            bytes.as_ref(),
            &[0, 0, 0, 0, 0, 1, 0, 1, b't', 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 1, b'u'][..]
        );
        assert_eq!(decode_assignment(&bytes).expect("decodes"), (0, a));
        assert_eq!(
            decode_assignment(&[]).expect("empty"),
            (0, Assignment::default())
        );
        assert!(decode_assignment(&[0, 1, 0]).is_err());
    }

    #[test]
    fn sticky_user_data_round_trips_both_versions() {
        let v1 = StickyUserData {
            partitions: vec![("t0".into(), vec![0, 1]), ("t1".into(), vec![2])],
            generation: Some(4),
        };
        let bytes = encode_sticky_user_data(&v1);
        let expected: Vec<u8> = [
            &[0, 0, 0, 2][..],
            &[0, 2, b't', b'0', 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1],
            &[0, 2, b't', b'1', 0, 0, 0, 1, 0, 0, 0, 2],
            &[0, 0, 0, 4],
        ]
        .concat();
        assert_eq!(bytes.as_ref(), expected.as_slice());
        assert_eq!(decode_sticky_user_data(&bytes).expect("v1"), v1);
        let v0 = StickyUserData {
            generation: None,
            ..v1
        };
        let bytes = encode_sticky_user_data(&v0);
        assert_eq!(decode_sticky_user_data(&bytes).expect("v0"), v0);
        assert!(decode_sticky_user_data(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode_sticky_user_data(&[0xff, 0xff, 0xff, 0xff]).is_err());
    }

    /// kafka-python 3.0.12's `StickyAssignorUserData([('t0', [0, 1])], 4).encode()`.
    #[test]
    fn sticky_user_data_from_kafka_python_is_read() {
        let bytes: Vec<u8> = [
            &[0, 1][..],
            &[
                0, 0, 0, 1, 0, 2, b't', b'0', 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1,
            ],
            &[0, 0, 0, 4],
        ]
        .concat();
        let data = decode_sticky_user_data(&bytes).expect("kafka-python framing");
        assert_eq!(data.partitions, vec![("t0".to_string(), vec![0, 1])]);
        assert_eq!(data.generation, Some(4));
        // A header-looking prefix in front of garbage is still an error.
        assert!(decode_sticky_user_data(&[0, 1, 0xff, 0xff, 0xff, 0xff]).is_err());
    }

    #[test]
    fn cooperative_user_data_is_the_generation() {
        assert_eq!(encode_cooperative_user_data(3).as_ref(), &[0, 0, 0, 3]);
        assert_eq!(decode_cooperative_user_data(&[0, 0, 1, 0]), Ok(256));
        assert!(decode_cooperative_user_data(&[0, 0]).is_err());
    }
}
