//! Kafka clients on the controller listener (KIP-919: `--bootstrap-controller`). A controller
//! connection, once past TLS and the SASL login, carries either the quorum's RPC frames (other
//! nodes) or Kafka requests (an admin tool). The first frame tells which: one that decodes as a
//! controller RPC is one; one with a Kafka request header is the other. The frame is then put
//! back in front of the stream ([`Replayed`]) for whichever serves it.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use kafka_protocol::messages::ApiKey;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::frame::read_frame;

/// What the first frame of a controller connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstFrame {
    /// A controller RPC, or nothing readable (the RPC server closes on it, as before).
    Rpc,
    /// A Kafka request.
    Kafka,
}

/// Reads the first frame of `stream` (its size checked against `max` before anything is
/// allocated) and tells what it is, with `is_rpc` deciding whether a frame is a controller RPC;
/// returns the stream with that frame in front again. `None` when the stream ends or its first
/// frame is over `max`.
pub async fn first_frame<S: AsyncRead + Unpin>(
    mut stream: S,
    max: usize,
    is_rpc: impl Fn(&[u8]) -> bool,
) -> Option<(FirstFrame, Replayed<S>)> {
    let body = read_frame(&mut stream, max).await.ok()??;
    let kind = if !is_rpc(&body) && kafka_request_header(&body) {
        FirstFrame::Kafka
    } else {
        FirstFrame::Rpc
    };
    // The size fitted in an i32 when read.
    let size = u32::try_from(body.len()).ok()?;
    let mut prefix = Vec::with_capacity(4 + body.len());
    prefix.extend_from_slice(&size.to_be_bytes());
    prefix.extend_from_slice(&body);
    let replayed = Replayed {
        prefix: Bytes::from(prefix),
        inner: stream,
    };
    Some((kind, replayed))
}

/// Whether `frame` starts with a Kafka request header: a known API key, a version and a
/// correlation id.
fn kafka_request_header(frame: &[u8]) -> bool {
    let Some(key) = frame.get(..8) else {
        return false;
    };
    let version = i16::from_be_bytes([key[2], key[3]]);
    ApiKey::try_from(i16::from_be_bytes([key[0], key[1]])).is_ok() && (0..=64).contains(&version)
}

/// A stream whose first bytes are `prefix`, read before the rest of `inner`; writes go to
/// `inner`.
pub struct Replayed<S> {
    prefix: Bytes,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Replayed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.prefix.has_remaining() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Replayed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut f = (body.len() as u32).to_be_bytes().to_vec();
        f.extend_from_slice(body);
        f
    }

    /// A DescribeConfigs v4 request header: api key 32, version, correlation id, client id.
    fn kafka_header() -> Vec<u8> {
        let mut h = vec![0, 32, 0, 4, 0, 0, 0, 7];
        h.extend_from_slice(&[0, 3, b'c', b'l', b'i']);
        h
    }

    async fn classify(bytes: Vec<u8>, rpc: bool) -> Option<(FirstFrame, Vec<u8>)> {
        let (kind, mut replayed) = first_frame(&bytes[..], 1 << 20, |_| rpc).await?;
        let mut all = Vec::new();
        replayed.read_to_end(&mut all).await.ok()?;
        Some((kind, all))
    }

    #[tokio::test]
    async fn a_kafka_request_is_told_and_every_byte_is_read_again() {
        let mut bytes = frame(&kafka_header());
        bytes.extend_from_slice(&frame(b"the next frame"));
        let (kind, all) = classify(bytes.clone(), false).await.expect("a frame");
        assert_eq!(kind, FirstFrame::Kafka);
        assert_eq!(all, bytes);
    }

    #[tokio::test]
    async fn a_frame_that_decodes_as_an_rpc_is_one_even_with_a_kafka_like_header() {
        let bytes = frame(&kafka_header());
        let (kind, all) = classify(bytes.clone(), true).await.expect("a frame");
        assert_eq!(kind, FirstFrame::Rpc);
        assert_eq!(all, bytes);
    }

    #[tokio::test]
    async fn garbage_and_empty_frames_go_to_the_rpc_server_which_closes() {
        for body in [
            &b""[..],
            b"\xff\xff\x00\x01\x00\x00\x00\x01",
            b"\x00\x20\x01\x00abcd",
        ] {
            let (kind, _) = classify(frame(body), false).await.expect("a frame");
            assert_eq!(kind, FirstFrame::Rpc, "{body:?}");
        }
    }

    #[tokio::test]
    async fn an_oversized_or_missing_first_frame_ends_the_connection() {
        let mut big = (2u32 << 20).to_be_bytes().to_vec();
        big.extend_from_slice(&[0; 16]);
        assert!(classify(big, false).await.is_none());
        assert!(classify(Vec::new(), false).await.is_none());
    }
}
