//! The rules against a table written from Kafka's "Operations and Resources on Protocols" and
//! the behaviour of its request handlers: for each API, request shape and set of grants, what
//! runs and what is answered with which error code.

use super::common::s;
use super::*;
use crate::connection::Reply;
use gregor_meta::acl::AclOperation::{self as Op};
use gregor_meta::acl::AclResourceType::{Cluster, Group, Topic, TransactionalId as TxnId};
use kafka_protocol::messages::*;

/// Grants as (operation, resource type, name); `*` names every resource of the type. Exactly
/// what is granted: which operations imply which is the authorizer's (gregor-meta's tests).
struct Grants(Vec<(Op, AclResourceType, &'static str)>);

impl Grants {
    fn has(&self, op: Op, rt: AclResourceType, name: &str) -> bool {
        self.0
            .iter()
            .any(|&(o, r, n)| o == op && r == rt && (n == name || n == "*"))
    }
}

impl Decide for Grants {
    fn enabled(&self) -> bool {
        true
    }
    fn allows(&self, op: Op, rt: AclResourceType, name: &str) -> bool {
        self.has(op, rt, name)
    }
    fn allows_quietly(&self, op: Op, rt: AclResourceType, name: &str) -> bool {
        self.has(op, rt, name)
    }
    fn allows_some(&self, op: Op, rt: AclResourceType) -> bool {
        self.0.iter().any(|&(o, r, _)| o == op && r == rt)
    }
    fn authorized_operations(&self, rt: AclResourceType, name: &str) -> i32 {
        gregor_meta::acl::supported_operations(rt)
            .iter()
            .filter(|op| self.has(**op, rt, name))
            .fold(0, |bits, op| bits | (1 << op.code()))
    }
}

fn grants(list: &[(Op, AclResourceType, &'static str)]) -> Grants {
    Grants(list.to_vec())
}

const TAF: i16 = 29; // TOPIC_AUTHORIZATION_FAILED
const GAF: i16 = 30; // GROUP_AUTHORIZATION_FAILED
const CAF: i16 = 31; // CLUSTER_AUTHORIZATION_FAILED
const TXN_AF: i16 = 53; // TRANSACTIONAL_ID_AUTHORIZATION_FAILED

fn topic(n: &str) -> TopicName {
    TopicName(s(n))
}

fn produce(topics: &[&str], acks: i16) -> RequestKind {
    let mut r = ProduceRequest::default();
    r.acks = acks;
    r.topic_data = topics
        .iter()
        .map(|t| {
            let mut td = produce_request::TopicProduceData::default();
            td.name = topic(t);
            td.partition_data = vec![produce_request::PartitionProduceData::default()];
            td
        })
        .collect();
    RequestKind::Produce(r)
}

/// What the gate did: the names left to run and (name, code) answers, once the fixup has
/// completed the response a handler gives for the names left (empty here).
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Run(Vec<String>, Vec<(String, i16)>),
    Answer(Vec<(String, i16)>),
    Close,
}

fn run(d: &Grants, api: ApiKey, version: i16, request: RequestKind) -> Outcome {
    let image = MetadataImage::default();
    match gate(d, &image, api, version, request) {
        Gate::Answer(Reply::Respond(r)) => Outcome::Answer(codes(&r)),
        Gate::Answer(_) => Outcome::Close,
        Gate::Run(request, fixup) => {
            let names = names(&request);
            match fixup(d, Reply::Respond(empty_like(&request))) {
                Reply::Respond(r) => Outcome::Run(names, codes(&r)),
                _ => Outcome::Close,
            }
        }
    }
}

fn names(r: &RequestKind) -> Vec<String> {
    match r {
        RequestKind::Produce(r) => r.topic_data.iter().map(|t| t.name.0.to_string()).collect(),
        RequestKind::CreateTopics(r) => r.topics.iter().map(|t| t.name.0.to_string()).collect(),
        RequestKind::DeleteTopics(r) => r.topic_names.iter().map(|t| t.0.to_string()).collect(),
        RequestKind::OffsetCommit(r) => r.topics.iter().map(|t| t.name.0.to_string()).collect(),
        RequestKind::TxnOffsetCommit(r) => r.topics.iter().map(|t| t.name.0.to_string()).collect(),
        RequestKind::DescribeGroups(r) => r.groups.iter().map(|g| g.0.to_string()).collect(),
        RequestKind::DescribeConfigs(r) => r
            .resources
            .iter()
            .map(|x| x.resource_name.to_string())
            .collect(),
        RequestKind::FindCoordinator(r) => {
            r.coordinator_keys.iter().map(|k| k.to_string()).collect()
        }
        RequestKind::DescribeProducers(r) => {
            r.topics.iter().map(|t| t.name.0.to_string()).collect()
        }
        RequestKind::DescribeTransactions(r) => r
            .transactional_ids
            .iter()
            .map(|t| t.0.to_string())
            .collect(),
        _ => Vec::new(),
    }
}

fn empty_like(r: &RequestKind) -> ResponseKind {
    match r {
        RequestKind::Produce(_) => ResponseKind::Produce(Default::default()),
        RequestKind::CreateTopics(_) => ResponseKind::CreateTopics(Default::default()),
        RequestKind::DeleteTopics(_) => ResponseKind::DeleteTopics(Default::default()),
        RequestKind::OffsetCommit(_) => ResponseKind::OffsetCommit(Default::default()),
        RequestKind::TxnOffsetCommit(_) => ResponseKind::TxnOffsetCommit(Default::default()),
        RequestKind::DescribeGroups(_) => ResponseKind::DescribeGroups(Default::default()),
        RequestKind::DescribeConfigs(_) => ResponseKind::DescribeConfigs(Default::default()),
        RequestKind::FindCoordinator(_) => ResponseKind::FindCoordinator(Default::default()),
        RequestKind::ListGroups(_) => ResponseKind::ListGroups(Default::default()),
        RequestKind::DescribeProducers(_) => ResponseKind::DescribeProducers(Default::default()),
        RequestKind::DescribeTransactions(_) => {
            ResponseKind::DescribeTransactions(Default::default())
        }
        RequestKind::ListTransactions(_) => ResponseKind::ListTransactions(Default::default()),
        _ => ResponseKind::ApiVersions(Default::default()),
    }
}

/// (name, error code) of each part of a response; "" names the whole response.
fn codes(r: &ResponseKind) -> Vec<(String, i16)> {
    let named = |n: &str, c: i16| (n.to_string(), c);
    match r {
        ResponseKind::Produce(r) => r
            .responses
            .iter()
            .flat_map(|t| {
                t.partition_responses
                    .iter()
                    .map(|p| named(&t.name.0, p.error_code))
            })
            .collect(),
        ResponseKind::CreateTopics(r) => r
            .topics
            .iter()
            .map(|t| named(&t.name.0, t.error_code))
            .collect(),
        ResponseKind::DeleteTopics(r) => r
            .responses
            .iter()
            .map(|t| named(t.name.as_ref().map_or("", |n| n.0.as_str()), t.error_code))
            .collect(),
        ResponseKind::OffsetCommit(r) => r
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| named(&t.name.0, p.error_code)))
            .collect(),
        ResponseKind::DescribeGroups(r) => r
            .groups
            .iter()
            .map(|g| named(&g.group_id.0, g.error_code))
            .collect(),
        ResponseKind::DescribeConfigs(r) => r
            .results
            .iter()
            .map(|x| named(&x.resource_name, x.error_code))
            .collect(),
        ResponseKind::FindCoordinator(r) if r.coordinators.is_empty() && r.error_code != 0 => {
            vec![named("", r.error_code)]
        }
        ResponseKind::FindCoordinator(r) => r
            .coordinators
            .iter()
            .map(|c| named(&c.key, c.error_code))
            .collect(),
        ResponseKind::JoinGroup(r) => vec![named("", r.error_code)],
        ResponseKind::Heartbeat(r) => vec![named("", r.error_code)],
        ResponseKind::InitProducerId(r) => vec![named("", r.error_code)],
        ResponseKind::ElectLeaders(r) => vec![named("", r.error_code)],
        ResponseKind::AlterPartitionReassignments(r) => vec![named("", r.error_code)],
        ResponseKind::ListPartitionReassignments(r) => vec![named("", r.error_code)],
        ResponseKind::DescribeLogDirs(r) => vec![named("", r.error_code)],
        ResponseKind::DescribeAcls(r) => vec![named("", r.error_code)],
        ResponseKind::DescribeUserScramCredentials(r) => vec![named("", r.error_code)],
        ResponseKind::UpdateFeatures(r) => vec![named("", r.error_code)],
        ResponseKind::CreateAcls(r) => r.results.iter().map(|x| named("", x.error_code)).collect(),
        ResponseKind::DeleteAcls(r) => r
            .filter_results
            .iter()
            .map(|x| named("", x.error_code))
            .collect(),
        ResponseKind::AlterUserScramCredentials(r) => r
            .results
            .iter()
            .map(|x| named(&x.user, x.error_code))
            .collect(),
        ResponseKind::ListGroups(r) => r.groups.iter().map(|g| named(&g.group_id.0, 0)).collect(),
        r => txn_codes(r),
    }
}

/// [`codes`] for the transaction APIs.
fn txn_codes(r: &ResponseKind) -> Vec<(String, i16)> {
    let named = |n: &str, c: i16| (n.to_string(), c);
    match r {
        ResponseKind::WriteTxnMarkers(r) => r
            .markers
            .iter()
            .flat_map(|m| &m.topics)
            .flat_map(|t| t.partitions.iter().map(|p| named(&t.name.0, p.error_code)))
            .collect(),
        // v4's refusal is the whole request's.
        ResponseKind::AddPartitionsToTxn(r) if r.error_code != 0 => vec![named("", r.error_code)],
        ResponseKind::AddPartitionsToTxn(r) => r
            .results_by_topic_v3_and_below
            .iter()
            .flat_map(|t| {
                t.results_by_partition
                    .iter()
                    .map(|p| named(&t.name.0, p.partition_error_code))
            })
            .collect(),
        ResponseKind::AddOffsetsToTxn(r) => vec![named("", r.error_code)],
        ResponseKind::TxnOffsetCommit(r) => r
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| named(&t.name.0, p.error_code)))
            .collect(),
        ResponseKind::EndTxn(r) => vec![named("", r.error_code)],
        ResponseKind::DescribeProducers(r) => r
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| named(&t.name.0, p.error_code)))
            .collect(),
        ResponseKind::DescribeTransactions(r) => r
            .transaction_states
            .iter()
            .map(|t| named(&t.transactional_id.0, t.error_code))
            .collect(),
        ResponseKind::ListTransactions(r) => r
            .transaction_states
            .iter()
            .map(|t| named(&t.transactional_id.0, r.error_code))
            .collect(),
        _ => Vec::new(),
    }
}

