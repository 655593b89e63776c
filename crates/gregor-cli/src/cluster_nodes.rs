//! The node processes of `gregor cluster up`: their ports, starting one, echoing its output,
//! asking a node what it sees, and stopping them all within a bound.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// How long the nodes other than the active controller get to stop cleanly before the active
/// controller is told to stop too (the quorum stays whole while they hand their leaderships
/// over), and how long all of them get before the stragglers are killed. The whole stop stays
/// under two seconds.
const FIRST_STOP: Duration = Duration::from_millis(1000);
const WHOLE_STOP: Duration = Duration::from_millis(1700);

/// What every node of one `cluster up` shares.
#[derive(Debug, Clone)]
pub struct Layout {
    pub nodes: u16,
    pub base_port: u16,
    pub data_dir: PathBuf,
    pub racks: Option<u16>,
    pub overrides: Vec<String>,
    /// Whether `cluster up` gives each node a metrics listener (unless the overrides set one).
    pub metrics: bool,
}

/// Node `i`'s ports: clients, controller quorum, metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    pub client: u16,
    pub controller: u16,
    pub metrics: u16,
}

impl Layout {
    /// Node i: clients on BASE+2i, quorum on BASE+2i+1, metrics on BASE+2N+i, so a cluster
    /// takes the 3N ports from BASE on and a restarted node gets its ports back.
    pub fn ports(&self, i: u16) -> Result<Ports> {
        let base = u32::from(self.base_port);
        let client = base + 2 * u32::from(i);
        let metrics = base + 2 * u32::from(self.nodes) + u32::from(i);
        match (
            u16::try_from(client),
            u16::try_from(client + 1),
            u16::try_from(metrics),
        ) {
            (Ok(client), Ok(controller), Ok(metrics)) => Ok(Ports {
                client,
                controller,
                metrics,
            }),
            _ => bail!(
                "--base-port {} leaves no room for {} nodes (three ports each)",
                self.base_port,
                self.nodes
            ),
        }
    }

    pub fn client_address(&self, i: u16) -> Result<String> {
        Ok(format!("127.0.0.1:{}", self.ports(i)?.client))
    }

    /// controller.quorum.voters for every node.
    pub fn voters(&self) -> Result<String> {
        let voters: Vec<String> = (0..self.nodes)
            .map(|i| {
                self.ports(i)
                    .map(|p| format!("{i}@127.0.0.1:{}", p.controller))
            })
            .collect::<Result<_>>()?;
        Ok(voters.join(","))
    }

    /// Node i's metrics URL, when `cluster up` sets its metrics listener.
    pub fn metrics_url(&self, i: u16) -> Result<Option<String>> {
        if !self.metrics {
            return Ok(None);
        }
        Ok(Some(format!("http://127.0.0.1:{}", self.ports(i)?.metrics)))
    }
}

/// Starts node `i` as a `gregor broker` child process, its output echoed with a `[node i]`
/// prefix.
pub fn start_node(layout: &Layout, exe: &Path, i: u16, voters: &str) -> Result<Child> {
    let ports = layout.ports(i)?;
    let dir = layout.data_dir.join(format!("node-{i}"));
    let mut cmd = Command::new(exe);
    cmd.arg("broker")
        .arg("--node-id")
        .arg(i.to_string())
        .arg("--listeners")
        .arg(format!(
            "PLAINTEXT://127.0.0.1:{},CONTROLLER://127.0.0.1:{}",
            ports.client, ports.controller
        ))
        .arg("--controller-quorum-voters")
        .arg(voters)
        .arg("--data-dir")
        .arg(&dir);
    if let Some(r) = layout.racks {
        cmd.arg("--rack").arg(format!("rack-{}", i % r));
    }
    for o in &layout.overrides {
        cmd.arg("--override").arg(o);
    }
    if let Some(m) = layout.metrics_url(i)? {
        cmd.arg("--override").arg(format!("metrics.listener={m}"));
    }
    // Each node stops when told to, not with this terminal's Ctrl-C.
    #[cfg(unix)]
    cmd.process_group(0);
    #[cfg(target_os = "linux")]
    stop_with_parent(&mut cmd);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start node {i}"))?;
    echo_output(i, &mut child);
    Ok(child)
}

