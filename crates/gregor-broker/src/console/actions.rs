//! The console's actions, `console.actions.enable`: what a POST under `/ui/api/actions/` asks
//! for, the checks that keep other sites from making a visitor's browser send one, the Kafka
//! requests each action is, and their answers as JSON. Pure; `console/act` runs them.

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    ElectLeadersRequest, ElectLeadersResponse, GroupId, OffsetCommitRequest, OffsetCommitResponse,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;
use serde_json::{json, Value};

use crate::metrics::errors::error_name;

/// The broker setting that turns the actions on.
pub const ENABLE: &str = "console.actions.enable";
/// The path prefix of the action endpoints.
pub const PREFIX: &str = "/ui/api/actions/";
/// The header the page's own script sends with every action. A cross-site form cannot send a
/// custom header, and a cross-site script that does needs a CORS preflight, which the console
/// never grants.
pub const MARKER_HEADER: &str = "x-gregor-console";
/// Largest action body read.
pub const MAX_BODY_BYTES: usize = 16 * 1024;
/// How long the controller is given for a topic create, delete or election (the requests'
/// `timeout_ms`, as the Kafka tools' default).
const TIMEOUT_MS: i32 = 30_000;
/// ElectLeaders' election type for the preferred replica.
const PREFERRED: i8 = 0;
/// ELECTION_NOT_NEEDED: the preferred replica already leads; not a failure.
pub const ELECTION_NOT_NEEDED: i16 = 84;

/// Where an offset reset moves a group's committed offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetTo {
    Earliest,
    Latest,
    Offset(i64),
}

/// One action, as its JSON body asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    CreateTopic {
        topic: String,
        partitions: i32,
        replication_factor: i16,
    },
    DeleteTopic {
        topic: String,
    },
    ResetOffsets {
        group: String,
        topic: String,
        to: ResetTo,
    },
    /// A preferred leader election of one topic's partitions, or of every partition.
    ElectPreferred {
        topic: Option<String>,
    },
}

impl Action {
    /// What the action is called in logs and answers.
    pub fn name(&self) -> &'static str {
        match self {
            Action::CreateTopic { .. } => "create-topic",
            Action::DeleteTopic { .. } => "delete-topic",
            Action::ResetOffsets { .. } => "reset-offsets",
            Action::ElectPreferred { .. } => "elect-leaders",
        }
    }

    /// What the action is done to, for logs.
    pub fn target(&self) -> String {
        match self {
            Action::CreateTopic { topic, .. } | Action::DeleteTopic { topic } => {
                format!("topic {topic}")
            }
            Action::ResetOffsets { group, topic, .. } => format!("group {group} topic {topic}"),
            Action::ElectPreferred { topic: Some(t) } => format!("topic {t}"),
            Action::ElectPreferred { topic: None } => "all partitions".to_string(),
        }
    }
}

/// The action endpoint `name` (the path after [`PREFIX`]) with its JSON `body`, or why not.
pub fn parse(name: &str, body: &[u8]) -> Result<Action, String> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    if !v.is_object() {
        return Err("the body must be a JSON object".into());
    }
    match name {
        "create-topic" => Ok(Action::CreateTopic {
            topic: text(&v, "topic")?,
            partitions: int(&v, "partitions", 1, i64::from(i32::MAX))? as i32,
            replication_factor: int(&v, "replication_factor", 1, i64::from(i16::MAX))? as i16,
        }),
        "delete-topic" => Ok(Action::DeleteTopic {
            topic: text(&v, "topic")?,
        }),
        "reset-offsets" => Ok(Action::ResetOffsets {
            group: text(&v, "group")?,
            topic: text(&v, "topic")?,
            to: reset_to(&v)?,
        }),
        "elect-leaders" => Ok(Action::ElectPreferred {
            topic: match v.get("topic") {
                None | Some(Value::Null) => None,
                Some(_) => Some(text(&v, "topic")?),
            },
        }),
        _ => Err(format!(
            "no action {:?}: create-topic, delete-topic, reset-offsets or elect-leaders",
            name.chars().take(64).collect::<String>()
        )),
    }
}

