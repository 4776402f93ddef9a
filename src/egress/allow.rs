//! `net.allow` entries and `[net.hosts]` pins: parsing, canonical form and matching.
//!
//! Everything here is pure (no I/O), so the rules a user wrote can be validated at policy
//! load time and shown back by `explain` exactly as the proxy will apply them.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Ports a bare entry (one without `:port`) allows: plain HTTP and HTTPS.
const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// What the host part of an entry matches.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    /// One exact name, lowercased, without trailing dot.
    Exact(String),
    /// `*.SUFFIX`: any name strictly below SUFFIX (stored without the `*.`).
    Below(String),
    /// An IP literal; matches only requests that name this address directly.
    Ip(IpAddr),
}

/// One `net.allow` entry, parsed and validated.
///
/// It exists so that policy errors are caught once, when the policy is loaded, with a
/// message saying what to change, and so that the proxy matches requests against a
/// normalised form instead of re-parsing strings for every connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowRule {
    host: HostPattern,
    /// `None` means the default ports, 80 and 443.
    port: Option<u16>,
}

/// The host a client asked for, normalised for matching.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    Name(String),
    Ip(IpAddr),
}

impl Target {
    /// Normalise a host as it appears in a request (`Example.TEST.`, `[::1]`, `10.0.0.1`).
    /// Returns `None` for something that is neither an ASCII name nor an IP literal.
    pub(crate) fn parse(host: &str) -> Option<Target> {
        let h = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
        if let Some(inner) = h {
            return inner
                .parse::<Ipv6Addr>()
                .ok()
                .map(|ip| Target::Ip(IpAddr::V6(ip).to_canonical()));
        }
        let name = normalize_name(host);
        if let Ok(ip) = name.parse::<IpAddr>() {
            return Some(Target::Ip(ip.to_canonical()));
        }
        if name.is_empty() || check_name(&name).is_err() {
            return None;
        }
        Some(Target::Name(name))
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Name(n) => f.write_str(n),
            Target::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Target::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

impl AllowRule {
    /// Parse one `net.allow` entry; `Err` is a sentence telling the user what to change.
    ///
    /// Accepted: `name`, `name:port`, `*.suffix[:port]`, `1.2.3.4[:port]`, `[v6][:port]`
    /// and a bare v6 address. A bare entry means ports 80 and 443.
    pub fn parse(text: &str) -> Result<AllowRule, String> {
        let t = text.trim();
        if t.is_empty() {
            return Err("an empty net.allow entry allows nothing; remove it or write a host name such as `example.com`".into());
        }
        if !t.is_ascii() {
            return Err(format!(
                "net.allow entry `{t}` is not ASCII; write the name in its ASCII (punycode, `xn--...`) form"
            ));
        }
        if t.contains("://") {
            return Err(format!(
                "net.allow entry `{t}` looks like a URL; write only the host, optionally with `:port` (e.g. `example.com:443`)"
            ));
        }
        if t.contains('/') {
            return Err(format!(
                "net.allow entry `{t}` contains `/`; entries are hosts, not paths or networks: write a host name or a single IP address"
            ));
        }
        if t == "*" || t == "*:*" || t.starts_with("*:") {
            return Err(format!(
                "net.allow entry `{t}` would allow every host; list the hosts the command needs (for everything, use network mode `host`)"
            ));
        }
        // Split host and port.
        let (host, port_text) = if let Some(rest) = t.strip_prefix('[') {
            let Some(end) = rest.find(']') else {
                return Err(format!(
                    "net.allow entry `{t}` has `[` without a closing `]`"
                ));
            };
            let inner = &rest[..end];
            let after = &rest[end + 1..];
            let ip: Ipv6Addr = inner.parse().map_err(|_| {
                format!("net.allow entry `{t}`: `{inner}` inside brackets is not an IPv6 address")
            })?;
            let port = match after {
                "" => None,
                p => match p.strip_prefix(':') {
                    Some(p) => Some(p),
                    None => {
                        return Err(format!(
                            "net.allow entry `{t}`: after `]` only `:PORT` may follow"
                        ))
                    }
                },
            };
            let ip = IpAddr::V6(ip).to_canonical();
            return Ok(AllowRule {
                host: HostPattern::Ip(ip),
                port: port.map(|p| parse_port(t, p)).transpose()?,
            });
        } else if t.matches(':').count() > 1 {
            // A bare IPv6 address (no port possible without brackets).
            let ip: Ipv6Addr = t.parse().map_err(|_| {
                format!("net.allow entry `{t}` is not a host, host:port or IP address; write an IPv6 address with a port as `[ADDR]:PORT`")
            })?;
            return Ok(AllowRule {
                host: HostPattern::Ip(IpAddr::V6(ip).to_canonical()),
                port: None,
            });
        } else if let Some((h, p)) = t.rsplit_once(':') {
            (h, Some(p))
        } else {
            (t, None)
        };
        let port = port_text.map(|p| parse_port(t, p)).transpose()?;
        if host.is_empty() {
            return Err(format!(
                "net.allow entry `{t}` has a port but no host; write `HOST:PORT`"
            ));
        }
        if let Ok(ip) = host.parse::<Ipv4Addr>() {
            return Ok(AllowRule {
                host: HostPattern::Ip(IpAddr::V4(ip)),
                port,
            });
        }
        let name = normalize_name(host);
        if let Some(suffix) = name.strip_prefix("*.") {
            check_name(suffix).map_err(|why| format!("net.allow entry `{t}`: {why}"))?;
            if suffix.split('.').count() < 2 {
                return Err(format!(
                    "net.allow entry `{t}` would match every name under `.{suffix}`; use a wildcard with at least two labels, such as `*.example.{suffix}`"
                ));
            }
            return Ok(AllowRule {
                host: HostPattern::Below(suffix.to_string()),
                port,
            });
        }
        if name.contains('*') {
            return Err(format!(
                "net.allow entry `{t}`: `*` is only allowed as a whole first label, as in `*.example.com`"
            ));
        }
        check_name(&name).map_err(|why| format!("net.allow entry `{t}`: {why}"))?;
        Ok(AllowRule {
            host: HostPattern::Exact(name),
            port,
        })
    }

    /// Does this rule allow `target` on `port`?
    pub(crate) fn matches(&self, target: &Target, port: u16) -> bool {
        let port_ok = match self.port {
            Some(p) => p == port,
            None => DEFAULT_PORTS.contains(&port),
        };
        port_ok
            && match (&self.host, target) {
                (HostPattern::Exact(n), Target::Name(t)) => n == t,
                (HostPattern::Below(s), Target::Name(t)) => t
                    .strip_suffix(s.as_str())
                    .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
                (HostPattern::Ip(a), Target::Ip(b)) => a == b,
                _ => false,
            }
    }

    /// True when the entry is an IP literal: such entries may reach local addresses.
    pub(crate) fn is_ip_literal(&self) -> bool {
        matches!(self.host, HostPattern::Ip(_))
    }
}

impl fmt::Display for AllowRule {
    /// Canonical form, for `explain`: lowercased, no trailing dot, v6 in brackets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostPattern::Exact(n) => f.write_str(n)?,
            HostPattern::Below(s) => write!(f, "*.{s}")?,
            HostPattern::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]")?,
            HostPattern::Ip(ip) => write!(f, "{ip}")?,
        }
        match self.port {
            Some(p) => write!(f, ":{p}"),
            None => Ok(()),
        }
    }
}