/// If `cluster up` dies without stopping its nodes (SIGKILL), each node gets SIGTERM and stops
/// cleanly instead of living on with its ports. The kernel sends it when the thread that started
/// the node ends: always the main thread here, which drives `cluster up` (`block_on`).
#[cfg(target_os = "linux")]
fn stop_with_parent(cmd: &mut Command) {
    let parent = std::process::id();
    // SAFETY: the closure runs in the child between fork and exec and only makes
    // async-signal-safe system calls (prctl, getppid, raise), touching no shared state.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent died before the prctl: no signal will come.
            if u32::try_from(libc::getppid()).ok() != Some(parent) {
                libc::raise(libc::SIGTERM);
            }
            Ok(())
        });
    }
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

async fn connect(addr: &str, timeout: Duration) -> Option<gregor_client::connection::Connection> {
    gregor_client::connection::Connection::connect(
        addr,
        addr.to_string(),
        "gregor-cluster-up",
        timeout,
        timeout,
    )
    .await
    .ok()
}

/// How many live brokers the node at `addr` lists in its Metadata, if it answers. A node
/// lists itself once it is registered and unfenced.
pub async fn lists_brokers(addr: &str) -> Option<usize> {
    use kafka_protocol::messages::MetadataRequest;
    let conn = connect(addr, Duration::from_secs(2)).await?;
    let version = conn.pick_version::<MetadataRequest>().ok()?;
    let mut request = MetadataRequest::default();
    request.topics = Some(Vec::new());
    let response = conn.send(&request, version).await.ok()?;
    Some(response.brokers.len())
}

/// The active controller as the node at `addr` names it (DescribeCluster), if it answers
/// within `timeout`.
pub async fn active_controller(addr: &str, timeout: Duration) -> Option<i32> {
    use kafka_protocol::messages::DescribeClusterRequest;
    let ask = async {
        let conn = connect(addr, timeout).await?;
        let version = conn.pick_version::<DescribeClusterRequest>().ok()?;
        let request = gregor_client::admin::cluster::describe_cluster_request(version, false);
        let response = conn.send(&request, version).await.ok()?;
        Some(response.controller_id.0)
    };
    tokio::time::timeout(timeout, ask).await.ok().flatten()
}

/// Sends `signal` to a running child; a child already gone is not an error.
pub fn signal(child: &Child, signal: libc::c_int) {
    if let Some(pid) = child.id().and_then(|p| libc::pid_t::try_from(p).ok()) {
        // SAFETY: kill(2) takes plain integers and touches no memory of this process.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

/// Stops the running nodes within [`WHOLE_STOP`] of `started` (when the stop was asked for):
/// SIGTERM to every node but the active controller, then to the active controller once they
/// have gone (or [`FIRST_STOP`] has passed), SIGKILL to whatever is left at the end. Returns one
/// line per node that did not stop cleanly.
pub async fn stop_all(
    mut nodes: Vec<(u16, Child)>,
    controller: Option<u16>,
    started: Instant,
) -> Vec<String> {
    let last = |i: u16| Some(i) == controller;
    let mut statuses: Vec<Option<ExitStatus>> = vec![None; nodes.len()];
    for (i, child) in &nodes {
        if !last(*i) {
            signal(child, libc::SIGTERM);
        }
    }
    wait_for(
        &mut nodes,
        &mut statuses,
        |i| !last(i),
        started + FIRST_STOP,
    )
    .await;
    for (i, child) in &nodes {
        if last(*i) {
            signal(child, libc::SIGTERM);
        }
    }
    wait_for(&mut nodes, &mut statuses, |_| true, started + WHOLE_STOP).await;
    let mut problems = Vec::new();
    for ((i, child), status) in nodes.iter_mut().zip(statuses) {
        match status {
            Some(status) if status.success() => {}
            Some(status) => problems.push(format!("node {i}: {status}")),
            None => {
                let _ = child.kill().await;
                problems.push(format!(
                    "node {i} did not stop within {} ms; killed",
                    WHOLE_STOP.as_millis()
                ));
            }
        }
    }
    problems
}

/// Waits until `deadline` for the nodes `which` picks that have not exited yet, recording
/// their exit statuses.
async fn wait_for(
    nodes: &mut [(u16, Child)],
    statuses: &mut [Option<ExitStatus>],
    which: impl Fn(u16) -> bool,
    deadline: Instant,
) {
    for ((i, child), status) in nodes.iter_mut().zip(statuses.iter_mut()) {
        if status.is_none() && which(*i) {
            *status = tokio::time::timeout_at(deadline, child.wait())
                .await
                .ok()
                .and_then(Result::ok);
        }
    }
}
