//! The seccomp layer: a small deny-list filter, default action *allow*.
//!
//! Landlock and the namespaces confine files and the network, but a few
//! syscalls reach around them; this filter closes exactly those:
//!
//! | syscall | refused when | answer |
//! |---|---|---|
//! | `ioctl(_, TIOCSTI)`, `ioctl(_, TIOCLINUX)` | always (low 32 bits of the request compared, as the kernel does) | `EPERM` |
//! | `socket(_, _, IPPROTO_MPTCP)` | always, any family (MPTCP bypasses Landlock TCP rules) | `EPERM` |
//! | `io_uring_setup`, `io_uring_enter`, `io_uring_register` | always (io_uring ops bypass this filter) | `EPERM` |
//! | x32 ABI: syscall number with bit `0x4000_0000` set (x86_64 only) | always | `EPERM` |
//! | any syscall made with a foreign arch (e.g. i386 `int 0x80` on x86_64) | always | process killed (`SIGSYS`) |
//! | `socket(AF_UNIX, ..)` | `deny_unix_sockets` (`socketpair` stays allowed) | `EPERM` |
//! | `socket(family, ..)` for every family but `AF_UNIX`/`AF_NETLINK` | `deny_inet_sockets` | `EPERM` |
//! | `unshare(flags & CLONE_NEWUSER)`, `clone(flags & CLONE_NEWUSER)` | `deny_user_namespaces` | `EPERM` |
//! | `clone3` | `deny_user_namespaces` (its flags are behind a pointer) | `ENOSYS` |
//!
//! Decisions worth knowing:
//!
//! * Every refusal answers `EPERM` ("the policy forbids this"), except `clone3`,
//!   which answers `ENOSYS` so that glibc and others fall back to `clone`, where
//!   the flags are visible to the filter.
//! * `deny_inet_sockets` is an allow-list of families (`AF_UNIX`, `AF_NETLINK`),
//!   not a deny-list of `AF_INET`/`AF_INET6`/`AF_PACKET`: without a network
//!   namespace, `AF_VSOCK` (to the hypervisor host), `AF_XDP`, `AF_TIPC`,
//!   `AF_RDS`, bluetooth, CAN ... also leave the sandbox. `AF_NETLINK` stays
//!   because name resolution and `getifaddrs` use it and it reaches only the
//!   kernel.
//! * x32: seccompiler only emits the arch check (`AUDIT_ARCH_X86_64`, foreign
//!   arch → kill), and x32 syscalls carry the *same* arch value, so a hand-written
//!   `JSET 0x4000_0000 → EPERM` is inserted right after seccompiler's arch check,
//!   before any per-syscall rule. [`prepare`] checks the shape of seccompiler's
//!   prologue and fails rather than insert at the wrong place.
//!   The bit test also catches syscall numbers such as `-1`, which then get
//!   `EPERM` instead of `ENOSYS`.
//! * 32-bit programs: their syscalls (i386 `int 0x80` on x86_64, arm32 compat
//!   on aarch64) carry another arch value, and seccompiler's arch check kills
//!   the process with `SIGSYS`. So i386 binaries cannot run under this filter;
//!   letting them through would bypass every rule (other syscall numbers).
//! * Architectures: x86_64 (built and tested) and aarch64 (written for it, by
//!   `cfg`, but not compiled or tested here).
//! * Not covered: `setns` into an existing user namespace (needs a handle on
//!   one and `CAP_SYS_ADMIN` in it), `ioctl`s other than the two above,
//!   `AF_NETLINK` sockets (e.g. `NETLINK_SOCK_DIAG` can list the host's sockets
//!   when there is no network namespace).

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use nix::errno::Errno;
use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op,
    SeccompCondition as Cond, SeccompFilter, SeccompRule, TargetArch,
};

/// What the caller's plan decided for the optional rules; the always-on rules
/// (TIOCSTI/TIOCLINUX, MPTCP, io_uring, x32) need no switch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FilterSpec {
    /// Refuse new sockets of every family but `AF_UNIX` and `AF_NETLINK`; used
    /// for `net = none|egress` where no network namespace can be had.
    pub deny_inet_sockets: bool,
    /// Refuse `socket(AF_UNIX, ..)` (not `socketpair`); used where no view hides
    /// the host's unix sockets (session bus, docker.sock, ...).
    pub deny_unix_sockets: bool,
    /// Refuse creating user namespaces (`unshare`/`clone` with `CLONE_NEWUSER`,
    /// `clone3` → `ENOSYS`); off when nesting sandboxes needs them.
    pub deny_user_namespaces: bool,
}

