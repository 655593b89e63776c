//! `gregor cluster up`: a cluster of combined broker+controller nodes on loopback, as child
//! processes of this one, for trying a replicated cluster on one machine. Each node's log lines
//! are printed with a `[node N]` prefix. A node that exits leaves the others running; `gregor
//! cluster restart-node N` (through the control socket in the data directory) starts it again.
//! Ctrl-C or SIGTERM stops every node within two seconds (SIGTERM, so each hands its
//! leaderships over and shuts down cleanly; SIGKILL for a straggler).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tokio::process::Child;
use tokio::sync::mpsc;

use crate::broker_cmd::wait_for_signal;
use crate::cluster_control::{self, Reply, Request, Started};
use crate::cluster_nodes::{self, Layout};
use crate::cluster_supervise::{Effect, Supervisor};

#[derive(Debug, clap::Args)]
pub struct ClusterArgs {
    #[command(subcommand)]
    pub command: ClusterCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum ClusterCommand {
    /// Start N nodes on 127.0.0.1 and run until Ctrl-C / SIGTERM.
    Up(UpArgs),
    /// Start node N of a running `cluster up` again (stopping it first if it runs) and wait
    /// until it has rejoined.
    RestartNode(RestartArgs),
}

#[derive(Debug, clap::Args)]
pub struct RestartArgs {
    /// The node id.
    pub node: u16,
    /// The running `cluster up`'s --data-dir.
    #[arg(long, default_value = "gregor-cluster")]
    pub data_dir: PathBuf,
    /// Seconds to wait for the node to be back (registered, unfenced, serving clients).
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
}

#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// Number of nodes (each is broker and controller; node ids 0..N-1).
    #[arg(long, default_value_t = 3)]
    pub nodes: u16,
    /// Node i listens for clients on BASE+2i, for the controller quorum on BASE+2i+1 and for
    /// metrics on BASE+2N+i.
    #[arg(long, default_value_t = 9092)]
    pub base_port: u16,
    /// Data directories go to DIR/node-i.
    #[arg(long, default_value = "gregor-cluster")]
    pub data_dir: PathBuf,
    /// Spread the nodes over R racks (rack-0 .. rack-(R-1), node i on rack i mod R).
    #[arg(long)]
    pub racks: Option<u16>,
    /// Any broker setting for every node, as key=value (repeatable).
    #[arg(long = "override", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
}

/// How often the supervisor looks for nodes that have exited.
const REAP_INTERVAL: Duration = Duration::from_millis(200);

pub fn run(args: ClusterArgs) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    match args.command {
        ClusterCommand::Up(args) => {
            let layout = layout(args)?;
            runtime.block_on(up(layout))
        }
        ClusterCommand::RestartNode(args) => runtime.block_on(restart_node(args)),
    }
}

fn layout(args: UpArgs) -> Result<Layout> {
    if args.nodes == 0 || args.nodes > 64 {
        bail!("--nodes must be between 1 and 64 (got {})", args.nodes);
    }
    if args.racks == Some(0) {
        bail!("--racks must be at least 1");
    }
    let metrics = !args
        .overrides
        .iter()
        .any(|o| o.starts_with("metrics.listener="));
    let layout = Layout {
        nodes: args.nodes,
        base_port: args.base_port,
        data_dir: args.data_dir,
        racks: args.racks,
        overrides: args.overrides,
        metrics,
    };
    // Every port fits, or the command fails before starting anything.
    layout.ports(args.nodes - 1)?;
    Ok(layout)
}

/// The running cluster: the node processes (`None` while a node is down) and what the
/// supervisor decided about them.
struct Cluster {
    layout: Layout,
    exe: PathBuf,
    voters: String,
    children: Vec<Option<Child>>,
    supervisor: Supervisor,
    /// Restart requests waiting for their node's process to start.
    pending: Vec<(u16, Reply)>,
}

impl Cluster {
    fn new(layout: Layout) -> Result<Self> {
        let exe = std::env::current_exe().context("cannot find the gregor executable")?;
        Ok(Self {
            voters: layout.voters()?,
            children: (0..layout.nodes).map(|_| None).collect(),
            supervisor: Supervisor::new(layout.nodes, &layout.data_dir.display().to_string()),
            pending: Vec::new(),
            layout,
            exe,
        })
    }

    fn start(&mut self, i: u16) -> Result<u32> {
        let child = cluster_nodes::start_node(&self.layout, &self.exe, i, &self.voters)?;
        let pid = child.id().unwrap_or(0);
        self.children[usize::from(i)] = Some(child);
        Ok(pid)
    }

