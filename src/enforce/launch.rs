//! Starting the command: clone into new namespaces, build the view, drop privileges,
//! confine, exec. The order in the child is fixed:
//!
//! ```text
//! supervisor ──clone(NEWNS|NEWPID|NEWNET[|NEWUSER])──► init (PID 1 of the sandbox)
//!   init:    parent-death signal, uid/gid maps, loopback up, egress listener handed
//!            back, the view (ends in pivot_root), then starts the command (vfork-like):
//!   command: rlimits, bounding set, groups, gid, uid, parent-death signal, capabilities,
//!            no_new_privs, Landlock, seccomp (last), close-on-exec of every
//!            inherited descriptor above 2, signal mask reset, exec
//!   init:    drops its own capabilities and reaps until the command exits, then
//!            kills what is left and reports the command's wait status
//! ```
//!
//! Without namespaces (`--no-view`, or none available) the supervisor starts the command
//! directly. Between fork and exec the children only make raw syscalls on data prepared
//! here beforehand: nothing allocates, locks or formats.

use super::creds::{self, Identity, Limits};
use super::landlock::PreparedLandlock;
use super::seccomp::PreparedFilter;
use super::view::PreparedView;
use super::{errno, StepError};
use std::ffi::{CString, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;

pub use crate::plan::EGRESS_PORT;

/// Signals the supervisor forwards to the command.
pub const FORWARDED: [libc::c_int; 7] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
];

/// What the launch needs, converted before fork.
pub struct Prepared {
    program: CString,
    _argv: Vec<CString>,
    argv_ptrs: Vec<*const libc::c_char>,
    _envp: Vec<CString>,
    envp_ptrs: Vec<*const libc::c_char>,
    cwd: CString,
    namespaces: libc::c_int,
    id_maps: Option<IdMaps>,
    loopback: bool,
    egress_listener: bool,
    view: Option<PreparedView>,
    landlock: Option<PreparedLandlock>,
    seccomp: Option<PreparedFilter>,
    identity: Option<Identity>,
    limits: Limits,
    /// Descriptors to become the command's stdout and stderr (`--max-output`).
    stdio: Option<(RawFd, RawFd)>,
    /// TERM, INT, … and CHLD: blocked in the supervisor and init, waited for with
    /// sigwaitinfo, unblocked in the command just before exec.
    signals: libc::sigset_t,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("program", &self.program)
            .field("namespaces", &self.namespaces)
            .finish_non_exhaustive()
    }
}

struct IdMaps {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

/// Inputs of [`prepare`], taken from the plan by the supervisor.
pub struct LaunchSpec {
    pub program: std::path::PathBuf,
    pub argv: Vec<OsString>,
    pub env: Vec<(String, String)>,
    pub cwd: std::path::PathBuf,
    /// Create namespaces (user when not root, mount, PID; network when `netns`).
    pub namespaces: bool,
    pub netns: bool,
    pub is_root: bool,
    pub uid: u32,
    pub gid: u32,
    pub egress_listener: bool,
    pub view: Option<PreparedView>,
    pub landlock: Option<PreparedLandlock>,
    pub seccomp: Option<PreparedFilter>,
    pub identity: Option<Identity>,
    pub limits: Limits,
    /// Pipes the supervisor reads the command's stdout and stderr from, when it bounds them.
    pub stdio: Option<(RawFd, RawFd)>,
}

/// The signal the kernel sends the supervisor when init's report arrives on the status
/// pipe (`O_ASYNC`): the run's result is known then, before init's own exit, in which the
/// kernel tears the sandbox's namespaces down (0.2 ms and more, growing with the mounts).
pub const REPORT_SIGNAL: libc::c_int = libc::SIGIO;

/// The signal set the supervisor blocks and waits on.
pub fn signal_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill a local sigset_t.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in FORWARDED
            .iter()
            .chain([libc::SIGCHLD, REPORT_SIGNAL].iter())
        {
            libc::sigaddset(&mut set, *sig);
        }
        set
    }
}

