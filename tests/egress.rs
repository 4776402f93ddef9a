//! Integration tests of network mode `egress` (issue #5): the real binary, the real
//! kernel, `curl` inside the sandbox.
//!
//! Every server is started by the test itself on `127.0.0.1:0`; the sandbox reaches it
//! through cordon's proxy under the made-up names `allowed.test` and `blocked.test`,
//! both pinned to 127.0.0.1 (`[net.hosts]` / `--add-host`), so no name is ever looked up
//! in DNS and no other address is ever contacted.
//!
//! Unlike the core suite, these runs choose their enforcement flags themselves: the
//! network namespace comes with the view, so most tests run with it (cordon's default),
//! and the Landlock-only fallback is tested on purpose with `--no-view`.

mod common;

use common::{finish, run, s, Fixture, Out};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------
// Helpers.

/// A tiny HTTP server on 127.0.0.1:0 that answers every request with a body naming the
/// path it was asked for, and counts the connections it accepted.
struct Server {
    port: u16,
    listener: Arc<TcpListener>,
    hits: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback server");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let listener = Arc::new(listener);
        let hits = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (listener, hits, stop) = (listener.clone(), hits.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    if !accept_one(&listener, &hits, port) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
            })
        };
        Server {
            port,
            listener,
            hits,
            stop,
            thread: Some(thread),
        }
    }

    /// The connections accepted so far, counting every connection already established:
    /// the backlog is drained first, so a connection made before this call is never
    /// missed because the server thread had not picked it up yet.
    fn hits(&self) -> usize {
        while accept_one(&self.listener, &self.hits, self.port) {}
        self.hits.load(Ordering::SeqCst)
    }

    /// The body this server sends for `path`.
    fn body(&self, path: &str) -> String {
        body(self.port, path)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn body(port: u16, path: &str) -> String {
    format!("cordon-egress-test port={port} path={path}\n")
}

/// Accept one pending connection, if any, and serve it on its own thread.
fn accept_one(listener: &TcpListener, hits: &AtomicUsize, port: u16) -> bool {
    match listener.accept() {
        Ok((stream, _)) => {
            hits.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || serve(stream, port));
            true
        }
        Err(e) if e.kind() == ErrorKind::WouldBlock => false,
        Err(e) if e.kind() == ErrorKind::Interrupted => true,
        Err(_) => false,
    }
}

/// Answer one HTTP/1.x request (`Connection: close`).
fn serve(mut stream: TcpStream, port: u16) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(20)));
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 * 1024 {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head);
    let path = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("?")
        .to_string();
    let body = body(port, &path);
    let resp = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(resp.as_bytes());
    let _ = stream.shutdown(std::net::Shutdown::Write);
    // Let the client close first, so no reset can destroy the response.
    let _ = stream.read(&mut buf);
}

/// How the allowlist is given: in a policy file, or with command-line flags.
#[derive(Debug, Clone, Copy)]
enum Via {
    File,
    Cli,
}

/// Options allowing `allowed.test:port` and pinning `allowed.test` and `blocked.test`
/// to 127.0.0.1, either as a policy file or as flags.
fn allow_args(fx: &Fixture, via: Via, port: u16) -> Vec<String> {
    match via {
        Via::File => {
            let policy = fx.policy(
                "egress.toml",
                &format!(
                    "extends = [\"default\"]\n\
                     [net]\n\
                     mode = \"egress\"\n\
                     allow = [\"allowed.test:{port}\"]\n\
                     [net.hosts]\n\
                     \"allowed.test\" = \"127.0.0.1\"\n\
                     \"blocked.test\" = \"127.0.0.1\"\n"
                ),
            );
            vec!["-p".into(), s(&policy).into()]
        }
        Via::Cli => vec![
            "--allow-host".into(),
            format!("allowed.test:{port}"),
            "--add-host".into(),
            "allowed.test=127.0.0.1".into(),
            "--add-host".into(),
            "blocked.test=127.0.0.1".into(),
        ],
    }
}

/// `cordon OPTIONS -- sh -c SCRIPT` in the fixture, with the view (no mode flags).
fn sh(fx: &Fixture, options: &[String], script: &str) -> Command {
    let mut cmd = fx.bare();
    cmd.args(options).args(["--", "sh", "-c", script]);
    cmd
}

