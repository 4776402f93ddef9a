//! The supervisor: carries out a plan. Creates the scratch dir, starts the egress proxy,
//! launches the sandbox, forwards signals, enforces the timeout, maps the exit status,
//! cleans up. It decides nothing the plan did not.

use crate::egress::{self, AllowRule, EgressConfig, ProxyHandle};
use crate::enforce::creds::{self, Identity, LimitKind, Limits};
use crate::enforce::landlock::PreparedLandlock;
use crate::enforce::launch::{self, LaunchError, LaunchSpec};
use crate::enforce::{seccomp, view};
use crate::plan::{Facts, Mount, Plan};
use crate::policy::{EnforceMode, NetMode};
use anyhow::{bail, Context as _};
use landlock::AccessNet;
use std::net::TcpListener;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Exit status when cordon itself fails, as `env` and `timeout` do.
pub const EXIT_CORDON: i32 = 125;
/// Exit status when `--timeout` fired.
pub const EXIT_TIMEOUT: i32 = 124;

/// How chatty the supervisor is on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verbosity {
    Quiet,
    Normal,
    Verbose,
}

/// Options of a run that are not part of the plan.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub verbosity: Verbosity,
    pub report: bool,
}

/// How the run ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The exit status cordon exits with.
    pub code: i32,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub duration: Duration,
    pub denied_egress: Vec<String>,
    /// With `--report`: filesystem refusals from Landlock's audit records.
    pub denied_fs: Vec<String>,
    /// `--max-output` cut the output and ended the command.
    pub output_truncated: bool,
    /// Peak resident memory of the largest process of the tree, in KiB.
    pub peak_memory_kib: u64,
}

/// The JSON object `--status-file` / `--status-fd` receive: how the run ended, so a
/// calling program never mistakes a command that exits 125 for cordon failing.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Status {
    /// `exited`, `signaled`, `timeout` or `cordon-error`.
    pub result: &'static str,
    /// The command's own exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended the command, when one did.
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// Why cordon itself failed (then the command did not run, or not to the end).
    pub cordon_error: Option<String>,
    /// The status cordon exits with.
    pub cordon_exit: i32,
    pub duration_ms: u64,
    /// Peak resident memory of the largest process of the tree.
    pub peak_memory_kib: u64,
    pub output_truncated: bool,
    /// What was refused: egress destinations as `HOST:PORT`.
    pub denied_egress: Vec<String>,
    /// With `--report` where the audit log is readable: filesystem refusals.
    pub denied_fs: Vec<String>,
}

impl Status {
    /// The status of a run that ended.
    pub fn from_outcome(o: &Outcome) -> Status {
        let result = if o.timed_out {
            "timeout"
        } else if o.signal.is_some() {
            "signaled"
        } else {
            "exited"
        };
        Status {
            result,
            exit_code: (o.signal.is_none() && !o.timed_out).then_some(o.code),
            signal: o.signal,
            timed_out: o.timed_out,
            cordon_error: None,
            cordon_exit: o.code,
            duration_ms: o.duration.as_millis() as u64,
            peak_memory_kib: o.peak_memory_kib,
            output_truncated: o.output_truncated,
            denied_egress: o.denied_egress.clone(),
            denied_fs: o.denied_fs.clone(),
        }
    }

    /// The status when cordon itself failed.
    pub fn from_error(message: String, duration: Duration) -> Status {
        Status {
            result: "cordon-error",
            exit_code: None,
            signal: None,
            timed_out: false,
            cordon_error: Some(message),
            cordon_exit: EXIT_CORDON,
            duration_ms: duration.as_millis() as u64,
            peak_memory_kib: 0,
            output_truncated: false,
            denied_egress: Vec::new(),
            denied_fs: Vec::new(),
        }
    }
}

/// The launch could not create namespaces; the caller may re-plan without the view.
#[derive(Debug)]
pub struct NamespacesRefused(pub String);

impl std::fmt::Display for NamespacesRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot create the sandbox's namespaces: {}", self.0)
    }
}

impl std::error::Error for NamespacesRefused {}

