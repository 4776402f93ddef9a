//! The egress proxy for network mode `egress`.
//!
//! The sandboxed child creates a listening TCP socket inside its own network namespace
//! (where only loopback exists) and hands it to the supervisor; [`start`] serves it from
//! the supervisor's side. Outbound connections are therefore made from the host's network
//! namespace, and only to hosts that `net.allow` permits. One port speaks three
//! protocols, told apart by the first byte: `0x05` starts SOCKS5, anything else is HTTP
//! (`CONNECT host:port` tunnels and plain forwarding of `http://` absolute-URI requests).
//!
//! The proxy resolves names itself (a pinned address from `[net.hosts]` first, otherwise
//! the system resolver) and dials exactly the addresses it checked, so a name cannot be
//! re-resolved to something else between the check and the connect. Names that resolve
//! to loopback, link-local, unspecified or cloud-metadata addresses are refused unless
//! the entry is an IP literal, the name is pinned, or `allow_local` is set.
//!
//! Concurrency model: one thread per client connection, blocking I/O for the handshake,
//! then a blocking `splice` relay: that thread carries upstream → client, and a second,
//! small thread client → upstream (see [`relay`]). A sandbox runs one command
//! with modest concurrency (a package manager opens tens of connections, not thousands),
//! so threads keep the proxy small, easy to reason about and free of an async runtime.
//! Threads get a small stack ([`CONN_STACK`]). A panic in one connection ends only that
//! thread; shared state is behind mutexes whose poisoning is ignored (see [`lock`]).
//! Accept errors (e.g. running out of descriptors) are survived with a short back-off.

mod allow;
mod http;
mod relay;
mod socks;

pub use allow::{parse_host_pin, AllowRule};

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use allow::{is_local, Target};

/// Stack size of a connection thread. The relay needs little (buffers live on the heap),
/// but the thread also calls the system resolver, and glibc's `getaddrinfo` may put up to
/// 64 KiB on the stack with `alloca`; 256 KiB leaves room for that. Only touched pages
/// cost memory.
const CONN_STACK: usize = 256 * 1024;
/// A tunnel with no byte in either direction for this long is closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one upstream connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the accept loop looks at the stop flag.
const ACCEPT_TICK: Duration = Duration::from_millis(200);

/// Everything the proxy needs to know from the policy and the command line.
///
/// It exists so that the policy layer can build the proxy's configuration once (rules
/// already validated by [`AllowRule::parse`]) and hand it over whole.
#[derive(Debug, Clone, Default)]
pub struct EgressConfig {
    /// `net.allow`: a request is allowed when any rule matches its host and port.
    pub allow: Vec<AllowRule>,
    /// `[net.hosts]` and `--add-host` pins (names lowercased, no trailing dot). A pinned
    /// name never reaches DNS and may map to a local address. Later pins win.
    pub hosts: Vec<(String, IpAddr)>,
    /// `net.allow_local`: let names resolve to loopback/link-local/metadata addresses.
    pub allow_local: bool,
    /// `net.log`: append one JSON object per request, allowed or denied.
    pub log: Option<PathBuf>,
    /// Silence the per-denial `cordon: egress denied: HOST:PORT` lines on stderr.
    pub quiet: bool,
}

/// Serve on a listener the sandboxed child created inside its network namespace and
/// handed over; the proxy never listens on anything itself.
///
/// Fails only if the listener cannot be set up or the log file cannot be opened; after
/// that the proxy runs until [`ProxyHandle::stop`] (or the handle is dropped).
pub fn start(listener: TcpListener, config: EgressConfig) -> io::Result<ProxyHandle> {
    start_with_idle(listener, config, IDLE_TIMEOUT)
}

/// [`start`] with a chosen tunnel idle timeout (tests use a short one).
fn start_with_idle(
    listener: TcpListener,
    config: EgressConfig,
    idle: Duration,
) -> io::Result<ProxyHandle> {
    listener.set_nonblocking(true)?;
    let log = match &config.log {
        Some(path) => Some(Mutex::new(
            OpenOptions::new().create(true).append(true).open(path)?,
        )),
        None => None,
    };
    let hosts = config
        .hosts
        .iter()
        .map(|(n, ip)| (allow::normalize_name(n), ip.to_canonical()))
        .collect();
    let shared = Arc::new(Shared {
        rules: config.allow,
        hosts,
        allow_local: config.allow_local,
        quiet: config.quiet,
        log,
        denied: Mutex::new(Denied::default()),
        idle,
    });
    let listener = Arc::new(listener);
    let stopping = Arc::new(AtomicBool::new(false));
    let thread = {
        let (shared, listener, stopping) = (shared.clone(), listener.clone(), stopping.clone());
        thread::Builder::new()
            .name("cordon-egress".into())
            .spawn(move || accept_loop(&listener, &shared, &stopping))?
    };
    Ok(ProxyHandle {
        shared,
        listener,
        stopping,
        thread: Some(thread),
    })
}

