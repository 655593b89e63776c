//! ElectLeaders (preferred and unclean leader election, KIP-183 / KIP-460): the wire request
//! in, `Controller::elect_leaders` on the active controller, the per-partition results out.

use gregor_meta::{ApiError, ElectionType, TopicPartition};
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, TopicName};

use super::s;
use crate::metadata::MetadataManager;

/// What the request asks for: the election type (v0 knows only preferred elections) and the
/// partitions, `None` for every partition. A partition listed twice is elected once.
pub(crate) fn election_input(
    r: &ElectLeadersRequest,
    version: i16,
) -> Result<(ElectionType, Option<Vec<TopicPartition>>), ApiError> {
    let election = match (version, r.election_type) {
        (0, _) | (_, 0) => ElectionType::Preferred,
        (_, 1) => ElectionType::Unclean,
        (_, other) => {
            return Err(ApiError::invalid_request(format!(
                "Unknown election type {other}"
            )))
        }
    };
    let partitions = r.topic_partitions.as_ref().map(|topics| {
        let mut out: Vec<TopicPartition> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for t in topics {
            for &p in &t.partitions {
                let tp = TopicPartition::new(t.topic.0.to_string(), p);
                if seen.insert(tp.clone()) {
                    out.push(tp);
                }
            }
        }
        out
    });
    Ok((election, partitions))
}

/// The response for per-partition outcomes, grouped by topic in the order they came.
pub(crate) fn election_response(
    results: Vec<(TopicPartition, Result<(), ApiError>)>,
) -> ElectLeadersResponse {
    let mut topics: Vec<ReplicaElectionResult> = Vec::new();
    for (tp, result) in results {
        let mut p = PartitionResult::default();
        p.partition_id = tp.partition;
        // Null on success, as Kafka sends it (the message's default is an empty string).
        p.error_message = None;
        if let Err(e) = result {
            p.error_code = e.code.code();
            p.error_message = Some(s(e.message));
        }
        match topics.iter_mut().find(|t| t.topic.0.as_str() == tp.topic) {
            Some(t) => t.partition_result.push(p),
            None => {
                let mut t = ReplicaElectionResult::default();
                t.topic = TopicName(s(tp.topic));
                t.partition_result.push(p);
                topics.push(t);
            }
        }
    }
    let mut resp = ElectLeadersResponse::default();
    resp.replica_election_results = topics;
    resp
}

/// A request that failed as a whole: the top-level error (v1+) and, as Kafka does, the same
/// error for every listed partition (v0 has no top-level error).
pub(crate) fn failed_response(
    version: i16,
    partitions: Option<&[TopicPartition]>,
    e: &ApiError,
) -> ElectLeadersResponse {
    let per_partition = partitions
        .unwrap_or_default()
        .iter()
        .map(|tp| (tp.clone(), Err(e.clone())))
        .collect();
    let mut resp = election_response(per_partition);
    if version >= 1 {
        resp.error_code = e.code.code();
    }
    resp
}