/// Refuse a plan that strict mode cannot honour, and warn for each degraded rule in
/// best-effort mode. Called before anything is created.
pub fn check_enforceable(plan: &Plan, verbosity: Verbosity) -> anyhow::Result<()> {
    if plan.degraded.is_empty() {
        return Ok(());
    }
    match plan.mode {
        EnforceMode::Strict => {
            let mut msg = String::from("strict mode: the kernel cannot enforce every rule here:");
            for d in &plan.degraded {
                msg.push_str(&format!("\n  - {}: {}", d.rule, d.reason));
            }
            msg.push_str("\n  run `cordon explain` for details; use --best-effort to run anyway with these rules degraded, or change the policy");
            bail!(msg)
        }
        EnforceMode::BestEffort => {
            if verbosity != Verbosity::Quiet {
                for d in &plan.degraded {
                    eprintln!("cordon: warning: not enforced: {}: {}", d.rule, d.reason);
                }
            }
            Ok(())
        }
    }
}

/// Run the plan to completion.
pub fn run(plan: &Plan, facts: &Facts, opts: &RunOptions) -> anyhow::Result<Outcome> {
    let started = Instant::now();
    let Some(program) = plan.program.clone() else {
        let name = plan.command.first().cloned().unwrap_or_default();
        eprintln!("cordon: {name}: command not found in the sandbox's PATH");
        return Ok(Outcome {
            code: 127,
            signal: None,
            timed_out: false,
            duration: started.elapsed(),
            denied_egress: Vec::new(),
            denied_fs: Vec::new(),
            output_truncated: false,
            peak_memory_kib: 0,
        });
    };
    if opts.verbosity != Verbosity::Quiet {
        for w in &plan.warnings {
            eprintln!("cordon: warning: {w}");
        }
    }

    let identity = plan.identity.map(|(uid, gid)| Identity { uid, gid });
    let (owner_uid, owner_gid) = plan.identity.unwrap_or((facts.uid, facts.gid));
    let scratch = Scratch::create(&plan.scratch.dir, owner_uid, owner_gid)?;
    scratch.add_mountpoints(&plan.mounts)?;
    scratch.publish(plan)?;

    let mut env = plan.env.clone();
    let mut ports = plan.landlock.ports.clone();
    let mut host_listener = None;
    if plan.net.mode == NetMode::Egress {
        let port = if plan.net.namespace {
            // The listener is created inside the sandbox's own network namespace, on
            // the fixed port.
            crate::plan::EGRESS_PORT
        } else {
            // Best effort without a network namespace: the proxy listens on the host's
            // loopback and Landlock lets the command connect to that port only.
            let l =
                TcpListener::bind("127.0.0.1:0").context("cannot open the egress proxy's port")?;
            let port = l.local_addr()?.port();
            ports.push((port, AccessNet::ConnectTcp as u64));
            host_listener = Some(l);
            port
        };
        // The plan leaves the values empty: they are filled in here, for either port.
        for (k, v) in env.iter_mut() {
            if k.eq_ignore_ascii_case("http_proxy") || k.eq_ignore_ascii_case("https_proxy") {
                *v = format!("http://127.0.0.1:{port}");
            } else if k.eq_ignore_ascii_case("all_proxy") {
                *v = format!("socks5h://127.0.0.1:{port}");
            }
        }
    }
    let egress_config = if plan.net.mode == NetMode::Egress {
        Some(egress_config(plan, opts)?)
    } else {
        None
    };

    let limits = Limits::new(
        &plan
            .limits
            .iter()
            .filter_map(|(k, v)| Some((LimitKind::from_key(k)?, *v)))
            .collect::<Vec<_>>(),
    );
    // --report: listen to the audit log for Landlock's denial records, where it is on
    // and readable; otherwise the report says why there is no filesystem record.
    let (audit, audit_unavailable) = if opts.report {
        match start_audit(facts) {
            Ok(listener) => (Some(listener), None),
            Err(why) => (None, Some(why)),
        }
    } else {
        (None, None)
    };
    let landlock = if facts.landlock_abi > 0 {
        PreparedLandlock::new(
            plan.landlock.handled_fs,
            plan.landlock.handled_net,
            plan.landlock.scoped,
            &plan
                .landlock
                .rules
                .iter()
                .map(|r| (r.path.clone(), r.rights))
                .collect::<Vec<_>>(),
            &ports,
        )?
        .map(|l| if audit.is_some() { l.log_denials() } else { l })
    } else {
        None
    };
    // Without the view the command sees the host's paths: the ruleset is built here,
    // before the fork (by several threads for a large policy), and the child only
    // restricts itself with it. With the view it is built in the child, on the paths
    // of the finished view.
    let landlock = match landlock {
        Some(l) if !plan.view => Some(l.prebuild()?),
        l => l,
    };
    let filter = if facts.seccomp {
        Some(seccomp::prepare(&seccomp::FilterSpec {
            deny_inet_sockets: plan.seccomp.deny_inet_sockets,
            deny_unix_sockets: plan.seccomp.deny_unix_sockets,
            deny_user_namespaces: plan.seccomp.deny_user_namespaces,
        })?)
    } else {
        None
    };
    let mut prepared_view = if plan.view {
        Some(view::prepare(&plan.mounts)?)
    } else {
        None
    };
    // Rules at the paths where the view attaches a bind are added by the view, on the
    // mount itself, rather than opened again in the finished view.
    let mut landlock = landlock;
    if let (Some(v), Some(l)) = (prepared_view.as_mut(), landlock.as_mut()) {
        v.adopt_landlock(l);
    }
    let output = match plan.max_output {
        Some(limit) => Some(OutputBound::new(limit)?),
        None => None,
    };
    let prepared = launch::prepare(LaunchSpec {
        program,
        argv: plan.argv.clone(),
        env,
        cwd: plan.cwd.clone(),
        namespaces: plan.view,
        netns: plan.net.namespace,
        is_root: facts.is_root,
        uid: facts.uid,
        gid: facts.gid,
        egress_listener: plan.net.mode == NetMode::Egress && plan.net.namespace,
        view: prepared_view,
        landlock,
        seccomp: filter,
        identity,
        limits,
        stdio: output.as_ref().map(OutputBound::child_ends),
    })?;

    launch::block_signals().context("cannot block signals")?;
    if !plan.view {
        // Without a PID namespace, orphans the command leaves (daemons) are reparented
        // to us, so we can end them with the run as init does inside the view.
        launch::become_subreaper().context("cannot become a child subreaper")?;
    }
    let child = match launch::spawn(&prepared) {
        Ok(c) => c,
        Err(LaunchError::Namespaces(e)) => {
            drop(scratch);
            return Err(NamespacesRefused(std::io::Error::from_raw_os_error(e).to_string()).into());
        }
        Err(LaunchError::Setup(e)) => return Err(e).context("cannot start the sandbox"),
    };

    // The proxy starts only now: the fork above happened while we were single-threaded.
    let proxy: Option<ProxyHandle> =
        match (egress_config, child.egress_listener.as_ref(), host_listener) {
            (Some(cfg), Some(fd), _) => {
                let l = TcpListener::from(fd.try_clone()?);
                Some(egress::start(l, cfg).context("cannot start the egress proxy")?)
            }
            (Some(cfg), None, Some(l)) => {
                Some(egress::start(l, cfg).context("cannot start the egress proxy")?)
            }
            _ => None,
        };

    let copier = output.map(|o| o.start(child.pid));
    let failed = launch::read_step_error(&child.errors);
    if let Some(report) = &failed {
        if !report.is_exec() {
            launch::signal(child.pid, libc::SIGKILL);
            let _ = wait_exit(child.pid);
            let mount = report
                .index
                .and_then(|i| plan.mounts.get(i))
                .map(|m| {
                    format!(
                        " (view mount {})",
                        serde_json::to_string(m).unwrap_or_default()
                    )
                })
                .unwrap_or_default();
            if report.step == "landlock_restrict_self" && report.errno == libc::E2BIG {
                bail!("too deeply nested: Landlock stacks at most 16 sandboxes, and this would be one more");
            }
            bail!(
                "setting up the sandbox failed at `{}`{mount}: {}",
                report.step,
                std::io::Error::from_raw_os_error(report.errno)
            );
        }
        eprintln!(
            "cordon: {}: {}",
            plan.command.first().map(String::as_str).unwrap_or(""),
            std::io::Error::from_raw_os_error(report.errno)
        );
    }
    if opts.verbosity == Verbosity::Verbose {
        eprintln!(
            "cordon: started {} (pid {})",
            plan.command.join(" "),
            child.pid
        );
    }

    // Under the sandbox's init the command is init's child: note its pid now, while it
    // runs, to recognise the Landlock domain it creates.
    let mut command_pids = std::collections::BTreeSet::new();
    if let (Some(listener), true) = (&audit, child.has_init) {
        listener.note_children(child.pid, &mut command_pids);
    }
    let mut timed_out = false;
    let mut deadline = plan.timeout.map(|t| started + t);
    let mut killing = false;
    let ended = loop {
        let remaining = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        match launch::wait_signal(remaining) {
            None => {
                // Deadline passed: TERM first, then KILL after the grace period.
                if !killing {
                    timed_out = true;
                    killing = true;
                    if opts.verbosity != Verbosity::Quiet {
                        eprintln!(
                            "cordon: timeout after {:?}: sending TERM",
                            plan.timeout.unwrap_or_default()
                        );
                    }
                    launch::signal(child.pid, libc::SIGTERM);
                    deadline = Some(Instant::now() + plan.kill_grace);
                } else {
                    launch::signal(child.pid, libc::SIGKILL);
                    deadline = None;
                }
            }
            Some((libc::SIGCHLD, _)) => {
                if let Some(status) = launch::try_reap(child.pid) {
                    // With an init, its report is in the pipe by now (or init failed).
                    break match child.status.as_ref().and_then(launch::read_report) {
                        Some(report) => Ended::Reported(report),
                        None => Ended::Reaped(status),
                    };
                }
            }
            Some((launch::REPORT_SIGNAL, _)) => {
                // init's report: the command and all it started are gone; init is still
                // exiting (the kernel tears the namespaces down), which we need not wait for.
                if let Some(report) = child.status.as_ref().and_then(launch::read_report) {
                    break Ended::Reported(report);
                }
            }
            Some((sig, code)) => {
                // A terminal's signal (SI_KERNEL) went to the whole foreground group, the
                // command included; forwarding it would deliver it twice.
                if code != libc::SI_KERNEL {
                    launch::signal(child.pid, sig);
                }
            }
        }
    };
    if !child.has_init {
        kill_descendants();
    }
    // With an init, the command's own status and peak memory come from init's report.
    let (status, peak_memory_kib) = match ended {
        Ended::Reported(r) => (r.status, r.peak_rss_kib),
        Ended::Reaped(raw) => (raw, launch::children_peak_rss_kib()),
    };
    let (code, signal) = if libc::WIFEXITED(status) {
        (libc::WEXITSTATUS(status), None)
    } else if libc::WIFSIGNALED(status) {
        (128 + libc::WTERMSIG(status), Some(libc::WTERMSIG(status)))
    } else {
        (EXIT_CORDON, None)
    };
    let code = match (&failed, timed_out) {
        (_, true) => EXIT_TIMEOUT,
        (Some(r), _) if r.is_exec() => {
            if r.errno == libc::ENOENT {
                127
            } else {
                126
            }
        }
        _ => code,
    };

    let output_truncated = copier.is_some_and(OutputCopier::finish);
    let denied_egress = proxy.as_ref().map(ProxyHandle::denied).unwrap_or_default();
    drop(proxy);
    if !denied_egress.is_empty() && opts.verbosity != Verbosity::Quiet {
        eprintln!(
            "cordon: egress refused during this run: {}",
            denied_egress.join(", ")
        );
    }
    let fs = audit.map(|l| l.finish(child.pid, &command_pids));
    if opts.report {
        report(
            plan,
            &denied_egress,
            fs.as_ref(),
            audit_unavailable.as_deref(),
        );
    }
    if plan.scratch.keep {
        scratch.keep();
        // Printed even with -q: the caller asked for the directory, and this line is the
        // only place that says where it is.
        eprintln!(
            "cordon: kept the scratch dir: {}",
            plan.scratch.dir.display()
        );
    } else {
        drop(scratch);
    }
    Ok(Outcome {
        code,
        signal,
        timed_out,
        duration: started.elapsed(),
        denied_egress,
        denied_fs: fs.map(|f| f.denied).unwrap_or_default(),
        output_truncated,
        peak_memory_kib,
    })
}