/// `curl` with bounded time and errors shown.
const CURL: &str = "curl -sS --max-time 30";

/// The line cordon prints for each refused destination.
fn denied_line(target: &str) -> String {
    format!("cordon: egress denied: {target}")
}

/// The exit summary naming refused destinations.
const SUMMARY: &str = "cordon: egress refused during this run:";

fn summary_line(out: &Out) -> Option<&str> {
    out.stderr.lines().find(|l| l.starts_with(SUMMARY))
}

// ---------------------------------------------------------------------------------------
// Allowed destinations: plain forwarding, CONNECT, SOCKS5.

fn fetches_an_allowed_host(via: Via) {
    let fx = Fixture::new("egress-allowed");
    let srv = Server::start();
    let p1 = srv.port;
    let script = format!(
        "{CURL} http://allowed.test:{p1}/plain && {CURL} -p http://allowed.test:{p1}/tunnel"
    );
    let out = run(&mut sh(&fx, &allow_args(&fx, via, p1), &script));
    assert_eq!(out.code, Some(0), "{out}");
    assert_eq!(
        out.stdout,
        format!("{}{}", srv.body("/plain"), srv.body("/tunnel")),
        "{out}"
    );
    assert_eq!(srv.hits(), 2, "one upstream connection per request: {out}");
    assert!(!out.stderr.contains("egress denied"), "{out}");
    assert!(summary_line(&out).is_none(), "{out}");
}

#[test]
fn policy_file_allowlist_fetches_through_http_proxy_and_connect() {
    fetches_an_allowed_host(Via::File);
}

#[test]
fn command_line_allowlist_fetches_through_http_proxy_and_connect() {
    fetches_an_allowed_host(Via::Cli);
}

#[test]
fn proxy_variables_point_at_the_proxy_inside() {
    let fx = Fixture::new("egress-env");
    let srv = Server::start();
    let out = run(fx
        .bare()
        .args(allow_args(&fx, Via::Cli, srv.port))
        .args(["--", "env"]));
    assert_eq!(out.code, Some(0), "{out}");
    let env = common::parse_env(&out.stdout);
    let get = |name: &str| {
        env.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("{name} not set: {out}"))
    };
    let http = get("http_proxy");
    assert!(
        http.starts_with("http://127.0.0.1:") && http.len() > "http://127.0.0.1:".len(),
        "{out}"
    );
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "https_proxy"] {
        assert_eq!(get(name), http, "{name}: {out}");
    }
    let socks = http.replacen("http://", "socks5h://", 1);
    assert_eq!(get("ALL_PROXY"), socks, "{out}");
    assert_eq!(get("all_proxy"), socks, "{out}");
    assert!(get("NO_PROXY").contains("localhost"), "{out}");
    assert!(get("no_proxy").contains("127.0.0.1"), "{out}");
}

#[test]
fn socks5_through_all_proxy() {
    let fx = Fixture::new("egress-socks");
    let srv = Server::start();
    let other = Server::start();
    let (p1, p2) = (srv.port, other.port);
    let script = format!(
        "case \"$ALL_PROXY\" in socks5h://*) ;; *) echo \"ALL_PROXY=$ALL_PROXY\"; exit 90;; esac
         {CURL} --proxy \"$ALL_PROXY\" http://allowed.test:{p1}/socks || exit 91
         {CURL} --proxy \"$ALL_PROXY\" http://blocked.test:{p2}/socks
         echo \"blocked: $?\""
    );
    let out = run(&mut sh(&fx, &allow_args(&fx, Via::Cli, p1), &script));
    assert_eq!(out.code, Some(0), "{out}");
    // curl's exit 97: the SOCKS5 proxy refused the connection.
    assert_eq!(
        out.stdout,
        format!("{}blocked: 97\n", srv.body("/socks")),
        "{out}"
    );
    assert_eq!(srv.hits(), 1, "{out}");
    assert_eq!(other.hits(), 0, "{out}");
    assert!(
        out.stderr
            .contains(&denied_line(&format!("blocked.test:{p2}"))),
        "{out}"
    );
}

// ---------------------------------------------------------------------------------------
// Refused destinations: 403, a line on stderr per destination, a summary at exit.

