//! What the kernel knows of a TCP connection's path: its minimum round-trip time, which sizes
//! consumers' Fetch answers (`handlers/fetch.rs`, `answer_limit`).

use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

/// The connection's minimum round-trip time as the kernel measured it (`tcpi_min_rtt`, over
/// the last few minutes), or `None` where it cannot tell: not a TCP socket, no sample yet, or
/// a kernel older than the field (Linux 4.6).
pub fn min_round_trip(socket: BorrowedFd<'_>) -> Option<Duration> {
    // SAFETY: `tcp_info` is plain old data; zeroed is a valid value of it.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the descriptor is open for the borrow's life, and `info`/`len` describe a
    // writable buffer of `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return None;
    }
    // The kernel fills as much of the struct as it knows; an older one stops before the field.
    let end = std::mem::offset_of!(libc::tcp_info, tcpi_min_rtt) + std::mem::size_of::<u32>();
    if (len as usize) < end || info.tcpi_min_rtt == u32::MAX {
        return None;
    }
    Some(Duration::from_micros(u64::from(info.tcpi_min_rtt)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_loopback_connection_has_a_short_minimum_round_trip() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let client =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        // A round trip of data gives both ends an RTT sample, whatever the handshake gave.
        use std::io::{Read, Write};
        (&client).write_all(b"ping").expect("write");
        let mut buf = [0u8; 4];
        (&server).read_exact(&mut buf).expect("read");
        (&server).write_all(b"pong").expect("write");
        (&client).read_exact(&mut buf).expect("read");
        let rtt = min_round_trip(server.as_fd()).expect("a TCP socket with samples");
        assert!(
            rtt < Duration::from_millis(5),
            "loopback round trip {rtt:?}"
        );
    }

    #[test]
    fn a_socket_that_is_not_tcp_has_none() {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        assert_eq!(min_round_trip(udp.as_fd()), None);
        let file = std::fs::File::open("/dev/null").expect("open");
        assert_eq!(min_round_trip(file.as_fd()), None);
    }
}
