//! The creds layer: identity, capabilities, `no_new_privs`, resource limits and
//! inherited descriptors.
//!
//! Every `apply`-style function here runs in the child after `fork` and before
//! `exec`, so each one is async-signal-safe: raw syscalls through `libc` on data
//! prepared before the fork, no allocation, no locks, no std I/O. Raw syscalls
//! (not the glibc wrappers for the set*id family) are used on purpose: they act
//! on the calling thread only, which after `fork` is the whole process, and
//! they avoid glibc's cross-thread `setxid` machinery.
//!
//! Errors are a [`StepError`]: the name of the step and the raw errno, `Copy`,
//! so the child can send it to the launcher over its error pipe as-is.

use std::fmt;

use nix::errno::Errno;

/// A failed step in the child: which step, and the raw errno.
///
/// Exists because nothing that allocates (`anyhow`, `String`) may be built
/// between `fork` and `exec`; the launcher turns it into a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepError {
    /// A short, fixed name of the step, e.g. `"setresuid"`.
    pub step: &'static str,
    /// The errno the kernel returned (`libc::EPERM`, ...).
    pub errno: i32,
}

impl StepError {
    /// The error of `step` with the current thread's errno.
    pub fn last(step: &'static str) -> Self {
        StepError {
            step,
            errno: Errno::last_raw(),
        }
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} failed: {}",
            self.step,
            Errno::from_raw(self.errno).desc()
        )
    }
}

impl std::error::Error for StepError {}

fn check(step: &'static str, rc: libc::c_long) -> Result<(), StepError> {
    if rc < 0 {
        Err(StepError::last(step))
    } else {
        Ok(())
    }
}

/// The identity the command runs as, resolved (names to numbers) by the caller
/// before `fork`; `switch_identity` never reads `/etc/passwd`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// Target real, effective and saved user id.
    pub uid: u32,
    /// Target real, effective and saved group id.
    pub gid: u32,
}

/// Clear supplementary groups, then set gid, then uid (in that order: after the
/// uid change the process may no longer be allowed to change groups).
///
/// Exists so that a command started as root runs as `[process] user` with no
/// trace of root's groups.
///
/// * `Some(id)`: `setgroups(0, NULL)`, then the capability bounding set is
///   emptied, then `setresgid(g, g, g)`, `setresuid(u, u, u)`; all must succeed;
///   then `getresuid`/`getresgid` are checked. The bounding set is emptied
///   here, not only in [`drop_all_capabilities`], because leaving uid 0 also
///   drops `CAP_SETPCAP`, without which the bounding set can no longer be
///   changed — and the design empties every set in every case. (The kernel
///   itself clears permitted, effective and ambient on that uid change.)
/// * `None` (keep the current ids): `setgroups(0, NULL)` is attempted and
///   `EPERM` is tolerated. `EPERM` means this process cannot change its groups
///   at all (no `CAP_SETGID` over its user namespace, or `/proc/self/setgroups`
///   is `deny` in an unprivileged user namespace), so the groups it keeps are
///   ones it already had and nothing is gained.
pub fn switch_identity(target: Option<Identity>) -> Result<(), StepError> {
    // SAFETY: setgroups with size 0 does not read the (null) list pointer.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_setgroups,
            0 as libc::size_t,
            std::ptr::null::<libc::gid_t>(),
        )
    };
    if rc < 0 {
        let err = StepError::last("setgroups");
        if !(target.is_none() && err.errno == libc::EPERM) {
            return Err(err);
        }
    }
    let Some(id) = target else {
        return Ok(());
    };
    // After the uid change the process has no CAP_SETPCAP left to empty the
    // bounding set with, so it is emptied now (see the doc comment).
    drop_bounding_set()?;
    // SAFETY: integer-only syscall.
    check("setresgid", unsafe {
        libc::syscall(libc::SYS_setresgid, id.gid, id.gid, id.gid)
    })?;
    // SAFETY: integer-only syscall.
    check("setresuid", unsafe {
        libc::syscall(libc::SYS_setresuid, id.uid, id.uid, id.uid)
    })?;

    let (mut r, mut e, mut s) = (0u32, 0u32, 0u32);
    // SAFETY: three valid out pointers to u32 (uid_t/gid_t).
    check("getresuid", unsafe {
        libc::syscall(libc::SYS_getresuid, &mut r, &mut e, &mut s)
    })?;
    if (r, e, s) != (id.uid, id.uid, id.uid) {
        return Err(StepError {
            step: "verify uid",
            errno: libc::EPERM,
        });
    }
    // SAFETY: as above.
    check("getresgid", unsafe {
        libc::syscall(libc::SYS_getresgid, &mut r, &mut e, &mut s)
    })?;
    if (r, e, s) != (id.gid, id.gid, id.gid) {
        return Err(StepError {
            step: "verify gid",
            errno: libc::EPERM,
        });
    }
    Ok(())
}

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

