//! Reading another node's console: where it listens, and one bounded GET of its JSON, over
//! https when that node's `metrics.listener` is https, made for a viewer whose principal it
//! names in the headers of `metrics::auth` (the node authenticates with its certificate).

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use gregor_client::tls::ClientTls;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;

use crate::metrics::auth::{FORWARDED_HOST, FORWARDED_PRINCIPAL};
use crate::security::KafkaPrincipal;

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
    #[error("this node cannot open https to other nodes' consoles: {0}")]
    TlsSettings(String),
    #[error("TLS handshake with {addr}: {source}")]
    Handshake {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("answer of {addr} is not JSON: {source}")]
    Json {
        addr: SocketAddr,
        source: serde_json::Error,
    },
}

/// Where a node's console listens, and whether it serves https.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerConsole {
    pub addr: SocketAddr,
    pub https: bool,
}

impl fmt::Display for PeerConsole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.https { "https" } else { "http" };
        write!(f, "{scheme}://{}", self.addr)
    }
}

/// The viewer a request to another node's console is made for.
#[derive(Debug, Clone, Copy)]
pub struct OnBehalf<'a> {
    pub principal: &'a KafkaPrincipal,
    pub host: Option<IpAddr>,
}

/// A `metrics.listener` value as a console: `https://HOST:PORT`, or one [`parse_listener`]
/// reads; `None` when empty.
pub(crate) fn parse_console(value: &str) -> Result<Option<PeerConsole>, String> {
    let value = value.trim();
    let (rest, https) = match value.strip_prefix("https://") {
        Some(rest) if rest.trim_end_matches('/').is_empty() => {
            return Err(format!(
                "metrics.listener {value:?}: no address after https://"
            ))
        }
        Some(rest) if rest.contains("://") => {
            return Err(format!("metrics.listener {value:?}: two schemes"))
        }
        Some(rest) => (rest, true),
        None => (value, false),
    };
    Ok(parse_listener(rest)?.map(|addr| PeerConsole { addr, https }))
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
                "metrics.listener {value:?}: only http:// and https:// are served (not {scheme}://)"
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
) -> Result<PeerConsole, PeerError> {
    let bad = |reason: String| PeerError::BadListener {
        node,
        value: value.to_string(),
        reason,
    };
    let console = parse_console(value)
        .map_err(bad)?
        .ok_or(PeerError::NoConsole(node))?;
    let at = |addr| PeerConsole {
        addr,
        https: console.https,
    };
    let addr = console.addr;
    if !addr.ip().is_unspecified() {
        return Ok(console);
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
        return Ok(at(SocketAddr::new(ip, addr.port())));
    }
    let mut found =
        tokio::time::timeout(PEER_TIMEOUT, tokio::net::lookup_host((host, addr.port())))
            .await
            .map_err(|_| PeerError::Timeout)?
            .map_err(|e| PeerError::Resolve {
                host: host.to_string(),
                reason: e.to_string(),
            })?;
    found.next().map(at).ok_or_else(|| PeerError::Resolve {
        host: host.to_string(),
        reason: "no address".into(),
    })
}

/// A JSON body to POST, with one header the receiver asks of it (a console action's marker).
#[derive(Debug, Clone)]
pub struct Post<'a> {
    pub body: Bytes,
    pub header: (&'static str, &'a str),
}

/// GETs `path_and_query` from `console` (addressed by IP, as the console's Host check requires;
/// over `tls` when it is https), or with `post` POSTs it (a console action relayed), for
/// `on_behalf`: the status and the JSON answer, read up to [`MAX_PEER_BODY`] within
/// [`PEER_TIMEOUT`]. A refusal in plain text comes back as `{"error": <text>}`.
pub async fn call_json(
    console: PeerConsole,
    tls: Option<&ClientTls>,
    path_and_query: &str,
    post: Option<Post<'_>>,
    on_behalf: Option<OnBehalf<'_>>,
) -> Result<(StatusCode, serde_json::Value), PeerError> {
    let addr = console.addr;
    let request = request(addr, path_and_query, post, on_behalf).map_err(|e| PeerError::Http {
        addr,
        reason: e.to_string(),
    })?;
    let exchange = async {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|source| PeerError::Connect { addr, source })?;
        if !console.https {
            return exchange(addr, tcp, request).await;
        }
        let tls = tls.ok_or_else(|| PeerError::TlsSettings("no TLS client".into()))?;
        let stream = tls
            .connect_over(&addr.to_string(), tcp)
            .await
            .map_err(|source| PeerError::Handshake { addr, source })?;
        exchange(addr, stream, request).await
    };
    tokio::time::timeout(PEER_TIMEOUT, exchange)
        .await
        .map_err(|_| PeerError::Timeout)?
}

/// The GET (or the POST of `post`'s JSON with its marker header), naming the viewer (never
/// with its password).
fn request(
    addr: SocketAddr,
    path_and_query: &str,
    post: Option<Post<'_>>,
    on_behalf: Option<OnBehalf<'_>>,
) -> Result<Request<Full<Bytes>>, hyper::http::Error> {
    let mut builder = match &post {
        None => Request::get(path_and_query),
        Some(p) => Request::post(path_and_query)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(p.header.0, p.header.1),
    }
    .header(hyper::header::HOST, addr.to_string())
    .header(hyper::header::ACCEPT, "application/json");
    if let Some(viewer) = on_behalf {
        builder = builder.header(FORWARDED_PRINCIPAL, viewer.principal.to_string());
        if let Some(host) = viewer.host {
            builder = builder.header(FORWARDED_HOST, host.to_string());
        }
    }
    builder.body(Full::new(post.map(|p| p.body).unwrap_or_default()))
}

