//! The HTTP listener of `metrics.listener`: `/metrics` (OpenMetrics text, which Prometheus
//! scrapes), `/healthz` (the process serves), `/readyz` (registered, unfenced, with an active
//! controller known) and the web console under `/ui` (`crate::console`). Read-only, GET and HEAD
//! only.
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
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tracing::{debug, info, warn};

use crate::broker_view::{BrokerView, Observable};
use crate::cluster_view::peer::parse_listener;

/// Connections served at once; more wait in the kernel's backlog.
pub const MAX_CONNECTIONS: usize = 64;
/// Largest request line plus headers.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Time to send a request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a connection stays open (Prometheus opens a new one when it needs to).
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(120);

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `metrics.listener` as a socket address: `http://HOST:PORT` (or `HOST:PORT`); `None` when
/// unset or empty.
pub fn listener_address(config: &crate::BrokerConfig) -> Result<Option<SocketAddr>, String> {
    let value = match config.settings.get("metrics.listener") {
        Some(gregor_meta::config::ConfigValue::String(s)) => s,
        _ => return Ok(None),
    };
    parse_listener(&value)
}

/// The broker the listener reports on, once it has started.
#[derive(Default)]
pub struct Target {
    broker: OnceLock<Weak<dyn Observable>>,
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

/// Serves the listener until the task is dropped.
pub async fn serve(listener: TcpListener, target: Arc<Target>) {
    if let Ok(addr) = listener.local_addr() {
        info!(address = %addr, "metrics listener serving /metrics, /healthz, /readyz");
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
        crate::runtime::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let target = target.clone();
                async move { Ok::<_, Infallible>(answer(&target, &req).await) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .max_buf_size(MAX_HEAD_BYTES)
                .serve_connection(TokioIo::new(stream), service);
            match tokio::time::timeout(CONNECTION_TIMEOUT, connection).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => debug!(%peer, error = %e, "metrics connection ended"),
                Err(_) => debug!(%peer, "metrics connection closed after its time limit"),
            }
            drop(slot);
        });
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

async fn answer(target: &Target, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
        r.headers_mut()
            .insert(hyper::header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let path = req.uri().path();
    if crate::console::owns(path) {
        let host = req
            .headers()
            .get(hyper::header::HOST)
            .map(|h| h.to_str().unwrap_or(""));
        if !crate::console::host_allowed(host) {
            return console_response(crate::console::host_refused());
        }
        let broker = target.get();
        let view = broker.as_deref().map(Observable::view);
        let page = crate::console::answer(view, path, req.uri().query()).await;
        return console_response(page);
    }
    match path {
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" => match target.get() {
            None => text(
                StatusCode::SERVICE_UNAVAILABLE,
                "starting: not registered yet\n",
            ),
            Some(b) => match readiness(b.view()) {
                Ok(()) => text(StatusCode::OK, "ready\n"),
                Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
            },
        },
        "/metrics" => match target.get() {
            None => text(StatusCode::SERVICE_UNAVAILABLE, "starting\n"),
            Some(b) => {
                let body = super::collect::render(b.view()).await;
                let mut r = text(StatusCode::OK, body);
                r.headers_mut()
                    .insert(CONTENT_TYPE, HeaderValue::from_static(OPENMETRICS));
                r
            }
        },
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
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
