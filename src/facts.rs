//! Gathering the facts the plan depends on: who we are, where, and what the kernel offers.
//! Only cheap checks run here; this is on every launch.

use crate::enforce::probe;
use crate::plan::Facts;
use crate::policy::Access;
use anyhow::Context as _;
use landlock::AccessFs;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Collect the facts for this invocation.
pub fn gather() -> anyhow::Result<Facts> {
    let uid = nix::unistd::getuid().as_raw();
    let gid = nix::unistd::getgid().as_raw();
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let env: BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    // The account database (NSS) is asked only when the environment does not say: it
    // costs more than the rest of the launch.
    let env_home = env
        .get("HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute());
    let env_user = env.get("USER").filter(|u| !u.is_empty()).cloned();
    let (home, user_name) = match (env_home, env_user) {
        (Some(home), Some(user)) => (home, user),
        (home, user) => {
            let account = nix::unistd::User::from_uid(uid.into()).ok().flatten();
            (
                home.or_else(|| account.as_ref().map(|u| u.dir.clone()))
                    .unwrap_or_else(|| PathBuf::from("/")),
                user.or_else(|| account.map(|u| u.name))
                    .unwrap_or_else(|| uid.to_string()),
            )
        }
    };
    let tmp = scratch_base(&env);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let outer = env
        .get("CORDON_PLAN")
        .and_then(|p| outer_grants(Path::new(p)));
    Ok(Facts {
        uid,
        gid,
        is_root: uid == 0,
        cwd,
        home,
        user_name,
        env,
        landlock_abi: probe::landlock_abi(),
        // Every cordon sandbox drops all capabilities and refuses new user namespaces,
        // so a nested run can never build a view: say so now, so `explain` inside a
        // sandbox shows the Landlock-only plan that will actually run.
        namespaces: if outer.is_some() {
            Err(NESTED_NO_NAMESPACES.to_string())
        } else {
            probe::namespaces_allowed(uid == 0)
        },
        seccomp: probe::seccomp_available(),
        scratch_root: tmp.join(format!("cordon-{uid}")),
        run_id: format!("{}-{:08x}", std::process::id(), nanos),
        outer,
    })
}

/// Where the per-run scratch dirs go: `$TMPDIR` when the caller set one; otherwise
/// `/dev/shm` when it is a RAM filesystem that allows exec and has room (1 GiB free),
/// because creating and removing the scratch on a disk filesystem costs more than the
/// rest of a launch; otherwise `/tmp`. A RAM scratch is what bubblewrap's and firejail's
/// private `/tmp` are too; a build that fills its TMPDIR with gigabytes sets `TMPDIR` or
/// `runtime.tmp`. (Docker's 64 MiB noexec `/dev/shm` fails the check and gets `/tmp`.)
fn scratch_base(env: &BTreeMap<String, String>) -> PathBuf {
    if let Some(tmp) = env
        .get("TMPDIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
    {
        return tmp;
    }
    const MIN_FREE: u64 = 1 << 30;
    let shm = Path::new("/dev/shm");
    let usable = nix::sys::statfs::statfs(shm).is_ok_and(|fs| {
        fs.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC
            && !fs.flags().contains(nix::sys::statvfs::FsFlags::ST_NOEXEC)
            && !fs.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY)
            && fs.blocks_available().saturating_mul(fs.block_size() as u64) >= MIN_FREE
    });
    PathBuf::from(if usable { "/dev/shm" } else { "/tmp" })
}

/// Why a run nested in another cordon sandbox has no view.
pub const NESTED_NO_NAMESPACES: &str = "this runs inside another cordon sandbox, which forbids new namespaces; the inner run is Landlock-only (it can only narrow the outer one)";

/// What an enclosing cordon sandbox grants, read from the plan it published: its
/// Landlock allow-list (as seen inside it) and the denials it enforces. None when the
/// file cannot be read: then this is not a nested run as far as we can tell.
fn outer_grants(path: &Path) -> Option<Vec<(PathBuf, Access)>> {
    let text = std::fs::read_to_string(path).ok()?;
    let plan: serde_json::Value = serde_json::from_str(&text).ok()?;
    // Judge a Landlock rule by its rights, not its label: a listing-only rule (the view's
    // root, a read-only grant split around a denied file) grants no file access.
    let by_rights = |rights: u64| {
        let (read, write, exec) = (
            rights & AccessFs::ReadFile as u64 != 0,
            rights & AccessFs::WriteFile as u64 != 0,
            rights & AccessFs::Execute as u64 != 0,
        );
        match (read, write, exec) {
            (false, _, _) => Access::Deny,
            (true, false, false) => Access::Ro,
            (true, false, true) => Access::Rx,
            (true, true, false) => Access::Rw,
            (true, true, true) => Access::Rwx,
        }
    };
    let access = |v: &serde_json::Value| -> Option<Access> {
        Some(match v.as_str()? {
            "deny" => Access::Deny,
            "ro" => Access::Ro,
            "rx" => Access::Rx,
            "rw" => Access::Rw,
            "rwx" => Access::Rwx,
            _ => return None,
        })
    };
    // The outer policy's rules that its kernel layers enforce (a degraded one leaves its
    // enclosing grant in force, so it is left out)...
    let mut out = Vec::new();
    for rule in plan["rules"].as_array()? {
        let enforced = matches!(
            rule["layer"].as_str(),
            Some("view-and-landlock" | "view" | "landlock")
        );
        if let (true, Some(path), Some(a)) =
            (enforced, rule["resolved"].as_str(), access(&rule["access"]))
        {
            out.push((PathBuf::from(path), a));
        }
    }
    // ...and its own directories (scratch, /dev, the view's root), from its Landlock rules.
    for rule in plan["landlock"]["rules"].as_array()? {
        let path = PathBuf::from(rule["path"].as_str()?);
        if !out.iter().any(|(p, _)| *p == path) {
            out.push((path, by_rights(rule["rights"].as_u64()?)));
        }
    }
    Some(out)
}