fn text(v: &Value, key: &str) -> Result<String, String> {
    match v.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        _ => Err(format!("{key} must be a non-empty string")),
    }
}

fn int(v: &Value, key: &str, min: i64, max: i64) -> Result<i64, String> {
    v.get(key)
        .and_then(Value::as_i64)
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| format!("{key} must be a whole number from {min} to {max}"))
}

fn reset_to(v: &Value) -> Result<ResetTo, String> {
    match v.get("to").and_then(Value::as_str) {
        Some("earliest") => Ok(ResetTo::Earliest),
        Some("latest") => Ok(ResetTo::Latest),
        Some("offset") => Ok(ResetTo::Offset(int(v, "offset", 0, i64::MAX)?)),
        _ => Err("to must be earliest, latest or offset (with offset)".into()),
    }
}

/// What a POST's headers say of where it comes from.
#[derive(Debug, Clone, Copy, Default)]
pub struct Origin<'a> {
    pub origin: Option<&'a str>,
    pub host: Option<&'a str>,
    pub marker: Option<&'a str>,
    pub content_type: Option<&'a str>,
}

/// Why a POST may not come from this console's own page, or `None` when it may: a JSON body,
/// the page's marker header, and an `Origin` (browsers send one with every cross-origin POST)
/// naming the listener the `Host` names.
pub fn cross_site_refusal(o: &Origin<'_>) -> Option<String> {
    let json = o.content_type.is_some_and(|c| {
        c.split(';')
            .next()
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
    });
    if !json {
        return Some("an action's body must be JSON (Content-Type: application/json)".into());
    }
    if o.marker.is_none() {
        return Some(format!(
            "an action needs the {MARKER_HEADER} header the console's page sends"
        ));
    }
    // No Origin: not a browser's cross-origin request (curl, scripts), allowed.
    let origin = o.origin?;
    let authority = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    match (authority, o.host) {
        (Some(a), Some(h)) if a.eq_ignore_ascii_case(h) => None,
        _ => Some(format!(
            "cross-site request refused: Origin {:?} is not this console ({:?})",
            origin.chars().take(128).collect::<String>(),
            o.host.unwrap_or("")
        )),
    }
}

/// CreateTopics of one topic, its replicas placed by the controller.
pub fn create_topics(topic: &str, partitions: i32, replication_factor: i16) -> CreateTopicsRequest {
    let mut t = CreatableTopic::default();
    t.name = TopicName(StrBytes::from_string(topic.to_string()));
    t.num_partitions = partitions;
    t.replication_factor = replication_factor;
    let mut r = CreateTopicsRequest::default();
    r.topics = vec![t];
    r.timeout_ms = TIMEOUT_MS;
    r
}

/// DeleteTopics of one topic by name (version 4, which names topics in `topic_names`).
pub fn delete_topics(topic: &str) -> DeleteTopicsRequest {
    let mut r = DeleteTopicsRequest::default();
    r.topic_names = vec![TopicName(StrBytes::from_string(topic.to_string()))];
    r.timeout_ms = TIMEOUT_MS;
    r
}

/// A preferred election of `partitions` of `topic`, or of every partition (`None`).
pub fn elect_preferred(topic: Option<(&str, Vec<i32>)>) -> ElectLeadersRequest {
    let mut r = ElectLeadersRequest::default();
    r.election_type = PREFERRED;
    r.timeout_ms = TIMEOUT_MS;
    r.topic_partitions = topic.map(|(name, partitions)| {
        let mut tp = TopicPartitions::default();
        tp.topic = TopicName(StrBytes::from_string(name.to_string()));
        tp.partitions = partitions;
        vec![tp]
    });
    r
}

