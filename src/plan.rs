//! The plan: the policy resolved against this machine. Pure: it reads the filesystem to
//! canonicalise paths, but confines nothing. `cordon explain` prints it; `enforce` and
//! `supervise` carry it out and decide nothing of their own.

use crate::policy::{Access, EnforceMode, Location, NetMode, Origin, Policy};
use landlock::{Access as _, AccessFs, AccessNet, BitFlags, ABI};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{CStr, CString, OsStr, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The Landlock ABI cordon is written and tested against. Rights newer than this are
/// neither requested nor handled; an older kernel degrades the rules that need more.
pub const PINNED_LANDLOCK_ABI: u32 = 6;

/// The port the egress proxy listens on inside the sandbox's own network namespace.
/// Fixed, because the namespace is private: nothing else can hold it.
pub const EGRESS_PORT: u16 = 3128;

/// The name of the published plan inside the scratch dir.
pub const PLAN_FILE: &str = "plan.json";

/// Where the view puts the run's scratch directory (HOME, TMPDIR, the published plan).
pub const VIEW_SCRATCH: &str = "/run/cordon";

/// Facts about this machine and invocation that the plan depends on, gathered by
/// `probe` so the plan itself stays a pure function.
#[derive(Debug, Clone, Serialize)]
pub struct Facts {
    pub uid: u32,
    pub gid: u32,
    pub is_root: bool,
    pub cwd: PathBuf,
    pub home: PathBuf,
    pub user_name: String,
    /// Host environment; used for keep/deny, never printed with values.
    #[serde(skip)]
    pub env: BTreeMap<String, String>,
    /// Landlock ABI version, 0 when Landlock is unavailable.
    pub landlock_abi: u32,
    /// Whether namespaces for the view can be created: as root, or through a user
    /// namespace. `None` is the reason when they cannot.
    pub namespaces: Result<(), String>,
    pub seccomp: bool,
    /// Where per-run scratch dirs are created.
    pub scratch_root: PathBuf,
    /// Unique per run: names the scratch dir.
    pub run_id: String,
    /// When running inside another cordon sandbox: what it grants, from its published
    /// plan (path as seen here, access), most specific path deciding.
    #[serde(skip)]
    pub outer: Option<Vec<(PathBuf, Access)>>,
}

/// Which layer enforces a rule, for `explain`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layer {
    /// Bind mount in the view, and Landlock.
    ViewAndLandlock,
    /// The view alone enforces it (a narrower rule or a deny mask); Landlock allows the
    /// enclosing grant.
    View,
    /// Landlock alone (no view), exactly.
    Landlock,
    /// Nothing to enforce: a deny of a path no rule grants, or an optional path that is
    /// missing.
    NotNeeded,
    /// Not enforced as written; see the degradation.
    Degraded,
}

/// One path rule resolved against the machine.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedRule {
    /// The path as written, after variable expansion.
    pub path: PathBuf,
    /// Canonical path (symlinks resolved); None when missing.
    pub resolved: Option<PathBuf>,
    pub access: Access,
    pub is_dir: bool,
    pub origin: Origin,
    pub layer: Layer,
    /// Why the layer is what it is, in words.
    pub note: String,
    #[serde(skip)]
    pub dev_ino: (u64, u64),
    /// Nested inside another cordon: what the outer sandbox grants at this path. The
    /// effective access is the intersection; `explain` marks a rule the outer one narrows.
    pub outer: Option<Access>,
}

/// A rule the kernel cannot enforce as written on this machine.
#[derive(Debug, Clone, Serialize)]
pub struct Degradation {
    /// What is not enforced: the rule and where it was written.
    pub rule: String,
    /// The missing feature, and what happens instead.
    pub reason: String,
}

/// One step of building the view, in order. Paths are as seen inside the view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Mount {
    /// Bind the host path `source` (checked against `dev_ino`) at `target`.
    Bind {
        source: PathBuf,
        target: PathBuf,
        is_dir: bool,
        read_only: bool,
        exec: bool,
        /// Device nodes keep their device semantics; nothing else does.
        device: bool,
        #[serde(skip)]
        dev_ino: (u64, u64),
    },
    /// An empty read-only tmpfs over a denied directory.
    MaskDir { target: PathBuf },
    /// An empty read-only file over a denied file.
    MaskFile { target: PathBuf },
    /// A fresh procfs for the run's PID namespace.
    Proc { target: PathBuf },
    /// A minimal /dev: a tmpfs with the granted host nodes bound in, a new devpts
    /// instance and a private /dev/shm.
    Dev { target: PathBuf },
    /// A symlink reproduced from the host (merged-/usr systems: `/bin` → `usr/bin`).
    Symlink { target: PathBuf, link: PathBuf },
}

/// A Landlock rule: a path as seen by the command, and the rights beneath it.
#[derive(Debug, Clone, Serialize)]
pub struct LandlockRule {
    pub path: PathBuf,
    pub access: Access,
    pub rights: u64,
}

/// The Landlock ruleset to install.
#[derive(Debug, Clone, Serialize)]
pub struct LandlockPlan {
    /// The ABI the rights below were chosen for: min(kernel, pinned).
    pub abi: u32,
    pub handled_fs: u64,
    pub handled_net: u64,
    pub scoped: u64,
    pub rules: Vec<LandlockRule>,
    /// TCP ports and the net rights allowed on them.
    pub ports: Vec<(u16, u64)>,
}

/// The network as the command will see it.
#[derive(Debug, Clone, Serialize)]
pub struct NetPlan {
    pub mode: NetMode,
    /// A private network namespace (loopback only) is created.
    pub namespace: bool,
    /// Egress: the allowlist as written, and pinned names.
    pub allow: Vec<String>,
    pub hosts: Vec<(String, String)>,
    pub allow_local: bool,
    pub log: Option<PathBuf>,
}

/// The seccomp filter to install.
#[derive(Debug, Clone, Serialize)]
pub struct SeccompPlan {
    pub deny_inet_sockets: bool,
    pub deny_unix_sockets: bool,
    pub deny_user_namespaces: bool,
}

/// The run's private directories.
#[derive(Debug, Clone, Serialize)]
pub struct ScratchPlan {
    /// The per-run dir on the host; created at launch, removed at exit unless kept.
    pub dir: PathBuf,
    pub keep: bool,
    /// HOME and TMPDIR as the command sees them.
    pub home: PathBuf,
    pub tmp: PathBuf,
    /// Where the command finds this plan, published read-only (`CORDON_PLAN`), so a
    /// cordon nested inside can tell which of its rules the outer sandbox grants.
    pub plan_file: PathBuf,
}

/// Everything a run needs, resolved. Printed by `explain`.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub command: Vec<String>,
    /// The program to execute, resolved through the sandbox's PATH.
    pub program: Option<PathBuf>,
    pub mode: EnforceMode,
    pub view: bool,
    pub rules: Vec<PlannedRule>,
    pub mounts: Vec<Mount>,
    pub landlock: LandlockPlan,
    pub seccomp: SeccompPlan,
    pub net: NetPlan,
    pub scratch: ScratchPlan,
    /// The command's environment. `explain` prints names only.
    #[serde(skip)]
    pub env: Vec<(String, String)>,
    pub env_names: Vec<String>,
    pub cwd: PathBuf,
    pub identity: Option<(u32, u32)>,
    #[serde(
        rename = "timeout_ms",
        serialize_with = "crate::units::serialize_millis_opt"
    )]
    pub timeout: Option<Duration>,
    #[serde(
        rename = "kill_grace_ms",
        serialize_with = "crate::units::serialize_millis"
    )]
    pub kill_grace: Duration,
    pub max_output: Option<u64>,
    pub limits: Vec<(String, u64)>,
    pub degraded: Vec<Degradation>,
    pub warnings: Vec<String>,
    #[serde(skip)]
    pub argv: Vec<OsString>,
}

