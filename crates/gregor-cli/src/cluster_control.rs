//! The control socket of a running `gregor cluster up`: a Unix socket `control.sock` in the
//! cluster's data directory, one request line and one reply line per connection. `gregor
//! cluster restart-node N` sends `restart-node N`; `cluster up` answers `ok node=N pid=P
//! address=HOST:PORT nodes=COUNT` once the node's process has started, or `error MESSAGE`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};

/// How long a connection may take to send its request line.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

pub fn socket_path(data_dir: &Path) -> PathBuf {
    data_dir.join("control.sock")
}

/// A request to a running `cluster up`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    RestartNode(u16),
}

/// `cluster up`'s answer to a restart: the node's process started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    pub node: u16,
    pub pid: u32,
    /// The node's client listener.
    pub address: String,
    /// How many nodes the cluster has.
    pub nodes: u16,
}

pub fn parse_request(line: &str) -> Result<Request, String> {
    let mut words = line.split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some("restart-node"), Some(n), None) => n
            .parse()
            .map(Request::RestartNode)
            .map_err(|_| format!("not a node id: {n:?}")),
        _ => Err(format!("unknown request: {:?}", line.trim())),
    }
}

pub fn format_request(request: Request) -> String {
    match request {
        Request::RestartNode(n) => format!("restart-node {n}\n"),
    }
}

pub fn format_reply(reply: &Result<Started, String>) -> String {
    match reply {
        Ok(s) => format!(
            "ok node={} pid={} address={} nodes={}\n",
            s.node, s.pid, s.address, s.nodes
        ),
        // One line, whatever the message holds.
        Err(e) => format!("error {}\n", e.replace('\n', " ")),
    }
}

pub fn parse_reply(line: &str) -> Result<Result<Started, String>, String> {
    let line = line.trim();
    if let Some(message) = line.strip_prefix("error ") {
        return Ok(Err(message.to_string()));
    }
    let Some(fields) = line.strip_prefix("ok ") else {
        return Err(format!("unexpected reply: {line:?}"));
    };
    let field = |key: &str| {
        fields
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            .ok_or_else(|| format!("reply without {key}: {line:?}"))
    };
    let number = |key: &str| -> Result<u32, String> {
        field(key)?
            .parse()
            .map_err(|_| format!("reply with a bad {key}: {line:?}"))
    };
    let small = |key: &str| -> Result<u16, String> {
        u16::try_from(number(key)?).map_err(|_| format!("reply with a bad {key}: {line:?}"))
    };
    Ok(Ok(Started {
        node: small("node")?,
        pid: number("pid")?,
        address: field("address")?.to_string(),
        nodes: small("nodes")?,
    }))
}

/// The bound control socket; the socket file is removed when this is dropped.
pub struct ControlSocket {
    listener: UnixListener,
    path: PathBuf,
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Binds `DIR/control.sock`. A socket file left by a `cluster up` that was killed is replaced;
/// one that still answers belongs to a running `cluster up` on the same directory.
pub fn bind(data_dir: &Path) -> Result<ControlSocket> {
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create {}", data_dir.display()))?;
    let path = socket_path(data_dir);
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(&path).is_ok() {
            bail!(
                "another `gregor cluster up` is running on {} ({} answers)",
                data_dir.display(),
                path.display()
            );
        }
        std::fs::remove_file(&path)
            .with_context(|| format!("cannot remove the stale {}", path.display()))?;
    }
    let listener = UnixListener::bind(&path)
        .with_context(|| format!("cannot listen on {}", path.display()))?;
    Ok(ControlSocket { listener, path })
}

pub type Reply = oneshot::Sender<Result<Started, String>>;

/// Accepts control connections and hands each request, with a way to answer it, to `requests`.
pub async fn serve(socket: ControlSocket, requests: mpsc::Sender<(Request, Reply)>) {
    loop {
        let Ok((stream, _)) = socket.listener.accept().await else {
            // Out of file descriptors, typically: back off instead of spinning.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let requests = requests.clone();
        tokio::spawn(async move {
            if let Err(e) = answer(stream, requests).await {
                tracing::debug!(error = %e, "control connection failed");
            }
        });
    }
}

async fn answer(stream: UnixStream, requests: mpsc::Sender<(Request, Reply)>) -> Result<()> {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    tokio::time::timeout(REQUEST_TIMEOUT, BufReader::new(read).read_line(&mut line))
        .await
        .context("no request line in time")??;
    let reply = match parse_request(&line) {
        Err(e) => Err(e),
        Ok(request) => {
            let (tx, rx) = oneshot::channel();
            requests.send((request, tx)).await?;
            rx.await
                .unwrap_or_else(|_| Err("the cluster is stopping".to_string()))
        }
    };
    write.write_all(format_reply(&reply).as_bytes()).await?;
    Ok(())
}

/// Asks the `cluster up` running on `data_dir` to restart node `node`; returns once the node's
/// process has started.
pub async fn request_restart(data_dir: &Path, node: u16, timeout: Duration) -> Result<Started> {
    let path = socket_path(data_dir);
    let stream = UnixStream::connect(&path).await.with_context(|| {
        format!(
            "cannot reach `gregor cluster up` through {} (is it running with --data-dir {}?)",
            path.display(),
            data_dir.display()
        )
    })?;
    let (read, mut write) = stream.into_split();
    write
        .write_all(format_request(Request::RestartNode(node)).as_bytes())
        .await?;
    let mut line = String::new();
    tokio::time::timeout(timeout, BufReader::new(read).read_line(&mut line))
        .await
        .map_err(|_| anyhow!("no answer from `gregor cluster up` within {timeout:?}"))??;
    parse_reply(&line)
        .map_err(anyhow::Error::msg)?
        .map_err(|e| anyhow!("cluster up refused: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_bad_ones_are_named() {
        let line = format_request(Request::RestartNode(2));
        assert_eq!(parse_request(&line), Ok(Request::RestartNode(2)));
        assert_eq!(
            parse_request("restart-node x"),
            Err("not a node id: \"x\"".to_string())
        );
        assert!(parse_request("restart-node 1 2").is_err());
        assert!(parse_request("stop").is_err());
        assert!(parse_request("").is_err());
    }

    #[test]
    fn replies_round_trip() {
        let started = Started {
            node: 1,
            pid: 4242,
            address: "127.0.0.1:9094".to_string(),
            nodes: 3,
        };
        let ok = Ok(started.clone());
        assert_eq!(parse_reply(&format_reply(&ok)), Ok(Ok(started)));
        let refused = Err("node 1 is already\nrestarting".to_string());
        assert_eq!(
            parse_reply(&format_reply(&refused)),
            Ok(Err("node 1 is already restarting".to_string()))
        );
        assert!(parse_reply("ok node=1 pid=2").is_err());
        assert!(parse_reply("ok node=1 pid=x address=a nodes=3").is_err());
        assert!(parse_reply("").is_err());
    }

    #[tokio::test]
    async fn a_live_socket_is_not_taken_over_and_a_stale_one_is() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = socket_path(dir.path());
        let first = bind(dir.path()).expect("first bind");
        let err = bind(dir.path())
            .err()
            .expect("a second cluster up is refused");
        assert!(
            err.to_string().contains("another `gregor cluster up`"),
            "{err}"
        );
        drop(first);
        assert!(!path.exists(), "the socket file goes with the listener");
        // A killed cluster up leaves its socket file behind, and nothing answers on it.
        drop(std::os::unix::net::UnixListener::bind(&path).expect("stale socket"));
        assert!(path.exists());
        let second = bind(dir.path()).expect("stale socket replaced");
        drop(second);
        assert!(!path.exists());
    }
}
