//! Landlock through raw syscalls, so the ruleset can be built in the child after the
//! view is final, without allocating. The `landlock` crate supplies the rights for each
//! ABI (in `plan`); here we only hand numbers to the kernel. Without the view the
//! ruleset is built before the fork instead ([`PreparedLandlock::prebuild`]), by a few
//! threads when it is large, and the child only restricts itself with it. With the view,
//! the rules at a bind's target are added by the view as it attaches the bind
//! ([`PreparedLandlock::adopt`]), the rest by the command's process before it restricts
//! itself.

use super::StepError;
use std::cell::Cell;
use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

#[repr(C)]
struct NetPortAttr {
    allowed_access: u64,
    port: u64,
}

const RULE_PATH_BENEATH: libc::c_int = 1;
const RULE_NET_PORT: libc::c_int = 2;
const CREATE_RULESET_VERSION: libc::c_uint = 1;

/// The ruleset, converted before fork: paths as C strings, rights as numbers.
#[derive(Debug)]
pub struct PreparedLandlock {
    handled_fs: u64,
    handled_net: u64,
    scoped: u64,
    /// Siblings together (the order of rules does not matter to Landlock).
    rules: Vec<PathRule>,
    ports: Vec<(u64, u64)>,
    /// `landlock_restrict_self` flags: LOG_NEW_EXEC_ON when `--report` wants the denials
    /// of the executed command in the audit log (ABI 7).
    restrict_flags: u32,
    /// The ruleset with every rule added, built before the fork by [`Self::prebuild`];
    /// `apply` then only restricts. Close-on-exec, closed in the parent on drop.
    prebuilt: Option<OwnedFd>,
    /// The ruleset created in the child before the view ([`Self::begin`]), which adds
    /// the rules it adopted while it mounts; `-1`: none. A cell: the child sets it in
    /// its own copy of this value (`apply` and the view take `&self`).
    started: Cell<libc::c_int>,
}

/// `LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON` (ABI 7): log denials after `execve` too.
const LOG_NEW_EXEC_ON: u32 = 2;

/// A path rule. `apply` opens the path relative to its parent directory, kept open for
/// the next sibling: thousands of rules in one directory cost one path walk, not
/// thousands.
#[derive(Debug)]
struct PathRule {
    path: CString,
    /// Where the last component starts in `path`; 0: open the whole path.
    name_at: usize,
    rights: u64,
    /// Added by the view, on the mount it attached at this path ([`PreparedLandlock::adopt`]).
    by_view: bool,
}

impl PathRule {
    fn new(path: CString, rights: u64) -> PathRule {
        let b = path.as_bytes();
        // A normalised absolute path other than `/`: its parent is a plain prefix.
        let normal = b.len() > 1
            && b[0] == b'/'
            && b[1..]
                .split(|c| *c == b'/')
                .all(|c| !c.is_empty() && c != b"." && c != b"..");
        let name_at = match b.iter().rposition(|c| *c == b'/') {
            Some(cut) if normal => cut + 1,
            _ => 0,
        };
        PathRule {
            path,
            name_at,
            rights,
            by_view: false,
        }
    }

    /// The parent directory's bytes (`/` for a top-level entry), when the path has one.
    fn parent(&self) -> Option<&[u8]> {
        match self.name_at {
            0 => None,
            1 => Some(b"/"),
            at => Some(&self.path.as_bytes()[..at - 1]),
        }
    }

    fn name(&self) -> &CStr {
        CStr::from_bytes_with_nul(&self.path.as_bytes_with_nul()[self.name_at..])
            .expect("a suffix of a C string")
    }
}

