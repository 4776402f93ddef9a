//! What cordon prints about itself: the plan (`explain`), the machine (`probe`) and the
//! profiles. Presentation only; every decision was made in `plan`.

use crate::plan::{deciding, Layer, Mount, Plan};
use crate::policy::{Access, NetMode};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

/// The plan as a readable report.
pub fn plan_text(plan: &Plan) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "command:     {}", plan.command.join(" "));
    let _ = writeln!(
        out,
        "program:     {}",
        plan.program.as_ref().map_or(
            "(not found in the sandbox's PATH: exit 127)".to_string(),
            |p| p.display().to_string()
        )
    );
    let _ = writeln!(
        out,
        "mode:        {}",
        match plan.mode {
            crate::policy::EnforceMode::Strict => "strict (refuses what the kernel cannot enforce)",
            crate::policy::EnforceMode::BestEffort =>
                "best-effort (runs, warning for each degraded rule)",
        }
    );
    let _ = writeln!(
        out,
        "view:        {}",
        if plan.view {
            "yes: private mount, PID namespace; only granted paths exist"
        } else {
            "no: Landlock only; paths outside the policy still exist but cannot be opened"
        }
    );
    let _ = writeln!(
        out,
        "landlock:    ABI {} (rights of ABI {} requested)",
        plan.landlock.abi,
        crate::plan::PINNED_LANDLOCK_ABI.min(plan.landlock.abi.max(1))
    );
    let _ = writeln!(out, "\nfilesystem (the most specific rule decides):");
    let width = plan
        .rules
        .iter()
        .map(|r| r.path.display().to_string().len())
        .max()
        .unwrap_or(4)
        .min(48);
    let _ = writeln!(
        out,
        "  {:<6} {:<width$}  {:<18} FROM",
        "ACCESS", "PATH", "ENFORCED BY"
    );
    let mut rules: Vec<_> = plan.rules.iter().collect();
    rules.sort_by(|a, b| a.path.cmp(&b.path));
    for r in rules {
        let layer = match r.layer {
            Layer::ViewAndLandlock => "view + landlock".to_string(),
            Layer::View => "view".to_string(),
            Layer::Landlock => "landlock".to_string(),
            Layer::NotNeeded => "-".to_string(),
            Layer::Degraded => "NOT ENFORCED".to_string(),
        };
        let mut path = r.path.display().to_string();
        if let Some(real) = &r.resolved {
            if real != &r.path {
                path = format!("{path} → {}", real.display());
            }
        }
        let _ = write!(
            out,
            "  {:<6} {:<width$}  {:<18} {}",
            r.access.name(),
            path,
            layer,
            r.origin
        );
        if !r.note.is_empty() && !matches!(r.layer, Layer::ViewAndLandlock | Layer::Landlock) {
            let _ = write!(out, "  ({})", r.note);
        }
        out.push('\n');
    }
    if plan.view {
        let _ = writeln!(
            out,
            "  also in the view: a minimal /dev (null zero full random urandom tty, a new pts, private shm), {}",
            if plan.mounts.iter().any(|m| matches!(m, Mount::Proc { .. })) {
                "/proc of the sandbox's own PID namespace"
            } else {
                "no /proc"
            }
        );
    }

    let _ = writeln!(out, "\nnetwork:     {}", net_text(plan));
    let _ = writeln!(
        out,
        "runtime:     HOME={}  TMPDIR={}  ({})",
        plan.scratch.home.display(),
        plan.scratch.tmp.display(),
        if plan.scratch.keep {
            format!("kept after exit in {}", plan.scratch.dir.display())
        } else {
            "private, removed at exit".to_string()
        }
    );
    let _ = writeln!(
        out,
        "environment: {} (values not shown)",
        plan.env_names.join(" ")
    );
    let _ = writeln!(out, "\nprotections:");
    for (what, how) in protections(plan) {
        let _ = writeln!(out, "  {what:<34} {how}");
    }
    if let Some((uid, gid)) = plan.identity {
        let _ = writeln!(
            out,
            "  {:<34} uid {uid}, gid {gid}, no supplementary groups",
            "identity"
        );
    }
    if let Some(t) = plan.timeout {
        let _ = writeln!(
            out,
            "  {:<34} {:?}, then KILL after {:?}",
            "timeout", t, plan.kill_grace
        );
    }
    for (k, v) in &plan.limits {
        let _ = writeln!(out, "  {:<34} {v}", format!("limit {k}"));
    }
    if !plan.warnings.is_empty() {
        let _ = writeln!(out, "\nwarnings:");
        for w in &plan.warnings {
            let _ = writeln!(out, "  {w}");
        }
    }
    if plan.degraded.is_empty() {
        let _ = writeln!(out, "\ndegraded:    none: every rule is enforced");
    } else {
        let _ = writeln!(
            out,
            "\ndegraded (strict mode refuses to run; best-effort runs without these):"
        );
        for d in &plan.degraded {
            let _ = writeln!(out, "  {}: {}", d.rule, d.reason);
        }
    }
    out
}

