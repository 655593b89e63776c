//! The read-only web console, served under `/ui` on the `metrics.listener` HTTP listener.
//!
//! The page, its script and its style sheet are compiled into the binary (`assets/`); the script
//! reads these JSON documents and draws them:
//!
//! - `/ui/api/cluster`: brokers (racks, controller, fenced, and whether their client listener
//!   accepts a connection now), topics and partitions (leader, replicas, ISR, under-replicated,
//!   offline) from this node's metadata image, with each partition's sizes and offsets from its
//!   leader (this node's replica, or the leader's `/ui/api/replicas`);
//! - `/ui/api/replicas`: the sizes and offsets of the partitions this node leads;
//! - `/ui/api/groups`: the groups this node coordinates, classic and KIP-848 consumer groups;
//! - `/ui/api/group?id=<group>`: one of them in full: members (client ids, hosts, assignments),
//!   committed offsets and lag, and the rebalance timeline its coordinator recorded (for a
//!   consumer group, its epochs and each member's reconciliation: `consumer_view`);
//! - `/ui/api/transactions`: the open transactions of this node's transaction coordinator
//!   shards (DescribeTransactions' view of them);
//! - `/ui/api/messages?topic=&partition=...`: one page of a partition's records, read from its
//!   leader's log as a read_committed Fetch reads it (`messages`, `browse`), for a viewer that
//!   may READ the topic;
//! - `/ui/api/broker?id=<n>`, `/ui/api/topic-configs?topic=<t>`: a node's version, uptime, disk
//!   space and configs (from that node), a topic's configs (`node`, `node_view`);
//! - `/ui/api/charts`: the last hour of this node's rates, lag, time lag and latencies, sampled
//!   in memory by [`keep_charts`] (`charts`, pure; `time_lag` reads the records it needs);
//! - `/ui/api/actions`: whether the actions are on; with `console.actions.enable`, a POST under
//!   `/ui/api/actions/` creates or deletes a topic, resets an empty group's offsets or elects
//!   preferred leaders as the viewer's own Kafka requests (`act`, `actions`).
//!
//! It shows nothing a Kafka client could not ask for (Metadata, DescribeCluster, DescribeLogDirs,
//! DescribeGroups, OffsetFetch, ListOffsets, Fetch) and changes nothing but through the
//! actions. This module is the
//! imperative shell: it reads the broker's state; `view`, `timeline` and `browse` turn it into
//! JSON and are pure.

mod act;
pub mod actions;
mod browse;
mod charts;
mod consumer_view;
mod merge;
mod messages;
mod node;
mod node_view;
mod time_lag;
mod timeline;
mod view;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use hyper::StatusCode;

use crate::broker_view::{BrokerView, Observable};
use crate::cluster_view::OnBehalf;
use crate::metrics::auth::Viewer;

pub use view::HostedReplica;
use view::{Reachability, Tp, Visible};

/// The page, compiled in.
const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

const JSON: &str = "application/json";

/// An answer of the console, before HTTP framing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub status: StatusCode,
    pub content_type: &'static str,
    pub body: Bytes,
}

