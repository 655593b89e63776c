//! The HTTP listener of `metrics.listener`: `/metrics` (OpenMetrics text, which Prometheus
//! scrapes), `/healthz` (the process serves), `/readyz` (registered, unfenced, with an active
//! controller known) and the web console under `/ui` (`crate::console`). GET and HEAD only, but
//! for the console's actions (POST under `/ui/api/actions/`, off unless `console.actions.enable`).
//!
//! It is bound before the broker starts, so `/healthz` answers during start-up and `/readyz`
//! says why the broker is not ready yet. Its resources are bounded whatever peers send: at most
//! [`MAX_CONNECTIONS`] connections, request heads of at most [`MAX_HEAD_BYTES`] (larger ones get
//! 431), [`HEAD_TIMEOUT`] to send a request head and [`CONNECTION_TIMEOUT`] per connection.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tracing::{debug, info, warn};

use super::auth::{self, Authentication, Forwarded, MetricsSecurity, Viewer};
use crate::broker_view::{BrokerView, Observable};
use crate::cluster_view::peer::parse_console;
use crate::console::actions;
use crate::security::KafkaPrincipal;

/// Connections served at once; more wait in the kernel's backlog.
pub const MAX_CONNECTIONS: usize = 64;
/// Largest request line plus headers.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Time to send a request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a connection stays open (Prometheus opens a new one when it needs to).
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(120);

/// The console's action endpoints, POST only.
const ACTIONS: &str = actions::PREFIX;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `metrics.listener` as a socket address: `http://HOST:PORT`, `https://HOST:PORT` (or
/// `HOST:PORT`); `None` when unset or empty. An invalid `metrics.partition.topics` is an
/// error too, so that start-up stops on it rather than each scrape.
pub fn listener_address(config: &crate::BrokerConfig) -> Result<Option<SocketAddr>, String> {
    let value = match config.settings.get("metrics.listener") {
        Some(gregor_meta::config::ConfigValue::String(s)) => s,
        _ => return Ok(None),
    };
    super::partitions::PartitionFilter::from_settings(&config.settings)?;
    Ok(parse_console(&value)?.map(|console| console.addr))
}

/// The broker the listener reports on, once it has started, and the console's charts of it.
#[derive(Default)]
pub struct Target {
    broker: OnceLock<Weak<dyn Observable>>,
    charts: crate::console::Charts,
}

impl Target {
    pub fn new() -> Arc<Target> {
        Arc::new(Target::default())
    }

    /// The broker has started: `/metrics` and `/readyz` report on it from now on.
    pub fn set<B: Observable + 'static>(&self, broker: &Arc<B>) {
        let weak: Weak<B> = Arc::downgrade(broker);
        let weak: Weak<dyn Observable> = weak;
        let _ = self.broker.set(weak);
    }

    fn get(&self) -> Option<Arc<dyn Observable>> {
        self.broker.get().and_then(Weak::upgrade)
    }
}

/// Serves the listener until the task is dropped, with the TLS and authentication `security`
/// describes.
pub async fn serve(listener: TcpListener, target: Arc<Target>, security: Arc<MetricsSecurity>) {
    // The console's charts are sampled while the listener serves, and stop with it.
    let charts = crate::console::keep_charts(&target.charts, || target.get());
    tokio::select! {
        () = accept(listener, target.clone(), security) => {}
        () = charts => {}
    }
}

/// Accepts the listener's connections, each served on its own task.
async fn accept(listener: TcpListener, target: Arc<Target>, security: Arc<MetricsSecurity>) {
    if let Ok(addr) = listener.local_addr() {
        info!(address = %addr, tls = security.tls.is_some(), authentication = ?security.authentication,
            "metrics listener serving /metrics, /healthz, /readyz, /ui");
    }
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                warn!(error = %e, "metrics listener accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let target = target.clone();
        let security = security.clone();
        crate::runtime::spawn(async move {
            let Some(tls) = &security.tls else {
                let client = Client {
                    peer,
                    certificate: KafkaPrincipal::anonymous(),
                };
                connection(stream, client, target, security.clone()).await;
                drop(slot);
                return;
            };
            match tls.accept(stream, Some(HEAD_TIMEOUT)).await {
                Ok((stream, certificate)) => {
                    let client = Client { peer, certificate };
                    connection(stream, client, target, security.clone()).await;
                }
                Err(e) => debug!(%peer, error = %e, "metrics listener TLS handshake refused"),
            }
            drop(slot);
        });
    }
}

/// Who is at the other end of a connection: its address, and its certificate's principal
/// (`User:ANONYMOUS` without one, or without TLS).
#[derive(Clone)]
struct Client {
    peer: SocketAddr,
    certificate: KafkaPrincipal,
}

