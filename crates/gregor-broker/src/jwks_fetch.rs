//! OAUTHBEARER's JSON Web Key Set from an http(s) `sasl.oauthbearer.jwks.endpoint.url`
//! (KIP-768): one bounded GET (connect, TLS, request and whole answer within
//! [`JWKS_FETCH_TIMEOUT`], at most `MAX_JWKS_BYTES`), and a fetcher thread that keeps the key set
//! fresh on the schedule `gregor_sasl::JwksRefresh` decides. Logins never wait for it: they read
//! the last good key set, and a token naming an unknown key id only wakes the fetcher.
//!
//! The fetcher runs on a thread of its own with a one-thread runtime, so the first fetch can
//! finish before start-up goes on (as Kafka's does) whichever runtime, if any, parses the
//! settings. It stops when the validator that owns it is dropped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use gregor_sasl::{FetchFailureLog, JwkKeys, JwksRefresh, MAX_JWKS_BYTES};
use http_body_util::{BodyExt, Empty, Limited};
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncRead, AsyncWrite};

/// The longest one fetch (resolve, connect, TLS, request, whole answer) may take.
pub const JWKS_FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the system's CA certificates usually are, after `SSL_CERT_FILE`.
const SYSTEM_CA_FILES: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// Why a key set could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum JwksFetchError {
    #[error("cannot resolve {host}: {reason}")]
    Resolve { host: String, reason: String },
    #[error("connecting to {addr}: {reason}")]
    Connect { addr: String, reason: String },
    #[error("TLS with {host}: {reason}")]
    Tls { host: String, reason: String },
    #[error("HTTP exchange: {0}")]
    Http(String),
    #[error("the endpoint answered HTTP {0}")]
    Status(StatusCode),
    #[error("no answer within {} ms", JWKS_FETCH_TIMEOUT.as_millis())]
    Timeout,
    #[error("the answer is not a usable key set: {0}")]
    Document(String),
}

/// An http(s) JWKS endpoint and how its server is trusted.
#[derive(Clone)]
pub struct JwksEndpoint {
    url: String,
    host: String,
    port: u16,
    path: String,
    /// `Some` for https.
    tls: Option<tokio_rustls::TlsConnector>,
}