fn refuses_unlisted_destinations(via: Via) {
    let fx = Fixture::new("egress-denied");
    let srv = Server::start();
    let other = Server::start();
    let (p1, p2) = (srv.port, other.port);
    let code = "-o /dev/null -w '%{http_code}\\n'";
    let script = format!(
        "{CURL} {code} http://blocked.test:{p2}/
         {CURL} {code} http://allowed.test:{p2}/
         {CURL} {code} http://blocked.test:{p1}/
         {CURL} -p -o /dev/null -w '%{{http_connect}}\\n' http://blocked.test:{p2}/
         echo \"connect: $?\""
    );
    let out = run(&mut sh(&fx, &allow_args(&fx, via, p1), &script));
    assert_eq!(out.code, Some(0), "{out}");
    // The CONNECT refusal is the proxy's 403 answer to CONNECT; curl exits 56 ("CONNECT
    // tunnel failed, response 403").
    assert_eq!(out.stdout, "403\n403\n403\n403\nconnect: 56\n", "{out}");
    assert_eq!(srv.hits(), 0, "a refused request reached the server: {out}");
    assert_eq!(
        other.hits(),
        0,
        "a refused request reached the server: {out}"
    );
    let targets = [
        format!("blocked.test:{p2}"),
        format!("allowed.test:{p2}"),
        format!("blocked.test:{p1}"),
    ];
    for t in &targets {
        // Once per destination, however often it was asked for.
        let line = denied_line(t);
        assert_eq!(
            out.stderr.lines().filter(|l| *l == line).count(),
            1,
            "{line}: {out}"
        );
    }
    let summary = summary_line(&out).unwrap_or_else(|| panic!("no summary: {out}"));
    assert_eq!(
        summary,
        format!("{SUMMARY} {}", targets.join(", ")),
        "{out}"
    );
}

#[test]
fn policy_file_allowlist_refuses_other_hosts_and_ports() {
    refuses_unlisted_destinations(Via::File);
}

#[test]
fn command_line_allowlist_refuses_other_hosts_and_ports() {
    refuses_unlisted_destinations(Via::Cli);
}

#[test]
fn quiet_run_refuses_without_denial_lines_or_summary() {
    let fx = Fixture::new("egress-quiet");
    let srv = Server::start();
    let other = Server::start();
    let mut options = allow_args(&fx, Via::Cli, srv.port);
    options.push("-q".into());
    let script = format!(
        "{CURL} -o /dev/null -w '%{{http_code}}\\n' http://blocked.test:{}/",
        other.port
    );
    let out = run(&mut sh(&fx, &options, &script));
    assert_eq!(out.code, Some(0), "{out}");
    assert_eq!(out.stdout, "403\n", "{out}");
    assert_eq!(other.hits(), 0, "{out}");
    assert!(!out.stderr.contains("egress denied"), "{out}");
    assert!(summary_line(&out).is_none(), "{out}");
}

#[test]
fn an_unpinned_name_resolving_to_loopback_is_refused() {
    let fx = Fixture::new("egress-localhost");
    let srv = Server::start();
    let p1 = srv.port;
    // NO_PROXY lists localhost; `--noproxy ''` makes curl use the proxy anyway.
    let script = format!(
        "{CURL} --noproxy '' -o /dev/null -w '%{{http_code}}\\n' http://localhost:{p1}/
         {CURL} --noproxy '' -p http://localhost:{p1}/
         echo \"connect: $?\""
    );
    let options = ["--allow-host".to_string(), format!("localhost:{p1}")];
    let out = run(&mut sh(&fx, &options, &script));
    assert_eq!(out.code, Some(0), "{out}");
    assert_eq!(out.stdout, "403\nconnect: 56\n", "{out}");
    assert_eq!(srv.hits(), 0, "{out}");
    assert!(
        out.stderr
            .contains(&denied_line(&format!("localhost:{p1}"))),
        "{out}"
    );
}

