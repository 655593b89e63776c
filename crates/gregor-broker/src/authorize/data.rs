//! The partition data APIs: Produce (WRITE on each topic), ListOffsets (DESCRIBE),
//! OffsetForLeaderEpoch (CLUSTER_ACTION, else DESCRIBE on each topic), DeleteRecords (DELETE)
//! and InitProducerId (WRITE on the transactional id; for an idempotent producer
//! IDEMPOTENT_WRITE on the cluster or WRITE on some topic).

use gregor_meta::acl::{AclOperation, AclResourceType, CLUSTER_RESOURCE_NAME};
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    DeleteRecordsResponse, InitProducerIdResponse, ListOffsetsResponse,
    OffsetForLeaderEpochResponse, ProduceResponse, ProducerId, RequestKind, ResponseKind,
};
use kafka_protocol::ResponseError;

use super::common::{no_fixup, on_response, run_unless_empty, split, Decide, Fixup, Gate};
use crate::connection::Reply;

const TOPIC_AUTHORIZATION_FAILED: ResponseError = ResponseError::TopicAuthorizationFailed;

pub(super) fn gate(d: &dyn Decide, request: RequestKind) -> Gate {
    match request {
        RequestKind::Produce(r) => produce(d, r),
        RequestKind::ListOffsets(r) => list_offsets(d, r),
        RequestKind::OffsetForLeaderEpoch(r) => offset_for_leader_epoch(d, r),
        RequestKind::DeleteRecords(r) => delete_records(d, r),
        RequestKind::InitProducerId(r) => init_producer_id(d, r),
        RequestKind::WriteTxnMarkers(r) => write_txn_markers(d, r),
        RequestKind::DescribeProducers(r) => describe_producers(d, r),
        other => Gate::Run(other, no_fixup()),
    }
}

fn list_offsets(d: &dyn Decide, mut r: kafka_protocol::messages::ListOffsetsRequest) -> Gate {
    let (kept, refused) = split(
        d,
        AclOperation::Describe,
        AclResourceType::Topic,
        std::mem::take(&mut r.topics),
        |t| t.name.0.as_str(),
    );
    let answers: Vec<ListOffsetsTopicResponse> = refused
        .iter()
        .map(|t| {
            let mut out = ListOffsetsTopicResponse::default();
            out.name = t.name.clone();
            out.partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut a = ListOffsetsPartitionResponse::default();
                    a.partition_index = p.partition_index;
                    a.error_code = TOPIC_AUTHORIZATION_FAILED.code();
                    a.timestamp = -1;
                    a.offset = -1;
                    a.leader_epoch = -1;
                    a
                })
                .collect();
            out
        })
        .collect();
    r.topics = kept;
    let fixup = on_response(move |_, resp| match resp {
        ResponseKind::ListOffsets(mut resp) => {
            resp.topics.extend(answers);
            ResponseKind::ListOffsets(resp)
        }
        other => other,
    });
    let empty = ResponseKind::ListOffsets(ListOffsetsResponse::default());
    run_unless_empty(
        d,
        r.topics.is_empty(),
        RequestKind::ListOffsets(r),
        empty,
        fixup,
    )
}

fn offset_for_leader_epoch(
    d: &dyn Decide,
    mut r: kafka_protocol::messages::OffsetForLeaderEpochRequest,
) -> Gate {
    if d.allows_quietly(
        AclOperation::ClusterAction,
        AclResourceType::Cluster,
        CLUSTER_RESOURCE_NAME,
    ) {
        return Gate::Run(RequestKind::OffsetForLeaderEpoch(r), no_fixup());
    }
    let (kept, refused) = split(
        d,
        AclOperation::Describe,
        AclResourceType::Topic,
        std::mem::take(&mut r.topics),
        |t| t.topic.0.as_str(),
    );
    let answers: Vec<OffsetForLeaderTopicResult> = refused
        .iter()
        .map(|t| {
            let mut out = OffsetForLeaderTopicResult::default();
            out.topic = t.topic.clone();
            out.partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut a = EpochEndOffset::default();
                    a.partition = p.partition;
                    a.error_code = TOPIC_AUTHORIZATION_FAILED.code();
                    a.leader_epoch = -1;
                    a.end_offset = -1;
                    a
                })
                .collect();
            out
        })
        .collect();
    r.topics = kept;
    let fixup = on_response(move |_, resp| match resp {
        ResponseKind::OffsetForLeaderEpoch(mut resp) => {
            resp.topics.extend(answers);
            ResponseKind::OffsetForLeaderEpoch(resp)
        }
        other => other,
    });
    let empty = ResponseKind::OffsetForLeaderEpoch(OffsetForLeaderEpochResponse::default());
    run_unless_empty(
        d,
        r.topics.is_empty(),
        RequestKind::OffsetForLeaderEpoch(r),
        empty,
        fixup,
    )
}

