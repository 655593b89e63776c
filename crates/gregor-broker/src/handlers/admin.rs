//! CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, IncrementalAlterConfigs: wire
//! messages in and out of the controller.

use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{
    create_partitions_response::CreatePartitionsTopicResult, create_topics_request,
    incremental_alter_configs_request, CreatePartitionsRequest, CreatePartitionsResponse,
    CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    DescribeConfigsRequest, DescribeConfigsResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse, TopicName,
};
use kafka_protocol::ResponseError;

use gregor_meta::{
    AlterConfigOp, AlterConfigsResource, AlterableConfig, ApiError, ConfigResource, CreatableTopic,
    CreatePartitionsTopic, TopicRef,
};

use super::s;
use crate::metadata::MetadataManager;

pub async fn create_topics(
    metadata: &MetadataManager,
    r: CreateTopicsRequest,
    version: i16,
) -> CreateTopicsResponse {
    let request = gregor_meta::CreateTopicsRequest {
        topics: r.topics.iter().map(creatable_topic).collect(),
        validate_only: r.validate_only,
    };
    let results = match metadata.submit(|c| c.create_topics(&request)).await {
        Ok(results) => results,
        Err(e) => {
            tracing::error!(error = %e, "CreateTopics failed");
            request
                .topics
                .iter()
                .map(|t| gregor_meta::CreateTopicResult {
                    name: t.name.clone(),
                    result: Err(e.api_error()),
                })
                .collect()
        }
    };
    let mut resp = CreateTopicsResponse::default();
    resp.topics = results
        .into_iter()
        .map(|res| creatable_topic_result(res, version))
        .collect();
    resp
}

/// A topic to create, as the controller takes it.
fn creatable_topic(t: &create_topics_request::CreatableTopic) -> CreatableTopic {
    CreatableTopic {
        name: t.name.0.to_string(),
        num_partitions: t.num_partitions,
        replication_factor: t.replication_factor,
        assignments: t
            .assignments
            .iter()
            .map(|a| {
                (
                    a.partition_index,
                    a.broker_ids.iter().map(|id| id.0).collect(),
                )
            })
            .collect(),
        configs: t
            .configs
            .iter()
            .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
            .collect(),
    }
}

/// One topic's answer: from v5 a created topic's partitions, replication factor and configs.
fn creatable_topic_result(
    res: gregor_meta::CreateTopicResult,
    version: i16,
) -> CreatableTopicResult {
    let mut t = CreatableTopicResult::default();
    t.name = TopicName(s(res.name));
    match res.result {
        Ok(created) => {
            if version >= 7 {
                t.topic_id = created.topic_id;
            }
            if version >= 5 {
                t.num_partitions = created.num_partitions;
                t.replication_factor = created.replication_factor;
                t.configs = Some(created.configs.iter().map(creatable_topic_config).collect());
            }
        }
        Err(e) => {
            t.error_code = e.code.code();
            if version >= 1 {
                t.error_message = Some(s(e.message));
            }
            if version >= 5 {
                t.num_partitions = -1;
                t.replication_factor = -1;
            }
        }
    }
    t
}

/// One of a created topic's effective configs.
fn creatable_topic_config(c: &gregor_meta::config::DescribedConfig) -> CreatableTopicConfigs {
    let mut out = CreatableTopicConfigs::default();
    out.name = s(c.name.clone());
    out.value = c.value.clone().map(s);
    out.read_only = c.read_only;
    out.config_source = c.source.id();
    out.is_sensitive = c.sensitive;
    out
}