#[test]
fn an_ip_literal_or_allow_local_entry_may_reach_loopback() {
    let fx = Fixture::new("egress-literal");
    let srv = Server::start();
    let p1 = srv.port;
    let script = format!("{CURL} --noproxy '' http://127.0.0.1:{p1}/literal");
    let options = ["--allow-host".to_string(), format!("127.0.0.1:{p1}")];
    let out = run(&mut sh(&fx, &options, &script));
    assert_eq!(out.code, Some(0), "{out}");
    assert_eq!(out.stdout, srv.body("/literal"), "{out}");

    let policy = fx.policy(
        "local.toml",
        &format!(
            "extends = [\"default\"]\n[net]\nmode = \"egress\"\nallow = [\"localhost:{p1}\"]\nallow_local = true\n"
        ),
    );
    let script = format!("{CURL} --noproxy '' http://localhost:{p1}/local");
    let out = run(&mut sh(&fx, &["-p".into(), s(&policy).into()], &script));
    assert_eq!(out.code, Some(0), "{out}");
    assert_eq!(out.stdout, srv.body("/local"), "{out}");
    assert_eq!(srv.hits(), 2, "{out}");
}

// ---------------------------------------------------------------------------------------
// Nothing leaves the namespace except through the proxy.

#[test]
fn direct_connection_bypassing_the_proxy_fails() {
    let fx = Fixture::new("egress-direct");
    let srv = Server::start();
    let p1 = srv.port;
    let script = format!(
        "{CURL} --noproxy '*' http://127.0.0.1:{p1}/direct; echo \"direct: $?\"
         {CURL} --noproxy '*' http://allowed.test:{p1}/direct; echo \"by name: $?\""
    );
    let out = run(&mut sh(&fx, &allow_args(&fx, Via::Cli, p1), &script));
    assert_eq!(out.code, Some(0), "{out}");
    // 7: connection refused (the namespace's own loopback has nothing on that port);
    // 6: the name does not resolve (there is no DNS inside).
    assert_eq!(out.stdout, "direct: 7\nby name: 6\n", "{out}");
    assert_eq!(srv.hits(), 0, "the host server saw a connection: {out}");
}

#[test]
fn the_proxy_is_not_reachable_from_the_host() {
    let fx = Fixture::new("egress-listener");
    let srv = Server::start();
    let p1 = srv.port;
    let (ready, done) = (fx.cwd.join("ready"), fx.cwd.join("done"));
    // Inside: prove the proxy serves, then wait (bounded) while the host tries it.
    let script = format!(
        "{CURL} -o /dev/null http://allowed.test:{p1}/inside || exit 90
         printf %s \"$http_proxy\" > ready.tmp && mv ready.tmp ready
         i=0; while [ ! -e done ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done"
    );
    let mut cmd = sh(&fx, &allow_args(&fx, Via::Cli, p1), &script);
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cordon");
    let started = Instant::now();
    let is_ready = common::wait_until(Duration::from_secs(30), || ready.exists());
    // The address the command was told about, tried from the host's loopback: cordon's
    // proxy is not there (its socket lives in the sandbox's namespace). Whatever else may
    // listen on that port cannot resolve the made-up name, so the server must see no
    // second connection.
    let mut reached = None;
    if is_ready {
        let proxy = std::fs::read_to_string(&ready).unwrap();
        let port: u16 = proxy
            .strip_prefix("http://127.0.0.1:")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("http_proxy inside: {proxy:?}"));
        if let Ok(mut c) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = c.write_all(
                format!(
                    "GET http://allowed.test:{p1}/outside HTTP/1.1\r\nHost: allowed.test\r\n\r\n"
                )
                .as_bytes(),
            );
            let mut answer = String::new();
            let _ = c.read_to_string(&mut answer);
            reached = Some(answer);
        }
    }
    std::fs::write(&done, "").unwrap();
    let out = finish(child, started);
    assert!(
        is_ready,
        "the command never fetched through the proxy: {out}"
    );
    assert_eq!(out.code, Some(0), "{out}");
    assert_eq!(
        srv.hits(),
        1,
        "the host reached the server through the proxy: {reached:?}"
    );
}

