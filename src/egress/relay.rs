//! Bidirectional byte relay between the client and the upstream server.
//!
//! One thread drives both directions with `poll`: that gives a single place for the idle
//! timeout ("no bytes either way for N seconds") and half-close handling. Bytes move with
//! `splice` through one pipe per direction, so they never enter user space; if a pipe
//! cannot be made or `splice` is refused, that direction falls back to copying through a
//! fixed 64 KiB heap buffer. Each direction holds at most one pipe's (or buffer's) worth
//! of data, so nothing is buffered without bound: a slow reader stalls its writer.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{fcntl, splice, FcntlArg, OFlag, SpliceFFlags};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

/// Size of the copy buffer used when `splice` is unavailable.
const COPY_BUF: usize = 64 * 1024;
/// Pipe capacity we ask for (the kernel may give less; the default is 64 KiB).
const PIPE_SIZE: i32 = 1024 * 1024;
/// Rounds of read/write one direction may do before the other gets a turn.
const BURST: usize = 16;

/// Where a direction keeps bytes that were read but not yet written.
enum Buffer {
    Pipe { r: OwnedFd, w: OwnedFd, cap: usize },
    Mem { buf: Vec<u8>, start: usize },
}

struct Direction {
    buf: Buffer,
    pending: usize,
    eof: bool,
    done: bool,
}

impl Direction {
    fn new(use_splice: bool) -> Direction {
        let pipe = if use_splice {
            nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)
        } else {
            Err(Errno::ENOSYS)
        };
        let buf = match pipe {
            Ok((r, w)) => {
                let _ = fcntl(w.as_raw_fd(), FcntlArg::F_SETPIPE_SZ(PIPE_SIZE));
                let cap = fcntl(w.as_raw_fd(), FcntlArg::F_GETPIPE_SZ)
                    .map(|c| c as usize)
                    .unwrap_or(64 * 1024);
                Buffer::Pipe { r, w, cap }
            }
            Err(_) => Buffer::mem(),
        };
        Direction {
            buf,
            pending: 0,
            eof: false,
            done: false,
        }
    }

    /// How many more bytes the buffer can take now.
    fn room(&self) -> usize {
        match &self.buf {
            Buffer::Pipe { cap, .. } => cap.saturating_sub(self.pending),
            // The copy buffer is refilled only once it is empty.
            Buffer::Mem { buf, .. } if self.pending == 0 => buf.len(),
            Buffer::Mem { .. } => 0,
        }
    }

    /// Read from `src` into the buffer (which has room). `Ok(0)` means EOF.
    fn fill(&mut self, src: &TcpStream) -> io::Result<usize> {
        if let Buffer::Pipe { w, .. } = &self.buf {
            let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
            match splice(src.as_fd(), None, w.as_fd(), None, self.room(), flags) {
                Ok(n) => {
                    self.pending += n;
                    return Ok(n);
                }
                // Falling back is only possible while the pipe is empty.
                Err(Errno::EINVAL) | Err(Errno::ENOSYS) if self.pending == 0 => {
                    self.buf = Buffer::mem()
                }
                Err(e) => return Err(e.into()),
            }
        }
        let Buffer::Mem { buf, start } = &mut self.buf else {
            unreachable!("pipe case handled above")
        };
        let n = (&*src).read(buf)?;
        *start = 0;
        self.pending = n;
        Ok(n)
    }

    /// Write pending bytes to `dst`; returns how many went out.
    fn drain(&mut self, dst: &TcpStream) -> io::Result<usize> {
        let n = match &mut self.buf {
            Buffer::Pipe { r, .. } => {
                let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
                splice(r.as_fd(), None, dst.as_fd(), None, self.pending, flags)?
            }
            Buffer::Mem { buf, start } => {
                let n = (&*dst).write(&buf[*start..*start + self.pending])?;
                *start += n;
                n
            }
        };
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        self.pending -= n;
        Ok(n)
    }

    /// Move bytes src→dst until one side would block or the burst is used up.
    /// Returns whether any byte moved.
    fn pump(&mut self, src: &TcpStream, dst: &TcpStream) -> io::Result<bool> {
        let mut moved = false;
        for _ in 0..BURST {
            if self.done {
                break;
            }
            let mut progress = false;
            if !self.eof && self.room() > 0 {
                match self.fill(src) {
                    Ok(0) => self.eof = true,
                    Ok(_) => progress = true,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            }
            if self.pending > 0 {
                match self.drain(dst) {
                    Ok(_) => progress = true,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            }
            if self.eof && self.pending == 0 {
                // Everything read has been written: propagate the half-close.
                let _ = dst.shutdown(Shutdown::Write);
                self.done = true;
            }
            moved |= progress;
            if !progress {
                break;
            }
        }
        Ok(moved)
    }

    /// Poll interest: reading the source while there is room, writing the destination
    /// while bytes are pending.
    fn interest(&self) -> (bool, bool) {
        if self.done {
            return (false, false);
        }
        (!self.eof && self.room() > 0, self.pending > 0)
    }
}

impl Buffer {
    fn mem() -> Buffer {
        Buffer::Mem {
            buf: vec![0; COPY_BUF],
            start: 0,
        }
    }
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
    client.set_nonblocking(true)?;
    upstream.set_nonblocking(true)?;
    // [0]: client → upstream, [1]: upstream → client.
    let mut dirs = [Direction::new(use_splice), Direction::new(use_splice)];
    let ends = [(&client, &upstream), (&upstream, &client)];
    let timeout = PollTimeout::try_from(idle).unwrap_or(PollTimeout::MAX);
    loop {
        for (d, (src, dst)) in dirs.iter_mut().zip(ends) {
            d.pump(src, dst)?;
        }
        if dirs.iter().all(|d| d.done) {
            return Ok(());
        }
        let mut fds = Vec::with_capacity(4);
        for (d, (src, dst)) in dirs.iter().zip(ends) {
            let (read, write) = d.interest();
            if read {
                fds.push(PollFd::new(src.as_fd(), PollFlags::POLLIN));
            }
            if write {
                fds.push(PollFd::new(dst.as_fd(), PollFlags::POLLOUT));
            }
        }
        match poll(&mut fds, timeout) {
            Ok(0) => return Err(io::ErrorKind::TimedOut.into()),
            Ok(_) => {}
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
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
}
