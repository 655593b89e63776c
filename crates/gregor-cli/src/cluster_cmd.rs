//! `gregor cluster up`: a cluster of combined broker+controller nodes on loopback, as child
//! processes of this one, for trying a replicated cluster on one machine. Each node's log lines
//! are printed with a `[node N]` prefix; Ctrl-C or SIGTERM stops every node (SIGTERM, so each
//! hands its leaderships over and shuts down cleanly).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::broker_cmd::wait_for_signal;

#[derive(Debug, clap::Args)]
pub struct ClusterArgs {
    #[command(subcommand)]
    pub command: ClusterCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum ClusterCommand {
    /// Start N nodes on 127.0.0.1 and run until Ctrl-C / SIGTERM.
    Up(UpArgs),
}

#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// Number of nodes (each is broker and controller; node ids 0..N-1).
    #[arg(long, default_value_t = 3)]
    pub nodes: u16,
    /// Node i listens for clients on BASE+2i and for the controller quorum on BASE+2i+1.
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

fn ports(args: &UpArgs, node: u16) -> Result<(u16, u16)> {
    let client = u32::from(args.base_port) + 2 * u32::from(node);
    let controller = client + 1;
    match (u16::try_from(client), u16::try_from(controller)) {
        (Ok(c), Ok(q)) => Ok((c, q)),
        _ => bail!(
            "--base-port {} leaves no room for {} nodes (two ports each)",
            args.base_port,
            args.nodes
        ),
    }
}

pub fn run(args: ClusterArgs) -> Result<()> {
    let ClusterCommand::Up(args) = args.command;
    if args.nodes == 0 || args.nodes > 64 {
        bail!("--nodes must be between 1 and 64 (got {})", args.nodes);
    }
    if args.racks == Some(0) {
        bail!("--racks must be at least 1");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(up(args))
}

async fn up(args: UpArgs) -> Result<()> {
    let exe = std::env::current_exe().context("cannot find the gregor executable")?;
    let mut voters = Vec::new();
    for i in 0..args.nodes {
        let (_, q) = ports(&args, i)?;
        voters.push(format!("{i}@127.0.0.1:{q}"));
    }
    let voters = voters.join(",");
    let metrics = metrics_listeners(&args)?;
    let mut children: Vec<(u16, Child)> = Vec::new();
    for i in 0..args.nodes {
        let mut child = start_node(&args, &exe, i, &voters, metrics.get(usize::from(i)))?;
        echo_output(i, &mut child);
        children.push((i, child));
    }
    let bootstrap: Vec<String> = (0..args.nodes)
        .map(|i| ports(&args, i).map(|(c, _)| format!("127.0.0.1:{c}")))
        .collect::<Result<_>>()?;
    // Ready when every node lists every node as a live broker (each accepts clients once it is
    // registered and unfenced; the others' unfencing may reach its metadata a moment later).
    let ready = async {
        for addr in &bootstrap {
            while lists_brokers(addr).await != Some(usize::from(args.nodes)) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    tokio::select! {
        _ = ready => {
            println!("cluster of {} nodes is up; bootstrap servers: {}", args.nodes, bootstrap.join(","));
            for (i, m) in metrics.iter().enumerate() {
                println!("node {i} metrics: {m}/metrics (also /healthz, /readyz), console: {m}/ui/");
            }
        }
        _ = wait_for_signal() => return stop_all(children).await,
    }
    let mut exited = None;
    tokio::select! {
        _ = wait_for_signal() => {}
        (i, status) = first_exit(&mut children) => exited = Some((i, status)),
    }
    if let Some((i, status)) = exited {
        eprintln!("node {i} exited ({status}); stopping the others");
    }
    stop_all(children).await
}

/// A free port's URL for each node's metrics, unless the overrides set `metrics.listener`.
fn metrics_listeners(args: &UpArgs) -> Result<Vec<String>> {
    let set_by_user = args
        .overrides
        .iter()
        .any(|o| o.starts_with("metrics.listener="));
    let mut metrics = Vec::new();
    if !set_by_user {
        for _ in 0..args.nodes {
            let free = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .context("cannot find a free port for metrics.listener")?;
            metrics.push(format!("http://{free}"));
        }
    }
    Ok(metrics)
}

/// Starts node `i` as a `gregor broker` child process, its output piped.
fn start_node(
    args: &UpArgs,
    exe: &std::path::Path,
    i: u16,
    voters: &str,
    metrics: Option<&String>,
) -> Result<Child> {
    let (client, controller) = ports(args, i)?;
    let dir = args.data_dir.join(format!("node-{i}"));
    let mut cmd = Command::new(exe);
    cmd.arg("broker")
        .arg("--node-id")
        .arg(i.to_string())
        .arg("--listeners")
        .arg(format!(
            "PLAINTEXT://127.0.0.1:{client},CONTROLLER://127.0.0.1:{controller}"
        ))
        .arg("--controller-quorum-voters")
        .arg(voters)
        .arg("--data-dir")
        .arg(&dir);
    if let Some(r) = args.racks {
        cmd.arg("--rack").arg(format!("rack-{}", i % r));
    }
    for o in &args.overrides {
        cmd.arg("--override").arg(o);
    }
    if let Some(m) = metrics {
        cmd.arg("--override").arg(format!("metrics.listener={m}"));
    }
    // Each node stops when told to, not with this terminal's Ctrl-C.
    #[cfg(unix)]
    cmd.process_group(0);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd.spawn()
        .with_context(|| format!("cannot start node {i}"))
}

/// Prints node `i`'s output lines, each prefixed with the node.
fn echo_output(i: u16, child: &mut Child) {
    for stream in [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
    ]
    .into_iter()
    .flatten()
    {
        tokio::spawn(async move {
            let mut lines = BufReader::new(stream).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                println!("[node {i}] {line}");
            }
        });
    }
}

/// How many brokers the node at `addr` lists in its Metadata, if it answers.
async fn lists_brokers(addr: &str) -> Option<usize> {
    use gregor_client::connection::Connection;
    use kafka_protocol::messages::MetadataRequest;
    let timeout = Duration::from_secs(2);
    let conn = Connection::connect(
        addr,
        addr.to_string(),
        "gregor-cluster-up",
        timeout,
        timeout,
    )
    .await
    .ok()?;
    let version = conn.pick_version::<MetadataRequest>().ok()?;
    let mut request = MetadataRequest::default();
    request.topics = Some(Vec::new());
    let response = conn.send(&request, version).await.ok()?;
    Some(response.brokers.len())
}

async fn first_exit(children: &mut [(u16, Child)]) -> (u16, String) {
    loop {
        for (i, child) in children.iter_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                return (*i, status.to_string());
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn stop_all(children: Vec<(u16, Child)>) -> Result<()> {
    println!("stopping {} nodes", children.len());
    for (_, child) in &children {
        if let Some(pid) = child.id() {
            // SIGTERM: a clean, controlled shutdown of each node.
            let _ = std::process::Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .status();
        }
    }
    let mut failed = Vec::new();
    for (i, mut child) in children {
        match tokio::time::timeout(Duration::from_secs(30), child.wait()).await {
            Ok(Ok(status)) if status.success() => {}
            Ok(Ok(status)) => failed.push(format!("node {i}: {status}")),
            Ok(Err(e)) => failed.push(format!("node {i}: {e}")),
            Err(_) => {
                let _ = child.kill().await;
                failed.push(format!("node {i}: did not stop within 30 s; killed"));
            }
        }
    }
    if failed.is_empty() {
        println!("all nodes stopped");
        Ok(())
    } else {
        bail!("{}", failed.join("; "))
    }
}