/// Parse a `--add-host NAME=IP` pin (also used for `[net.hosts]` entries).
///
/// Pins let a policy reach a name without DNS (which the sandbox does not have) and
/// mark the address as deliberately chosen, so a pinned loopback address is allowed.
/// Returns the name lowercased without trailing dot.
pub fn parse_host_pin(text: &str) -> Result<(String, IpAddr), String> {
    let Some((name, ip)) = text.split_once('=') else {
        return Err(format!(
            "host pin `{text}` has no `=`; write it as `NAME=IP`, e.g. `pkg.example.test=127.0.0.1`"
        ));
    };
    let (name, ip) = (name.trim(), ip.trim());
    if !name.is_ascii() {
        return Err(format!(
            "host pin `{text}`: `{name}` is not ASCII; write the name in its ASCII (punycode, `xn--...`) form"
        ));
    }
    let name = normalize_name(name);
    if name.contains('*') {
        return Err(format!(
            "host pin `{text}`: a pin names one host; wildcards are not allowed"
        ));
    }
    check_name(&name).map_err(|why| format!("host pin `{text}`: {why}"))?;
    let ip_text = ip
        .strip_prefix('[')
        .and_then(|i| i.strip_suffix(']'))
        .unwrap_or(ip);
    let addr: IpAddr = ip_text
        .parse()
        .map_err(|_| format!("host pin `{text}`: `{ip}` is not an IP address"))?;
    Ok((name, addr.to_canonical()))
}