impl std::fmt::Debug for JwksEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwksEndpoint")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl JwksEndpoint {
    /// The endpoint of an `http://` or `https://` URL; an https server is verified against
    /// `trust`, else the system's CA certificates.
    pub fn new(url: &str, trust: Option<RootCertStore>) -> Result<JwksEndpoint, String> {
        let uri: Uri = url.parse().map_err(|e| format!("not a URL: {e}"))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err("the URL must be http://, https:// or file://".into()),
        };
        let host = uri
            .host()
            .filter(|h| !h.is_empty())
            .ok_or("the URL has no host")?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let path = uri
            .path_and_query()
            .map_or("/".to_string(), |p| p.as_str().to_string());
        let tls = match https {
            true => Some(connector(match trust {
                Some(roots) => roots,
                None => system_roots()?,
            })?),
            false => None,
        };
        Ok(JwksEndpoint {
            url: url.to_string(),
            host,
            port,
            path,
            tls,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// One GET of the key set, bounded in time and size; a document without a usable key is an
    /// error, so it never replaces a good key set.
    pub async fn fetch(&self) -> Result<JwkKeys, JwksFetchError> {
        let body = tokio::time::timeout(JWKS_FETCH_TIMEOUT, self.get())
            .await
            .map_err(|_| JwksFetchError::Timeout)??;
        let text =
            std::str::from_utf8(&body).map_err(|_| JwksFetchError::Document("not UTF-8".into()))?;
        let keys = JwkKeys::from_json(text).map_err(|e| JwksFetchError::Document(e.to_string()))?;
        if keys.is_empty() {
            return Err(JwksFetchError::Document(
                "no key that can verify signatures (RSA, EC P-256/P-384 or Ed25519)".into(),
            ));
        }
        Ok(keys)
    }

    async fn get(&self) -> Result<Bytes, JwksFetchError> {
        let mut addrs = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await
            .map_err(|e| JwksFetchError::Resolve {
                host: self.host.clone(),
                reason: e.to_string(),
            })?;
        let addr = addrs.next().ok_or_else(|| JwksFetchError::Resolve {
            host: self.host.clone(),
            reason: "no address".into(),
        })?;
        let stream =
            tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| JwksFetchError::Connect {
                    addr: addr.to_string(),
                    reason: e.to_string(),
                })?;
        let Some(connector) = &self.tls else {
            return self.exchange(stream).await;
        };
        let tls_error = |reason: String| JwksFetchError::Tls {
            host: self.host.clone(),
            reason,
        };
        let name = ServerName::try_from(self.host.clone()).map_err(|e| tls_error(e.to_string()))?;
        let stream = connector
            .connect(name, stream)
            .await
            .map_err(|e| tls_error(e.to_string()))?;
        self.exchange(stream).await
    }

    /// The HTTP/1.1 GET on a connected stream: a 200 answer's body, at most `MAX_JWKS_BYTES`.
    async fn exchange<S>(&self, stream: S) -> Result<Bytes, JwksFetchError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let http = |e: &dyn std::fmt::Display| JwksFetchError::Http(e.to_string());
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| http(&e))?;
        let authority = match self.host.contains(':') {
            true => format!("[{}]:{}", self.host, self.port),
            false => format!("{}:{}", self.host, self.port),
        };
        let request = Request::get(self.path.as_str())
            .header(hyper::header::HOST, authority)
            .header(hyper::header::ACCEPT, "application/json")
            .body(Empty::<Bytes>::new())
            .map_err(|e| http(&e))?;
        let answer = async {
            let response = sender.send_request(request).await.map_err(|e| http(&e))?;
            if response.status() != StatusCode::OK {
                return Err(JwksFetchError::Status(response.status()));
            }
            Limited::new(response.into_body(), MAX_JWKS_BYTES)
                .collect()
                .await
                .map(|b| b.to_bytes())
                .map_err(|e| http(&*e))
        };
        // The connection is driven here and dropped with the exchange. A server that closes
        // after its answer (HTTP/1.0 style) ends the connection before the body is read out:
        // only a connection error ends the exchange early.
        let drive = async {
            match connection.await {
                Ok(()) => std::future::pending().await,
                Err(e) => Err(http(&e)),
            }
        };
        tokio::select! {
            r = answer => r,
            r = drive => r,
        }
    }
}

fn connector(roots: RootCertStore) -> Result<tokio_rustls::TlsConnector, String> {
    let config = ClientConfig::builder_with_provider(gregor_client::tls::crypto_provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS client settings: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// The CA certificates of `pem` (a trust store's text).
pub fn roots_from_pem(pem: &[u8]) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in gregor_client::tls::certificates(pem).map_err(|e| e.to_string())? {
        roots
            .add(cert)
            .map_err(|e| format!("unusable CA certificate: {e}"))?;
    }
    Ok(roots)
}

/// The system's CA certificates: the file `SSL_CERT_FILE` names, else the first bundle found at
/// the usual places.
fn system_roots() -> Result<RootCertStore, String> {
    let named = std::env::var_os("SSL_CERT_FILE").map(std::path::PathBuf::from);
    let candidates = named
        .into_iter()
        .chain(SYSTEM_CA_FILES.iter().map(std::path::PathBuf::from));
    for path in candidates {
        if let Ok(pem) = std::fs::read(&path) {
            let mut roots = RootCertStore::empty();
            let certs = gregor_client::tls::certificates(&pem).unwrap_or_default();
            let (added, _) = roots.add_parsable_certificates(certs);
            if added > 0 {
                return Ok(roots);
            }
        }
    }
    Err("no system CA certificates found (SSL_CERT_FILE, /etc/ssl/certs/ca-certificates.crt, ...): trust the endpoint's CA with ssl.truststore.location in the OAUTHBEARER JAAS line".into())
}

/// The refresh settings of an endpoint.
#[derive(Debug, Clone, Copy)]
pub struct JwksSchedule {
    pub refresh: Duration,
    pub backoff: Duration,
    pub backoff_max: Duration,
}

/// What the fetcher thread and the logins share.
struct Shared {
    keys: Mutex<JwkKeys>,
    wake: tokio::sync::Notify,
    closed: AtomicBool,
}

/// The key set of an http(s) endpoint, kept fresh by a fetcher thread that stops when this is
/// dropped.
pub struct HttpJwks {
    shared: Arc<Shared>,
    url: String,
}

impl std::fmt::Debug for HttpJwks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpJwks")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Drop for HttpJwks {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.wake.notify_one();
    }
}