/// Serves one connection's requests, within [`CONNECTION_TIMEOUT`].
async fn connection<IO>(io: IO, client: Client, target: Arc<Target>, security: Arc<MetricsSecurity>)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let peer = client.peer;
    let service = hyper::service::service_fn(move |req| {
        let (target, security, client) = (target.clone(), security.clone(), client.clone());
        async move {
            if req.method() == Method::POST && req.uri().path().starts_with(ACTIONS) {
                return Ok::<_, Infallible>(action(&target, &security, &client, req).await);
            }
            Ok::<_, Infallible>(answer(&target, &security, &client, &req).await)
        }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES)
        .serve_connection(TokioIo::new(io), service);
    match tokio::time::timeout(CONNECTION_TIMEOUT, connection).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => debug!(%peer, error = %e, "metrics connection ended"),
        Err(_) => debug!(%peer, "metrics connection closed after its time limit"),
    }
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

async fn answer(
    target: &Target,
    security: &MetricsSecurity,
    client: &Client,
    req: &Request<Incoming>,
) -> Response<Full<Bytes>> {
    if req.uri().path().starts_with(ACTIONS) {
        let mut r = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "console actions are POST only\n",
        );
        r.headers_mut()
            .insert(hyper::header::ALLOW, HeaderValue::from_static("POST"));
        return r;
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
        r.headers_mut()
            .insert(hyper::header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let path = req.uri().path();
    // Load balancers and orchestrators probe these without credentials; they reveal nothing.
    match path {
        "/healthz" => return text(StatusCode::OK, "ok\n"),
        "/readyz" => return ready(target),
        _ => {}
    }
    if crate::console::owns(path) {
        let host = req
            .headers()
            .get(hyper::header::HOST)
            .map(|h| h.to_str().unwrap_or(""));
        if !crate::console::host_allowed(host) {
            return console_response(crate::console::host_refused());
        }
    } else if path != "/metrics" {
        return text(StatusCode::NOT_FOUND, "not found\n");
    }
    let broker = target.get();
    let viewer = match login(security, client, req, broker.as_deref()).await {
        Ok(viewer) => viewer,
        Err(refusal) => return refusal,
    };
    if crate::console::owns(path) {
        let view = broker.as_deref().map(Observable::view);
        let page =
            crate::console::answer(view, &target.charts, &viewer, path, req.uri().query()).await;
        return console_response(page);
    }
    match broker {
        None => text(StatusCode::SERVICE_UNAVAILABLE, "starting\n"),
        Some(_) if !viewer.may_describe_cluster() => {
            info!(principal = %viewer.principal(), peer = %client.peer,
                "metrics scrape refused: no DESCRIBE on the cluster");
            text(
                StatusCode::FORBIDDEN,
                "/metrics needs DESCRIBE on the cluster\n",
            )
        }
        Some(b) => {
            let body = super::collect::render(b.view()).await;
            let mut r = text(StatusCode::OK, body);
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static(OPENMETRICS));
            r
        }
    }
}

/// A POST of a console action: the Host checked as for every console request, the login, then
/// a body of at most `MAX_BODY_BYTES` read within [`HEAD_TIMEOUT`].
async fn action(
    target: &Target,
    security: &MetricsSecurity,
    client: &Client,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let header = |name: &str| -> Option<String> {
        let value = req.headers().get(name)?;
        Some(value.to_str().unwrap_or("").to_string())
    };
    if !crate::console::host_allowed(header("host").as_deref()) {
        return console_response(crate::console::host_refused());
    }
    let broker = target.get();
    let viewer = match login(security, client, &req, broker.as_deref()).await {
        Ok(viewer) => viewer,
        Err(refusal) => return refusal,
    };
    let path = req.uri().path().to_string();
    let (host, from, marker, content_type) = (
        header("host"),
        header("origin"),
        header(actions::MARKER_HEADER),
        header("content-type"),
    );
    let limited = http_body_util::Limited::new(req.into_body(), actions::MAX_BODY_BYTES);
    let body = match tokio::time::timeout(HEAD_TIMEOUT, limited.collect()).await {
        Ok(Ok(body)) => body.to_bytes(),
        Ok(Err(_)) | Err(_) => {
            let page = crate::console::Page::error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "an action's body must be JSON of at most 16 KiB, sent within 10 s",
            );
            return console_response(page);
        }
    };
    let origin = actions::Origin {
        origin: from.as_deref(),
        host: host.as_deref(),
        marker: marker.as_deref(),
        content_type: content_type.as_deref(),
    };
    let page = crate::console::act(broker, &viewer, &path, &origin, &body).await;
    console_response(page)
}

fn ready(target: &Target) -> Response<Full<Bytes>> {
    match target.get() {
        None => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "starting: not registered yet\n",
        ),
        Some(b) => match readiness(b.view()) {
            Ok(()) => text(StatusCode::OK, "ready\n"),
            Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
        },
    }
}

