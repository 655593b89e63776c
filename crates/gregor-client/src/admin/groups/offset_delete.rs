//! OffsetDelete (KIP-496): removes a group's committed offsets of some partitions, what
//! `kafka-consumer-groups.sh --delete-offsets` sends. The coordinator refuses the whole request
//! (an unknown group, a non-consumer group with members) with a group-level error, and each
//! partition of a topic the group is subscribed to with GROUP_SUBSCRIBED_TO_TOPIC.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::{GroupId, OffsetDeleteRequest, OffsetDeleteResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::admin::base::{missing_result, Admin, EntityResult};
use crate::client::Target;
use crate::error::{Error, KafkaError, Result};
use crate::retry::{action_for_code, RetryAction};
use crate::types::{group_by_topic, TopicPartition};

/// What OffsetDelete answered for a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletedOffsets {
    /// The group-level error (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP...): nothing was deleted.
    pub error: Option<KafkaError>,
    /// One result per partition asked, in the order asked (duplicates once). With a group-level
    /// error every partition carries it, as Kafka's admin reports each partition's result.
    pub partitions: EntityResult<TopicPartition, ()>,
}

impl DeletedOffsets {
    /// The group-level error, else the first partition's: what Kafka's admin fails the whole
    /// call with.
    pub fn first_error(&self) -> Option<&KafkaError> {
        self.error
            .as_ref()
            .or_else(|| self.partitions.iter().find_map(|(_, r)| r.as_ref().err()))
    }
}

/// An OffsetDelete request for `group`'s offsets of `partitions`.
pub fn offset_delete_request(group: &str, partitions: &[TopicPartition]) -> OffsetDeleteRequest {
    let topics = group_by_topic(partitions.iter())
        .into_iter()
        .map(|(topic, ps)| {
            OffsetDeleteRequestTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic)))
                .with_partitions(
                    ps.into_iter()
                        .map(|p| OffsetDeleteRequestPartition::default().with_partition_index(p))
                        .collect(),
                )
        })
        .collect();
    OffsetDeleteRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_topics(topics)
}

/// The results of the `asked` partitions in an OffsetDelete response; a partition the answer
/// leaves out is an error (UNKNOWN_SERVER_ERROR saying so).
pub fn parse_offset_delete(resp: OffsetDeleteResponse, asked: &[TopicPartition]) -> DeletedOffsets {
    if let Err(e) = KafkaError::check(resp.error_code, None) {
        return DeletedOffsets {
            partitions: asked
                .iter()
                .map(|tp| (tp.clone(), Err(e.clone())))
                .collect(),
            error: Some(e),
        };
    }
    let mut answered: BTreeMap<TopicPartition, i16> = BTreeMap::new();
    for t in &resp.topics {
        for p in &t.partitions {
            let tp = TopicPartition::new(t.name.0.to_string(), p.partition_index);
            answered.insert(tp, p.error_code);
        }
    }
    let partitions = asked
        .iter()
        .map(|tp| {
            let result = match answered.get(tp) {
                Some(&code) => KafkaError::check(code, None),
                None => Err(missing_result(&format!("partition {tp}"))),
            };
            (tp.clone(), result)
        })
        .collect();
    DeletedOffsets {
        error: None,
        partitions,
    }
}