/// A UDP datagram to 127.0.0.1:PORT, sent from inside with the given options; whether
/// it reached the host-side listener on that port.
fn udp_datagram_arrives(fx: &Fixture, options: &[String]) -> bool {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = sock.local_addr().unwrap().port();
    let code = format!(
        "import socket\n\
         s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
         s.sendto(b'cordon-udp', ('127.0.0.1', {port}))\n\
         print('sent')\n"
    );
    let out = run(fx.bare().args(options).args(["--", "python3", "-c", &code]));
    assert_eq!(out.code, Some(0), "{out}");
    assert_eq!(out.stdout, "sent\n", "{out}");
    // The datagram, if it left at all, is queued by the time the command has exited.
    sock.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut buf = [0u8; 64];
    match sock.recv_from(&mut buf) {
        Ok((n, _)) => {
            assert_eq!(&buf[..n], b"cordon-udp");
            true
        }
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => false,
        Err(e) => panic!("recv: {e}"),
    }
}

#[test]
fn udp_from_inside_never_reaches_the_host() {
    let fx = Fixture::new("egress-udp");
    let srv = Server::start();
    assert!(
        !udp_datagram_arrives(&fx, &allow_args(&fx, Via::Cli, srv.port)),
        "a datagram left the egress sandbox"
    );
    assert!(
        !udp_datagram_arrives(&fx, &[]),
        "a datagram left the default (net none) sandbox"
    );
    // The other side: with the host network the same datagram does arrive.
    assert!(
        udp_datagram_arrives(&fx, &["--net".into(), "host".into()]),
        "the probe sends nothing even with the host network"
    );
}

#[test]
fn net_none_reaches_nothing() {
    let fx = Fixture::new("egress-none");
    let srv = Server::start();
    let p1 = srv.port;
    let script = format!("{CURL} http://127.0.0.1:{p1}/none; echo \"curl: $?\"; env");
    for options in [vec![], vec!["--net".to_string(), "none".to_string()]] {
        let out = run(&mut sh(&fx, &options, &script));
        assert_eq!(out.code, Some(0), "{out}");
        assert!(out.stdout.starts_with("curl: 7\n"), "{out}");
        assert!(
            !out.stdout.to_ascii_lowercase().contains("_proxy="),
            "proxy variables set in mode none: {out}"
        );
    }
    assert_eq!(srv.hits(), 0, "the host server saw a connection");
}

#[test]
fn net_host_reaches_the_server_directly() {
    let fx = Fixture::new("egress-host");
    let srv = Server::start();
    let script = format!("{CURL} http://127.0.0.1:{}/host", srv.port);
    let out = run(&mut sh(&fx, &["--net".into(), "host".into()], &script));
    assert_eq!(out.code, Some(0), "{out}");
    assert_eq!(out.stdout, srv.body("/host"), "{out}");
    assert_eq!(srv.hits(), 1);
}

// ---------------------------------------------------------------------------------------
// Load.

#[test]
fn forty_concurrent_runs_through_the_proxy() {
    const RUNS: usize = 40;
    let fx = Fixture::new("egress-many");
    let srv = Server::start();
    let options = allow_args(&fx, Via::File, srv.port);
    let started = Instant::now();
    let children: Vec<_> = (0..RUNS)
        .map(|i| {
            let script = format!("{CURL} http://allowed.test:{}/run-{i}", srv.port);
            sh(&fx, &options, &script)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn cordon")
        })
        .collect();
    let outs: Vec<Out> = children.into_iter().map(|c| finish(c, started)).collect();
    for (i, out) in outs.iter().enumerate() {
        assert_eq!(out.code, Some(0), "run {i}: {out}");
        assert_eq!(out.stdout, srv.body(&format!("/run-{i}")), "run {i}: {out}");
    }
    assert_eq!(srv.hits(), RUNS);
}

// ---------------------------------------------------------------------------------------
// Bad allowlists.

#[test]
fn a_match_everything_pattern_is_refused_in_a_policy_file() {
    let fx = Fixture::new("egress-star-file");
    let policy = fx.policy(
        "star.toml",
        "extends = [\"default\"]\n\
         [net]\n\
         mode = \"egress\"\n\
         allow = [\n\
         \x20 \"ok.test:8080\",\n\
         \x20 \"*\",\n\
         ]\n",
    );
    let marker = fx.cwd.join("ran");
    let out = run(fx
        .bare()
        .args(["-p", s(&policy), "--", "touch", s(&marker)]));
    assert_eq!(out.code, Some(125), "{out}");
    assert!(out.stderr.starts_with("cordon: "), "{out}");
    assert!(
        out.stderr.contains(&format!("{}:6:", policy.display())),
        "the message names the file and line: {out}"
    );
    assert!(out.stderr.contains("`*`"), "{out}");
    assert!(!marker.exists(), "the command ran");
}

