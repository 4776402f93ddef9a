//! Landlock through raw syscalls, so the ruleset can be built in the child after the
//! view is final, without allocating. The `landlock` crate supplies the rights for each
//! ABI (in `plan`); here we only hand numbers to the kernel.

use super::StepError;
use std::ffi::CString;

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
    rules: Vec<(CString, u64)>,
    ports: Vec<(u64, u64)>,
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
        let rules = rules
            .iter()
            .map(|(p, r)| {
                Ok((
                    CString::new(p.as_os_str().as_encoded_bytes())?,
                    *r & handled_fs,
                ))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Some(PreparedLandlock {
            handled_fs,
            handled_net,
            scoped,
            rules,
            ports: ports
                .iter()
                .map(|(p, r)| (u64::from(*p), *r & handled_net))
                .collect(),
        }))
    }

    /// Create the ruleset, add every rule and restrict this process. Runs after fork:
    /// raw syscalls only, no allocation. `no_new_privs` must already be set.
    ///
    /// A rule whose path does not exist is skipped: a missing grant only ever means less
    /// access. Any other failure aborts the launch.
    pub fn apply(&self) -> Result<(), StepError> {
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
        let ruleset = ruleset as libc::c_int;
        for (path, rights) in &self.rules {
            if *rights == 0 {
                continue;
            }
            // SAFETY: path is a NUL-terminated C string that outlives the call.
            let fd = unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
            if fd < 0 {
                if super::errno() == libc::ENOENT {
                    continue;
                }
                return Err(StepError::last("open a Landlock rule's path"));
            }
            let rule = PathBeneathAttr {
                allowed_access: *rights,
                parent_fd: fd,
            };
            // SAFETY: rule is a valid landlock_path_beneath_attr; ruleset and fd are open.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_landlock_add_rule,
                    ruleset,
                    RULE_PATH_BENEATH,
                    &rule as *const PathBeneathAttr,
                    0,
                )
            };
            let err = StepError::last("landlock_add_rule (path)");
            // SAFETY: fd was opened above and is closed once.
            unsafe { libc::close(fd) };
            if rc < 0 {
                return Err(err);
            }
        }
        for (port, rights) in &self.ports {
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
        // SAFETY: ruleset is an open Landlock ruleset fd.
        let rc = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0) };
        let err = StepError::last("landlock_restrict_self");
        // SAFETY: closing our own ruleset fd once.
        unsafe { libc::close(ruleset) };
        if rc < 0 {
            return Err(err);
        }
        Ok(())
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