impl Page {
    fn new(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Page {
        Page {
            status,
            content_type,
            body: body.into(),
        }
    }

    /// A JSON error: `{"error": "..."}`.
    pub fn error(status: StatusCode, message: &str) -> Page {
        let body = serde_json::json!({ "error": message }).to_string();
        Page::new(status, JSON, body)
    }

    fn json(value: &serde_json::Value) -> Page {
        Page::new(StatusCode::OK, JSON, value.to_string())
    }
}

/// Whether `path` is the console's.
pub fn owns(path: &str) -> bool {
    path == "/ui" || path.starts_with("/ui/")
}

/// Whether a request's `Host` header names this listener by an IP address or `localhost` (with
/// or without a port). A web page on another site that rebinds its DNS name to this address
/// (DNS rebinding) sends its own name as the Host: refusing those keeps other sites' scripts
/// from reading the console through a visitor's browser. No Host (HTTP/1.0) is accepted.
pub fn host_allowed(host: Option<&str>) -> bool {
    let Some(host) = host else { return true };
    let name = if let Some(rest) = host.strip_prefix('[') {
        match rest.split_once(']') {
            Some((v6, port)) if port.is_empty() || is_port(port) => v6,
            _ => return false,
        }
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if is_port(port) => name,
            _ => host,
        }
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok()
}

fn is_port(s: &str) -> bool {
    s.strip_prefix(':').unwrap_or(s).parse::<u16>().is_ok()
}

/// The answer to a request whose Host is refused.
pub fn host_refused() -> Page {
    Page::error(
        StatusCode::FORBIDDEN,
        "the console answers requests addressed to an IP address or localhost only \
         (open it as http://<ip>:<port>/ui/); other host names are refused against DNS rebinding",
    )
}

/// A static asset, or `None` when `path` is not one.
fn asset(path: &str) -> Option<Page> {
    let (ctype, body) = match path {
        "/ui" | "/ui/" | "/ui/index.html" => ("text/html; charset=utf-8", INDEX_HTML),
        "/ui/app.js" => ("text/javascript; charset=utf-8", APP_JS),
        "/ui/app.css" => ("text/css; charset=utf-8", APP_CSS),
        _ => return None,
    };
    Some(Page::new(
        StatusCode::OK,
        ctype,
        Bytes::from_static(body.as_bytes()),
    ))
}

/// Answers a POST of a console action (`act`) for `viewer`; `broker` is `None` while the
/// broker is starting.
pub async fn act(
    broker: Option<Arc<dyn Observable>>,
    viewer: &Viewer,
    path: &str,
    origin: &actions::Origin<'_>,
    body: &[u8],
) -> Page {
    let (status, v) = act::act(broker, viewer, path, origin, body).await;
    Page::new(status, JSON, v.to_string())
}

/// The charts over time this node keeps (`charts`), fed by [`keep_charts`].
#[derive(Debug, Default)]
pub struct Charts(Mutex<charts::Sampler>);

impl Charts {
    fn sampler(&self) -> std::sync::MutexGuard<'_, charts::Sampler> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How often the charts' timer looks whether a sample is due.
const CHARTS_TICK: Duration = Duration::from_secs(1);

/// Feeds `charts` from the running broker (`broker()`, `None` while it starts) whenever a
/// sample is due; runs until dropped.
pub async fn keep_charts(charts: &Charts, broker: impl Fn() -> Option<Arc<dyn Observable>>) {
    let mut tick = tokio::time::interval(CHARTS_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if !charts.sampler().due(crate::runtime::now_ms()) {
            continue;
        }
        let Some(b) = broker() else { continue };
        let reading = chart_reading(b.view()).await;
        charts.sampler().record(crate::runtime::now_ms(), &reading);
    }
}

/// What the charts sample: this node's event counters, read through their narrow view
/// (`ChartCounters`) for the topics that exist and every API, and the lag and time lag of the
/// groups it coordinates (the lag as the Groups page computes it).
async fn chart_reading(b: BrokerView<'_>) -> charts::Reading {
    let counters = b.metrics.chart_counters();
    let mut reading = charts::Reading::default();
    for t in b.metadata.image().topics().values() {
        let (bytes_in, bytes_out) = counters.topic_bytes(&t.name);
        if let Some(v) = bytes_in {
            reading.bytes_in.push((t.name.clone(), v as f64));
        }
        if let Some(v) = bytes_out {
            reading.bytes_out.push((t.name.clone(), v as f64));
        }
    }
    for v in crate::api::api_versions() {
        let Ok(api) = kafka_protocol::messages::ApiKey::try_from(v.api_key) else {
            continue;
        };
        if let Some((seconds, count)) = counters.request_seconds(api) {
            let name = format!("{api:?}");
            reading.request_seconds.push((name, seconds, count as f64));
        }
    }
    let (shrinks, expands) = counters.isr_changes();
    reading.isr_shrinks = Some(shrinks as f64);
    reading.isr_expands = Some(expands as f64);
    let everything = |_: &str| true;
    let visible = Visible {
        topic: &everything,
        group: &everything,
        transactional_id: &everything,
        cluster: true,
    };
    let observed = b.groups.observe().await;
    let hws = high_watermarks(b, offsets_of(&observed, &[])).await;
    let groups = view::groups(b.config.node_id, &observed, &hws, &visible);
    reading.group_oldest_unconsumed = time_lag::oldest_unconsumed(b, &observed).await;
    reading.group_lag = groups["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| Some((g["group_id"].as_str()?.to_string(), g["lag_sum"].as_f64()?)))
        .collect();
    reading
}

/// `/ui/api/charts`: this node's charts (`scope=local`, or no `node`), else node `node`'s read
/// from its console for `viewer`; with the registered brokers, to pick another.
async fn charts_page(
    b: BrokerView<'_>,
    charts: &Charts,
    viewer: &Viewer,
    query: Option<&str>,
    scope: Scope,
) -> Page {
    let node = b.config.node_id;
    let asked = match broker_id_param(query, "node") {
        Ok(id) => id.unwrap_or(node),
        Err(e) => return Page::error(StatusCode::BAD_REQUEST, &e),
    };
    if asked != node && b.metadata.image().broker(asked).is_none() {
        let message = format!("broker {asked} is not registered in the cluster metadata");
        return Page::error(StatusCode::NOT_FOUND, &message);
    }
    let mut v = if asked == node || scope == Scope::Local {
        let may_see = |subject: charts::Subject, name: &str| match subject {
            charts::Subject::Topic => viewer.may_describe_topic(name),
            charts::Subject::Group => viewer.may_describe_group(name),
            charts::Subject::Cluster => viewer.may_describe_cluster(),
        };
        let now = crate::runtime::now_ms();
        charts.sampler().to_json(node, now, &may_see)
    } else {
        match get_peer(b, asked, "/ui/api/charts?scope=local", viewer).await {
            Ok(mut v) => {
                v["via_node"] = serde_json::json!(node);
                v
            }
            Err(e) => {
                let message = format!("node {asked}'s console did not answer: {e}");
                return Page::error(StatusCode::BAD_GATEWAY, &message);
            }
        }
    };
    let brokers: Vec<i32> = b.metadata.image().brokers().keys().copied().collect();
    v["brokers"] = serde_json::json!(brokers);
    Page::json(&v)
}

/// Answers a GET of `path` (with its `query`, undecoded) under `/ui` for `viewer`, who sees the
/// topics and groups it may DESCRIBE; `broker` is `None` while the broker is starting.
pub async fn answer(
    broker: Option<BrokerView<'_>>,
    charts: &Charts,
    viewer: &Viewer,
    path: &str,
    query: Option<&str>,
) -> Page {
    if let Some(page) = asset(path) {
        return page;
    }
    let Some(api) = path.strip_prefix("/ui/api/") else {
        return Page::new(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found\n",
        );
    };
    let Some(b) = broker else {
        return Page::error(StatusCode::SERVICE_UNAVAILABLE, "the broker is starting");
    };
    let scope = match scope_param(query) {
        Ok(scope) => scope,
        Err(e) => return Page::error(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let topic = |t: &str| viewer.may_describe_topic(t);
    let group_ok = |g: &str| viewer.may_describe_group(g);
    let txn_ok = |id: &str| viewer.may_describe_transactional_id(id);
    let visible = Visible {
        topic: &topic,
        group: &group_ok,
        transactional_id: &txn_ok,
        cluster: viewer.may_describe_cluster(),
    };
    match api {
        "cluster" => Page::json(&cluster(b, viewer, &visible).await),
        "replicas" => Page::json(&view::led_replicas(
            b.config.node_id,
            &b.metadata.image(),
            &hosted(b),
            &visible,
        )),
        "groups" => match scope {
            Scope::Local => Page::json(&local_groups(b, &visible).await),
            Scope::Cluster => Page::json(&cluster_groups(b, viewer, &visible).await),
        },
        "transactions" => {
            let observed = crate::metrics::txns::coordinator(b, view::MAX_OPEN_TXNS).await;
            let now = crate::runtime::now_ms();
            Page::json(&view::transactions(
                b.config.node_id,
                &observed,
                now,
                &visible,
            ))
        }
        "group" => {
            let id = match group_id_param(query) {
                Ok(id) => id,
                Err(e) => return Page::error(StatusCode::BAD_REQUEST, &e.to_string()),
            };
            if !group_ok(&id) {
                return Page::error(
                    StatusCode::FORBIDDEN,
                    &format!("not authorized to describe group {id:?}"),
                );
            }
            group(b, &id, scope, viewer, &visible).await
        }
        "messages" => browse_messages(b, viewer, query, scope).await,
        "charts" => charts_page(b, charts, viewer, query, scope).await,
        "actions" => Page::json(&act::status(b)),
        "broker" => match broker_id_param(query, "id") {
            Ok(id) => answered(node::broker(b, viewer, id, scope == Scope::Local).await),
            Err(e) => Page::error(StatusCode::BAD_REQUEST, &e),
        },
        "topic-configs" => match one_param(query, "topic") {
            Ok(Some(topic)) => answered(node::topic_configs(b, viewer, &topic).await),
            Ok(None) => Page::error(StatusCode::BAD_REQUEST, "missing parameter topic"),
            Err(e) => Page::error(StatusCode::BAD_REQUEST, &e),
        },
        _ => Page::error(StatusCode::NOT_FOUND, &format!("no API {api:?}")),
    }
}

/// `/ui/api/messages`: the query checked (400 with the reason), then one page of records.
async fn browse_messages(
    b: BrokerView<'_>,
    viewer: &Viewer,
    query: Option<&str>,
    scope: Scope,
) -> Page {
    let get = |name: &str| param(query, name).map_err(|e| e.to_string());
    let q = match browse::parse(&get) {
        Ok(q) => q,
        Err(e) => return Page::error(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    match messages::messages(b, viewer, q, scope == Scope::Local).await {
        Ok(v) => Page::json(&v),
        Err((status, message)) => Page::error(status, &message),
    }
}

/// A shell's answer as a page.
fn answered(answer: Result<serde_json::Value, (StatusCode, String)>) -> Page {
    match answer {
        Ok(v) => Page::json(&v),
        Err((status, message)) => Page::error(status, &message),
    }
}

/// Parameter `name`, given at most once.
fn one_param(query: Option<&str>, name: &str) -> Result<Option<String>, String> {
    let mut found = param(query, name).map_err(|e| e.to_string())?;
    if found.len() > 1 {
        return Err(format!("parameter {name} given more than once"));
    }
    Ok(found.pop())
}

/// Parameter `name` as a broker id (`id` of `/ui/api/broker`, `node` of `/ui/api/charts`):
/// `None` when absent, meaning this node.
fn broker_id_param(query: Option<&str>, name: &str) -> Result<Option<i32>, String> {
    match one_param(query, name)? {
        None => Ok(None),
        Some(id) => id
            .parse::<i32>()
            .ok()
            .filter(|id| *id >= 0)
            .map(Some)
            .ok_or_else(|| {
                let shown: String = id.chars().take(32).collect();
                format!("parameter {name} must be a broker id (a number), not {shown:?}")
            }),
    }
}

/// Whose groups an answer covers: this node's (what it coordinates) or the cluster's (every
/// live broker asked for its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Local,
    Cluster,
}

/// The groups this node coordinates, with their lag.
async fn local_groups(b: BrokerView<'_>, visible: &Visible<'_>) -> serde_json::Value {
    let crate::groups::ShardObservation {
        classic: mut observed,
        mut consumer,
    } = b.groups.observe_all().await;
    observed.retain(|g| (visible.group)(&g.summary.group_id));
    consumer.retain(|g| (visible.group)(&g.group_id));
    let hws = high_watermarks(b, offsets_of(&observed, &consumer)).await;
    let mut answer = view::groups(b.config.node_id, &observed, &hws, visible);
    let lines = consumer_view::lines(b.config.node_id, &consumer, &hws, visible);
    if let Some(groups) = answer["groups"].as_array_mut() {
        groups.extend(lines);
        groups.sort_by(|a, b| a["group_id"].as_str().cmp(&b["group_id"].as_str()));
    }
    answer
}

/// The partitions classic and consumer groups committed offsets to.
fn offsets_of(
    classic: &[crate::groups::GroupObservation],
    consumer: &[crate::groups::ConsumerGroupObservation],
) -> HashSet<(String, i32)> {
    let classic = classic.iter().flat_map(|g| &g.offsets);
    let consumer = consumer.iter().flat_map(|g| &g.offsets);
    classic
        .chain(consumer)
        .map(|(t, p, _)| (t.clone(), *p))
        .collect()
}

/// Every live broker's groups: this node's, and each other unfenced broker's own list read from
/// its console for `viewer`, merged (`merge`); then only those the principal may see.
async fn cluster_groups(
    b: BrokerView<'_>,
    viewer: &Viewer,
    visible: &Visible<'_>,
) -> serde_json::Value {
    let node = b.config.node_id;
    let image = b.metadata.image();
    let asked = image
        .brokers()
        .values()
        .filter(|r| r.id != node)
        .map(|r| peer_groups(b, r, offsets_partitions_led(&image, r.id), viewer));
    let (mine, mut answers) =
        tokio::join!(local_groups(b, visible), futures::future::join_all(asked));
    answers.push((node, merge::NodeGroups::Asked(Ok(mine))));
    let mut merged = merge::groups(node, answers);
    // Other nodes answer for the forwarded viewer when they trust this node (its certificate is
    // a super user there); a peer that does not (plain http) answers for what it sees.
    if let Some(groups) = merged["groups"].as_array_mut() {
        groups.retain(|g| g["group_id"].as_str().is_some_and(|id| (visible.group)(id)));
    }
    merged
}

/// How many `__consumer_offsets` partitions `node` leads: the groups it coordinates.
fn offsets_partitions_led(image: &gregor_meta::MetadataImage, node: i32) -> usize {
    image.topic(crate::groups::OFFSETS_TOPIC).map_or(0, |t| {
        t.partitions.values().filter(|p| p.leader == node).count()
    })
}

/// The viewer a request to another node is made for.
fn on_behalf(viewer: &Viewer) -> OnBehalf<'_> {
    OnBehalf {
        principal: viewer.principal(),
        host: viewer.host(),
    }
}

/// Another node's own groups, read from its console for `viewer`. A node that is down (fenced,
/// or unfenced but its listener refuses connections) is not asked: when it leads no
/// `__consumer_offsets` partition (stopped cleanly, or its partitions moved) no group is missing
/// for it; when it still leads some, their groups are.
async fn peer_groups(
    b: BrokerView<'_>,
    reg: &gregor_meta::BrokerRegistration,
    offsets_led: usize,
    viewer: &Viewer,
) -> (i32, merge::NodeGroups) {
    let peer = reg.id;
    let down = if reg.fenced {
        Some("fenced")
    } else if probe(reg).await.1 == Reachability::Refused {
        Some("its listener refuses connections")
    } else {
        None
    };
    if let Some(why) = down {
        return (peer, merge::down_node(why, offsets_led));
    }
    let answer = get_peer(b, peer, "/ui/api/groups?scope=local", viewer).await;
    if let Err(e) = &answer {
        tracing::warn!(node = peer, error = %e, "cannot read another node's groups for the console");
    }
    (peer, merge::NodeGroups::Asked(answer))
}

/// A GET of another node's console JSON for `viewer`: its answer, or why there is none.
async fn get_peer(b: BrokerView<'_>, peer: i32, path: &str, viewer: &Viewer) -> merge::NodeAnswer {
    match b
        .cluster_view
        .get_from(
            b.metadata,
            &b.config.settings,
            peer,
            path,
            on_behalf(viewer),
        )
        .await
    {
        Ok((status, v)) if status.is_success() => Ok(v),
        Ok((status, v)) => Err(format!(
            "answered {status}: {}{}",
            v.get("error").and_then(|e| e.as_str()).unwrap_or(""),
            refusal_hint(status)
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// What a peer's refusal of this node's request usually means.
fn refusal_hint(status: StatusCode) -> &'static str {
    match status {
        StatusCode::UNAUTHORIZED => {
            " (that node did not take this node as a node: its metrics listener needs \
             ssl.client.auth=requested or required, and this node's certificate principal \
             must be in its super.users)"
        }
        _ => "",
    }
}

/// One group in full: from this node when it coordinates the group, else read from its
/// coordinator's console (the leader of its `__consumer_offsets` partition) for `viewer`.
async fn group(
    b: BrokerView<'_>,
    id: &str,
    scope: Scope,
    viewer: &Viewer,
    visible: &Visible<'_>,
) -> Page {
    let node = b.config.node_id;
    let observed = b.groups.observe_all().await;
    if let Some(g) = observed.classic.iter().find(|g| g.summary.group_id == id) {
        let hws = high_watermarks(b, offsets_of(std::slice::from_ref(g), &[])).await;
        return Page::json(&view::group(node, g, &hws, visible));
    }
    if let Some(g) = observed.consumer.iter().find(|g| g.group_id == id) {
        let hws = high_watermarks(b, offsets_of(&[], std::slice::from_ref(g))).await;
        return Page::json(&consumer_view::group(node, g, &hws, visible));
    }
    let not_here = || {
        Page::error(
            StatusCode::NOT_FOUND,
            &format!("group {id:?} is not coordinated by node {node} (or does not exist)"),
        )
    };
    if scope == Scope::Local {
        return not_here();
    }
    let image = b.metadata.image();
    let partition = crate::groups::Groups::partition_in(&image, b.config, id);
    let coordinator = image
        .topic(crate::groups::OFFSETS_TOPIC)
        .and_then(|t| t.partitions.get(&partition))
        .map(|p| p.leader);
    let coordinator = match coordinator {
        Some(c) if c >= 0 && c != node => c,
        Some(c) if c == node => return not_here(),
        _ => {
            return Page::error(
                StatusCode::NOT_FOUND,
                &format!(
                    "group {id:?} does not exist (its {} partition {partition} has no leader)",
                    crate::groups::OFFSETS_TOPIC
                ),
            )
        }
    };
    group_from_coordinator(b, id, coordinator, viewer).await
}

/// One group read from its coordinator's console (`coordinator` is another node) for `viewer`.
async fn group_from_coordinator(
    b: BrokerView<'_>,
    id: &str,
    coordinator: i32,
    viewer: &Viewer,
) -> Page {
    let node = b.config.node_id;
    let path = format!(
        "/ui/api/group?id={}&scope=local",
        crate::cluster_view::peer::encode_param(id)
    );
    match b
        .cluster_view
        .get_from(
            b.metadata,
            &b.config.settings,
            coordinator,
            &path,
            on_behalf(viewer),
        )
        .await
    {
        Ok((status, mut v)) => {
            if status.is_success() {
                v["via_node"] = serde_json::json!(node);
                Page::json(&v)
            } else {
                let message = v
                    .get("error")
                    .and_then(|e| e.as_str())
                    .unwrap_or("no reason given");
                // A peer refusing this node's own login is not the viewer's doing.
                let status = if status.is_client_error() && status != StatusCode::UNAUTHORIZED {
                    status
                } else {
                    StatusCode::BAD_GATEWAY
                };
                Page::error(
                    status,
                    &format!(
                        "coordinator node {coordinator}: {message}{}",
                        refusal_hint(status)
                    ),
                )
            }
        }
        Err(e) => {
            tracing::warn!(group = id, node = coordinator, error = %e, "cannot read a group from its coordinator's console");
            Page::error(
                StatusCode::BAD_GATEWAY,
                &format!("group {id:?} is coordinated by node {coordinator}, whose console did not answer: {e}"),
            )
        }
    }
}

/// The replicas this node hosts, with their sizes and offsets.
fn hosted(b: BrokerView<'_>) -> HashMap<Tp, HostedReplica> {
    b.replicas
        .all()
        .into_iter()
        .map(|p| {
            let r = HostedReplica {
                size_bytes: p.log.size_bytes(),
                log_start_offset: p.log.log_start_offset(),
                log_end_offset: p.log.log_end_offset(),
                high_watermark: p.high_watermark(),
                last_stable_offset: Some(p.last_stable_offset(p.high_watermark())),
            };
            ((p.topic.clone(), p.index), r)
        })
        .collect()
}

/// How long the console waits for a broker's client listener to accept a connection and, on a
/// plaintext listener, to answer.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// The frame the probe sends a plaintext listener: ApiVersions v0, which a broker answers
/// before any authentication.
fn api_versions_probe() -> Vec<u8> {
    use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, RequestHeader};
    use kafka_protocol::protocol::{Encodable, StrBytes};
    let mut header = RequestHeader::default();
    header.request_api_key = ApiKey::ApiVersions as i16;
    header.client_id = Some(StrBytes::from_static_str("gregor-console"));
    let mut buf = bytes::BytesMut::new();
    let encoded = header
        .encode(&mut buf, ApiKey::ApiVersions.request_header_version(0))
        .and_then(|()| ApiVersionsRequest::default().encode(&mut buf, 0));
    debug_assert!(encoded.is_ok(), "a fixed request encodes");
    let mut frame = (buf.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&buf);
    frame
}

/// How `reg`'s client listener answers now (the connection is closed at once). A plaintext
/// listener is preferred and asked ApiVersions: a frozen process's listening socket still
/// completes TCP handshakes (the kernel does that), only an answer shows the process runs.
/// A TLS listener is only connected to: a handshake the probe then drops would make that
/// broker log a failure.
async fn probe(reg: &gregor_meta::BrokerRegistration) -> (i32, Reachability) {
    let plain = reg
        .endpoints
        .iter()
        .find(|e| e.security_protocol == 0 || e.security_protocol == 2);
    let Some(ep) = plain.or(reg.endpoints.first()) else {
        return (reg.id, Reachability::NotProbed);
    };
    let ask = probe_listener(ep.host.as_str(), ep.port, plain.is_some());
    let reach = tokio::time::timeout(PROBE_TIMEOUT, ask)
        .await
        .unwrap_or(Reachability::NoAnswer);
    (reg.id, reach)
}

async fn probe_listener(host: &str, port: u16, plaintext: bool) -> Reachability {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = match tokio::net::TcpStream::connect((host, port)).await {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            return Reachability::Refused
        }
        Err(_) => return Reachability::NoAnswer,
    };
    if !plaintext {
        return Reachability::Accepts;
    }
    let mut size = [0u8; 4];
    let asked = async {
        conn.write_all(&api_versions_probe()).await?;
        conn.read_exact(&mut size).await
    };
    match asked.await {
        Ok(_) => Reachability::Accepts,
        Err(_) => Reachability::NoAnswer,
    }
}

/// The longest the Topics page waits for the leaders' sizes: a leader that answered the probe
/// but is slow (or froze since) costs only its own partitions' numbers, shown as "—".
const SIZES_WAIT: Duration = Duration::from_millis(1500);

/// The sizes and offsets of the partitions other nodes lead, read from their consoles for
/// `viewer`; with the nodes that could not be read. Only leaders that are unfenced and whose
/// listener accepted the probe are asked: a dead one would hold the page for the whole wait.
async fn from_leaders(
    b: BrokerView<'_>,
    image: &gregor_meta::MetadataImage,
    reachability: &HashMap<i32, Reachability>,
    viewer: &Viewer,
) -> (view::FromLeaders, Vec<(i32, String)>) {
    let node = b.config.node_id;
    let leaders: HashMap<Tp, i32> = image
        .topics()
        .values()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|(&i, p)| ((t.name.clone(), i), p.leader))
        })
        .filter(|(_, l)| *l >= 0 && *l != node && image.is_broker_active(*l))
        .collect();
    let mut peers: Vec<i32> = leaders.values().copied().collect();
    peers.sort_unstable();
    peers.dedup();
    let asked = peers.into_iter().map(|peer| async move {
        let answer = match reachability.get(&peer) {
            Some(Reachability::Accepts) => {
                let get = get_peer(b, peer, "/ui/api/replicas", viewer);
                tokio::time::timeout(SIZES_WAIT, get)
                    .await
                    .unwrap_or_else(|_| {
                        Err(format!("no answer within {} ms", SIZES_WAIT.as_millis()))
                    })
            }
            _ => Err("not asked: its listener does not answer".to_string()),
        };
        (peer, answer)
    });
    let answers = futures::future::join_all(asked).await;
    merge::led_replicas(answers, &leaders)
}

/// `/ui/api/cluster`: this node's metadata, each unfenced broker's listener probed, then each
/// partition's sizes from its leader.
async fn cluster(b: BrokerView<'_>, viewer: &Viewer, visible: &Visible<'_>) -> serde_json::Value {
    let node = b.config.node_id;
    let image = b.metadata.image();
    let probes = image
        .brokers()
        .values()
        .filter(|r| r.id != node && !r.fenced)
        .map(probe);
    let reachability: HashMap<i32, Reachability> = futures::future::join_all(probes)
        .await
        .into_iter()
        .collect();
    let (from_leaders, unread) = from_leaders(b, &image, &reachability, viewer).await;
    view::cluster(&view::ClusterInput {
        node_id: node,
        cluster_id: b.cluster_id,
        controller: b.metadata.active_controller(),
        applied_index: b.metadata.applied_index(),
        image: &image,
        hosted: &hosted(b),
        from_leaders: &from_leaders,
        reachability: &reachability,
        unread: &unread,
        is_internal: crate::handlers::produce::is_internal_topic,
        visible,
    })
}

/// The high watermarks of the partitions the groups committed to, from their leaders (as for
/// `gregor_consumer_group_lag_offsets`).
async fn high_watermarks(
    b: BrokerView<'_>,
    wanted: HashSet<(String, i32)>,
) -> HashMap<(String, i32), i64> {
    b.cluster_view
        .high_watermarks(b.metadata, b.replicas, wanted)
        .await
}

/// Why a query was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    #[error("missing parameter id (the group id, percent-encoded): /ui/api/group?id=<group>")]
    MissingId,
    #[error("parameter id given more than once")]
    RepeatedId,
    #[error("bad percent-encoding in the query at byte {0}")]
    BadEscape(usize),
    #[error("the query does not decode to UTF-8")]
    NotUtf8,
    #[error("parameter scope given more than once")]
    RepeatedScope,
    #[error(
        "parameter scope must be local (this node's groups) or cluster (every node's), not {0:?}"
    )]
    BadScope(String),
}