/// `struct __user_cap_data_struct`; version 3 uses two of them (caps 0-31, 32-63).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
const CAP_SETPCAP: u32 = 8;
/// Capability numbers are below 64 in the v3 ABI; `PR_CAPBSET_READ` answers
/// `EINVAL` past the kernel's last capability, which ends the loop earlier.
const CAP_UPPER_BOUND: libc::c_ulong = 64;

fn capget() -> Result<[CapData; 2], StepError> {
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: header and a two-element data array, as the v3 ABI requires.
    check("capget", unsafe {
        libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr())
    })?;
    Ok(data)
}

/// Empty the capability bounding set, or leave it when this process lacks
/// `CAP_SETPCAP` (see [`drop_all_capabilities`] for why that is safe).
fn drop_bounding_set() -> Result<(), StepError> {
    let can_setpcap = capget()?[0].effective & (1 << CAP_SETPCAP) != 0;
    if !can_setpcap {
        return Ok(()); // cannot drop, and nothing to lose
    }
    // Dropping a capability that is not in the set succeeds, so one call per
    // capability (not a read and a drop) until the kernel says we are past its last.
    for cap in 0..CAP_UPPER_BOUND {
        // SAFETY: integer-only prctl.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
        if rc < 0 {
            if Errno::last_raw() == libc::EINVAL {
                break; // past the kernel's last capability
            }
            return Err(StepError::last("PR_CAPBSET_DROP"));
        }
    }
    Ok(())
}

/// Empty every capability set: bounding, ambient, inheritable, permitted,
/// effective (in that order: dropping the bounding set needs `CAP_SETPCAP`
/// in the effective set, which the last step removes).
///
/// Exists so that the command holds no capability even when it runs as root,
/// and cannot regain any through `execve` of a root-owned or file-capability
/// binary (the bounding set caps what `execve` can grant).
///
/// Bounding set: each capability still in it is dropped with
/// `PR_CAPBSET_DROP`, for numbers 0.. until the kernel answers `EINVAL` (past
/// its last capability). A process without `CAP_SETPCAP` in its effective set
/// (an unprivileged user outside any user namespace) cannot change its
/// bounding set; then it is left as inherited. That grants nothing: the
/// permitted set is emptied below, and with [`set_no_new_privs`] (next in the
/// sequence) `execve` intersects any capability it would grant — setuid-root,
/// file capabilities, or uid 0 itself — with the old, empty, permitted set
/// (`cap_bprm_creds_from_file`). So the bounding set is defence in depth for
/// the privileged case, where it is always emptied. Any other failure is an
/// error.
///
/// Ends by re-reading the sets with `capget` and failing with step
/// `"verify capabilities"` if any is non-zero.
pub fn drop_all_capabilities() -> Result<(), StepError> {
    drop_bounding_set()?;
    clear_capabilities()
}

/// Empty the ambient, inheritable, permitted and effective sets, and check.
///
/// Exists alone for the sandbox's init, which never executes anything: the
/// bounding set only limits what `execve` can grant, so emptying it there would
/// be work for nothing on every launch.
pub fn clear_capabilities() -> Result<(), StepError> {
    // SAFETY: integer-only prctl.
    let rc = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    // EINVAL: a kernel without ambient capabilities (< 4.3) has none to clear.
    if rc < 0 && Errno::last_raw() != libc::EINVAL {
        return Err(StepError::last("PR_CAP_AMBIENT_CLEAR_ALL"));
    }

    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData::default(); 2];
    // SAFETY: header and a two-element data array, as the v3 ABI requires;
    // lowering every set is always permitted.
    check("capset", unsafe {
        libc::syscall(libc::SYS_capset, &mut header, data.as_ptr())
    })?;

    let after = capget()?;
    if after
        .iter()
        .any(|d| d.effective != 0 || d.permitted != 0 || d.inheritable != 0)
    {
        return Err(StepError {
            step: "verify capabilities",
            errno: libc::EPERM,
        });
    }
    Ok(())
}