/// How the wait for the sandbox ended.
enum Ended {
    /// init's report arrived (the command's status; init may still be exiting).
    Reported(launch::InitReport),
    /// The child we started was reaped without a report: the command itself (no view),
    /// or an init that failed before reporting.
    Reaped(i32),
}

/// `--max-output`: the command's stdout and stderr go through pipes the supervisor copies
/// to its own, counting; past the bound the rest is dropped, a marker printed and the
/// command ended.
struct OutputBound {
    limit: u64,
    out: (OwnedFd, OwnedFd),
    err: (OwnedFd, OwnedFd),
}

impl OutputBound {
    fn new(limit: u64) -> anyhow::Result<OutputBound> {
        let pipe = || -> anyhow::Result<(OwnedFd, OwnedFd)> {
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).context("cannot create an output pipe")
        };
        Ok(OutputBound {
            limit,
            out: pipe()?,
            err: pipe()?,
        })
    }

    /// The write ends, for the child to put on descriptors 1 and 2.
    fn child_ends(&self) -> (RawFd, RawFd) {
        (self.out.1.as_raw_fd(), self.err.1.as_raw_fd())
    }

    /// Close our copies of the write ends and copy in a thread until both pipes close.
    fn start(self, pid: libc::pid_t) -> OutputCopier {
        let OutputBound { limit, out, err } = self;
        drop(out.1);
        drop(err.1);
        let truncated = Arc::new(AtomicBool::new(false));
        let flag = truncated.clone();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let _ = std::thread::Builder::new()
            .name("cordon-output".into())
            .stack_size(64 * 1024)
            .spawn(move || {
                copy_bounded(out.0, err.0, limit, pid, &flag);
                let _ = done_tx.send(());
            });
        OutputCopier {
            truncated,
            done: done_rx,
        }
    }
}