/// Block the forwarded signals in the calling (single-threaded) supervisor, before any
/// thread starts and before the fork, so children inherit the mask.
pub fn block_signals() -> std::io::Result<()> {
    let set = signal_set();
    // SAFETY: set is initialised; the old mask is not needed.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, ptr::null_mut()) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Convert everything the children need.
pub fn prepare(spec: LaunchSpec) -> anyhow::Result<Prepared> {
    let cstr = |b: &[u8]| {
        CString::new(b).map_err(|_| anyhow::anyhow!("a NUL byte in an argument or variable"))
    };
    let argv: Vec<CString> = spec
        .argv
        .iter()
        .map(|a| cstr(a.as_encoded_bytes()))
        .collect::<anyhow::Result<_>>()?;
    let envp: Vec<CString> = spec
        .env
        .iter()
        .map(|(k, v)| cstr(format!("{k}={v}").as_bytes()))
        .collect::<anyhow::Result<_>>()?;
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(ptr::null());
    let mut envp_ptrs: Vec<*const libc::c_char> = envp.iter().map(|a| a.as_ptr()).collect();
    envp_ptrs.push(ptr::null());

    let mut namespaces = 0;
    let mut id_maps = None;
    if spec.namespaces {
        namespaces = libc::CLONE_NEWNS | libc::CLONE_NEWPID;
        if spec.netns {
            namespaces |= libc::CLONE_NEWNET;
        }
        if !spec.is_root {
            namespaces |= libc::CLONE_NEWUSER;
            id_maps = Some(IdMaps {
                uid_map: format!("{0} {0} 1\n", spec.uid).into_bytes(),
                gid_map: format!("{0} {0} 1\n", spec.gid).into_bytes(),
            });
        }
    }
    Ok(Prepared {
        program: cstr(spec.program.as_os_str().as_encoded_bytes())?,
        _argv: argv,
        argv_ptrs,
        _envp: envp,
        envp_ptrs,
        cwd: cstr(spec.cwd.as_os_str().as_encoded_bytes())?,
        namespaces,
        id_maps,
        loopback: spec.netns,
        egress_listener: spec.egress_listener,
        view: spec.view,
        landlock: spec.landlock,
        seccomp: spec.seccomp,
        identity: spec.identity,
        limits: spec.limits,
        stdio: spec.stdio,
        signals: signal_set(),
    })
}

/// The started sandbox, as the supervisor sees it.
#[derive(Debug)]
pub struct Child {
    /// init (namespaces) or the command itself (no namespaces).
    pub pid: libc::pid_t,
    /// Whether `pid` is the sandbox's init, which reports the command's status.
    pub has_init: bool,
    /// Read end: a step error record, or EOF once the command has exec'd.
    pub errors: OwnedFd,
    /// Read end: init writes the command's raw wait status here.
    pub status: Option<OwnedFd>,
    /// The egress listener created inside the sandbox's network namespace.
    pub egress_listener: Option<OwnedFd>,
}

/// Why the launch failed before the command started.
#[derive(Debug)]
pub enum LaunchError {
    /// clone with namespaces was refused: the caller may fall back to no view.
    Namespaces(i32),
    /// Anything else before the child existed.
    Setup(std::io::Error),
}

/// Start the sandbox. Returns once the child exists; read [`Child::errors`] to learn
/// whether the command was exec'd.
pub fn spawn(p: &Prepared) -> Result<Child, LaunchError> {
    let (err_r, err_w) = pipe().map_err(LaunchError::Setup)?;
    let status = if p.namespaces != 0 {
        let (r, w) = pipe().map_err(LaunchError::Setup)?;
        notify_on_report(&r).map_err(LaunchError::Setup)?;
        Some((r, w))
    } else {
        None
    };
    let egress = if p.egress_listener {
        Some(seqpacket_pair().map_err(LaunchError::Setup)?)
    } else {
        None
    };
    // SAFETY: getpid has no preconditions.
    let supervisor = unsafe { libc::getpid() };
    // SAFETY: pidfd_open on our own pid; the fd is owned below.
    let sup_fd = unsafe { libc::syscall(libc::SYS_pidfd_open, supervisor, 0) };
    if sup_fd < 0 {
        return Err(LaunchError::Setup(std::io::Error::last_os_error()));
    }
    // SAFETY: sup_fd is a fresh fd we own.
    let sup_fd = unsafe { OwnedFd::from_raw_fd(sup_fd as RawFd) };

    // The command is started with `clone_vfork` (by us, or by init inside the view): its
    // stack is allocated here, before any fork.
    let mut stack = ChildStack::new().map_err(LaunchError::Setup)?;
    if p.namespaces == 0 {
        return spawn_vfork(p, &mut stack, err_r, err_w, supervisor);
    }
    // SAFETY: a fork-like clone (no new stack: the child runs on a copy of ours). The
    // supervisor is single-threaded here; the child only runs async-signal-safe code.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (p.namespaces | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    if pid < 0 {
        let e = errno();
        return Err(
            if p.namespaces != 0
                && matches!(e, libc::EPERM | libc::EINVAL | libc::ENOSPC | libc::EUSERS)
            {
                LaunchError::Namespaces(e)
            } else {
                LaunchError::Setup(std::io::Error::from_raw_os_error(e))
            },
        );
    }
    if pid == 0 {
        let err_w = err_w.as_raw_fd();
        if p.namespaces != 0 {
            let status_w = status.as_ref().map_or(-1, |(_, w)| w.as_raw_fd());
            let egress_w = egress.as_ref().map_or(-1, |(_, w)| w.as_raw_fd());
            init_main(p, &mut stack, err_w, status_w, egress_w, sup_fd.as_raw_fd());
        } else {
            command_main(p, err_w, Some(supervisor));
        }
    }
    drop(err_w);
    let status = status.map(|(r, w)| {
        drop(w);
        r
    });
    let egress_listener = match egress {
        Some((r, w)) => {
            drop(w);
            recv_fd(r.as_raw_fd()).ok()
        }
        None => None,
    };
    Ok(Child {
        pid: pid as libc::pid_t,
        has_init: p.namespaces != 0,
        errors: err_r,
        status,
        egress_listener,
    })
}

