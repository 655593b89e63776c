//! KIP-368 sessions on controller connections, over real TCP: a peer whose logins last a short
//! while (as a SASL controller listener with `connections.max.reauth.ms` does) closes each
//! connection when its session ends; the client logs in afresh on a new connection before
//! then and moves to it, so no call fails. A fresh login the peer refuses leaves the old
//! connection serving until its session ends, then calls fail; accepting it again heals.

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gregor_quorum::rpc::{
    next_request, write_frame, Connector, KafkaReply, RpcClient, RpcRequest, RpcResponse,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// The peer's side: which password it accepts, and what it saw.
#[derive(Default)]
struct Peer {
    password: AtomicU8,
    logins: AtomicU32,
    /// When each accepted login (numbered from 1) was made.
    logged_in_at: std::sync::Mutex<Vec<Instant>>,
    refused: AtomicU32,
    /// Connections the peer closed because their session had ended.
    ended: AtomicU32,
}

/// A peer at the returned address whose logins (one byte, the password) last `lifetime`;
/// each reply names the connection (its login's number) that answered.
async fn peer(lifetime: Duration) -> (String, Arc<Peer>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let state = Arc::new(Peer::default());
    let shared = state.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            // As the controller listener's connections are: requests are small.
            let _ = s.set_nodelay(true);
            let state = shared.clone();
            tokio::spawn(async move {
                let Ok(password) = s.read_u8().await else {
                    return;
                };
                if password != state.password.load(Ordering::SeqCst) {
                    state.refused.fetch_add(1, Ordering::SeqCst);
                    let _ = s.write_u32(0).await;
                    return;
                }
                let id = {
                    let mut at = state.logged_in_at.lock().expect("not poisoned");
                    at.push(Instant::now());
                    state.logins.fetch_add(1, Ordering::SeqCst) + 1
                };
                let end = Instant::now() + lifetime;
                if s.write_u32(lifetime.as_millis() as u32).await.is_err() {
                    return;
                }
                while let Some(request) = next_request(&mut s, Some(end)).await {
                    let RpcRequest::Kafka { .. } = request else {
                        return;
                    };
                    let reply = RpcResponse::Kafka(Ok(KafkaReply {
                        body: Vec::new(),
                        applied_index: u64::from(id),
                    }));
                    if write_frame(&mut s, &reply).await.is_err() {
                        return;
                    }
                }
                if Instant::now() >= end {
                    state.ended.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
    });
    (addr, state)
}

/// Logs in with the password it holds; the peer answers the session's lifetime, 0 to refuse.
#[derive(Clone)]
struct LoggingIn(Arc<AtomicU8>);

impl Connector for LoggingIn {
    type Stream = TcpStream;

    async fn connect(&self, addr: &str) -> std::io::Result<TcpStream> {
        Ok(self.connect_session(addr).await?.0)
    }

    async fn connect_session(&self, addr: &str) -> std::io::Result<(TcpStream, Option<Duration>)> {
        let mut s = TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        s.write_u8(self.0.load(Ordering::SeqCst)).await?;
        match s.read_u32().await? {
            0 => Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "login refused",
            )),
            ms => Ok((s, Some(Duration::from_millis(u64::from(ms))))),
        }
    }
}

fn request() -> RpcRequest {
    RpcRequest::Kafka {
        api_key: 18,
        api_version: 0,
        body: Vec::new(),
    }
}

