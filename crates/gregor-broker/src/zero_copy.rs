//! Writing framed fetch responses (the imperative shell of `fetch_frame.rs`).
//!
//! On a TCP connection the record bytes go from the segment file to the socket with
//! `sendfile(2)`: the kernel moves them from the page cache into the socket buffer, and they
//! are never copied into this process. Elsewhere (the simulator's network, in-memory pipes in
//! tests) they are read into a buffer reused across responses and written from it.
//!
//! `sendfile` reads the file, and a page not in the page cache waits for the disk, so a file
//! slice is sent from the async worker only when `cachestat(2)` says every page of it is
//! cached (see `gregor_log::page_cache`); otherwise the rest of that write goes to the blocking pool. The
//! common case, a consumer or follower reading recent data, so costs no thread hand-off: with
//! one on every write, librdkafka (one Fetch in flight per broker) waited that long for each
//! answer. The socket is non-blocking, so `sendfile` returns as soon as the socket buffer is
//! full; the connection then waits for writability on the reactor, as any other write does.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use bytes::Buf;
use prometheus_client::metrics::counter::Counter;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncWrite, AsyncWriteExt, Interest};
use tokio::net::TcpStream;

use crate::fetch_frame::Chunk;
use gregor_log::page_cache;

/// Largest slice handed to one `sendfile` call: bounds the time one blocking-pool call holds
/// its thread and the range one page-cache check covers (the socket buffer usually fills
/// first).
const MAX_SENDFILE: usize = 8 << 20;

/// A connection's socket for `sendfile`: a duplicate of its descriptor, registered with the
/// reactor for writability. The descriptor is shared with blocking-pool calls through the
/// `Arc`, so a connection closed while a call runs cannot hand its number to another socket.
#[derive(Debug)]
pub struct ZeroCopy {
    fd: AsyncFd<Arc<OwnedFd>>,
    sent: SendfileCounters,
}

/// Record bytes sent by `sendfile`, by where the call ran.
#[derive(Debug, Clone, Default)]
pub struct SendfileCounters {
    /// On the connection's async worker: every page was in the page cache.
    pub worker: Counter,
    /// On the blocking pool: some page was not (or the kernel could not tell).
    pub blocking_pool: Counter,
}

impl ZeroCopy {
    /// `None` where the descriptor cannot be duplicated or registered: the connection then
    /// writes fetch responses by copying, as the simulator's connections do.
    pub fn new(stream: &TcpStream, sent: SendfileCounters) -> Option<ZeroCopy> {
        let fd = match stream.as_fd().try_clone_to_owned() {
            Ok(fd) => fd,
            Err(e) => {
                tracing::warn!(error = %e, "cannot duplicate the socket for sendfile; fetch responses are copied");
                return None;
            }
        };
        // SAFETY: the `AsyncFd` owns the `Arc<OwnedFd>`, so the descriptor stays open and
        // names the same socket for the `AsyncFd`'s whole life (blocking-pool calls holding
        // a clone of the `Arc` only keep it open longer).
        match unsafe { AsyncFd::register_with_interest(Arc::new(fd), Interest::WRITABLE) } {
            Ok(fd) => Some(ZeroCopy { fd, sent }),
            Err(e) => {
                tracing::warn!(error = %e, "cannot register the socket for sendfile; fetch responses are copied");
                None
            }
        }
    }

    /// The socket (for reading its TCP state).
    pub fn socket(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.get_ref().as_fd()
    }

    /// Writes `chunks` to the socket. The caller has no other write to the socket in progress.
    pub async fn write(&self, chunks: Vec<Chunk>) -> io::Result<()> {
        let mut cursor = Cursor {
            chunks: Arc::new(chunks),
            index: 0,
            offset: 0,
        };
        while !cursor.done() {
            let mut guard = self.fd.writable().await?;
            let mut pushed = push(self.fd.get_ref(), &mut cursor, Where::Worker, &self.sent)?;
            if pushed == Pushed::NotCached {
                let sock = Arc::clone(self.fd.get_ref());
                let sent = self.sent.clone();
                let (next, outcome) = tokio::task::spawn_blocking(move || {
                    let outcome = push(&sock, &mut cursor, Where::BlockingPool, &sent);
                    (cursor, outcome)
                })
                .await
                .map_err(io::Error::other)?;
                cursor = next;
                pushed = outcome?;
            }
            // Only a write that found the buffer full clears readiness: a write event that
            // arrived during the call is kept (the guard knows its tick).
            if pushed == Pushed::Full {
                guard.clear_ready();
            }
        }
        Ok(())
    }
}

/// How far a frame has been written.
struct Cursor {
    chunks: Arc<Vec<Chunk>>,
    index: usize,
    offset: usize,
}

