//! The HTTP side of the proxy: `CONNECT host:port` tunnels and plain forwarding of
//! absolute-URI requests (`GET http://host/path HTTP/1.1`).

use std::io::{self, Read, Write};
use std::net::TcpStream;

use super::{Proto, Shared, Verdict};

/// Largest request head we accept; a bigger one gets `431`.
pub(crate) const MAX_HEAD: usize = 64 * 1024;
/// Most header lines we parse.
const MAX_HEADERS: usize = 128;

/// Headers that describe the client→proxy hop and must not be forwarded (plus every
/// `proxy-*` header, see `is_hop_by_hop`). `Host` is dropped because it is rewritten from
/// the URL; `Transfer-Encoding` is kept because the body is relayed as it came.
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "host",
    "http2-settings",
];

/// Serve one HTTP proxy request; `buf` holds the bytes read so far.
pub(crate) fn serve(shared: &Shared, mut client: TcpStream, mut buf: Vec<u8>) -> io::Result<()> {
    let mut chunk = [0u8; 4096];
    let head_len = loop {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(n)) => break n,
            Ok(httparse::Status::Partial) => {}
            Err(httparse::Error::TooManyHeaders) => {
                return respond(
                    &mut client,
                    431,
                    "cordon: request has too many header lines\n",
                )
            }
            Err(e) => {
                return respond(
                    &mut client,
                    400,
                    &format!("cordon: malformed request head: {e}\n"),
                )
            }
        }
        if buf.len() >= MAX_HEAD {
            return respond(&mut client, 431, "cordon: request head too large\n");
        }
        let want = chunk.len().min(MAX_HEAD - buf.len());
        let n = client.read(&mut chunk[..want])?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    req.parse(&buf[..head_len])
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let method = req.method.unwrap_or("");
    let target = req.path.unwrap_or("");
    let early = &buf[head_len..];

    if method.eq_ignore_ascii_case("CONNECT") {
        let Some((host, Some(port))) = split_authority(target) else {
            return respond(
                &mut client,
                400,
                "cordon: CONNECT needs HOST:PORT, e.g. `CONNECT example.com:443`\n",
            );
        };
        match shared.decide(Proto::Connect, host, port) {
            Verdict::Connected(upstream) => {
                client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")?;
                shared.tunnel(client, upstream, early)
            }
            Verdict::Denied(msg) => respond(&mut client, 403, &msg),
            Verdict::Failed(msg, _) => respond(&mut client, 502, &msg),
        }
    } else {
        let Some(rest) = strip_prefix_ignore_case(target, "http://") else {
            let msg = if strip_prefix_ignore_case(target, "https://").is_some() {
                "cordon: https:// URLs go through CONNECT; plain forwarding is for http:// only\n"
            } else {
                "cordon: this is an egress proxy; send an absolute http:// URL or CONNECT HOST:PORT\n"
            };
            return respond(&mut client, 400, msg);
        };
        let (authority, path) = match rest.find(['/', '?', '#']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let path = path.split('#').next().unwrap_or("");
        let authority = authority.rsplit('@').next().unwrap_or(authority);
        let Some((host, port)) = split_authority(authority) else {
            return respond(
                &mut client,
                400,
                &format!("cordon: cannot read the host in `{target}`\n"),
            );
        };
        let port = port.unwrap_or(80);
        let mut head = Vec::with_capacity(head_len + 64);
        let path = if path.is_empty() {
            "/".to_string()
        } else if path.starts_with('?') {
            format!("/{path}")
        } else {
            path.to_string()
        };
        write!(
            head,
            "{method} {path} HTTP/1.{}\r\nHost: {authority}\r\n",
            req.version.unwrap_or(1)
        )?;
        let listed = connection_listed(req.headers);
        for h in req.headers.iter() {
            let lname = h.name.to_ascii_lowercase();
            if is_hop_by_hop(&lname) || listed.contains(&lname) {
                continue;
            }
            head.extend_from_slice(h.name.as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(h.value);
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(b"Connection: close\r\n\r\n");
        head.extend_from_slice(early);
        match shared.decide(Proto::Http, host, port) {
            Verdict::Connected(upstream) => shared.tunnel(client, upstream, &head),
            Verdict::Denied(msg) => respond(&mut client, 403, &msg),
            Verdict::Failed(msg, _) => respond(&mut client, 502, &msg),
        }
    }
}

fn is_hop_by_hop(lname: &str) -> bool {
    HOP_BY_HOP.contains(&lname) || lname.starts_with("proxy-")
}

/// Header names listed in `Connection:` (they are hop-by-hop for this request).
fn connection_listed(headers: &[httparse::Header<'_>]) -> Vec<String> {
    headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("connection"))
        .filter_map(|h| std::str::from_utf8(h.value).ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect()
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

/// Split `host[:port]` / `[v6][:port]`. `None` when the port is present but invalid.
pub(crate) fn split_authority(a: &str) -> Option<(&str, Option<u16>)> {
    let (host, port) = if a.starts_with('[') {
        let end = a.find(']')?;
        let after = &a[end + 1..];
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (&a[..=end], port)
    } else {
        match a.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (a, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n != 0 => Some(n),
            _ => return None,
        },
    };
    Some((host, port))
}

/// Send a short plain-text response and close.
pub(crate) fn respond(client: &mut TcpStream, code: u16, body: &str) -> io::Result<()> {
    let reason = match code {
        400 => "Bad Request",
        403 => "Forbidden",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        _ => "Error",
    };
    let resp = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    client.write_all(resp.as_bytes())?;
    client.flush()?;
    // Close gently: closing with unread input would send a reset that can destroy the
    // response before the client reads it. Discard a bounded amount, briefly.
    let _ = client.shutdown(std::net::Shutdown::Write);
    let _ = client.set_read_timeout(Some(std::time::Duration::from_millis(500)));
    let mut sink = [0u8; 4096];
    let mut total = 0;
    while total < MAX_HEAD {
        match client.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n,
        }
    }
    Ok(())
}