impl PreparedLandlock {
    /// Convert the plan's ruleset. A ruleset that handles nothing is not installed.
    pub fn new(
        handled_fs: u64,
        handled_net: u64,
        scoped: u64,
        rules: &[(std::path::PathBuf, u64)],
        ports: &[(u16, u64)],
    ) -> anyhow::Result<Option<Self>> {
        if handled_fs == 0 && handled_net == 0 && scoped == 0 {
            return Ok(None);
        }
        let mut rules = rules
            .iter()
            .map(|(p, r)| {
                Ok(PathRule::new(
                    CString::new(p.as_os_str().as_encoded_bytes())?,
                    *r & handled_fs,
                ))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        rules.sort_by(|a, b| a.parent().cmp(&b.parent()));
        Ok(Some(PreparedLandlock {
            handled_fs,
            handled_net,
            scoped,
            rules,
            restrict_flags: 0,
            prebuilt: None,
            started: Cell::new(-1),
            ports: ports
                .iter()
                .map(|(p, r)| (u64::from(*p), *r & handled_net))
                .collect(),
        }))
    }

    /// Ask the kernel to record the executed command's denials in the audit log (ABI 7),
    /// for `--report`. Without it Landlock logs nothing after `execve`.
    pub fn log_denials(mut self) -> Self {
        self.restrict_flags |= LOG_NEW_EXEC_ON;
        self
    }

    /// Hand rules over to the view: `take(path, rights)` is asked for each rule and
    /// returns whether the view will add it itself, on the descriptor of the mount it
    /// attaches at exactly that path (the path's inode, as the command will reach it).
    /// Those rules are then neither opened nor added by [`Self::apply`].
    pub fn adopt(&mut self, mut take: impl FnMut(&[u8], u64) -> bool) {
        for rule in &mut self.rules {
            if rule.rights != 0 && take(rule.path.as_bytes(), rule.rights) {
                rule.by_view = true;
            }
        }
    }

    /// Whether the view adopted any rule (and so needs [`Self::begin`] first).
    pub fn adopted_any(&self) -> bool {
        self.rules.iter().any(|r| r.by_view)
    }

    /// Create the ruleset in the child, before the view adds the rules it adopted. Runs
    /// after fork: raw syscalls only.
    pub fn begin(&self) -> Result<(), StepError> {
        if self.started.get() < 0 {
            self.started.set(self.create()?);
        }
        Ok(())
    }

    /// Add an adopted rule: `rights` beneath the inode `fd` names (the root of a mount
    /// the view just attached), to the ruleset [`Self::begin`] created. Runs after fork.
    pub fn add_adopted(&self, fd: libc::c_int, rights: u64) -> Result<(), StepError> {
        let ruleset = self.started.get();
        if ruleset < 0 {
            return Err(StepError {
                step: "landlock_add_rule (no ruleset)",
                errno: libc::EBADF,
            });
        }
        add_path_rule(ruleset, fd, rights & self.handled_fs)
    }

    /// Close the ruleset [`Self::begin`] created, in a process that will not restrict
    /// itself (the view's init, once the command has started with its own copy of the
    /// descriptor). Runs after fork.
    pub fn release(&self) {
        let ruleset = self.started.replace(-1);
        if ruleset >= 0 {
            // SAFETY: our own ruleset descriptor, closed once.
            unsafe { libc::close(ruleset) };
        }
    }

    /// Build the ruleset now, in the calling process, before the fork: create it and add
    /// every rule, so that the child only has to call `landlock_restrict_self`. For runs
    /// without the view, where the command sees the same paths as the launcher (a rule
    /// binds to the inode its path names when it is added). Thousands of rules are added
    /// by a few threads, each with its own share of the (sorted) list: opening a path is
    /// most of the cost of a rule, and opens run in parallel; the kernel serialises only
    /// the insertion into the ruleset. The threads are joined before this returns.
    pub fn prebuild(mut self) -> anyhow::Result<Self> {
        let ruleset = self.create().map_err(prebuild_error)?;
        // SAFETY: a descriptor just created, owned by nothing else.
        let ruleset = unsafe { OwnedFd::from_raw_fd(ruleset) };
        let fd = ruleset.as_raw_fd();
        crate::parallel::in_parts(&self.rules, PARALLEL_RULES, MAX_THREADS, |part| {
            add_path_rules(fd, part)
        })
        .into_iter()
        .collect::<Result<Vec<()>, StepError>>()
        .map_err(prebuild_error)?;
        add_port_rules(fd, &self.ports).map_err(prebuild_error)?;
        self.prebuilt = Some(ruleset);
        Ok(self)
    }

    /// `landlock_create_ruleset` with the handled rights and scopes.
    fn create(&self) -> Result<libc::c_int, StepError> {
        let attr = RulesetAttr {
            handled_access_fs: self.handled_fs,
            handled_access_net: self.handled_net,
            scoped: self.scoped,
        };
        // SAFETY: attr is a valid, initialised landlock_ruleset_attr of the size passed.
        let ruleset = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const RulesetAttr,
                std::mem::size_of::<RulesetAttr>(),
                0,
            )
        };
        if ruleset < 0 {
            return Err(StepError::last("landlock_create_ruleset"));
        }
        Ok(ruleset as libc::c_int)
    }