pub async fn delete_topics(
    metadata: &MetadataManager,
    r: DeleteTopicsRequest,
    version: i16,
) -> DeleteTopicsResponse {
    let refs: Vec<TopicRef> = if version >= 6 {
        r.topics
            .iter()
            .map(|t| match &t.name {
                Some(n) => TopicRef::Name(n.0.to_string()),
                None => TopicRef::Id(t.topic_id),
            })
            .collect()
    } else {
        r.topic_names
            .iter()
            .map(|n| TopicRef::Name(n.0.to_string()))
            .collect()
    };
    let results = match metadata.submit(|c| c.delete_topics(&refs)).await {
        Ok(results) => results,
        Err(e) => {
            tracing::error!(error = %e, "DeleteTopics failed");
            refs.iter()
                .map(|t| gregor_meta::DeleteTopicResult {
                    topic: t.clone(),
                    result: Err(e.api_error()),
                })
                .collect()
        }
    };
    let mut resp = DeleteTopicsResponse::default();
    resp.responses = results
        .into_iter()
        .map(|res| {
            let mut d = DeletableTopicResult::default();
            let (name, id) = match (&res.topic, &res.result) {
                (_, Ok((name, id))) => (Some(name.clone()), *id),
                (TopicRef::Name(n), Err(_)) => (Some(n.clone()), gregor_meta::Uuid::nil()),
                (TopicRef::Id(id), Err(_)) => (None, *id),
            };
            d.name = name.map(|n| TopicName(s(n)));
            if version >= 6 {
                d.topic_id = id;
            }
            if let Err(e) = res.result {
                d.error_code = e.code.code();
                if version >= 5 {
                    d.error_message = Some(s(e.message));
                }
            }
            d
        })
        .collect();
    resp
}

pub async fn create_partitions(
    metadata: &MetadataManager,
    r: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let topics: Vec<CreatePartitionsTopic> = r
        .topics
        .iter()
        .map(|t| CreatePartitionsTopic {
            name: t.name.0.to_string(),
            count: t.count,
            assignments: t.assignments.as_ref().map(|a| {
                a.iter()
                    .map(|x| x.broker_ids.iter().map(|id| id.0).collect())
                    .collect()
            }),
        })
        .collect();
    let results = match metadata
        .submit(|c| c.create_partitions(&topics, r.validate_only))
        .await
    {
        Ok(results) => results,
        Err(e) => {
            tracing::error!(error = %e, "CreatePartitions failed");
            topics
                .iter()
                .map(|t| (t.name.clone(), Err(e.api_error())))
                .collect()
        }
    };
    let mut resp = CreatePartitionsResponse::default();
    resp.results = results
        .into_iter()
        .map(|(name, result)| {
            let mut t = CreatePartitionsTopicResult::default();
            t.name = TopicName(s(name));
            if let Err(e) = result {
                t.error_code = e.code.code();
                t.error_message = Some(s(e.message));
            }
            t
        })
        .collect();
    resp
}

pub(super) fn resource(resource_type: i8, name: &str) -> Result<ConfigResource, ApiError> {
    match resource_type {
        2 => Ok(ConfigResource::topic(name)),
        4 if name.is_empty() => Ok(ConfigResource::cluster_default()),
        4 => Ok(ConfigResource::broker(name.parse::<i32>().map_err(
            |_| {
                ApiError::new(
                    ResponseError::InvalidRequest,
                    format!("invalid broker id '{name}'"),
                )
            },
        )?)),
        32 => Ok(ConfigResource::group(name)),
        other => Err(ApiError::new(
            ResponseError::InvalidRequest,
            format!("unsupported resource type {other}"),
        )),
    }
}