/// A running proxy. It exists so the supervisor can ask what was refused (for the exit
/// summary and the status JSON) and stop the proxy when the command ends. Dropping it
/// stops the proxy too.
pub struct ProxyHandle {
    shared: Arc<Shared>,
    listener: Arc<TcpListener>,
    stopping: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ProxyHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyHandle")
            .field("denied", &self.denied())
            .finish_non_exhaustive()
    }
}

impl ProxyHandle {
    /// Distinct `HOST:PORT` targets refused so far, in first-seen order, for the exit
    /// summary and the status JSON.
    pub fn denied(&self) -> Vec<String> {
        lock(&self.shared.denied).order.clone()
    }

    /// Stop accepting new connections. Tunnels already open may be dropped (they end
    /// with the supervisor, or on their own idle timeout).
    pub fn stop(self) {
        drop(self)
    }
}

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        // Wake a blocked poll at once (Linux makes a shut-down listener readable); the
        // accept loop also notices the flag within one tick if this does nothing.
        let _ =
            nix::sys::socket::shutdown(self.listener.as_raw_fd(), nix::sys::socket::Shutdown::Both);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Lock a mutex, ignoring poisoning: a panic in one connection thread must not make
/// every other thread panic in turn.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Default)]
struct Denied {
    order: Vec<String>,
    seen: HashSet<String>,
}

/// Which protocol a request came in on (for the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Proto {
    Connect,
    Http,
    Socks5,
}

impl Proto {
    fn as_str(self) -> &'static str {
        match self {
            Proto::Connect => "connect",
            Proto::Http => "http",
            Proto::Socks5 => "socks5",
        }
    }
}

/// The outcome of checking and dialing one request.
pub(crate) enum Verdict {
    /// Allowed and connected.
    Connected(TcpStream),
    /// Refused by policy; the text is the body for an HTTP 403.
    Denied(String),
    /// Allowed but unreachable: text for a 502, and whether the peer refused.
    Failed(String, bool),
}

/// State shared by all connection threads.
pub(crate) struct Shared {
    rules: Vec<AllowRule>,
    hosts: HashMap<String, IpAddr>,
    allow_local: bool,
    quiet: bool,
    log: Option<Mutex<File>>,
    denied: Mutex<Denied>,
    idle: Duration,
}

impl Shared {
    /// Check `host:port` against the rules, resolve, check the addresses, connect; log
    /// the request and record a refusal.
    pub(crate) fn decide(&self, proto: Proto, host: &str, port: u16) -> Verdict {
        let Some(target) = Target::parse(host) else {
            let shown = format!("{}:{port}", host.escape_debug());
            let why = if host.is_ascii() {
                "not a valid host name".to_string()
            } else {
                "not an ASCII host name (use the punycode form)".to_string()
            };
            return self.deny(proto, host, &shown, port, &why, None);
        };
        let shown = format!("{target}:{port}");
        let host_plain = match &target {
            Target::Name(n) => n.clone(),
            Target::Ip(ip) => ip.to_string(),
        };
        let Some(rule) = self.rules.iter().find(|r| r.matches(&target, port)) else {
            return self.deny(proto, &host_plain, &shown, port, "not in net.allow", None);
        };
        let (addrs, pinned) = match &target {
            Target::Ip(ip) => (vec![SocketAddr::new(*ip, port)], false),
            Target::Name(name) => match self.hosts.get(name) {
                Some(ip) => (vec![SocketAddr::new(*ip, port)], true),
                None => match (name.as_str(), port).to_socket_addrs() {
                    Ok(a) => (a.collect::<Vec<_>>(), false),
                    Err(e) => {
                        let msg = format!("cordon: cannot resolve {name}: {e}\n");
                        self.log(
                            proto,
                            &host_plain,
                            port,
                            "allow",
                            &format!("resolve failed: {e}"),
                        );
                        return Verdict::Failed(msg, false);
                    }
                },
            },
        };
        if addrs.is_empty() {
            self.log(proto, &host_plain, port, "allow", "resolved to no address");
            return Verdict::Failed(format!("cordon: {host_plain} has no address\n"), false);
        }
        if !rule.is_ip_literal() && !pinned && !self.allow_local {
            if let Some(bad) = addrs.iter().find(|a| is_local(a.ip())) {
                let why = format!(
                    "{host_plain} resolves to {}, a local address; pin it in [net.hosts] or set net.allow_local = true",
                    bad.ip()
                );
                return self.deny(proto, &host_plain, &shown, port, &why, Some(&why));
            }
        }
        let mut last = io::Error::from(io::ErrorKind::NotFound);
        for a in &addrs {
            match TcpStream::connect_timeout(a, CONNECT_TIMEOUT) {
                Ok(s) => {
                    self.log(
                        proto,
                        &host_plain,
                        port,
                        "allow",
                        &format!("matched {rule}"),
                    );
                    return Verdict::Connected(s);
                }
                Err(e) => last = e,
            }
        }
        let refused = last.kind() == io::ErrorKind::ConnectionRefused;
        self.log(
            proto,
            &host_plain,
            port,
            "allow",
            &format!("connect failed: {last}"),
        );
        Verdict::Failed(
            format!("cordon: cannot connect to {shown}: {last}\n"),
            refused,
        )
    }