/// A plan that cannot be made: bad input or a missing path, reported as a cordon error.
#[derive(Debug, Clone)]
pub struct PlanError(pub String);

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PlanError {}

/// Resolve `policy` against `facts` for running `argv`.
pub fn build(policy: &Policy, facts: &Facts, argv: &[OsString]) -> Result<Plan, PlanError> {
    let mut degraded = Vec::new();
    let mut warnings = Vec::new();

    let view_possible = match &facts.namespaces {
        Ok(()) => true,
        Err(reason) => {
            if policy.view {
                warnings.push(format!("no view: {reason}"));
            }
            false
        }
    };
    let view = policy.view && view_possible;
    let no_view_reason = if !policy.view {
        "the view is switched off (--no-view / enforce.view = false)".to_string()
    } else {
        facts.namespaces.clone().err().unwrap_or_default()
    };

    let mut rules = resolve_rules(policy, facts.outer.is_some())?;
    let parents = enclosing_rules(&rules);
    classify(&mut rules, &parents, view, &no_view_reason, &mut degraded);
    if let Some(outer) = &facts.outer {
        // The most specific outer path decides; a later entry for the same path wins.
        let granted_at: FastMap<&[u8], Access> = outer
            .iter()
            .map(|(p, a)| (p.as_os_str().as_bytes(), *a))
            .collect();
        for rule in rules.iter_mut() {
            if let Some(path) = &rule.resolved {
                let granted = self_and_ancestors(path.as_os_str().as_bytes())
                    .find_map(|p| granted_at.get(p).copied())
                    .unwrap_or(Access::Deny);
                rule.outer = Some(granted);
                if rule.access != Access::Deny && !granted.covers(rule.access) {
                    warnings.push(format!(
                        "{} {} ({}): the outer sandbox grants only `{}` here; that is what the command gets",
                        rule.access,
                        rule.path.display(),
                        rule.origin,
                        granted
                    ));
                }
            }
        }
    }

    let abi = facts.landlock_abi.min(PINNED_LANDLOCK_ABI);
    if facts.landlock_abi == 0 {
        degraded.push(Degradation {
            rule: "every [fs] rule".into(),
            reason: "Landlock is not available in this kernel".into(),
        });
    }

    let scratch = scratch_plan(policy, facts, view);
    let net = net_plan(policy, view);
    let identity = identity(policy, facts)?;
    let mounts = if view {
        view_mounts(&rules, &parents, &scratch, policy)
    } else {
        Vec::new()
    };
    let landlock = landlock_plan(
        &rules,
        &parents,
        &scratch,
        policy,
        abi,
        view,
        &net,
        &mut degraded,
    );
    let seccomp = SeccompPlan {
        deny_inet_sockets: !net.namespace && net.mode == NetMode::None,
        deny_unix_sockets: !view && !policy.allow_unix_sockets,
        deny_user_namespaces: true,
    };
    if !facts.seccomp {
        degraded.push(Degradation {
            rule: "seccomp filter (TIOCSTI, MPTCP, user namespaces)".into(),
            reason: "seccomp is not available".into(),
        });
    }
    if policy.allow_unix_sockets && !view {
        warnings.push(
            "enforce.allow_unix_sockets: the command can connect to any unix socket it can reach by path"
                .into(),
        );
    }
    if net.mode == NetMode::Egress && !net.namespace {
        degraded.push(Degradation {
            rule: "net.mode = \"egress\"".into(),
            reason: format!(
                "no network namespace ({no_view_reason}); other hosts on the proxy's port and UDP are not contained"
            ),
        });
    }

    let env = environment(policy, facts, &scratch, &net);
    let program = resolve_program(argv, &env, &facts.cwd);
    let cwd_granted = rules.iter().any(|r| {
        r.access != Access::Deny && r.resolved.as_ref().is_some_and(|p| beneath(&facts.cwd, p))
    });
    let cwd = if cwd_granted || !view {
        facts.cwd.clone()
    } else {
        warnings.push(format!(
            "the current directory {} is not granted; the command starts in /",
            facts.cwd.display()
        ));
        PathBuf::from("/")
    };

    Ok(Plan {
        command: argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        program,
        mode: policy.mode,
        view,
        env_names: env.iter().map(|(k, _)| k.clone()).collect(),
        env,
        rules,
        mounts,
        landlock,
        seccomp,
        net,
        scratch,
        cwd,
        identity,
        timeout: policy.timeout,
        kill_grace: policy.kill_grace,
        max_output: policy.max_output,
        limits: policy
            .limits
            .iter()
            .map(|l| (l.key.clone(), l.value))
            .collect(),
        degraded,
        warnings,
        argv: argv.to_vec(),
    })
}

/// Canonicalise every rule; a missing path is an error unless optional (or a deny,
/// which protects nothing when there is nothing to protect).
fn resolve_rules(policy: &Policy, nested: bool) -> Result<Vec<PlannedRule>, PlanError> {
    let found = resolve_paths(&policy.rules);
    let mut out: Vec<PlannedRule> = Vec::with_capacity(policy.rules.len());
    for (rule, found) in policy.rules.iter().zip(found) {
        let (resolved, is_dir, dev_ino, note) = match found {
            Ok(found) => (Some(found.real), found.is_dir, found.dev_ino, String::new()),
            Err(Unresolved::Stat(real, e)) => {
                return Err(PlanError(format!(
                    "{}: cannot stat {}: {e}",
                    rule.origin,
                    real.display()
                )))
            }
            Err(Unresolved::Missing(_)) if rule.optional || rule.access == Access::Deny => {
                (None, false, (0, 0), "missing, skipped".to_string())
            }
            // Inside another cordon's view, what it does not grant does not exist.
            Err(Unresolved::Missing(_)) if nested => (
                None,
                false,
                (0, 0),
                "not granted by the outer sandbox: it does not exist here".to_string(),
            ),
            Err(Unresolved::Missing(e)) => {
                return Err(PlanError(format!(
                    "{}: {} `{}`: {e}; create it, or write `{}?` to skip it when missing",
                    rule.origin,
                    rule.access,
                    rule.path.display(),
                    rule.path.display()
                )))
            }
        };
        out.push(PlannedRule {
            path: rule.path.clone(),
            resolved,
            access: rule.access,
            is_dir,
            origin: rule.origin.clone(),
            layer: Layer::NotNeeded,
            note,
            dev_ino,
            outer: None,
        });
    }
    // Two rules that resolve to the same place: the later one decides, in its own place.
    let mut last: FastMap<&[u8], usize> = FastMap::default();
    last.reserve(out.len());
    let mut resolved = 0;
    for (i, r) in out.iter().enumerate() {
        if let Some(p) = &r.resolved {
            last.insert(p.as_os_str().as_bytes(), i);
            resolved += 1;
        }
    }
    if last.len() < resolved {
        let keep: Vec<bool> = out
            .iter()
            .enumerate()
            .map(|(i, r)| {
                r.resolved
                    .as_deref()
                    .map_or(true, |p| last[p.as_os_str().as_bytes()] == i)
            })
            .collect();
        drop(last);
        let mut keep = keep.into_iter();
        out.retain(|_| keep.next().unwrap_or(true));
    }
    Ok(out)
}