/// Without namespaces the supervisor starts the command itself, with [`clone_vfork`]:
/// no page tables are copied and no page is copied on write, the cheapest launch there
/// is, on every `--no-view` run.
fn spawn_vfork(
    p: &Prepared,
    stack: &mut ChildStack,
    err_r: OwnedFd,
    err_w: OwnedFd,
    supervisor: libc::pid_t,
) -> Result<Child, LaunchError> {
    let err_fd = err_w.as_raw_fd();
    let pid = clone_vfork(stack, &|| command_main(p, err_fd, Some(supervisor)));
    if pid < 0 {
        return Err(LaunchError::Setup(std::io::Error::last_os_error()));
    }
    drop(err_w);
    Ok(Child {
        pid,
        has_init: false,
        errors: err_r,
        status: None,
        egress_listener: None,
    })
}

/// The stack a [`clone_vfork`] child runs on. Allocated before any fork, so that init
/// (a forked copy of the supervisor) has one without allocating. Mapped directly, not
/// taken from the heap: only the pages the child touches become resident (a heap block
/// would be zeroed, all 256 KiB of it, in the supervisor's resident memory).
struct ChildStack {
    base: *mut libc::c_void,
}

impl ChildStack {
    const SIZE: usize = 256 * 1024;

    fn new() -> std::io::Result<ChildStack> {
        // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                Self::SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(ChildStack { base })
    }

    /// The initial stack pointer: the end of the mapping (page-aligned).
    fn top(&mut self) -> *mut libc::c_void {
        (self.base as usize + Self::SIZE) as *mut libc::c_void
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once, after the child has exec'd or exited.
        unsafe { libc::munmap(self.base, Self::SIZE) };
    }
}

