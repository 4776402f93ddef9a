//! Bidirectional byte relay between the client and the upstream server.
//!
//! One thread per direction, each blocked in `splice`: source socket → pipe → destination
//! socket, so the bytes never enter user space and no `poll` round trip sits between two
//! chunks. A blocking `splice` from a TCP socket takes everything queued at that moment
//! (up to the pipe's capacity) in one call, and the thread sleeps in the kernel until the
//! next data arrives; that is the least work per byte a relay can do without privileges
//! (a `poll` loop costs a wakeup and two or three extra syscalls per chunk, and its
//! non-blocking `splice` stops after the first socket buffer).
//!
//! If a pipe cannot be made or `splice` is refused, that direction copies through a
//! fixed 64 KiB heap buffer instead. Each direction holds at most one pipe's (or
//! buffer's) worth of data and drains it completely before reading again, so nothing is
//! buffered without bound: a slow reader stalls its writer.
//!
//! Idle timeout ("no byte either way for `idle`"): both sockets get `SO_RCVTIMEO` and
//! `SO_SNDTIMEO` of `idle`, and both directions stamp a shared clock after every chunk.
//! A direction whose wait times out ends the tunnel only if the other direction has
//! been silent as long; otherwise it waits again. So a tunnel is closed between `idle`
//! and twice `idle` after its last byte. A direction that fails (reset, timeout) shuts
//! both sockets down, which wakes the other direction at once; a direction that reaches
//! EOF only half-closes its destination, and the other direction goes on.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{fcntl, splice, FcntlArg, OFlag, SpliceFFlags};

/// Size of the copy buffer used when `splice` is unavailable.
const COPY_BUF: usize = 64 * 1024;
/// Pipe capacity a direction grows to once it carries bulk data (the kernel may give
/// less; a new pipe has 64 KiB). A pipe holds references to the socket's pages, not
/// copies, and a bigger one lets a single `splice` take a whole receive queue: for a
/// 200 MiB download the supervisor spent ~50 ticks of CPU per ten downloads with 64 KiB
/// or 256 KiB pipes, ~37 with 1 MiB, ~48 with 4 MiB. 1 MiB is also `pipe-max-size`,
/// the most an unprivileged process may ask for. Pipes only grow when a fill comes close
/// to the capacity, so that the many directions that carry a request line or a small
/// reply do not use up the user's pipe quota (`pipe-user-pages-soft`, 64 MiB by default;
/// past it, new pipes get two pages).
const PIPE_SIZE: usize = 1024 * 1024;
/// Stack of the second direction's thread: it only loops over `splice` (or `read` and
/// `write` into a heap buffer).
const PUMP_STACK: usize = 64 * 1024;

/// Where a direction keeps bytes that were read but not yet written.
enum Buffer {
    Pipe {
        r: OwnedFd,
        w: OwnedFd,
        cap: usize,
        grown: bool,
    },
    Mem(Vec<u8>),
}

impl Buffer {
    fn new(use_splice: bool) -> Buffer {
        let pipe = if use_splice {
            // Blocking ends: the relay never waits on the pipe itself (it is empty before
            // every fill and holds exactly `pending` bytes before every drain).
            nix::unistd::pipe2(OFlag::O_CLOEXEC)
        } else {
            Err(Errno::ENOSYS)
        };
        match pipe {
            Ok((r, w)) => {
                let cap = pipe_size(&w).unwrap_or(4096);
                Buffer::Pipe {
                    r,
                    w,
                    cap,
                    grown: false,
                }
            }
            Err(_) => Buffer::mem(),
        }
    }

    fn mem() -> Buffer {
        Buffer::Mem(vec![0; COPY_BUF])
    }

    /// After a fill of `len` bytes has been drained (the pipe is empty): grow the pipe to
    /// [`PIPE_SIZE`] the first time a fill takes at least half of it. Failing to grow
    /// (quota) keeps the pipe as it is.
    fn grow_if_busy(&mut self, len: usize) {
        if let Buffer::Pipe { w, cap, grown, .. } = self {
            if !*grown && len >= *cap / 2 {
                *grown = true;
                let want = i32::try_from(PIPE_SIZE).unwrap_or(i32::MAX);
                let _ = fcntl(w.as_raw_fd(), FcntlArg::F_SETPIPE_SZ(want));
                *cap = pipe_size(w).unwrap_or(*cap);
            }
        }
    }