#[test]
fn a_match_everything_pattern_is_refused_on_the_command_line() {
    let fx = Fixture::new("egress-star-cli");
    let marker = fx.cwd.join("ran");
    for pattern in ["*", "*:443"] {
        let out = run(fx
            .bare()
            .args(["--allow-host", pattern, "--", "touch", s(&marker)]));
        assert_eq!(out.code, Some(125), "{pattern}: {out}");
        assert!(out.stderr.starts_with("cordon: "), "{out}");
        assert!(out.stderr.contains("--allow-host"), "{out}");
        assert!(out.stderr.contains(&format!("`{pattern}`")), "{out}");
        assert!(!marker.exists(), "the command ran");
    }
}

// ---------------------------------------------------------------------------------------
// Records: net.log and --status-file.

#[test]
fn net_log_has_one_json_line_per_request() {
    let fx = Fixture::new("egress-log");
    let srv = Server::start();
    let other = Server::start();
    let (p1, p2) = (srv.port, other.port);
    let log = fx.root().join("egress.jsonl");
    let policy = fx.policy(
        "log.toml",
        &format!(
            "extends = [\"default\"]\n\
             [net]\n\
             mode = \"egress\"\n\
             allow = [\"allowed.test:{p1}\"]\n\
             log = \"{}\"\n\
             [net.hosts]\n\
             \"allowed.test\" = \"127.0.0.1\"\n\
             \"blocked.test\" = \"127.0.0.1\"\n",
            log.display()
        ),
    );
    let script = format!(
        "{CURL} -o /dev/null http://allowed.test:{p1}/a
         {CURL} -o /dev/null http://blocked.test:{p2}/b
         {CURL} -o /dev/null -p http://allowed.test:{p2}/c
         {CURL} -o /dev/null -p http://allowed.test:{p1}/d
         true"
    );
    let out = run(&mut sh(&fx, &["-p".into(), s(&policy).into()], &script));
    assert_eq!(out.code, Some(0), "{out}");
    let text = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{e}: {out}"));
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    let got: Vec<(String, String, u64, String)> = lines
        .iter()
        .map(|v| {
            assert!(v["time"].is_u64(), "{v}");
            assert!(v["reason"].is_string(), "{v}");
            (
                v["proto"].as_str().unwrap_or("?").to_string(),
                v["host"].as_str().unwrap_or("?").to_string(),
                v["port"].as_u64().unwrap_or(0),
                v["decision"].as_str().unwrap_or("?").to_string(),
            )
        })
        .collect();
    let want = [
        ("http", "allowed.test", p1, "allow"),
        ("http", "blocked.test", p2, "deny"),
        ("connect", "allowed.test", p2, "deny"),
        ("connect", "allowed.test", p1, "allow"),
    ]
    .map(|(a, b, c, d)| (a.to_string(), b.to_string(), u64::from(c), d.to_string()));
    assert_eq!(got, want, "{text}");
    assert_eq!(srv.hits(), 2);
    assert_eq!(other.hits(), 0);
}

#[test]
fn a_relative_net_log_path_is_next_to_the_policy_file() {
    let fx = Fixture::new("egress-log-rel");
    let srv = Server::start();
    let p1 = srv.port;
    let policy = fx.policy(
        "rel.toml",
        &format!(
            "extends = [\"default\"]\n\
             [net]\n\
             mode = \"egress\"\n\
             allow = [\"allowed.test:{p1}\"]\n\
             log = \"rel.jsonl\"\n\
             [net.hosts]\n\
             \"allowed.test\" = \"127.0.0.1\"\n"
        ),
    );
    let script = format!("{CURL} -o /dev/null http://allowed.test:{p1}/");
    let out = run(&mut sh(&fx, &["-p".into(), s(&policy).into()], &script));
    assert_eq!(out.code, Some(0), "{out}");
    let text = std::fs::read_to_string(fx.root().join("rel.jsonl"))
        .unwrap_or_else(|e| panic!("no log next to the policy file: {e}: {out}"));
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(text.contains("\"decision\":\"allow\""), "{text}");
    assert!(
        !fx.cwd.join("rel.jsonl").exists(),
        "the log went to the cwd"
    );
}

