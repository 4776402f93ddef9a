//! Proxy tests. Everything runs on loopback: tiny servers on 127.0.0.1:0, the proxy's
//! listener on 127.0.0.1:0, and names pinned to 127.0.0.1 via `hosts`. No real name is
//! resolved except `localhost`, only to check that it is refused.

use super::*;
use std::io::{BufRead, BufReader};
use std::net::Shutdown;
use std::sync::atomic::AtomicUsize;

const LO: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

/// An echo server; returns its port.
fn echo_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            thread::spawn(move || {
                let mut r = s.try_clone().unwrap();
                let _ = io::copy(&mut r, &mut s);
                let _ = s.shutdown(Shutdown::Write);
            });
        }
    });
    port
}

/// An HTTP server answering every request with its own request head as the body.
fn http_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            thread::spawn(move || {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if s.read(&mut b).unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(b[0]);
                }
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    head.len()
                );
                let _ = s.write_all(resp.as_bytes());
                let _ = s.write_all(&head);
            });
        }
    });
    port
}

fn config(allow: &[&str]) -> EgressConfig {
    EgressConfig {
        allow: allow.iter().map(|a| AllowRule::parse(a).unwrap()).collect(),
        hosts: vec![
            ("allowed.test".into(), LO),
            ("blocked.test".into(), LO),
            ("a.example.test".into(), LO),
            ("example.test".into(), LO),
        ],
        quiet: true,
        ..Default::default()
    }
}

fn proxy(cfg: EgressConfig) -> (ProxyHandle, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    (start(l, cfg).unwrap(), addr)
}

fn client(proxy: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Send `CONNECT target` and return the status code and the stream.
fn connect(proxy: SocketAddr, target: &str) -> (u16, TcpStream) {
    let mut s = client(proxy);
    write!(s, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
    let code = read_status(&mut s);
    (code, s)
}

/// Read a response head byte by byte (so no tunnel data is consumed); return the code.
fn read_status(s: &mut TcpStream) -> u16 {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).unwrap(), 1, "eof in head: {head:?}");
        head.push(b[0]);
    }
    let text = String::from_utf8(head).unwrap();
    text.split(' ').nth(1).unwrap().parse().unwrap()
}

fn read_all(s: &mut TcpStream) -> String {
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn assert_echo(s: &mut TcpStream, msg: &[u8]) {
    s.write_all(msg).unwrap();
    let mut got = vec![0; msg.len()];
    s.read_exact(&mut got).unwrap();
    assert_eq!(got, msg);
}

#[test]
fn connect_tunnel_echoes() {
    let echo = echo_server();
    let (p, addr) = proxy(config(&[&format!("allowed.test:{echo}")]));
    let (code, mut s) = connect(addr, &format!("allowed.test:{echo}"));
    assert_eq!(code, 200);
    assert_echo(&mut s, b"hello through the tunnel");
    assert_echo(&mut s, b"and again");
    // Half-close: our EOF reaches the echo server, whose EOF comes back.
    s.write_all(b"last").unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_all(&mut s), "last");
    assert!(p.denied().is_empty());
}

#[test]
fn connect_with_early_data() {
    let echo = echo_server();
    let (_p, addr) = proxy(config(&[&format!("allowed.test:{echo}")]));
    let mut s = client(addr);
    write!(s, "CONNECT allowed.test:{echo} HTTP/1.1\r\n\r\nearly bytes").unwrap();
    assert_eq!(read_status(&mut s), 200);
    let mut got = [0u8; 11];
    s.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"early bytes");
}

#[test]
fn plain_get_is_forwarded_in_origin_form() {
    let web = http_server();
    let (_p, addr) = proxy(config(&[&format!("allowed.test:{web}")]));
    let mut s = client(addr);
    write!(
        s,
        "GET http://allowed.test:{web}/path?q=1 HTTP/1.1\r\nHost: allowed.test:{web}\r\n\
         Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\n\
         Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nX-Kept: yes\r\n\r\n"
    )
    .unwrap();
    let resp = read_all(&mut s);
    assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
    let body = resp.split_once("\r\n\r\n").unwrap().1;
    assert!(body.starts_with("GET /path?q=1 HTTP/1.1\r\n"), "{body}");
    assert!(
        body.contains(&format!("Host: allowed.test:{web}\r\n")),
        "{body}"
    );
    assert!(body.contains("X-Kept: yes\r\n"), "{body}");
    assert!(body.contains("Connection: close\r\n"), "{body}");
    let lower = body.to_ascii_lowercase();
    assert!(!lower.contains("proxy-"), "{body}");
    assert!(!lower.contains("x-hop"), "{body}");
    assert!(!lower.contains("keep-alive"), "{body}");
}