    /// Create the ruleset, add every rule and restrict this process; with a ruleset
    /// built before the fork, only restrict. Runs after fork: raw syscalls only, no
    /// allocation. `no_new_privs` must already be set.
    ///
    /// A rule whose path does not exist is skipped: a missing grant only ever means less
    /// access. Any other failure aborts the launch.
    pub fn apply(&self) -> Result<(), StepError> {
        if let Some(ruleset) = &self.prebuilt {
            // The descriptor is close-on-exec: this process's copy goes at exec.
            return restrict_self(ruleset.as_raw_fd(), self.restrict_flags);
        }
        // A ruleset the view's init started is only read here, not taken: this process may
        // share init's memory (a vfork-like start), and init closes its own copy. Ours is
        // close-on-exec.
        let started = self.started.get();
        let ruleset = if started >= 0 {
            started
        } else {
            self.create()?
        };
        let added = add_path_rules(ruleset, &self.rules)
            .and_then(|()| add_port_rules(ruleset, &self.ports))
            .and_then(|()| restrict_self(ruleset, self.restrict_flags));
        if started < 0 {
            // SAFETY: closing the ruleset fd created above, once.
            unsafe { libc::close(ruleset) };
        }
        added
    }
}

/// Below this many path rules the ruleset is built by one thread.
const PARALLEL_RULES: usize = 1000;
/// At most this many threads build a ruleset.
const MAX_THREADS: usize = 4;

/// A failure of [`PreparedLandlock::prebuild`], worded like one in the child.
fn prebuild_error(e: StepError) -> anyhow::Error {
    anyhow::anyhow!(
        "setting up the sandbox failed at `{}`: {}",
        e.step,
        std::io::Error::from_raw_os_error(e.errno)
    )
}

/// Add the path rules to `ruleset`, each path opened relative to its parent directory,
/// kept open for the next sibling. Raw syscalls only, no allocation: it runs in the
/// child after fork too.
fn add_path_rules(ruleset: libc::c_int, rules: &[PathRule]) -> Result<(), StepError> {
    let mut dir = Dir { key: &[], fd: -1 };
    for rule in rules {
        if rule.rights == 0 || rule.by_view {
            continue;
        }
        let fd = dir.open(rule);
        if fd < 0 {
            if super::errno() == libc::ENOENT {
                continue;
            }
            return Err(StepError::last("open a Landlock rule's path"));
        }
        let added = add_path_rule(ruleset, fd, rule.rights);
        // SAFETY: fd was opened above and is closed once.
        unsafe { libc::close(fd) };
        added?;
    }
    Ok(())
}

/// One path-beneath rule: `rights` beneath the inode `fd` names.
fn add_path_rule(ruleset: libc::c_int, fd: libc::c_int, rights: u64) -> Result<(), StepError> {
    let attr = PathBeneathAttr {
        allowed_access: rights,
        parent_fd: fd,
    };
    // SAFETY: attr is a valid landlock_path_beneath_attr; ruleset and fd are open.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0,
        )
    };
    if rc < 0 {
        return Err(StepError::last("landlock_add_rule (path)"));
    }
    Ok(())
}