#[test]
fn status_file_lists_the_denied_destinations() {
    let fx = Fixture::new("egress-status");
    let srv = Server::start();
    let other = Server::start();
    let (p1, p2) = (srv.port, other.port);
    let status = fx.root().join("status.json");
    let mut options = allow_args(&fx, Via::Cli, p1);
    options.extend(["--status-file".into(), s(&status).into()]);
    let script = format!(
        "{CURL} -o /dev/null http://allowed.test:{p1}/
         {CURL} -o /dev/null http://blocked.test:{p2}/
         {CURL} -o /dev/null http://blocked.test:{p2}/again
         {CURL} -o /dev/null -p http://allowed.test:{p2}/
         exit 3"
    );
    let out = run(&mut sh(&fx, &options, &script));
    assert_eq!(out.code, Some(3), "{out}");
    let text = std::fs::read_to_string(&status).unwrap_or_else(|e| panic!("{e}: {out}"));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["result"], "exited", "{text}");
    assert_eq!(v["exit_code"], 3, "{text}");
    assert_eq!(
        v["denied_egress"],
        serde_json::json!([format!("blocked.test:{p2}"), format!("allowed.test:{p2}")]),
        "{text}"
    );
}

// ---------------------------------------------------------------------------------------
// Without the view: Landlock only, no network namespace.

#[test]
fn no_view_best_effort_proxies_and_warns_that_it_is_not_contained() {
    let fx = Fixture::new("egress-noview");
    let srv = Server::start();
    let other = Server::start();
    let (p1, p2) = (srv.port, other.port);
    let mut options: Vec<String> = ["--no-view", "--best-effort"].map(String::from).into();
    options.extend([
        "--allow-host".into(),
        format!("allowed.test:{p1}"),
        "--add-host".into(),
        "allowed.test=127.0.0.1".into(),
        "--add-host".into(),
        "blocked.test=127.0.0.1".into(),
    ]);
    let script = format!(
        "{CURL} http://allowed.test:{p1}/plain || exit 90
         {CURL} -p http://allowed.test:{p1}/tunnel || exit 91
         {CURL} -o /dev/null -w '%{{http_code}}\\n' http://blocked.test:{p2}/
         {CURL} --noproxy '*' http://127.0.0.1:{p1}/direct; echo \"direct: $?\""
    );
    let out = run(&mut sh(&fx, &options, &script));
    assert_eq!(out.code, Some(0), "{out}");
    // Direct: Landlock lets the command connect to the proxy's port only (curl: 7).
    assert_eq!(
        out.stdout,
        format!(
            "{}{}403\ndirect: 7\n",
            srv.body("/plain"),
            srv.body("/tunnel")
        ),
        "{out}"
    );
    assert_eq!(srv.hits(), 2, "{out}");
    assert_eq!(other.hits(), 0, "{out}");
    let warning = out
        .stderr
        .lines()
        .find(|l| l.starts_with("cordon: warning:") && l.contains("egress"))
        .unwrap_or_else(|| panic!("no warning about egress: {out}"));
    assert!(warning.contains("not contained"), "{out}");
    assert!(
        out.stderr
            .contains(&denied_line(&format!("blocked.test:{p2}"))),
        "{out}"
    );
}

#[test]
fn no_view_strict_refuses_egress() {
    let fx = Fixture::new("egress-noview-strict");
    let srv = Server::start();
    let marker = fx.cwd.join("ran");
    let out = run(fx
        .bare()
        .args(["--no-view"])
        .args(allow_args(&fx, Via::Cli, srv.port))
        .args(["--", "touch", s(&marker)]));
    assert_eq!(out.code, Some(125), "{out}");
    assert!(out.stderr.starts_with("cordon: "), "{out}");
    assert!(out.stderr.contains("egress"), "{out}");
    assert!(out.stderr.contains("--best-effort"), "{out}");
    assert!(!marker.exists(), "the command ran");
    assert_eq!(srv.hits(), 0);
}