/// The running copier of [`OutputBound`].
struct OutputCopier {
    truncated: Arc<AtomicBool>,
    done: std::sync::mpsc::Receiver<()>,
}

impl OutputCopier {
    /// Wait (briefly: a daemon the command left may hold the pipes) for the copy to end;
    /// whether the output was cut.
    fn finish(self) -> bool {
        let _ = self.done.recv_timeout(Duration::from_secs(2));
        self.truncated.load(Ordering::SeqCst)
    }
}

fn copy_bounded(out: OwnedFd, err: OwnedFd, limit: u64, pid: libc::pid_t, truncated: &AtomicBool) {
    use std::io::{Read, Write};
    let mut sources = [(std::fs::File::from(out), 1), (std::fs::File::from(err), 2)];
    let mut open = [true, true];
    let mut written: u64 = 0;
    let mut buf = vec![0u8; 64 * 1024];
    while open.iter().any(|o| *o) {
        let mut fds: Vec<nix::poll::PollFd> = sources
            .iter()
            .zip(open.iter())
            .filter(|(_, o)| **o)
            .map(|((f, _), _)| nix::poll::PollFd::new(f.as_fd(), nix::poll::PollFlags::POLLIN))
            .collect();
        if nix::poll::poll(&mut fds, nix::poll::PollTimeout::NONE).is_err() {
            continue;
        }
        let ready: Vec<bool> = fds
            .iter()
            .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
            .collect();
        drop(fds);
        let mut k = 0;
        for (i, (file, target)) in sources.iter_mut().enumerate() {
            if !open[i] {
                continue;
            }
            let is_ready = ready[k];
            k += 1;
            if !is_ready {
                continue;
            }
            let n = match file.read(&mut buf) {
                Ok(0) | Err(_) => {
                    open[i] = false;
                    continue;
                }
                Ok(n) => n,
            };
            let room = limit.saturating_sub(written) as usize;
            let take = n.min(room);
            let chunk = &buf[..take];
            let _ = if *target == 1 {
                std::io::stdout()
                    .write_all(chunk)
                    .and_then(|_| std::io::stdout().flush())
            } else {
                std::io::stderr().write_all(chunk)
            };
            written += take as u64;
            if take < n && !truncated.swap(true, Ordering::SeqCst) {
                eprintln!(
                    "\ncordon: output cut at {limit} bytes (--max-output); ending the command"
                );
                launch::signal(pid, libc::SIGKILL);
                return;
            }
        }
    }
}