/// A compiled filter, built before `fork` so that [`PreparedFilter::apply`]
/// only has to hand a pointer to the kernel.
#[derive(Debug, Clone)]
pub struct PreparedFilter {
    program: BpfProgram,
}

/// The x32 ABI marks its syscall numbers with this bit (`__X32_SYSCALL_BIT`).
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// `TIOCSTI` and `TIOCLINUX` as the kernel compares them (`unsigned int cmd`);
/// the same values on x86_64 and aarch64 (asm-generic), checked against libc in
/// the tests.
const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541C;

/// Offsets into `struct seccomp_data`.
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;

/// Maximum filter length the kernel accepts (`BPF_MAXINSNS`).
const BPF_MAXINSNS: usize = 4096;

fn stmt(code: u32, k: u32) -> sock_filter {
    sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

fn ret_errno(errno: i32) -> sock_filter {
    stmt(
        libc::BPF_RET | libc::BPF_K,
        libc::SECCOMP_RET_ERRNO | (errno as u32 & libc::SECCOMP_RET_DATA),
    )
}

fn target_arch() -> anyhow::Result<TargetArch> {
    #[cfg(target_arch = "x86_64")]
    return Ok(TargetArch::x86_64);
    #[cfg(target_arch = "aarch64")]
    return Ok(TargetArch::aarch64);
    #[allow(unreachable_code)]
    {
        bail!("the seccomp filter supports only x86_64 and aarch64")
    }
}

fn dword(arg: u8, op: Op, value: u64) -> anyhow::Result<Cond> {
    Cond::new(arg, Len::Dword, op, value).context("building a seccomp condition")
}

fn rule(conds: Vec<Cond>) -> anyhow::Result<SeccompRule> {
    SeccompRule::new(conds).context("building a seccomp rule")
}

/// The per-syscall rules that seccompiler compiles; all of them answer `EPERM`.
fn rules(spec: &FilterSpec) -> anyhow::Result<BTreeMap<i64, Vec<SeccompRule>>> {
    let mut map: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();

    // Terminal injection. The kernel takes `unsigned int cmd`, so only the low
    // 32 bits of the request matter: a Dword comparison ignores the high half.
    map.insert(
        libc::SYS_ioctl,
        vec![
            rule(vec![dword(1, Op::Eq, TIOCSTI)?])?,
            rule(vec![dword(1, Op::Eq, TIOCLINUX)?])?,
        ],
    );

    // Sockets. `protocol` and `domain` are `int`: low 32 bits.
    let mut socket = vec![rule(vec![dword(2, Op::Eq, libc::IPPROTO_MPTCP as u64)?])?];
    let af_unix = libc::AF_UNIX as u64;
    let af_netlink = libc::AF_NETLINK as u64;
    match (spec.deny_inet_sockets, spec.deny_unix_sockets) {
        (true, true) => socket.push(rule(vec![dword(0, Op::Ne, af_netlink)?])?),
        (true, false) => socket.push(rule(vec![
            dword(0, Op::Ne, af_unix)?,
            dword(0, Op::Ne, af_netlink)?,
        ])?),
        (false, true) => socket.push(rule(vec![dword(0, Op::Eq, af_unix)?])?),
        (false, false) => {}
    }
    map.insert(libc::SYS_socket, socket);

    // io_uring submits operations the filter never sees.
    for nr in [
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ] {
        map.insert(nr, vec![]);
    }

    if spec.deny_user_namespaces {
        let newuser = libc::CLONE_NEWUSER as u64;
        // unshare(flags) and clone(flags, ...): flags is arg0 on x86_64 and
        // aarch64; the kernel uses the low 32 bits of clone's flags.
        map.insert(
            libc::SYS_unshare,
            vec![rule(vec![dword(0, Op::MaskedEq(newuser), newuser)?])?],
        );
        map.insert(
            libc::SYS_clone,
            vec![rule(vec![dword(0, Op::MaskedEq(newuser), newuser)?])?],
        );
    }
    Ok(map)
}

/// Instructions inserted after seccompiler's arch check: they run before the
/// per-syscall rules, on the syscall number alone.
fn prologue(spec: &FilterSpec) -> Vec<sock_filter> {
    let mut out = vec![stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, DATA_NR)];
    #[cfg(target_arch = "x86_64")]
    {
        out.push(jump(
            libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K,
            X32_SYSCALL_BIT,
            0,
            1,
        ));
        out.push(ret_errno(libc::EPERM));
    }
    if spec.deny_user_namespaces {
        out.push(jump(
            libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
            libc::SYS_clone3 as u32,
            0,
            1,
        ));
        out.push(ret_errno(libc::ENOSYS));
    }
    out
}