/// Set `no_new_privs`: `execve` can no longer grant privileges (setuid,
/// setgid, file capabilities), and unprivileged processes may install seccomp
/// filters and Landlock rulesets.
///
/// Exists because the design promises that setuid binaries gain nothing
/// inside the sandbox; it is inherited and cannot be unset.
pub fn set_no_new_privs() -> Result<(), StepError> {
    // SAFETY: integer-only prctl.
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    check("PR_SET_NO_NEW_PRIVS", rc as libc::c_long)
}

/// A resource limit a policy may set in `[process] limits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LimitKind {
    /// `nofile`: open file descriptors (a count).
    Nofile,
    /// `nproc`: processes/threads of the *real uid*, counted system-wide (a
    /// count; not enforced by the kernel for root with `CAP_SYS_RESOURCE`).
    Nproc,
    /// `fsize`: largest file the command may write (bytes).
    Fsize,
    /// `as`: address space (bytes).
    As,
    /// `core`: core dump size (bytes; 0 disables core dumps).
    Core,
    /// `cpu`: CPU time (whole seconds; round a sub-second duration up).
    Cpu,
    /// `memlock`: locked memory (bytes).
    Memlock,
    /// `stack`: main thread stack (bytes).
    Stack,
}

impl LimitKind {
    /// Every kind, in a stable order (for `explain` and error suggestions).
    pub const ALL: [LimitKind; 8] = [
        LimitKind::Nofile,
        LimitKind::Nproc,
        LimitKind::Fsize,
        LimitKind::As,
        LimitKind::Core,
        LimitKind::Cpu,
        LimitKind::Memlock,
        LimitKind::Stack,
    ];

    /// The kind for a TOML key of `[process] limits` (`nofile`, `nproc`,
    /// `fsize`, `as`, `core`, `cpu`, `memlock`, `stack`); `None` for any other
    /// key, which the policy layer reports as an unknown key.
    pub fn from_key(key: &str) -> Option<LimitKind> {
        LimitKind::ALL.into_iter().find(|k| k.key() == key)
    }

    /// The TOML key of this kind.
    pub fn key(self) -> &'static str {
        match self {
            LimitKind::Nofile => "nofile",
            LimitKind::Nproc => "nproc",
            LimitKind::Fsize => "fsize",
            LimitKind::As => "as",
            LimitKind::Core => "core",
            LimitKind::Cpu => "cpu",
            LimitKind::Memlock => "memlock",
            LimitKind::Stack => "stack",
        }
    }

    /// The value is a byte size: a string goes through
    /// [`crate::units::parse_size`].
    pub fn is_size(self) -> bool {
        matches!(
            self,
            LimitKind::Fsize
                | LimitKind::As
                | LimitKind::Core
                | LimitKind::Memlock
                | LimitKind::Stack
        )
    }

    /// The value is a duration: a string goes through
    /// [`crate::units::parse_duration`], then whole seconds (rounded up).
    pub fn is_duration(self) -> bool {
        self == LimitKind::Cpu
    }

    fn resource(self) -> libc::c_int {
        (match self {
            LimitKind::Nofile => libc::RLIMIT_NOFILE,
            LimitKind::Nproc => libc::RLIMIT_NPROC,
            LimitKind::Fsize => libc::RLIMIT_FSIZE,
            LimitKind::As => libc::RLIMIT_AS,
            LimitKind::Core => libc::RLIMIT_CORE,
            LimitKind::Cpu => libc::RLIMIT_CPU,
            LimitKind::Memlock => libc::RLIMIT_MEMLOCK,
            LimitKind::Stack => libc::RLIMIT_STACK,
        }) as libc::c_int
    }
}

/// The kernel's `struct rlimit64`, used with the raw `prlimit64` syscall.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Rlimit64 {
    cur: u64,
    max: u64,
}

/// Resource limits prepared before `fork`; one entry per kind.
///
/// Exists so the child applies already-parsed numbers without allocating.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Limits(Vec<(LimitKind, u64)>);

