//! The SOCKS5 side of the proxy (RFC 1928), for `ALL_PROXY=socks5h://...` users:
//! no authentication, `CONNECT` only, with domain-name, IPv4 and IPv6 address types.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, TcpStream};

use super::{Proto, Shared, Verdict};

const VER: u8 = 5;
const NO_AUTH: u8 = 0x00;
const NO_ACCEPTABLE: u8 = 0xff;
const CMD_CONNECT: u8 = 1;
const ATYP_V4: u8 = 1;
const ATYP_NAME: u8 = 3;
const ATYP_V6: u8 = 4;

/// Reply codes.
const OK: u8 = 0x00;
const GENERAL_FAILURE: u8 = 0x01;
const NOT_ALLOWED: u8 = 0x02;
const HOST_UNREACHABLE: u8 = 0x04;
const REFUSED: u8 = 0x05;
const CMD_UNSUPPORTED: u8 = 0x07;
const ATYP_UNSUPPORTED: u8 = 0x08;

/// Reads from what was already received, then from the socket.
struct Input<'a> {
    stream: &'a TcpStream,
    buf: Vec<u8>,
    pos: usize,
}

impl Input<'_> {
    fn take(&mut self, n: usize) -> io::Result<&[u8]> {
        let have = self.buf.len() - self.pos;
        if have < n {
            let old = self.buf.len();
            self.buf.resize(old + (n - have), 0);
            self.stream.read_exact(&mut self.buf[old..])?;
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn byte(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }
}

/// Serve one SOCKS5 session; `buf` holds the bytes read so far (starting with 0x05).
pub(crate) fn serve(shared: &Shared, client: TcpStream, buf: Vec<u8>) -> io::Result<()> {
    let mut input = Input {
        stream: &client,
        buf,
        pos: 0,
    };
    // Greeting: VER NMETHODS METHODS...
    let _ver = input.byte()?;
    let n = input.byte()? as usize;
    let methods = input.take(n)?.to_vec();
    if !methods.contains(&NO_AUTH) {
        (&client).write_all(&[VER, NO_ACCEPTABLE])?;
        return Ok(());
    }
    (&client).write_all(&[VER, NO_AUTH])?;
    // Request: VER CMD RSV ATYP DST.ADDR DST.PORT
    let head = input.take(4)?.to_vec();
    if head[0] != VER {
        return reply(&client, GENERAL_FAILURE);
    }
    let host = match head[3] {
        ATYP_V4 => {
            let b: [u8; 4] = input.take(4)?.try_into().expect("4 bytes");
            Ipv4Addr::from(b).to_string()
        }
        ATYP_V6 => {
            let b: [u8; 16] = input.take(16)?.try_into().expect("16 bytes");
            format!("[{}]", Ipv6Addr::from(b))
        }
        ATYP_NAME => {
            let len = input.byte()? as usize;
            let raw = input.take(len)?;
            // Non-UTF-8 bytes become U+FFFD, which the ASCII check then refuses.
            String::from_utf8_lossy(raw).into_owned()
        }
        _ => return reply(&client, ATYP_UNSUPPORTED),
    };
    let p = input.take(2)?;
    let port = u16::from_be_bytes([p[0], p[1]]);
    if head[1] != CMD_CONNECT {
        return reply(&client, CMD_UNSUPPORTED);
    }
    let early = input.buf[input.pos..].to_vec();
    match shared.decide(Proto::Socks5, &host, port) {
        Verdict::Connected(upstream) => {
            reply(&client, OK)?;
            shared.tunnel(client, upstream, &early)
        }
        Verdict::Denied(_) => reply(&client, NOT_ALLOWED),
        Verdict::Failed(_, refused) => {
            reply(&client, if refused { REFUSED } else { HOST_UNREACHABLE })
        }
    }
}

/// Send a reply with a zero bound address: the upstream socket's address lives in the
/// host namespace and means nothing inside the sandbox.
fn reply(client: &TcpStream, code: u8) -> io::Result<()> {
    let mut c = client;
    c.write_all(&[VER, code, 0, ATYP_V4, 0, 0, 0, 0, 0, 0])
}