/// The values of parameter `name` in a query string, decoded.
fn param(query: Option<&str>, name: &str) -> Result<Vec<String>, QueryError> {
    let mut found = Vec::new();
    for pair in query.unwrap_or("").split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if percent_decode(key)? == name {
            found.push(percent_decode(value)?);
        }
    }
    Ok(found)
}

/// The `id` parameter of a query string.
pub fn group_id_param(query: Option<&str>) -> Result<String, QueryError> {
    let mut ids = param(query, "id")?;
    if ids.len() > 1 {
        return Err(QueryError::RepeatedId);
    }
    ids.pop().ok_or(QueryError::MissingId)
}

/// The `scope` parameter: `cluster` when absent.
pub fn scope_param(query: Option<&str>) -> Result<Scope, QueryError> {
    let mut scopes = param(query, "scope")?;
    if scopes.len() > 1 {
        return Err(QueryError::RepeatedScope);
    }
    match scopes.pop().as_deref() {
        None | Some("cluster") => Ok(Scope::Cluster),
        Some("local") => Ok(Scope::Local),
        Some(other) => Err(QueryError::BadScope(other.chars().take(64).collect())),
    }
}

/// Decodes `%XX` escapes and `+` (a space, in form encoding).
fn percent_decode(s: &str) -> Result<String, QueryError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).ok_or(QueryError::BadEscape(i))?;
                let hex = std::str::from_utf8(hex).map_err(|_| QueryError::BadEscape(i))?;
                let byte = u8::from_str_radix(hex, 16).map_err(|_| QueryError::BadEscape(i))?;
                out.push(byte);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| QueryError::NotUtf8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_ids_are_percent_decoded() {
        assert_eq!(group_id_param(Some("id=orders")), Ok("orders".into()));
        assert_eq!(
            group_id_param(Some("x=1&id=a%20b%2Bc%26d+e")),
            Ok("a b+c&d e".into())
        );
        assert_eq!(group_id_param(Some("id=%E2%9C%93")), Ok("✓".into()));
        assert_eq!(group_id_param(Some("id=")), Ok(String::new()));
    }

    #[test]
    fn bad_queries_are_refused_with_a_reason() {
        assert_eq!(group_id_param(None), Err(QueryError::MissingId));
        assert_eq!(group_id_param(Some("group=x")), Err(QueryError::MissingId));
        assert_eq!(
            group_id_param(Some("id=a&id=b")),
            Err(QueryError::RepeatedId)
        );
        assert_eq!(
            group_id_param(Some("id=%zz")),
            Err(QueryError::BadEscape(0))
        );
        assert_eq!(
            group_id_param(Some("id=ab%4")),
            Err(QueryError::BadEscape(2))
        );
        assert_eq!(group_id_param(Some("id=%ff%fe")), Err(QueryError::NotUtf8));
        assert_eq!(
            group_id_param(Some("id=a&scope=x&id=b")),
            Err(QueryError::RepeatedId)
        );
    }

    #[test]
    fn broker_ids_are_numbers() {
        assert_eq!(broker_id_param(None, "id"), Ok(None));
        assert_eq!(broker_id_param(Some("id=3&scope=local"), "id"), Ok(Some(3)));
        assert!(broker_id_param(Some("id=x"), "id").is_err_and(|e| e.contains("broker id")));
        assert!(broker_id_param(Some("node=-1"), "node").is_err());
        assert!(
            broker_id_param(Some("id=1&id=2"), "id").is_err_and(|e| e.contains("more than once"))
        );
        assert_eq!(
            one_param(Some("topic=a%20b"), "topic"),
            Ok(Some("a b".into()))
        );
    }

    #[test]
    fn scopes() {
        assert_eq!(scope_param(None), Ok(Scope::Cluster));
        assert_eq!(scope_param(Some("id=x")), Ok(Scope::Cluster));
        assert_eq!(scope_param(Some("id=x&scope=local")), Ok(Scope::Local));
        assert_eq!(scope_param(Some("scope=cluster")), Ok(Scope::Cluster));
        assert_eq!(
            scope_param(Some("scope=all")),
            Err(QueryError::BadScope("all".into()))
        );
        assert_eq!(
            scope_param(Some("scope=local&scope=local")),
            Err(QueryError::RepeatedScope)
        );
    }

    #[test]
    fn only_ip_and_localhost_hosts_are_accepted() {
        for ok in [
            "127.0.0.1:9644",
            "127.0.0.1",
            "10.1.2.3:80",
            "localhost:9644",
            "LOCALHOST",
            "[::1]:9644",
            "[::1]",
        ] {
            assert!(host_allowed(Some(ok)), "{ok}");
        }
        assert!(host_allowed(None));
        for refused in [
            "evil.example:9644",
            "evil.example",
            "localhost.evil.example",
            "127.0.0.1.nip.io:9644",
            "[::1]x",
            "",
        ] {
            assert!(!host_allowed(Some(refused)), "{refused}");
        }
    }

    #[tokio::test]
    async fn assets_are_served_and_the_api_waits_for_the_broker() {
        let v = Viewer::everything(crate::security::KafkaPrincipal::anonymous());
        let charts = Charts::default();
        let answer = |path, query| answer(None, &charts, &v, path, query);
        let index = answer("/ui", None).await;
        assert_eq!(index.status, StatusCode::OK);
        assert!(index.content_type.starts_with("text/html"));
        assert!(std::str::from_utf8(&index.body)
            .expect("utf-8")
            .contains("/ui/app.js"));
        assert_eq!(answer("/ui/app.js", None).await.body, APP_JS);
        assert_eq!(
            answer("/ui/api/groups", None).await.status,
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            answer("/ui/nope.js", None).await.status,
            StatusCode::NOT_FOUND
        );
        assert!(owns("/ui") && owns("/ui/api/x") && !owns("/uix") && !owns("/metrics"));
    }
}