/// One HTTP/1 exchange over `io`.
async fn exchange<IO>(
    addr: SocketAddr,
    io: IO,
    request: Request<Full<Bytes>>,
) -> Result<(StatusCode, serde_json::Value), PeerError>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let http = |e: &dyn std::fmt::Display| PeerError::Http {
        addr,
        reason: e.to_string(),
    };
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| http(&e))?;
    let answer = async {
        let response = sender.send_request(request).await.map_err(|e| http(&e))?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_PEER_BODY)
            .collect()
            .await
            .map_err(|e| http(&*e))?
            .to_bytes();
        match serde_json::from_slice(&body) {
            Ok(value) => Ok((status, value)),
            // A 401 or 403 of the listener itself is plain text.
            Err(_) if !status.is_success() => {
                let text = String::from_utf8_lossy(&body).trim().to_string();
                Ok((status, serde_json::json!({ "error": text })))
            }
            Err(source) => Err(PeerError::Json { addr, source }),
        }
    };
    // The connection is driven here and dropped with the exchange.
    tokio::select! {
        r = answer => r,
        r = connection => Err(match r {
            Ok(()) => http(&"the connection closed before the answer"),
            Err(e) => http(&e),
        }),
    }
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

/// A peer console's answer as node `via` relays it to its viewer: the JSON marked with
/// `via_node`, or the peer's refusal named after `who`. A peer refusing this node's own login,
/// or failing, is a bad gateway, not the viewer's doing.
pub fn relayed(
    status: StatusCode,
    mut v: serde_json::Value,
    via: i32,
    who: &str,
) -> Result<serde_json::Value, (StatusCode, String)> {
    if status.is_success() {
        v["via_node"] = serde_json::json!(via);
        return Ok(v);
    }
    let message = v
        .get("error")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("no reason given");
    let status = if status.is_client_error() && status != StatusCode::UNAUTHORIZED {
        status
    } else {
        StatusCode::BAD_GATEWAY
    };
    Err((status, format!("{who}: {message}")))
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
    fn console_schemes() {
        let at = |addr: &str, https| {
            Ok(Some(PeerConsole {
                addr: addr.parse().expect("addr"),
                https,
            }))
        };
        assert_eq!(
            parse_console(" https://127.0.0.1:9644/"),
            at("127.0.0.1:9644", true)
        );
        assert_eq!(parse_console("https://[::1]:1"), at("[::1]:1", true));
        assert_eq!(
            parse_console("http://10.0.0.1:80"),
            at("10.0.0.1:80", false)
        );
        assert_eq!(parse_console("localhost:9"), at("127.0.0.1:9", false));
        assert_eq!(parse_console(""), Ok(None));
        assert!(parse_console("https://").is_err());
        assert!(parse_console("https://somewhere:1").is_err());
        assert!(parse_console("ftp://1.2.3.4:1").is_err());
        assert!(parse_console("https://http://1.2.3.4:1").is_err());
        assert_eq!(
            at("127.0.0.1:1", true).map(|c| c.map(|c| c.to_string())),
            Ok(Some("https://127.0.0.1:1".to_string()))
        );
    }

    #[test]
    fn requests_name_the_viewer_but_carry_no_credentials() {
        let addr: SocketAddr = "127.0.0.1:1".parse().expect("addr");
        let alice = KafkaPrincipal::user("alice");
        let on_behalf = OnBehalf {
            principal: &alice,
            host: Some("10.0.0.9".parse().expect("ip")),
        };
        let r =
            request(addr, "/ui/api/groups?scope=local", None, Some(on_behalf)).expect("request");
        assert_eq!(r.headers()[FORWARDED_PRINCIPAL], "User:alice");
        assert_eq!(r.headers()[FORWARDED_HOST], "10.0.0.9");
        assert!(r.headers().get(hyper::header::AUTHORIZATION).is_none());
        let r = request(addr, "/ui/api/groups", None, None).expect("request");
        assert!(r.headers().get(FORWARDED_PRINCIPAL).is_none());
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
        let at = |addr: &str, https| PeerConsole {
            addr: addr.parse().expect("addr"),
            https,
        };
        let a = console_address(2, "http://10.0.0.2:9644", Some("h")).await;
        assert_eq!(a.ok(), Some(at("10.0.0.2:9644", false)));
        let a = console_address(2, "http://0.0.0.0:9644", Some("10.0.0.7")).await;
        assert_eq!(a.ok(), Some(at("10.0.0.7:9644", false)));
        let a = console_address(2, "https://[::]:9644", Some("[::1]")).await;
        assert_eq!(a.ok(), Some(at("[::1]:9644", true)));
        assert!(matches!(
            console_address(2, "", Some("h")).await,
            Err(PeerError::NoConsole(2))
        ));
        assert!(matches!(
            console_address(2, "ftp://1.2.3.4:1", None).await,
            Err(PeerError::BadListener { node: 2, .. })
        ));
        assert!(matches!(
            console_address(2, "http://0.0.0.0:1", None).await,
            Err(PeerError::BadListener { .. })
        ));
    }
}