/// Start `child` the way `posix_spawn` does: in a process that shares our memory
/// (`CLONE_VM`), on a stack of its own, while we stay suspended until it has exec'd or
/// exited (`CLONE_VFORK`). Returns its pid, or -1 with errno set. `child` must only make
/// async-signal-safe calls on data prepared beforehand, and end in exec or `_exit`.
fn clone_vfork(stack: &mut ChildStack, child: &dyn Fn()) -> libc::pid_t {
    extern "C" fn trampoline(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` points at the `&dyn Fn` on the caller's stack, which stays alive
        // and untouched while the caller is suspended (CLONE_VFORK) until exec or exit.
        let child = unsafe { &*(arg as *const &dyn Fn()) };
        child();
        // `child` ends in exec or `_exit`; should it ever return, end here.
        // SAFETY: exiting the child without running the parent's exit handlers.
        unsafe { libc::_exit(125) }
    }
    let child_ref: &dyn Fn() = child;
    // SAFETY: the stack is ours and outlives the child's use of it (we resume only after
    // exec or exit); its end (page-aligned) is the child's stack pointer. The
    // child writes nothing we read afterwards except through its pipes.
    unsafe {
        libc::clone(
            trampoline,
            stack.top(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            &child_ref as *const &dyn Fn() as *mut libc::c_void,
        )
    }
}

/// A step error record as the child writes it: errno, index, step name.
pub fn read_step_error(fd: &OwnedFd) -> Option<StepReport> {
    let mut buf = [0u8; 128];
    let mut len = 0;
    loop {
        // SAFETY: reading into our own buffer within bounds.
        let n = unsafe {
            libc::read(
                fd.as_raw_fd(),
                buf[len..].as_mut_ptr().cast(),
                buf.len() - len,
            )
        };
        if n < 0 && errno() == libc::EINTR {
            continue;
        }
        if n <= 0 {
            break;
        }
        len += n as usize;
    }
    if len < 9 {
        return None;
    }
    let errno = i32::from_le_bytes(buf[0..4].try_into().ok()?);
    let index = u32::from_le_bytes(buf[4..8].try_into().ok()?);
    let n = usize::from(buf[8]).min(len - 9);
    Some(StepReport {
        step: String::from_utf8_lossy(&buf[9..9 + n]).into_owned(),
        errno,
        index: (index != u32::MAX).then_some(index as usize),
    })
}

/// A step error as the supervisor received it.
#[derive(Debug, Clone)]
pub struct StepReport {
    pub step: String,
    pub errno: i32,
    pub index: Option<usize>,
}

impl StepReport {
    /// The failed step was the exec itself (so the command's 126/127 applies).
    pub fn is_exec(&self) -> bool {
        self.step == "exec"
    }
}

/// What init reports on the status pipe once the command and everything it started are
/// gone: the command's raw wait status and the peak resident memory of the processes init
/// reaped (what `getrusage(RUSAGE_CHILDREN)` says in init).
#[derive(Debug, Clone, Copy)]
pub struct InitReport {
    pub status: i32,
    pub peak_rss_kib: u64,
}

const INIT_REPORT_LEN: usize = 12;

/// Have the kernel send us [`REPORT_SIGNAL`] (SIGIO, the `O_ASYNC` default) when init
/// writes its report, and never block on reading it.
fn notify_on_report(read_end: &OwnedFd) -> std::io::Result<()> {
    let fd = read_end.as_raw_fd();
    // SAFETY: fcntl on our own descriptor with integer arguments.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0
            || libc::fcntl(fd, libc::F_SETOWN, libc::getpid()) < 0
            || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_ASYNC | libc::O_NONBLOCK) < 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Init's report, when it has been written (the pipe never blocks).
pub fn read_report(fd: &OwnedFd) -> Option<InitReport> {
    let mut buf = [0u8; INIT_REPORT_LEN];
    // SAFETY: reading into a local buffer of the length passed.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    (n == INIT_REPORT_LEN as isize).then(|| InitReport {
        status: i32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]),
        peak_rss_kib: u64::from_le_bytes([
            buf[4], buf[5], buf[6], buf[7], buf[8], buf[9], buf[10], buf[11],
        ]),
    })
}

// ---------------------------------------------------------------------------------------
// Children. Everything below runs between fork and exec: async-signal-safe only.

/// Write a step error record and exit. No allocation: a stack buffer and raw write.
fn fail(err_w: RawFd, e: StepError, code: i32) -> ! {
    fail_at(err_w, e, u32::MAX, code)
}

/// [`fail`] for a step that belongs to one entry of a list (a mount of the view).
fn fail_at(err_w: RawFd, e: StepError, index: u32, code: i32) -> ! {
    let mut buf = [0u8; 128];
    buf[0..4].copy_from_slice(&e.errno.to_le_bytes());
    buf[4..8].copy_from_slice(&index.to_le_bytes());
    let step = e.step.as_bytes();
    let n = step.len().min(buf.len() - 9);
    buf[8] = n as u8;
    buf[9..9 + n].copy_from_slice(&step[..n]);
    // SAFETY: writing our own buffer, then exiting without running destructors.
    unsafe {
        libc::write(err_w, buf.as_ptr().cast(), 9 + n);
        libc::_exit(code)
    }
}

fn check(err_w: RawFd, r: Result<(), StepError>) {
    if let Err(e) = r {
        fail(err_w, e, 125);
    }
}

fn sys(rc: libc::c_long, step: &'static str) -> Result<(), StepError> {
    if rc < 0 {
        Err(StepError::last(step))
    } else {
        Ok(())
    }
}

/// PID 1 of the sandbox.
fn init_main(
    p: &Prepared,
    stack: &mut ChildStack,
    err_w: RawFd,
    status_w: RawFd,
    egress_w: RawFd,
    sup_fd: RawFd,
) -> ! {
    // SAFETY: prctl with integer arguments.
    check(
        err_w,
        sys(
            unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } as _,
            "set parent-death signal",
        ),
    );
    // The supervisor may have died before the line above: then nobody would kill us.
    let mut pfd = libc::pollfd {
        fd: sup_fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: polling one valid pollfd without waiting.
    if unsafe { libc::poll(&mut pfd, 1, 0) } != 0 {
        // SAFETY: exiting the child.
        unsafe { libc::_exit(125) };
    }
    // SAFETY: closing an fd the child does not need.
    unsafe { libc::close(sup_fd) };
    if let Some(maps) = &p.id_maps {
        check(
            err_w,
            write_file(
                c"/proc/self/setgroups",
                b"deny",
                "write /proc/self/setgroups",
            ),
        );
        check(
            err_w,
            write_file(
                c"/proc/self/gid_map",
                &maps.gid_map,
                "write /proc/self/gid_map",
            ),
        );
        check(
            err_w,
            write_file(
                c"/proc/self/uid_map",
                &maps.uid_map,
                "write /proc/self/uid_map",
            ),
        );
    }
    if p.loopback {
        check(err_w, loopback_up());
    }
    if p.egress_listener {
        check(err_w, egress_listen(egress_w));
    }
    if let Some(view) = &p.view {
        // The view adds the Landlock rules it adopted as it mounts: their ruleset first.
        let landlock = p.landlock.as_ref().filter(|l| l.adopted_any());
        if let Some(ll) = landlock {
            check(err_w, ll.begin());
        }
        if let Err(e) = view.apply(landlock) {
            let step = StepError {
                step: e.step,
                errno: e.errno,
            };
            fail_at(err_w, step, u32::try_from(e.index).unwrap_or(u32::MAX), 125);
        }
    }

    let cmd = clone_vfork(stack, &|| command_main(p, err_w, None));
    if cmd < 0 {
        fail(err_w, StepError::last("start the command"), 125);
    }
    // The command has its own copy of the ruleset the view started; init needs none.
    if let Some(ll) = &p.landlock {
        ll.release();
    }
    // SAFETY: init keeps no descriptor the supervisor waits on, so EOF reaches it once
    // the command has exec'd (or failed).
    unsafe {
        libc::close(err_w);
        if egress_w >= 0 {
            libc::close(egress_w);
        }
    }
    // init needs no privilege to reap and forward: drop it before waiting.
    let _ = creds::clear_capabilities();
    let _ = creds::set_no_new_privs();
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };

    let mut command_status: Option<i32> = None;
    loop {
        // SAFETY: an all-zero siginfo_t is a valid value to be overwritten.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: siginfo is written by the kernel; the set is initialised.
        let sig = unsafe { libc::sigwaitinfo(&p.signals, &mut info) };
        if sig < 0 {
            continue;
        }
        if sig == libc::SIGCHLD {
            loop {
                let mut status = 0;
                // SAFETY: reaping any child of init without blocking.
                let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
                if pid <= 0 {
                    break;
                }
                if pid == cmd {
                    command_status = Some(status);
                }
            }
            if let Some(status) = command_status {
                // The command is gone: end the rest of the tree, report, exit.
                // SAFETY: kill(-1) from PID 1 reaches only this namespace's processes.
                unsafe {
                    libc::kill(-1, libc::SIGKILL);
                    while libc::waitpid(-1, ptr::null_mut(), 0) > 0 {}
                    let mut report = [0u8; INIT_REPORT_LEN];
                    report[..4].copy_from_slice(&status.to_le_bytes());
                    report[4..].copy_from_slice(&children_peak_rss_kib().to_le_bytes());
                    // One write below PIPE_BUF: the supervisor reads all of it or nothing.
                    libc::write(status_w, report.as_ptr().cast(), report.len());
                    libc::_exit(0);
                }
            }
        } else if info.si_code != libc::SI_KERNEL {
            // Sent by the supervisor. A terminal's signal (SI_KERNEL) already reached the
            // command as a member of the foreground process group.
            // SAFETY: signalling our own child.
            unsafe { libc::kill(cmd, sig) };
        }
    }
}

/// The command's own process: confine and exec.
fn command_main(p: &Prepared, err_w: RawFd, supervisor: Option<libc::pid_t>) -> ! {
    // SAFETY: chdir to a prepared C string; "/" is the fallback inside a view.
    if unsafe { libc::chdir(p.cwd.as_ptr()) } != 0 {
        fail(err_w, StepError::last("enter the working directory"), 125);
    }
    check(err_w, p.limits.apply());
    check(err_w, creds::switch_identity(p.identity));
    // The parent-death signal is cleared by a change of credentials: set it after.
    // SAFETY: prctl with integer arguments.
    check(
        err_w,
        sys(
            unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } as _,
            "set parent-death signal",
        ),
    );
    if let Some(sup) = supervisor {
        // SAFETY: getppid has no preconditions.
        if unsafe { libc::getppid() } != sup {
            // SAFETY: exiting the child.
            unsafe { libc::_exit(125) };
        }
    }
    check(err_w, creds::drop_all_capabilities());
    check(err_w, creds::set_no_new_privs());
    if let Some(ll) = &p.landlock {
        check(err_w, ll.apply());
    }
    if let Some(filter) = &p.seccomp {
        check(
            err_w,
            filter.apply().map_err(|e| StepError {
                step: "install the seccomp filter",
                errno: e as i32,
            }),
        );
    }
    if let Some((out, err)) = p.stdio {
        // SAFETY: dup2 onto the standard descriptors; the copies are not close-on-exec.
        let redirected = unsafe { libc::dup2(out, 1) >= 0 && libc::dup2(err, 2) >= 0 };
        if !redirected {
            fail(err_w, StepError::last("redirect stdout and stderr"), 125);
        }
    }
    check(err_w, creds::close_inherited_fds(&[]));
    // SAFETY: resetting one disposition, an empty set, then unblocking everything the
    // supervisor blocked. The Rust runtime ignores SIGPIPE in cordon; an ignored signal
    // would survive exec, and `yes | head -1` would end in "Broken pipe" errors.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, ptr::null_mut());
        libc::execve(
            p.program.as_ptr(),
            p.argv_ptrs.as_ptr(),
            p.envp_ptrs.as_ptr(),
        );
    }
    let e = errno();
    fail(
        err_w,
        StepError {
            step: "exec",
            errno: e,
        },
        if e == libc::ENOENT { 127 } else { 126 },
    );
}

fn write_file(path: &std::ffi::CStr, data: &[u8], step: &'static str) -> Result<(), StepError> {
    // SAFETY: path is NUL-terminated; data is a valid slice.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(StepError::last(step));
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        let e = StepError::last(step);
        libc::close(fd);
        if n != data.len() as isize {
            return Err(e);
        }
    }
    Ok(())
}

/// Bring up `lo` in the new network namespace.
fn loopback_up() -> Result<(), StepError> {
    // SAFETY: a datagram socket for interface ioctls, an ifreq we initialise, closed after.
    unsafe {
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return Err(StepError::last("socket for loopback"));
        }
        let mut ifr: libc::ifreq = std::mem::zeroed();
        ifr.ifr_name[0] = b'l' as libc::c_char;
        ifr.ifr_name[1] = b'o' as libc::c_char;
        if libc::ioctl(s, libc::SIOCGIFFLAGS, &mut ifr) < 0 {
            let e = StepError::last("read loopback flags");
            libc::close(s);
            return Err(e);
        }
        ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(s, libc::SIOCSIFFLAGS, &ifr) < 0 {
            let e = StepError::last("bring loopback up");
            libc::close(s);
            return Err(e);
        }
        libc::close(s);
    }
    Ok(())
}

/// Listen on 127.0.0.1:EGRESS_PORT inside the namespace and hand the socket to the
/// supervisor, which serves it; the command never holds it.
fn egress_listen(channel: RawFd) -> Result<(), StepError> {
    // SAFETY: socket setup on a local sockaddr_in; the fd is sent and then closed.
    unsafe {
        let s = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return Err(StepError::last("egress listener socket"));
        }
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_port = EGRESS_PORT.to_be();
        addr.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
        if libc::bind(
            s,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as u32,
        ) < 0
        {
            return Err(StepError::last("bind the egress listener"));
        }
        if libc::listen(s, 512) < 0 {
            return Err(StepError::last("listen on the egress listener"));
        }
        send_fd(channel, s)?;
        libc::close(s);
    }
    Ok(())
}

/// Send one descriptor over a unix socket (SCM_RIGHTS), with a stack buffer.
fn send_fd(channel: RawFd, fd: RawFd) -> Result<(), StepError> {
    // SAFETY: msghdr and cmsg built in properly aligned local buffers of the right size.
    unsafe {
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut control = [0u64; 4];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
        ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        if libc::sendmsg(channel, &msg, 0) < 0 {
            return Err(StepError::last(
                "hand the egress listener to the supervisor",
            ));
        }
    }
    Ok(())
}

/// Receive one descriptor sent by [`send_fd`].
fn recv_fd(channel: RawFd) -> std::io::Result<OwnedFd> {
    // SAFETY: as in send_fd; the received fd is owned by the returned OwnedFd.
    unsafe {
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut control = [0u64; 4];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control);
        let n = libc::recvmsg(channel, &mut msg, libc::MSG_CMSG_CLOEXEC);
        if n <= 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "no egress listener",
            ));
        }
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() || (*cmsg).cmsg_type != libc::SCM_RIGHTS {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "no descriptor received",
            ));
        }
        let fd = ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>());
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// A close-on-exec pipe, made before the fork (nix's safe wrapper).
fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?)
}

/// A close-on-exec unix seqpacket pair, made before the fork.
fn seqpacket_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    Ok(socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?)
}

/// Wait for one of the blocked signals, or until `timeout` passes (None: forever).
/// Returns the signal and its `si_code`, or None on timeout.
pub fn wait_signal(timeout: Option<std::time::Duration>) -> Option<(libc::c_int, libc::c_int)> {
    let set = signal_set();
    // SAFETY: info is written by the kernel; set and ts are initialised locals.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    loop {
        let rc = match timeout {
            Some(t) => {
                let ts = libc::timespec {
                    tv_sec: t.as_secs() as libc::time_t,
                    tv_nsec: t.subsec_nanos() as libc::c_long,
                };
                // SAFETY: as above.
                unsafe { libc::sigtimedwait(&set, &mut info, &ts) }
            }
            // SAFETY: as above.
            None => unsafe { libc::sigwaitinfo(&set, &mut info) },
        };
        if rc >= 0 {
            return Some((rc, info.si_code));
        }
        if errno() == libc::EAGAIN {
            return None;
        }
    }
}

/// Send `sig` to `pid`.
pub fn signal(pid: libc::pid_t, sig: libc::c_int) {
    // SAFETY: kill has no memory preconditions.
    unsafe { libc::kill(pid, sig) };
}

/// Reap `pid` if it has exited; its raw wait status.
pub fn try_reap(pid: libc::pid_t) -> Option<i32> {
    let mut status = 0;
    // SAFETY: waiting for our own child without blocking.
    let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    (rc == pid).then_some(status)
}

/// Peak resident memory of waited-for children, in KiB.
pub fn children_peak_rss_kib() -> u64 {
    // SAFETY: getrusage fills a local struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    ru.ru_maxrss as u64
}

/// Write all of `data` to a descriptor the caller handed us by number (`--status-fd`),
/// without taking ownership of it.
pub fn write_to_fd(fd: RawFd, mut data: &[u8]) -> std::io::Result<()> {
    while !data.is_empty() {
        // SAFETY: writing from a valid slice to a descriptor number; a bad number fails
        // with EBADF and touches no memory.
        let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        data = &data[n as usize..];
    }
    Ok(())
}

/// Make this process the reaper of its orphaned descendants (`PR_SET_CHILD_SUBREAPER`).
pub fn become_subreaper() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
