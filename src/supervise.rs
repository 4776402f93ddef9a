//! The supervisor: carries out a plan. Creates the scratch dir, starts the egress proxy,
//! launches the sandbox, forwards signals, enforces the timeout, maps the exit status,
//! cleans up. It decides nothing the plan did not.

use crate::egress::{self, AllowRule, EgressConfig, ProxyHandle};
use crate::enforce::creds::{self, Identity, LimitKind, Limits};
use crate::enforce::landlock::PreparedLandlock;
use crate::enforce::launch::{self, LaunchError, LaunchSpec};
use crate::enforce::{seccomp, view};
use crate::plan::{Facts, Plan};
use crate::policy::{EnforceMode, NetMode};
use anyhow::{bail, Context as _};
use landlock::AccessNet;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::path::Path;
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

    let mut env = plan.env.clone();
    let mut ports = plan.landlock.ports.clone();
    let mut host_listener = None;
    if plan.net.mode == NetMode::Egress && !plan.net.namespace {
        // Best effort without a network namespace: the proxy listens on the host's
        // loopback and Landlock lets the command connect to that port only.
        let l = TcpListener::bind("127.0.0.1:0").context("cannot open the egress proxy's port")?;
        let port = l.local_addr()?.port();
        for (k, v) in env.iter_mut() {
            if k.eq_ignore_ascii_case("http_proxy") || k.eq_ignore_ascii_case("https_proxy") {
                *v = format!("http://127.0.0.1:{port}");
            } else if k.eq_ignore_ascii_case("all_proxy") {
                *v = format!("socks5h://127.0.0.1:{port}");
            }
        }
        ports.push((port, AccessNet::ConnectTcp as u64));
        host_listener = Some(l);
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
    } else {
        None
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
    let prepared_view = if plan.view {
        Some(view::prepare(&plan.mounts)?)
    } else {
        None
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
    })?;

    launch::block_signals().context("cannot block signals")?;
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

    let failed = launch::read_step_error(&child.errors);
    if let Some(report) = &failed {
        if !report.is_exec() {
            launch::signal(child.pid, libc::SIGKILL);
            let _ = wait_exit(child.pid);
            bail!(
                "setting up the sandbox failed at `{}`: {}",
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

    let mut timed_out = false;
    let mut deadline = plan.timeout.map(|t| started + t);
    let mut killing = false;
    let raw_status = loop {
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
                    break status;
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
    // With an init, the command's own status comes through the status pipe.
    let status = match &child.status {
        Some(fd) => launch::read_status(fd).unwrap_or(raw_status),
        None => raw_status,
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

    let denied_egress = proxy.as_ref().map(ProxyHandle::denied).unwrap_or_default();
    drop(proxy);
    if !denied_egress.is_empty() && opts.verbosity != Verbosity::Quiet {
        eprintln!(
            "cordon: egress refused during this run: {}",
            denied_egress.join(", ")
        );
    }
    if opts.report && denied_egress.is_empty() && opts.verbosity != Verbosity::Quiet {
        eprintln!(
            "cordon: report: no egress refused; filesystem refusals are not recorded by this build"
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
    let _ = child.errors.as_raw_fd();
    Ok(Outcome {
        code,
        signal,
        timed_out,
        duration: started.elapsed(),
        denied_egress,
    })
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