#[test]
fn plain_get_without_path() {
    let web = http_server();
    let (_p, addr) = proxy(config(&[&format!("allowed.test:{web}")]));
    let mut s = client(addr);
    write!(s, "GET http://allowed.test:{web} HTTP/1.0\r\n\r\n").unwrap();
    let resp = read_all(&mut s);
    let body = resp.split_once("\r\n\r\n").unwrap().1;
    assert!(body.starts_with("GET / HTTP/1.0\r\n"), "{body}");
}

#[test]
fn blocked_host_gets_403_and_is_recorded() {
    let echo = echo_server();
    let (p, addr) = proxy(config(&[&format!("allowed.test:{echo}")]));
    let (code, mut s) = connect(addr, &format!("blocked.test:{echo}"));
    assert_eq!(code, 403);
    let body = read_all(&mut s);
    assert!(
        body.contains(&format!(
            "cordon: egress to blocked.test:{echo} is not in net.allow"
        )),
        "{body}"
    );
    // Plain forwarding is refused the same way; repeats are recorded once.
    let mut s = client(addr);
    write!(s, "GET http://BLOCKED.test.:{echo}/ HTTP/1.1\r\n\r\n").unwrap();
    assert_eq!(read_status(&mut s), 403);
    let (code, _) = connect(addr, "other.test:1");
    assert_eq!(code, 403);
    assert_eq!(
        p.denied(),
        vec![format!("blocked.test:{echo}"), "other.test:1".to_string()]
    );
}

#[test]
fn allowed_host_on_wrong_port_is_refused() {
    let echo = echo_server();
    let (p, addr) = proxy(config(&["allowed.test"]));
    // A bare name means 80 and 443 only.
    let (code, _) = connect(addr, &format!("allowed.test:{echo}"));
    assert_eq!(code, 403);
    assert_eq!(p.denied(), vec![format!("allowed.test:{echo}")]);
}

#[test]
fn unpinned_localhost_is_refused() {
    let echo = echo_server();
    let (p, addr) = proxy(config(&[&format!("localhost:{echo}")]));
    let (code, mut s) = connect(addr, &format!("localhost:{echo}"));
    assert_eq!(code, 403);
    assert!(read_all(&mut s).contains("local address"));
    assert_eq!(p.denied(), vec![format!("localhost:{echo}")]);
}

#[test]
fn local_addresses_allowed_by_ip_literal_or_allow_local() {
    let echo = echo_server();
    let (_p, addr) = proxy(config(&[&format!("127.0.0.1:{echo}")]));
    let (code, mut s) = connect(addr, &format!("127.0.0.1:{echo}"));
    assert_eq!(code, 200);
    assert_echo(&mut s, b"ip literal");

    let mut cfg = config(&[&format!("localhost:{echo}")]);
    cfg.allow_local = true;
    let (_p, addr) = proxy(cfg);
    let (code, mut s) = connect(addr, &format!("localhost:{echo}"));
    assert_eq!(code, 200);
    assert_echo(&mut s, b"allow_local");
}

#[test]
fn wildcard_through_proxy() {
    let echo = echo_server();
    let (p, addr) = proxy(config(&[&format!("*.example.test:{echo}")]));
    let (code, mut s) = connect(addr, &format!("a.example.test:{echo}"));
    assert_eq!(code, 200);
    assert_echo(&mut s, b"wild");
    let (code, _) = connect(addr, &format!("example.test:{echo}"));
    assert_eq!(code, 403);
    assert_eq!(p.denied(), vec![format!("example.test:{echo}")]);
}