impl Limits {
    /// Prepare limits from parsed values (bytes, counts, or seconds for
    /// `cpu`). When a kind appears twice, the later entry wins.
    pub fn new(entries: &[(LimitKind, u64)]) -> Limits {
        let mut out: Vec<(LimitKind, u64)> = Vec::with_capacity(entries.len());
        for &(kind, value) in entries {
            match out.iter_mut().find(|(k, _)| *k == kind) {
                Some(slot) => slot.1 = value,
                None => out.push((kind, value)),
            }
        }
        Limits(out)
    }

    /// The prepared entries, for `explain`.
    pub fn entries(&self) -> &[(LimitKind, u64)] {
        &self.0
    }

    /// Set each limit, soft and hard both, to `min(value, current hard limit)`.
    ///
    /// Both are set so the command cannot raise its soft limit back. A limit is
    /// never raised: when the current hard limit is already lower than the
    /// requested value, the lower one stays (the command gets less, never
    /// more, than the policy allows). `u64::MAX` is `RLIM_INFINITY`.
    pub fn apply(&self) -> Result<(), StepError> {
        for &(kind, value) in &self.0 {
            let mut old = Rlimit64::default();
            // SAFETY: pid 0 (self), no new limit, valid out pointer.
            check("getrlimit", unsafe {
                libc::syscall(
                    libc::SYS_prlimit64,
                    0,
                    kind.resource(),
                    std::ptr::null::<Rlimit64>(),
                    &mut old as *mut Rlimit64,
                )
            })?;
            let v = value.min(old.max);
            let new = Rlimit64 { cur: v, max: v };
            // SAFETY: pid 0 (self), valid pointer to the new limit, no out pointer.
            check("setrlimit", unsafe {
                libc::syscall(
                    libc::SYS_prlimit64,
                    0,
                    kind.resource(),
                    &new as *const Rlimit64,
                    std::ptr::null_mut::<Rlimit64>(),
                )
            })?;
        }
        Ok(())
    }
}

/// Mark every descriptor above 2 close-on-exec, except those in `keep`.
///
/// Exists so the command inherits only stdin, stdout, stderr (and what the
/// launcher means to pass), not whatever cordon's parent leaked to it.
/// Descriptors are marked, not closed, so the launcher's error pipe keeps
/// working until `exec` succeeds. Uses `close_range(3, ~0,
/// CLOSE_RANGE_CLOEXEC)` (Linux 5.11); on older kernels this fails with
/// step `"close_range"` (`ENOSYS` or `EINVAL`). Then clears `FD_CLOEXEC` on
/// each fd in `keep` (values below 3 are ignored; a closed one is an error).
pub fn close_inherited_fds(keep: &[i32]) -> Result<(), StepError> {
    // SAFETY: integer-only syscall; marks descriptors, frees no memory.
    check("close_range", unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    })?;
    for &fd in keep {
        if fd < 3 {
            continue;
        }
        // SAFETY: fcntl on an integer fd; an invalid fd yields EBADF.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        check("fcntl(F_GETFD)", flags as libc::c_long)?;
        // SAFETY: as above.
        let rc = unsafe { libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) };
        check("fcntl(F_SETFD)", rc as libc::c_long)?;
    }
    Ok(())
}

/// Why the process looks like a setuid/setgid/file-capability execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PrivilegedExec {
    Setuid { real: u32, effective: u32 },
    Setgid { real: u32, effective: u32 },
    SecureExec,
}

/// The checks of [`refuse_setuid_install`] without allocation (so tests can run
/// them in a forked child); `Err` carries the errno of a failed id read.
fn privileged_exec() -> Result<Option<PrivilegedExec>, i32> {
    let (mut ruid, mut euid, mut suid) = (0u32, 0u32, 0u32);
    let (mut rgid, mut egid, mut sgid) = (0u32, 0u32, 0u32);
    // SAFETY: three valid out pointers.
    if unsafe { libc::syscall(libc::SYS_getresuid, &mut ruid, &mut euid, &mut suid) } != 0 {
        return Err(Errno::last_raw());
    }
    // SAFETY: three valid out pointers.
    if unsafe { libc::syscall(libc::SYS_getresgid, &mut rgid, &mut egid, &mut sgid) } != 0 {
        return Err(Errno::last_raw());
    }
    if ruid != euid {
        return Ok(Some(PrivilegedExec::Setuid {
            real: ruid,
            effective: euid,
        }));
    }
    if rgid != egid {
        return Ok(Some(PrivilegedExec::Setgid {
            real: rgid,
            effective: egid,
        }));
    }
    // SAFETY: getauxval only reads the auxiliary vector.
    if unsafe { libc::getauxval(libc::AT_SECURE) } != 0 {
        return Ok(Some(PrivilegedExec::SecureExec));
    }
    Ok(None)
}

