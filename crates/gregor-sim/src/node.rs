//! One simulated controller node: a real `gregor_quorum::Quorum` (openraft, gregor-log files in
//! the node's directory) serving the controller RPC on turmoil's simulated TCP.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Weak};
use std::time::Duration;

use gregor_meta::config::StaticBrokerConfig;
use gregor_meta::{Controller, MetadataDelta};
use gregor_quorum::rpc::{self, Connector, ForwardError, ForwardHandler, KafkaReply, Network};
use gregor_quorum::{ApplyListener, NodeId, Quorum, QuorumConfig, WriteError};

use crate::ops::{Answer, Op, SIM_API_KEY};
use crate::options::PlantedBug;

/// The controller listener port of every node.
pub const PORT: u16 = 9093;

pub fn host_name(node: usize) -> String {
    format!("n{node}")
}

pub fn address(node: usize) -> String {
    format!("{}:{PORT}", host_name(node))
}

/// Connections over turmoil's simulated TCP.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimConnector;

impl Connector for SimConnector {
    type Stream = turmoil::net::TcpStream;
    async fn connect(&self, addr: &str) -> io::Result<turmoil::net::TcpStream> {
        turmoil::net::TcpStream::connect(addr).await
    }
}

/// Simulated time since the start, in milliseconds (the clock every node's controller reads).
pub fn now_ms() -> i64 {
    turmoil::sim_elapsed().map_or(0, |d| d.as_millis() as i64)
}

/// The running nodes as the driver sees them: weak handles, so a crashed host's quorum is gone
/// with its runtime.
#[derive(Default)]
pub struct Registry {
    pub quorums: Vec<Option<Weak<Quorum>>>,
    /// The brokers of a replicated run (whose quorum members the driver observes).
    pub brokers: Vec<Option<Weak<gregor_broker::Broker>>>,
    /// How many times each node has started.
    pub starts: Vec<u64>,
    /// Start failures (a node that cannot open its own files is a finding).
    pub start_errors: Vec<(usize, String)>,
    /// Nodes whose disk is failing on purpose right now (`--disk-faults`): a start that fails
    /// then is what a broker must do, not a finding; it starts again once the disk is repaired.
    pub disk_failing: Vec<bool>,
    /// Start failures while the node's disk was failing on purpose (traced, not findings).
    pub expected_start_errors: Vec<(usize, String)>,
}

/// A running node as the driver sees it for a moment.
pub enum Live {
    Quorum(Arc<Quorum>),
    Broker(Arc<gregor_broker::Broker>),
}

impl Live {
    pub fn quorum(&self) -> &Quorum {
        match self {
            Live::Quorum(q) => q,
            Live::Broker(b) => b
                .metadata
                .quorum()
                .expect("every simulated broker is a controller too"),
        }
    }
}

impl Registry {
    /// The nodes running now.
    pub fn live(&self) -> Vec<Option<Live>> {
        (0..self.starts.len())
            .map(|i| {
                let q = self.quorums.get(i).and_then(|w| w.as_ref()?.upgrade());
                let b = self.brokers.get(i).and_then(|w| w.as_ref()?.upgrade());
                q.map(Live::Quorum).or(b.map(Live::Broker))
            })
            .collect()
    }

    /// The node stopped (crashed).
    pub fn forget(&mut self, node: usize) {
        if let Some(q) = self.quorums.get_mut(node) {
            *q = None;
        }
        if let Some(b) = self.brokers.get_mut(node) {
            *b = None;
        }
    }
}

/// What a node's software needs; cloned into every (re)start.
#[derive(Clone)]
pub struct NodeContext {
    pub node: usize,
    pub dir: PathBuf,
    pub voters: BTreeMap<NodeId, String>,
    pub scenario: crate::Scenario,
    pub bug: Option<PlantedBug>,
    pub registry: Rc<RefCell<Registry>>,
    /// `--power-loss` runs: the node's disk (a power model of its data directory), kept
    /// across restarts as a machine keeps its disk.
    pub faults: Option<Arc<gregor_log::FaultInjector>>,
    /// How far the node's wall clock is off (`--clock-jumps`), kept across restarts as a
    /// machine keeps its clock.
    pub clock_skew: Arc<std::sync::atomic::AtomicI64>,
    /// `--acls` runs: each broker also serves the users' ports (`broker_node::user_address`).
    /// Other runs open none, so their schedules stay what their seeds gave before.
    pub acl_users: bool,
    /// `--group-protocol load` runs: the brokers allow the `load` assignor and review its
    /// groups every 500 ms. Other runs leave it out, and with it the review's task.
    pub load_reviews: bool,
}

struct NoListener;
impl ApplyListener for NoListener {
    fn applied(&self, _c: &Controller, _d: &MetadataDelta) {}
}

/// Handles operations forwarded by the workload, as the broker's forwarding handler does.
struct SimForward {
    quorum: Arc<Quorum>,
    bug: Option<PlantedBug>,
}

/// How long a node waits for one operation to commit.
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the planted `RetryTimedOutWrite` waits for a write before it proposes it again,
/// as a forwarding layer whose request timeout is shorter than a commit's round trip would.
const SHORT_TIMEOUT: Duration = Duration::from_millis(20);

