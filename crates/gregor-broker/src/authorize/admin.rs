//! The admin APIs: topics (CREATE on the cluster or each topic, DELETE, ALTER), configs
//! (DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic, or on the cluster for broker configs), and
//! the cluster-wide ones (ALTER on the cluster to elect leaders, reassign, change ACLs or SCRAM
//! credentials; DESCRIBE on the cluster to list reassignments, log dirs, ACLs or credentials).

use std::collections::BTreeSet;

use gregor_meta::acl::{AclOperation, AclResourceType};
use gregor_meta::MetadataImage;
use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse as LegacyAlterConfigsResourceResponse;
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_acls_response::DeleteAclsFilterResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResult;
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, AlterPartitionReassignmentsResponse,
    AlterUserScramCredentialsResponse, CreateAclsResponse, CreatePartitionsRequest,
    CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse, DeleteAclsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse, DescribeAclsResponse, DescribeConfigsRequest,
    DescribeConfigsResponse, DescribeLogDirsResponse, DescribeUserScramCredentialsResponse,
    ElectLeadersResponse, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
    ListPartitionReassignmentsResponse, RequestKind, ResponseKind, TopicName,
};
use kafka_protocol::ResponseError;

use super::common::{
    no_fixup, on_response, run_unless_empty, s, split, topic_name_of, Decide, Gate,
};
use crate::connection::Reply;

const TOPIC_AUTHORIZATION_FAILED: ResponseError = ResponseError::TopicAuthorizationFailed;
const CLUSTER_AUTHORIZATION_FAILED: ResponseError = ResponseError::ClusterAuthorizationFailed;

pub(super) fn gate(
    d: &dyn Decide,
    image: &MetadataImage,
    version: i16,
    request: RequestKind,
) -> Gate {
    let cluster_op = match &request {
        RequestKind::ElectLeaders(_)
        | RequestKind::AlterPartitionReassignments(_)
        | RequestKind::CreateAcls(_)
        | RequestKind::DeleteAcls(_)
        | RequestKind::AlterUserScramCredentials(_)
        | RequestKind::UpdateFeatures(_) => Some(AclOperation::Alter),
        // Kafka: quotas are cluster configs.
        RequestKind::AlterClientQuotas(_) => Some(AclOperation::AlterConfigs),
        RequestKind::DescribeClientQuotas(_) => Some(AclOperation::DescribeConfigs),
        RequestKind::ListPartitionReassignments(_)
        | RequestKind::DescribeLogDirs(_)
        | RequestKind::DescribeAcls(_)
        | RequestKind::DescribeUserScramCredentials(_) => Some(AclOperation::Describe),
        _ => None,
    };
    if let Some(op) = cluster_op {
        return if d.cluster(op) {
            Gate::Run(request, no_fixup())
        } else {
            Gate::Answer(Reply::Respond(cluster_refusal(request, version)))
        };
    }
    match request {
        RequestKind::CreateTopics(r) => create_topics(d, r),
        RequestKind::DeleteTopics(r) => delete_topics(d, image, r),
        RequestKind::CreatePartitions(r) => create_partitions(d, r),
        RequestKind::DescribeConfigs(r) => describe_configs(d, r),
        RequestKind::IncrementalAlterConfigs(r) => incremental_alter_configs(d, r),
        RequestKind::AlterConfigs(r) => alter_configs(d, r),
        other => Gate::Run(other, no_fixup()),
    }
}