#[test]
fn upstream_refused_gives_502() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let (p, addr) = proxy(config(&[&format!("allowed.test:{port}")]));
    let (code, _) = connect(addr, &format!("allowed.test:{port}"));
    assert_eq!(code, 502);
    assert!(p.denied().is_empty());
}

#[test]
fn bad_requests() {
    let (_p, addr) = proxy(config(&["allowed.test"]));
    let mut s = client(addr);
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(read_status(&mut s), 400);
    let (code, _) = connect(addr, "allowed.test");
    assert_eq!(code, 400);
    // A head that never ends is cut at 64 KiB.
    let mut s = client(addr);
    s.write_all(b"GET http://allowed.test/ HTTP/1.1\r\n")
        .unwrap();
    let filler = format!("X-Filler: {}\r\n", "a".repeat(1000));
    for _ in 0..100 {
        if s.write_all(filler.as_bytes()).is_err() {
            break;
        }
    }
    assert_eq!(read_status(&mut s), 431);
}

fn socks_connect(proxy: SocketAddr, atyp: u8, addr: &[u8], port: u16) -> (u8, TcpStream) {
    let mut s = client(proxy);
    s.write_all(&[5, 1, 0]).unwrap();
    let mut r = [0u8; 2];
    s.read_exact(&mut r).unwrap();
    assert_eq!(r, [5, 0]);
    let mut req = vec![5, 1, 0, atyp];
    if atyp == 3 {
        req.push(addr.len() as u8);
    }
    req.extend_from_slice(addr);
    req.extend_from_slice(&port.to_be_bytes());
    s.write_all(&req).unwrap();
    let mut rep = [0u8; 10];
    s.read_exact(&mut rep).unwrap();
    assert_eq!(rep[0], 5);
    (rep[1], s)
}

#[test]
fn socks5_connect() {
    let echo = echo_server();
    let (p, addr) = proxy(config(&[
        &format!("allowed.test:{echo}"),
        &format!("127.0.0.1:{echo}"),
        &format!("[::1]:{echo}"),
    ]));
    let (code, mut s) = socks_connect(addr, 3, b"allowed.test", echo);
    assert_eq!(code, 0);
    assert_echo(&mut s, b"socks domain");
    let (code, mut s) = socks_connect(addr, 1, &[127, 0, 0, 1], echo);
    assert_eq!(code, 0);
    assert_echo(&mut s, b"socks v4");
    let (code, _) = socks_connect(addr, 3, b"blocked.test", echo);
    assert_eq!(code, 2);
    let (code, _) = socks_connect(addr, 3, "bl\u{f6}cked.test".as_bytes(), echo);
    assert_eq!(code, 2);
    // An IPv6 literal that is allowed but (maybe) not served: refused or unreachable,
    // never "not allowed"; no IPv6 listener is assumed to exist.
    let (code, _) = socks_connect(addr, 4, &std::net::Ipv6Addr::LOCALHOST.octets(), echo);
    assert_ne!(code, 2);
    let (code, _) = socks_connect(addr, 4, &std::net::Ipv6Addr::LOCALHOST.octets(), 1);
    assert_eq!(code, 2);
    assert_eq!(p.denied()[0], format!("blocked.test:{echo}"));
    assert_eq!(p.denied()[2], "[::1]:1");
}

#[test]
fn socks5_requires_no_auth_method() {
    let (_p, addr) = proxy(config(&["allowed.test"]));
    let mut s = client(addr);
    s.write_all(&[5, 1, 2]).unwrap();
    let mut r = [0u8; 2];
    s.read_exact(&mut r).unwrap();
    assert_eq!(r, [5, 0xff]);
}

