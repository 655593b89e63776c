//! Produce and InitProducerId.

use futures::future::join_all;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse, ProducerId,
    ResponseKind,
};
use kafka_protocol::ResponseError;

use crate::connection::Reply;
use crate::data_plane::DataPlane;
use crate::producer_ids::ProducerIdAllocator;

/// Topics clients may not write to (Kafka: INVALID_TOPIC_EXCEPTION, "Cannot append to internal
/// topic"); only the broker's own coordinators append to them.
pub(crate) fn is_internal_topic(name: &str) -> bool {
    matches!(name, "__consumer_offsets" | "__transaction_state")
}

/// The codec id in the attributes of a v2 batch, if the batch is long enough to have them.
fn codec_id(records: &[u8]) -> Option<i16> {
    records
        .get(21..23)
        .map(|a| i16::from_be_bytes([a[0], a[1]]) & 7)
}

const ZSTD: i16 = 4;

pub async fn produce(b: DataPlane<'_>, r: ProduceRequest, version: i16) -> Reply {
    let acks = r.acks;
    // Only the wait for durability and replication is bounded by the timeout (as in Kafka);
    // the append itself always completes (see `Partition::spawn_append`).
    let timeout = std::time::Duration::from_millis(r.timeout_ms.max(0) as u64);
    let transactional = r.transactional_id.is_some();
    let mut topics = Vec::new();
    for t in r.topic_data {
        let name = t.name.0.to_string();
        let topic_id = t.topic_id;
        let parts: Vec<_> = t.partition_data.into_iter().map(move |p| {
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
                    Err(super::transactions_unsupported())
                } else if is_internal_topic(&name) {
                    Err(ResponseError::InvalidTopicException)
                } else {
                    match (b.locate(&name, topic_id, p.index), p.records) {
                        (Err(e), _) => Err(e),
                        (Ok(_), None) => Err(ResponseError::InvalidRecord),
                        (Ok(_), Some(records))
                            if version < 7 && codec_id(&records) == Some(ZSTD) =>
                        {
                            Err(ResponseError::UnsupportedCompressionType)
                        }
                        (Ok(part), Some(records)) => {
                            if acks == -1 && !b.enough_in_sync(&part.topic, part.index) {
                                Err(ResponseError::NotEnoughReplicas)
                            } else {
                                let size = records.len();
                                let pending = part.spawn_append(records);
                                // The write itself is never cut short; a dropped connection
                                // leaves it to finish on its task.
                                let _ = pending.written.await;
                                let done = async {
                                    pending.done.await.unwrap_or_else(|e| {
                                        tracing::error!(topic = %part.topic, partition = part.index, error = %e, "append task failed");
                                        Err(ResponseError::UnknownServerError)
                                    })
                                };
                                if acks == -1 {
                                    // Durable here, then on every ISR member: the high
                                    // watermark passes the batch.
                                    let replicated = async {
                                        let outcome = done.await?;
                                        let _parked = b.metrics.parked("produce");
                                        part.await_high_watermark(outcome.end_offset).await?;
                                        if b.enough_in_sync(&part.topic, part.index) {
                                            Ok(outcome)
                                        } else {
                                            Err(ResponseError::NotEnoughReplicasAfterAppend)
                                        }
                                    };
                                    tokio::time::timeout(timeout, replicated)
                                        .await
                                        .unwrap_or(Err(ResponseError::RequestTimedOut))
                                } else {
                                    done.await
                                }
                                .inspect(|o| b.metrics.produced(&part.topic, size, o.end_offset - o.base_offset))
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
                    Err(e) => {
                        out.error_code = e.code();
                        if version >= 8 {
                            out.error_message = match e {
                                _ if transactional => Some(super::s(super::TRANSACTIONS_UNSUPPORTED)),
                                ResponseError::InvalidTopicException => {
                                    Some(super::s(format!("Cannot append to internal topic {name}")))
                                }
                                _ => None,
                            };
                        }
                    }
                }
                if version < 5 {
                    out.log_start_offset = -1;
                }
                out
            }
        }).collect();
        let name = t.name;
        topics.push(async move {
            let mut tr = TopicProduceResponse::default();
            tr.name = name;
            tr.topic_id = topic_id;
            tr.partition_responses = join_all(parts).await;
            tr
        });
    }
    // Every partition's append starts (takes its place in the partition's order) at the first
    // poll, in request order, before any of them is awaited: pipelined requests of one
    // connection are written in the order they arrived.
    let topics = join_all(topics).await;
    if acks == 0 {
        // Kafka closes the connection when an acks=0 produce fails, the only way to tell the
        // client to refresh its metadata.
        let failed = topics
            .iter()
            .flat_map(|t| &t.partition_responses)
            .any(|p| p.error_code != 0);
        return if failed { Reply::Close } else { Reply::Nothing };
    }
    let mut resp = ProduceResponse::default();
    resp.responses = topics;
    Reply::Respond(ResponseKind::Produce(resp))
}

pub fn init_producer_id(
    producer_ids: &ProducerIdAllocator,
    r: &InitProducerIdRequest,
) -> InitProducerIdResponse {
    let mut resp = InitProducerIdResponse::default();
    resp.producer_id = ProducerId(-1);
    resp.producer_epoch = -1;
    if r.transactional_id.is_some() {
        resp.error_code = super::transactions_unsupported().code();
        return resp;
    }
    // Without a transactional id every request gets a fresh producer id, whatever id and
    // epoch it names (as Kafka does): bumping the epoch of a named id would let any client
    // fence another producer. Idempotent producers bump their epoch locally (KIP-360).
    match producer_ids.next() {
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