pub async fn describe_configs(
    metadata: &MetadataManager,
    r: DescribeConfigsRequest,
    version: i16,
) -> DescribeConfigsResponse {
    let mut resp = DescribeConfigsResponse::default();
    for res in &r.resources {
        let mut out = DescribeConfigsResult::default();
        out.resource_type = res.resource_type;
        out.resource_name = res.resource_name.clone();
        let keys: Option<Vec<String>> = res
            .configuration_keys
            .as_ref()
            .map(|ks| ks.iter().map(|k| k.to_string()).collect());
        let described = match resource(res.resource_type, &res.resource_name) {
            Ok(rsrc) => {
                metadata
                    .read(|c| c.describe_configs(&rsrc, keys.as_deref()))
                    .await
            }
            Err(e) => Err(e),
        };
        match described {
            Ok(configs) => {
                out.configs = configs
                    .into_iter()
                    .map(|c| {
                        let mut d = DescribeConfigsResourceResult::default();
                        d.name = s(c.name);
                        d.value = c.value.map(s);
                        d.read_only = c.read_only;
                        d.config_source = c.source.id();
                        d.is_sensitive = c.sensitive;
                        if r.include_synonyms {
                            d.synonyms = c
                                .synonyms
                                .into_iter()
                                .map(|syn| {
                                    let mut x = DescribeConfigsSynonym::default();
                                    x.name = s(syn.name);
                                    x.value = syn.value.map(s);
                                    x.source = syn.source.id();
                                    x
                                })
                                .collect();
                        }
                        if version >= 3 {
                            d.config_type = c.config_type.describe_id();
                            if r.include_documentation {
                                d.documentation = Some(s(c.documentation));
                            }
                        }
                        d
                    })
                    .collect();
            }
            Err(e) => {
                out.error_code = e.code.code();
                out.error_message = Some(s(e.message));
            }
        }
        resp.results.push(out);
    }
    resp
}

pub async fn incremental_alter_configs(
    metadata: &MetadataManager,
    r: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut resp = IncrementalAlterConfigsResponse::default();
    // The resources the request names well go to the controller; the others are answered
    // with their own error.
    let mut resources = Vec::new();
    let mut bad: Vec<(usize, ApiError)> = Vec::new();
    for (i, res) in r.resources.iter().enumerate() {
        match alter_configs_resource(res) {
            Ok(rsrc) => resources.push((i, rsrc)),
            Err(e) => bad.push((i, e)),
        }
    }
    let good: Vec<AlterConfigsResource> = resources.iter().map(|(_, r)| r.clone()).collect();
    let results = match metadata
        .submit(|c| c.incremental_alter_configs(&good, r.validate_only))
        .await
    {
        Ok(results) => results.into_iter().map(|(_, res)| res).collect(),
        Err(e) => {
            tracing::error!(error = %e, "IncrementalAlterConfigs failed");
            good.iter().map(|_| Err(e.api_error())).collect::<Vec<_>>()
        }
    };
    let mut by_index: Vec<Option<Result<(), ApiError>>> = vec![None; r.resources.len()];
    for ((i, _), res) in resources.iter().zip(results) {
        by_index[*i] = Some(res);
    }
    for (i, e) in bad {
        by_index[i] = Some(Err(e));
    }
    for (res, outcome) in r.resources.iter().zip(by_index) {
        let mut out = AlterConfigsResourceResponse::default();
        out.resource_type = res.resource_type;
        out.resource_name = res.resource_name.clone();
        if let Some(Err(e)) = outcome {
            out.error_code = e.code.code();
            out.error_message = Some(s(e.message));
        }
        resp.responses.push(out);
    }
    resp
}

/// One resource's config changes, as the controller takes them; INVALID_REQUEST for an
/// operation Kafka does not define.
fn alter_configs_resource(
    res: &incremental_alter_configs_request::AlterConfigsResource,
) -> Result<AlterConfigsResource, ApiError> {
    let resource = resource(res.resource_type, &res.resource_name)?;
    let mut configs = Vec::new();
    for c in &res.configs {
        let op = match c.config_operation {
            0 => AlterConfigOp::Set,
            1 => AlterConfigOp::Delete,
            2 => AlterConfigOp::Append,
            3 => AlterConfigOp::Subtract,
            other => {
                return Err(ApiError::new(
                    ResponseError::InvalidRequest,
                    format!("unknown config operation {other}"),
                ))
            }
        };
        configs.push(AlterableConfig {
            name: c.name.to_string(),
            op,
            value: c.value.as_ref().map(|v| v.to_string()),
        });
    }
    Ok(AlterConfigsResource { resource, configs })
}