/// The request's principal, as `metrics.listener.authentication` says, or the viewer a node
/// forwards (`auth::forwarded`), and what it may see; or the refusal to send. A failed login is
/// answered after `connection.failed.authentication.delay.ms`, which only this request waits for.
async fn login(
    security: &MetricsSecurity,
    client: &Client,
    req: &Request<Incoming>,
    broker: Option<&dyn Observable>,
) -> Result<Viewer, Response<Full<Bytes>>> {
    let header = |name: &str| req.headers().get(name).map(HeaderValue::as_bytes);
    let forwarded = auth::forwarded(
        &client.certificate,
        &security.super_users,
        header(auth::FORWARDED_PRINCIPAL),
        header(auth::FORWARDED_HOST),
    );
    let (principal, host) = match forwarded {
        // The node authenticated with its certificate; the request is its viewer's.
        Forwarded::Trusted { principal, host } => {
            debug!(peer = %client.peer, node = %client.certificate, viewer = %principal,
                "metrics request forwarded by a node");
            (principal, host.unwrap_or(client.peer.ip()))
        }
        Forwarded::Ignored(reason) => {
            info!(peer = %client.peer, certificate = %client.certificate, reason,
                "forwarded principal ignored");
            (
                authenticate(security, client, req, broker).await?,
                client.peer.ip(),
            )
        }
        Forwarded::Absent => (
            authenticate(security, client, req, broker).await?,
            client.peer.ip(),
        ),
    };
    Ok(match broker {
        Some(b) => {
            let v = b.view();
            Viewer::new(principal, host, &v.config.settings, v.metadata.image())
        }
        None => Viewer::everything(principal),
    })
}

/// The request's own principal, as `metrics.listener.authentication` says.
async fn authenticate(
    security: &MetricsSecurity,
    client: &Client,
    req: &Request<Incoming>,
    broker: Option<&dyn Observable>,
) -> Result<KafkaPrincipal, Response<Full<Bytes>>> {
    match security.authentication {
        Authentication::None => Ok(client.certificate.clone()),
        Authentication::Mtls if client.certificate != KafkaPrincipal::anonymous() => {
            Ok(client.certificate.clone())
        }
        Authentication::Mtls => {
            info!(peer = %client.peer, "metrics listener login failed: no client certificate");
            Err(unauthorized(security, false).await)
        }
        Authentication::Basic => {
            let Some(b) = broker else {
                // The SCRAM credentials are in the metadata image, which is not loaded yet.
                return Err(text(StatusCode::SERVICE_UNAVAILABLE, "starting\n"));
            };
            let header = req.headers().get(hyper::header::AUTHORIZATION);
            let credentials = match auth::parse_basic(header.map(HeaderValue::as_bytes)) {
                Ok(c) => c,
                Err(e) => {
                    info!(peer = %client.peer, reason = %e, "metrics listener login failed");
                    return Err(unauthorized(security, true).await);
                }
            };
            let image = b.view().metadata.image();
            let user = credentials.user.clone();
            let ok = crate::runtime::blocking(move || {
                auth::verify_scram(
                    image.scram_credentials(),
                    &credentials.user,
                    &credentials.password,
                )
            })
            .await;
            if !ok {
                info!(peer = %client.peer, user, "metrics listener login failed: invalid credentials");
                return Err(unauthorized(security, true).await);
            }
            Ok(KafkaPrincipal::user(user))
        }
    }
}

/// 401, after the failed-authentication delay; with a Basic challenge when `basic`.
async fn unauthorized(security: &MetricsSecurity, basic: bool) -> Response<Full<Bytes>> {
    tokio::time::sleep(security.failed_delay).await;
    let mut r = text(StatusCode::UNAUTHORIZED, "authentication failed\n");
    if basic {
        r.headers_mut().insert(
            hyper::header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"gregor\", charset=\"UTF-8\""),
        );
    }
    r
}

/// The console's answer with the headers that keep the page to itself: only its own script and
/// style sheet run, no framing, no content sniffing, nothing cached.
fn console_response(page: crate::console::Page) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(page.body));
    *r.status_mut() = page.status;
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(page.content_type));
    h.insert(
        hyper::header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        ),
    );
    h.insert(
        hyper::header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        hyper::header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        hyper::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    r
}

/// Ready: this broker is registered and unfenced in the metadata it has applied, and it knows an
/// active controller. (The controller unfences a broker only once it has caught up with the
/// metadata log, and fences one that stops heartbeating.)
pub fn readiness(b: BrokerView<'_>) -> Result<(), String> {
    if !b.config.is_broker {
        return match b.metadata.active_controller() {
            Some(_) => Ok(()),
            None => Err("no active controller known".into()),
        };
    }
    let image = b.metadata.image();
    match image.broker(b.node_id()) {
        None => return Err("not registered".into()),
        Some(r) if r.fenced => return Err("fenced".into()),
        Some(_) => {}
    }
    if b.metadata.active_controller().is_none() {
        return Err("no active controller known".into());
    }
    Ok(())
}
