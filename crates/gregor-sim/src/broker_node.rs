//! One simulated node of a replicated cluster: the real `gregor_broker::Broker` (controller and
//! broker roles, as `gregor cluster up` runs them) on turmoil's network, its data directory
//! surviving crashes and restarts.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use gregor_broker::broker::StartOptions;
use gregor_broker::connection::ConnectionSecurity;
use gregor_broker::security::KafkaPrincipal;
use gregor_broker::transport::{BoxFuture, Listener, SharedTransport, Stream, Transport};
use gregor_broker::{Broker, BrokerConfig, BrokerOptions};

use crate::node::{host_name, NodeContext, PORT};

/// The client (Kafka) listener port of every node.
pub const CLIENT_PORT: u16 = 9092;

pub fn client_address(node: usize) -> String {
    format!("{}:{CLIENT_PORT}", host_name(node))
}

/// The users of `--acls` (`User:u0`, ...), each with a client port of its own on every node,
/// from this one on.
pub const ACL_USERS: u16 = 3;
const USER_PORT: u16 = 9192;

/// The port on which every connection is `User:u<user>` (see [`serve_user`]).
pub fn user_address(node: usize, user: u16) -> String {
    format!("{}:{}", host_name(node), USER_PORT + user)
}

/// Broker settings of the simulated cluster: Kafka's defaults scaled down so that sessions,
/// ISR shrinks and fetch waits happen within a seed's few simulated seconds.
pub const BROKER_OVERRIDES: &[&str] = &[
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=300",
    "replica.lag.time.max.ms=1500",
    "replica.fetch.wait.max.ms=200",
    "replica.fetch.backoff.ms=100",
    "replica.socket.timeout.ms=3000",
    "unclean.leader.election.enable=false",
    // Consumer groups (`--groups`): 3 s member sessions, a short first-join delay, and a small
    // __consumer_offsets.
    "group.min.session.timeout.ms=1000",
    "group.initial.rebalance.delay.ms=300",
    // KIP-848 consumer groups (`--group-protocol consumer`): the same 3 s sessions, 500 ms
    // heartbeats.
    "group.consumer.session.timeout.ms=3000",
    "group.consumer.min.session.timeout.ms=1000",
    "group.consumer.heartbeat.interval.ms=500",
    "group.consumer.min.heartbeat.interval.ms=500",
    "offsets.topic.num.partitions=2",
    "offsets.commit.timeout.ms=2000",
    // ACLs (`--acls`): the ACL APIs need an authorizer; the anonymous simulated clients stay
    // allowed everything.
    "authorizer.class.name=gregor.authorizer.StandardAuthorizer",
    "super.users=User:ANONYMOUS",
    // Transactions (`--transactions`): a small __transaction_state (read only when it is
    // created, which only transactional runs do).
    "transaction.state.log.num.partitions=2",
];

/// turmoil's simulated TCP as the broker's transport.
struct SimTransport;

impl Transport for SimTransport {
    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<Stream>> {
        Box::pin(async move {
            let s = turmoil::net::TcpStream::connect(addr).await?;
            Ok(Box::new(s) as Stream)
        })
    }