/// Compile the filter for `spec`. Runs before `fork`; may allocate.
///
/// Exists so that the child only has to call [`PreparedFilter::apply`].
pub fn prepare(spec: &FilterSpec) -> anyhow::Result<PreparedFilter> {
    let arch = target_arch()?;
    let filter = SeccompFilter::new(
        rules(spec)?,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .context("building the seccomp filter")?;
    let mut program: BpfProgram = filter.try_into().context("compiling the seccomp filter")?;

    // seccompiler's program starts with: load arch; jeq ARCH (jt=1); ret kill.
    // Its jump lands on index 3, where we insert our prologue. Only forward
    // jumps exist in BPF and none crosses index 3, so inserting there keeps
    // every offset valid. Refuse anything else rather than guess.
    let head_ok = program.len() > 3
        && program[0] == stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, DATA_ARCH)
        && program[1].code as u32 == libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K
        && program[1].jt == 1
        && program[1].jf == 0
        && program[2] == stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_KILL_PROCESS);
    if !head_ok {
        bail!("unexpected seccomp program layout from seccompiler; refusing to patch it");
    }
    program.splice(3..3, prologue(spec));

    if program.len() > BPF_MAXINSNS {
        bail!(
            "the seccomp filter has {} instructions, more than the kernel's {BPF_MAXINSNS}",
            program.len()
        );
    }
    Ok(PreparedFilter { program })
}

impl PreparedFilter {
    /// Install the filter on the calling thread with
    /// `seccomp(SECCOMP_SET_MODE_FILTER)`.
    ///
    /// Exists as the last confining step in the child: async-signal-safe (no
    /// allocation; the `sock_fprog` is built on the stack pointing at the
    /// program compiled before `fork`). Requires `no_new_privs` to be set first
    /// (see [`super::creds::set_no_new_privs`]) unless the caller has
    /// `CAP_SYS_ADMIN`; otherwise the kernel answers `EACCES`. Installs on the
    /// calling thread only (the child of `fork` has one thread).
    pub fn apply(&self) -> Result<(), Errno> {
        let prog = libc::sock_fprog {
            // Bounded by BPF_MAXINSNS in `prepare`.
            len: self.program.len() as u16,
            // seccompiler's `sock_filter` is `#[repr(C)]` with the same fields
            // as the kernel's (and libc's) `struct sock_filter`.
            filter: self.program.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: `prog` points at `self.program`, which outlives this call
        // and is not mutated; the kernel copies the program and does not keep
        // the pointer. The syscall takes (op, flags, pointer) exactly like this.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER as libc::c_ulong,
                0 as libc::c_ulong,
                &prog as *const libc::sock_fprog,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(Errno::last())
        }
    }

    /// Number of BPF instructions; for `explain` and tests.
    pub fn len(&self) -> usize {
        self.program.len()
    }

    /// Always false (a prepared filter has at least its arch check); here
    /// because clippy wants `is_empty` next to `len`.
    pub fn is_empty(&self) -> bool {
        self.program.is_empty()
    }
}

#[cfg(test)]
// libc's `Ioctl` is `c_ulong` on glibc and `c_int` on musl: keep the casts.
#[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
mod tests {
    use super::*;
    use crate::enforce::creds::test_support::{errno_is, ok, run_in_child, Fail};
    use crate::enforce::creds::{set_no_new_privs, Identity};

    const ALL: FilterSpec = FilterSpec {
        deny_inet_sockets: true,
        deny_unix_sockets: true,
        deny_user_namespaces: true,
    };