/// Lowercase and strip one trailing dot.
pub(crate) fn normalize_name(name: &str) -> String {
    let n = name.strip_suffix('.').unwrap_or(name);
    n.to_ascii_lowercase()
}

/// Validate a normalised DNS name; `Err` says what is wrong with it.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the host name is empty".into());
    }
    if !name.is_ascii() {
        return Err(format!(
            "`{name}` is not ASCII; write the name in its ASCII (punycode, `xn--...`) form"
        ));
    }
    if name.len() > 253 {
        return Err("the host name is longer than 253 characters".into());
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(format!("`{name}` has an empty label (`..`)"));
        }
        if label.len() > 63 {
            return Err(format!("`{name}` has a label longer than 63 characters"));
        }
        if let Some(c) = label
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
        {
            return Err(format!(
                "`{name}` contains `{c}`; host names use letters, digits, `-` and `_` only"
            ));
        }
    }
    Ok(())
}

fn parse_port(entry: &str, p: &str) -> Result<u16, String> {
    match p.parse::<u32>() {
        Ok(n) if (1..=65535).contains(&n) => Ok(n as u16),
        Ok(_) => Err(format!(
            "net.allow entry `{entry}`: port {p} is out of range; use a port from 1 to 65535"
        )),
        Err(_) => Err(format!(
            "net.allow entry `{entry}`: `{p}` is not a port number; write `HOST:PORT` with PORT from 1 to 65535"
        )),
    }
}

/// Addresses a name must not silently resolve to: loopback, link-local (which includes
/// the cloud metadata address 169.254.169.254), unspecified, `0.0.0.0/8`, the AWS IPv6
/// metadata address `fd00:ec2::254`, and IPv4-mapped or IPv4-compatible forms of those.
pub(crate) fn is_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_local_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_local_v4(v4);
            }
            let s = v6.segments();
            if s[..6] == [0; 6] {
                // IPv4-compatible (deprecated) form, and also :: and ::1.
                let v4 = Ipv4Addr::from(((s[6] as u32) << 16) | s[7] as u32);
                return v6.is_loopback() || v6.is_unspecified() || is_local_v4(v4);
            }
            (s[0] & 0xffc0) == 0xfe80 || v6 == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)
        }
    }
}