/// Refuse to run when installed setuid/setgid (or with file capabilities).
///
/// Exists because cordon needs no privilege and was not written to defend
/// itself against its own invoker: a setuid cordon would let any user pick
/// what runs as root. Call it first thing in `main`, before parsing anything.
/// Checks real against effective uid and gid, and the kernel's `AT_SECURE`
/// flag (set for setuid, setgid and file-capability executions).
pub fn refuse_setuid_install() -> anyhow::Result<()> {
    const HOW: &str = "cordon needs no setuid/setgid bit or file capability; \
                       remove it (chmod u-s,g-s; setcap -r) and run it as the invoking user";
    match privileged_exec() {
        Ok(None) => Ok(()),
        Ok(Some(PrivilegedExec::Setuid { real, effective })) => anyhow::bail!(
            "refusing to run setuid (real uid {real}, effective uid {effective}): {HOW}"
        ),
        Ok(Some(PrivilegedExec::Setgid { real, effective })) => anyhow::bail!(
            "refusing to run setgid (real gid {real}, effective gid {effective}): {HOW}"
        ),
        Ok(Some(PrivilegedExec::SecureExec)) => {
            anyhow::bail!("refusing to run in secure-execution mode (AT_SECURE): {HOW}")
        }
        Err(errno) => anyhow::bail!(
            "cannot read the process ids: {}",
            Errno::from_raw(errno).desc()
        ),
    }
}

/// Helpers for tests that must run in a forked child (the test process must
/// never confine itself). The child reports through a pipe without allocating.
#[cfg(test)]
pub(crate) mod test_support {
    use nix::errno::Errno;