fn run_all(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

fn refused(pairs: &[(&str, i16)]) -> Vec<(String, i16)> {
    pairs.iter().map(|(n, c)| (n.to_string(), *c)).collect()
}

struct Row {
    what: &'static str,
    api: ApiKey,
    version: i16,
    request: RequestKind,
    grants: Grants,
    outcome: Outcome,
}

fn row(
    what: &'static str,
    api: ApiKey,
    version: i16,
    request: RequestKind,
    granted: &[(Op, AclResourceType, &'static str)],
    outcome: Outcome,
) -> Row {
    Row {
        what,
        api,
        version,
        request,
        grants: grants(granted),
        outcome,
    }
}

fn data_rows() -> Vec<Row> {
    use Outcome::*;
    vec![
        row(
            "produce: WRITE on each topic",
            ApiKey::Produce,
            9,
            produce(&["a", "b"], 1),
            &[(Op::Write, Topic, "a")],
            Run(run_all(&["a"]), refused(&[("b", TAF)])),
        ),
        row(
            "produce: READ does not allow writing",
            ApiKey::Produce,
            9,
            produce(&["a"], 1),
            &[(Op::Read, Topic, "a")],
            Answer(refused(&[("a", TAF)])),
        ),
        row(
            "produce acks=0 with every topic refused: the connection closes",
            ApiKey::Produce,
            9,
            produce(&["a"], 0),
            &[],
            Close,
        ),
        row(
            "produce: a transactional id needs WRITE on it",
            ApiKey::Produce,
            9,
            {
                let RequestKind::Produce(mut r) = produce(&["a"], -1) else {
                    unreachable!()
                };
                r.transactional_id = Some(TransactionalId(s("tx")));
                RequestKind::Produce(r)
            },
            &[(Op::Write, Topic, "a")],
            Answer(refused(&[("a", TXN_AF)])),
        ),
        row(
            "idempotent InitProducerId: IDEMPOTENT_WRITE on the cluster",
            ApiKey::InitProducerId,
            4,
            RequestKind::InitProducerId(
                InitProducerIdRequest::default().with_transactional_id(None),
            ),
            &[(Op::IdempotentWrite, Cluster, "kafka-cluster")],
            Run(vec![], vec![]),
        ),
        row(
            "idempotent InitProducerId: or WRITE on some topic (Kafka 2.8+)",
            ApiKey::InitProducerId,
            4,
            RequestKind::InitProducerId(
                InitProducerIdRequest::default().with_transactional_id(None),
            ),
            &[(Op::Write, Topic, "orders")],
            Run(vec![], vec![]),
        ),
        row(
            "idempotent InitProducerId: neither",
            ApiKey::InitProducerId,
            4,
            RequestKind::InitProducerId(
                InitProducerIdRequest::default().with_transactional_id(None),
            ),
            &[(Op::Read, Topic, "orders")],
            Answer(refused(&[("", CAF)])),
        ),
        row(
            "transactional InitProducerId: WRITE on the transactional id",
            ApiKey::InitProducerId,
            4,
            RequestKind::InitProducerId(
                InitProducerIdRequest::default()
                    .with_transactional_id(Some(TransactionalId(s("tx")))),
            ),
            &[(Op::IdempotentWrite, Cluster, "kafka-cluster")],
            Answer(refused(&[("", TXN_AF)])),
        ),
    ]
}

fn txn_rows() -> Vec<Row> {
    use Outcome::*;
    vec![
        row(
            "WriteTxnMarkers: CLUSTER_ACTION, refused for every partition",
            ApiKey::WriteTxnMarkers,
            1,
            txn_markers(&["orders", "audit"]),
            &[(Op::Write, Topic, "orders"), (Op::Write, Topic, "audit")],
            Answer(refused(&[("orders", CAF), ("audit", CAF)])),
        ),
        row(
            "WriteTxnMarkers: a broker's CLUSTER_ACTION runs it",
            ApiKey::WriteTxnMarkers,
            1,
            txn_markers(&["orders"]),
            &[(Op::ClusterAction, Cluster, "kafka-cluster")],
            Run(run_all(&[]), refused(&[])),
        ),
        row(
            "DescribeProducers: READ on each topic",
            ApiKey::DescribeProducers,
            0,
            describe_producers(&["orders", "secret"]),
            &[(Op::Read, Topic, "orders"), (Op::Describe, Topic, "secret")],
            Run(run_all(&["orders"]), refused(&[("secret", TAF)])),
        ),
    ]
}

fn add_partitions_to_txn(id: &str, topics: &[&str]) -> RequestKind {
    let topics = topics
        .iter()
        .map(|t| {
            add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                .with_name(topic(t))
                .with_partitions(vec![0])
        })
        .collect();
    RequestKind::AddPartitionsToTxn(
        AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(s(id)))
            .with_v3_and_below_topics(topics),
    )
}

fn describe_txns(ids: &[&str]) -> RequestKind {
    RequestKind::DescribeTransactions(
        DescribeTransactionsRequest::default()
            .with_transactional_ids(ids.iter().map(|id| TransactionalId(s(*id))).collect()),
    )
}

fn coordinator_rows() -> Vec<Row> {
    use Outcome::*;
    const NOT_ATTEMPTED: i16 = 55; // OPERATION_NOT_ATTEMPTED
    let offsets = |id: &str, group: &str| {
        RequestKind::AddOffsetsToTxn(
            AddOffsetsToTxnRequest::default()
                .with_transactional_id(TransactionalId(s(id)))
                .with_group_id(GroupId(s(group))),
        )
    };
    let end = RequestKind::EndTxn(
        EndTxnRequest::default().with_transactional_id(TransactionalId(s("tx"))),
    );
    vec![
        row(
            "AddPartitionsToTxn: WRITE on the transactional id and each topic",
            ApiKey::AddPartitionsToTxn,
            3,
            add_partitions_to_txn("tx", &["orders"]),
            &[(Op::Write, TxnId, "tx"), (Op::Write, Topic, "orders")],
            Run(run_all(&[]), refused(&[])),
        ),
        row(
            "AddPartitionsToTxn: a refused topic, the others not attempted",
            ApiKey::AddPartitionsToTxn,
            3,
            add_partitions_to_txn("tx", &["orders", "secret"]),
            &[(Op::Write, TxnId, "tx"), (Op::Write, Topic, "orders")],
            Answer(refused(&[("orders", NOT_ATTEMPTED), ("secret", TAF)])),
        ),
        row(
            "AddPartitionsToTxn: without WRITE on the transactional id",
            ApiKey::AddPartitionsToTxn,
            3,
            add_partitions_to_txn("tx", &["orders"]),
            &[(Op::Write, Topic, "orders")],
            Answer(refused(&[("orders", TXN_AF)])),
        ),
        row(
            "AddOffsetsToTxn: WRITE on the transactional id",
            ApiKey::AddOffsetsToTxn,
            3,
            offsets("tx", "g"),
            &[(Op::Read, Group, "g")],
            Answer(refused(&[("", TXN_AF)])),
        ),
        row(
            "AddOffsetsToTxn: READ on the group",
            ApiKey::AddOffsetsToTxn,
            3,
            offsets("tx", "g"),
            &[(Op::Write, TxnId, "tx")],
            Answer(refused(&[("", GAF)])),
        ),
        row(
            "AddPartitionsToTxn v4 (a leader's verification): CLUSTER_ACTION",
            ApiKey::AddPartitionsToTxn,
            4,
            verify_only("tx", "orders"),
            &[(Op::Write, TxnId, "tx"), (Op::Write, Topic, "orders")],
            Answer(refused(&[("", CAF)])),
        ),
        row(
            "DescribeTransactions: DESCRIBE on each transactional id",
            ApiKey::DescribeTransactions,
            0,
            describe_txns(&["tx", "secret"]),
            &[(Op::Describe, TxnId, "tx")],
            Run(run_all(&["tx"]), refused(&[("secret", TXN_AF)])),
        ),
        row(
            "DescribeTransactions: without DESCRIBE on the transactional id",
            ApiKey::DescribeTransactions,
            0,
            describe_txns(&["tx"]),
            &[(Op::Read, TxnId, "tx")],
            Answer(refused(&[("tx", TXN_AF)])),
        ),
        row(
            "ListTransactions: runs for anyone, its answer filtered",
            ApiKey::ListTransactions,
            1,
            RequestKind::ListTransactions(Default::default()),
            &[],
            Run(run_all(&[]), refused(&[])),
        ),
        row(
            "EndTxn: WRITE on the transactional id",
            ApiKey::EndTxn,
            3,
            end,
            &[(Op::Describe, TxnId, "tx")],
            Answer(refused(&[("", TXN_AF)])),
        ),
    ]
}

/// TxnOffsetCommit's rows of [`coordinator_rows`].
fn txn_offset_commit_rows() -> Vec<Row> {
    use Outcome::*;
    let txn_commit = |topics: &[&str]| {
        let topics = topics
            .iter()
            .map(|t| {
                txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                    .with_name(topic(t))
                    .with_partitions(vec![Default::default()])
            })
            .collect();
        RequestKind::TxnOffsetCommit(
            TxnOffsetCommitRequest::default()
                .with_transactional_id(TransactionalId(s("tx")))
                .with_group_id(GroupId(s("g")))
                .with_topics(topics),
        )
    };
    let committer = [
        (Op::Write, TxnId, "tx"),
        (Op::Read, Group, "g"),
        (Op::Read, Topic, "b"),
    ];
    vec![
        row(
            "TxnOffsetCommit: WRITE on the transactional id, READ on the group and each topic",
            ApiKey::TxnOffsetCommit,
            3,
            txn_commit(&["a", "b"]),
            &committer,
            Run(run_all(&["b"]), refused(&[("a", TAF)])),
        ),
        row(
            "TxnOffsetCommit: without WRITE on the transactional id, every partition refused",
            ApiKey::TxnOffsetCommit,
            3,
            txn_commit(&["b"]),
            &committer[1..],
            Answer(refused(&[("b", TXN_AF)])),
        ),
        row(
            "TxnOffsetCommit: without READ on the group, every partition refused",
            ApiKey::TxnOffsetCommit,
            0,
            txn_commit(&["b"]),
            &[committer[0], committer[2]],
            Answer(refused(&[("b", GAF)])),
        ),
    ]
}

fn verify_only(id: &str, t: &str) -> RequestKind {
    use kafka_protocol::messages::add_partitions_to_txn_request::{
        AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
    };
    let topic = AddPartitionsToTxnTopic::default()
        .with_name(topic(t))
        .with_partitions(vec![0]);
    let txn = AddPartitionsToTxnTransaction::default()
        .with_transactional_id(TransactionalId(s(id)))
        .with_verify_only(true)
        .with_topics(vec![topic]);
    RequestKind::AddPartitionsToTxn(
        AddPartitionsToTxnRequest::default().with_transactions(vec![txn]),
    )
}

fn txn_markers(topics: &[&str]) -> RequestKind {
    let mut m = write_txn_markers_request::WritableTxnMarker::default();
    m.topics = topics
        .iter()
        .map(|t| {
            write_txn_markers_request::WritableTxnMarkerTopic::default()
                .with_name(topic(t))
                .with_partition_indexes(vec![0])
        })
        .collect();
    RequestKind::WriteTxnMarkers(WriteTxnMarkersRequest::default().with_markers(vec![m]))
}

fn describe_producers(topics: &[&str]) -> RequestKind {
    let topics = topics
        .iter()
        .map(|t| {
            describe_producers_request::TopicRequest::default()
                .with_name(topic(t))
                .with_partition_indexes(vec![0])
        })
        .collect();
    RequestKind::DescribeProducers(DescribeProducersRequest::default().with_topics(topics))
}

fn group_rows() -> Vec<Row> {
    use Outcome::*;
    let commit = |topics: &[&str]| {
        let mut r = OffsetCommitRequest::default();
        r.group_id = GroupId(s("g"));
        r.topics = topics
            .iter()
            .map(|t| {
                let mut ct = offset_commit_request::OffsetCommitRequestTopic::default();
                ct.name = topic(t);
                ct.partitions = vec![Default::default()];
                ct
            })
            .collect();
        RequestKind::OffsetCommit(r)
    };
    let describe = RequestKind::DescribeGroups(
        DescribeGroupsRequest::default().with_groups(vec![GroupId(s("g")), GroupId(s("h"))]),
    );
    let find = |key_type: i8| {
        RequestKind::FindCoordinator(
            FindCoordinatorRequest::default()
                .with_key_type(key_type)
                .with_coordinator_keys(vec![s("g"), s("h")]),
        )
    };
    vec![
        row(
            "JoinGroup: READ on the group",
            ApiKey::JoinGroup,
            5,
            RequestKind::JoinGroup(JoinGroupRequest::default().with_group_id(GroupId(s("g")))),
            &[(Op::Describe, Group, "g")],
            Answer(refused(&[("", GAF)])),
        ),
        row(
            "Heartbeat: READ on the group",
            ApiKey::Heartbeat,
            3,
            RequestKind::Heartbeat(HeartbeatRequest::default().with_group_id(GroupId(s("g")))),
            &[(Op::Read, Group, "g")],
            Run(vec![], vec![]),
        ),
        row(
            "OffsetCommit: READ on the group, then READ on each topic",
            ApiKey::OffsetCommit,
            8,
            commit(&["a", "b"]),
            &[(Op::Read, Group, "g"), (Op::Read, Topic, "b")],
            Run(run_all(&["b"]), refused(&[("a", TAF)])),
        ),
        row(
            "OffsetCommit: no READ on the group refuses every partition",
            ApiKey::OffsetCommit,
            8,
            commit(&["a"]),
            &[(Op::Read, Topic, "a")],
            Answer(refused(&[("a", GAF)])),
        ),
        row(
            "DescribeGroups: DESCRIBE on each group",
            ApiKey::DescribeGroups,
            5,
            describe,
            &[(Op::Describe, Group, "h")],
            Run(run_all(&["h"]), refused(&[("g", GAF)])),
        ),
        row(
            "FindCoordinator v4: DESCRIBE on each group key",
            ApiKey::FindCoordinator,
            4,
            find(0),
            &[(Op::Describe, Group, "g")],
            Run(run_all(&["g"]), refused(&[("h", GAF)])),
        ),
        row(
            "FindCoordinator v4: DESCRIBE on each transactional id key",
            ApiKey::FindCoordinator,
            4,
            find(1),
            &[(Op::Describe, TxnId, "*")],
            Run(run_all(&["g", "h"]), vec![]),
        ),
        row(
            "FindCoordinator v3: the one key refused",
            ApiKey::FindCoordinator,
            3,
            RequestKind::FindCoordinator(FindCoordinatorRequest::default().with_key(s("g"))),
            &[],
            Answer(refused(&[("", GAF)])),
        ),
    ]
}

fn admin_rows() -> Vec<Row> {
    use Outcome::*;
    let create = RequestKind::CreateTopics(
        CreateTopicsRequest::default().with_topics(
            ["a", "b"]
                .iter()
                .map(|t| create_topics_request::CreatableTopic::default().with_name(topic(t)))
                .collect(),
        ),
    );
    let configs =
        RequestKind::DescribeConfigs(DescribeConfigsRequest::default().with_resources(vec![
            describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s("a")),
            describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(4)
                .with_resource_name(s("1")),
        ]));
    let rows = vec![
        row(
            "CreateTopics: CREATE on the cluster covers every topic",
            ApiKey::CreateTopics,
            5,
            create.clone(),
            &[(Op::Create, Cluster, "kafka-cluster")],
            Run(run_all(&["a", "b"]), vec![]),
        ),
        row(
            "CreateTopics: else CREATE on each topic",
            ApiKey::CreateTopics,
            5,
            create,
            &[(Op::Create, Topic, "b")],
            Run(run_all(&["b"]), refused(&[("a", TAF)])),
        ),
        row(
            "DeleteTopics: DELETE on each topic",
            ApiKey::DeleteTopics,
            4,
            RequestKind::DeleteTopics(
                DeleteTopicsRequest::default().with_topic_names(vec![topic("a"), topic("b")]),
            ),
            &[(Op::Delete, Topic, "a"), (Op::Describe, Topic, "b")],
            Run(run_all(&["a"]), refused(&[("b", TAF)])),
        ),
        row(
            "DescribeConfigs: a topic's on the topic, a broker's on the cluster",
            ApiKey::DescribeConfigs,
            3,
            configs.clone(),
            &[(Op::DescribeConfigs, Topic, "a")],
            Run(run_all(&["a"]), refused(&[("1", CAF)])),
        ),
        row(
            "DescribeConfigs: DESCRIBE_CONFIGS on the cluster does not cover topics",
            ApiKey::DescribeConfigs,
            3,
            configs,
            &[(Op::DescribeConfigs, Cluster, "kafka-cluster")],
            Run(run_all(&["1"]), refused(&[("a", TAF)])),
        ),
    ];
    rows
}

fn cluster_rows() -> Vec<Row> {
    use Outcome::*;
    let cluster_api = |what, api, request: RequestKind, granted_op: Op| {
        row(
            what,
            api,
            3,
            request,
            &[(granted_op, Topic, "*")],
            Answer(vec![]),
        )
    };
    let mut rows = Vec::new();
    // Cluster-wide APIs: refused whole with CLUSTER_AUTHORIZATION_FAILED (the grant on topics
    // does not count).
    rows.extend([
        cluster_api(
            "ElectLeaders: ALTER on the cluster",
            ApiKey::ElectLeaders,
            RequestKind::ElectLeaders(Default::default()),
            Op::Alter,
        ),
        cluster_api(
            "AlterPartitionReassignments: ALTER on the cluster",
            ApiKey::AlterPartitionReassignments,
            RequestKind::AlterPartitionReassignments(Default::default()),
            Op::Alter,
        ),
        cluster_api(
            "UpdateFeatures: ALTER on the cluster",
            ApiKey::UpdateFeatures,
            RequestKind::UpdateFeatures(Default::default()),
            Op::Alter,
        ),
        cluster_api(
            "ListPartitionReassignments: DESCRIBE on the cluster",
            ApiKey::ListPartitionReassignments,
            RequestKind::ListPartitionReassignments(Default::default()),
            Op::Describe,
        ),
        cluster_api(
            "DescribeLogDirs: DESCRIBE on the cluster",
            ApiKey::DescribeLogDirs,
            RequestKind::DescribeLogDirs(Default::default()),
            Op::Describe,
        ),
        cluster_api(
            "DescribeAcls: DESCRIBE on the cluster",
            ApiKey::DescribeAcls,
            RequestKind::DescribeAcls(Default::default()),
            Op::Describe,
        ),
        cluster_api(
            "DescribeUserScramCredentials: DESCRIBE on the cluster",
            ApiKey::DescribeUserScramCredentials,
            RequestKind::DescribeUserScramCredentials(Default::default()),
            Op::Describe,
        ),
    ]);
    for r in rows.iter_mut().filter(|r| r.outcome == Answer(vec![])) {
        r.outcome = Answer(refused(&[("", CAF)]));
    }
    rows.push(row(
        "CreateAcls: ALTER on the cluster, each creation refused",
        ApiKey::CreateAcls,
        3,
        RequestKind::CreateAcls(
            CreateAclsRequest::default()
                .with_creations(vec![Default::default(), Default::default()]),
        ),
        &[(Op::Describe, Cluster, "kafka-cluster")],
        Answer(refused(&[("", CAF), ("", CAF)])),
    ));
    rows.push(row(
        "DeleteAcls: allowed with ALTER on the cluster",
        ApiKey::DeleteAcls,
        3,
        RequestKind::DeleteAcls(Default::default()),
        &[(Op::Alter, Cluster, "kafka-cluster")],
        Run(vec![], vec![]),
    ));
    rows
}

#[test]
fn each_api_checks_what_kafka_checks() {
    let rows: Vec<Row> = data_rows()
        .into_iter()
        .chain(txn_rows())
        .chain(coordinator_rows())
        .chain(txn_offset_commit_rows())
        .chain(group_rows())
        .chain(admin_rows())
        .chain(cluster_rows())
        .collect();
    let mut failures = Vec::new();
    for r in rows {
        let got = run(&r.grants, r.api, r.version, r.request);
        if got != r.outcome {
            failures.push(format!(
                "{}: expected {:?}, got {:?}",
                r.what, r.outcome, got
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn without_an_authorizer_nothing_changes() {
    let access = Access::unchecked();
    assert!(access.image().is_none());
    assert!(access.allows(Op::Write, Topic, "a"));
    let image = MetadataImage::default();
    // The gate is not even asked in dispatch; asked anyway, it lets everything run as it came.
    match gate(&access, &image, ApiKey::Produce, 9, produce(&["a", "b"], 1)) {
        Gate::Run(RequestKind::Produce(r), fixup) => {
            assert_eq!(r.topic_data.len(), 2);
            let reply = fixup(&access, Reply::Nothing);
            assert!(matches!(reply, Reply::Nothing));
        }
        _ => panic!("a request without an authorizer runs unchanged"),
    }
    // KIP-430 without an authorizer: every supported operation, as Kafka answers.
    assert_eq!(describe_cluster_operations(&access, false), i32::MIN);
    assert_ne!(describe_cluster_operations(&access, true), 0);
}

#[test]
fn metadata_hides_what_it_may_not_describe() {
    let d = grants(&[
        (Op::Describe, Topic, "a"),
        (Op::Describe, Topic, "new"),
        (Op::Describe, Topic, "mine"),
    ]);
    let all = ["a", "b", "secret"].map(String::from);
    let exists = |t: &str| all.iter().any(|x| x == t);
    // All topics: only those it may describe, quietly.
    let plan = metadata_plan(&d, None, all.iter().cloned(), exists, true);
    assert_eq!(plan.described, ["a"]);
    assert!(plan.refused.is_empty());
    // Named: refused whether or not they exist; a missing one it may not create is refused too.
    let asked = ["a", "secret", "nonexistent", "new"]
        .map(String::from)
        .to_vec();
    let plan = metadata_plan(&d, Some(asked.clone()), all.iter().cloned(), exists, true);
    assert_eq!(plan.described, ["a"]);
    assert_eq!(plan.refused, ["secret", "nonexistent"]);
    assert_eq!(plan.refused_create, ["new"]);
    // Without auto-creation a missing topic is described (UNKNOWN_TOPIC_OR_PARTITION).
    let plan = metadata_plan(&d, Some(asked.clone()), all.iter().cloned(), exists, false);
    assert_eq!(plan.described, ["a", "new"]);
    // CREATE on the topic, or on the cluster, lets it be created.
    let creator = grants(&[
        (Op::Describe, Topic, "*"),
        (Op::Create, Cluster, "kafka-cluster"),
    ]);
    let plan = metadata_plan(&creator, Some(asked), all.iter().cloned(), exists, true);
    assert_eq!(plan.described, ["a", "secret", "nonexistent", "new"]);
}

#[test]
fn fetch_reads_need_read_and_followers_cluster_action() {
    let consumer = FetchRequest::default().with_replica_id(BrokerId(-1));
    let follower = FetchRequest::default().with_replica_id(BrokerId(2));
    let d = grants(&[(Op::Read, Topic, "a")]);
    let may = fetch_reader(&d, &consumer, 12);
    assert!(may("a") && !may("b"));
    let may = fetch_reader(&d, &follower, 12);
    assert!(
        !may("a"),
        "a follower fetch needs CLUSTER_ACTION, READ does not do"
    );
    let broker = grants(&[(Op::ClusterAction, Cluster, "kafka-cluster")]);
    let may = fetch_reader(&broker, &follower, 12);
    assert!(may("a") && may("b"));
    let v15 = FetchRequest::default()
        .with_replica_state(fetch_request::ReplicaState::default().with_replica_id(BrokerId(2)));
    assert!(!fetch_reader(&d, &v15, 15)("a"));
}

#[test]
fn listings_show_only_what_may_be_described() {
    let listed = |d: &Grants| {
        let mut resp = ListGroupsResponse::default();
        resp.groups = ["g", "h"]
            .iter()
            .map(|g| list_groups_response::ListedGroup::default().with_group_id(GroupId(s(*g))))
            .collect();
        match gate(
            d,
            &MetadataImage::default(),
            ApiKey::ListGroups,
            4,
            RequestKind::ListGroups(Default::default()),
        ) {
            Gate::Run(_, fixup) => match fixup(d, Reply::Respond(ResponseKind::ListGroups(resp))) {
                Reply::Respond(r) => codes(&r).into_iter().map(|(n, _)| n).collect::<Vec<_>>(),
                _ => panic!("a response"),
            },
            Gate::Answer(_) => panic!("ListGroups runs"),
        }
    };
    assert_eq!(listed(&grants(&[(Op::Describe, Group, "h")])), ["h"]);
    assert_eq!(
        listed(&grants(&[(Op::Describe, Cluster, "kafka-cluster")])),
        ["g", "h"]
    );
    assert!(listed(&grants(&[])).is_empty());
}

#[test]
fn offset_fetch_hides_offsets_of_topics_it_may_not_describe() {
    let d = grants(&[(Op::Describe, Group, "g"), (Op::Describe, Topic, "a")]);
    let answer = || {
        let mut resp = OffsetFetchResponse::default();
        resp.topics = ["a", "b"]
            .iter()
            .map(|t| {
                let mut ot = offset_fetch_response::OffsetFetchResponseTopic::default();
                ot.name = topic(t);
                ot.partitions = vec![
                    offset_fetch_response::OffsetFetchResponsePartition::default()
                        .with_committed_offset(42),
                ];
                ot
            })
            .collect();
        resp
    };
    let fetch = |topics: Option<Vec<&str>>| {
        let mut r = OffsetFetchRequest::default();
        r.group_id = GroupId(s("g"));
        r.topics = topics.map(|ts| {
            ts.iter()
                .map(|t| {
                    offset_fetch_request::OffsetFetchRequestTopic::default().with_name(topic(t))
                })
                .collect()
        });
        let Gate::Run(_, fixup) = gate(
            &d,
            &MetadataImage::default(),
            ApiKey::OffsetFetch,
            7,
            RequestKind::OffsetFetch(r),
        ) else {
            panic!("the group may be described");
        };
        match fixup(&d, Reply::Respond(ResponseKind::OffsetFetch(answer()))) {
            Reply::Respond(ResponseKind::OffsetFetch(r)) => r
                .topics
                .into_iter()
                .map(|t| {
                    (
                        t.name.0.to_string(),
                        t.partitions[0].committed_offset,
                        t.partitions[0].error_code,
                    )
                })
                .collect::<Vec<_>>(),
            _ => panic!("an OffsetFetch response"),
        }
    };
    assert_eq!(fetch(None), [("a".to_string(), 42, 0)]);
    assert_eq!(
        fetch(Some(vec!["a", "b"])),
        [("a".to_string(), 42, 0), ("b".to_string(), -1, TAF)]
    );
}

/// KIP-664's answers show only what the principal may DESCRIBE: ListTransactions its ids,
/// DescribeTransactions the topics of a description.
#[test]
fn transaction_admin_answers_show_only_what_may_be_described() {
    let d = grants(&[(Op::Describe, TxnId, "mine"), (Op::Describe, Topic, "seen")]);
    let image = MetadataImage::default();
    let listed = |id: &str| {
        list_transactions_response::TransactionState::default()
            .with_transactional_id(TransactionalId(s(id)))
    };
    let all = ListTransactionsResponse::default()
        .with_transaction_states(vec![listed("mine"), listed("theirs")]);
    let list = RequestKind::ListTransactions(Default::default());
    let Gate::Run(_, fixup) = gate(&d, &image, ApiKey::ListTransactions, 1, list) else {
        panic!("ListTransactions runs");
    };
    match fixup(&d, Reply::Respond(ResponseKind::ListTransactions(all))) {
        Reply::Respond(r) => assert_eq!(codes(&r), refused(&[("mine", 0)])),
        other => panic!("{other:?}"),
    }

    let topic_data = |t: &str| {
        describe_transactions_response::TopicData::default()
            .with_topic(topic(t))
            .with_partitions(vec![0])
    };
    let described = DescribeTransactionsResponse::default().with_transaction_states(vec![
        describe_transactions_response::TransactionState::default()
            .with_transactional_id(TransactionalId(s("mine")))
            .with_topics(vec![topic_data("seen"), topic_data("hidden")]),
    ]);
    let req = describe_txns(&["mine"]);
    let Gate::Run(_, fixup) = gate(&d, &image, ApiKey::DescribeTransactions, 0, req) else {
        panic!("DescribeTransactions runs");
    };
    match fixup(
        &d,
        Reply::Respond(ResponseKind::DescribeTransactions(described)),
    ) {
        Reply::Respond(ResponseKind::DescribeTransactions(r)) => {
            let topics: Vec<&str> = r.transaction_states[0]
                .topics
                .iter()
                .map(|t| t.topic.0.as_str())
                .collect();
            assert_eq!(topics, ["seen"]);
        }
        other => panic!("{other:?}"),
    }
}
