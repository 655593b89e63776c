//! The console's actions run (`console.actions.enable`; what each is: `actions`). Each is one or
//! more Kafka requests made as the viewer's own (its principal and address), through the
//! broker's gate and handlers exactly as a client's request on a listener goes
//! (`Observable::request`): the ACLs decide as they would for `kafka-topics.sh`,
//! `kafka-consumer-groups.sh` or `kafka-leader-election.sh`, and the answer carries Kafka's
//! error codes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use hyper::StatusCode;
use kafka_protocol::messages::{ApiKey, DescribeGroupsRequest, GroupId, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use serde_json::{json, Value};

use super::actions::{self, Action, Origin, ResetTo};
use crate::broker_view::{BrokerView, Observable};
use crate::cluster_view::OnBehalf;
use crate::connection::{Reply, RequestContext};
use crate::metrics::auth::Viewer;
use crate::security::SecurityProtocol;

/// An HTTP status and its JSON body.
pub type Answer = (StatusCode, Value);

/// A refusal: `{"error": "..."}`.
fn refusal(status: StatusCode, message: &str) -> Answer {
    (status, json!({ "error": message }))
}

/// Whether this broker's console may act (`console.actions.enable`).
pub fn enabled(b: BrokerView<'_>) -> bool {
    matches!(
        b.config.settings.get(actions::ENABLE),
        Some(gregor_meta::config::ConfigValue::Bool(true))
    )
}

/// `/ui/api/actions`: whether the actions are on, for the page to show its buttons.
pub fn status(b: BrokerView<'_>) -> Value {
    json!({ "node_id": b.config.node_id, "enabled": enabled(b), "setting": actions::ENABLE })
}

/// Answers a POST of `path` under [`actions::PREFIX`] with `body` for `viewer`; `broker` is
/// `None` while the broker is starting.
pub async fn act(
    broker: Option<Arc<dyn Observable>>,
    viewer: &Viewer,
    path: &str,
    origin: &Origin<'_>,
    body: &[u8],
) -> Answer {
    let Some(broker) = broker else {
        return refusal(StatusCode::SERVICE_UNAVAILABLE, "the broker is starting");
    };
    let b = broker.view();
    if !enabled(b) {
        let why = format!(
            "console actions are off on node {}: set {}=true to turn them on",
            b.config.node_id,
            actions::ENABLE
        );
        return refusal(StatusCode::FORBIDDEN, &why);
    }
    if let Some(why) = actions::cross_site_refusal(origin) {
        tracing::info!(principal = %viewer.principal(), path, reason = %why, "console action refused");
        return refusal(StatusCode::FORBIDDEN, &why);
    }
    let name = path.strip_prefix(actions::PREFIX).unwrap_or("");
    let action = match actions::parse(name, body) {
        Ok(a) => a,
        Err(e) => return refusal(StatusCode::BAD_REQUEST, &e),
    };
    tracing::info!(principal = %viewer.principal(), action = action.name(), target = %action.target(),
        "console action");
    let done = match &action {
        Action::CreateTopic {
            topic,
            partitions,
            replication_factor,
        } => {
            let r = actions::create_topics(topic, *partitions, *replication_factor);
            let asked = RequestKind::CreateTopics(r);
            run(&broker, viewer, ApiKey::CreateTopics, 7, asked)
                .await
                .map(|r| match r {
                    ResponseKind::CreateTopics(r) => (actions::created(&r), &[][..]),
                    _ => (Vec::new(), &[][..]),
                })
        }
        Action::DeleteTopic { topic } => {
            let asked = RequestKind::DeleteTopics(actions::delete_topics(topic));
            run(&broker, viewer, ApiKey::DeleteTopics, 4, asked)
                .await
                .map(|r| match r {
                    ResponseKind::DeleteTopics(r) => (actions::deleted(&r), &[][..]),
                    _ => (Vec::new(), &[][..]),
                })
        }
        Action::ElectPreferred { topic } => elect(&broker, b, viewer, topic.as_deref()).await,
        Action::ResetOffsets { group, topic, to } => {
            // A reset another node relayed here is not relayed on (the two disagree on the
            // coordinator for a moment): it is answered NOT_COORDINATOR.
            let relayed = origin.marker.is_some_and(|m| m.starts_with(RELAYED));
            let relay = (!relayed).then_some(body);
            reset(&broker, b, viewer, (group, topic, *to), relay).await
        }
    };
    match done {
        Ok((results, tolerated)) => {
            let v = actions::answer(&action, &viewer.principal().to_string(), results, tolerated);
            (status_of(&v), v)
        }
        Err(answer) => answer,
    }
}

/// 200 when the action succeeded, 403 when the authorizer refused it, else 409.
fn status_of(answer: &Value) -> StatusCode {
    if answer["ok"].as_bool() == Some(true) {
        return StatusCode::OK;
    }
    let refused = answer["results"].as_array().into_iter().flatten().any(|r| {
        r["error"]
            .as_str()
            .is_some_and(|e| e.ends_with("_AUTHORIZATION_FAILED"))
    });
    if refused {
        StatusCode::FORBIDDEN
    } else {
        StatusCode::CONFLICT
    }
}

/// Results, and the error codes among them that are not failures.
type Done = Result<(Vec<Value>, &'static [i16]), Answer>;

/// The request context of the viewer's request: its principal and address, on the metrics
/// listener.
fn context(b: BrokerView<'_>, viewer: &Viewer, api_key: ApiKey, version: i16) -> RequestContext {
    let https = b
        .config
        .settings
        .raw("metrics.listener")
        .is_some_and(crate::config::is_https);
    RequestContext {
        api_key,
        api_version: version,
        correlation_id: 0,
        client_id: "gregor-console".to_string(),
        client_host: viewer.host().map(|h| h.to_string()).unwrap_or_default(),
        connection_id: 0,
        min_round_trip: None,
        listener_name: crate::config::METRICS_LISTENER_NAME.into(),
        security_protocol: if https {
            SecurityProtocol::Ssl
        } else {
            SecurityProtocol::Plaintext
        },
        principal: Arc::new(viewer.principal().clone()),
    }
}

/// Runs one request as the viewer's; a request that got no answer (the controller could not
/// be reached) is a 502.
async fn run(
    broker: &Arc<dyn Observable>,
    viewer: &Viewer,
    api_key: ApiKey,
    version: i16,
    request: RequestKind,
) -> Result<ResponseKind, Answer> {
    let ctx = context(broker.view(), viewer, api_key, version);
    match broker.clone().request(ctx, request).await {
        Reply::Respond(r) => Ok(r),
        _ => Err(refusal(
            StatusCode::BAD_GATEWAY,
            &format!("{api_key:?} got no answer (the active controller could not be reached)"),
        )),
    }
}

/// A preferred election of `topic`'s partitions as this node's metadata has them (partition 0
/// of a topic it does not know, so that the controller answers for it), or of all partitions.
async fn elect(
    broker: &Arc<dyn Observable>,
    b: BrokerView<'_>,
    viewer: &Viewer,
    topic: Option<&str>,
) -> Done {
    let asked = topic.map(|t| {
        let partitions: Vec<i32> = b
            .metadata
            .image()
            .topic(t)
            .map(|x| x.partitions.keys().copied().collect())
            .filter(|ps: &Vec<i32>| !ps.is_empty())
            .unwrap_or_else(|| vec![0]);
        (t, partitions)
    });
    let request = RequestKind::ElectLeaders(actions::elect_preferred(asked));
    let r = run(broker, viewer, ApiKey::ElectLeaders, 2, request).await?;
    let results = match r {
        ResponseKind::ElectLeaders(r) => actions::elected(&r),
        _ => Vec::new(),
    };
    Ok((results, &[actions::ELECTION_NOT_NEEDED]))
}

/// Resets `group`'s offsets of `topic`'s partitions as `kafka-consumer-groups.sh
/// --reset-offsets --execute` does: the group described first (refused unless empty), the log
/// bounds of each partition from its leader, then one OffsetCommit without a member.
async fn reset(
    broker: &Arc<dyn Observable>,
    b: BrokerView<'_>,
    viewer: &Viewer,
    (group, topic, to): (&str, &str, ResetTo),
    relay: Option<&[u8]>,
) -> Done {
    if let Some(refusal) = group_not_resettable(broker, b, viewer, group, relay).await? {
        return Ok((vec![refusal], &[]));
    }
    let bounds = match log_bounds(b, viewer, topic).await {
        Ok(bounds) => bounds,
        Err(code) => {
            let resource = json!({ "topic": topic });
            return Ok((vec![actions::result(resource, code.code(), None)], &[]));
        }
    };
    let mut offsets = Vec::new();
    let mut unknown = Vec::new();
    for (p, bound) in bounds {
        match bound {
            Some((start, end)) => offsets.push((p, actions::reset_offset(to, start, end))),
            None => unknown.push(p),
        }
    }
    let mut results: Vec<Value> = unknown
        .into_iter()
        .map(|p| {
            let resource = json!({ "topic": topic, "partition": p });
            let why = "its leader's log bounds could not be read; not reset";
            actions::result(
                resource,
                ResponseError::LeaderNotAvailable.code(),
                Some(why),
            )
        })
        .collect();
    if !offsets.is_empty() {
        let request = RequestKind::OffsetCommit(actions::commit_offsets(group, topic, &offsets));
        if let ResponseKind::OffsetCommit(r) =
            run(broker, viewer, ApiKey::OffsetCommit, 8, request).await?
        {
            results.extend(actions::committed(&r, &offsets));
        }
    }
    Ok((results, &[]))
}

/// Why `group` may not be reset now, as a result, or `None` when it may: DescribeGroups as the
/// viewer (needing DESCRIBE on the group) must find it empty or unknown here. A group another
/// node coordinates: the action (`relay`, its body) is relayed to that node's console for the
/// viewer and its answer is the answer (`Err`); without `relay`, NOT_COORDINATOR naming it.
async fn group_not_resettable(
    broker: &Arc<dyn Observable>,
    b: BrokerView<'_>,
    viewer: &Viewer,
    group: &str,
    relay: Option<&[u8]>,
) -> Result<Option<Value>, Answer> {
    let mut request = DescribeGroupsRequest::default();
    request.groups = vec![GroupId(StrBytes::from_string(group.to_string()))];
    let r = run(
        broker,
        viewer,
        ApiKey::DescribeGroups,
        5,
        RequestKind::DescribeGroups(request),
    );
    let described = match r.await? {
        ResponseKind::DescribeGroups(r) => r.groups.into_iter().next(),
        _ => None,
    };
    let Some(g) = described else {
        return Ok(None);
    };
    let resource = json!({ "group": group });
    if g.error_code == ResponseError::NotCoordinator.code() {
        let image = b.metadata.image();
        let partition = crate::groups::Groups::partition_in(&image, b.config, group);
        let leader = image
            .topic(crate::groups::OFFSETS_TOPIC)
            .and_then(|t| t.partitions.get(&partition))
            .map(|p| p.leader);
        if let (Some(l), Some(body)) = (leader.filter(|l| *l >= 0), relay) {
            return Err(relay_reset(b, viewer, l, body).await);
        }
        let why = match leader {
            Some(l) if l >= 0 => format!(
                "group {group:?} is coordinated by node {l}, not node {}: reset it from node {l}'s console",
                b.config.node_id
            ),
            _ => format!("group {group:?} has no coordinator now"),
        };
        return Ok(Some(actions::result(resource, g.error_code, Some(&why))));
    }
    if g.error_code != 0 {
        return Ok(Some(actions::result(
            resource,
            g.error_code,
            g.error_message.as_deref(),
        )));
    }
    let state = g.group_state.as_str();
    if state == "Empty" || state == "Dead" {
        return Ok(None);
    }
    let why = format!(
        "Assignments can only be reset if the group '{group}' is inactive, but the current state is {state}."
    );
    let code = ResponseError::NonEmptyGroup.code();
    Ok(Some(actions::result(resource, code, Some(&why))))
}

/// The marker header value of an action one node relays to another's console.
const RELAYED: &str = "relayed";

/// A reset relayed to `node`'s console (the group's coordinator) for `viewer`, as reads are:
/// that node judges the viewer's principal, which it takes from this node only over TLS with
/// this node's certificate in its `super.users` (docs/console.md); its answer is marked with
/// `via_node`.
async fn relay_reset(b: BrokerView<'_>, viewer: &Viewer, node: i32, body: &[u8]) -> Answer {
    let marker = format!("{RELAYED}-by-{}", b.config.node_id);
    let post = crate::cluster_view::peer::Post {
        body: Bytes::copy_from_slice(body),
        header: (actions::MARKER_HEADER, &marker),
    };
    let path = format!("{}reset-offsets", actions::PREFIX);
    let on_behalf = OnBehalf {
        principal: viewer.principal(),
        host: viewer.host(),
    };
    let asked =
        b.cluster_view
            .post_to(b.metadata, &b.config.settings, node, &path, post, on_behalf);
    match asked.await {
        Ok((status, mut v)) => {
            v["via_node"] = json!(node);
            (status, v)
        }
        Err(e) => refusal(
            StatusCode::BAD_GATEWAY,
            &format!("the group's coordinator, node {node}, did not answer: {e}"),
        ),
    }
}

/// Each partition of `topic` with its leader's log start offset and high watermark (`None`
/// where the leader did not answer): this node's replica when it leads, else the leader's
/// `/ui/api/replicas` read for the viewer. Refused as ListOffsets would refuse it: without
/// DESCRIBE on the topic, or for a topic that does not exist.
async fn log_bounds(
    b: BrokerView<'_>,
    viewer: &Viewer,
    topic: &str,
) -> Result<BTreeMap<i32, Option<(i64, i64)>>, ResponseError> {
    if !viewer.may_describe_topic(topic) {
        return Err(ResponseError::TopicAuthorizationFailed);
    }
    let leaders: BTreeMap<i32, i32> = b
        .metadata
        .image()
        .topic(topic)
        .ok_or(ResponseError::UnknownTopicOrPartition)?
        .partitions
        .iter()
        .map(|(&p, reg)| (p, reg.leader))
        .collect();
    let node = b.config.node_id;
    let mut remote: HashMap<i32, (i64, i64)> = HashMap::new();
    let mut peers: Vec<i32> = leaders
        .values()
        .copied()
        .filter(|l| *l >= 0 && *l != node)
        .collect();
    peers.sort_unstable();
    peers.dedup();
    for peer in peers {
        remote.extend(peer_bounds(b, viewer, peer, topic).await);
    }
    Ok(leaders
        .into_iter()
        .map(|(p, leader)| {
            let bound = if leader == node {
                b.replicas
                    .get(topic, p)
                    .map(|r| (r.log.log_start_offset(), r.high_watermark()))
            } else {
                remote.get(&p).copied()
            };
            (p, bound)
        })
        .collect())
}

/// The log start offset and high watermark of the partitions of `topic` that `peer` leads, from
/// its `/ui/api/replicas` read for the viewer; none when it does not answer.
async fn peer_bounds(
    b: BrokerView<'_>,
    viewer: &Viewer,
    peer: i32,
    topic: &str,
) -> Vec<(i32, (i64, i64))> {
    let on_behalf = OnBehalf {
        principal: viewer.principal(),
        host: viewer.host(),
    };
    let settings = &b.config.settings;
    let asked = b
        .cluster_view
        .get_from(b.metadata, settings, peer, "/ui/api/replicas", on_behalf)
        .await;
    let v = match asked {
        Ok((status, v)) if status.is_success() => v,
        Ok((status, _)) => {
            tracing::info!(node = peer, %status, "a leader's console refused its log bounds");
            return Vec::new();
        }
        Err(e) => {
            tracing::info!(node = peer, error = %e, "a leader's console did not give its log bounds");
            return Vec::new();
        }
    };
    v["replicas"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["topic"].as_str() == Some(topic))
        .filter_map(|r| {
            let p = i32::try_from(r["partition"].as_i64()?).ok()?;
            Some((
                p,
                (
                    r["log_start_offset"].as_i64()?,
                    r["high_watermark"].as_i64()?,
                ),
            ))
        })
        .collect()
}
