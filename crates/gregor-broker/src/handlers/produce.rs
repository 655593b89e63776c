//! Produce and InitProducerId.

use futures::future::join_all;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse, ProducerId,
};
use kafka_protocol::ResponseError;

use crate::broker::Broker;

/// Resolves a produce or fetch target: the topic's name from the request (or its id, in newer
/// versions), whether it exists, and the hosted partition.
pub(crate) fn locate(
    b: &Broker,
    name: &str,
    topic_id: gregor_meta::Uuid,
    partition: i32,
) -> Result<std::sync::Arc<crate::replica::Partition>, ResponseError> {
    let image = b.metadata.image();
    let topic = if name.is_empty() && !topic_id.is_nil() {
        image
            .topic_by_id(topic_id)
            .ok_or(ResponseError::UnknownTopicId)?
    } else {
        image
            .topic(name)
            .ok_or(ResponseError::UnknownTopicOrPartition)?
    };
    if !topic.partitions.contains_key(&partition) {
        return Err(ResponseError::UnknownTopicOrPartition);
    }
    b.replicas
        .get(&topic.name, partition)
        .ok_or(ResponseError::NotLeaderOrFollower)
}

pub async fn produce(b: &Broker, r: ProduceRequest, version: i16) -> Option<ProduceResponse> {
    let acks = r.acks;
    let timeout = std::time::Duration::from_millis(r.timeout_ms.max(0) as u64);
    let transactional = r.transactional_id.is_some();
    let mut topics = Vec::new();
    for t in r.topic_data {
        let name = t.name.0.to_string();
        let parts = t.partition_data.into_iter().map(|p| {
            let name = name.clone();
            async move {
                let mut out = PartitionProduceResponse::default();
                out.index = p.index;
                out.base_offset = -1;
                out.log_append_time_ms = -1;
                out.log_start_offset = -1;
                let result = if !matches!(acks, -1..=1) {
                    Err(ResponseError::InvalidRequiredAcks)
                } else if transactional {
                    // Transactions are not implemented; say so instead of half-supporting them.
                    Err(ResponseError::TransactionalIdAuthorizationFailed)
                } else {
                    match (locate(b, &name, t.topic_id, p.index), p.records) {
                        (Err(e), _) => Err(e),
                        (Ok(_), None) => Err(ResponseError::InvalidRecord),
                        (Ok(part), Some(records)) => {
                            if acks == -1 && !b.enough_in_sync(&part.topic, part.index) {
                                Err(ResponseError::NotEnoughReplicas)
                            } else {
                                match tokio::time::timeout(
                                    timeout.max(std::time::Duration::from_millis(1)),
                                    part.append_as_leader(records),
                                )
                                .await
                                {
                                    Ok(r) => r,
                                    Err(_) => Err(ResponseError::RequestTimedOut),
                                }
                            }
                        }
                    }
                };
                match result {
                    Ok(o) => {
                        out.base_offset = o.base_offset;
                        out.log_append_time_ms = o.log_append_time;
                        if version >= 5 {
                            out.log_start_offset = o.log_start_offset;
                        }
                    }
                    Err(e) => out.error_code = e.code(),
                }
                if version < 5 {
                    out.log_start_offset = -1;
                }
                out
            }
        });
        let partition_responses = join_all(parts).await;
        let mut tr = TopicProduceResponse::default();
        tr.name = t.name;
        tr.topic_id = t.topic_id;
        tr.partition_responses = partition_responses;
        topics.push(tr);
    }
    if acks == 0 {
        return None;
    }
    let mut resp = ProduceResponse::default();
    resp.responses = topics;
    Some(resp)
}

pub fn init_producer_id(b: &Broker, r: &InitProducerIdRequest) -> InitProducerIdResponse {
    let mut resp = InitProducerIdResponse::default();
    resp.producer_id = ProducerId(-1);
    resp.producer_epoch = -1;
    if r.transactional_id.is_some() {
        resp.error_code = ResponseError::TransactionalIdAuthorizationFailed.code();
        return resp;
    }
    // KIP-360: a producer that already has an id bumps its epoch instead of getting a new id.
    if r.producer_id.0 >= 0 && r.producer_epoch >= 0 && r.producer_epoch < i16::MAX {
        resp.producer_id = r.producer_id;
        resp.producer_epoch = r.producer_epoch + 1;
        return resp;
    }
    match b.producer_ids.next() {
        Ok(id) => {
            resp.producer_id = ProducerId(id);
            resp.producer_epoch = 0;
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot allocate a producer id");
            resp.error_code = ResponseError::KafkaStorageError.code();
        }
    }
    resp
}