impl Admin {
    /// Deletes `group`'s committed offsets of `partitions` at the group's coordinator (Kafka's
    /// `deleteConsumerGroupOffsets`). A coordinator that moved or is loading is found again or
    /// waited for until the deadline; what the coordinator refuses comes back in the result.
    pub async fn delete_committed_offsets(
        &self,
        group: &str,
        partitions: &[TopicPartition],
    ) -> Result<DeletedOffsets> {
        let mut seen = BTreeSet::new();
        let asked: Vec<TopicPartition> = partitions
            .iter()
            .filter(|tp| seen.insert(*tp))
            .cloned()
            .collect();
        let what = format!("OffsetDelete for group '{group}'");
        let target = Target::Coordinator(group.to_string());
        self.client
            .retry(&what, || async {
                let (_, resp) = self
                    .client
                    .send::<OffsetDeleteRequest, _>(&target, |_| {
                        Ok(offset_delete_request(group, &asked))
                    })
                    .await?;
                let result = parse_offset_delete(resp, &asked);
                match &result.error {
                    Some(e) if action_for_code(e.code) != RetryAction::Fail => {
                        Err(Error::kafka(what.clone(), e.clone()))
                    }
                    _ => Ok(result),
                }
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode_response, encode_request, encode_response_frame};
    use crate::error::KafkaCode;
    use kafka_protocol::messages::offset_delete_response::{
        OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
    };
    use kafka_protocol::protocol::{Decodable, Message};

    fn tps(list: &[(&str, i32)]) -> Vec<TopicPartition> {
        list.iter()
            .map(|(t, p)| TopicPartition::new(*t, *p))
            .collect()
    }

    fn response(error: i16, partitions: &[(&str, i32, i16)]) -> OffsetDeleteResponse {
        let mut topics: Vec<OffsetDeleteResponseTopic> = Vec::new();
        for (t, p, code) in partitions {
            let part = OffsetDeleteResponsePartition::default()
                .with_partition_index(*p)
                .with_error_code(*code);
            match topics.iter_mut().find(|x| x.name.0.as_str() == *t) {
                Some(x) => x.partitions.push(part),
                None => topics.push(
                    OffsetDeleteResponseTopic::default()
                        .with_name(TopicName(StrBytes::from_string(t.to_string())))
                        .with_partitions(vec![part]),
                ),
            }
        }
        let resp = OffsetDeleteResponse::default()
            .with_error_code(error)
            .with_topics(topics);
        // Through the wire, as the client reads it.
        let frame = encode_response_frame::<OffsetDeleteRequest>(&resp, 0, 1);
        decode_response::<OffsetDeleteRequest>(frame, 0).unwrap()
    }

    #[test]
    fn request_groups_partitions_by_topic() {
        let asked = tps(&[("a", 0), ("b", 3), ("a", 2)]);
        let req = offset_delete_request("g", &asked);
        let v = OffsetDeleteRequest::VERSIONS.max;
        let frame = encode_request(&req, v, 1, "c").unwrap();
        let mut body = frame.slice(4..);
        kafka_protocol::protocol::decode_request_header_from_buffer(&mut body).unwrap();
        let back = OffsetDeleteRequest::decode(&mut body, v).unwrap();
        assert_eq!(back.group_id.0.as_str(), "g");
        let sent: Vec<(String, Vec<i32>)> = back
            .topics
            .iter()
            .map(|t| {
                let ps = t.partitions.iter().map(|p| p.partition_index).collect();
                (t.name.0.to_string(), ps)
            })
            .collect();
        assert_eq!(
            sent,
            vec![("a".to_string(), vec![0, 2]), ("b".to_string(), vec![3])]
        );
    }

    #[test]
    fn partition_errors_are_kept_per_partition_in_asked_order() {
        let asked = tps(&[("t", 1), ("t", 0), ("u", 0), ("v", 0)]);
        let got = parse_offset_delete(
            response(0, &[("t", 0, 0), ("t", 1, 86), ("u", 0, 3)]),
            &asked,
        );
        assert_eq!(got.error, None);
        let codes: Vec<(i32, Option<KafkaCode>)> = got
            .partitions
            .iter()
            .map(|(tp, r)| (tp.partition, r.as_ref().err().map(|e| e.code)))
            .collect();
        assert_eq!(
            codes,
            vec![
                (1, Some(KafkaCode(86))),
                (0, None),
                (0, Some(KafkaCode::UNKNOWN_TOPIC_OR_PARTITION)),
                // Left out of the answer.
                (0, Some(KafkaCode::UNKNOWN_SERVER_ERROR)),
            ]
        );
        assert_eq!(got.first_error().map(|e| e.code), Some(KafkaCode(86)));
    }

    #[test]
    fn a_group_level_error_fails_every_partition() {
        let asked = tps(&[("t", 0), ("t", 1)]);
        let got = parse_offset_delete(response(69, &[]), &asked);
        assert_eq!(
            got.error.as_ref().map(|e| e.code),
            Some(KafkaCode::GROUP_ID_NOT_FOUND)
        );
        assert!(got
            .partitions
            .iter()
            .all(|(_, r)| r.as_ref().unwrap_err().code == KafkaCode::GROUP_ID_NOT_FOUND));
        assert_eq!(got.partitions.len(), 2);
        let clean = parse_offset_delete(response(0, &[("t", 0, 0)]), &asked[..1]);
        assert_eq!(clean.first_error(), None);
    }
}