    fn install(filter: &PreparedFilter) -> Result<(), Fail> {
        set_no_new_privs().map_err(|e| Fail::new(e.step, -1, e.errno))?;
        filter
            .apply()
            .map_err(|e| Fail::new("seccomp apply", -1, e as i32))
    }

    fn open_pty() -> (i32, i32) {
        let pty = nix::pty::openpty(None, None).expect("openpty");
        use std::os::fd::IntoRawFd;
        (pty.master.into_raw_fd(), pty.slave.into_raw_fd())
    }

    fn ioctl_raw(fd: i32, req: u64, arg: *mut libc::c_void) -> i64 {
        // SAFETY: test helper; `arg` points at a live buffer large enough for
        // every request the tests use (a char or a winsize).
        unsafe { libc::syscall(libc::SYS_ioctl, fd, req, arg) }
    }

    fn socket(domain: i32, ty: i32, proto: i32) -> i64 {
        // SAFETY: plain syscall with integer arguments.
        let fd = unsafe { libc::socket(domain, ty, proto) };
        if fd >= 0 {
            // SAFETY: we own the descriptor just created.
            unsafe { libc::close(fd) };
        }
        fd as i64
    }

    #[test]
    fn ioctl_numbers_match_libc() {
        assert_eq!(TIOCSTI, libc::TIOCSTI as u64);
        assert_eq!(TIOCLINUX, libc::TIOCLINUX as u64);
    }

    #[test]
    fn prepare_is_deterministic_and_small() {
        let a = prepare(&ALL).unwrap();
        let b = prepare(&ALL).unwrap();
        assert_eq!(a.program, b.program);
        assert!(a.len() < 200, "{}", a.len());
        assert!(prepare(&FilterSpec::default()).unwrap().len() < a.len());
    }

    #[test]
    fn tiocsti_refused_harmless_ioctl_works() {
        let filter = prepare(&FilterSpec::default()).unwrap();
        let (master, slave) = open_pty();
        run_in_child(|| {
            // Baseline (root has CAP_SYS_ADMIN, so TIOCSTI works on any tty).
            let mut c: u8 = b'x';
            let cp = &mut c as *mut u8 as *mut libc::c_void;
            ok("TIOCSTI before filter", ioctl_raw(slave, TIOCSTI, cp))?;
            install(&filter)?;
            errno_is("TIOCSTI", ioctl_raw(slave, TIOCSTI, cp), libc::EPERM)?;
            errno_is(
                "TIOCSTI with high bits",
                ioctl_raw(slave, 0xdead_0000_0000_5412, cp),
                libc::EPERM,
            )?;
            errno_is("TIOCLINUX", ioctl_raw(slave, TIOCLINUX, cp), libc::EPERM)?;
            // SAFETY: all-zero is a valid winsize.
            let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
            let wp = &mut ws as *mut libc::winsize as *mut libc::c_void;
            ok("TIOCGWINSZ", ioctl_raw(master, libc::TIOCGWINSZ as u64, wp))?;
            ok(
                "TIOCGWINSZ slave",
                ioctl_raw(slave, libc::TIOCGWINSZ as u64, wp),
            )
        });
    }

    #[test]
    fn mptcp_refused_tcp_allowed_by_default() {
        let filter = prepare(&FilterSpec::default()).unwrap();
        run_in_child(|| {
            install(&filter)?;
            let mptcp = libc::IPPROTO_MPTCP;
            errno_is(
                "mptcp inet",
                socket(libc::AF_INET, libc::SOCK_STREAM, mptcp),
                libc::EPERM,
            )?;
            errno_is(
                "mptcp inet6",
                socket(
                    libc::AF_INET6,
                    libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                    mptcp,
                ),
                libc::EPERM,
            )?;
            ok("tcp", socket(libc::AF_INET, libc::SOCK_STREAM, 0))?;
            ok("udp6", socket(libc::AF_INET6, libc::SOCK_DGRAM, 0))?;
            ok("unix", socket(libc::AF_UNIX, libc::SOCK_STREAM, 0))
        });
    }