impl Cursor {
    fn done(&self) -> bool {
        self.index >= self.chunks.len()
    }

    fn advance(&mut self, n: usize) {
        self.offset += n;
        if self.index < self.chunks.len() && self.offset >= self.chunks[self.index].len() {
            self.index += 1;
            self.offset = 0;
        }
    }
}

/// Where a [`push`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Where {
    /// On an async worker: it must not wait for the disk.
    Worker,
    /// On the blocking pool.
    BlockingPool,
}

/// How far a [`push`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pushed {
    /// The whole frame is written.
    Done,
    /// The socket buffer is full.
    Full,
    /// On a worker: the next file slice is not all in the page cache.
    NotCached,
}

/// Writes as much of the frame as the socket takes now.
fn push(
    sock: &OwnedFd,
    cursor: &mut Cursor,
    place: Where,
    sent: &SendfileCounters,
) -> io::Result<Pushed> {
    match push_until_blocked(sock, cursor, place, sent) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Pushed::Full),
        other => other,
    }
}

fn push_until_blocked(
    sock: &OwnedFd,
    cursor: &mut Cursor,
    place: Where,
    sent: &SendfileCounters,
) -> io::Result<Pushed> {
    let chunks = Arc::clone(&cursor.chunks);
    while let Some(chunk) = chunks.get(cursor.index) {
        let n = match chunk {
            Chunk::Bytes(b) => {
                if cursor.offset >= b.len() {
                    cursor.advance(0);
                    continue;
                }
                // With more of the frame to follow, these bytes (a frame's header, say) leave
                // with it rather than in a small packet of their own, which would wake the
                // client for a few bytes and cost it a read and a poll more per response.
                let more = chunks[cursor.index + 1..].iter().any(|c| !c.is_empty());
                let flags = if more {
                    rustix::net::SendFlags::MORE
                } else {
                    rustix::net::SendFlags::empty()
                };
                retry(|| rustix::net::send(sock, &b[cursor.offset..], flags))?
            }
            Chunk::File(f) => {
                if cursor.offset >= f.len {
                    cursor.advance(0);
                    continue;
                }
                let Some(file) = &f.file else {
                    return Err(io::Error::other("a file slice without a file"));
                };
                let mut at = f.pos + cursor.offset as u64;
                let want = (f.len - cursor.offset).min(MAX_SENDFILE);
                if place == Where::Worker && !page_cache::is_cached(file, at, want) {
                    return Ok(Pushed::NotCached);
                }
                let n = retry(|| rustix::fs::sendfile(sock, file, Some(&mut at), want))?;
                match place {
                    Where::Worker => sent.worker.inc_by(n as u64),
                    Where::BlockingPool => sent.blocking_pool.inc_by(n as u64),
                };
                if n == 0 {
                    // The segment file is shorter than when it was read (truncated under the
                    // fetch): the frame cannot be completed, so the connection must close
                    // (Kafka does the same); the client fetches again.
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!(
                            "{} ended before the {} bytes at {} being sent",
                            f.path.display(),
                            f.len,
                            f.pos
                        ),
                    ));
                }
                n
            }
        };
        cursor.advance(n);
    }
    Ok(Pushed::Done)
}

/// Retries a system call interrupted by a signal.
fn retry(mut f: impl FnMut() -> rustix::io::Result<usize>) -> io::Result<usize> {
    loop {
        match f() {
            Err(rustix::io::Errno::INTR) => continue,
            other => return other.map_err(io::Error::from),
        }
    }
}

/// Writes `chunks` by copying (connections without [`ZeroCopy`]): each file slice is read on
/// the blocking pool into `buf`, which is handed back for the next response.
pub async fn write_copying<W: AsyncWrite + Unpin>(
    wr: &mut W,
    chunks: Vec<Chunk>,
    mut buf: Vec<u8>,
) -> io::Result<Vec<u8>> {
    for chunk in chunks {
        match chunk {
            Chunk::Bytes(mut b) => {
                while b.has_remaining() {
                    let n = wr.write(b.chunk()).await?;
                    if n == 0 {
                        return Err(io::ErrorKind::WriteZero.into());
                    }
                    b.advance(n);
                }
            }
            Chunk::File(f) => {
                if f.is_empty() {
                    continue;
                }
                let len = f.len;
                // runtime::blocking: under the simulator the read happens while simulated time
                // stands still (a blocking-pool task finished at a real-time moment, so
                // replays of a seed diverged).
                let read = crate::runtime::blocking(move || f.read_into(buf)).await;
                buf = read.map_err(io::Error::other)?;
                if buf.len() < len {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!(
                            "segment file ended {} bytes before the records sent",
                            len - buf.len()
                        ),
                    ));
                }
                wr.write_all(&buf).await?;
            }
        }
    }
    Ok(buf)
}