/// The answer to a cluster-wide request refused CLUSTER_AUTHORIZATION_FAILED: the whole
/// request's error, on each of its parts where the response has parts.
fn cluster_refusal(request: RequestKind, version: i16) -> ResponseKind {
    let e = CLUSTER_AUTHORIZATION_FAILED;
    match request {
        RequestKind::CreateAcls(r) => {
            let mut resp = CreateAclsResponse::default();
            resp.results = r
                .creations
                .iter()
                .map(|_| {
                    let mut out = AclCreationResult::default();
                    out.error_code = e.code();
                    out
                })
                .collect();
            ResponseKind::CreateAcls(resp)
        }
        RequestKind::DeleteAcls(r) => {
            let mut resp = DeleteAclsResponse::default();
            resp.filter_results = r
                .filters
                .iter()
                .map(|_| {
                    let mut out = DeleteAclsFilterResult::default();
                    out.error_code = e.code();
                    out
                })
                .collect();
            ResponseKind::DeleteAcls(resp)
        }
        RequestKind::AlterUserScramCredentials(r) => {
            let users: BTreeSet<String> = r
                .deletions
                .iter()
                .map(|x| x.name.to_string())
                .chain(r.upsertions.iter().map(|x| x.name.to_string()))
                .collect();
            let mut resp = AlterUserScramCredentialsResponse::default();
            resp.results = users
                .into_iter()
                .map(|u| {
                    let mut out = AlterUserScramCredentialsResult::default();
                    out.user = s(u);
                    out.error_code = e.code();
                    out
                })
                .collect();
            ResponseKind::AlterUserScramCredentials(resp)
        }
        RequestKind::AlterClientQuotas(r) => {
            let refusal = gregor_meta::ApiError::new(e, CLUSTER_AUTHORIZATION_FAILED.to_string());
            ResponseKind::AlterClientQuotas(crate::handlers::quotas::refuse_alter(&r, &refusal))
        }
        RequestKind::UpdateFeatures(r) => ResponseKind::UpdateFeatures(
            crate::handlers::features::refuse_unauthorized(&r, version),
        ),
        RequestKind::DescribeClientQuotas(_) => {
            let mut resp = kafka_protocol::messages::DescribeClientQuotasResponse::default();
            resp.error_code = e.code();
            resp.error_message = Some(s(e.to_string()));
            ResponseKind::DescribeClientQuotas(resp)
        }
        other => partition_refusal(other, version),
    }
}

/// [`cluster_refusal`] of the requests that name partitions: each answers the error too.
fn partition_refusal(request: RequestKind, version: i16) -> ResponseKind {
    let e = CLUSTER_AUTHORIZATION_FAILED;
    match request {
        RequestKind::ElectLeaders(r) => {
            let mut resp = ElectLeadersResponse::default();
            if version >= 1 {
                resp.error_code = e.code();
            }
            resp.replica_election_results = r
                .topic_partitions
                .unwrap_or_default()
                .into_iter()
                .map(|t| {
                    let mut out = ReplicaElectionResult::default();
                    out.topic = t.topic;
                    out.partition_result = t
                        .partitions
                        .into_iter()
                        .map(|p| {
                            let mut pr = PartitionResult::default();
                            pr.partition_id = p;
                            pr.error_code = e.code();
                            pr
                        })
                        .collect();
                    out
                })
                .collect();
            ResponseKind::ElectLeaders(resp)
        }
        RequestKind::AlterPartitionReassignments(r) => {
            let mut resp = AlterPartitionReassignmentsResponse::default();
            resp.error_code = e.code();
            resp.responses = r
                .topics
                .into_iter()
                .map(|t| {
                    let mut out = ReassignableTopicResponse::default();
                    out.name = t.name;
                    out.partitions = t
                        .partitions
                        .into_iter()
                        .map(|p| {
                            let mut pr = ReassignablePartitionResponse::default();
                            pr.partition_index = p.partition_index;
                            pr.error_code = e.code();
                            pr
                        })
                        .collect();
                    out
                })
                .collect();
            ResponseKind::AlterPartitionReassignments(resp)
        }
        other => describe_refusal(other, version),
    }
}

/// The cluster-wide describe APIs refused: the whole response's error, nothing listed.
fn describe_refusal(request: RequestKind, version: i16) -> ResponseKind {
    let e = CLUSTER_AUTHORIZATION_FAILED;
    match request {
        RequestKind::ListPartitionReassignments(_) => {
            let mut resp = ListPartitionReassignmentsResponse::default();
            resp.error_code = e.code();
            ResponseKind::ListPartitionReassignments(resp)
        }
        RequestKind::DescribeLogDirs(_) => {
            let mut resp = DescribeLogDirsResponse::default();
            if version >= 3 {
                resp.error_code = e.code();
            }
            ResponseKind::DescribeLogDirs(resp)
        }
        RequestKind::DescribeAcls(_) => {
            let mut resp = DescribeAclsResponse::default();
            resp.error_code = e.code();
            resp.error_message = Some(s(e.to_string()));
            ResponseKind::DescribeAcls(resp)
        }
        _ => {
            let mut resp = DescribeUserScramCredentialsResponse::default();
            resp.error_code = e.code();
            ResponseKind::DescribeUserScramCredentials(resp)
        }
    }
}