    fn bind(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<Box<dyn Listener>>> {
        Box::pin(async move {
            let l = turmoil::net::TcpListener::bind(addr).await?;
            Ok(Box::new(SimListener(l)) as Box<dyn Listener>)
        })
    }
}

struct SimListener(turmoil::net::TcpListener);

impl Listener for SimListener {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(Stream, SocketAddr)>> {
        Box::pin(async move {
            let (s, peer) = self.0.accept().await?;
            Ok((Box::new(s) as Stream, peer))
        })
    }
}

/// The KIP-848 assignors: with `load`, reviewed every 500 ms, only in `--group-protocol load`
/// runs (its review task would move the other runs' schedules).
fn assignors(load: bool) -> Vec<String> {
    match load {
        true => vec![
            "group.consumer.assignors=uniform,range,load".into(),
            "group.consumer.load.review.interval.ms=500".into(),
        ],
        false => vec!["group.consumer.assignors=uniform,range".into()],
    }
}

fn config(ctx: &NodeContext, data_dir: PathBuf, election_timeout_ms: u64) -> BrokerConfig {
    let voters: Vec<String> = ctx
        .voters
        .iter()
        .map(|(id, addr)| format!("{id}@{addr}"))
        .collect();
    let opts = BrokerOptions {
        listeners: Some(format!(
            "PLAINTEXT://0.0.0.0:{CLIENT_PORT},CONTROLLER://0.0.0.0:{PORT}"
        )),
        advertised_listeners: Some(format!("PLAINTEXT://{}", client_address(ctx.node))),
        data_dir: Some(data_dir),
        node_id: Some(ctx.node as i32),
        properties: None,
        overrides: BROKER_OVERRIDES
            .iter()
            .map(|s| s.to_string())
            // Also sets the Raft heartbeat interval (a third of it).
            .chain([format!(
                "controller.quorum.election.timeout.ms={election_timeout_ms}"
            )])
            .chain(assignors(ctx.load_reviews))
            .collect(),
        process_roles: Some("broker,controller".into()),
        controller_quorum_voters: Some(voters.join(",")),
        rack: None,
        cluster_id: Some("gregor-sim".into()),
    };
    BrokerConfig::from_options(&opts).expect("the simulated broker configuration is valid")
}

/// The node's software: start the broker on its own files, publish it, serve its client
/// listener. Everything it runs reads the node's own wall clock (`--clock-jumps`).
pub async fn run_broker_node(ctx: NodeContext) -> turmoil::Result {
    let skew = ctx.clock_skew.clone();
    gregor_broker::simulation::with_clock_skew(skew, run_broker(ctx)).await
}

async fn run_broker(ctx: NodeContext) -> turmoil::Result {
    let incarnation = {
        let mut reg = ctx.registry.borrow_mut();
        reg.starts[ctx.node] += 1;
        reg.starts[ctx.node]
    };
    let election_timeout = ctx.scenario.election_timeout(ctx.node, incarnation);
    // `ctx.dir` names the metadata log directory; the broker's data directory holds it.
    let data_dir = ctx
        .dir
        .parent()
        .expect("the metadata directory lies in the node's data directory")
        .to_path_buf();
    let config = config(&ctx, data_dir, election_timeout);
    // Bound before the broker registers, as the broker binary does: the controller probes a
    // broker's client listener when its heartbeat connection closes.
    let listener = turmoil::net::TcpListener::bind(("0.0.0.0", CLIENT_PORT)).await?;
    let options = StartOptions {
        transport: SharedTransport(Arc::new(SimTransport)),
        seed: Some(ctx.scenario.seed ^ (ctx.node as u64) << 40 ^ incarnation),
        incarnation: Some(gregor_meta::Uuid::from_u128(
            (ctx.scenario.seed as u128) << 64 | (ctx.node as u128) << 32 | incarnation as u128,
        )),
        // A one-millisecond window: openraft's draw from it is no draw at all.
        election_timeout_range_ms: Some((election_timeout, election_timeout + 1)),
        disk: match &ctx.faults {
            Some(f) => gregor_log::Disk::with_faults(f.clone()),
            None => gregor_log::Disk::real(),
        },
    };
    let broker = match Broker::start_with(config, options).await {
        Ok(b) => b,
        Err(e) => {
            {
                let mut reg = ctx.registry.borrow_mut();
                // A start that fails while the disk fails on purpose, or because the power
                // went off during the boot (a power cut armed as the node restarted), is what
                // a broker must do; the node boots again once the episode ends.
                let failing = reg.disk_failing.get(ctx.node).copied().unwrap_or(false)
                    || ctx.faults.as_ref().is_some_and(|f| f.is_dead());
                let errors = match failing {
                    true => &mut reg.expected_start_errors,
                    false => &mut reg.start_errors,
                };
                errors.push((
                    ctx.node,
                    format!("start {incarnation} at {} ms: {e}", crate::node::now_ms()),
                ));
            }
            std::future::pending::<()>().await;
            return Ok(());
        }
    };
    ctx.registry.borrow_mut().brokers[ctx.node] = Some(Arc::downgrade(&broker));
    let (_stop, shutdown) = tokio::sync::watch::channel(false);
    gregor_broker::runtime::spawn(broker.clone().run_background(shutdown.clone()));
    let limits = gregor_broker::server::request_limits(&broker);
    let users = if ctx.acl_users { ACL_USERS } else { 0 };
    for user in 0..users {
        let l = turmoil::net::TcpListener::bind(("0.0.0.0", USER_PORT + user)).await?;
        let served = serve_user(l, user, broker.clone(), limits.clone(), shutdown.clone());
        gregor_broker::runtime::spawn(served);
    }
    let mut id = 0u64;
    loop {
        let (stream, peer) = listener.accept().await?;
        let (rd, wr) = stream.into_split();
        id += 1;
        gregor_broker::runtime::spawn(gregor_broker::connection::serve_io(
            rd,
            wr,
            peer,
            id,
            broker.clone(),
            limits.clone(),
            shutdown.clone(),
        ));
    }
}

/// Serves `listener` as the broker's PLAINTEXT listener with every connection logged in as
/// `User:u<user>`: it stands for an authenticated listener (a TLS client certificate or a SASL
/// login, which the simulation does not run), so `--acls` can ask what the authorizer allows a
/// principal that is not a super user. Authorization itself is the broker's own code.
async fn serve_user(
    listener: turmoil::net::TcpListener,
    user: u16,
    broker: Arc<Broker>,
    limits: gregor_broker::connection::RequestLimits,
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let principal = Arc::new(KafkaPrincipal::user(format!("u{user}")));
    // Connection ids apart from the anonymous listener's.
    let mut id = (1 + u64::from(user)) << 48;
    while let Ok((stream, peer)) = listener.accept().await {
        let (rd, wr) = stream.into_split();
        id += 1;
        let mut security = ConnectionSecurity::plaintext("PLAINTEXT");
        security.principal = principal.clone();
        gregor_broker::runtime::spawn(gregor_broker::connection::serve_io_as(
            rd,
            wr,
            security,
            peer,
            id,
            broker.clone(),
            limits.clone(),
            shutdown.clone(),
        ));
    }
}