    /// A failed check in the child.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct Fail {
        what: &'static str,
        ret: i64,
        errno: i32,
    }

    impl Fail {
        pub(crate) fn new(what: &'static str, ret: i64, errno: i32) -> Self {
            Fail { what, ret, errno }
        }
    }

    /// `ret` must be a success (>= 0).
    pub(crate) fn ok(what: &'static str, ret: i64) -> Result<(), Fail> {
        if ret < 0 {
            Err(Fail::new(what, ret, Errno::last_raw()))
        } else {
            Ok(())
        }
    }

    /// `ret` must be -1 with errno `want`. Call right after the syscall.
    pub(crate) fn errno_is(what: &'static str, ret: i64, want: i32) -> Result<(), Fail> {
        let errno = if ret == -1 { Errno::last_raw() } else { 0 };
        if ret == -1 && errno == want {
            Ok(())
        } else {
            Err(Fail::new(what, ret, errno))
        }
    }

    fn write_all(fd: i32, bytes: &[u8]) {
        // SAFETY: writing from a live slice; a short write only truncates the report.
        unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
    }

    /// Run `f` in a forked child; panic in the parent with the child's
    /// report if it failed, died, or exited non-zero (e.g. after an exec).
    pub(crate) fn run_in_child<F: FnOnce() -> Result<(), Fail>>(f: F) {
        let mut fds = [0i32; 2];
        // SAFETY: `fds` has room for two descriptors.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: the child only runs `f` (raw syscalls on prepared data) and
        // leaves with `_exit`, never returning into the test harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // SAFETY: closing our copy of the read end.
            unsafe { libc::close(fds[0]) };
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            let code = match result {
                Ok(Ok(())) => 0,
                Ok(Err(fail)) => {
                    write_all(fds[1], fail.what.as_bytes());
                    write_all(fds[1], b"\0");
                    write_all(fds[1], &fail.ret.to_le_bytes());
                    write_all(fds[1], &fail.errno.to_le_bytes());
                    1
                }
                Err(_) => {
                    write_all(fds[1], b"panic in child\0");
                    2
                }
            };
            // SAFETY: leaving the child without running the harness's atexit.
            unsafe { libc::_exit(code) };
        }
        // SAFETY: closing the parent's copy of the write end.
        unsafe { libc::close(fds[1]) };
        let mut report = Vec::new();
        let mut buf = [0u8; 256];
        loop {
            // SAFETY: reading into a live buffer.
            let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            report.extend_from_slice(&buf[..n as usize]);
        }
        // SAFETY: closing the read end we own.
        unsafe { libc::close(fds[0]) };
        let mut status = 0;
        // SAFETY: waiting for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        let exited_ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
        if exited_ok && report.is_empty() {
            return;
        }
        let msg = match report.iter().position(|&b| b == 0) {
            Some(nul) if report.len() >= nul + 13 => {
                let what = String::from_utf8_lossy(&report[..nul]);
                let ret = i64::from_le_bytes(report[nul + 1..nul + 9].try_into().unwrap());
                let errno = i32::from_le_bytes(report[nul + 9..nul + 13].try_into().unwrap());
                format!(
                    "{what}: returned {ret}, errno {errno} ({})",
                    Errno::from_raw(errno)
                )
            }
            _ => String::from_utf8_lossy(&report).into_owned(),
        };
        panic!("child failed (wait status {status:#x}): {msg}");
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{errno_is, ok, run_in_child, Fail};
    use super::*;

    fn step(e: StepError) -> Fail {
        Fail::new(e.step, -1, e.errno)
    }

    /// Find `line` (e.g. b"CapEff:\t0000000000000000\n") in /proc/self/status,
    /// read with raw syscalls into a stack buffer.
    fn status_has(line: &'static [u8]) -> Result<(), Fail> {
        let mut buf = [0u8; 16384];
        // SAFETY: NUL-terminated path literal.
        let fd = unsafe { libc::open(c"/proc/self/status".as_ptr(), libc::O_RDONLY) };
        ok("open /proc/self/status", fd as i64)?;
        let mut len = 0;
        loop {
            // SAFETY: reading into the unused tail of `buf`.
            let n = unsafe { libc::read(fd, buf[len..].as_mut_ptr().cast(), buf.len() - len) };
            if n <= 0 {
                break;
            }
            len += n as usize;
        }
        // SAFETY: closing the fd opened above.
        unsafe { libc::close(fd) };
        if buf[..len].windows(line.len()).any(|w| w == line) {
            Ok(())
        } else {
            Err(Fail::new(
                std::str::from_utf8(line).unwrap_or("status line"),
                0,
                0,
            ))
        }
    }

    fn getres(sys: libc::c_long) -> (u32, u32, u32) {
        let (mut r, mut e, mut s) = (u32::MAX, u32::MAX, u32::MAX);
        // SAFETY: three valid out pointers.
        unsafe { libc::syscall(sys, &mut r, &mut e, &mut s) };
        (r, e, s)
    }

    #[test]
    fn step_error_displays() {
        let e = StepError {
            step: "setresuid",
            errno: libc::EPERM,
        };
        assert_eq!(e.to_string(), "setresuid failed: Operation not permitted");
    }

    #[test]
    fn switch_identity_to_nobody() {
        run_in_child(|| {
            switch_identity(Some(Identity {
                uid: 65534,
                gid: 65534,
            }))
            .map_err(step)?;
            if getres(libc::SYS_getresuid) != (65534, 65534, 65534) {
                return Err(Fail::new("getresuid != 65534", 0, 0));
            }
            if getres(libc::SYS_getresgid) != (65534, 65534, 65534) {
                return Err(Fail::new("getresgid != 65534", 0, 0));
            }
            // SAFETY: size 0 only counts the groups.
            let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
            if n != 0 {
                return Err(Fail::new("getgroups not empty", n as i64, 0));
            }
            // No way back to root.
            // SAFETY: integer-only syscall.
            let rc = unsafe { libc::syscall(libc::SYS_setresuid, 0, 0, 0) };
            errno_is("setresuid(0) after switch", rc, libc::EPERM)?;
            // SAFETY: as above.
            let rc = unsafe { libc::syscall(libc::SYS_setgroups, 1, [0u32].as_ptr()) };
            errno_is("setgroups([0]) after switch", rc, libc::EPERM)
        });
    }

    #[test]
    fn switch_identity_none_keeps_ids_and_clears_groups() {
        run_in_child(|| {
            let before = getres(libc::SYS_getresuid);
            // SAFETY: one valid group in a live array.
            let rc = unsafe { libc::syscall(libc::SYS_setgroups, 1, [4u32].as_ptr()) };
            ok("setgroups([4])", rc)?;
            switch_identity(None).map_err(step)?;
            if getres(libc::SYS_getresuid) != before {
                return Err(Fail::new("uid changed", 0, 0));
            }
            // SAFETY: size 0 only counts the groups.
            let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
            if n != 0 {
                return Err(Fail::new("getgroups not empty", n as i64, 0));
            }
            Ok(())
        });
    }

    #[test]
    fn switch_identity_none_tolerates_eperm_only_without_target() {
        run_in_child(|| {
            // Become an unprivileged process first: setgroups now fails EPERM.
            switch_identity(Some(Identity {
                uid: 65534,
                gid: 65534,
            }))
            .map_err(step)?;
            switch_identity(None).map_err(step)?;
            match switch_identity(Some(Identity {
                uid: 65534,
                gid: 65534,
            })) {
                Err(StepError {
                    step: "setgroups",
                    errno: libc::EPERM,
                }) => Ok(()),
                _ => Err(Fail::new("expected setgroups EPERM with a target", 0, 0)),
            }
        });
    }

    #[test]
    fn drop_all_capabilities_empties_every_set() {
        run_in_child(|| {
            // Sanity: the test runs as root, so there is something to drop.
            if capget().map_err(step)?[0].effective == 0 {
                return Err(Fail::new("no capabilities before the drop", 0, 0));
            }
            drop_all_capabilities().map_err(step)?;
            for line in [
                &b"CapInh:\t0000000000000000\n"[..],
                b"CapPrm:\t0000000000000000\n",
                b"CapEff:\t0000000000000000\n",
                b"CapBnd:\t0000000000000000\n",
                b"CapAmb:\t0000000000000000\n",
            ] {
                status_has(line)?;
            }
            // Still uid 0, but without CAP_SETUID it cannot become anyone else.
            // SAFETY: integer-only syscall.
            let rc = unsafe { libc::syscall(libc::SYS_setresuid, 1, 1, 1) };
            errno_is("setresuid(1) without caps", rc, libc::EPERM)
        });
    }

    #[test]
    fn drop_all_capabilities_after_switch_is_ok() {
        // After the switch the process has no CAP_SETPCAP; the bounding set was
        // emptied by switch_identity, and the drop still succeeds.
        run_in_child(|| {
            switch_identity(Some(Identity {
                uid: 65534,
                gid: 65534,
            }))
            .map_err(step)?;
            drop_all_capabilities().map_err(step)?;
            status_has(b"CapEff:\t0000000000000000\n")?;
            status_has(b"CapPrm:\t0000000000000000\n")?;
            status_has(b"CapBnd:\t0000000000000000\n")?;
            status_has(b"CapAmb:\t0000000000000000\n")
        });
    }

    #[test]
    fn no_new_privs_is_set() {
        run_in_child(|| {
            // SAFETY: integer-only prctl.
            let before = unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) };
            if before != 0 {
                return Err(Fail::new("no_new_privs already set", before as i64, 0));
            }
            set_no_new_privs().map_err(step)?;
            // SAFETY: integer-only prctl.
            let after = unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) };
            if after != 1 {
                return Err(Fail::new("PR_GET_NO_NEW_PRIVS != 1", after as i64, 0));
            }
            Ok(())
        });
    }

    fn get_rlimit(kind: LimitKind) -> Rlimit64 {
        let mut old = Rlimit64::default();
        // SAFETY: pid 0, no new limit, valid out pointer.
        unsafe {
            libc::syscall(
                libc::SYS_prlimit64,
                0,
                kind.resource(),
                std::ptr::null::<Rlimit64>(),
                &mut old as *mut Rlimit64,
            )
        };
        old
    }

    #[test]
    fn limits_set_soft_and_hard_and_never_raise() {
        let first = Limits::new(&[(LimitKind::Nofile, 64), (LimitKind::Core, 0)]);
        let raise = Limits::new(&[(LimitKind::Nofile, u64::MAX)]);
        run_in_child(|| {
            first.apply().map_err(step)?;
            let l = get_rlimit(LimitKind::Nofile);
            if (l.cur, l.max) != (64, 64) {
                return Err(Fail::new("nofile != (64, 64)", l.cur as i64, l.max as i32));
            }
            let c = get_rlimit(LimitKind::Core);
            if (c.cur, c.max) != (0, 0) {
                return Err(Fail::new("core != (0, 0)", c.cur as i64, 0));
            }
            // Asking for more than the hard limit keeps the hard limit.
            raise.apply().map_err(step)?;
            let l = get_rlimit(LimitKind::Nofile);
            if (l.cur, l.max) != (64, 64) {
                return Err(Fail::new("nofile raised", l.cur as i64, l.max as i32));
            }
            Ok(())
        });
    }

    #[test]
    fn limit_kinds() {
        for kind in LimitKind::ALL {
            assert_eq!(LimitKind::from_key(kind.key()), Some(kind));
        }
        assert_eq!(LimitKind::from_key("as"), Some(LimitKind::As));
        assert_eq!(LimitKind::from_key("nofiles"), None);
        assert_eq!(LimitKind::from_key("NOFILE"), None);
        assert!(LimitKind::Fsize.is_size() && !LimitKind::Fsize.is_duration());
        assert!(LimitKind::Cpu.is_duration() && !LimitKind::Cpu.is_size());
        assert!(!LimitKind::Nofile.is_size() && !LimitKind::Nproc.is_duration());
        let l = Limits::new(&[
            (LimitKind::Nofile, 10),
            (LimitKind::As, 1),
            (LimitKind::Nofile, 20),
        ]);
        assert_eq!(l.entries(), &[(LimitKind::Nofile, 20), (LimitKind::As, 1)]);
    }

    #[test]
    fn close_inherited_fds_marks_cloexec_except_kept() {
        let mut p = [0i32; 2];
        // SAFETY: room for two fds; no O_CLOEXEC on purpose.
        assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
        let (marked, kept) = (p[0], p[1]);
        run_in_child(|| {
            // SAFETY: fcntl on integer fds.
            let cloexec = |fd: i32| unsafe { libc::fcntl(fd, libc::F_GETFD) } & libc::FD_CLOEXEC;
            if cloexec(marked) != 0 || cloexec(kept) != 0 {
                return Err(Fail::new("pipe already cloexec", 0, 0));
            }
            close_inherited_fds(&[kept, 1]).map_err(step)?;
            if cloexec(marked) == 0 {
                return Err(Fail::new("fd not marked close-on-exec", marked as i64, 0));
            }
            if cloexec(kept) != 0 {
                return Err(Fail::new("kept fd marked close-on-exec", kept as i64, 0));
            }
            // A kept fd that is not open is an error.
            match close_inherited_fds(&[9999]) {
                Err(StepError {
                    errno: libc::EBADF, ..
                }) => Ok(()),
                _ => Err(Fail::new("expected EBADF for a closed kept fd", 0, 0)),
            }
        });
        // SAFETY: closing the pipe we created.
        unsafe {
            libc::close(p[0]);
            libc::close(p[1]);
        }
    }

    #[test]
    fn refuse_setuid_install_detects_mismatch() {
        refuse_setuid_install().expect("test process is not setuid");
        // The child only runs the allocation-free check (anyhow may capture a
        // backtrace, which takes locks another test thread may hold at fork).
        run_in_child(|| {
            // Simulate a setgid install: real gid differs from effective.
            // SAFETY: integer-only syscall.
            let rc = unsafe { libc::syscall(libc::SYS_setresgid, 65534, 0, 0) };
            ok("setresgid", rc)?;
            let want = PrivilegedExec::Setgid {
                real: 65534,
                effective: 0,
            };
            if privileged_exec() != Ok(Some(want)) {
                return Err(Fail::new("setgid install not detected", 0, 0));
            }
            // SAFETY: as above.
            let rc = unsafe { libc::syscall(libc::SYS_setresgid, 0, 0, 0) };
            ok("setresgid back", rc)?;
            // SAFETY: as above.
            let rc = unsafe { libc::syscall(libc::SYS_setresuid, 65534, 0, 0) };
            ok("setresuid", rc)?;
            let want = PrivilegedExec::Setuid {
                real: 65534,
                effective: 0,
            };
            if privileged_exec() != Ok(Some(want)) {
                return Err(Fail::new("setuid install not detected", 0, 0));
            }
            Ok(())
        });
    }
}