/// KIP-430's `cluster_authorized_operations` of DescribeCluster (and Metadata v8 to v10):
/// the schema's "not asked" value unless asked, 0 without DESCRIBE on the cluster.
pub fn describe_cluster_operations(d: &dyn Decide, asked: bool) -> i32 {
    if !asked {
        i32::MIN
    } else if d.cluster(AclOperation::Describe) {
        d.authorized_operations(
            AclResourceType::Cluster,
            gregor_meta::acl::CLUSTER_RESOURCE_NAME,
        )
    } else {
        0
    }
}

/// CreateTopics: CREATE on the cluster, else on each topic; the configs of a created topic are
/// shown only with DESCRIBE_CONFIGS on it.
fn create_topics(d: &dyn Decide, mut r: CreateTopicsRequest) -> Gate {
    let topics = std::mem::take(&mut r.topics);
    let (kept, refused) = if d.allows_quietly(
        AclOperation::Create,
        AclResourceType::Cluster,
        gregor_meta::acl::CLUSTER_RESOURCE_NAME,
    ) {
        (topics, Vec::new())
    } else {
        split(
            d,
            AclOperation::Create,
            AclResourceType::Topic,
            topics,
            |t| t.name.0.as_str(),
        )
    };
    let answers: Vec<CreatableTopicResult> = refused
        .into_iter()
        .map(|t| {
            let mut out = CreatableTopicResult::default();
            out.name = t.name;
            out.error_code = TOPIC_AUTHORIZATION_FAILED.code();
            out.error_message = Some(s(TOPIC_AUTHORIZATION_FAILED.to_string()));
            out.num_partitions = -1;
            out.replication_factor = -1;
            out.topic_config_error_code = TOPIC_AUTHORIZATION_FAILED.code();
            out
        })
        .collect();
    r.topics = kept;
    let fixup = on_response(move |d, resp| match resp {
        ResponseKind::CreateTopics(mut resp) => {
            for t in resp.topics.iter_mut().filter(|t| t.error_code == 0) {
                if !d.allows_quietly(
                    AclOperation::DescribeConfigs,
                    AclResourceType::Topic,
                    &t.name.0,
                ) {
                    t.topic_config_error_code = TOPIC_AUTHORIZATION_FAILED.code();
                    t.configs = None;
                }
            }
            resp.topics.extend(answers);
            ResponseKind::CreateTopics(resp)
        }
        other => other,
    });
    let empty = ResponseKind::CreateTopics(CreateTopicsResponse::default());
    let nothing_left = r.topics.is_empty();
    run_unless_empty(d, nothing_left, RequestKind::CreateTopics(r), empty, fixup)
}

/// DeleteTopics: DELETE on each topic; a topic named by id it may not DESCRIBE is refused
/// without its name.
fn delete_topics(d: &dyn Decide, image: &MetadataImage, mut r: DeleteTopicsRequest) -> Gate {
    let refusal = |name: Option<TopicName>, id| {
        let mut out = DeletableTopicResult::default();
        out.name = name;
        out.topic_id = id;
        out.error_code = TOPIC_AUTHORIZATION_FAILED.code();
        out.error_message = Some(s(TOPIC_AUTHORIZATION_FAILED.to_string()));
        out
    };
    let mut answers = Vec::new();
    let names = std::mem::take(&mut r.topic_names);
    let (kept, refused) = split(
        d,
        AclOperation::Delete,
        AclResourceType::Topic,
        names,
        |n| n.0.as_str(),
    );
    answers.extend(
        refused
            .into_iter()
            .map(|n| refusal(Some(n), gregor_meta::Uuid::nil())),
    );
    r.topic_names = kept;
    let mut kept = Vec::new();
    for t in std::mem::take(&mut r.topics) {
        let name = match &t.name {
            Some(n) => Some(n.0.to_string()),
            None => topic_name_of(image, t.topic_id),
        };
        let Some(name) = name else {
            kept.push(t); // an unknown id: the handler answers UNKNOWN_TOPIC_ID
            continue;
        };
        if t.name.is_none() && !d.allows(AclOperation::Describe, AclResourceType::Topic, &name) {
            answers.push(refusal(None, t.topic_id));
        } else if !d.allows(AclOperation::Delete, AclResourceType::Topic, &name) {
            answers.push(refusal(Some(TopicName(s(name))), t.topic_id));
        } else {
            kept.push(t);
        }
    }
    r.topics = kept;
    let fixup = on_response(move |_, resp| match resp {
        ResponseKind::DeleteTopics(mut resp) => {
            resp.responses.extend(answers);
            ResponseKind::DeleteTopics(resp)
        }
        other => other,
    });
    let empty = ResponseKind::DeleteTopics(DeleteTopicsResponse::default());
    let nothing_left = r.topics.is_empty() && r.topic_names.is_empty();
    run_unless_empty(d, nothing_left, RequestKind::DeleteTopics(r), empty, fixup)
}