    /// The nodes that have exited since the last look, with their exit statuses.
    fn reap(&mut self) -> Vec<(u16, String)> {
        let mut exited = Vec::new();
        for (i, slot) in (0u16..).zip(self.children.iter_mut()) {
            if let Some(Ok(Some(status))) = slot.as_mut().map(Child::try_wait) {
                *slot = None;
                exited.push((i, status.to_string()));
            }
        }
        exited
    }

    fn request(&mut self, request: Request, reply: Reply) {
        let Request::RestartNode(i) = request;
        match self.supervisor.restart(i) {
            Ok(effects) => {
                self.pending.push((i, reply));
                self.apply(effects);
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
    }

    fn apply(&mut self, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::Say(line) => println!("{line}"),
                Effect::Terminate(i) => {
                    if let Some(child) = &self.children[usize::from(i)] {
                        cluster_nodes::signal(child, libc::SIGTERM);
                    }
                }
                Effect::Start(i) => self.restart(i),
            }
        }
    }

    /// Starts node `i` again and answers whoever asked for it.
    fn restart(&mut self, i: u16) {
        let outcome = self.start(i).map_err(|e| format!("{e:#}"));
        let answer = match &outcome {
            Ok(pid) => self
                .layout
                .client_address(i)
                .map_err(|e| e.to_string())
                .map(|address| Started {
                    node: i,
                    pid: *pid,
                    address,
                    nodes: self.layout.nodes,
                }),
            Err(e) => Err(e.clone()),
        };
        let (answered, waiting) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(n, _)| *n == i);
        self.pending = waiting;
        for (_, reply) in answered {
            let _ = reply.send(answer.clone());
        }
        let effects = self.supervisor.started(i, outcome);
        self.apply(effects);
    }

    /// Stops every running node: the active controller last, so that the quorum stays whole
    /// while the others hand their leaderships over.
    async fn stop(mut self) -> Result<()> {
        let running: Vec<(u16, Child)> = (0u16..)
            .zip(self.children.iter_mut())
            .filter_map(|(i, slot)| slot.take().map(|c| (i, c)))
            .collect();
        println!("stopping {} nodes", running.len());
        let started = tokio::time::Instant::now();
        let mut controller = None;
        if let Some((i, _)) = running.first() {
            let addr = self.layout.client_address(*i)?;
            controller = cluster_nodes::active_controller(&addr, Duration::from_millis(300))
                .await
                .and_then(|id| u16::try_from(id).ok());
        }
        let problems = cluster_nodes::stop_all(running, controller, started).await;
        if problems.is_empty() {
            println!("all nodes stopped");
            Ok(())
        } else {
            bail!("{}", problems.join("; "))
        }
    }

    fn bootstrap(&self) -> Result<Vec<String>> {
        (0..self.layout.nodes)
            .map(|i| self.layout.client_address(i))
            .collect()
    }
}

async fn up(layout: Layout) -> Result<()> {
    let control = cluster_control::bind(&layout.data_dir)?;
    let mut cluster = Cluster::new(layout)?;
    let mut signalled = Box::pin(wait_for_signal());
    for i in 0..cluster.layout.nodes {
        if let Err(e) = cluster.start(i) {
            stop_after_failure(cluster).await;
            return Err(e);
        }
    }
    let bootstrap = cluster.bootstrap()?;
    tokio::select! {
        () = all_listed(&bootstrap, cluster.layout.nodes) => print_banner(&cluster, &bootstrap)?,
        () = &mut signalled => return cluster.stop().await,
        (i, status) = first_exit(&mut cluster) => {
            eprintln!("node {i} exited during start-up ({status}); stopping the others");
            stop_after_failure(cluster).await;
            bail!("node {i} exited during start-up ({status})");
        }
    }
    let (requests, mut incoming) = mpsc::channel(8);
    let server = tokio::spawn(cluster_control::serve(control, requests));
    let mut reap = tokio::time::interval(REAP_INTERVAL);
    loop {
        tokio::select! {
            () = &mut signalled => break,
            _ = reap.tick() => {
                for (i, status) in cluster.reap() {
                    let effects = cluster.supervisor.exited(i, &status);
                    cluster.apply(effects);
                }
            }
            Some((request, reply)) = incoming.recv() => cluster.request(request, reply),
        }
    }
    // No restarts while stopping; the socket file goes with the server task.
    server.abort();
    let _ = server.await;
    cluster.stop().await
}