#[test]
fn forty_concurrent_tunnels() {
    let echo = echo_server();
    let (_p, addr) = proxy(config(&[&format!("allowed.test:{echo}")]));
    let ok = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..40)
        .map(|i| {
            let ok = ok.clone();
            thread::spawn(move || {
                let (code, mut s) = connect(addr, &format!("allowed.test:{echo}"));
                assert_eq!(code, 200);
                let msg = format!("tunnel {i} ").repeat(1000);
                for _ in 0..5 {
                    assert_echo(&mut s, msg.as_bytes());
                }
                ok.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(ok.load(Ordering::SeqCst), 40);
}

#[test]
fn json_log_has_one_line_per_request() {
    let echo = echo_server();
    let web = http_server();
    let dir = std::env::temp_dir().join(format!("cordon-egress-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("net.log");
    let _ = std::fs::remove_file(&log);
    let mut cfg = config(&[
        &format!("allowed.test:{echo}"),
        &format!("allowed.test:{web}"),
    ]);
    cfg.log = Some(log.clone());
    let (p, addr) = proxy(cfg);
    let (code, mut s) = connect(addr, &format!("allowed.test:{echo}"));
    assert_eq!(code, 200);
    assert_echo(&mut s, b"x");
    let (code, _) = connect(addr, &format!("blocked.test:{echo}"));
    assert_eq!(code, 403);
    let mut s = client(addr);
    write!(s, "GET http://allowed.test:{web}/ HTTP/1.1\r\n\r\n").unwrap();
    read_all(&mut s);
    let (code, _) = socks_connect(addr, 3, b"blocked.test", 9);
    assert_eq!(code, 2);
    p.stop();
    let lines: Vec<serde_json::Value> = BufReader::new(File::open(&log).unwrap())
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    let summary: Vec<(String, String, u64, String)> = lines
        .iter()
        .map(|v| {
            assert!(v["time"].as_u64().unwrap() > 1_600_000_000);
            assert!(v["reason"].is_string());
            (
                v["proto"].as_str().unwrap().to_string(),
                v["host"].as_str().unwrap().to_string(),
                v["port"].as_u64().unwrap(),
                v["decision"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let e = echo as u64;
    assert_eq!(
        summary,
        vec![
            ("connect".into(), "allowed.test".into(), e, "allow".into()),
            ("connect".into(), "blocked.test".into(), e, "deny".into()),
            (
                "http".into(),
                "allowed.test".into(),
                web as u64,
                "allow".into()
            ),
            ("socks5".into(), "blocked.test".into(), 9, "deny".into()),
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn idle_tunnel_is_closed() {
    let echo = echo_server();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let cfg = config(&[&format!("allowed.test:{echo}")]);
    let _p = start_with_idle(l, cfg, Duration::from_millis(300)).unwrap();
    let (code, mut s) = connect(addr, &format!("allowed.test:{echo}"));
    assert_eq!(code, 200);
    // Traffic keeps it open past the timeout...
    for _ in 0..4 {
        thread::sleep(Duration::from_millis(150));
        assert_echo(&mut s, b"ping");
    }
    // ...silence closes it.
    let t = std::time::Instant::now();
    assert_eq!(read_all(&mut s), "");
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn stop_is_prompt_and_closes_the_port() {
    let (p, addr) = proxy(config(&["allowed.test"]));
    let t = std::time::Instant::now();
    p.stop();
    assert!(t.elapsed() < Duration::from_secs(2));
    assert!(TcpStream::connect(addr).is_err());
}

/// 64 MiB through a tunnel arrives intact (the splice path under load).
#[test]
fn bulk_transfer_is_intact() {
    let echo = echo_server();
    let (_p, addr) = proxy(config(&[&format!("allowed.test:{echo}")]));
    let (code, s) = connect(addr, &format!("allowed.test:{echo}"));
    assert_eq!(code, 200);
    let total = 64usize << 20;
    let mut w = s.try_clone().unwrap();
    let writer = thread::spawn(move || {
        let block: Vec<u8> = (0..65536u32).map(|i| (i * 7 % 251) as u8).collect();
        for _ in 0..total / block.len() {
            w.write_all(&block).unwrap();
        }
        w.shutdown(Shutdown::Write).unwrap();
    });
    let mut r = s;
    let mut buf = vec![0u8; 65536];
    let mut got = 0usize;
    loop {
        let n = r.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        for (k, b) in buf[..n].iter().enumerate() {
            let i = ((got + k) % 65536) as u32;
            assert_eq!(*b, (i * 7 % 251) as u8);
        }
        got += n;
    }
    writer.join().unwrap();
    assert_eq!(got, total);
}