/// Add the TCP port rules to `ruleset`.
fn add_port_rules(ruleset: libc::c_int, ports: &[(u64, u64)]) -> Result<(), StepError> {
    for (port, rights) in ports {
        let rule = NetPortAttr {
            allowed_access: *rights,
            port: *port,
        };
        // SAFETY: rule is a valid landlock_net_port_attr; ruleset is open.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                ruleset,
                RULE_NET_PORT,
                &rule as *const NetPortAttr,
                0,
            )
        };
        if rc < 0 {
            return Err(StepError::last("landlock_add_rule (port)"));
        }
    }
    Ok(())
}

/// `landlock_restrict_self(ruleset, flags)`.
fn restrict_self(ruleset: libc::c_int, flags: u32) -> Result<(), StepError> {
    // SAFETY: ruleset is an open Landlock ruleset fd.
    let rc = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, flags) };
    if rc < 0 {
        return Err(StepError::last("landlock_restrict_self"));
    }
    Ok(())
}

/// The parent directory of the last rule opened, kept for its siblings; closed on drop.
struct Dir<'a> {
    key: &'a [u8],
    fd: libc::c_int,
}

impl<'a> Dir<'a> {
    /// `open(rule.path, O_PATH)`, relative to the kept parent directory when there is one.
    /// Where the parent cannot be opened, the whole path is, for the exact error.
    fn open(&mut self, rule: &'a PathRule) -> libc::c_int {
        let flags = libc::O_PATH | libc::O_CLOEXEC;
        let Some(parent) = rule.parent() else {
            // SAFETY: a NUL-terminated C string that outlives the call.
            return unsafe { libc::open(rule.path.as_ptr(), flags) };
        };
        if self.fd < 0 || self.key != parent {
            self.close();
            let mut buf = [0u8; libc::PATH_MAX as usize];
            if parent.len() < buf.len() {
                buf[..parent.len()].copy_from_slice(parent);
                // SAFETY: `buf` holds the parent's bytes and a NUL after them.
                self.fd = unsafe { libc::open(buf.as_ptr().cast(), flags | libc::O_DIRECTORY) };
                self.key = parent;
            }
            if self.fd < 0 {
                // SAFETY: a NUL-terminated C string that outlives the call.
                return unsafe { libc::open(rule.path.as_ptr(), flags) };
            }
        }
        // SAFETY: an open directory descriptor and a NUL-terminated single component.
        unsafe { libc::openat(self.fd, rule.name().as_ptr(), flags) }
    }

    fn close(&mut self) {
        if self.fd >= 0 {
            // SAFETY: our own descriptor, closed once.
            unsafe { libc::close(self.fd) };
            self.fd = -1;
        }
    }
}

impl Drop for Dir<'_> {
    fn drop(&mut self) {
        self.close();
    }
}

/// The Landlock ABI of the running kernel, 0 when Landlock is unavailable.
pub fn abi_version() -> u32 {
    // SAFETY: the VERSION query takes no attribute pointer and size 0.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0,
            CREATE_RULESET_VERSION,
        )
    };
    if v < 0 {
        0
    } else {
        v as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_split_into_parent_and_name_only_when_normal() {
        let split = |p: &str| {
            let r = PathRule::new(CString::new(p).unwrap(), 1);
            (
                r.parent().map(|b| String::from_utf8_lossy(b).into_owned()),
                r.name().to_str().unwrap().to_owned(),
            )
        };
        assert_eq!(split("/a"), (Some("/".into()), "a".into()));
        assert_eq!(split("/a/bc"), (Some("/a".into()), "bc".into()));
        for whole in ["/", "a/b", "/a/", "/a//b", "/a/./b", "/a/.."] {
            assert_eq!(split(whole), (None, whole.into()), "{whole}");
        }
    }
}