    /// Read what `src` has (waiting for at least one byte) into the empty buffer.
    /// `Ok(0)` means EOF.
    fn fill(&mut self, src: &TcpStream) -> io::Result<usize> {
        if let Buffer::Pipe { w, cap, .. } = &self {
            match splice(
                src.as_fd(),
                None,
                w.as_fd(),
                None,
                *cap,
                SpliceFFlags::SPLICE_F_MOVE,
            ) {
                Ok(n) => return Ok(n),
                // The pipe is empty here, so falling back loses nothing.
                Err(Errno::EINVAL) | Err(Errno::ENOSYS) => *self = Buffer::mem(),
                Err(e) => return Err(e.into()),
            }
        }
        let Buffer::Mem(buf) = self else {
            unreachable!("pipe case handled above")
        };
        (&*src).read(buf)
    }

    /// Write the `len` bytes just filled (from `from` on) to `dst`; returns how many
    /// went out in this call.
    fn drain(&mut self, dst: &TcpStream, from: usize, len: usize) -> io::Result<usize> {
        let n = match self {
            Buffer::Pipe { r, .. } => splice(
                r.as_fd(),
                None,
                dst.as_fd(),
                None,
                len - from,
                SpliceFFlags::SPLICE_F_MOVE,
            )?,
            Buffer::Mem(buf) => (&*dst).write(&buf[from..len])?,
        };
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        Ok(n)
    }
}

fn pipe_size(w: &OwnedFd) -> Option<usize> {
    fcntl(w.as_raw_fd(), FcntlArg::F_GETPIPE_SZ)
        .ok()
        .and_then(|c| usize::try_from(c).ok())
}

/// What both directions share: the sockets (to shut them down when the tunnel ends) and
/// the time of the last byte moved either way.
struct Link<'a> {
    client: &'a TcpStream,
    upstream: &'a TcpStream,
    start: Instant,
    /// Milliseconds from `start` to the last chunk moved in either direction.
    last: AtomicU64,
    idle: Duration,
}

impl Link<'_> {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn touch(&self) {
        self.last.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Whether no byte has moved either way for the idle timeout.
    fn idle_expired(&self) -> bool {
        let silent = self
            .now_ms()
            .saturating_sub(self.last.load(Ordering::Relaxed));
        Duration::from_millis(silent) >= self.idle
    }

    /// End the tunnel: wakes the other direction from its `splice`.
    fn abort(&self) {
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.upstream.shutdown(Shutdown::Both);
    }

    /// Decide about an error of one wait: `Ok(())` to wait again, `Err` to end.
    fn retry(&self, e: io::Error) -> io::Result<()> {
        match e.kind() {
            io::ErrorKind::Interrupted => Ok(()),
            // SO_RCVTIMEO / SO_SNDTIMEO ran out for this direction.
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut if !self.idle_expired() => Ok(()),
            io::ErrorKind::WouldBlock => Err(io::ErrorKind::TimedOut.into()),
            _ => Err(e),
        }
    }
}

/// Move bytes `src` → `dst` until EOF (then half-close `dst`) or an error.
fn pump(src: &TcpStream, dst: &TcpStream, link: &Link<'_>, use_splice: bool) -> io::Result<()> {
    let mut buf = Buffer::new(use_splice);
    loop {
        let len = match buf.fill(src) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                link.retry(e)?;
                continue;
            }
        };
        link.touch();
        let mut done = 0;
        while done < len {
            match buf.drain(dst, done, len) {
                Ok(n) => done += n,
                Err(e) => link.retry(e)?,
            }
        }
        link.touch();
        buf.grow_if_busy(len);
    }
    // Everything read has been written: propagate the half-close.
    let _ = dst.shutdown(Shutdown::Write);
    Ok(())
}

/// Relay between `client` and `upstream` until both directions have reached EOF, either
/// side fails, or no byte has moved for `idle`. `early` (bytes the client sent after the
/// request head) is written to the upstream first.
pub(crate) fn relay(
    client: TcpStream,
    upstream: TcpStream,
    early: &[u8],
    idle: Duration,
) -> io::Result<()> {
    relay_with(client, upstream, early, idle, true)
}