/// A rule path resolved: canonical, with what `metadata` says of it.
/// From this many rules on, paths are resolved by a few threads.
const PARALLEL_RESOLVE: usize = 1000;
/// At most this many threads resolve paths.
const RESOLVE_THREADS: usize = 4;

/// Resolve each rule's path, in order. A large policy is split among a few threads, each
/// with its own [`Resolver`]: a `stat` per path is most of the cost, and they run in
/// parallel. The threads are joined before this returns.
fn resolve_paths(rules: &[crate::policy::PathRule]) -> Vec<Result<Found, Unresolved>> {
    crate::parallel::in_parts(rules, PARALLEL_RESOLVE, RESOLVE_THREADS, |part| {
        let mut resolver = Resolver::default();
        part.iter()
            .map(|r| resolver.resolve(&r.path))
            .collect::<Vec<_>>()
    })
    .into_iter()
    .flatten()
    .collect()
}

struct Found {
    real: PathBuf,
    is_dir: bool,
    dev_ino: (u64, u64),
}

enum Unresolved {
    /// `canonicalize` failed: the path (or a directory on the way) is missing or
    /// unreachable.
    Missing(std::io::Error),
    /// The canonical path could not be stat'ed.
    Stat(PathBuf, std::io::Error),
}

/// Resolves rule paths with the result of `std::fs::canonicalize` + `std::fs::metadata`,
/// cheaply. `canonicalize` walks from `/` with a `readlink` per component, every time;
/// here each distinct parent directory is canonicalised and opened once, and a path
/// beneath it costs one `fstatat` relative to that descriptor. A leaf that is a symlink,
/// a path that is not normalised, or any unusual error takes the slow, exact way.
#[derive(Default)]
struct Resolver {
    /// Parent directory as written → an `O_PATH` descriptor of it and its canonical path;
    /// `None` when it could not be resolved or opened (its paths take the slow way).
    parents: FastMap<Vec<u8>, Option<(OwnedFd, PathBuf)>>,
    name: Vec<u8>,
}

impl Resolver {
    fn resolve(&mut self, path: &Path) -> Result<Found, Unresolved> {
        if let Some((parent, name)) = split_normalized(path) {
            let key = parent.as_os_str().as_bytes();
            if !self.parents.contains_key(key) {
                self.parents.insert(key.to_vec(), open_dir(parent));
            }
            if let Some((dir, canonical)) = &self.parents[key] {
                self.name.clear();
                self.name.extend_from_slice(name.as_bytes());
                self.name.push(0);
                let c_name = CStr::from_bytes_with_nul(&self.name).expect("one NUL, at the end");
                match fstatat_nofollow(dir.as_raw_fd(), c_name) {
                    Ok(st) if st.st_mode & libc::S_IFMT != libc::S_IFLNK => {
                        // `canonical.join(name)`, without re-parsing either.
                        let c = canonical.as_os_str().as_bytes();
                        let mut real = Vec::with_capacity(c.len() + 1 + name.len());
                        real.extend_from_slice(c);
                        if c != b"/" {
                            real.push(b'/');
                        }
                        real.extend_from_slice(name.as_bytes());
                        return Ok(Found {
                            real: PathBuf::from(OsString::from_vec(real)),
                            is_dir: st.st_mode & libc::S_IFMT == libc::S_IFDIR,
                            dev_ino: (st.st_dev, st.st_ino),
                        });
                    }
                    // What canonicalize says too: the parent is there, the leaf is not.
                    Err(libc::ENOENT) => {
                        return Err(Unresolved::Missing(std::io::Error::from_raw_os_error(
                            libc::ENOENT,
                        )))
                    }
                    _ => {}
                }
            }
        }
        let real = std::fs::canonicalize(path).map_err(Unresolved::Missing)?;
        match std::fs::metadata(&real) {
            Ok(meta) => Ok(Found {
                is_dir: meta.is_dir(),
                dev_ino: (meta.dev(), meta.ino()),
                real,
            }),
            Err(e) => Err(Unresolved::Stat(real, e)),
        }
    }
}

/// A fast hasher for the path maps of the plan (FxHash: a multiply and a rotate per
/// word). SipHash's resistance to chosen keys buys nothing here: the keys are the
/// policy's own paths, and there are thousands of them on every launch.
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher(u64);

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let word = u64::from_le_bytes(c.try_into().expect("8 bytes"));
            self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(K);
        }
        for b in chunks.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(*b)).wrapping_mul(K);
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.write(&n.to_le_bytes());
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

pub(crate) type FastMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<FxHasher>>;
type FastSet<K> = HashSet<K, std::hash::BuildHasherDefault<FxHasher>>;

/// A normalised absolute path other than `/` (no `.`, `..`, doubled or trailing
/// slashes), split into its parent and last component; `None` for anything else.
fn split_normalized(path: &Path) -> Option<(&Path, &OsStr)> {
    let b = path.as_os_str().as_bytes();
    if b.len() < 2 || b[0] != b'/' || b[b.len() - 1] == b'/' {
        return None;
    }
    if b[1..]
        .split(|c| *c == b'/')
        .any(|c| c.is_empty() || c == b"." || c == b"..")
    {
        return None;
    }
    let cut = b.iter().rposition(|c| *c == b'/')?;
    let parent = if cut == 0 { &b[..1] } else { &b[..cut] };
    Some((
        Path::new(OsStr::from_bytes(parent)),
        OsStr::from_bytes(&b[cut + 1..]),
    ))
}

