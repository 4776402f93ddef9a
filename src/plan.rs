//! The plan: the policy resolved against this machine. Pure: it reads the filesystem to
//! canonicalise paths, but confines nothing. `cordon explain` prints it; `enforce` and
//! `supervise` carry it out and decide nothing of their own.

use crate::policy::{Access, EnforceMode, Location, NetMode, Origin, Policy};
use landlock::{Access as _, AccessFs, AccessNet, BitFlags, ABI};
use serde::Serialize;
use std::collections::BTreeMap;
use std::ffi::OsString;
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
    classify(&mut rules, view, &no_view_reason, &mut degraded);
    if let Some(outer) = &facts.outer {
        for rule in rules.iter_mut() {
            if let Some(path) = &rule.resolved {
                let granted = outer
                    .iter()
                    .filter(|(p, _)| beneath(path, p))
                    .max_by_key(|(p, _)| p.components().count())
                    .map_or(Access::Deny, |(_, a)| *a);
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
        view_mounts(&rules, &scratch, policy, net.mode)
    } else {
        Vec::new()
    };
    let landlock = landlock_plan(
        &rules,
        &scratch,
        policy,
        abi,
        view,
        &net,
        facts,
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
    let mut out: Vec<PlannedRule> = Vec::new();
    for rule in &policy.rules {
        let (resolved, is_dir, dev_ino, note) = match std::fs::canonicalize(&rule.path) {
            Ok(real) => {
                let meta = std::fs::metadata(&real).map_err(|e| {
                    PlanError(format!(
                        "{}: cannot stat {}: {e}",
                        rule.origin,
                        real.display()
                    ))
                })?;
                (
                    Some(real),
                    meta.is_dir(),
                    (meta.dev(), meta.ino()),
                    String::new(),
                )
            }
            Err(_) if rule.optional || rule.access == Access::Deny => {
                (None, false, (0, 0), "missing, skipped".to_string())
            }
            // Inside another cordon's view, what it does not grant does not exist.
            Err(_) if nested => (
                None,
                false,
                (0, 0),
                "not granted by the outer sandbox: it does not exist here".to_string(),
            ),
            Err(e) => {
                return Err(PlanError(format!(
                    "{}: {} `{}`: {e}; create it, or write `{}?` to skip it when missing",
                    rule.origin,
                    rule.access,
                    rule.path.display(),
                    rule.path.display()
                )))
            }
        };
        // Two rules that resolve to the same place: the later one decides.
        if let Some(r) = &resolved {
            out.retain(|o| o.resolved.as_ref() != Some(r));
        }
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
    Ok(out)
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

fn classify(
    rules: &mut [PlannedRule],
    view: bool,
    no_view_reason: &str,
    degraded: &mut Vec<Degradation>,
) {
    let snapshot = rules.to_vec();
    for rule in rules.iter_mut() {
        let Some(path) = rule.resolved.clone() else {
            rule.layer = Layer::NotNeeded;
            continue;
        };
        let parent = enclosing(&snapshot, &path)
            .filter(|p| p.access != Access::Deny || rule.access != Access::Deny);
        let parent_access = parent.map(|p| p.access);
        let narrows = parent_access.is_some_and(|pa| pa != Access::Deny && !rule.access.covers(pa));
        match (rule.access, narrows, view) {
            (Access::Deny, false, _) => {
                rule.layer = Layer::NotNeeded;
                rule.note = "no enclosing grant: not visible to the command".into();
            }
            (_, true, true) => {
                rule.layer = Layer::View;
                rule.note = match rule.access {
                    Access::Deny if rule.is_dir => "empty read-only tmpfs over it".into(),
                    Access::Deny => "empty read-only file over it".into(),
                    a => format!("own bind mount with {a} reductions inside a wider grant"),
                };
            }
            (Access::Deny, true, false) if splittable(&snapshot, rule) => {
                rule.layer = Layer::Landlock;
                rule.note =
                    "Landlock: the read-only grants around it are split entry by entry".into();
            }
            (_, true, false) => {
                rule.layer = Layer::Degraded;
                let parent = parent.expect("narrows implies a parent");
                rule.note = format!(
                    "needs the view: Landlock cannot narrow `{} {}` ({})",
                    parent.access,
                    parent.path.display(),
                    parent.origin
                );
                degraded.push(Degradation {
                    rule: format!("{} {} ({})", rule.access, rule.path.display(), rule.origin),
                    reason: format!(
                        "a narrower rule inside `{} {}` needs the mount-namespace view, and {no_view_reason}; the enclosing grant applies instead",
                        parent.access,
                        parent.path.display()
                    ),
                });
            }
            (_, false, true) => {
                rule.layer = Layer::ViewAndLandlock;
                rule.note = "bind mount and Landlock".into();
            }
            (_, false, false) => {
                rule.layer = Layer::Landlock;
                rule.note = "Landlock".into();
            }
        }
    }
}

/// Whether a denied file can be enforced exactly by Landlock alone: every grant above it
/// is read-only, so granting the siblings along the way one by one (instead of the
/// whole tree) leaves exactly the file out. A denied directory cannot be: the listing
/// right its parent needs would reach into it.
fn splittable(rules: &[PlannedRule], deny: &PlannedRule) -> bool {
    let Some(path) = &deny.resolved else {
        return false;
    };
    !deny.is_dir
        && rules.iter().all(|r| {
            let above = r.access != Access::Deny
                && r.resolved
                    .as_ref()
                    .is_some_and(|p| strictly_beneath(path, p));
            !above || !r.access.write()
        })
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
    scratch: &ScratchPlan,
    policy: &Policy,
    _net: NetMode,
) -> Vec<Mount> {
    let mut mounts = Vec::new();
    let mut ordered: Vec<&PlannedRule> = rules.iter().filter(|r| r.resolved.is_some()).collect();
    ordered.sort_by_key(|r| r.resolved.as_ref().map_or(0, |p| p.components().count()));

    // Symlinks along written paths (`/bin` → `usr/bin`) are reproduced first.
    for rule in rules {
        if let Ok(meta) = std::fs::symlink_metadata(&rule.path) {
            if meta.file_type().is_symlink() && rule.access != Access::Deny {
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
    for rule in &ordered {
        let path = rule.resolved.clone().expect("filtered");
        let parent = enclosing(rules, &path);
        match rule.access {
            Access::Deny => {
                if parent.is_some_and(|p| p.access != Access::Deny) {
                    mounts.push(if rule.is_dir {
                        Mount::MaskDir { target: path }
                    } else {
                        Mount::MaskFile { target: path }
                    });
                }
            }
            access => {
                if path == proc_path {
                    mounts.push(Mount::Proc { target: path });
                    continue;
                }
                if path == dev {
                    continue; // the minimal /dev stands in for the host's
                }
                // Nested rules with the same access as an enclosing bind add nothing.
                let redundant = parent.is_some_and(|p| {
                    p.access == access
                        && !path.starts_with(proc_path)
                        && p.resolved.as_deref() != Some(dev)
                });
                if redundant && !(path.starts_with(dev)) {
                    continue;
                }
                mounts.push(Mount::Bind {
                    source: path.clone(),
                    target: path.clone(),
                    is_dir: rule.is_dir,
                    read_only: !access.write(),
                    exec: access.exec(),
                    device: path.starts_with(dev) && !rule.is_dir,
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
                target.starts_with(dev)
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

/// A narrower rule's mount sits at a path inside a writable grant. Renaming a directory
/// on the way there (`mv .git .git-old`) would carry the mount away and let the command
/// create a fresh, unprotected path in its place. Mountpoints cannot be renamed or
/// removed (EBUSY), so every directory between the writable grant and such a mount is
/// pinned: bound onto itself with the grant's own access, before the mount inside it.
fn pin_directories(rules: &[PlannedRule], mounts: &mut Vec<Mount>) {
    let mut pins: Vec<Mount> = Vec::new();
    let targets: Vec<PathBuf> = mounts
        .iter()
        .filter_map(|m| match m {
            Mount::Bind { target, .. } | Mount::MaskDir { target } | Mount::MaskFile { target } => {
                Some(target.clone())
            }
            _ => None,
        })
        .collect();
    for target in &targets {
        let Some(grant) = enclosing(rules, target) else {
            continue;
        };
        let Some(top) = grant.resolved.as_deref() else {
            continue;
        };
        if !grant.access.write() {
            continue; // nothing can be renamed inside a read-only tree
        }
        let mut dir = target.parent();
        while let Some(d) = dir.filter(|d| strictly_beneath(d, top)) {
            let known = targets.iter().any(|t| t == d)
                || pins
                    .iter()
                    .any(|p| matches!(p, Mount::Bind { target, .. } if target == d));
            if !known {
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
            dir = d.parent();
        }
    }
    for pin in pins {
        insert_before_beneath(mounts, pin);
    }
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
    scratch: &ScratchPlan,
    policy: &Policy,
    abi: u32,
    view: bool,
    net: &NetPlan,
    _facts: &Facts,
    degraded: &mut Vec<Degradation>,
) -> LandlockPlan {
    let mut out = Vec::new();
    // Denied files Landlock enforces by splitting the read-only grants above them.
    let holes: Vec<&Path> = rules
        .iter()
        .filter(|r| !view && r.access == Access::Deny && r.layer == Layer::Landlock)
        .filter_map(|r| r.resolved.as_deref())
        .collect();
    for rule in rules {
        let (Some(path), true) = (&rule.resolved, rule.access != Access::Deny) else {
            continue;
        };
        let inside: Vec<&Path> = holes.iter().copied().filter(|h| beneath(h, path)).collect();
        if !inside.is_empty() {
            split_grant(path, rule.access, &inside, abi, &mut out);
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
