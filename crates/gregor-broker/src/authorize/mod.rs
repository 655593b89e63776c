//! Authorization of every request, by the rules of Kafka's "Operations and Resources on
//! Protocols" table: which operation on which resource each API needs, what a refusal answers
//! (TOPIC_, GROUP_, CLUSTER_ or TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and what answers leave
//! out. Without `authorizer.class.name` every check passes and no request changes.
//!
//! Dispatch asks [`gate`] before the handler runs. A request is either answered at once (a
//! whole-request refusal, or nothing left to run), or run with what it may do, its refused
//! parts (topics, groups, config resources, coordinator keys) answered by the [`Fixup`] that
//! completes the handler's response, which also filters what the response reveals (ListGroups,
//! OffsetFetch of all topics, KIP-430 authorized operations). A request forwarded to the
//! active controller is checked here, on the broker the client sent it to, and only its
//! authorized part is forwarded. Metadata and Fetch take their answers inside their handlers
//! ([`metadata_plan`], [`fetch_reader`]): which topics Metadata lists or creates depends on
//! the image, and a fetch session's partitions are known only once the session resolves them.
//!
//! The rules are written against [`Decide`], so tests run them over a table of answers.

mod admin;
mod common;
mod data;
mod groups;
mod txn;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex, PoisonError};

use gregor_meta::acl::{
    AclOperation, AclResourceType, Authorizer, AuthorizerConfig, RequestIdentity,
    CLUSTER_RESOURCE_NAME,
};
use gregor_meta::MetadataImage;
use kafka_protocol::messages::{ApiKey, FetchRequest, RequestKind};

use crate::connection::RequestContext;
use crate::metadata::MetadataManager;

pub use admin::describe_cluster_operations;
use common::split;
pub use common::{no_fixup, Decide, Gate};

/// The authorizer over this node's image, for one request's principal and client address.
pub struct Access {
    checker: Option<Checker>,
}

struct Checker {
    config: AuthorizerConfig,
    image: Arc<MetadataImage>,
    principal: String,
    host: IpAddr,
}

impl Access {
    /// The answers for a request on `ctx`'s connection, from the ACLs of this node's image as
    /// it is now; none to give without an authorizer.
    pub fn for_request(metadata: &MetadataManager, ctx: &RequestContext) -> Access {
        let Some(config) = AuthorizerConfig::from_static(metadata.static_config()) else {
            return Access::unchecked();
        };
        // The connection's peer address; one that does not parse matches only `*` hosts.
        let host = ctx
            .client_host
            .parse()
            .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        Access {
            checker: Some(Checker {
                config,
                image: metadata.image(),
                principal: ctx.principal.to_string(),
                host,
            }),
        }
    }

    /// The image whose ACLs decide; `None` without an authorizer.
    pub fn image(&self) -> Option<&MetadataImage> {
        self.checker.as_ref().map(|c| &*c.image)
    }

    /// Every answer yes (no authorizer configured).
    pub fn unchecked() -> Access {
        Access { checker: None }
    }

    fn decide(
        &self,
        op: AclOperation,
        resource_type: AclResourceType,
        name: &str,
        log_denial: bool,
    ) -> bool {
        let Some(c) = &self.checker else {
            return true;
        };
        let who = c.identity();
        let allowed = Authorizer::new(c.image.acls(), &c.config)
            .authorize(&who, op, resource_type, name)
            .is_allowed();
        if allowed {
            tracing::debug!(principal = %c.principal, host = %c.host, operation = %op, resource_type = %resource_type, resource = name, "authorized");
        } else if log_denial {
            log_denial_limited(&c.principal, c.host, op, resource_type, name);
        }
        allowed
    }
}

impl Checker {
    fn identity(&self) -> RequestIdentity<'_> {
        RequestIdentity {
            principal: &self.principal,
            host: self.host,
        }
    }
}

impl Decide for Access {
    fn enabled(&self) -> bool {
        self.checker.is_some()
    }

    fn allows(&self, op: AclOperation, resource_type: AclResourceType, name: &str) -> bool {
        self.decide(op, resource_type, name, true)
    }

    fn allows_quietly(&self, op: AclOperation, resource_type: AclResourceType, name: &str) -> bool {
        self.decide(op, resource_type, name, false)
    }

    fn allows_some(&self, op: AclOperation, resource_type: AclResourceType) -> bool {
        let Some(c) = &self.checker else {
            return true;
        };
        Authorizer::new(c.image.acls(), &c.config)
            .authorize_by_resource_type(&c.identity(), op, resource_type)
            .is_allowed()
    }

    fn authorized_operations(&self, resource_type: AclResourceType, name: &str) -> i32 {
        match &self.checker {
            Some(c) => Authorizer::new(c.image.acls(), &c.config).authorized_operations(
                &c.identity(),
                resource_type,
                name,
            ),
            None => gregor_meta::acl::supported_operations(resource_type)
                .iter()
                .fold(0, |bits, op| bits | (1 << op.code())),
        }
    }
}

/// At most this many refusals are logged per second (a client retrying a refused request
/// must not flood the log); the next logged one counts those left out.
const DENIALS_LOGGED_PER_SECOND: u32 = 20;

/// (second, refusals logged in it, refusals left out since the last one logged)
static DENIAL_LOG: Mutex<(i64, u32, u64)> = Mutex::new((i64::MIN, 0, 0));