/// ElectLeaders on the active controller. The records are committed before the answer, so
/// the request's timeout has nothing left to wait for.
pub async fn elect_leaders(
    metadata: &MetadataManager,
    r: ElectLeadersRequest,
    version: i16,
) -> ElectLeadersResponse {
    let (election, partitions) = match election_input(&r, version) {
        Ok(input) => input,
        Err(e) => {
            tracing::info!(
                election_type = r.election_type,
                "ElectLeaders refused: {}",
                e.message
            );
            let listed = r.topic_partitions.as_ref().map(|topics| {
                topics
                    .iter()
                    .flat_map(|t| {
                        t.partitions
                            .iter()
                            .map(|&p| TopicPartition::new(t.topic.0.to_string(), p))
                    })
                    .collect::<Vec<_>>()
            });
            return failed_response(version, listed.as_deref(), &e);
        }
    };
    tracing::info!(
        ?election,
        partitions = partitions.as_ref().map_or(-1, |p| p.len() as i64),
        "ElectLeaders"
    );
    match metadata
        .submit(|c| c.elect_leaders(election, partitions.as_deref()))
        .await
    {
        Ok(results) => election_response(results),
        Err(e) => {
            tracing::warn!(error = %e, "ElectLeaders failed");
            failed_response(version, partitions.as_deref(), &e.api_error())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
    use kafka_protocol::protocol::{Decodable, Encodable};
    use kafka_protocol::ResponseError;

    fn request(election_type: i8, topics: Option<Vec<(&str, Vec<i32>)>>) -> ElectLeadersRequest {
        let mut r = ElectLeadersRequest::default();
        r.election_type = election_type;
        r.timeout_ms = 1000;
        r.topic_partitions = topics.map(|ts| {
            ts.into_iter()
                .map(|(t, ps)| {
                    let mut x = TopicPartitions::default();
                    x.topic = TopicName(s(t));
                    x.partitions = ps;
                    x
                })
                .collect()
        });
        r
    }

    /// Encodes and decodes at `version`, as the response travels.
    fn roundtrip(resp: &ElectLeadersResponse, version: i16) -> ElectLeadersResponse {
        let mut buf = BytesMut::new();
        resp.encode(&mut buf, version)
            .unwrap_or_else(|e| panic!("v{version}: {e}"));
        ElectLeadersResponse::decode(&mut buf.freeze(), version).expect("decodes")
    }

    #[test]
    fn election_types_and_partitions_from_the_request() {
        let r = request(
            1,
            Some(vec![("t", vec![0, 1, 0]), ("u", vec![2]), ("t", vec![1])]),
        );
        let (election, partitions) = election_input(&r, 2).unwrap();
        assert_eq!(election, ElectionType::Unclean);
        assert_eq!(
            partitions.unwrap(),
            vec![
                TopicPartition::new("t", 0),
                TopicPartition::new("t", 1),
                TopicPartition::new("u", 2)
            ]
        );
        // v0 has no election type: always preferred.
        assert_eq!(
            election_input(&request(1, None), 0).unwrap(),
            (ElectionType::Preferred, None)
        );
        assert_eq!(
            election_input(&request(0, None), 1).unwrap().0,
            ElectionType::Preferred
        );
    }

    #[test]
    fn an_unknown_election_type_is_an_invalid_request() {
        let r = request(7, Some(vec![("t", vec![0])]));
        let e = election_input(&r, 2).unwrap_err();
        assert_eq!(e.code, ResponseError::InvalidRequest);
        assert_eq!(e.message, "Unknown election type 7");
        let resp = roundtrip(
            &failed_response(2, Some(&[TopicPartition::new("t", 0)]), &e),
            2,
        );
        assert_eq!(resp.error_code, ResponseError::InvalidRequest.code());
        let p = &resp.replica_election_results[0].partition_result[0];
        assert_eq!(p.error_code, ResponseError::InvalidRequest.code());
        // v0 cannot carry a top-level error; the partitions still say what failed.
        let not_controller = ApiError::new(ResponseError::NotController, "no controller");
        let resp = roundtrip(
            &failed_response(0, Some(&[TopicPartition::new("t", 0)]), &not_controller),
            0,
        );
        assert_eq!(resp.error_code, 0);
        assert_eq!(
            resp.replica_election_results[0].partition_result[0].error_code,
            ResponseError::NotController.code()
        );
    }

    #[test]
    fn results_are_grouped_by_topic_with_codes_and_messages() {
        let results = vec![
            (TopicPartition::new("t", 0), Ok(())),
            (
                TopicPartition::new("u", 0),
                Err(ApiError::new(
                    ResponseError::UnknownTopicOrPartition,
                    "No such topic as u",
                )),
            ),
            (
                TopicPartition::new("t", 2),
                Err(ApiError::new(
                    ResponseError::ElectionNotNeeded,
                    "Leader election not needed for t-2.",
                )),
            ),
        ];
        for v in 0..=2 {
            let resp = roundtrip(&election_response(results.clone()), v);
            assert_eq!(resp.error_code, 0);
            let topics: Vec<(&str, Vec<(i32, i16)>)> = resp
                .replica_election_results
                .iter()
                .map(|t| {
                    (
                        t.topic.0.as_str(),
                        t.partition_result
                            .iter()
                            .map(|p| (p.partition_id, p.error_code))
                            .collect(),
                    )
                })
                .collect();
            assert_eq!(
                topics,
                vec![
                    (
                        "t",
                        vec![(0, 0), (2, ResponseError::ElectionNotNeeded.code())]
                    ),
                    (
                        "u",
                        vec![(0, ResponseError::UnknownTopicOrPartition.code())]
                    ),
                ]
            );
            let t = &resp.replica_election_results[0].partition_result;
            assert_eq!(t[0].error_message, None);
            assert_eq!(
                t[1].error_message.as_deref(),
                Some("Leader election not needed for t-2.")
            );
        }
    }
}