/// CreatePartitions: ALTER on each topic.
fn create_partitions(d: &dyn Decide, mut r: CreatePartitionsRequest) -> Gate {
    let topics = std::mem::take(&mut r.topics);
    let (kept, refused) = split(
        d,
        AclOperation::Alter,
        AclResourceType::Topic,
        topics,
        |t| t.name.0.as_str(),
    );
    let answers: Vec<CreatePartitionsTopicResult> = refused
        .into_iter()
        .map(|t| {
            let mut out = CreatePartitionsTopicResult::default();
            out.name = t.name;
            out.error_code = TOPIC_AUTHORIZATION_FAILED.code();
            out.error_message = Some(s(TOPIC_AUTHORIZATION_FAILED.to_string()));
            out
        })
        .collect();
    r.topics = kept;
    let fixup = on_response(move |_, resp| match resp {
        ResponseKind::CreatePartitions(mut resp) => {
            resp.results.extend(answers);
            ResponseKind::CreatePartitions(resp)
        }
        other => other,
    });
    let empty = ResponseKind::CreatePartitions(CreatePartitionsResponse::default());
    let nothing_left = r.topics.is_empty();
    run_unless_empty(
        d,
        nothing_left,
        RequestKind::CreatePartitions(r),
        empty,
        fixup,
    )
}

/// Config resource types (Kafka's `ConfigResource.Type` codes).
const TOPIC_RESOURCE: i8 = 2;
const BROKER_RESOURCE: i8 = 4;
const BROKER_LOGGER_RESOURCE: i8 = 8;
const CLIENT_METRICS_RESOURCE: i8 = 16;
const GROUP_RESOURCE: i8 = 32;

/// What `op` on config resource (type, name) is checked on, and the error its refusal
/// answers; `None` for a type the handler itself refuses.
fn config_resource(
    resource_type: i8,
    name: &str,
) -> Option<(AclResourceType, String, ResponseError)> {
    match resource_type {
        TOPIC_RESOURCE => Some((
            AclResourceType::Topic,
            name.to_string(),
            TOPIC_AUTHORIZATION_FAILED,
        )),
        BROKER_RESOURCE | BROKER_LOGGER_RESOURCE | CLIENT_METRICS_RESOURCE => Some((
            AclResourceType::Cluster,
            gregor_meta::acl::CLUSTER_RESOURCE_NAME.to_string(),
            CLUSTER_AUTHORIZATION_FAILED,
        )),
        GROUP_RESOURCE => Some((
            AclResourceType::Group,
            name.to_string(),
            ResponseError::GroupAuthorizationFailed,
        )),
        _ => None,
    }
}

/// The error refusing `op` on a config resource, if `d` refuses it.
fn config_refusal(
    d: &dyn Decide,
    op: AclOperation,
    resource_type: i8,
    name: &str,
) -> Option<ResponseError> {
    let (rt, resource, error) = config_resource(resource_type, name)?;
    (!d.allows(op, rt, &resource)).then_some(error)
}