fn log_denial_limited(
    principal: &str,
    host: IpAddr,
    op: AclOperation,
    resource_type: AclResourceType,
    name: &str,
) {
    let second = crate::runtime::now_ms().div_euclid(1000);
    let suppressed = {
        let mut log = DENIAL_LOG.lock().unwrap_or_else(PoisonError::into_inner);
        if log.0 != second {
            log.0 = second;
            log.1 = 0;
        }
        if log.1 >= DENIALS_LOGGED_PER_SECOND {
            log.2 += 1;
            return;
        }
        log.1 += 1;
        std::mem::take(&mut log.2)
    };
    tracing::info!(principal, %host, operation = %op, resource_type = %resource_type, resource = name, suppressed, "authorization denied");
}

/// The checks Kafka makes of `request` before its handler runs (every API but ApiVersions,
/// Metadata, DescribeCluster and Fetch, whose handlers ask themselves).
pub fn gate(
    d: &dyn Decide,
    image: &MetadataImage,
    api: ApiKey,
    version: i16,
    request: RequestKind,
) -> Gate {
    if !d.enabled() {
        return Gate::Run(request, no_fixup());
    }
    match request {
        r @ (RequestKind::Produce(_)
        | RequestKind::ListOffsets(_)
        | RequestKind::OffsetForLeaderEpoch(_)
        | RequestKind::DeleteRecords(_)
        | RequestKind::InitProducerId(_)
        | RequestKind::WriteTxnMarkers(_)
        | RequestKind::DescribeProducers(_)) => data::gate(d, r),
        r @ (RequestKind::FindCoordinator(_)
        | RequestKind::JoinGroup(_)
        | RequestKind::SyncGroup(_)
        | RequestKind::Heartbeat(_)
        | RequestKind::LeaveGroup(_)
        | RequestKind::OffsetCommit(_)
        | RequestKind::OffsetFetch(_)
        | RequestKind::DescribeGroups(_)
        | RequestKind::ListGroups(_)
        | RequestKind::DeleteGroups(_)
        | RequestKind::OffsetDelete(_)
        | RequestKind::ConsumerGroupHeartbeat(_)
        | RequestKind::ConsumerGroupDescribe(_)) => groups::gate(d, api, version, r),
        r @ (RequestKind::AddPartitionsToTxn(_)
        | RequestKind::AddOffsetsToTxn(_)
        | RequestKind::EndTxn(_)
        | RequestKind::TxnOffsetCommit(_)
        | RequestKind::DescribeTransactions(_)
        | RequestKind::ListTransactions(_)) => txn::gate(d, r),
        r => admin::gate(d, image, version, r),
    }
}

/// Which topics a fetch may read: a consumer needs READ on each; a follower (a fetch naming a
/// replica id) needs CLUSTER_ACTION on the cluster, else every partition is refused.
pub fn fetch_reader<'a>(
    d: &'a dyn Decide,
    r: &FetchRequest,
    version: i16,
) -> impl Fn(&str) -> bool + Sync + 'a {
    let replica_id = if version >= 15 {
        r.replica_state.replica_id.0
    } else {
        r.replica_id.0
    };
    let follower_allowed = replica_id >= 0 && d.cluster(AclOperation::ClusterAction);
    move |topic: &str| {
        if replica_id >= 0 {
            follower_allowed
        } else {
            d.allows(AclOperation::Read, AclResourceType::Topic, topic)
        }
    }
}

/// What Metadata answers about topics, decided before it describes them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct MetadataPlan {
    /// Topics described as usual (existing or not), in request order.
    pub described: Vec<String>,
    /// Topics the requester may not DESCRIBE: answered TOPIC_AUTHORIZATION_FAILED whether or
    /// not they exist (by name when asked by name, by id when asked by id).
    pub refused: Vec<String>,
    /// Missing topics it may DESCRIBE but not CREATE while auto-creation is on:
    /// TOPIC_AUTHORIZATION_FAILED, not created.
    pub refused_create: Vec<String>,
}

/// Metadata's topics: `requested` names (`None`: all topics, of which only those it may
/// DESCRIBE are listed, quietly), `exists` tells the image's, `auto_create` whether a missing
/// topic would be created.
pub fn metadata_plan(
    d: &dyn Decide,
    requested: Option<Vec<String>>,
    all_topics: impl Iterator<Item = String>,
    exists: impl Fn(&str) -> bool,
    auto_create: bool,
) -> MetadataPlan {
    let Some(names) = requested else {
        return MetadataPlan {
            described: all_topics
                .filter(|t| d.allows_quietly(AclOperation::Describe, AclResourceType::Topic, t))
                .collect(),
            ..MetadataPlan::default()
        };
    };
    let mut seen = BTreeSet::new();
    let names: Vec<String> = names
        .into_iter()
        .filter(|n| seen.insert(n.clone()))
        .collect();
    let (mut described, refused) = split(
        d,
        AclOperation::Describe,
        AclResourceType::Topic,
        names,
        |n| n.as_str(),
    );
    let mut refused_create = Vec::new();
    let missing = described.iter().any(|t| !exists(t.as_str()));
    if auto_create
        && missing
        && !d.allows_quietly(
            AclOperation::Create,
            AclResourceType::Cluster,
            CLUSTER_RESOURCE_NAME,
        )
    {
        let (keep, refuse): (Vec<String>, Vec<String>) = described.into_iter().partition(|t| {
            exists(t.as_str()) || d.allows(AclOperation::Create, AclResourceType::Topic, t)
        });
        described = keep;
        refused_create = refuse;
    }
    MetadataPlan {
        described,
        refused,
        refused_create,
    }
}

#[cfg(test)]
mod tests;
