//! WriteTxnMarkers: a transaction coordinator's commit and abort markers, appended to the
//! partitions this broker leads; and DescribeProducers, the producers a partition remembers. Each marker is written in turn with the producers' batches,
//! ends its producer's open transaction (moving the last stable offset), and is answered once
//! the ISR holds it, as an `acks=all` produce is: the coordinator completes the transaction
//! only when every marker is committed.

use futures::future::join_all;
use gregor_log::txn::Marker;
use kafka_protocol::messages::write_txn_markers_request::WritableTxnMarker;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use kafka_protocol::ResponseError;

use crate::data_plane::DataPlane;

/// Answers a WriteTxnMarkers: every marker's partitions, each with its own error.
pub async fn write_txn_markers(
    b: DataPlane<'_>,
    r: WriteTxnMarkersRequest,
) -> WriteTxnMarkersResponse {
    let mut resp = WriteTxnMarkersResponse::default();
    resp.markers = join_all(r.markers.into_iter().map(|m| write_marker(b, m))).await;
    resp
}

async fn write_marker(b: DataPlane<'_>, m: WritableTxnMarker) -> WritableTxnMarkerResult {
    let marker = Marker {
        producer_id: m.producer_id.0,
        producer_epoch: m.producer_epoch,
        coordinator_epoch: m.coordinator_epoch,
        commit: m.transaction_result,
        timestamp: crate::runtime::now_ms(),
    };
    let topics = m.topics.into_iter().map(|t| async move {
        let name = t.name.0.to_string();
        let parts = t
            .partition_indexes
            .iter()
            .map(|&index| write_one(b, &name, index, marker));
        let mut out = WritableTxnMarkerTopicResult::default();
        out.partitions = join_all(parts).await;
        out.name = t.name;
        out
    });
    let mut out = WritableTxnMarkerResult::default();
    out.producer_id = m.producer_id;
    out.topics = join_all(topics).await;
    out
}

async fn write_one(
    b: DataPlane<'_>,
    topic: &str,
    index: i32,
    marker: Marker,
) -> WritableTxnMarkerPartitionResult {
    let result = match checked(marker) {
        Ok(()) => match b.locate(topic, gregor_meta::Uuid::nil(), index) {
            Ok(part) => crate::txn_markers::append_marker(&part, marker, Some(b.txn)).await,
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        tracing::debug!(topic, partition = index, producer_id = marker.producer_id, error = ?e, "transaction marker refused");
    }
    let mut out = WritableTxnMarkerPartitionResult::default();
    out.partition_index = index;
    out.error_code = result.err().map_or(0, |e| e.code());
    out
}

/// A marker no coordinator writes: a negative producer id or epoch.
fn checked(marker: Marker) -> Result<(), ResponseError> {
    if marker.producer_id < 0 || marker.producer_epoch < 0 {
        return Err(ResponseError::InvalidProducerEpoch);
    }
    Ok(())
}

/// Answers a DescribeProducers: the producers each partition led here remembers, with their
/// open transactions (`kafka-transactions.sh describe-producers`, `find-hanging`).
pub async fn describe_producers(
    b: DataPlane<'_>,
    r: kafka_protocol::messages::DescribeProducersRequest,
) -> kafka_protocol::messages::DescribeProducersResponse {
    use kafka_protocol::messages::describe_producers_response::TopicResponse;
    let mut resp = kafka_protocol::messages::DescribeProducersResponse::default();
    for t in r.topics {
        let mut out = TopicResponse::default();
        for &index in &t.partition_indexes {
            out.partitions
                .push(describe_partition(b, &t.name.0, index).await);
        }
        out.name = t.name;
        resp.topics.push(out);
    }
    resp
}

async fn describe_partition(
    b: DataPlane<'_>,
    topic: &str,
    index: i32,
) -> kafka_protocol::messages::describe_producers_response::PartitionResponse {
    use kafka_protocol::messages::describe_producers_response::{PartitionResponse, ProducerState};
    let mut out = PartitionResponse::default();
    out.partition_index = index;
    let part = b
        .locate(topic, gregor_meta::Uuid::nil(), index)
        .and_then(|p| {
            if p.role().is_leader {
                Ok(p)
            } else {
                Err(ResponseError::NotLeaderOrFollower)
            }
        });
    match part {
        Ok(part) => {
            out.active_producers = part
                .producers()
                .await
                .into_iter()
                .map(|p| {
                    let mut s = ProducerState::default();
                    s.producer_id = kafka_protocol::messages::ProducerId(p.producer_id);
                    s.producer_epoch = i32::from(p.producer_epoch);
                    s.last_sequence = p.last_sequence;
                    s.last_timestamp = p.last_write_ms;
                    s.coordinator_epoch = p.coordinator_epoch;
                    s.current_txn_start_offset = p.current_txn_start_offset;
                    s
                })
                .collect();
        }
        Err(e) => out.error_code = e.code(),
    }
    out
}

#[cfg(test)]
#[path = "txn_tests.rs"]
pub(crate) mod tests;