/// `--report`: what was refused, and plainly what cannot be known.
fn report(
    plan: &Plan,
    denied_egress: &[String],
    fs: Option<&crate::report::FsDenials>,
    unavailable: Option<&str>,
) {
    if plan.net.mode == NetMode::Egress {
        if denied_egress.is_empty() {
            eprintln!("cordon: report: egress: nothing refused");
        } else {
            eprintln!(
                "cordon: report: egress refused: {}",
                denied_egress.join(", ")
            );
        }
    } else {
        eprintln!(
            "cordon: report: network mode `{}`: no egress proxy, so no per-host record",
            plan.net.mode.name()
        );
    }
    match (fs, unavailable) {
        (Some(fs), _) => {
            if fs.denied.is_empty() {
                eprintln!("cordon: report: Landlock refused nothing");
            }
            for what in &fs.denied {
                eprintln!("cordon: report: refused by Landlock: {what}");
            }
            if fs.dropped > 0 {
                eprintln!(
                    "cordon: report: ... and {} more records not kept",
                    fs.dropped
                );
            }
            if plan.view {
                eprintln!(
                    "cordon: report: with the view, paths outside the policy do not exist and read-only binds refuse writes (ENOENT, EROFS): those leave no record"
                );
            }
        }
        (None, why) => eprintln!(
            "cordon: report: filesystem refusals: not available: {}",
            why.unwrap_or("not asked for")
        ),
    }
}