impl HttpJwks {
    /// Fetches the key set once (an error if that fails, as Kafka's start-up does), then keeps
    /// fetching it on `schedule` in the background.
    pub fn start(endpoint: JwksEndpoint, schedule: JwksSchedule) -> Result<HttpJwks, String> {
        let (first_tx, first_rx) = std::sync::mpsc::channel();
        let url = endpoint.url().to_string();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("starting the JWKS fetcher: {e}"))?;
        std::thread::Builder::new()
            .name("jwks-fetcher".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let first = endpoint.fetch().await;
                    let keys = match first {
                        Ok(keys) => keys,
                        Err(e) => {
                            let _ = first_tx.send(Err(e));
                            return;
                        }
                    };
                    let shared = Arc::new(Shared {
                        keys: Mutex::new(keys),
                        wake: tokio::sync::Notify::new(),
                        closed: AtomicBool::new(false),
                    });
                    if first_tx.send(Ok(shared.clone())).is_ok() {
                        keep_fresh(&endpoint, schedule, &shared).await;
                    }
                })
            })
            .map_err(|e| format!("starting the JWKS fetcher: {e}"))?;
        let shared = match first_rx.recv_timeout(JWKS_FETCH_TIMEOUT + Duration::from_secs(1)) {
            Ok(Ok(shared)) => shared,
            Ok(Err(e)) => return Err(format!("fetching the key set from {url}: {e}")),
            Err(_) => return Err(format!("fetching the key set from {url}: no answer")),
        };
        tracing::info!(url = %url, keys = shared_keys(&shared).len(), kids = ?shared_keys(&shared).kids(), "OAUTHBEARER JWKS fetched");
        Ok(HttpJwks { shared, url })
    }

    /// The last good key set.
    pub fn keys(&self) -> JwkKeys {
        shared_keys(&self.shared)
    }

    /// A token named a key id the set lacks: the fetcher may fetch at once (rate-limited).
    pub fn key_missing(&self) {
        self.shared.wake.notify_one();
    }
}

fn shared_keys(shared: &Shared) -> JwkKeys {
    match shared.keys.lock() {
        Ok(k) => k.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    }
}

