//! Produce and InitProducerId.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::join_all;
use gregor_log::RecordErrors;
use gregor_meta::Uuid;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{
    InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse, ProducerId,
    ResponseKind,
};
use kafka_protocol::ResponseError;

use crate::connection::Reply;
use crate::data_plane::{DataPlane, TxnVerifyRequest};
use crate::partition::{Partition, ProduceError, ProduceOutcome};
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

/// What every partition of one produce request shares.
#[derive(Debug, Clone, Copy)]
struct ProduceParams {
    acks: i16,
    /// Bounds only the wait for durability and replication (as in Kafka); the append itself
    /// always completes (see `Partition::spawn_append`).
    timeout: Duration,
    version: i16,
}

pub async fn produce(b: DataPlane<'_>, r: ProduceRequest, version: i16) -> Reply {
    let params = ProduceParams {
        acks: r.acks,
        timeout: Duration::from_millis(r.timeout_ms.max(0) as u64),
        version,
    };
    let txn_id = r.transactional_id.as_ref().map(|t| t.0.as_str());
    // Every partition's append starts (takes its place in the partition's order) at the first
    // poll, in request order, before any of them is awaited: pipelined requests of one
    // connection are written in the order they arrived.
    let topics = join_all(
        r.topic_data
            .into_iter()
            .map(|t| produce_topic(b, params, txn_id, t)),
    )
    .await;
    if params.acks == 0 {
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

/// One topic's partitions, appended concurrently and answered in request order.
async fn produce_topic(
    b: DataPlane<'_>,
    params: ProduceParams,
    txn_id: Option<&str>,
    t: TopicProduceData,
) -> TopicProduceResponse {
    let name = t.name.0.to_string();
    let topic_id = t.topic_id;
    let parts = t
        .partition_data
        .into_iter()
        .map(|p| produce_partition(b, params, txn_id, &name, topic_id, p));
    let mut tr = TopicProduceResponse::default();
    tr.partition_responses = join_all(parts).await;
    tr.name = t.name;
    tr.topic_id = topic_id;
    tr
}

/// One partition's batch: checked, appended, awaited as `acks` asks, and answered.
async fn produce_partition(
    b: DataPlane<'_>,
    params: ProduceParams,
    txn_id: Option<&str>,
    topic: &str,
    topic_id: Uuid,
    p: PartitionProduceData,
) -> PartitionProduceResponse {
    let result = match validate(b, params, topic, topic_id, p.index, p.records) {
        Ok((part, records)) => match transactional_producer(&records) {
            Some(producer) => {
                append_transactional(b, params, &part, records, txn_id, producer).await
            }
            None => append(b, &part, records, params).await,
        },
        Err(e) => Err(e),
    };
    answer(p.index, result, params.version, topic)
}

/// The producer id and epoch of a transactional batch.
fn transactional_producer(records: &[u8]) -> Option<(i64, i16)> {
    let header = gregor_log::batch::BatchHeader::parse(records)?;
    header
        .is_transactional()
        .then_some((header.producer_id, header.producer_epoch))
}

/// A transactional batch: appended at once into its producer's open transaction; the first
/// of a transaction here is verified with the coordinator first (KIP-890), so a late retry of
/// an ended transaction cannot open one no marker would end. The partition's transactional
/// batches go through verification one at a time, in arrival order: a producer's pipelined
/// batches are not reordered while the first waits for its coordinator.
async fn append_transactional(
    b: DataPlane<'_>,
    params: ProduceParams,
    part: &Arc<Partition>,
    records: Bytes,
    txn_id: Option<&str>,
    (producer_id, producer_epoch): (i64, i16),
) -> Result<ProduceOutcome, ProduceError> {
    let ticket = part.txn_ticket();
    let turn = part.txn_turn(ticket).await;
    enough_in_sync(b, part, params)?;
    let size = records.len();
    let first = part.spawn_txn_append(records.clone(), None);
    let Ok(Some(guard)) = first.written.await else {
        drop(turn);
        return finish(b, part, size, first.done, params).await;
    };
    // Without its transactional id the coordinator cannot be asked.
    let id = txn_id.ok_or(ResponseError::InvalidTxnState)?;
    b.txn
        .verify(TxnVerifyRequest {
            transactional_id: id.to_string(),
            producer_id,
            producer_epoch,
            topic: part.topic.clone(),
            partition: part.index,
            add: params.version >= 12,
        })
        .await?;
    let verified = part.spawn_txn_append(records, Some(guard));
    let _ = verified.written.await;
    drop(turn);
    finish(b, part, size, verified.done, params).await
}

/// The partition a batch may be appended to, or why the request cannot write it there.
fn validate(
    b: DataPlane<'_>,
    params: ProduceParams,
    topic: &str,
    topic_id: Uuid,
    index: i32,
    records: Option<Bytes>,
) -> Result<(Arc<Partition>, Bytes), ProduceError> {
    if !matches!(params.acks, -1..=1) {
        return Err(ResponseError::InvalidRequiredAcks.into());
    }
    if is_internal_topic(topic) {
        return Err(ResponseError::InvalidTopicException.into());
    }
    let part = b.locate(topic, topic_id, index)?;
    let records = records.ok_or(ResponseError::InvalidRecord)?;
    if params.version < 7 && codec_id(&records) == Some(ZSTD) {
        return Err(ResponseError::UnsupportedCompressionType.into());
    }
    Ok((part, records))
}

/// Appends `records` to `part` and waits for what `acks` asks: the batch durable here, and for
/// `acks=all` on every ISR member too (that wait bounded by `timeout`).
async fn append(
    b: DataPlane<'_>,
    part: &Arc<Partition>,
    records: Bytes,
    params: ProduceParams,
) -> Result<ProduceOutcome, ProduceError> {
    enough_in_sync(b, part, params)?;
    let size = records.len();
    let pending = part.spawn_append(records);
    // The write itself is never cut short; a dropped connection leaves it to finish on its task.
    let _ = pending.written.await;
    finish(b, part, size, pending.done, params).await
}

/// `acks=all` needs the partition's ISR at `min.insync.replicas` before the append.
fn enough_in_sync(
    b: DataPlane<'_>,
    part: &Partition,
    params: ProduceParams,
) -> Result<(), ProduceError> {
    if params.acks == -1 && !b.enough_in_sync(&part.topic, part.index) {
        return Err(ResponseError::NotEnoughReplicas.into());
    }
    Ok(())
}

/// Waits for a written batch as `acks` asks (`size`: its bytes, for the metrics).
async fn finish(
    b: DataPlane<'_>,
    part: &Arc<Partition>,
    size: usize,
    done: tokio::task::JoinHandle<Result<ProduceOutcome, ProduceError>>,
    params: ProduceParams,
) -> Result<ProduceOutcome, ProduceError> {
    let (acks, timeout) = (params.acks, params.timeout);
    let done = async {
        done.await.unwrap_or_else(|e| {
            tracing::error!(topic = %part.topic, partition = part.index, error = %e, "append task failed");
            Err(ResponseError::UnknownServerError.into())
        })
    };
    let outcome = if acks == -1 {
        // Durable here, then on every ISR member: the high watermark passes the batch.
        let replicated = async {
            let outcome = done.await?;
            let _parked = b.metrics.parked("produce");
            part.await_high_watermark(outcome.end_offset).await?;
            if b.enough_in_sync(&part.topic, part.index) {
                Ok(outcome)
            } else {
                Err(ResponseError::NotEnoughReplicasAfterAppend.into())
            }
        };
        tokio::time::timeout(timeout, replicated)
            .await
            .unwrap_or(Err(ResponseError::RequestTimedOut.into()))
    } else {
        done.await
    };
    outcome.inspect(|o| {
        b.metrics
            .produced(&part.topic, size, o.end_offset - o.base_offset)
    })
}

/// One partition's answer: where its batch went, or why not. From v8 an error carries a
/// message and, for a batch refused for some of its records, which records (KIP-467); the
/// client fails those with the partition's error and the rest of the batch as refused for
/// another record's sake.
fn answer(
    index: i32,
    result: Result<ProduceOutcome, ProduceError>,
    version: i16,
    topic: &str,
) -> PartitionProduceResponse {
    let mut out = PartitionProduceResponse::default();
    out.index = index;
    out.base_offset = -1;
    out.log_append_time_ms = -1;
    out.log_start_offset = -1;
    match result {
        Ok(o) => {
            out.base_offset = o.base_offset;
            out.log_append_time_ms = o.log_append_time;
            if version >= 5 {
                out.log_start_offset = o.log_start_offset;
            }
        }
        Err(e) => {
            out.error_code = e.response_error().code();
            if version >= 8 {
                out.error_message = match &e {
                    ProduceError::Code(ResponseError::InvalidTopicException) => {
                        Some(super::s(format!("Cannot append to internal topic {topic}")))
                    }
                    ProduceError::Code(_) | ProduceError::Unverified(_) => None,
                    ProduceError::Records(r) => Some(super::s(r.to_string())),
                };
                if let ProduceError::Records(r) = &e {
                    out.record_errors = record_errors(r);
                }
            }
        }
    }
    out
}

/// The refused records as Produce v8+ lists them, in batch order.
fn record_errors(r: &RecordErrors) -> Vec<BatchIndexAndErrorMessage> {
    r.errors()
        .iter()
        .map(|e| {
            // An index is below the batch's record count, an i32.
            let index = i32::try_from(e.batch_index).unwrap_or(i32::MAX);
            BatchIndexAndErrorMessage::default()
                .with_batch_index(index)
                .with_batch_index_error_message(Some(super::s(e.problem.to_string())))
        })
        .collect()
}

/// InitProducerId of an idempotent producer (one with a transactional id goes to its
/// transaction coordinator).
pub fn init_producer_id(
    producer_ids: &ProducerIdAllocator,
    r: &InitProducerIdRequest,
) -> InitProducerIdResponse {
    let mut resp = InitProducerIdResponse::default();
    resp.producer_id = ProducerId(-1);
    resp.producer_epoch = -1;
    debug_assert!(
        r.transactional_id.is_none(),
        "routed to the transaction coordinator"
    );
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

#[cfg(test)]
mod tests {
    use gregor_log::RecordProblem;

    use super::*;

    const NO_KEY: &str = "compacted topic cannot accept a record without a key";

    fn refused(problems: &[(u32, RecordProblem)]) -> ProduceError {
        let mut r = RecordErrors::new(100);
        for &(i, p) in problems {
            r.push(i, p);
        }
        ProduceError::Records(r)
    }

    #[test]
    fn v8_lists_the_refused_records_and_sums_them_up() {
        let e = refused(&[
            (1, RecordProblem::NoKeyOnCompactedTopic),
            (3, RecordProblem::NoKeyOnCompactedTopic),
        ]);
        let out = answer(2, Err(e), 8, "t");
        assert_eq!((out.index, out.error_code, out.base_offset), (2, 87, -1));
        let listed: Vec<_> = out
            .record_errors
            .iter()
            .map(|e| (e.batch_index, e.batch_index_error_message.as_deref()))
            .collect();
        assert_eq!(listed, [(1, Some(NO_KEY)), (3, Some(NO_KEY))]);
        assert_eq!(
            out.error_message.as_deref(),
            Some(
                format!(
                    "2 records refused, so the batch was not appended: record 1: {NO_KEY}; \
                     record 3: {NO_KEY}"
                )
                .as_str()
            )
        );
    }

    #[test]
    fn a_bad_timestamp_makes_the_partition_error_invalid_timestamp() {
        let e = refused(&[
            (0, RecordProblem::NoKeyOnCompactedTopic),
            (
                5,
                RecordProblem::TimestampOutOfRange {
                    timestamp: 1,
                    earliest: 10,
                    latest: 20,
                },
            ),
        ]);
        let out = answer(0, Err(e), 13, "t");
        assert_eq!(out.error_code, ResponseError::InvalidTimestamp.code());
        assert_eq!(out.record_errors[1].batch_index, 5);
        assert_eq!(
            out.record_errors[1].batch_index_error_message.as_deref(),
            Some("timestamp 1 is out of range [10, 20]")
        );
    }

    #[test]
    fn before_v8_only_the_error_code_is_answered() {
        let e = refused(&[(1, RecordProblem::NoKeyOnCompactedTopic)]);
        let out = answer(0, Err(e), 7, "t");
        assert_eq!(out.error_code, 87);
        assert!(out.record_errors.is_empty());
        assert_eq!(out.error_message, None);
        // Other errors carry no record list in any version.
        let out = answer(0, Err(ResponseError::NotLeaderOrFollower.into()), 8, "t");
        assert_eq!(out.error_code, ResponseError::NotLeaderOrFollower.code());
        assert!(out.record_errors.is_empty());
        assert_eq!(out.error_message, None);
    }
}
