//! `/ui/api/broker?id=<n>` and `/ui/api/topic-configs?topic=<name>`: a node's version, uptime,
//! disk space and configs, and a topic's configs. A node answers for itself only (its process
//! and its disk); another node's details are read from that node's console for the viewer, as
//! the Groups page reads groups. The JSON is `node_view`'s (pure); this is the shell.

use hyper::StatusCode;
use serde_json::Value;

use super::node_view::{self, LogDirSpace, NodeFacts};
use crate::broker_view::BrokerView;
use crate::cluster_view::OnBehalf;
use crate::metrics::auth::Viewer;
use crate::metrics::process;

/// An answer, or its HTTP status and message.
pub type Answer = Result<Value, (StatusCode, String)>;

/// Broker `id`'s details (this node's when `None`) for `viewer`. With `local_only`, another
/// node's id is refused rather than asked of that node.
pub async fn broker(
    b: BrokerView<'_>,
    viewer: &Viewer,
    id: Option<i32>,
    local_only: bool,
) -> Answer {
    let node = b.config.node_id;
    let id = id.unwrap_or(node);
    if id == node {
        return Ok(this_node(b, viewer).await);
    }
    if !b.metadata.image().brokers().contains_key(&id) {
        return Err((
            StatusCode::NOT_FOUND,
            format!("broker {id} is not registered in the cluster metadata"),
        ));
    }
    if local_only {
        return Err((
            StatusCode::CONFLICT,
            format!("this is node {node}, not node {id}"),
        ));
    }
    from_peer(b, viewer, id).await
}

/// This node: its build, its process's start, its data directory's file system, and what
/// DescribeConfigs of its BROKER resource answers.
async fn this_node(b: BrokerView<'_>, viewer: &Viewer) -> Value {
    let node = b.config.node_id;
    let dir = b.replicas.data_dir().to_path_buf();
    // statvfs can wait on a slow file system: off the async workers, with the /proc reads.
    let (started_ms, dir_space) = crate::runtime::blocking(move || {
        let sample = process::sample(&process::RealProc, process::ticks_per_second());
        let space = gregor_log::Disk::real()
            .space(&dir)
            .map_err(|e| e.to_string());
        let path = std::path::absolute(&dir).unwrap_or(dir);
        let started = sample.start_time_seconds.map(|s| (s * 1000.0) as i64);
        (
            started,
            LogDirSpace {
                path: path.display().to_string(),
                space,
            },
        )
    })
    .await;
    let configs = if viewer.may_describe_cluster_configs() {
        let resource = gregor_meta::ConfigResource::broker(node);
        let described = b
            .metadata
            .read(|c| c.describe_configs(&resource, None))
            .await
            .map_err(|e| e.message);
        Some(described)
    } else {
        None
    };
    let dirs = [dir_space];
    node_view::node(&NodeFacts {
        node_id: node,
        version: env!("CARGO_PKG_VERSION"),
        commit: process::COMMIT,
        started_ms,
        now_ms: crate::runtime::now_ms(),
        log_dirs: viewer.may_describe_cluster().then_some(&dirs[..]),
        configs: configs.as_ref(),
    })
}

/// The longest a page waits for another node's details: finding its console (DescribeConfigs
/// of that broker, once) and reading it each have their own 3 s bound.
const PEER_WAIT: std::time::Duration = std::time::Duration::from_secs(4);

/// Node `id`'s details as its own console answers them for `viewer`; its refusals are passed
/// on, its silence is a 502 naming it.
async fn from_peer(b: BrokerView<'_>, viewer: &Viewer, id: i32) -> Answer {
    let node = b.config.node_id;
    let path = format!("/ui/api/broker?id={id}&scope=local");
    let on_behalf = OnBehalf {
        principal: viewer.principal(),
        host: viewer.host(),
    };
    let get = b
        .cluster_view
        .get_from(b.metadata, &b.config.settings, id, &path, on_behalf);
    let Ok(got) = tokio::time::timeout(PEER_WAIT, get).await else {
        return Err((
            StatusCode::BAD_GATEWAY,
            format!(
                "node {id}'s console did not answer within {} ms",
                PEER_WAIT.as_millis()
            ),
        ));
    };
    match got {
        Ok((status, v)) => {
            crate::cluster_view::peer::relayed(status, v, node, &format!("node {id}"))
        }
        Err(e) => {
            tracing::debug!(node = id, error = %e, "cannot read a node's details from its console");
            Err((
                StatusCode::BAD_GATEWAY,
                format!("node {id}'s console did not answer: {e}"),
            ))
        }
    }
}

/// `topic`'s configs as this node resolves them (what DescribeConfigs of the TOPIC resource
/// answers here), for a viewer that may DESCRIBE_CONFIGS it (checked before anything says
/// whether the topic exists).
pub async fn topic_configs(b: BrokerView<'_>, viewer: &Viewer, topic: &str) -> Answer {
    if !viewer.may_describe_topic_configs(topic) {
        return Err((
            StatusCode::FORBIDDEN,
            format!("not authorized to describe the configs of topic {topic:?}"),
        ));
    }
    let resource = gregor_meta::ConfigResource::topic(topic);
    let described = b
        .metadata
        .read(|c| c.describe_configs(&resource, None))
        .await;
    match described {
        Ok(list) => Ok(node_view::topic_configs(b.config.node_id, topic, &list)),
        Err(_) if b.metadata.image().topic(topic).is_none() => Err((
            StatusCode::NOT_FOUND,
            format!("topic {topic:?} does not exist"),
        )),
        Err(e) => Err((StatusCode::SERVICE_UNAVAILABLE, e.message)),
    }
}
