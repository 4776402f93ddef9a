//! `--report`: the filesystem refusals Landlock recorded for this run, read from the
//! kernel's audit log while the command runs.
//!
//! Landlock (ABI 7) writes an `AUDIT_LANDLOCK_ACCESS` record for each denial (with
//! `LOG_NEW_EXEC_ON`, also after `execve`) and an `AUDIT_LANDLOCK_DOMAIN` record naming
//! the process that created the domain. The supervisor listens on the audit multicast
//! group (needs the audit log on and `CAP_AUDIT_READ`), keeps the denials, and at exit
//! keeps those of the domains its own command created. Nothing here confines anything,
//! and cordon never switches auditing on: that is machine-wide state.

use nix::sys::socket::{
    bind, recv, setsockopt, socket, sockopt, AddressFamily, MsgFlags, NetlinkAddr, SockFlag,
    SockProtocol, SockType,
};
use nix::sys::time::TimeVal;
use std::collections::BTreeSet;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

const AUDIT_LANDLOCK_ACCESS: u16 = 1423;
const AUDIT_LANDLOCK_DOMAIN: u16 = 1424;
/// The audit multicast group every reader may join (`AUDIT_NLGRP_READLOG`).
const AUDIT_NLGRP_READLOG: u32 = 1;
/// At most this many denial records are kept; past it the report says so.
const MAX_RECORDS: usize = 10_000;

/// What the listener has seen.
#[derive(Debug, Default)]
struct Seen {
    /// (domain, "blockers path") of every denial, in order.
    denials: Vec<(String, String)>,
    /// (domain, pid that created it).
    domains: Vec<(String, i32)>,
    dropped: usize,
}

/// A running listener on the audit log.
#[derive(Debug)]
pub struct AuditListener {
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// The filesystem refusals of one run.
#[derive(Debug, Clone, Default)]
pub struct FsDenials {
    /// `blockers path`, e.g. `fs.read_file path="/root/.bashrc"`, each once, in order.
    pub denied: Vec<String>,
    /// Records lost because more came than are kept.
    pub dropped: usize,
}

impl AuditListener {
    /// Join the audit log's read group. Fails without `CAP_AUDIT_READ`.
    pub fn start() -> std::io::Result<AuditListener> {
        let fd: OwnedFd = socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkAudit,
        )?;
        bind(fd.as_raw_fd(), &NetlinkAddr::new(0, AUDIT_NLGRP_READLOG))?;
        setsockopt(&fd, sockopt::ReceiveTimeout, &TimeVal::new(0, 100_000))?;
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (seen, stop) = (seen.clone(), stop.clone());
            std::thread::Builder::new()
                .name("cordon-audit".into())
                .stack_size(64 * 1024)
                .spawn(move || listen(&fd, &seen, &stop))?
        };
        Ok(AuditListener {
            seen,
            stop,
            thread: Some(thread),
        })
    }

    /// Stop listening and return the denials of the domains created by `pid` (the
    /// command, or without the view the supervisor's own child) or by a child of `pid`
    /// (the command under the sandbox's init).
    pub fn finish(mut self, pid: i32, children_of_pid: &BTreeSet<i32>) -> FsDenials {
        // Records of the last denials may still be on their way.
        std::thread::sleep(std::time::Duration::from_millis(150));
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let ours: BTreeSet<&str> = seen
            .domains
            .iter()
            .filter(|(_, p)| *p == pid || children_of_pid.contains(p))
            .map(|(d, _)| d.as_str())
            .collect();
        let mut denied: Vec<String> = Vec::new();
        for (domain, what) in &seen.denials {
            if ours.contains(domain.as_str()) && !denied.contains(what) {
                denied.push(what.clone());
            }
        }
        FsDenials {
            denied,
            dropped: seen.dropped,
        }
    }

    /// Pids of processes whose parent is `parent`, seen now: the command under init is
    /// alive when it creates its domain, which is when the domain record is written.
    pub fn note_children(&self, parent: i32, into: &mut BTreeSet<i32>) {
        for pid in children(parent) {
            into.insert(pid);
        }
    }
}

fn children(parent: i32) -> Vec<i32> {
    let path = format!("/proc/{parent}/task/{parent}/children");
    std::fs::read_to_string(path)
        .map(|t| {
            t.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn listen(fd: &OwnedFd, seen: &Mutex<Seen>, stop: &AtomicBool) {
    let mut buf = vec![0u8; 16 * 1024];
    while !stop.load(Ordering::SeqCst) {
        let n = match recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()) {
            Ok(n) => n,
            Err(_) => continue, // timeout: look at the stop flag again
        };
        let mut at = 0;
        while at + 16 <= n {
            let len = u32::from_ne_bytes(buf[at..at + 4].try_into().unwrap_or([0; 4])) as usize;
            let kind = u16::from_ne_bytes([buf[at + 4], buf[at + 5]]);
            let end = (at + len.max(16)).min(n);
            let text = String::from_utf8_lossy(&buf[at + 16..end]);
            record(kind, text.trim_end_matches('\0'), seen);
            // Netlink messages are 4-byte aligned.
            at += (len.max(16) + 3) & !3;
        }
    }
}

/// Keep a Landlock record: `domain=ID blockers=... path="..."` or
/// `domain=ID status=allocated ... pid=N ...`.
fn record(kind: u16, text: &str, seen: &Mutex<Seen>) {
    let field = |name: &str| -> Option<&str> {
        let start = text.find(&format!(" {name}="))? + name.len() + 2;
        let rest = &text[start..];
        let end = match rest.strip_prefix('"') {
            Some(quoted) => quoted.find('"').map_or(rest.len(), |i| i + 2),
            None => rest.find(' ').unwrap_or(rest.len()),
        };
        Some(&rest[..end])
    };
    let Some(domain) = field("domain") else {
        return;
    };
    let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
    match kind {
        AUDIT_LANDLOCK_ACCESS => {
            let what = text[text.find("blockers=").unwrap_or(0)..]
                .trim()
                .to_string();
            if seen.denials.len() < MAX_RECORDS {
                seen.denials.push((domain.to_string(), what));
            } else {
                seen.dropped += 1;
            }
        }
        AUDIT_LANDLOCK_DOMAIN if field("status") == Some("allocated") => {
            if let Some(pid) = field("pid").and_then(|p| p.parse().ok()) {
                seen.domains.push((domain.to_string(), pid));
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_landlock_records() {
        let seen = Mutex::new(Seen::default());
        record(
            AUDIT_LANDLOCK_ACCESS,
            "audit(1.2:33): domain=1e2973e6a blockers=fs.read_file path=\"/root/.bashrc\" dev=\"vda\" ino=1235",
            &seen,
        );
        record(
            AUDIT_LANDLOCK_DOMAIN,
            "audit(1.2:33): domain=1e2973e6a status=allocated mode=enforcing pid=15148 uid=0 exe=\"/x\" comm=\"cordon\"",
            &seen,
        );
        record(
            AUDIT_LANDLOCK_DOMAIN,
            "audit(1.2:35): domain=1e2973e6a status=deallocated denials=2",
            &seen,
        );
        let s = seen.lock().unwrap();
        assert_eq!(s.domains, vec![("1e2973e6a".to_string(), 15148)]);
        assert_eq!(s.denials.len(), 1);
        assert!(s.denials[0]
            .1
            .starts_with("blockers=fs.read_file path=\"/root/.bashrc\""));
    }
}