/// Listen to the audit log for this run's Landlock denials, or say why not.
fn start_audit(facts: &Facts) -> Result<crate::report::AuditListener, String> {
    if facts.landlock_abi < 7 {
        return Err(format!(
            "Landlock ABI {} cannot log denials (needs ABI 7)",
            facts.landlock_abi
        ));
    }
    match crate::enforce::probe::audit_enabled() {
        Ok(true) => crate::report::AuditListener::start()
            .map_err(|e| format!("the kernel's audit log cannot be read here ({e}; it needs CAP_AUDIT_READ)")),
        Ok(false) => Err("the kernel's audit log is off (cordon does not switch it on: that is machine-wide), so Landlock's denial records are not kept".to_string()),
        Err(e) => Err(format!("the kernel's audit log cannot be read here ({e})")),
    }
}

/// End every process still descended from us (the command's children and daemons,
/// reparented to us as subreaper) and reap them. Only our own children are signalled,
/// and a child's pid cannot be reused before we reap it.
fn kill_descendants() {
    use nix::sys::wait::{waitid, Id, WaitPidFlag};
    // The usual case, nothing left: one syscall instead of reading /proc.
    let no_children = waitid(
        Id::All,
        WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT,
    ) == Err(nix::errno::Errno::ECHILD);
    if no_children {
        return;
    }
    for _ in 0..1000 {
        let children = own_children();
        if children.is_empty() {
            return;
        }
        for pid in children {
            launch::signal(pid, libc::SIGKILL);
            let _ = wait_exit(pid);
        }
    }
}

/// Our children, from every thread's `/proc/self/task/TID/children`.
fn own_children() -> Vec<libc::pid_t> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<libc::pid_t>().ok()),
            );
        }
    }
    out
}

fn wait_exit(pid: libc::pid_t) -> Option<i32> {
    loop {
        if let Some(s) = launch::try_reap(pid) {
            return Some(s);
        }
        launch::wait_signal(Some(Duration::from_millis(50)));
    }
}

