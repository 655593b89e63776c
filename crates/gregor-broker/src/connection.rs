//! One client connection: requests are read and handled concurrently (pipelining), responses
//! leave in request order.
//!
//! A reader task decodes frames into a bounded channel (so a slow handler applies backpressure
//! to the socket); the connection loop starts a handler future per request and writes the
//! completed ones in order. Requests Kafka answers by closing the connection (unknown API keys,
//! unsupported versions other than ApiVersions', malformed or oversized frames) stop the reading;
//! the responses already owed are still written, then the connection closes.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::{FuturesOrdered, StreamExt};
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse, RequestKind, ResponseKind};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tracing::{debug, warn};

use crate::api;
use crate::frame::{decode_request, encode_response, read_frame, FrameError};

/// Requests in flight per connection before the connection stops reading.
pub const MAX_IN_FLIGHT: usize = 64;

/// Who sent a request.
#[derive(Debug, Clone)]
pub struct RequestContext {
    pub api_key: ApiKey,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: String,
    pub client_host: String,
    pub connection_id: u64,
}

/// What a handler answers a request with. (As large as the response it carries, like the
/// `Option<ResponseKind>` it replaced; boxing would cost an allocation per response.)
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Reply {
    /// A response to write.
    Respond(ResponseKind),
    /// No response (produce with `acks=0`).
    Nothing,
    /// No response, and the connection closes once the responses owed before it are written
    /// (Kafka's answer to an `acks=0` produce that failed, so the client refreshes metadata).
    Close,
}

impl From<Option<ResponseKind>> for Reply {
    fn from(r: Option<ResponseKind>) -> Reply {
        r.map_or(Reply::Nothing, Reply::Respond)
    }
}

/// Answers decoded requests.
pub trait Handler: Send + Sync + 'static {
    fn handle(
        self: Arc<Self>,
        ctx: RequestContext,
        request: RequestKind,
    ) -> impl Future<Output = Reply> + Send;
}

enum Incoming {
    Request(Box<crate::frame::Request>),
    /// An ApiVersions request at a version we do not support: answered with v0 and the
    /// versions we do (KIP-511).
    UnsupportedApiVersions {
        correlation_id: i32,
    },
}

/// Serves one connection until the peer closes it, it sends something that closes it, or
/// `shutdown` fires.
pub async fn serve<H: Handler>(
    stream: TcpStream,
    peer: SocketAddr,
    connection_id: u64,
    handler: Arc<H>,
    max_request_bytes: usize,
    mut shutdown: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let (rd, mut wr) = stream.into_split();
    let (tx, mut rx) = mpsc::channel::<Incoming>(MAX_IN_FLIGHT);
    let reader = tokio::spawn(async move {
        let mut rd = BufReader::with_capacity(64 * 1024, rd);
        loop {
            let frame = match read_frame(&mut rd, max_request_bytes).await {
                Ok(Some(f)) => f,
                Ok(None) => return,
                Err(e) => {
                    warn!(%peer, connection_id, error = %e, "closing connection");
                    return;
                }
            };
            let incoming = match decode_request(frame) {
                Ok(r) => Incoming::Request(Box::new(r)),
                Err(FrameError::UnsupportedVersion {
                    api: ApiKey::ApiVersions,
                    correlation_id,
                    ..
                }) => Incoming::UnsupportedApiVersions { correlation_id },
                Err(e) => {
                    warn!(%peer, connection_id, error = %e, "closing connection");
                    return;
                }
            };
            if tx.send(incoming).await.is_err() {
                return;
            }
        }
    });

    type Done = (ApiKey, i16, i32, Reply);
    let mut pending: FuturesOrdered<std::pin::Pin<Box<dyn Future<Output = Done> + Send>>> =
        FuturesOrdered::new();
    let mut reading = true;
    let client_host = peer.ip().to_string();
    loop {
        if !reading && pending.is_empty() {
            break;
        }
        tokio::select! {
            incoming = rx.recv(), if reading && pending.len() < MAX_IN_FLIGHT => {
                match incoming {
                    Some(Incoming::Request(req)) => {
                        let version = req.header.request_api_version;
                        let correlation_id = req.header.correlation_id;
                        let ctx = RequestContext {
                            api_key: req.api_key,
                            api_version: version,
                            correlation_id,
                            client_id: req.header.client_id.as_deref().unwrap_or("").to_string(),
                            client_host: client_host.clone(),
                            connection_id,
                        };
                        let h = handler.clone();
                        let api_key = req.api_key;
                        pending.push_back(Box::pin(async move {
                            (api_key, version, correlation_id, h.handle(ctx, req.body).await)
                        }));
                    }
                    Some(Incoming::UnsupportedApiVersions { correlation_id }) => {
                        let mut r = ApiVersionsResponse::default();
                        r.error_code = kafka_protocol::ResponseError::UnsupportedVersion.code();
                        r.api_keys = api::api_versions();
                        let done: Done = (ApiKey::ApiVersions, 0, correlation_id, Reply::Respond(ResponseKind::ApiVersions(r)));
                        pending.push_back(Box::pin(async move { done }));
                    }
                    None => reading = false,
                }
            }
            Some((api_key, version, correlation_id, response)) = pending.next(), if !pending.is_empty() => {
                let response = match response {
                    Reply::Respond(r) => r,
                    Reply::Nothing => continue,
                    Reply::Close => {
                        debug!(%peer, connection_id, api = ?api_key, "closing connection after a failed request without response");
                        break;
                    }
                };
                match encode_response(api_key, version, correlation_id, &response) {
                    Ok(bytes) => {
                        if let Err(e) = write(&mut wr, bytes).await {
                            debug!(%peer, connection_id, error = %e, "write failed");
                            break;
                        }
                    }
                    Err(e) => {
                        warn!(%peer, connection_id, api = ?api_key, version, error = %e, "closing connection");
                        break;
                    }
                }
            }
            _ = shutdown.changed() => {
                reading = false;
            }
        }
    }
    reader.abort();
    let _ = wr.shutdown().await;
}

async fn write(wr: &mut tokio::net::tcp::OwnedWriteHalf, bytes: Bytes) -> std::io::Result<()> {
    wr.write_all(&bytes).await
}