fn delete_records(d: &dyn Decide, mut r: kafka_protocol::messages::DeleteRecordsRequest) -> Gate {
    let (kept, refused) = split(
        d,
        AclOperation::Delete,
        AclResourceType::Topic,
        std::mem::take(&mut r.topics),
        |t| t.name.0.as_str(),
    );
    let answers: Vec<DeleteRecordsTopicResult> = refused
        .iter()
        .map(|t| {
            let mut out = DeleteRecordsTopicResult::default();
            out.name = t.name.clone();
            out.partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut a = DeleteRecordsPartitionResult::default();
                    a.partition_index = p.partition_index;
                    a.low_watermark = -1;
                    a.error_code = TOPIC_AUTHORIZATION_FAILED.code();
                    a
                })
                .collect();
            out
        })
        .collect();
    r.topics = kept;
    let fixup = on_response(move |_, resp| match resp {
        ResponseKind::DeleteRecords(mut resp) => {
            resp.topics.extend(answers);
            ResponseKind::DeleteRecords(resp)
        }
        other => other,
    });
    let empty = ResponseKind::DeleteRecords(DeleteRecordsResponse::default());
    run_unless_empty(
        d,
        r.topics.is_empty(),
        RequestKind::DeleteRecords(r),
        empty,
        fixup,
    )
}

fn init_producer_id(d: &dyn Decide, r: kafka_protocol::messages::InitProducerIdRequest) -> Gate {
    let transactional_id = r.transactional_id.as_ref().map(|t| t.0.to_string());
    match init_producer_id_refusal(d, transactional_id.as_deref()) {
        None => Gate::Run(RequestKind::InitProducerId(r), no_fixup()),
        Some(e) => {
            let mut resp = InitProducerIdResponse::default();
            resp.error_code = e.code();
            resp.producer_id = ProducerId(-1);
            resp.producer_epoch = -1;
            Gate::Answer(Reply::Respond(ResponseKind::InitProducerId(resp)))
        }
    }
}

/// Why InitProducerId is refused, if it is.
fn init_producer_id_refusal(
    d: &dyn Decide,
    transactional_id: Option<&str>,
) -> Option<ResponseError> {
    match transactional_id {
        Some(id) => (!d.allows(AclOperation::Write, AclResourceType::TransactionalId, id))
            .then_some(ResponseError::TransactionalIdAuthorizationFailed),
        None => {
            let allowed = d.allows_quietly(
                AclOperation::IdempotentWrite,
                AclResourceType::Cluster,
                CLUSTER_RESOURCE_NAME,
            ) || d.allows_some(AclOperation::Write, AclResourceType::Topic);
            (!allowed).then_some(ResponseError::ClusterAuthorizationFailed)
        }
    }
}

