//! Reading another node's console: where it listens, and one bounded GET of its JSON.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;

/// The longest one exchange with a peer's console (connect, request, whole answer) may take.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(3);
/// The largest answer read from a peer's console.
pub const MAX_PEER_BODY: usize = 8 << 20;

/// Why another node's console could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("node {0} is not registered")]
    NotRegistered(i32),
    #[error("node {0} serves no console (metrics.listener is not set there)")]
    NoConsole(i32),
    #[error("node {node}: metrics.listener {value:?}: {reason}")]
    BadListener {
        node: i32,
        value: String,
        reason: String,
    },
    #[error("cannot resolve {host}: {reason}")]
    Resolve { host: String, reason: String },
    #[error("asking the cluster: {0}")]
    Lookup(gregor_client::Error),
    #[error("connecting to {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("HTTP exchange with {addr}: {reason}")]
    Http { addr: SocketAddr, reason: String },
    #[error("no answer within {} ms", PEER_TIMEOUT.as_millis())]
    Timeout,
    #[error("answer of {addr} is not JSON: {source}")]
    Json {
        addr: SocketAddr,
        source: serde_json::Error,
    },
}

/// A `metrics.listener` value as a socket address: `http://HOST:PORT` (or `HOST:PORT`, with
/// `localhost` for 127.0.0.1); `None` when empty.
pub(crate) fn parse_listener(value: &str) -> Result<Option<SocketAddr>, String> {
    let value = value.trim();
    if value.is_empty() {
        return Ok(None);
    }
    let rest = match value.split_once("://") {
        Some(("http", rest)) => rest,
        Some((scheme, _)) => {
            return Err(format!(
                "metrics.listener {value:?}: only http:// is served (not {scheme}://)"
            ))
        }
        None => value,
    };
    let rest = rest.trim_end_matches('/');
    let rest = match rest.strip_prefix("localhost:") {
        Some(port) => format!("127.0.0.1:{port}"),
        None => rest.to_string(),
    };
    rest.parse::<SocketAddr>()
        .map(Some)
        .map_err(|e| format!("metrics.listener {value:?}: expected http://IP:PORT ({e})"))
}

/// The address to reach a node's console at, from its `metrics.listener` value; a listener on
/// every interface (0.0.0.0, ::) is reached at the host of the node's client listener.
pub async fn console_address(
    node: i32,
    value: &str,
    client_host: Option<&str>,
) -> Result<SocketAddr, PeerError> {
    let bad = |reason: String| PeerError::BadListener {
        node,
        value: value.to_string(),
        reason,
    };
    let addr = parse_listener(value)
        .map_err(bad)?
        .ok_or(PeerError::NoConsole(node))?;
    if !addr.ip().is_unspecified() {
        return Ok(addr);
    }
    let Some(host) = client_host else {
        return Err(bad(
            "listens on every interface and the node has no listener host".into(),
        ));
    };
    if let Ok(ip) = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
    {
        return Ok(SocketAddr::new(ip, addr.port()));
    }
    let mut found =
        tokio::time::timeout(PEER_TIMEOUT, tokio::net::lookup_host((host, addr.port())))
            .await
            .map_err(|_| PeerError::Timeout)?
            .map_err(|e| PeerError::Resolve {
                host: host.to_string(),
                reason: e.to_string(),
            })?;
    found.next().ok_or_else(|| PeerError::Resolve {
        host: host.to_string(),
        reason: "no address".into(),
    })
}

/// GETs `path_and_query` from the console at `addr` (addressed by IP, as the console's Host
/// check requires): the status and the JSON answer, read up to [`MAX_PEER_BODY`] within
/// [`PEER_TIMEOUT`].
pub async fn get_json(
    addr: SocketAddr,
    path_and_query: &str,
) -> Result<(StatusCode, serde_json::Value), PeerError> {
    let http = |e: &dyn std::fmt::Display| PeerError::Http {
        addr,
        reason: e.to_string(),
    };
    let exchange = async {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|source| PeerError::Connect { addr, source })?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| http(&e))?;
        let request = Request::get(path_and_query)
            .header(hyper::header::HOST, addr.to_string())
            .header(hyper::header::ACCEPT, "application/json")
            .body(Empty::<Bytes>::new())
            .map_err(|e| http(&e))?;
        let answer = async {
            let response = sender.send_request(request).await.map_err(|e| http(&e))?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_PEER_BODY)
                .collect()
                .await
                .map_err(|e| http(&*e))?
                .to_bytes();
            let value =
                serde_json::from_slice(&body).map_err(|source| PeerError::Json { addr, source })?;
            Ok((status, value))
        };
        // The connection is driven here and dropped with the exchange.
        tokio::select! {
            r = answer => r,
            r = connection => Err(match r {
                Ok(()) => http(&"the connection closed before the answer"),
                Err(e) => http(&e),
            }),
        }
    };
    tokio::time::timeout(PEER_TIMEOUT, exchange)
        .await
        .map_err(|_| PeerError::Timeout)?
}

/// Percent-encodes a query parameter value (everything but RFC 3986's unreserved characters).
pub fn encode_param(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listener_values() {
        assert_eq!(
            parse_listener("http://127.0.0.1:9644"),
            Ok(Some("127.0.0.1:9644".parse().expect("addr")))
        );
        assert_eq!(
            parse_listener("localhost:9644/"),
            Ok(Some("127.0.0.1:9644".parse().expect("addr")))
        );
        assert_eq!(parse_listener(""), Ok(None));
        assert!(parse_listener("https://127.0.0.1:9644").is_err());
        assert!(parse_listener("http://somewhere").is_err());
    }

    #[test]
    fn parameters_round_trip_through_the_console_decoder() {
        for id in ["orders", "a b+c&d=e", "✓ grüße", "%zz", ""] {
            let q = format!("id={}&scope=local", encode_param(id));
            assert_eq!(crate::console::group_id_param(Some(&q)), Ok(id.to_string()));
        }
    }

    #[tokio::test]
    async fn console_addresses() {
        let a = console_address(2, "http://10.0.0.2:9644", Some("h")).await;
        assert_eq!(a.ok(), Some("10.0.0.2:9644".parse().expect("addr")));
        let a = console_address(2, "http://0.0.0.0:9644", Some("10.0.0.7")).await;
        assert_eq!(a.ok(), Some("10.0.0.7:9644".parse().expect("addr")));
        let a = console_address(2, "http://[::]:9644", Some("[::1]")).await;
        assert_eq!(a.ok(), Some("[::1]:9644".parse().expect("addr")));
        assert!(matches!(
            console_address(2, "", Some("h")).await,
            Err(PeerError::NoConsole(2))
        ));
        assert!(matches!(
            console_address(2, "https://1.2.3.4:1", None).await,
            Err(PeerError::BadListener { node: 2, .. })
        ));
        assert!(matches!(
            console_address(2, "http://0.0.0.0:1", None).await,
            Err(PeerError::BadListener { .. })
        ));
    }
}
