//! The error codes a response carries, top-level and per topic or partition, for the request
//! error counters (Kafka's `ErrorsPerSec` counts each of them).

use kafka_protocol::messages::ResponseKind;
use kafka_protocol::ResponseError;

/// The non-zero error codes of a fetch response.
pub fn fetch_error_codes(r: &kafka_protocol::messages::FetchResponse) -> Vec<i16> {
    std::iter::once(r.error_code)
        .chain(
            r.responses
                .iter()
                .flat_map(|t| &t.partitions)
                .map(|p| p.error_code),
        )
        .filter(|c| *c != 0)
        .collect()
}

/// Every non-zero error code in a response.
pub fn error_codes(response: &ResponseKind) -> Vec<i16> {
    let mut codes = Vec::new();
    let mut add = |c: i16| {
        if c != 0 {
            codes.push(c);
        }
    };
    // Each response kind belongs to one family; the others add nothing.
    data_api_codes(response, &mut add);
    group_api_codes(response, &mut add);
    admin_api_codes(response, &mut add);
    codes
}

/// The error codes of the partition data APIs and Metadata.
fn data_api_codes(response: &ResponseKind, add: &mut impl FnMut(i16)) {
    match response {
        ResponseKind::Produce(r) => r
            .responses
            .iter()
            .flat_map(|t| &t.partition_responses)
            .for_each(|p| add(p.error_code)),
        ResponseKind::Fetch(r) => fetch_error_codes(r).into_iter().for_each(add),
        ResponseKind::ListOffsets(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| add(p.error_code)),
        ResponseKind::OffsetForLeaderEpoch(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| add(p.error_code)),
        ResponseKind::DeleteRecords(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| add(p.error_code)),
        ResponseKind::Metadata(r) => {
            for t in &r.topics {
                add(t.error_code);
                t.partitions.iter().for_each(|p| add(p.error_code));
            }
        }
        ResponseKind::InitProducerId(r) => add(r.error_code),
        _ => {}
    }
}

/// The error codes of the group APIs.
fn group_api_codes(response: &ResponseKind, add: &mut impl FnMut(i16)) {
    match response {
        ResponseKind::OffsetCommit(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| add(p.error_code)),
        ResponseKind::OffsetFetch(r) => {
            add(r.error_code);
            r.topics
                .iter()
                .flat_map(|t| &t.partitions)
                .for_each(|p| add(p.error_code));
            for g in &r.groups {
                add(g.error_code);
                g.topics
                    .iter()
                    .flat_map(|t| &t.partitions)
                    .for_each(|p| add(p.error_code));
            }
        }
        ResponseKind::FindCoordinator(r) => {
            add(r.error_code);
            r.coordinators.iter().for_each(|c| add(c.error_code));
        }
        ResponseKind::JoinGroup(r) => add(r.error_code),
        ResponseKind::SyncGroup(r) => add(r.error_code),
        ResponseKind::Heartbeat(r) => add(r.error_code),
        ResponseKind::LeaveGroup(r) => {
            add(r.error_code);
            r.members.iter().for_each(|m| add(m.error_code));
        }
        ResponseKind::DescribeGroups(r) => r.groups.iter().for_each(|g| add(g.error_code)),
        ResponseKind::ListGroups(r) => add(r.error_code),
        ResponseKind::DeleteGroups(r) => r.results.iter().for_each(|g| add(g.error_code)),
        _ => {}
    }
}

/// The error codes of the admin and cluster APIs.
fn admin_api_codes(response: &ResponseKind, add: &mut impl FnMut(i16)) {
    match response {
        ResponseKind::CreateTopics(r) => r.topics.iter().for_each(|t| add(t.error_code)),
        ResponseKind::DeleteTopics(r) => r.responses.iter().for_each(|t| add(t.error_code)),
        ResponseKind::CreatePartitions(r) => r.results.iter().for_each(|t| add(t.error_code)),
        ResponseKind::ApiVersions(r) => add(r.error_code),
        ResponseKind::DescribeCluster(r) => add(r.error_code),
        ResponseKind::DescribeConfigs(r) => r.results.iter().for_each(|x| add(x.error_code)),
        ResponseKind::IncrementalAlterConfigs(r) => {
            r.responses.iter().for_each(|x| add(x.error_code))
        }
        ResponseKind::AlterConfigs(r) => r.responses.iter().for_each(|x| add(x.error_code)),
        ResponseKind::ElectLeaders(r) => {
            add(r.error_code);
            r.replica_election_results
                .iter()
                .flat_map(|t| &t.partition_result)
                .for_each(|p| add(p.error_code));
        }
        ResponseKind::AlterPartitionReassignments(r) => {
            add(r.error_code);
            r.responses
                .iter()
                .flat_map(|t| &t.partitions)
                .for_each(|p| add(p.error_code));
        }
        ResponseKind::ListPartitionReassignments(r) => add(r.error_code),
        ResponseKind::DescribeLogDirs(r) => {
            add(r.error_code);
            r.results.iter().for_each(|x| add(x.error_code));
        }
        _ => {}
    }
}

/// Kafka's name of an error code (`NOT_LEADER_OR_FOLLOWER`), or `UNKNOWN_<code>`.
pub fn error_name(code: i16) -> String {
    match ResponseError::try_from_code(code) {
        None => "NONE".to_string(),
        Some(ResponseError::Unknown(c)) => format!("UNKNOWN_{c}"),
        // Known codes: the client's spelling of Kafka's names, one table for both.
        Some(_) => gregor_client::KafkaCode(code).name(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::produce_response::{
        PartitionProduceResponse, TopicProduceResponse,
    };
    use kafka_protocol::messages::ProduceResponse;

    #[test]
    fn names_follow_kafka() {
        assert_eq!(error_name(6), "NOT_LEADER_OR_FOLLOWER");
        assert_eq!(error_name(3), "UNKNOWN_TOPIC_OR_PARTITION");
        assert_eq!(error_name(-1), "UNKNOWN_SERVER_ERROR");
        assert_eq!(error_name(30_000), "UNKNOWN_30000");
    }

    #[test]
    fn partition_errors_are_each_counted() {
        let mut ok = PartitionProduceResponse::default();
        ok.error_code = 0;
        let mut bad = PartitionProduceResponse::default();
        bad.error_code = ResponseError::NotEnoughReplicas.code();
        let mut t = TopicProduceResponse::default();
        t.partition_responses = vec![ok, bad.clone(), bad];
        let mut r = ProduceResponse::default();
        r.responses = vec![t];
        assert_eq!(error_codes(&ResponseKind::Produce(r)), vec![19, 19]);
    }
}