fn is_local_v4(v4: Ipv4Addr) -> bool {
    v4.is_loopback() || v4.is_link_local() || v4.is_unspecified() || v4.octets()[0] == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(s: &str) -> AllowRule {
        AllowRule::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }
    fn name(s: &str) -> Target {
        Target::parse(s).unwrap()
    }

    #[test]
    fn parse_errors() {
        for bad in [
            "*",
            "*:443",
            "*.com",
            "*.com:443",
            "",
            "   ",
            "host:99999",
            "host:0",
            "host:",
            "host:abc",
            ":443",
            "héllo.test",
            "bücher.example",
            "http://example.test",
            "example.test/path",
            "10.0.0.0/8",
            "a b.test",
            "foo*.test",
            "*.*.example.test",
            "a..b",
            "[::1",
            "[nope]:80",
            "[::1]x",
            "[::1]:70000",
            "fe80::1%eth0",
        ] {
            let e = AllowRule::parse(bad).expect_err(bad);
            assert!(!e.is_empty());
        }
        assert!(AllowRule::parse("héllo.test")
            .unwrap_err()
            .contains("punycode"));
        assert!(AllowRule::parse("*.com")
            .unwrap_err()
            .contains("two labels"));
        assert!(AllowRule::parse("host:99999")
            .unwrap_err()
            .contains("1 to 65535"));
    }

    #[test]
    fn canonical_display() {
        for (inp, out) in [
            ("Example.TEST.", "example.test"),
            ("Example.test:8080", "example.test:8080"),
            ("*.Example.test:443", "*.example.test:443"),
            ("[::1]:8080", "[::1]:8080"),
            ("[::1]", "[::1]"),
            ("::1", "[::1]"),
            ("[::ffff:127.0.0.1]:80", "127.0.0.1:80"),
            ("10.1.2.3", "10.1.2.3"),
            (" 10.1.2.3:22 ", "10.1.2.3:22"),
            ("xn--bcher-kva.example", "xn--bcher-kva.example"),
        ] {
            let r = rule(inp);
            assert_eq!(r.to_string(), out, "{inp}");
            assert_eq!(rule(&r.to_string()), r, "round trip {inp}");
        }
    }

    #[test]
    fn wildcard_matching() {
        let r = rule("*.example.test");
        assert!(r.matches(&name("a.example.test"), 443));
        assert!(r.matches(&name("A.Example.Test."), 80));
        assert!(r.matches(&name("b.a.example.test"), 443));
        assert!(!r.matches(&name("example.test"), 443));
        assert!(!r.matches(&name("aexample.test"), 443));
        assert!(!r.matches(&name("a.example.test"), 8080));
        let r = rule("*.example.test:8443");
        assert!(r.matches(&name("a.example.test"), 8443));
        assert!(!r.matches(&name("a.example.test"), 443));
    }

    #[test]
    fn exact_and_ip_matching() {
        let r = rule("Example.test");
        assert!(r.matches(&name("example.test."), 80));
        assert!(r.matches(&name("EXAMPLE.test"), 443));
        assert!(!r.matches(&name("example.test"), 22));
        assert!(!r.matches(&name("a.example.test"), 443));
        let r = rule("127.0.0.1:9000");
        assert!(r.matches(&name("127.0.0.1"), 9000));
        assert!(r.matches(&name("[::ffff:127.0.0.1]"), 9000));
        assert!(r.matches(&name("127.0.0.1."), 9000));
        assert_eq!(name("127.0.0.1."), Target::Ip("127.0.0.1".parse().unwrap()));
        assert!(!r.matches(&name("localhost"), 9000));
        assert!(r.is_ip_literal());
        let r = rule("[::1]:8080");
        assert!(r.matches(&name("[::1]"), 8080));
        assert!(r.matches(&name("::1"), 8080));
        assert!(!r.matches(&name("[::1]"), 80));
    }

    #[test]
    fn host_pins() {
        assert_eq!(
            parse_host_pin("Pkg.Example.Test.=127.0.0.1").unwrap(),
            ("pkg.example.test".to_string(), "127.0.0.1".parse().unwrap())
        );
        assert_eq!(
            parse_host_pin("v6.test=[::1]").unwrap().1,
            "::1".parse::<IpAddr>().unwrap()
        );
        for bad in [
            "nothing",
            "=1.2.3.4",
            "a.test=",
            "a.test=300.1.1.1",
            "*.a.test=1.1.1.1",
            "ü.test=1.1.1.1",
        ] {
            assert!(parse_host_pin(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn local_addresses() {
        for ip in [
            "127.0.0.1",
            "127.9.9.9",
            "169.254.169.254",
            "169.254.1.1",
            "0.0.0.0",
            "::1",
            "::",
            "fe80::1",
            "febf::1",
            "fd00:ec2::254",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "::169.254.169.254",
        ] {
            assert!(is_local(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "10.0.0.1",
            "192.0.2.1",
            "2001:db8::1",
            "fd00:ec2::253",
            "::ffff:192.0.2.1",
            "fec0::1",
        ] {
            assert!(!is_local(ip.parse().unwrap()), "{ip}");
        }
    }
}
