//! OffsetDelete (KIP-496).

use gregor_group::api as g;
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse, TopicName};
use kafka_protocol::ResponseError;

use super::convert::{code, str_bytes, string};

pub fn offset_delete_request(req: &OffsetDeleteRequest) -> g::OffsetDeleteRequest {
    g::OffsetDeleteRequest {
        group_id: string(&req.group_id),
        topics: req
            .topics
            .iter()
            .map(|t| {
                let ps = t.partitions.iter().map(|p| p.partition_index).collect();
                (string(&t.name), ps)
            })
            .collect(),
    }
}

pub fn offset_delete_response(r: g::OffsetDeleteResponse) -> OffsetDeleteResponse {
    let mut out = OffsetDeleteResponse::default();
    out.error_code = code(r.error);
    out.topics = r
        .topics
        .into_iter()
        .map(|(name, ps)| {
            let mut t = OffsetDeleteResponseTopic::default();
            t.name = TopicName(str_bytes(name));
            t.partitions = ps
                .into_iter()
                .map(|(p, error)| {
                    let mut x = OffsetDeleteResponsePartition::default();
                    x.partition_index = p;
                    x.error_code = code(error);
                    x
                })
                .collect();
            t
        })
        .collect();
    out
}

/// The whole request refused with `error`.
pub fn offset_delete_error(error: ResponseError) -> OffsetDeleteResponse {
    let mut out = OffsetDeleteResponse::default();
    out.error_code = error.code();
    out
}