/// An admin's OffsetCommit of `offsets` (partition, offset) of `topic` for an empty `group`: no
/// generation and no member, which the coordinator accepts only while the group has no members.
pub fn commit_offsets(group: &str, topic: &str, offsets: &[(i32, i64)]) -> OffsetCommitRequest {
    let partitions = offsets
        .iter()
        .map(|&(p, offset)| {
            let mut x = OffsetCommitRequestPartition::default();
            x.partition_index = p;
            x.committed_offset = offset;
            x.committed_leader_epoch = -1;
            x.committed_metadata = Some(StrBytes::from_static_str(""));
            x
        })
        .collect();
    let mut t = OffsetCommitRequestTopic::default();
    t.name = TopicName(StrBytes::from_string(topic.to_string()));
    t.partitions = partitions;
    let mut r = OffsetCommitRequest::default();
    r.group_id = GroupId(StrBytes::from_string(group.to_string()));
    r.generation_id_or_member_epoch = -1;
    r.member_id = StrBytes::from_static_str("");
    r.retention_time_ms = -1;
    r.topics = vec![t];
    r
}

/// Where `to` puts a partition whose log holds `[start, end)` (end: the high watermark): an
/// offset outside the log is moved to its nearest end, as `kafka-consumer-groups.sh` does.
pub fn reset_offset(to: ResetTo, start: i64, end: i64) -> i64 {
    match to {
        ResetTo::Earliest => start,
        ResetTo::Latest => end,
        ResetTo::Offset(o) => o.clamp(start, end.max(start)),
    }
}

/// One result of an action: what it was for, Kafka's error code and name, and its message.
pub fn result(resource: Value, code: i16, message: Option<&str>) -> Value {
    json!({
        "resource": resource,
        "error_code": code,
        "error": error_name(code),
        "message": message,
    })
}

/// The answer to an action: `ok` when every result is free of errors (`tolerated` codes aside).
pub fn answer(action: &Action, principal: &str, results: Vec<Value>, tolerated: &[i16]) -> Value {
    let ok = results.iter().all(|r| {
        r["error_code"]
            .as_i64()
            .is_some_and(|c| c == 0 || tolerated.iter().any(|t| i64::from(*t) == c))
    });
    json!({
        "action": action.name(),
        "principal": principal,
        "ok": ok,
        "results": results,
    })
}

/// CreateTopics' answer, one result per topic.
pub fn created(r: &CreateTopicsResponse) -> Vec<Value> {
    r.topics
        .iter()
        .map(|t| {
            let resource = json!({ "topic": t.name.0.as_str() });
            result(resource, t.error_code, t.error_message.as_deref())
        })
        .collect()
}

/// DeleteTopics' answer, one result per topic.
pub fn deleted(r: &DeleteTopicsResponse) -> Vec<Value> {
    r.responses
        .iter()
        .map(|t| {
            let name = t.name.as_ref().map(|n| n.0.as_str());
            result(
                json!({ "topic": name }),
                t.error_code,
                t.error_message.as_deref(),
            )
        })
        .collect()
}

/// ElectLeaders' answer: its top-level error alone when it has one, else one per partition.
pub fn elected(r: &ElectLeadersResponse) -> Vec<Value> {
    if r.error_code != 0 {
        return vec![result(json!({ "cluster": true }), r.error_code, None)];
    }
    r.replica_election_results
        .iter()
        .flat_map(|t| {
            t.partition_result.iter().map(|p| {
                let resource = json!({ "topic": t.topic.0.as_str(), "partition": p.partition_id });
                result(resource, p.error_code, p.error_message.as_deref())
            })
        })
        .collect()
}

/// OffsetCommit's answer, one result per partition with the offset asked for.
pub fn committed(r: &OffsetCommitResponse, offsets: &[(i32, i64)]) -> Vec<Value> {
    r.topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                let offset = offsets
                    .iter()
                    .find(|(i, _)| *i == p.partition_index)
                    .map(|(_, o)| *o);
                let resource = json!({
                    "topic": t.name.0.as_str(), "partition": p.partition_index, "offset": offset,
                });
                result(resource, p.error_code, None)
            })
        })
        .collect()
}

#[cfg(test)]
#[path = "actions_tests.rs"]
mod tests;
