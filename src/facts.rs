//! Gathering the facts the plan depends on: who we are, where, and what the kernel offers.
//! Only cheap checks run here; this is on every launch.

use crate::enforce::probe;
use crate::plan::Facts;
use anyhow::Context as _;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Collect the facts for this invocation.
pub fn gather() -> anyhow::Result<Facts> {
    let uid = nix::unistd::getuid().as_raw();
    let gid = nix::unistd::getgid().as_raw();
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let env: BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let account = nix::unistd::User::from_uid(uid.into()).ok().flatten();
    let home = env
        .get("HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| account.as_ref().map(|u| u.dir.clone()))
        .unwrap_or_else(|| PathBuf::from("/"));
    let user_name = account
        .map(|u| u.name)
        .or_else(|| env.get("USER").cloned())
        .unwrap_or_else(|| uid.to_string());
    let tmp = env
        .get("TMPDIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    Ok(Facts {
        uid,
        gid,
        is_root: uid == 0,
        cwd,
        home,
        user_name,
        env,
        landlock_abi: probe::landlock_abi(),
        namespaces: probe::namespaces_allowed(uid == 0),
        seccomp: probe::seccomp_available(),
        scratch_root: tmp.join(format!("cordon-{uid}")),
        run_id: format!("{}-{:08x}", std::process::id(), nanos),
    })
}