/// Stops what started before a start-up failure, which is the error the command reports.
async fn stop_after_failure(cluster: Cluster) {
    if let Err(e) = cluster.stop().await {
        eprintln!("gregor: {e:#}");
    }
}

/// Ready when every node lists every node as a live broker (each accepts clients once it is
/// registered and unfenced; the others' unfencing may reach its metadata a moment later).
async fn all_listed(bootstrap: &[String], nodes: u16) {
    for addr in bootstrap {
        while cluster_nodes::lists_brokers(addr).await != Some(usize::from(nodes)) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The first node to exit during start-up.
async fn first_exit(cluster: &mut Cluster) -> (u16, String) {
    loop {
        if let Some(exited) = cluster.reap().into_iter().next() {
            return exited;
        }
        tokio::time::sleep(REAP_INTERVAL).await;
    }
}

fn print_banner(cluster: &Cluster, bootstrap: &[String]) -> Result<()> {
    let layout = &cluster.layout;
    println!(
        "cluster of {} nodes is up; bootstrap servers: {}",
        layout.nodes,
        bootstrap.join(",")
    );
    for i in 0..layout.nodes {
        let pid = cluster.children[usize::from(i)]
            .as_ref()
            .and_then(Child::id)
            .map_or_else(|| "-".to_string(), |p| p.to_string());
        match layout.metrics_url(i)? {
            Some(m) => println!(
                "node {i}: pid {pid}, metrics {m}/metrics (also /healthz, /readyz), console {m}/ui/"
            ),
            None => println!("node {i}: pid {pid}"),
        }
    }
    println!(
        "restart a node: gregor cluster restart-node N --data-dir {}",
        layout.data_dir.display()
    );
    Ok(())
}

/// `gregor cluster restart-node N`: asks the running `cluster up`, then waits until the node
/// lists every node as a live broker, itself included (registered and unfenced).
async fn restart_node(args: RestartArgs) -> Result<()> {
    let timeout = Duration::from_secs(args.timeout);
    let deadline = tokio::time::Instant::now() + timeout;
    let started = cluster_control::request_restart(&args.data_dir, args.node, timeout).await?;
    println!(
        "node {} started (pid {}); waiting for it to rejoin",
        started.node, started.pid
    );
    let rejoined = tokio::time::timeout_at(
        deadline,
        all_listed(std::slice::from_ref(&started.address), started.nodes),
    )
    .await;
    if rejoined.is_err() {
        bail!(
            "node {} did not rejoin within {} s (its log lines are in `cluster up`'s output)",
            started.node,
            args.timeout
        );
    }
    println!(
        "node {} rejoined: it serves clients on {} and lists all {} brokers",
        started.node, started.address, started.nodes
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout_of(nodes: u16, base_port: u16, overrides: &[&str]) -> Result<Layout> {
        layout(UpArgs {
            nodes,
            base_port,
            data_dir: PathBuf::from("d"),
            racks: None,
            overrides: overrides.iter().map(|o| o.to_string()).collect(),
        })
    }

    #[test]
    fn every_port_derives_from_the_base_port() {
        let l = layout_of(3, 9092, &[]).expect("layout");
        let p: Vec<_> = (0..3).map(|i| l.ports(i).expect("ports")).collect();
        assert_eq!(
            p.iter()
                .map(|p| (p.client, p.controller, p.metrics))
                .collect::<Vec<_>>(),
            vec![(9092, 9093, 9098), (9094, 9095, 9099), (9096, 9097, 9100)]
        );
        assert_eq!(
            l.metrics_url(2).expect("url").as_deref(),
            Some("http://127.0.0.1:9100")
        );
        assert_eq!(
            l.voters().expect("voters"),
            "0@127.0.0.1:9093,1@127.0.0.1:9095,2@127.0.0.1:9097"
        );
    }

    #[test]
    fn a_metrics_listener_override_wins_and_ports_must_fit() {
        let l = layout_of(2, 9092, &["metrics.listener=http://127.0.0.1:1"]).expect("layout");
        assert_eq!(l.metrics_url(0).expect("url"), None);
        // 65530 + 2*2 + 1 = 65535 fits; one more port does not.
        assert!(layout_of(2, 65530, &[]).is_ok());
        let err = layout_of(2, 65531, &[]).expect_err("no room");
        assert!(err.to_string().contains("three ports each"), "{err}");
        assert!(layout_of(0, 9092, &[]).is_err());
    }
}