/// Canonicalise a directory and open it (`O_PATH`) without following symlinks, so the
/// descriptor is exactly the directory its canonical path names.
fn open_dir(dir: &Path) -> Option<(OwnedFd, PathBuf)> {
    let canonical = std::fs::canonicalize(dir).ok()?;
    let c_path = CString::new(canonical.as_os_str().as_bytes()).ok()?;
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    const RESOLVE_NO_SYMLINKS: u64 = 0x04;
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: RESOLVE_NO_SYMLINKS,
    };
    // SAFETY: `c_path` is NUL-terminated and `how` a valid open_how of the size passed.
    let mut fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            c_path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
        // No openat2 (before 5.6, or under valgrind). A symlink swapped in since
        // `canonicalize` could then point the descriptor elsewhere; the plan is a snapshot
        // either way, and the view checks every source against its (dev, ino) again.
        // SAFETY: `c_path` is NUL-terminated.
        fd = unsafe { libc::open(c_path.as_ptr(), how.flags as libc::c_int) }.into();
    }
    if fd < 0 {
        return None;
    }
    // SAFETY: a descriptor just opened, owned by nothing else.
    Some((unsafe { OwnedFd::from_raw_fd(fd as RawFd) }, canonical))
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`, or the errno.
fn fstatat_nofollow(dir: RawFd, name: &CStr) -> Result<libc::stat, i32> {
    // SAFETY: all-zero is a valid `struct stat`; it is only read after fstatat filled it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is NUL-terminated, `st` is writable, `dir` is an open descriptor.
    let r = unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    if r < 0 {
        Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO))
    } else {
        Ok(st)
    }
}

/// `path` is `dir` or lies beneath it. Both are absolute and normalised (no `.`, `..`,
/// doubled or trailing slashes), so comparing bytes at a component boundary is exact,
/// and much cheaper than `Path::starts_with`: this runs on every launch, for every pair
/// of rules.
pub fn beneath(path: &Path, dir: &Path) -> bool {
    let (p, d) = (
        path.as_os_str().as_encoded_bytes(),
        dir.as_os_str().as_encoded_bytes(),
    );
    d == b"/" || (p.starts_with(d) && (p.len() == d.len() || p[d.len()] == b'/'))
}

/// `path` lies strictly beneath `dir`.
pub fn strictly_beneath(path: &Path, dir: &Path) -> bool {
    path.as_os_str().len() != dir.as_os_str().len() && beneath(path, dir)
}

/// The rule that decides `path` besides the rule at `path` itself: the nearest enclosing
/// one, by components.
pub fn enclosing<'a>(rules: &'a [PlannedRule], path: &Path) -> Option<&'a PlannedRule> {
    rules
        .iter()
        .filter(|r| {
            r.resolved
                .as_ref()
                .is_some_and(|p| strictly_beneath(path, p))
        })
        .max_by_key(|r| r.resolved.as_ref().map_or(0, |p| p.components().count()))
}

/// The rule that decides access to `path`: the longest prefix, component-wise.
pub fn deciding<'a>(rules: &'a [PlannedRule], path: &Path) -> Option<&'a PlannedRule> {
    rules
        .iter()
        .filter(|r| r.resolved.as_ref().is_some_and(|p| beneath(path, p)))
        .max_by_key(|r| r.resolved.as_ref().map_or(0, |p| p.components().count()))
}

/// `path` (absolute, normalised, as bytes) and each directory above it, up to `/`.
fn self_and_ancestors(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::successors(Some(path), |p| parent_bytes(p))
}

/// The parent of a normalised absolute path, as bytes; `None` for `/` (and for anything
/// without a slash).
fn parent_bytes(path: &[u8]) -> Option<&[u8]> {
    if path == b"/" {
        return None;
    }
    match path.iter().rposition(|c| *c == b'/')? {
        0 => Some(b"/"),
        cut => Some(&path[..cut]),
    }
}

/// For each rule, the index of the rule that [`enclosing`] would return for its resolved
/// path: the nearest one strictly above it. Resolved paths are unique (see
/// `resolve_rules`), so looking each ancestor up in a map finds it in at most `depth`
/// steps, instead of a scan of every rule for every rule. Unresolved rules have none.
fn enclosing_rules(rules: &[PlannedRule]) -> Vec<Option<usize>> {
    let at = path_index(rules);
    rules
        .iter()
        .map(|r| {
            let path = r.resolved.as_deref()?.as_os_str().as_bytes();
            self_and_ancestors(path)
                .skip(1)
                .find_map(|p| at.get(p).copied())
        })
        .collect()
}

/// Resolved path → index of its rule.
fn path_index(rules: &[PlannedRule]) -> FastMap<&[u8], usize> {
    rules
        .iter()
        .enumerate()
        .filter_map(|(i, r)| Some((r.resolved.as_deref()?.as_os_str().as_bytes(), i)))
        .collect()
}

/// The rules strictly above rule `i`, nearest first.
fn above(parents: &[Option<usize>], i: usize) -> impl Iterator<Item = usize> + '_ {
    std::iter::successors(parents[i], move |p| parents[*p])
}

fn classify(
    rules: &mut [PlannedRule],
    parents: &[Option<usize>],
    view: bool,
    no_view_reason: &str,
    degraded: &mut Vec<Degradation>,
) {
    for i in 0..rules.len() {
        if rules[i].resolved.is_none() {
            rules[i].layer = Layer::NotNeeded;
            continue;
        }
        let rule = &rules[i];
        let parent = parents[i]
            .map(|p| &rules[p])
            .filter(|p| p.access != Access::Deny || rule.access != Access::Deny);
        let parent_access = parent.map(|p| p.access);
        let narrows = parent_access.is_some_and(|pa| pa != Access::Deny && !rule.access.covers(pa));
        let (layer, note) = match (rule.access, narrows, view) {
            (Access::Deny, false, _) => (
                Layer::NotNeeded,
                "no enclosing grant: not visible to the command".into(),
            ),
            (_, true, true) => (
                Layer::View,
                match rule.access {
                    Access::Deny if rule.is_dir => "empty read-only tmpfs over it".into(),
                    Access::Deny => "empty read-only file over it".into(),
                    a => format!("own bind mount with {a} reductions inside a wider grant"),
                },
            ),
            (Access::Deny, true, false) if splittable(rules, parents, i) => (
                Layer::Landlock,
                "Landlock: the read-only grants around it are split entry by entry".into(),
            ),
            (_, true, false) => {
                let parent = parent.expect("narrows implies a parent");
                degraded.push(Degradation {
                    rule: format!("{} {} ({})", rule.access, rule.path.display(), rule.origin),
                    reason: format!(
                        "a narrower rule inside `{} {}` needs the mount-namespace view, and {no_view_reason}; the enclosing grant applies instead",
                        parent.access,
                        parent.path.display()
                    ),
                });
                (
                    Layer::Degraded,
                    format!(
                        "needs the view: Landlock cannot narrow `{} {}` ({})",
                        parent.access,
                        parent.path.display(),
                        parent.origin
                    ),
                )
            }
            (_, false, true) => (Layer::ViewAndLandlock, "bind mount and Landlock".into()),
            (_, false, false) => (Layer::Landlock, "Landlock".into()),
        };
        rules[i].layer = layer;
        rules[i].note = note;
    }
}

/// Whether a denied file can be enforced exactly by Landlock alone: every grant above it
/// is read-only, so granting the siblings along the way one by one (instead of the
/// whole tree) leaves exactly the file out. A denied directory cannot be: the listing
/// right its parent needs would reach into it.
fn splittable(rules: &[PlannedRule], parents: &[Option<usize>], deny: usize) -> bool {
    rules[deny].resolved.is_some()
        && !rules[deny].is_dir
        && above(parents, deny).all(|a| rules[a].access == Access::Deny || !rules[a].access.write())
}

/// Landlock rules for a read-only grant at `dir` that leave out the files in `holes`:
/// listing-only on the directories leading to a hole, the grant's rights on every other
/// entry. Symlinks are not granted: following one must not reach further than the
/// whole-tree grant would have.
fn split_grant(dir: &Path, access: Access, holes: &[&Path], abi: u32, out: &mut Vec<LandlockRule>) {
    out.push(LandlockRule {
        path: dir.to_path_buf(),
        access,
        rights: rights(access, true, abi) & AccessFs::ReadDir as u64,
    });
    // The entries of `dir` that are holes, and those that lead to one.
    let mut skip = Vec::new();
    let mut descend = Vec::new();
    for hole in holes {
        if let Ok(rest) = hole.strip_prefix(dir) {
            let mut parts = rest.components();
            if let Some(first) = parts.next() {
                let name = first.as_os_str();
                if parts.next().is_none() {
                    skip.push(name);
                } else if !descend.contains(&name) {
                    descend.push(name);
                }
            }
        }
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_symlink() || skip.contains(&name.as_os_str()) {
            continue;
        }
        let path = dir.join(&name);
        if kind.is_dir() && descend.contains(&name.as_os_str()) {
            split_grant(&path, access, holes, abi, out);
        } else {
            out.push(LandlockRule {
                rights: rights(access, kind.is_dir(), abi),
                path,
                access,
            });
        }
    }
}

fn scratch_plan(policy: &Policy, facts: &Facts, view: bool) -> ScratchPlan {
    let dir = facts.scratch_root.join(format!("run-{}", facts.run_id));
    let (home, tmp) = if view {
        (Path::new(VIEW_SCRATCH).join("home"), PathBuf::from("/tmp"))
    } else {
        (dir.join("home"), dir.join("tmp"))
    };
    let home = match &policy.home {
        Location::Private => home,
        Location::Host => facts.home.clone(),
        Location::Path(p) => p.clone(),
    };
    let tmp = match &policy.tmp {
        Location::Private => tmp,
        Location::Host => facts
            .env
            .get("TMPDIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/tmp")),
        Location::Path(p) => p.clone(),
    };
    let plan_file = if view {
        Path::new(VIEW_SCRATCH).join(PLAN_FILE)
    } else {
        dir.join(PLAN_FILE)
    };
    ScratchPlan {
        plan_file,
        dir,
        keep: policy.keep_scratch,
        home,
        tmp,
    }
}

fn net_plan(policy: &Policy, view: bool) -> NetPlan {
    NetPlan {
        mode: policy.net_mode,
        namespace: view && policy.net_mode != NetMode::Host,
        allow: policy.net_allow.iter().map(|a| a.value.clone()).collect(),
        hosts: policy.net_hosts.iter().map(|h| h.value.clone()).collect(),
        allow_local: policy.net_allow_local,
        log: policy.net_log.clone(),
    }
}

fn identity(policy: &Policy, facts: &Facts) -> Result<Option<(u32, u32)>, PlanError> {
    if policy.user.is_none() && policy.group.is_none() {
        return Ok(None);
    }
    if !facts.is_root {
        return Err(PlanError(
            "--user/--group (process.user/group) need cordon to be started as root; remove them to run as yourself"
                .into(),
        ));
    }
    let (mut uid, mut gid) = (0, 0);
    if let Some(user) = &policy.user {
        let found = match user.parse::<u32>() {
            Ok(id) => nix::unistd::User::from_uid(id.into())
                .ok()
                .flatten()
                .map_or((id, id), |u| (id, u.gid.as_raw())),
            Err(_) => nix::unistd::User::from_name(user)
                .ok()
                .flatten()
                .map(|u| (u.uid.as_raw(), u.gid.as_raw()))
                .ok_or_else(|| {
                    PlanError(format!("unknown user `{user}` (process.user / --user)"))
                })?,
        };
        (uid, gid) = found;
    }
    if let Some(group) = &policy.group {
        gid = match group.parse::<u32>() {
            Ok(id) => id,
            Err(_) => nix::unistd::Group::from_name(group)
                .ok()
                .flatten()
                .map(|g| g.gid.as_raw())
                .ok_or_else(|| {
                    PlanError(format!("unknown group `{group}` (process.group / --group)"))
                })?,
        };
    }
    Ok(Some((uid, gid)))
}

/// The mounts of the view, outermost rule first.
fn view_mounts(
    rules: &[PlannedRule],
    parents: &[Option<usize>],
    scratch: &ScratchPlan,
    policy: &Policy,
) -> Vec<Mount> {
    let mut mounts = Vec::with_capacity(rules.len() + 8);
    let mut ordered: Vec<(usize, &Path)> = rules
        .iter()
        .enumerate()
        .filter_map(|(i, r)| Some((i, r.resolved.as_deref()?)))
        .collect();
    ordered.sort_by_cached_key(|(_, p)| p.components().count());

    // Symlinks along written paths (`/bin` → `usr/bin`) are reproduced first. A path
    // that is its own canonical form has no symlink in it: no need to look.
    for rule in rules {
        if rule.access == Access::Deny || rule.resolved.as_ref() == Some(&rule.path) {
            continue;
        }
        if let Ok(meta) = std::fs::symlink_metadata(&rule.path) {
            if meta.file_type().is_symlink() {
                if let Ok(link) = std::fs::read_link(&rule.path) {
                    mounts.push(Mount::Symlink {
                        target: rule.path.clone(),
                        link,
                    });
                }
            }
        }
    }

    let dev = Path::new("/dev");
    let proc_path = Path::new("/proc");
    for &(i, path) in &ordered {
        let rule = &rules[i];
        let parent = parents[i].map(|p| &rules[p]);
        match rule.access {
            Access::Deny => {
                if parent.is_some_and(|p| p.access != Access::Deny) {
                    mounts.push(if rule.is_dir {
                        Mount::MaskDir {
                            target: path.to_path_buf(),
                        }
                    } else {
                        Mount::MaskFile {
                            target: path.to_path_buf(),
                        }
                    });
                }
            }
            access => {
                if path == proc_path {
                    mounts.push(Mount::Proc {
                        target: path.to_path_buf(),
                    });
                    continue;
                }
                if path == dev {
                    continue; // the minimal /dev stands in for the host's
                }
                // Nested rules with the same access as an enclosing bind add nothing.
                let under_dev = beneath(path, dev);
                let redundant = parent.is_some_and(|p| {
                    p.access == access
                        && !beneath(path, proc_path)
                        && p.resolved.as_deref() != Some(dev)
                });
                if redundant && !under_dev {
                    continue;
                }
                mounts.push(Mount::Bind {
                    source: path.to_path_buf(),
                    target: path.to_path_buf(),
                    is_dir: rule.is_dir,
                    read_only: !access.write(),
                    exec: access.exec(),
                    device: under_dev && !rule.is_dir,
                    dev_ino: rule.dev_ino,
                });
            }
        }
    }
    pin_directories(rules, &mut mounts);
    // Every view has the minimal /dev; it is mounted before anything below it (binds of
    // extra nodes, and masks of denied paths under a /dev grant).
    let at = mounts
        .iter()
        .position(|m| match m {
            Mount::Bind { target, .. } | Mount::MaskDir { target } | Mount::MaskFile { target } => {
                beneath(target, dev)
            }
            _ => false,
        })
        .unwrap_or(mounts.len());
    mounts.insert(
        at,
        Mount::Dev {
            target: dev.to_path_buf(),
        },
    );

    // The scratch: the run dir read-only at /run/cordon (it holds the published plan),
    // the private home writable inside it, the private tmp at /tmp.
    let run = Path::new(VIEW_SCRATCH);
    let mut scratch_binds = vec![scratch_bind(&scratch.dir, run, true)];
    if policy.home == Location::Private {
        scratch_binds.push(scratch_bind(
            &scratch.dir.join("home"),
            &run.join("home"),
            false,
        ));
    }
    if policy.tmp == Location::Private {
        scratch_binds.push(scratch_bind(
            &scratch.dir.join("tmp"),
            Path::new("/tmp"),
            false,
        ));
    }
    for loc in [&policy.home, &policy.tmp] {
        if let Location::Path(p) = loc {
            scratch_binds.push(scratch_bind(p, p, false));
        }
    }
    for bind in scratch_binds {
        insert_before_beneath(&mut mounts, bind);
    }
    mounts
}

fn target_of(m: &Mount) -> &Path {
    match m {
        Mount::Bind { target, .. }
        | Mount::MaskDir { target }
        | Mount::MaskFile { target }
        | Mount::Proc { target }
        | Mount::Dev { target }
        | Mount::Symlink { target, .. } => target,
    }
}

/// A narrower rule's mount sits at a path inside a writable grant. Renaming a directory
/// on the way there (`mv .git .git-old`) would carry the mount away and let the command
/// create a fresh, unprotected path in its place. Mountpoints cannot be renamed or
/// removed (EBUSY), so every directory between the writable grant and such a mount is
/// pinned: bound onto itself with the grant's own access, before the mount inside it.
///
/// Linear in the number of mounts (times the depth): the enclosing grant and the known
/// mountpoints are looked up in maps, and the pins are merged into the list in one pass,
/// each placed where [`insert_before_beneath`] would put it.
fn pin_directories(rules: &[PlannedRule], mounts: &mut Vec<Mount>) {
    let at = path_index(rules);
    let mut known: FastSet<&[u8]> = mounts
        .iter()
        .filter_map(|m| match m {
            Mount::Bind { target, .. } | Mount::MaskDir { target } | Mount::MaskFile { target } => {
                Some(target.as_os_str().as_bytes())
            }
            _ => None,
        })
        .collect();
    let mut pins: Vec<Mount> = Vec::new();
    for m in mounts.iter() {
        let (Mount::Bind { target, .. } | Mount::MaskDir { target } | Mount::MaskFile { target }) =
            m
        else {
            continue;
        };
        let target = target.as_os_str().as_bytes();
        let Some(grant) = self_and_ancestors(target)
            .skip(1)
            .find_map(|p| at.get(p).map(|i| &rules[*i]))
        else {
            continue;
        };
        let Some(top) = grant.resolved.as_deref() else {
            continue;
        };
        if !grant.access.write() {
            continue; // nothing can be renamed inside a read-only tree
        }
        let top = top.as_os_str().as_bytes();
        for d in self_and_ancestors(target).skip(1) {
            if d.len() <= top.len() {
                break; // at the grant (its ancestors are shorter still)
            }
            if !known.insert(d) {
                continue;
            }
            let d = Path::new(OsStr::from_bytes(d));
            if let Ok(meta) = std::fs::metadata(d) {
                pins.push(Mount::Bind {
                    source: d.to_path_buf(),
                    target: d.to_path_buf(),
                    is_dir: true,
                    read_only: false,
                    exec: grant.access.exec(),
                    device: false,
                    dev_ino: (meta.dev(), meta.ino()),
                });
            }
        }
    }
    if pins.is_empty() {
        return;
    }
    // Each pin goes right before the first mount strictly beneath it; pins bound for the
    // same place go outermost first, so a pin never covers one inside it.
    let slot_of: FastMap<&[u8], usize> = pins
        .iter()
        .enumerate()
        .map(|(k, p)| (target_of(p).as_os_str().as_bytes(), k))
        .collect();
    let mut slot = vec![mounts.len(); pins.len()];
    for (j, m) in mounts.iter().enumerate() {
        for d in self_and_ancestors(target_of(m).as_os_str().as_bytes()).skip(1) {
            if let Some(&k) = slot_of.get(d) {
                slot[k] = slot[k].min(j);
            }
        }
    }
    drop(slot_of);
    let mut order: Vec<usize> = (0..pins.len()).collect();
    order.sort_by_key(|&k| (slot[k], target_of(&pins[k]).components().count()));
    let mut pins: Vec<Option<Mount>> = pins.into_iter().map(Some).collect();
    let mut merged = Vec::with_capacity(mounts.len() + pins.len());
    let mut next = order.into_iter().peekable();
    for (j, m) in std::mem::take(mounts).into_iter().enumerate() {
        while let Some(k) = next.next_if(|k| slot[*k] == j) {
            merged.extend(pins[k].take());
        }
        merged.push(m);
    }
    for k in next {
        merged.extend(pins[k].take());
    }
    *mounts = merged;
}

/// A bind of one of the run's own directories: never a device, always executable (the
/// command's private files are its own), read-only only for the published plan's dir.
fn scratch_bind(source: &Path, target: &Path, read_only: bool) -> Mount {
    Mount::Bind {
        source: source.to_path_buf(),
        target: target.to_path_buf(),
        is_dir: true,
        read_only,
        exec: !read_only,
        device: false,
        dev_ino: (0, 0),
    }
}

/// Add a scratch bind before the first mount beneath its target (a workspace under
/// `/tmp`), so the scratch does not hide it; at the end when there is none.
fn insert_before_beneath(mounts: &mut Vec<Mount>, bind: Mount) {
    let Mount::Bind { target: new, .. } = &bind else {
        unreachable!("only binds are inserted")
    };
    let at = mounts
        .iter()
        .position(|m| match m {
            Mount::Bind { target, .. }
            | Mount::MaskDir { target }
            | Mount::MaskFile { target }
            | Mount::Proc { target }
            | Mount::Dev { target }
            | Mount::Symlink { target, .. } => strictly_beneath(target, new),
        })
        .unwrap_or(mounts.len());
    mounts.insert(at, bind);
}

/// Landlock rights for an access level on a directory or a file, for `abi`.
pub fn rights(access: Access, is_dir: bool, abi: u32) -> u64 {
    let abi = ABI::from(abi as i32);
    let read: BitFlags<AccessFs> = AccessFs::from_read(abi) & !AccessFs::Execute;
    let mut set: BitFlags<AccessFs> = BitFlags::empty();
    if access.read() {
        set |= read;
    }
    if access.exec() {
        set |= AccessFs::Execute;
    }
    if access.write() {
        set |= AccessFs::from_write(abi) & !(AccessFs::MakeChar | AccessFs::MakeBlock);
    }
    if !is_dir {
        set &= AccessFs::from_file(abi);
    }
    set.bits()
}

#[allow(clippy::too_many_arguments)]
fn landlock_plan(
    rules: &[PlannedRule],
    parents: &[Option<usize>],
    scratch: &ScratchPlan,
    policy: &Policy,
    abi: u32,
    view: bool,
    net: &NetPlan,
    degraded: &mut Vec<Degradation>,
) -> LandlockPlan {
    let mut out = Vec::with_capacity(rules.len() + 8);
    // Denied files Landlock enforces by splitting the read-only grants above them: each
    // grant's holes, found by walking up from each hole (its enclosing rules are exactly
    // the grants whose trees hold it).
    let mut holes: Vec<Vec<&Path>> = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        if view || r.access != Access::Deny || r.layer != Layer::Landlock {
            continue;
        }
        let Some(hole) = r.resolved.as_deref() else {
            continue;
        };
        if holes.is_empty() {
            holes = vec![Vec::new(); rules.len()];
        }
        for a in above(parents, i) {
            holes[a].push(hole);
        }
    }
    for (i, rule) in rules.iter().enumerate() {
        let (Some(path), true) = (&rule.resolved, rule.access != Access::Deny) else {
            continue;
        };
        if let Some(inside) = holes.get(i).filter(|h| !h.is_empty()) {
            split_grant(path, rule.access, inside, abi, &mut out);
            continue;
        }
        out.push(LandlockRule {
            path: path.clone(),
            access: rule.access,
            rights: rights(rule.access, rule.is_dir, abi),
        });
    }
    // The private scratch is the command's own: read, write and execute.
    let mut private = Vec::new();
    if view {
        out.push(LandlockRule {
            path: PathBuf::from(VIEW_SCRATCH),
            access: Access::Ro,
            rights: rights(Access::Ro, true, abi),
        });
        if policy.home == Location::Private {
            private.push(Path::new(VIEW_SCRATCH).join("home"));
        }
        if policy.tmp == Location::Private {
            private.push(PathBuf::from("/tmp"));
        }
        // The view's root holds only what was granted: listing it (and the directories
        // leading to a grant) reveals nothing more. Denied directories are empty masks.
        out.push(LandlockRule {
            path: PathBuf::from("/"),
            access: Access::Ro,
            rights: AccessFs::ReadDir as u64,
        });
        // The minimal /dev: its pty instance and shm are private to the run.
        private.push(PathBuf::from("/dev/pts"));
        private.push(PathBuf::from("/dev/shm"));
        out.push(LandlockRule {
            path: PathBuf::from("/dev"),
            access: Access::Ro,
            rights: rights(Access::Ro, true, abi),
        });
    } else {
        out.push(LandlockRule {
            path: scratch.plan_file.clone(),
            access: Access::Ro,
            rights: rights(Access::Ro, false, abi),
        });
        if policy.home == Location::Private {
            private.push(scratch.home.clone());
        }
        if policy.tmp == Location::Private {
            private.push(scratch.tmp.clone());
        }
    }
    for loc in [&policy.home, &policy.tmp] {
        if let Location::Path(p) = loc {
            private.push(p.clone());
        }
    }
    for p in private {
        out.push(LandlockRule {
            path: p,
            access: Access::Rwx,
            rights: rights(Access::Rwx, true, abi),
        });
    }

    let handled_fs = if abi == 0 {
        0
    } else {
        AccessFs::from_all(ABI::from(abi as i32)).bits()
    };
    let tcp = (AccessNet::BindTcp | AccessNet::ConnectTcp).bits();
    let (handled_net, ports) = match (net.mode, net.namespace) {
        (_, true) => (0, Vec::new()),
        (NetMode::None, false) => (tcp, Vec::new()),
        (NetMode::Egress, false) => (tcp, Vec::new()), // the proxy port is added at launch
        (NetMode::Host, false) => {
            let mut handled = 0;
            let mut ports = Vec::new();
            if !policy.net_bind.is_empty() {
                handled |= AccessNet::BindTcp as u64;
                ports.extend(
                    policy
                        .net_bind
                        .iter()
                        .map(|p| (*p, AccessNet::BindTcp as u64)),
                );
            }
            if !policy.net_connect.is_empty() {
                handled |= AccessNet::ConnectTcp as u64;
                ports.extend(
                    policy
                        .net_connect
                        .iter()
                        .map(|p| (*p, AccessNet::ConnectTcp as u64)),
                );
            }
            (handled, ports)
        }
    };
    if handled_net != 0 && abi < 4 {
        degraded.push(Degradation {
            rule: format!("net.mode = \"{}\" TCP rules", net.mode.name()),
            reason: format!("Landlock ABI {abi} has no TCP rules (needs ABI 4)"),
        });
    }
    let scoped = if abi >= 6 {
        (landlock::Scope::Signal | landlock::Scope::AbstractUnixSocket).bits()
    } else {
        if !view {
            degraded.push(Degradation {
                rule: "signal and abstract-socket scoping".into(),
                reason: format!(
                    "Landlock ABI {abi} has no scopes (needs ABI 6) and there is no view"
                ),
            });
        }
        0
    };
    LandlockPlan {
        abi,
        handled_fs,
        handled_net: if abi >= 4 { handled_net } else { 0 },
        scoped,
        rules: out,
        ports,
    }
}

/// Does `name` match the glob `pattern` (`*` matches any run of characters)?
pub fn glob_match(pattern: &str, name: &str) -> bool {
    // Linear-time matching with one backtrack point (the last `*` seen), as in shells.
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ni));
            pi += 1;
        } else if pi < p.len() && p[pi] == n[ni] {
            pi += 1;
            ni += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == b'*')
}

fn is_glob(pattern: &str) -> bool {
    pattern.contains('*')
}

/// The command's environment: kept host variables, set ones, and cordon's own.
fn environment(
    policy: &Policy,
    facts: &Facts,
    scratch: &ScratchPlan,
    net: &NetPlan,
) -> Vec<(String, String)> {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in &facts.env {
        let explicit = policy.env_keep.iter().any(|k| !is_glob(k) && k == name);
        let kept = explicit || policy.env_keep.iter().any(|k| glob_match(k, name));
        let denied = policy.env_deny.iter().any(|d| glob_match(d, name));
        if explicit || (kept && !denied) {
            env.insert(name.clone(), value.clone());
        }
    }
    let user = facts.user_name.clone();
    let home = scratch.home.display().to_string();
    env.insert("HOME".into(), home.clone());
    env.insert("TMPDIR".into(), scratch.tmp.display().to_string());
    env.insert("USER".into(), user.clone());
    env.insert("LOGNAME".into(), user);
    env.entry("PATH".into())
        .or_insert_with(|| "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin".into());
    for (var, sub) in [
        ("XDG_CACHE_HOME", ".cache"),
        ("XDG_CONFIG_HOME", ".config"),
        ("XDG_DATA_HOME", ".local/share"),
        ("XDG_STATE_HOME", ".local/state"),
    ] {
        env.insert(var.into(), format!("{home}/{sub}"));
    }
    if net.mode == NetMode::Egress {
        // The port is known only at launch; `supervise` fills in the value.
        for var in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ] {
            env.insert(var.into(), String::new());
        }
        env.insert("NO_PROXY".into(), "localhost,127.0.0.1,::1".into());
        env.insert("no_proxy".into(), "localhost,127.0.0.1,::1".into());
    }
    env.insert("CORDON".into(), "1".into());
    env.insert(
        "CORDON_PLAN".into(),
        scratch.plan_file.display().to_string(),
    );
    for (name, value) in &policy.env_set {
        env.insert(name.clone(), value.clone());
    }
    env.into_iter().collect()
}

/// Find the program the way `execvp` would, with the sandbox's PATH.
fn resolve_program(argv: &[OsString], env: &[(String, String)], cwd: &Path) -> Option<PathBuf> {
    let name = Path::new(argv.first()?);
    if name.as_os_str().is_empty() {
        return None;
    }
    if name.as_os_str().as_encoded_bytes().contains(&b'/') {
        return Some(cwd.join(name));
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or("");
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("LC_*", "LC_ALL"));
        assert!(glob_match("*TOKEN*", "GITHUB_TOKEN"));
        assert!(glob_match("*_KEY", "AWS_SECRET_KEY"));
        assert!(!glob_match("*_KEY", "KEYBOARD"));
        assert!(glob_match("PATH", "PATH"));
        assert!(!glob_match("PATH", "PATHX"));
        assert!(glob_match("*", ""));
        assert!(glob_match("a*b*c", "aXbYbZc"));
        assert!(!glob_match("a*b*c", "aXbYbZ"));
        assert!(glob_match("LD_*", "LD_"));
    }

    #[test]
    fn scratch_binds_go_before_mounts_beneath_them() {
        let bind = |s: &str, t: &str| Mount::Bind {
            source: PathBuf::from(s),
            target: PathBuf::from(t),
            is_dir: true,
            read_only: false,
            exec: false,
            device: false,
            dev_ino: (0, 0),
        };
        let shown = |mounts: &[Mount]| -> Vec<String> {
            mounts
                .iter()
                .map(|m| match m {
                    Mount::Bind { source, target, .. } => {
                        format!("{}>{}", source.display(), target.display())
                    }
                    _ => unreachable!(),
                })
                .collect()
        };
        // Outermost first, as the rules come: a host /tmp grant, a workspace beneath it.
        let mut mounts = vec![
            bind("/usr", "/usr"),
            bind("/tmp", "/tmp"),
            bind("/tmp/ws", "/tmp/ws"),
        ];
        insert_before_beneath(&mut mounts, bind("/scratch/tmp", "/tmp"));
        insert_before_beneath(&mut mounts, bind("/scratch", "/run/cordon"));
        // The private /tmp covers the host /tmp grant but not the workspace beneath it.
        assert_eq!(
            shown(&mounts),
            [
                "/usr>/usr",
                "/tmp>/tmp",
                "/scratch/tmp>/tmp",
                "/tmp/ws>/tmp/ws",
                "/scratch>/run/cordon"
            ]
        );
    }

    /// A large policy is resolved by several threads: the results come back in the
    /// rules' order, a missing path where it was written.
    #[test]
    fn paths_resolve_in_order_across_threads() {
        let dir = std::env::temp_dir().join(format!("cordon-plan-parallel-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let dir = dir.canonicalize().unwrap();
        let n = PARALLEL_RESOLVE * 2 + 7;
        let rules: Vec<crate::policy::PathRule> = (0..n)
            .map(|i| {
                let p = dir.join(format!("e{i:05}"));
                if i % 3 != 1 {
                    std::fs::write(&p, "").unwrap();
                }
                crate::policy::PathRule {
                    path: p,
                    optional: true,
                    access: Access::Ro,
                    origin: Origin::command_line("--ro"),
                }
            })
            .collect();
        let found = resolve_paths(&rules);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(found.len(), n);
        for (i, (rule, f)) in rules.iter().zip(&found).enumerate() {
            match f {
                Ok(f) => {
                    assert_ne!(i % 3, 1, "{}", rule.path.display());
                    assert_eq!(f.real, rule.path);
                    assert!(!f.is_dir);
                }
                Err(Unresolved::Missing(_)) => assert_eq!(i % 3, 1, "{}", rule.path.display()),
                Err(Unresolved::Stat(..)) => panic!("{}: stat failed", rule.path.display()),
            }
        }
    }

    fn planned(path: &str, access: Access) -> PlannedRule {
        PlannedRule {
            path: PathBuf::from(path),
            resolved: Some(PathBuf::from(path)),
            access,
            is_dir: true,
            origin: Origin::command_line("--ro"),
            layer: Layer::NotNeeded,
            note: String::new(),
            dev_ino: (0, 0),
            outer: None,
        }
    }

    #[test]
    fn enclosing_rules_agree_with_enclosing() {
        // `/a/b-c` sorts between `/a/b` and `/a/b/c` by bytes: not an ancestor of either.
        let paths = [
            "/a/b/c",
            "/a/b-c",
            "/a/b",
            "/",
            "/a",
            "/a/b/c/d/e",
            "/x",
            "/a/bc",
            "/a/b-c/d",
        ];
        let mut rules: Vec<PlannedRule> = paths.iter().map(|p| planned(p, Access::Ro)).collect();
        let mut missing = planned("/a/b/gone", Access::Ro);
        missing.resolved = None;
        rules.push(missing);
        let parents = enclosing_rules(&rules);
        for (i, rule) in rules.iter().enumerate() {
            let want = rule
                .resolved
                .as_deref()
                .and_then(|p| enclosing(&rules, p))
                .map(|r| r.path.clone());
            let got = parents[i].map(|p| rules[p].path.clone());
            assert_eq!(got, want, "{}", rule.path.display());
        }
        assert_eq!(parent_bytes(b"/"), None);
        assert_eq!(parent_bytes(b"/a"), Some(&b"/"[..]));
        assert_eq!(parent_bytes(b"/a/b"), Some(&b"/a"[..]));
    }

    #[test]
    fn split_normalized_takes_only_normal_paths() {
        let split = |p: &str| {
            split_normalized(Path::new(p)).map(|(d, n)| {
                (
                    d.to_string_lossy().into_owned(),
                    n.to_string_lossy().into_owned(),
                )
            })
        };
        assert_eq!(split("/a"), Some(("/".into(), "a".into())));
        assert_eq!(split("/a/bc"), Some(("/a".into(), "bc".into())));
        for odd in [
            "/", "", "a/b", "/a/", "/a//b", "/a/./b", "/a/..", "/a/.", "//a",
        ] {
            assert_eq!(split(odd), None, "{odd}");
        }
    }

    #[test]
    fn resolver_agrees_with_canonicalize() {
        let dir = std::env::temp_dir().join(format!("cordon-plan-resolve-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("real/sub")).unwrap();
        std::fs::write(dir.join("real/file"), "x").unwrap();
        std::os::unix::fs::symlink("real", dir.join("link")).unwrap();
        std::os::unix::fs::symlink("real/sub", dir.join("leaf-link")).unwrap();
        std::os::unix::fs::symlink("nowhere", dir.join("dangling")).unwrap();
        let dir = dir.canonicalize().unwrap();
        let mut resolver = Resolver::default();
        for rel in [
            "real",
            "real/sub",
            "real/file",
            "link",
            "link/sub",
            "link/file",
            "leaf-link",
            "dangling",
            "missing",
            "missing/below",
            "real/file/below",
            "real/../real/sub",
        ] {
            let path = dir.join(rel);
            // Twice: the second time the parent is cached.
            for _ in 0..2 {
                let want = std::fs::canonicalize(&path).map(|real| {
                    let meta = std::fs::metadata(&real).unwrap();
                    (real, meta.is_dir(), (meta.dev(), meta.ino()))
                });
                let got = resolver.resolve(&path);
                match (want, got) {
                    (Ok(w), Ok(g)) => assert_eq!(w, (g.real, g.is_dir, g.dev_ino), "{rel}"),
                    (Err(w), Err(Unresolved::Missing(g))) => {
                        assert_eq!(w.raw_os_error(), g.raw_os_error(), "{rel}")
                    }
                    (w, Ok(g)) => panic!("{rel}: canonicalize: {w:?}, resolver: {:?}", g.real),
                    (w, Err(_)) => panic!("{rel}: canonicalize: {w:?}, resolver: cannot stat"),
                }
            }
        }
        assert_eq!(
            resolver.resolve(Path::new("/")).ok().map(|f| f.real),
            Some("/".into())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn pins_go_before_the_mounts_inside_them_outermost_first() {
        let dir = std::env::temp_dir().join(format!("cordon-plan-pins-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("w/a/b/.git")).unwrap();
        std::fs::create_dir_all(dir.join("w/c/.git")).unwrap();
        let dir = dir.canonicalize().unwrap();
        let p = |rel: &str| dir.join(rel).to_string_lossy().into_owned();
        let rules = vec![
            planned(&p("w"), Access::Rw),
            planned(&p("w/a/b/.git"), Access::Ro),
            planned(&p("w/c/.git"), Access::Ro),
        ];
        let bind = |rel: &str| Mount::Bind {
            source: dir.join(rel),
            target: dir.join(rel),
            is_dir: true,
            read_only: true,
            exec: false,
            device: false,
            dev_ino: (0, 0),
        };
        let mut mounts = vec![bind("w"), bind("w/c/.git"), bind("w/a/b/.git")];
        pin_directories(&rules, &mut mounts);
        let targets: Vec<String> = mounts
            .iter()
            .map(|m| {
                target_of(m)
                    .strip_prefix(&dir)
                    .unwrap()
                    .display()
                    .to_string()
            })
            .collect();
        assert_eq!(
            targets,
            ["w", "w/c", "w/c/.git", "w/a", "w/a/b", "w/a/b/.git"]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn read_only_rights_exclude_writes() {
        let ro = rights(Access::Ro, true, 6);
        let rw = rights(Access::Rw, true, 6);
        assert_eq!(ro & AccessFs::WriteFile as u64, 0);
        assert_ne!(rw & AccessFs::WriteFile as u64, 0);
        assert_eq!(rw & AccessFs::Execute as u64, 0);
        assert_ne!(rights(Access::Rx, false, 6) & AccessFs::Execute as u64, 0);
        assert_eq!(rights(Access::Rw, false, 6) & AccessFs::MakeReg as u64, 0);
    }
}
