//! What this kernel and machine can enforce, for `cordon probe` and for the plan.
//!
//! The cheap checks (sysctls, the Landlock version query) run on every launch; the
//! expensive one (actually creating namespaces in a throw-away child) only for `probe`.

use super::errno;

/// The Landlock ABI version, 0 when unavailable.
pub fn landlock_abi() -> u32 {
    super::landlock::abi_version()
}

/// Whether this process may create the namespaces of the view, judged from sysctls and
/// our own ids, without creating any. `Err` says why not.
pub fn namespaces_allowed(is_root: bool) -> Result<(), String> {
    if is_root {
        return Ok(());
    }
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        return Err("user namespaces are disabled (user.max_user_namespaces = 0)".into());
    }
    if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        return Err(
            "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0)"
                .into(),
        );
    }
    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        return Err(
            "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1)"
                .into(),
        );
    }
    Ok(())
}

/// Whether seccomp filters can be installed (the kernel was built with them).
pub fn seccomp_available() -> bool {
    // SAFETY: PR_GET_SECCOMP takes no pointers.
    let rc = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    rc >= 0 || errno() != libc::EINVAL
}

/// Create the given namespaces in a throw-away child to see whether it works.
pub fn try_unshare(flags: libc::c_int) -> Result<(), String> {
    // SAFETY: fork in a single-threaded probe; the child only calls unshare and _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: async-signal-safe calls only in the child.
        unsafe {
            let rc = libc::unshare(flags);
            libc::_exit(if rc == 0 { 0 } else { errno().clamp(1, 255) });
        }
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        Ok(())
    } else {
        Err(std::io::Error::from_raw_os_error(libc::WEXITSTATUS(status)).to_string())
    }
}

/// `dev.tty.legacy_tiocsti`: whether the kernel still lets TIOCSTI push keystrokes.
pub fn legacy_tiocsti() -> Option<bool> {
    std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti")
        .ok()
        .map(|s| s.trim() == "1")
}

/// Whether the kernel's audit log is on, which Landlock's denial records (ABI 7) need
/// before `--report` could list filesystem refusals. `Err` says why it cannot be known.
/// cordon never switches auditing on: that is machine-wide state.
pub fn audit_enabled() -> Result<bool, String> {
    use nix::sys::socket::{
        bind, recv, send, socket, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol,
        SockType,
    };
    const AUDIT_GET: u16 = 1000;
    const NLM_F_REQUEST: u16 = 1;
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkAudit,
    )
    .map_err(|e| format!("no audit socket: {e}"))?;
    use std::os::fd::AsRawFd;
    bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0)).map_err(|e| format!("audit socket: {e}"))?;
    let mut msg = Vec::with_capacity(16);
    msg.extend_from_slice(&16u32.to_ne_bytes());
    msg.extend_from_slice(&AUDIT_GET.to_ne_bytes());
    msg.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    msg.extend_from_slice(&1u32.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    send(fd.as_raw_fd(), &msg, MsgFlags::empty()).map_err(|e| format!("audit status: {e}"))?;
    let mut buf = [0u8; 512];
    for _ in 0..4 {
        let n = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty())
            .map_err(|e| format!("audit status: {e}"))?;
        if n < 24 {
            continue;
        }
        let kind = u16::from_ne_bytes([buf[4], buf[5]]);
        if kind == AUDIT_GET {
            // struct audit_status { mask, enabled, ... } follows the 16-byte header.
            return Ok(u32::from_ne_bytes([buf[20], buf[21], buf[22], buf[23]]) != 0);
        }
        if kind == 2 {
            let errno = i32::from_ne_bytes([buf[16], buf[17], buf[18], buf[19]]);
            if errno != 0 {
                return Err(format!(
                    "audit status refused: {}",
                    std::io::Error::from_raw_os_error(-errno)
                ));
            }
        }
    }
    Err("no answer from the audit subsystem".into())
}