fn net_text(plan: &Plan) -> String {
    match (plan.net.mode, plan.net.namespace) {
        (NetMode::None, true) => "none: a private network namespace with loopback only".into(),
        (NetMode::None, false) => {
            "none: no namespace; Landlock denies TCP connect/bind, seccomp denies new inet sockets"
                .into()
        }
        (NetMode::Egress, ns) => format!(
            "egress through cordon's proxy ({}), allowed: {}{}",
            if ns {
                "private network namespace"
            } else {
                "NO namespace: best effort"
            },
            if plan.net.allow.is_empty() {
                "nothing".to_string()
            } else {
                plan.net.allow.join(", ")
            },
            if plan.net.hosts.is_empty() {
                String::new()
            } else {
                format!(
                    "; pinned: {}",
                    plan.net
                        .hosts
                        .iter()
                        .map(|(n, i)| format!("{n}={i}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        ),
        (NetMode::Host, _) => {
            let mut s = "host: the host's network".to_string();
            if !plan.landlock.ports.is_empty() {
                s.push_str(", narrowed by Landlock TCP port rules");
            }
            s
        }
    }
}

/// Each protection and the layer providing it.
pub fn protections(plan: &Plan) -> Vec<(&'static str, String)> {
    let mut p = Vec::new();
    let ll = plan.landlock.abi > 0;
    p.push((
        "filesystem allow-list",
        match (plan.view, ll) {
            (true, true) => "view (bind mounts) + landlock".to_string(),
            (false, true) => "landlock".to_string(),
            (true, false) => "view only (no Landlock)".to_string(),
            (false, false) => "NONE".to_string(),
        },
    ));
    p.push((
        "signals to outside processes",
        match (plan.landlock.scoped != 0, plan.view) {
            (true, true) => "landlock scope + PID namespace".into(),
            (true, false) => "landlock scope".into(),
            (false, true) => "PID namespace".into(),
            (false, false) => "NONE".into(),
        },
    ));
    p.push((
        "abstract unix sockets outside",
        match (plan.landlock.scoped != 0, plan.net.namespace) {
            (true, true) => "landlock scope + network namespace".into(),
            (true, false) => "landlock scope".into(),
            (false, true) => "network namespace".into(),
            (false, false) => "NONE".into(),
        },
    ));
    p.push((
        "unix sockets by path outside",
        if plan.view {
            "view (they do not exist inside)".into()
        } else if plan.seccomp.deny_unix_sockets {
            "seccomp (no new AF_UNIX sockets)".into()
        } else {
            "NONE (enforce.allow_unix_sockets)".into()
        },
    ));
    p.push(("terminal injection (TIOCSTI)", "seccomp".into()));
    p.push(("MPTCP, io_uring, new user namespaces", "seccomp".into()));
    p.push((
        "privilege (setuid, capabilities)",
        "all capability sets emptied + no_new_privs".into(),
    ));
    p.push((
        "leaked descriptors",
        "closed on exec (every fd above 2)".into(),
    ));
    p
}

/// `explain --why PATH`: the deciding rule, the access and the layer.
pub fn why_text(plan: &Plan, path: &Path) -> String {
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    match deciding(&plan.rules, &real) {
        None => format!(
            "{}: no rule grants it: no access{}",
            path.display(),
            if plan.view {
                " (it does not exist inside the view)"
            } else {
                " (Landlock denies it)"
            }
        ),
        Some(rule) => {
            let access = if rule.access == Access::Deny {
                "no access (denied)".to_string()
            } else {
                rule.access.name().to_string()
            };
            let layer = match rule.layer {
                Layer::ViewAndLandlock => "enforced by the view's bind mount and Landlock",
                Layer::View => "enforced by the view",
                Layer::Landlock => "enforced by Landlock",
                Layer::NotNeeded if plan.view => {
                    "no rule grants anything around it, so it does not exist inside the view"
                }
                Layer::NotNeeded => "no rule grants anything around it, so Landlock refuses it",
                Layer::Degraded => "NOT ENFORCED: this rule is degraded (see `cordon explain`)",
            };
            format!(
                "{}: {access}, decided by `{} {}` ({}); {layer}",
                path.display(),
                rule.access.name(),
                rule.path.display(),
                rule.origin
            )
        }
    }
}

/// What `cordon probe` reports.
#[derive(Debug, Serialize)]
pub struct ProbeReport {
    pub landlock_abi: u32,
    pub landlock_features: Vec<&'static str>,
    pub user_namespaces: Availability,
    pub mount_namespaces: Availability,
    pub network_namespaces: Availability,
    pub pid_namespaces: Availability,
    pub view_possible: bool,
    pub seccomp: bool,
    pub legacy_tiocsti: Option<bool>,
    /// The kernel audit log, where Landlock (ABI 7) records denials for `--report`.
    pub audit_log: Availability,
    pub running_as_root: bool,
}

/// Whether a kernel feature can be used here, and if not, why: stable JSON keys
/// `available` and `reason`.
#[derive(Debug, Serialize)]
pub struct Availability {
    pub available: bool,
    pub reason: Option<String>,
}

impl From<Result<(), String>> for Availability {
    fn from(r: Result<(), String>) -> Self {
        Availability {
            available: r.is_ok(),
            reason: r.err(),
        }
    }
}

/// Landlock features by the ABI that brought them.
pub fn landlock_features(abi: u32) -> Vec<&'static str> {
    let all = [
        (1, "filesystem access control (ABI 1)"),
        (
            2,
            "file reparenting: rename and link across directories (ABI 2)",
        ),
        (3, "truncation (ABI 3)"),
        (4, "TCP bind and connect by port (ABI 4)"),
        (5, "ioctl on devices (ABI 5)"),
        (6, "scoping of signals and abstract unix sockets (ABI 6)"),
        (7, "audit logging flags (ABI 7)"),
    ];
    all.iter()
        .filter(|(v, _)| *v <= abi)
        .map(|(_, f)| *f)
        .collect()
}

/// The probe report as text.
pub fn probe_text(r: &ProbeReport) -> String {
    let mut out = String::new();
    let yes = |x: &Availability| match &x.reason {
        None => "yes".to_string(),
        Some(e) => format!("no ({e})"),
    };
    let _ = writeln!(
        out,
        "landlock:           ABI {}{}",
        r.landlock_abi,
        if r.landlock_abi == 0 {
            " (unavailable)"
        } else {
            ""
        }
    );
    for f in &r.landlock_features {
        let _ = writeln!(out, "                    - {f}");
    }
    let _ = writeln!(out, "user namespaces:    {}", yes(&r.user_namespaces));
    let _ = writeln!(out, "mount namespaces:   {}", yes(&r.mount_namespaces));
    let _ = writeln!(out, "pid namespaces:     {}", yes(&r.pid_namespaces));
    let _ = writeln!(out, "network namespaces: {}", yes(&r.network_namespaces));
    let _ = writeln!(
        out,
        "view possible:      {}",
        if r.view_possible {
            "yes"
        } else {
            "no: runs are Landlock-only"
        }
    );
    let _ = writeln!(
        out,
        "seccomp:            {}",
        if r.seccomp { "yes" } else { "no" }
    );
    let _ = writeln!(
        out,
        "legacy TIOCSTI:     {}",
        match r.legacy_tiocsti {
            Some(true) => "allowed by the kernel (dev.tty.legacy_tiocsti = 1); cordon's seccomp filter refuses it",
            Some(false) => "disabled by the kernel",
            None => "unknown (no dev.tty.legacy_tiocsti)",
        }
    );
    let _ = writeln!(out, "audit log:          {}", yes(&r.audit_log));
    let _ = writeln!(
        out,
        "running as root:    {}",
        if r.running_as_root { "yes" } else { "no" }
    );
    out
}