/// The fetcher's loop: fetch when the schedule says so or a key id was missing; a failed fetch
/// keeps the keys it had.
async fn keep_fresh(endpoint: &JwksEndpoint, schedule: JwksSchedule, shared: &Shared) {
    let origin = tokio::time::Instant::now();
    let now = || origin.elapsed();
    let mut plan = JwksRefresh::new(
        schedule.refresh,
        schedule.backoff,
        schedule.backoff_max,
        now(),
    );
    plan.started(now());
    plan.fetched(now());
    loop {
        let wait = plan.due_at().saturating_sub(now());
        let woken = tokio::select! {
            _ = tokio::time::sleep(wait) => false,
            _ = shared.wake.notified() => true,
        };
        if shared.closed.load(Ordering::Acquire) {
            return;
        }
        if woken && !plan.key_missing(now()) {
            tracing::debug!(url = %endpoint.url(), "OAUTHBEARER JWKS: unknown key id, fetched too recently to fetch again");
            continue;
        }
        if now() < plan.due_at() {
            continue;
        }
        plan.started(now());
        match endpoint.fetch().await {
            Ok(keys) => {
                tracing::info!(url = %endpoint.url(), keys = keys.len(), kids = ?keys.kids(), "OAUTHBEARER JWKS fetched");
                match shared.keys.lock() {
                    Ok(mut k) => *k = keys,
                    Err(poisoned) => *poisoned.into_inner() = keys,
                }
                plan.fetched(now());
            }
            Err(error) => {
                let log = plan.failed(now());
                let retry_ms = plan.due_at().saturating_sub(now()).as_millis() as u64;
                let failures = plan.failures();
                match log {
                    FetchFailureLog::Warn => {
                        tracing::warn!(url = %endpoint.url(), %error, failures, retry_ms, "OAUTHBEARER JWKS not fetched; keeping the keys fetched before")
                    }
                    FetchFailureLog::Debug => {
                        tracing::debug!(url = %endpoint.url(), %error, failures, retry_ms, "OAUTHBEARER JWKS not fetched; keeping the keys fetched before")
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const JWKS: &str = r#"{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"ed-1","alg":"EdDSA","x":"XCB8UZ_brLFm2QoFxKpSA3tGsIG2llMuL0MF7-EkVv8"}]}"#;

    /// A loopback HTTP server answering one request with `status` and `body`, then closing.
    async fn serve_once(status: &'static str, body: Vec<u8>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        crate::runtime::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            let mut request = vec![0u8; 4096];
            let _ = s.read(&mut request).await;
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(head.as_bytes()).await;
            let _ = s.write_all(&body).await;
        });
        format!("http://{addr}/jwks")
    }

    async fn fetch(status: &'static str, body: Vec<u8>) -> Result<JwkKeys, JwksFetchError> {
        let url = serve_once(status, body).await;
        JwksEndpoint::new(&url, None)
            .expect("endpoint")
            .fetch()
            .await
    }

    #[tokio::test]
    async fn a_good_answer_is_a_key_set() {
        let keys = fetch("200 OK", JWKS.into()).await.expect("keys");
        assert_eq!(keys.kids(), vec!["ed-1"]);
    }

    #[tokio::test]
    async fn bad_answers_are_refused_so_they_never_replace_a_good_set() {
        let e = fetch("404 Not Found", JWKS.into()).await.expect_err("404");
        assert!(
            matches!(e, JwksFetchError::Status(s) if s == StatusCode::NOT_FOUND),
            "{e}"
        );
        let e = fetch("200 OK", b"not json".to_vec())
            .await
            .expect_err("junk");
        assert!(matches!(e, JwksFetchError::Document(_)), "{e}");
        let e = fetch(
            "200 OK",
            br#"{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}"#.to_vec(),
        )
        .await
        .expect_err("no usable key");
        assert!(e.to_string().contains("no key that can verify"), "{e}");
        // Past the bound: refused without reading it all.
        let e = fetch("200 OK", vec![b' '; MAX_JWKS_BYTES + 1])
            .await
            .expect_err("too large");
        assert!(
            matches!(&e, JwksFetchError::Http(r) if r.contains("length limit")),
            "{e}"
        );
    }

    #[test]
    fn urls_that_cannot_be_fetched_are_refused() {
        assert!(JwksEndpoint::new("ftp://h/jwks", None).is_err());
        assert!(JwksEndpoint::new("http:///jwks", None).is_err());
        let e = JwksEndpoint::new("https://h/jwks", Some(RootCertStore::empty()));
        assert_eq!(e.map(|e| e.path).ok().as_deref(), Some("/jwks"));
    }
}