    /// Record, report and log a refusal.
    fn deny(
        &self,
        proto: Proto,
        host: &str,
        shown: &str,
        port: u16,
        reason: &str,
        detail: Option<&str>,
    ) -> Verdict {
        {
            let mut d = lock(&self.denied);
            if d.seen.insert(shown.to_string()) {
                d.order.push(shown.to_string());
                if !self.quiet {
                    eprintln!("cordon: egress denied: {shown}");
                }
            }
        }
        self.log(proto, host, port, "deny", reason);
        Verdict::Denied(match detail {
            Some(d) => format!("cordon: egress to {shown} refused: {d}\n"),
            None => format!("cordon: egress to {shown} is not in net.allow\n"),
        })
    }

    fn log(&self, proto: Proto, host: &str, port: u16, decision: &str, reason: &str) {
        let Some(file) = &self.log else { return };
        let time = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut line = serde_json::json!({
            "time": time,
            "proto": proto.as_str(),
            "host": host,
            "port": port,
            "decision": decision,
            "reason": reason,
        })
        .to_string();
        line.push('\n');
        // One write per line on an O_APPEND file keeps lines whole.
        let _ = lock(file).write_all(line.as_bytes());
    }

    /// Relay an established tunnel until it ends.
    pub(crate) fn tunnel(
        &self,
        client: TcpStream,
        upstream: TcpStream,
        early: &[u8],
    ) -> io::Result<()> {
        let _ = upstream.set_nodelay(true);
        relay::relay(client, upstream, early, self.idle)
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>, stopping: &AtomicBool) {
    let tick = nix::poll::PollTimeout::try_from(ACCEPT_TICK).unwrap_or(nix::poll::PollTimeout::MAX);
    while !stopping.load(Ordering::SeqCst) {
        let mut fds = [nix::poll::PollFd::new(
            listener.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        if let Ok(0) = nix::poll::poll(&mut fds, tick) {
            continue;
        }
        if stopping.load(Ordering::SeqCst) {
            break;
        }
        match listener.accept() {
            Ok((stream, _)) => {
                let shared = shared.clone();
                let spawned = thread::Builder::new()
                    .name("cordon-egress-conn".into())
                    .stack_size(CONN_STACK)
                    .spawn(move || {
                        let _ = handle(&shared, stream);
                    });
                if spawned.is_err() {
                    // Out of threads: the stream was dropped with the closure; back off.
                    thread::sleep(Duration::from_millis(20));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // ECONNABORTED, EMFILE, ENFILE, ENOBUFS...: keep serving after a pause, so a
            // burst of descriptor exhaustion does not turn into a busy loop.
            Err(_) => thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Serve one client connection: sniff the protocol and dispatch.
fn handle(shared: &Shared, client: TcpStream) -> io::Result<()> {
    client.set_nonblocking(false)?;
    client.set_read_timeout(Some(HEAD_TIMEOUT))?;
    let _ = client.set_nodelay(true);
    let mut first = vec![0u8; 4096];
    let n = (&client).read(&mut first)?;
    if n == 0 {
        return Ok(());
    }
    first.truncate(n);
    if first[0] == 0x05 {
        socks::serve(shared, client, first)
    } else {
        http::serve(shared, client, first)
    }
}

#[cfg(test)]
mod tests;
