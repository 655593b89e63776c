//! A [`Dialer`] whose connections carry every byte later by a fixed delay in each direction:
//! a long link over loopback, for `tests/fetching.rs` and `examples/consume_cost.rs` (which
//! includes this file).

use std::time::Duration;

use gregor_client::connection::{DialedStream, Dialer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// A `Dialer` whose connections carry every byte `delay` later in each direction (a round trip
/// of twice `delay` over loopback), without slowing the bytes down otherwise: a long link.
pub fn delayed_dialer(delay: Duration) -> Dialer {
    Dialer::new(move |addr| {
        let addr = addr.to_string();
        Box::pin(async move {
            let tcp = tokio::net::TcpStream::connect(&addr).await?;
            let (near, far) = tokio::io::duplex(4 << 20);
            let (tcp_read, tcp_write) = tcp.into_split();
            let (far_read, far_write) = tokio::io::split(far);
            tokio::spawn(delayed_copy(tcp_read, far_write, delay));
            tokio::spawn(delayed_copy(far_read, tcp_write, delay));
            Ok(Box::new(near) as Box<dyn DialedStream>)
        })
    })
}

/// Copies `from` to `to`, each chunk written `delay` after it was read.
async fn delayed_copy(
    mut from: impl AsyncRead + Unpin + Send + 'static,
    mut to: impl AsyncWrite + Unpin,
    delay: Duration,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        let mut buf = vec![0u8; 256 << 10];
        while let Ok(n @ 1..) = from.read(&mut buf).await {
            let due = tokio::time::Instant::now() + delay;
            if tx.send((due, buf[..n].to_vec())).is_err() {
                break;
            }
        }
    });
    while let Some((due, bytes)) = rx.recv().await {
        tokio::time::sleep_until(due).await;
        if to.write_all(&bytes).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
    reader.abort();
}