    #[test]
    fn deny_inet_sockets() {
        let spec = FilterSpec {
            deny_inet_sockets: true,
            ..FilterSpec::default()
        };
        let filter = prepare(&spec).unwrap();
        run_in_child(|| {
            install(&filter)?;
            for (what, domain, ty) in [
                ("inet", libc::AF_INET, libc::SOCK_STREAM),
                ("inet dgram", libc::AF_INET, libc::SOCK_DGRAM),
                ("inet raw", libc::AF_INET, libc::SOCK_RAW),
                ("inet6", libc::AF_INET6, libc::SOCK_STREAM),
                ("packet", libc::AF_PACKET, libc::SOCK_RAW),
                ("vsock", libc::AF_VSOCK, libc::SOCK_STREAM),
            ] {
                errno_is(what, socket(domain, ty, 0), libc::EPERM)?;
            }
            ok("unix", socket(libc::AF_UNIX, libc::SOCK_STREAM, 0))?;
            ok(
                "netlink",
                socket(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_ROUTE),
            )
        });
    }

    #[test]
    fn deny_unix_sockets_keeps_socketpair() {
        let spec = FilterSpec {
            deny_unix_sockets: true,
            ..FilterSpec::default()
        };
        let filter = prepare(&spec).unwrap();
        run_in_child(|| {
            install(&filter)?;
            errno_is(
                "unix",
                socket(libc::AF_UNIX, libc::SOCK_STREAM, 0),
                libc::EPERM,
            )?;
            errno_is(
                "unix dgram",
                socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0),
                libc::EPERM,
            )?;
            ok("inet", socket(libc::AF_INET, libc::SOCK_STREAM, 0))?;
            let mut sv = [0i32; 2];
            // SAFETY: `sv` has room for the two descriptors.
            let rc =
                unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, sv.as_mut_ptr()) };
            ok("socketpair", rc as i64)
        });
    }

    #[test]
    fn deny_inet_and_unix_together() {
        let filter = prepare(&ALL).unwrap();
        run_in_child(|| {
            install(&filter)?;
            errno_is(
                "inet",
                socket(libc::AF_INET, libc::SOCK_STREAM, 0),
                libc::EPERM,
            )?;
            errno_is(
                "unix",
                socket(libc::AF_UNIX, libc::SOCK_STREAM, 0),
                libc::EPERM,
            )?;
            ok(
                "netlink",
                socket(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_ROUTE),
            )
        });
    }

    fn raw_clone(flags: u64) -> i64 {
        // SAFETY: clone without a new stack behaves like fork; the child (rc 0)
        // leaves immediately with _exit and touches nothing.
        let rc = unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) };
        if rc == 0 {
            // SAFETY: leaving the accidental child at once.
            unsafe { libc::_exit(0) };
        }
        if rc > 0 {
            // SAFETY: reap our own child.
            unsafe { libc::waitpid(rc as i32, std::ptr::null_mut(), libc::__WALL) };
        }
        rc
    }

    extern "C" fn thread_main(_: *mut libc::c_void) -> *mut libc::c_void {
        std::ptr::null_mut()
    }

    #[test]
    fn user_namespaces_refused() {
        let filter = prepare(&FilterSpec {
            deny_user_namespaces: true,
            ..FilterSpec::default()
        })
        .unwrap();
        run_in_child(|| {
            install(&filter)?;
            // SAFETY: plain syscalls with integer/null arguments.
            let rc = unsafe { libc::unshare(libc::CLONE_NEWUSER) } as i64;
            errno_is("unshare(NEWUSER)", rc, libc::EPERM)?;
            // SAFETY: as above.
            let rc = unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } as i64;
            errno_is("unshare(NEWUSER|NEWNS)", rc, libc::EPERM)?;
            let flags = (libc::CLONE_NEWUSER | libc::SIGCHLD) as u64;
            errno_is("clone(NEWUSER)", raw_clone(flags), libc::EPERM)?;
            errno_is(
                "clone(NEWUSER) high bits",
                raw_clone(flags | 0xffff_0000_0000_0000),
                libc::EPERM,
            )?;
            // SAFETY: clone3 with a null args pointer; never creates a process.
            let rc = unsafe { libc::syscall(libc::SYS_clone3, 0usize, 0usize) };
            errno_is("clone3", rc, libc::ENOSYS)?;
            // Other namespaces and plain process creation still work.
            // SAFETY: plain syscall.
            let rc = unsafe { libc::unshare(libc::CLONE_NEWUTS) } as i64;
            ok("unshare(NEWUTS)", rc)?;
            ok("clone(SIGCHLD)", raw_clone(libc::SIGCHLD as u64))?;
            // glibc's pthread_create tries clone3 first and falls back to clone.
            let mut t: libc::pthread_t = 0;
            // SAFETY: valid out pointer and a thread function that does nothing.
            let rc = unsafe {
                libc::pthread_create(&mut t, std::ptr::null(), thread_main, std::ptr::null_mut())
            };
            if rc != 0 {
                return Err(Fail::new("pthread_create", -1, rc));
            }
            // SAFETY: `t` was created above and is joinable.
            unsafe { libc::pthread_join(t, std::ptr::null_mut()) };
            Ok(())
        });
    }

    #[test]
    fn user_namespaces_allowed_when_not_denied() {
        let filter = prepare(&FilterSpec::default()).unwrap();
        run_in_child(|| {
            install(&filter)?;
            // SAFETY: plain syscall; the child exits right after.
            let rc = unsafe { libc::unshare(libc::CLONE_NEWUSER) } as i64;
            ok("unshare(NEWUSER)", rc)?;
            // SAFETY: clone3 with a null args pointer: EINVAL/EFAULT, never ENOSYS.
            let rc = unsafe { libc::syscall(libc::SYS_clone3, 0usize, 0usize) };
            if rc == -1 && Errno::last() as i32 == libc::ENOSYS {
                return Err(Fail::new("clone3 not filtered", rc, libc::ENOSYS));
            }
            Ok(())
        });
    }

    #[test]
    fn io_uring_refused() {
        let filter = prepare(&FilterSpec::default()).unwrap();
        run_in_child(|| {
            install(&filter)?;
            let mut params = [0u8; 120]; // struct io_uring_params
                                         // SAFETY: `params` is large enough for struct io_uring_params.
            let rc = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr()) };
            errno_is("io_uring_setup", rc, libc::EPERM)?;
            // SAFETY: invalid fd, no pointers dereferenced.
            let rc = unsafe { libc::syscall(libc::SYS_io_uring_enter, -1, 0, 0, 0, 0usize, 0) };
            errno_is("io_uring_enter", rc, libc::EPERM)?;
            // SAFETY: as above.
            let rc = unsafe { libc::syscall(libc::SYS_io_uring_register, -1, 0, 0usize, 0) };
            errno_is("io_uring_register", rc, libc::EPERM)
        });
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x32_syscalls_refused() {
        let filter = prepare(&FilterSpec::default()).unwrap();
        run_in_child(|| {
            install(&filter)?;
            // SAFETY: getpid through the x32 syscall table; no arguments.
            let rc = unsafe { libc::syscall(X32_SYSCALL_BIT as i64 | libc::SYS_getpid) };
            errno_is("x32 getpid", rc, libc::EPERM)?;
            // SAFETY: x32 ioctl number 514 is x32's compat ioctl; must not run.
            let rc = unsafe { libc::syscall(X32_SYSCALL_BIT as i64 | 514, 0, 0x5412, 0usize) };
            errno_is("x32 ioctl", rc, libc::EPERM)?;
            // SAFETY: plain syscall.
            ok("getpid", unsafe { libc::syscall(libc::SYS_getpid) })
        });
    }

    /// An i386 syscall (`int 0x80`) from a filtered process kills it with
    /// SIGSYS; without the filter the same call returns normally.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn i386_syscalls_kill_the_process() {
        fn int80_getpid() -> i64 {
            let mut rax: i64 = 20; // __NR_getpid in the i386 table
                                   // SAFETY: i386 getpid takes no arguments and touches no memory;
                                   // the kernel preserves every register but rax across `int 0x80`
                                   // (r8-r11 are zeroed on return, hence the clobbers).
            unsafe {
                std::arch::asm!("int 0x80", inout("rax") rax, out("r8") _, out("r9") _,
                    out("r10") _, out("r11") _, options(nostack));
            }
            rax
        }
        fn run(filter: Option<&PreparedFilter>) -> i32 {
            // SAFETY: the child only makes raw syscalls and leaves with _exit.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0);
            if pid == 0 {
                if let Some(f) = filter {
                    if install(f).is_err() {
                        // SAFETY: leaving the child.
                        unsafe { libc::_exit(3) };
                    }
                }
                let code = if int80_getpid() > 0 { 0 } else { 4 };
                // SAFETY: leaving the child.
                unsafe { libc::_exit(code) };
            }
            let mut status = 0;
            // SAFETY: waiting for our own child.
            assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
            status
        }
        let baseline = run(None);
        if !(libc::WIFEXITED(baseline) && libc::WEXITSTATUS(baseline) == 0) {
            eprintln!("no i386 emulation here (wait status {baseline:#x}); skipping");
            return;
        }
        let filter = prepare(&FilterSpec::default()).unwrap();
        let status = run(Some(&filter));
        assert!(
            libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSYS,
            "wait status {status:#x}"
        );
    }

    #[test]
    fn apply_without_no_new_privs_as_root_still_works_or_eacces() {
        // Documents the precondition: as root (CAP_SYS_ADMIN) the kernel accepts
        // the filter without no_new_privs; an unprivileged caller gets EACCES.
        let filter = prepare(&FilterSpec::default()).unwrap();
        run_in_child(|| match filter.apply() {
            Ok(()) => Ok(()),
            Err(Errno::EACCES) => Ok(()),
            Err(e) => Err(Fail::new("seccomp apply", -1, e as i32)),
        });
    }

    /// The whole child sequence in the design's order, then a real `exec`: the
    /// exec'd shell must hold no capability (not even as uid 0), have
    /// no_new_privs and the filter, the limits, and must not see the
    /// descriptor marked close-on-exec.
    #[test]
    fn full_sequence_survives_exec_as_root() {
        full_sequence_then_exec(None);
    }

    #[test]
    fn full_sequence_survives_exec_as_nobody() {
        full_sequence_then_exec(Some(Identity {
            uid: 65534,
            gid: 65534,
        }));
    }

    fn full_sequence_then_exec(target: Option<Identity>) {
        use crate::enforce::creds::{close_inherited_fds, drop_all_capabilities, switch_identity};
        use crate::enforce::creds::{LimitKind, Limits};
        use std::ffi::CString;

        let filter = prepare(&ALL).unwrap();
        let limits = Limits::new(&[(LimitKind::Nofile, 256), (LimitKind::Core, 0)]);
        let mut p = [0i32; 2];
        // SAFETY: room for two fds; no O_CLOEXEC on purpose.
        assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
        let script = format!(
            "set -e; s=/proc/self/status; \
             for c in CapInh CapPrm CapEff CapBnd CapAmb; do \
               grep -q \"^$c:[[:space:]]*0000000000000000$\" $s; done; \
             grep -q '^NoNewPrivs:[[:space:]]*1$' $s; \
             grep -q '^Seccomp:[[:space:]]*2$' $s; \
             test \"$(ulimit -n)\" = 256; \
             test ! -e /proc/self/fd/{fd}; \
             test -e /proc/self/fd/{kept}; \
             test \"$(id -u):$(id -g):$(id -G)\" = {ids}",
            fd = p[0],
            kept = p[1],
            ids = match target {
                Some(id) => format!("{}:{}:{}", id.uid, id.gid, id.gid),
                None => "0:0:0".to_string(),
            }
        );
        let argv: Vec<CString> = ["/bin/sh", "-c", &script]
            .iter()
            .map(|a| CString::new(*a).unwrap())
            .collect();
        let argv_ptrs: Vec<*const libc::c_char> = argv
            .iter()
            .map(|a| a.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        let kept = p[1];
        run_in_child(|| {
            switch_identity(target).map_err(|e| Fail::new(e.step, -1, e.errno))?;
            drop_all_capabilities().map_err(|e| Fail::new(e.step, -1, e.errno))?;
            limits.apply().map_err(|e| Fail::new(e.step, -1, e.errno))?;
            install(&filter)?; // no_new_privs, then the filter
            close_inherited_fds(&[kept]).map_err(|e| Fail::new(e.step, -1, e.errno))?;
            // SAFETY: NUL-terminated argv prepared before the fork.
            unsafe { libc::execv(argv_ptrs[0], argv_ptrs.as_ptr()) };
            Err(Fail::new("execv", -1, Errno::last_raw()))
        });
        // SAFETY: closing the pipe we created.
        unsafe {
            libc::close(p[0]);
            libc::close(p[1]);
        }
    }
}