/// [`relay`], optionally without `splice` (to exercise the copy fallback).
fn relay_with(
    client: TcpStream,
    upstream: TcpStream,
    early: &[u8],
    idle: Duration,
    use_splice: bool,
) -> io::Result<()> {
    if !early.is_empty() {
        (&upstream).write_all(early)?;
    }
    for s in [&client, &upstream] {
        s.set_nonblocking(false)?;
        s.set_read_timeout(Some(idle))?;
        s.set_write_timeout(Some(idle))?;
    }
    let link = Link {
        client: &client,
        upstream: &upstream,
        start: Instant::now(),
        last: AtomicU64::new(0),
        idle,
    };
    let link = &link;
    thread::scope(|scope| {
        let up = thread::Builder::new()
            .name("cordon-egress-up".into())
            .stack_size(PUMP_STACK)
            .spawn_scoped(scope, move || {
                let r = pump(link.client, link.upstream, link, use_splice);
                if r.is_err() {
                    link.abort();
                }
                r
            });
        let up = match up {
            Ok(h) => h,
            Err(e) => {
                link.abort();
                return Err(e);
            }
        };
        let down = pump(link.upstream, link.client, link, use_splice);
        if down.is_err() {
            link.abort();
        }
        let up = up
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("relay thread panicked")));
        down.and(up)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread;

    /// A connected pair of loopback TCP streams.
    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    fn check(use_splice: bool) {
        let (mut client, client_side) = pair();
        let (upstream_side, mut server) = pair();
        let t = thread::spawn(move || {
            relay_with(
                client_side,
                upstream_side,
                b"early:",
                Duration::from_secs(10),
                use_splice,
            )
        });
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
        let expect = data.clone();
        let w = thread::spawn(move || {
            client.write_all(&data).unwrap();
            client.shutdown(Shutdown::Write).unwrap();
            let mut back = String::new();
            client.read_to_string(&mut back).unwrap();
            back
        });
        let mut got = Vec::new();
        server.read_to_end(&mut got).unwrap();
        assert_eq!(&got[..6], b"early:");
        assert!(got[6..] == expect[..], "payload differs");
        server.write_all(b"reply after half-close").unwrap();
        server.shutdown(Shutdown::Write).unwrap();
        assert_eq!(w.join().unwrap(), "reply after half-close");
        t.join().unwrap().unwrap();
    }

    #[test]
    fn splice_relay_carries_data_and_half_close() {
        check(true);
    }

    #[test]
    fn copy_fallback_carries_data_and_half_close() {
        check(false);
    }

    /// A download whose other direction stays silent for longer than the idle timeout
    /// is not cut: both directions share one idle clock.
    #[test]
    fn one_way_traffic_keeps_the_tunnel_open() {
        let (mut client, client_side) = pair();
        let (upstream_side, mut server) = pair();
        let t =
            thread::spawn(move || relay(client_side, upstream_side, b"", Duration::from_secs(1)));
        let w = thread::spawn(move || {
            for i in 0..10u8 {
                thread::sleep(Duration::from_millis(150));
                server.write_all(&[i; 1000]).unwrap();
            }
            server.shutdown(Shutdown::Write).unwrap();
            server
        });
        let mut got = Vec::new();
        client.read_to_end(&mut got).unwrap();
        assert_eq!(got.len(), 10_000);
        assert!(got
            .chunks(1000)
            .enumerate()
            .all(|(i, c)| c.iter().all(|&b| b == i as u8)));
        client.shutdown(Shutdown::Write).unwrap();
        t.join().unwrap().unwrap();
        drop(w.join().unwrap());
    }

    /// A client that goes away ends both directions, even while the upstream stays open
    /// and silent.
    #[test]
    fn a_reset_client_ends_the_relay() {
        let (client, client_side) = pair();
        let (upstream_side, _server) = pair();
        let t =
            thread::spawn(move || relay(client_side, upstream_side, b"", Duration::from_secs(60)));
        // Unread data at close makes the kernel send a reset.
        (&client).write_all(b"x").unwrap();
        nix::sys::socket::setsockopt(
            &client,
            nix::sys::socket::sockopt::Linger,
            &libc::linger {
                l_onoff: 1,
                l_linger: 0,
            },
        )
        .unwrap();
        drop(client);
        // Ends on its own (with or without an error), long before the idle timeout.
        let _ = t.join().unwrap();
    }
}