fn connection_of(r: RpcResponse) -> u64 {
    match r {
        RpcResponse::Kafka(Ok(reply)) => reply.applied_index,
        other => panic!("unexpected response {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_renewed_before_they_end_and_no_call_fails() {
    let lifetime = Duration::from_millis(1000);
    let (addr, peer) = peer(lifetime).await;
    let mut client = RpcClient::new(LoggingIn(Arc::new(AtomicU8::new(0))), addr);
    let started = Instant::now();
    let mut answered_by = Vec::new();
    // Traffic over four lifetimes, as a replication stream's heartbeats would be.
    while started.elapsed() < lifetime * 4 {
        let r = client
            .call(&request(), Duration::from_secs(2))
            .await
            .unwrap_or_else(|e| panic!("call failed after {:?}: {e}", started.elapsed()));
        answered_by.push(connection_of(r));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    answered_by.dedup();
    // A new connection each lifetime, moved to in order, never back to an old one.
    assert!(answered_by.len() >= 4, "{answered_by:?}");
    assert!(
        answered_by.windows(2).all(|w| w[0] < w[1]),
        "{answered_by:?}"
    );
    // Make before break: each fresh login was made while the session before it still took
    // requests (before 95% of its lifetime), not after it was given up.
    let at = peer.logged_in_at.lock().expect("not poisoned").clone();
    for (k, pair) in at.windows(2).enumerate() {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= lifetime.mul_f64(0.80) && gap < lifetime.mul_f64(0.95),
            "login {} came {gap:?} after the one before",
            k + 2
        );
    }
    assert_eq!(peer.refused.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_fresh_login_keeps_the_old_session_until_it_ends_and_is_retried() {
    let lifetime = Duration::from_millis(2000);
    let (addr, peer) = peer(lifetime).await;
    let password = Arc::new(AtomicU8::new(0));
    let mut client = RpcClient::new(LoggingIn(password.clone()), addr);
    let logged_in = Instant::now();
    assert_eq!(
        connection_of(client.call(&request(), lifetime).await.expect("first")),
        1
    );
    // The password is changed on the peer: fresh logins are refused from now on.
    peer.password.store(1, Ordering::SeqCst);
    let failed_at = loop {
        match client.call(&request(), lifetime).await {
            Ok(r) => assert_eq!(connection_of(r), 1, "the old session serves"),
            Err(_) => break logged_in.elapsed(),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    // Served up to its retirement (95%), not cut short by the refusals...
    assert!(failed_at >= lifetime.mul_f64(0.95), "{failed_at:?}");
    assert!(failed_at < lifetime * 2, "{failed_at:?}");
    // ...which were retried with a backoff, not once and not in a tight loop.
    let refused = peer.refused.load(Ordering::SeqCst);
    assert!((2..=12).contains(&refused), "{refused} refused logins");
    // The client learns the new password: the next call logs in again.
    password.store(1, Ordering::SeqCst);
    let r = client.call(&request(), lifetime).await.expect("healed");
    assert_eq!(connection_of(r), 2);
}

#[tokio::test(start_paused = true)]
async fn the_server_closes_a_connection_when_its_session_ends_between_requests() {
    let (mut client, mut server) = tokio::io::duplex(64 * 1024);
    let end = Instant::now() + Duration::from_secs(3);
    write_frame(&mut client, &request()).await.expect("sent");
    assert!(next_request(&mut server, Some(end)).await.is_some());
    // Nothing more comes: the connection closes at the session's end, not before.
    let waiting = Instant::now();
    assert!(next_request(&mut server, Some(end)).await.is_none());
    assert_eq!(waiting.elapsed(), Duration::from_secs(3));
    // A request read after the end is not served.
    let (mut client, mut server) = tokio::io::duplex(64 * 1024);
    write_frame(&mut client, &request()).await.expect("sent");
    tokio::time::advance(Duration::from_secs(4)).await;
    let past = Instant::now() - Duration::from_secs(1);
    assert!(next_request(&mut server, Some(past)).await.is_none());
    // Without an end, only the peer closes it.
    let (mut client, mut server) = tokio::io::duplex(64 * 1024);
    write_frame(&mut client, &request()).await.expect("sent");
    tokio::time::advance(Duration::from_secs(1_000)).await;
    assert!(next_request(&mut server, None).await.is_some());
    drop(client);
    assert!(next_request(&mut server, None).await.is_none());
}