/// Splits config resources into those `d` allows `op` on, and the answers `refuse` makes for
/// the others.
fn split_config_resources<R, A>(
    d: &dyn Decide,
    op: AclOperation,
    resources: Vec<R>,
    key: impl Fn(&R) -> (i8, &str),
    refuse: impl Fn(R, ResponseError) -> A,
) -> (Vec<R>, Vec<A>) {
    let mut kept = Vec::new();
    let mut answers = Vec::new();
    for res in resources {
        let (resource_type, name) = key(&res);
        match config_refusal(d, op, resource_type, name) {
            Some(e) => answers.push(refuse(res, e)),
            None => kept.push(res),
        }
    }
    (kept, answers)
}

/// DescribeConfigs: DESCRIBE_CONFIGS on each resource.
fn describe_configs(d: &dyn Decide, mut r: DescribeConfigsRequest) -> Gate {
    let (kept, answers) = split_config_resources(
        d,
        AclOperation::DescribeConfigs,
        std::mem::take(&mut r.resources),
        |res| (res.resource_type, &res.resource_name),
        |res, e| {
            let mut out = DescribeConfigsResult::default();
            out.error_code = e.code();
            out.error_message = Some(s(e.to_string()));
            out.resource_type = res.resource_type;
            out.resource_name = res.resource_name;
            out
        },
    );
    r.resources = kept;
    let fixup = on_response(move |_, resp| match resp {
        ResponseKind::DescribeConfigs(mut resp) => {
            resp.results.extend(answers);
            ResponseKind::DescribeConfigs(resp)
        }
        other => other,
    });
    let empty = ResponseKind::DescribeConfigs(DescribeConfigsResponse::default());
    let nothing_left = r.resources.is_empty();
    run_unless_empty(
        d,
        nothing_left,
        RequestKind::DescribeConfigs(r),
        empty,
        fixup,
    )
}

/// IncrementalAlterConfigs: ALTER_CONFIGS on each resource.
fn incremental_alter_configs(d: &dyn Decide, mut r: IncrementalAlterConfigsRequest) -> Gate {
    let (kept, answers) = split_config_resources(
        d,
        AclOperation::AlterConfigs,
        std::mem::take(&mut r.resources),
        |res| (res.resource_type, &res.resource_name),
        |res, e| {
            let mut out = AlterConfigsResourceResponse::default();
            out.error_code = e.code();
            out.error_message = Some(s(e.to_string()));
            out.resource_type = res.resource_type;
            out.resource_name = res.resource_name;
            out
        },
    );
    r.resources = kept;
    let fixup = on_response(move |_, resp| match resp {
        ResponseKind::IncrementalAlterConfigs(mut resp) => {
            resp.responses.extend(answers);
            ResponseKind::IncrementalAlterConfigs(resp)
        }
        other => other,
    });
    let empty = ResponseKind::IncrementalAlterConfigs(IncrementalAlterConfigsResponse::default());
    let nothing_left = r.resources.is_empty();
    run_unless_empty(
        d,
        nothing_left,
        RequestKind::IncrementalAlterConfigs(r),
        empty,
        fixup,
    )
}

/// AlterConfigs (legacy): ALTER_CONFIGS on each resource, as IncrementalAlterConfigs.
fn alter_configs(d: &dyn Decide, mut r: AlterConfigsRequest) -> Gate {
    let (kept, answers) = split_config_resources(
        d,
        AclOperation::AlterConfigs,
        std::mem::take(&mut r.resources),
        |res| (res.resource_type, &res.resource_name),
        |res, e| {
            let mut out = LegacyAlterConfigsResourceResponse::default();
            out.error_code = e.code();
            out.error_message = Some(s(e.to_string()));
            out.resource_type = res.resource_type;
            out.resource_name = res.resource_name;
            out
        },
    );
    r.resources = kept;
    let fixup = on_response(move |_, resp| match resp {
        ResponseKind::AlterConfigs(mut resp) => {
            resp.responses.extend(answers);
            ResponseKind::AlterConfigs(resp)
        }
        other => other,
    });
    let empty = ResponseKind::AlterConfigs(AlterConfigsResponse::default());
    let nothing_left = r.resources.is_empty();
    run_unless_empty(d, nothing_left, RequestKind::AlterConfigs(r), empty, fixup)
}
