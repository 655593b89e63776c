//! ListOffsets, OffsetForLeaderEpoch, DeleteRecords.

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{
    DeleteRecordsRequest, DeleteRecordsResponse, ListOffsetsRequest, ListOffsetsResponse,
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
};
use kafka_protocol::ResponseError;

use gregor_log::OffsetSpec;

use crate::data_plane::DataPlane;
use crate::replica::log_error;
use crate::runtime::blocking;

pub fn list_offsets(b: DataPlane<'_>, r: ListOffsetsRequest, version: i16) -> ListOffsetsResponse {
    let mut resp = ListOffsetsResponse::default();
    // read_committed (v2+): the latest offset is the last stable offset, and lookups stop there.
    let read_committed = version >= 2 && r.isolation_level == 1;
    for t in r.topics {
        let mut tr = ListOffsetsTopicResponse::default();
        for p in &t.partitions {
            let mut out = ListOffsetsPartitionResponse::default();
            out.partition_index = p.partition_index;
            out.timestamp = -1;
            out.offset = -1;
            let result = b
                .locate(&t.name.0, gregor_meta::Uuid::nil(), p.partition_index)
                .and_then(|part| {
                    let role = part.role();
                    if !role.is_leader {
                        return Err(ResponseError::NotLeaderOrFollower);
                    }
                    if p.current_leader_epoch >= 0 && p.current_leader_epoch != role.leader_epoch {
                        return Err(if p.current_leader_epoch < role.leader_epoch {
                            ResponseError::FencedLeaderEpoch
                        } else {
                            ResponseError::UnknownLeaderEpoch
                        });
                    }
                    let hw = part.high_watermark();
                    let hw = if read_committed {
                        part.last_stable_offset(hw)
                    } else {
                        hw
                    };
                    let spec = match p.timestamp {
                        -1 => return Ok((hw, -1, role.leader_epoch)),
                        // -2 earliest, -4 earliest local (no tiering: the same).
                        -2 | -4 => OffsetSpec::Earliest,
                        -3 => OffsetSpec::MaxTimestamp,
                        ts if ts >= 0 => OffsetSpec::Timestamp(ts),
                        _ => return Err(ResponseError::UnsupportedVersion),
                    };
                    match part.log.list_offset(spec) {
                        // Consumers never see past the high watermark (the LSO, read_committed).
                        Ok(Some(found))
                            if found.offset < hw || matches!(spec, OffsetSpec::Earliest) =>
                        {
                            Ok((found.offset, found.timestamp, role.leader_epoch))
                        }
                        Ok(_) => Ok((-1, -1, -1)),
                        Err(e) => Err(log_error(&e)),
                    }
                });
            match result {
                Ok((offset, timestamp, epoch)) => {
                    out.offset = offset;
                    out.timestamp = timestamp;
                    if version >= 4 {
                        out.leader_epoch = epoch;
                    }
                }
                Err(e) => out.error_code = e.code(),
            }
            tr.partitions.push(out);
        }
        tr.name = t.name;
        resp.topics.push(tr);
    }
    resp
}

pub fn offset_for_leader_epoch(
    b: DataPlane<'_>,
    r: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let mut resp = OffsetForLeaderEpochResponse::default();
    for t in r.topics {
        let mut tr = OffsetForLeaderTopicResult::default();
        for p in &t.partitions {
            let mut out = EpochEndOffset::default();
            out.partition = p.partition;
            out.leader_epoch = -1;
            out.end_offset = -1;
            match b.locate(&t.topic.0, gregor_meta::Uuid::nil(), p.partition) {
                Ok(part) => {
                    let role = part.role();
                    if !role.is_leader {
                        out.error_code = ResponseError::NotLeaderOrFollower.code();
                    } else if p.current_leader_epoch >= 0
                        && p.current_leader_epoch < role.leader_epoch
                    {
                        out.error_code = ResponseError::FencedLeaderEpoch.code();
                    } else if p.current_leader_epoch > role.leader_epoch {
                        out.error_code = ResponseError::UnknownLeaderEpoch.code();
                    } else {
                        let (epoch, end) = part.log.end_offset_for_epoch(p.leader_epoch);
                        out.leader_epoch = epoch;
                        out.end_offset = end;
                    }
                }
                Err(e) => out.error_code = e.code(),
            }
            tr.partitions.push(out);
        }
        tr.topic = t.topic;
        resp.topics.push(tr);
    }
    resp
}

pub async fn delete_records(b: DataPlane<'_>, r: DeleteRecordsRequest) -> DeleteRecordsResponse {
    let mut resp = DeleteRecordsResponse::default();
    for t in r.topics {
        let mut tr = DeleteRecordsTopicResult::default();
        for p in &t.partitions {
            let mut out = DeleteRecordsPartitionResult::default();
            out.partition_index = p.partition_index;
            out.low_watermark = -1;
            let result = match b.locate(&t.name.0, gregor_meta::Uuid::nil(), p.partition_index) {
                Err(e) => Err(e),
                Ok(part) if !part.role().is_leader => Err(ResponseError::NotLeaderOrFollower),
                Ok(part) => {
                    let hw = part.high_watermark();
                    let target = if p.offset == -1 { hw } else { p.offset };
                    if target < 0 || target > hw {
                        Err(ResponseError::OffsetOutOfRange)
                    } else {
                        let log = part.log.clone();
                        let low = blocking(move || log.delete_records_before(target))
                            .await
                            .map_err(|e| log_error(&e));
                        // Fetch sessions answer the new log start offset.
                        part.log_start_moved();
                        low
                    }
                }
            };
            match result {
                Ok(low) => out.low_watermark = low,
                Err(e) => out.error_code = e.code(),
            }
            tr.partitions.push(out);
        }
        tr.name = t.name;
        resp.topics.push(tr);
    }
    resp
}
