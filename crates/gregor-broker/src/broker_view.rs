//! What observability (the metrics scrape, `/readyz`, the console, the cluster view) reads of a
//! running broker: a read-only view borrowed from it, built by `Broker::view` the way
//! `Broker::data_plane` builds the data plane's, so none of them takes the whole `Broker`.

use std::sync::{Arc, Mutex};

use kafka_protocol::messages::RequestKind;

use crate::cluster_view::ClusterView;
use crate::config::BrokerConfig;
use crate::connection::{Reply, RequestContext};
use crate::fetch_session::FetchSessionCache;
use crate::groups::Groups;
use crate::metadata::MetadataManager;
use crate::metrics::events::BrokerMetrics;
use crate::replica::ReplicaManager;
use crate::txn_shell::Transactions;

/// The parts of a broker observability reads; cheap to copy.
#[derive(Clone, Copy)]
pub struct BrokerView<'a> {
    pub config: &'a BrokerConfig,
    pub cluster_id: &'a str,
    pub metadata: &'a MetadataManager,
    pub replicas: &'a ReplicaManager,
    pub groups: &'a Groups,
    /// The transaction coordinator's shards on this node.
    pub txns: &'a Transactions,
    pub fetch_sessions: &'a Mutex<FetchSessionCache>,
    pub metrics: &'a BrokerMetrics,
    pub cluster_view: &'a Arc<ClusterView>,
}

impl BrokerView<'_> {
    /// This node's id.
    pub fn node_id(&self) -> i32 {
        self.config.node_id
    }
}

/// A running broker as the metrics listener reaches it (the listener is bound before the
/// broker starts, and only then told of it).
pub trait Observable: Send + Sync {
    /// The view of this broker now.
    fn view(&self) -> BrokerView<'_>;

    /// Runs one Kafka request as a client's request runs: the authorizer's gate for
    /// `ctx.principal`, then its handler (the console's actions, `console/act`).
    fn request(
        self: Arc<Self>,
        ctx: RequestContext,
        request: RequestKind,
    ) -> futures::future::BoxFuture<'static, Reply>;
}