impl SimForward {
    async fn run(&self, op: Op) -> Answer {
        let now = now_ms();
        if self.bug == Some(PlantedBug::AckUncommitted) {
            return self.run_acking_early(op, now).await;
        }
        let retry = self.bug == Some(PlantedBug::RetryTimedOutWrite);
        let first = op.clone();
        let timeout = if retry { SHORT_TIMEOUT } else { WRITE_TIMEOUT };
        // As a broker does: heartbeats and the periodic tick are answered without a quorum
        // round confirming the leadership; every other no-op answer waits for one.
        let mut result = if matches!(op, Op::Heartbeat { .. } | Op::Tick) {
            let write = self
                .quorum
                .write_unconfirmed(timeout, move |c| first.apply(c, now));
            write.await
        } else {
            self.quorum
                .write(timeout, move |c| first.apply(c, now))
                .await
        };
        if retry && matches!(result, Err(WriteError::Timeout)) {
            // Planted bug: a retry hides the timeout from the client, though the first attempt
            // may still commit; a creation that did is then refused as a duplicate.
            result = self
                .quorum
                .write(WRITE_TIMEOUT, move |c| op.apply(c, now_ms()))
                .await;
        }
        match result {
            Ok((reply, applied_index)) => Answer::Done {
                reply,
                applied_index,
            },
            Err(WriteError::NotController { leader }) => Answer::NotController(leader),
            Err(WriteError::Timeout) => Answer::Timeout,
            Err(WriteError::Unavailable(e)) => Answer::Unavailable(e),
        }
    }

    /// Planted bug: the controller answers as soon as it has decided an operation and handed
    /// its records to Raft, without waiting for the commit.
    async fn run_acking_early(&self, op: Op, now: i64) -> Answer {
        let (decided, answer) = tokio::sync::oneshot::channel();
        let quorum = self.quorum.clone();
        tokio::spawn(async move {
            let _ = quorum
                .write(WRITE_TIMEOUT, move |c| {
                    let r = op.apply(c, now);
                    let _ = decided.send(r.response.clone());
                    r
                })
                .await;
        });
        match answer.await {
            Ok(reply) => Answer::Done {
                reply,
                applied_index: self.quorum.applied_index(),
            },
            Err(_) => Answer::Timeout,
        }
    }
}

impl ForwardHandler for SimForward {
    fn handle(
        &self,
        api_key: i16,
        _api_version: i16,
        body: Vec<u8>,
    ) -> Pin<Box<dyn std::future::Future<Output = Result<KafkaReply, ForwardError>> + Send + '_>>
    {
        Box::pin(async move {
            if api_key != SIM_API_KEY {
                return Err(ForwardError::Invalid(format!("unknown api key {api_key}")));
            }
            let op: Op = gregor_quorum::decode(&body)
                .map_err(|e| ForwardError::Invalid(format!("undecodable operation: {e}")))?;
            let answer = self.run(op).await;
            let applied_index = self.quorum.applied_index();
            let body = gregor_quorum::encode(&answer)
                .map_err(|e| ForwardError::Invalid(format!("unencodable answer: {e}")))?;
            Ok(KafkaReply {
                body,
                applied_index,
            })
        })
    }
}

fn static_config(node: usize) -> StaticBrokerConfig {
    let mut s = StaticBrokerConfig::new();
    s.set("node.id", &node.to_string())
        .expect("a small non-negative node.id is valid");
    s
}

/// The node's software: start the quorum, publish it, serve the controller listener.
pub async fn run_node(ctx: NodeContext) -> turmoil::Result {
    let incarnation = {
        let mut reg = ctx.registry.borrow_mut();
        reg.starts[ctx.node] += 1;
        reg.starts[ctx.node]
    };
    let election_timeout = ctx.scenario.election_timeout(ctx.node, incarnation);
    let config = QuorumConfig {
        node_id: ctx.node as NodeId,
        voters: ctx.voters.clone(),
        dir: ctx.dir.clone(),
        faults: ctx.faults.clone(),
        election_timeout_ms: election_timeout,
        heartbeat_interval_ms: ctx.scenario.heartbeat_interval_ms,
        snapshot_bytes: ctx.scenario.snapshot_bytes,
        static_config: static_config(ctx.node),
        seed: ctx.scenario.seed ^ (ctx.node as u64) << 40 ^ incarnation,
        now_ms: now_ms(),
    };
    let network = Network::new(SimConnector);
    let quorum = match Quorum::start_with(config, network, Arc::new(NoListener), |c| {
        // A one-millisecond window: openraft's draw from it is no draw at all.
        c.election_timeout_min = election_timeout;
        c.election_timeout_max = election_timeout + 1;
    })
    .await
    {
        Ok(q) => Arc::new(q),
        Err(e) => {
            ctx.registry
                .borrow_mut()
                .start_errors
                .push((ctx.node, e.to_string()));
            // The checker reports it; the rest of the cluster runs on.
            std::future::pending::<()>().await;
            return Ok(());
        }
    };
    ctx.registry.borrow_mut().quorums[ctx.node] = Some(Arc::downgrade(&quorum));
    let listener = turmoil::net::TcpListener::bind(("0.0.0.0", PORT)).await?;
    let forward: Arc<dyn ForwardHandler> = Arc::new(SimForward {
        quorum: quorum.clone(),
        bug: ctx.bug,
    });
    loop {
        let (stream, _) = listener.accept().await?;
        tokio::spawn(rpc::serve_connection(
            stream,
            quorum.raft().clone(),
            forward.clone(),
        ));
    }
}