/// Produce: a transactional id needs WRITE on it (else every partition answers
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED); each topic needs WRITE. An `acks=0` produce with a
/// refused partition closes the connection, as any failed `acks=0` produce does.
fn produce(d: &dyn Decide, mut r: kafka_protocol::messages::ProduceRequest) -> Gate {
    let acks0 = r.acks == 0;
    let txn_refused = r
        .transactional_id
        .as_ref()
        .is_some_and(|id| !d.allows(AclOperation::Write, AclResourceType::TransactionalId, id));
    let topics = std::mem::take(&mut r.topic_data);
    let (kept, refused) = if txn_refused {
        (Vec::new(), topics)
    } else {
        split(
            d,
            AclOperation::Write,
            AclResourceType::Topic,
            topics,
            |t| t.name.0.as_str(),
        )
    };
    let error = if txn_refused {
        ResponseError::TransactionalIdAuthorizationFailed
    } else {
        TOPIC_AUTHORIZATION_FAILED
    };
    let answers: Vec<TopicProduceResponse> = refused
        .iter()
        .map(|t| {
            let mut out = TopicProduceResponse::default();
            out.name = t.name.clone();
            out.topic_id = t.topic_id;
            out.partition_responses = t
                .partition_data
                .iter()
                .map(|p| {
                    let mut a = PartitionProduceResponse::default();
                    a.index = p.index;
                    a.error_code = error.code();
                    a.base_offset = -1;
                    a.log_append_time_ms = -1;
                    a.log_start_offset = -1;
                    a
                })
                .collect();
            out
        })
        .collect();
    r.topic_data = kept;
    let any_refused = !answers.is_empty();
    let fixup: Fixup = Box::new(move |_, reply| match reply {
        Reply::Respond(ResponseKind::Produce(mut resp)) => {
            resp.responses.extend(answers);
            Reply::Respond(ResponseKind::Produce(resp))
        }
        Reply::Nothing if any_refused => Reply::Close,
        other => other,
    });
    if r.topic_data.is_empty() {
        let empty = if acks0 {
            Reply::Nothing
        } else {
            Reply::Respond(ResponseKind::Produce(ProduceResponse::default()))
        };
        return Gate::Answer(fixup(d, empty));
    }
    Gate::Run(RequestKind::Produce(r), fixup)
}

/// WriteTxnMarkers is for transaction coordinators, other brokers: CLUSTER_ACTION on the
/// cluster, else every partition of every marker is CLUSTER_AUTHORIZATION_FAILED.
fn write_txn_markers(d: &dyn Decide, r: kafka_protocol::messages::WriteTxnMarkersRequest) -> Gate {
    use kafka_protocol::messages::write_txn_markers_response::{
        WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
    };
    if d.cluster(AclOperation::ClusterAction) {
        return Gate::Run(RequestKind::WriteTxnMarkers(r), no_fixup());
    }
    let mut resp = kafka_protocol::messages::WriteTxnMarkersResponse::default();
    resp.markers = r
        .markers
        .iter()
        .map(|m| {
            let mut out = WritableTxnMarkerResult::default();
            out.producer_id = m.producer_id;
            out.topics = m
                .topics
                .iter()
                .map(|t| {
                    let mut topic = WritableTxnMarkerTopicResult::default();
                    topic.name = t.name.clone();
                    topic.partitions = t
                        .partition_indexes
                        .iter()
                        .map(|&i| {
                            let mut p = WritableTxnMarkerPartitionResult::default();
                            p.partition_index = i;
                            p.error_code = ResponseError::ClusterAuthorizationFailed.code();
                            p
                        })
                        .collect();
                    topic
                })
                .collect();
            out
        })
        .collect();
    Gate::Answer(Reply::Respond(ResponseKind::WriteTxnMarkers(resp)))
}

/// DescribeProducers needs READ on each topic; the partitions of the others answer
/// TOPIC_AUTHORIZATION_FAILED.
fn describe_producers(
    d: &dyn Decide,
    mut r: kafka_protocol::messages::DescribeProducersRequest,
) -> Gate {
    use kafka_protocol::messages::describe_producers_response::{PartitionResponse, TopicResponse};
    use kafka_protocol::messages::DescribeProducersResponse;
    let (kept, refused) = split(
        d,
        AclOperation::Read,
        AclResourceType::Topic,
        std::mem::take(&mut r.topics),
        |t| t.name.0.as_str(),
    );
    let answers: Vec<TopicResponse> = refused
        .iter()
        .map(|t| {
            let mut out = TopicResponse::default();
            out.name = t.name.clone();
            out.partitions = t
                .partition_indexes
                .iter()
                .map(|&i| {
                    let mut a = PartitionResponse::default();
                    a.partition_index = i;
                    a.error_code = TOPIC_AUTHORIZATION_FAILED.code();
                    a
                })
                .collect();
            out
        })
        .collect();
    r.topics = kept;
    let fixup = on_response(move |_, resp| match resp {
        ResponseKind::DescribeProducers(mut resp) => {
            resp.topics.extend(answers);
            ResponseKind::DescribeProducers(resp)
        }
        other => other,
    });
    let empty = ResponseKind::DescribeProducers(DescribeProducersResponse::default());
    run_unless_empty(
        d,
        r.topics.is_empty(),
        RequestKind::DescribeProducers(r),
        empty,
        fixup,
    )
}