fn egress_config(plan: &Plan, opts: &RunOptions) -> anyhow::Result<EgressConfig> {
    let allow = plan
        .net
        .allow
        .iter()
        .map(|a| AllowRule::parse(a).map_err(|e| anyhow::anyhow!("net.allow `{a}`: {e}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let hosts = plan
        .net
        .hosts
        .iter()
        .map(|(n, ip)| {
            egress::parse_host_pin(&format!("{n}={ip}"))
                .map_err(|e| anyhow::anyhow!("net.hosts `{n}`: {e}"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(EgressConfig {
        allow,
        hosts,
        allow_local: plan.net.allow_local,
        log: plan.net.log.clone(),
        quiet: opts.verbosity == Verbosity::Quiet,
    })
}

/// The buffer the plan is published through: one write for a small plan.
const PUBLISH_BUFFER: usize = 64 * 1024;

/// The run's private directory: created mode 0700 for the command's identity, removed
/// on drop without following any symlink the command planted.
#[derive(Debug)]
struct Scratch {
    dir: std::path::PathBuf,
    keep: bool,
}

impl Scratch {
    fn create(dir: &Path, uid: u32, gid: u32) -> anyhow::Result<Scratch> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
        let root = dir.parent().context("scratch dir has no parent")?;
        match std::fs::DirBuilder::new().mode(0o711).create(root) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e).with_context(|| format!("cannot create {}", root.display())),
        }
        let meta = std::fs::symlink_metadata(root)?;
        // SAFETY-free check: the root must be ours, a real directory, not writable by others,
        // or another user could plant things in it.
        if !meta.is_dir()
            || meta.uid() != nix::unistd::geteuid().as_raw()
            || meta.mode() & 0o022 != 0
        {
            bail!(
                "{} is not a directory owned by you with mode 0711; remove it and try again",
                root.display()
            );
        }
        let _ = std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o711));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("cannot create the scratch dir {}", dir.display()))?;
        let scratch = Scratch {
            dir: dir.to_path_buf(),
            keep: false,
        };
        for sub in ["home", "tmp"] {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(dir.join(sub))?;
        }
        if (uid, gid)
            != (
                nix::unistd::geteuid().as_raw(),
                nix::unistd::getegid().as_raw(),
            )
        {
            for p in [dir.to_path_buf(), dir.join("home"), dir.join("tmp")] {
                std::os::unix::fs::lchown(&p, Some(uid), Some(gid))
                    .with_context(|| format!("cannot hand {} to uid {uid}", p.display()))?;
            }
        }
        Ok(scratch)
    }

    /// The view mounts the private tmp at `/tmp`, and refuses to create mountpoints
    /// inside a host directory. Grants below `/tmp` (a workspace in `/tmp`) need theirs
    /// inside the private tmp: cordon's own fresh directory, so it makes them here.
    fn add_mountpoints(&self, mounts: &[Mount]) -> anyhow::Result<()> {
        let private_tmp = mounts.iter().any(|m| {
            matches!(m, Mount::Bind { source, target, .. } if target == Path::new("/tmp") && *source == self.dir.join("tmp"))
        });
        if !private_tmp {
            return Ok(());
        }
        for m in mounts {
            let (target, is_dir) = match m {
                Mount::Bind { target, is_dir, .. } => (target, *is_dir),
                Mount::MaskDir { target } => (target, true),
                Mount::MaskFile { target } => (target, false),
                _ => continue,
            };
            let Ok(rel) = target.strip_prefix("/tmp") else {
                continue;
            };
            if rel.as_os_str().is_empty() {
                continue;
            }
            let at = self.dir.join("tmp").join(rel);
            let parent = if is_dir {
                at.as_path()
            } else {
                at.parent().unwrap_or(&at)
            };
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create the mountpoint {}", at.display()))?;
            if !is_dir {
                std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&at)
                    .with_context(|| format!("cannot create the mountpoint {}", at.display()))?;
            }
        }
        Ok(())
    }

    /// Write the plan where the command can read it and not change it.
    fn publish(&self, plan: &Plan) -> anyhow::Result<()> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.dir.join(crate::plan::PLAN_FILE);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o444)
            .open(&path)
            .with_context(|| format!("cannot publish the plan at {}", path.display()))?;
        // Through a buffer of fixed size: the plan is on every launch's path, and with
        // thousands of rules it is megabytes; serialising it whole first would grow a
        // buffer that large (copies and page faults) before a single write.
        let mut out = std::io::BufWriter::with_capacity(PUBLISH_BUFFER, file);
        serde_json::to_writer(&mut out, plan)?;
        out.flush()?;
        Ok(())
    }

    fn keep(mut self) {
        self.keep = true;
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        if std::fs::remove_dir_all(&self.dir).is_err() {
            // The command may have left directories without write permission.
            make_removable(&self.dir);
            if let Err(e) = std::fs::remove_dir_all(&self.dir) {
                eprintln!("cordon: warning: cannot remove {}: {e}", self.dir.display());
            }
        }
    }
}

/// Give every real directory below `dir` owner rwx, never following symlinks.
fn make_removable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return;
    };
    if !meta.is_dir() {
        return;
    }
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            make_removable(&e.path());
        }
    }
}

/// Refuse to run from a setuid or setgid install.
pub fn refuse_setuid() -> anyhow::Result<()> {
    creds::refuse_setuid_install()
}
