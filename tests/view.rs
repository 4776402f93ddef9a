//! Issue #3: the view (DESIGN.md, "Enforcement layers", item 1) through the real binary on
//! the real kernel, as root and as an unprivileged user (65534, through `setpriv`).
//!
//! Every test builds a fresh [`World`] under /tmp: a copy of the binary (the checkout may
//! not be traversable by 65534), a workspace holding DESIGN.md's example (a read-only
//! `.git`, a denied `secrets/` with an `rx` carve-out `secrets/bin`, a denied `.env`), a
//! sibling directory no rule grants, HOME, TMPDIR and the policy file. For the
//! unprivileged runs everything but the binary is owned by 65534. Each rule is checked
//! from both sides: the allowed access works, the denied one fails with the expected
//! errno. Adversarial commands only aim at files the test created, and the only
//! processes the test ever kills are ones carrying its own unique marker.

mod common;

use common::{run, s, script, wait_until, Out, TempDir};
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Who starts cordon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    Root,
    /// uid/gid 65534, no supplementary groups, through `setpriv`.
    Nobody,
}

const NOBODY: u32 = 65534;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A value unique to this test run, for markers and file names.
fn unique(tag: &str) -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "cordon-vt-{tag}-{}-{}-{nanos:x}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// One test's world; removed when dropped.
struct World {
    who: Who,
    dir: TempDir,
    bin: PathBuf,
    ws: PathBuf,
    outside: PathBuf,
    home: PathBuf,
    tmpdir: PathBuf,
    policy: PathBuf,
    /// The content of `ws/secrets/key` and of `ws/.env`: never to be seen inside.
    secret_key: String,
    secret_env: String,
    /// The content of `outside/file`.
    outside_text: String,
}

impl World {
    /// None when the identity cannot be had here (65534 needs root to switch to).
    fn new(tag: &str, who: Who, base: &str) -> Option<World> {
        if who == Who::Nobody && !is_root() {
            eprintln!("skipped: switching to uid {NOBODY} needs root");
            return None;
        }
        let dir = TempDir::new(&format!("vt-{tag}"));
        let root = dir.path().to_path_buf();
        let bin = root.join("cordon");
        std::fs::copy(common::bin(), &bin).expect("copy the binary");
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();

        let ws = root.join("ws");
        let outside = root.join("outside");
        let home = root.join("home");
        let tmpdir = root.join("tmpdir");
        for d in [
            &ws,
            &ws.join(".git"),
            &ws.join("secrets/bin"),
            &ws.join("src"),
            &outside,
            &home,
            &tmpdir,
        ] {
            std::fs::create_dir_all(d).unwrap();
        }
        let secret_key = unique("secret-key");
        let secret_env = unique("secret-env");
        let outside_text = unique("outside");
        std::fs::write(ws.join("src/main.txt"), "workspace file\n").unwrap();
        std::fs::write(ws.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(ws.join(".env"), format!("TOKEN={secret_env}\n")).unwrap();
        std::fs::write(ws.join("secrets/key"), format!("{secret_key}\n")).unwrap();
        script(&ws.join("secrets/bin/tool"), "carve-out-ran");
        std::fs::write(outside.join("file"), format!("{outside_text}\n")).unwrap();
        // Planted on the host beforehand: symlinks into the denied file and dir.
        std::os::unix::fs::symlink("secrets/key", ws.join("host-link-key")).unwrap();
        std::os::unix::fs::symlink(".env", ws.join("host-link-env")).unwrap();
        std::os::unix::fs::symlink("secrets", ws.join("host-link-secrets")).unwrap();

        let policy = root.join("policy.toml");
        let w = s(&ws);
        std::fs::write(
            &policy,
            format!(
                r#"# DESIGN.md's example, for issue #3
extends = ["{base}"]

[fs]
rw   = ["{w}"]
ro   = ["{w}/.git"]
deny = ["{w}/secrets", "{w}/.env"]
rx   = ["{w}/secrets/bin"]
"#
            ),
        )
        .unwrap();
        if who == Who::Nobody {
            for d in [&ws, &outside, &home, &tmpdir] {
                chown_tree(d, NOBODY);
            }
        }
        Some(World {
            who,
            dir,
            bin,
            ws,
            outside,
            home,
            tmpdir,
            policy,
            secret_key,
            secret_env,
            outside_text,
        })
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    /// A command run as `self.who` in the workspace, with a controlled environment.
    fn as_who(&self, program: &Path) -> Command {
        let mut cmd = match self.who {
            Who::Root => Command::new(program),
            Who::Nobody => {
                let mut c = Command::new("setpriv");
                c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                    .arg(program);
                c
            }
        };
        cmd.current_dir(&self.ws)
            .env_clear()
            .env("PATH", common::PATH)
            .env("HOME", &self.home)
            .env("TMPDIR", &self.tmpdir)
            .stdin(Stdio::null());
        cmd
    }

    /// `cordon -p POLICY [flags] -- argv`, run to completion.
    fn cordon(&self, flags: &[&str], argv: &[&str]) -> Out {
        let mut cmd = self.as_who(&self.bin);
        cmd.args(["-p", s(&self.policy)])
            .args(flags)
            .arg("--")
            .args(argv);
        run(&mut cmd)
    }

    /// Run [`PROBE`] inside with `-q`: one result per operation.
    fn probe(&self, ops: &[(&str, String)]) -> (Vec<String>, Out) {
        let mut argv = vec!["python3", "-c", PROBE];
        for (op, arg) in ops {
            argv.push(op);
            argv.push(arg);
        }
        let out = self.cordon(&["-q"], &argv);
        assert_eq!(out.code, Some(0), "the probe did not run: {out}");
        let results: Vec<String> = out
            .stdout
            .lines()
            .map(|l| l.split_once(' ').map_or(l, |(_, r)| r).to_string())
            .collect();
        assert_eq!(results.len(), ops.len(), "one result per operation: {out}");
        self.assert_no_secret(&out);
        (results, out)
    }

    /// No secret of the world in anything the command printed.
    fn assert_no_secret(&self, out: &Out) {
        for secret in [&self.secret_key, &self.secret_env, &self.outside_text] {
            assert!(
                !out.stdout.contains(secret.as_str()) && !out.stderr.contains(secret.as_str()),
                "a denied file's content leaked ({secret}): {out}"
            );
        }
    }

    /// The uid files made inside should have on the host.
    fn uid(&self) -> u32 {
        match self.who {
            // SAFETY: getuid has no preconditions.
            Who::Root => unsafe { libc::getuid() },
            Who::Nobody => NOBODY,
        }
    }
}

/// `lchown -R` to uid and gid `id`.
fn chown_tree(path: &Path, id: u32) {
    std::os::unix::fs::lchown(path, Some(id), Some(id)).unwrap();
    if std::fs::symlink_metadata(path).unwrap().is_dir() {
        for e in std::fs::read_dir(path).unwrap() {
            chown_tree(&e.unwrap().path(), id);
        }
    }
}

/// A path under `base` as a String, for probe arguments.
fn at(base: &Path, rel: &str) -> String {
    s(&base.join(rel)).to_string()
}

/// Everything about the protected part of the workspace an attack could change: for each
/// path, its kind, mode, owner, mtime and content (a file's bytes, a dir's entry names, a
/// link's target). Symlinks are not followed.
fn snapshot(ws: &Path) -> BTreeMap<String, String> {
    fn walk(base: &Path, rel: &str, out: &mut BTreeMap<String, String>) {
        let p = base.join(rel);
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            out.insert(rel.into(), "missing".into());
            return;
        };
        let stamp = format!(
            "mode {:o} uid {} mtime {}.{} ctime {}.{}",
            m.mode(),
            m.uid(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec()
        );
        let content = if m.file_type().is_symlink() {
            format!("-> {}", std::fs::read_link(&p).unwrap().display())
        } else if m.is_dir() {
            let mut names: Vec<String> = std::fs::read_dir(&p)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            for n in &names {
                walk(base, &format!("{rel}/{n}"), out);
            }
            format!("[{}]", names.join(","))
        } else {
            String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned()
        };
        out.insert(rel.into(), format!("{stamp} {content}"));
    }
    let mut out = BTreeMap::new();
    for rel in [
        ".git",
        "secrets",
        ".env",
        "src",
        "host-link-key",
        "host-link-env",
        "host-link-secrets",
    ] {
        walk(ws, rel, &mut out);
    }
    out
}

/// A tiny program run inside the sandbox: each `op arg` pair is attempted and reported
/// as `op RESULT` on its own line: `OK`, the errno's symbolic name, or what was read
/// (`DATA:...`, `EMPTY`, `LIST:a,b`, `OUT:...`, `PIDS:1,2`). Two-path operations take
/// `a|b`.
const PROBE: &str = r#"
import errno, os, socket, subprocess, sys
def attempt(op, a):
    if op == "read":
        with open(a, "rb") as f:
            d = f.read()
        return "DATA:" + d.decode("utf-8", "replace").strip().replace("\n", "|") if d else "EMPTY"
    if op == "list":
        return "LIST:" + ",".join(sorted(os.listdir(a)))
    if op == "stat":
        os.stat(a)
    elif op == "write":
        with open(a, "r+b") as f:
            f.write(b"overwritten")
    elif op == "create":
        with open(a, "xb") as f:
            f.write(b"made-inside")
    elif op == "mkdir":
        os.mkdir(a)
    elif op == "rmdir":
        os.rmdir(a)
    elif op == "unlink":
        os.unlink(a)
    elif op == "truncate":
        os.truncate(a, 0)
    elif op == "chmod":
        os.chmod(a, 0o777)
    elif op == "rename":
        os.rename(*a.split("|"))
    elif op == "link":
        os.link(*a.split("|"))
    elif op == "symlink":
        os.symlink(*a.split("|"))
    elif op == "exec":
        r = subprocess.run([a], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        return "OUT:" + r.stdout.decode().strip() if r.returncode == 0 else "EXIT%d" % r.returncode
    elif op == "unix-connect":
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.settimeout(5)
        c.connect(a)
        c.close()
    elif op == "umount":
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.umount2(a.encode(), 2) != 0:  # MNT_DETACH
            raise OSError(ctypes.get_errno(), "umount2")
    elif op == "pids":
        return "PIDS:" + ",".join(sorted((e for e in os.listdir(a) if e.isdigit()), key=int))
    else:
        raise SystemExit("unknown op " + op)
    return "OK"
for op, arg in zip(sys.argv[1::2], sys.argv[2::2]):
    try:
        result = attempt(op, arg)
    except OSError as e:
        result = (errno.errorcode.get(e.errno) if e.errno else None) or type(e).__name__
    print(op, result, flush=True)
"#;

/// Two tests per check, as root and as 65534, on the `default` base profile; with
/// `system`, two more on the `system` base.
macro_rules! both {
    ($name:ident) => {
        mod $name {
            #[test]
            fn as_root() {
                super::$name(super::Who::Root, "default");
            }
            #[test]
            fn as_nobody() {
                super::$name(super::Who::Nobody, "default");
            }
        }
    };
    ($name:ident, system) => {
        mod $name {
            #[test]
            fn as_root() {
                super::$name(super::Who::Root, "default");
            }
            #[test]
            fn as_nobody() {
                super::$name(super::Who::Nobody, "default");
            }
            #[test]
            fn as_root_on_system() {
                super::$name(super::Who::Root, "system");
            }
            #[test]
            fn as_nobody_on_system() {
                super::$name(super::Who::Nobody, "system");
            }
        }
    };
}

// ---------------------------------------------------------------------------------------
// The denied file and dir: nothing of them shows, by any path.

both!(denied_file_and_dir_show_nothing, system);
fn denied_file_and_dir_show_nothing(who: Who, base: &str) {
    let Some(w) = World::new("denied", who, base) else {
        return;
    };
    let before = snapshot(&w.ws);
    let ws = &w.ws;
    let via_root = |rel: &str| format!("/proc/self/root{}", at(ws, rel));
    let (r, _) = w.probe(&[
        // The workspace itself reads.
        ("read", at(ws, "src/main.txt")),
        // The denied file is an empty read-only file; the denied dir an empty tmpfs
        // holding only the carve-out's mountpoint.
        ("read", at(ws, ".env")),
        ("list", at(ws, "secrets")),
        ("read", at(ws, "secrets/key")),
        ("stat", at(ws, "secrets/key")),
        // Symlinks planted on the host beforehand.
        ("read", at(ws, "host-link-key")),
        ("read", at(ws, "host-link-env")),
        ("list", at(ws, "host-link-secrets")),
        // Symlinks created inside.
        (
            "symlink",
            format!("{}|{}", at(ws, "secrets/key"), at(ws, "in-link-key")),
        ),
        ("read", at(ws, "in-link-key")),
        (
            "symlink",
            format!("{}|{}", at(ws, ".env"), at(ws, "in-link-env")),
        ),
        ("read", at(ws, "in-link-env")),
        // Through /proc/self/root.
        ("read", via_root("secrets/key")),
        ("read", via_root(".env")),
        ("list", via_root("secrets")),
        // Through init's root (PID 1 of the sandbox, not dumpable).
        ("read", format!("/proc/1/root{}", at(ws, "secrets/key"))),
        // Taking the masks away, or putting something of ours in their place.
        ("umount", at(ws, "secrets")),
        ("umount", at(ws, ".env")),
        ("mkdir", at(ws, "decoy")),
        (
            "rename",
            format!("{}|{}", at(ws, "decoy"), at(ws, "secrets")),
        ),
        ("create", at(ws, "decoy-file")),
        (
            "rename",
            format!("{}|{}", at(ws, "decoy-file"), at(ws, ".env")),
        ),
        ("read", at(ws, ".env")),
        ("read", at(ws, "secrets/key")),
    ]);
    assert_eq!(
        r,
        [
            "DATA:workspace file",
            "EMPTY",
            "LIST:bin",
            "ENOENT",
            "ENOENT",
            "ENOENT",
            "EMPTY",
            "LIST:bin",
            "OK",
            "ENOENT",
            "OK",
            "EMPTY",
            "ENOENT",
            "EMPTY",
            "LIST:bin",
            "EACCES",
            "EPERM",
            "EPERM",
            "OK",
            "EBUSY",
            "OK",
            "EBUSY",
            "EMPTY",
            "ENOENT",
        ],
        "{who:?} on {base}"
    );

    // The same with the usual tools, checking their words.
    let out = w.cordon(
        &["-q"],
        &[
            "sh",
            "-c",
            "cat .env; echo \"cat-env=$?\"; cat secrets/key; ls -la secrets secrets/bin; \
             cat host-link-key; cat /proc/self/root$PWD/secrets/key; ls -R secrets",
        ],
    );
    w.assert_no_secret(&out);
    assert!(out.stdout.contains("cat-env=0"), "{out}");
    assert!(
        out.stderr
            .contains("cat: secrets/key: No such file or directory"),
        "{out}"
    );
    assert!(
        out.stderr
            .contains("cat: host-link-key: No such file or directory"),
        "{out}"
    );
    assert!(
        out.stdout.contains("tool"),
        "the carve-out is listed: {out}"
    );
    assert!(!out.stdout.contains("key"), "{out}");
    assert_eq!(snapshot(&w.ws), before, "the host changed");
    assert!(w.ws.join("decoy").is_dir() && w.ws.join("decoy-file").is_file());
}

// ---------------------------------------------------------------------------------------
// The carve-out inside the denied dir.

both!(carve_out_runs_and_is_read_only, system);
fn carve_out_runs_and_is_read_only(who: Who, base: &str) {
    let Some(w) = World::new("carve", who, base) else {
        return;
    };
    let before = snapshot(&w.ws);
    let ws = &w.ws;
    let (r, _) = w.probe(&[
        ("exec", at(ws, "secrets/bin/tool")),
        ("list", at(ws, "secrets/bin")),
        ("read", at(ws, "secrets/bin/tool")),
        ("write", at(ws, "secrets/bin/tool")),
        ("create", at(ws, "secrets/bin/new")),
        ("unlink", at(ws, "secrets/bin/tool")),
        ("chmod", at(ws, "secrets/bin/tool")),
    ]);
    assert_eq!(
        r,
        [
            "OUT:carve-out-ran",
            "LIST:tool",
            "DATA:#!/bin/sh|echo carve-out-ran",
            "EROFS",
            "EROFS",
            "EROFS",
            "EROFS"
        ],
        "{who:?} on {base}"
    );
    let out = w.cordon(
        &["-q"],
        &["sh", "-c", "secrets/bin/tool; echo x > secrets/bin/tool"],
    );
    assert_eq!(out.stdout.trim(), "carve-out-ran", "{out}");
    assert!(out.stderr.contains("Read-only file system"), "{out}");
    assert_eq!(snapshot(&w.ws), before, "the host changed");
}

// ---------------------------------------------------------------------------------------
// The read-only .git, and the masks pinned in place.

both!(git_is_read_only_and_nothing_can_be_moved_away, system);
fn git_is_read_only_and_nothing_can_be_moved_away(who: Who, base: &str) {
    let Some(w) = World::new("git", who, base) else {
        return;
    };
    let before = snapshot(&w.ws);
    let ws = &w.ws;
    let (r, _) = w.probe(&[
        ("read", at(ws, ".git/HEAD")),
        ("list", at(ws, ".git")),
        ("write", at(ws, ".git/HEAD")),
        ("create", at(ws, ".git/config")),
        ("mkdir", at(ws, ".git/hooks")),
        ("unlink", at(ws, ".git/HEAD")),
        ("chmod", at(ws, ".git")),
        // Moving a protected path away would carry its mount with it.
        (
            "rename",
            format!("{}|{}", at(ws, ".git"), at(ws, "git-moved")),
        ),
        (
            "rename",
            format!("{}|{}", at(ws, "secrets"), at(ws, "secrets-moved")),
        ),
        // ...while a plain directory of the workspace moves.
        ("mkdir", at(ws, "plain")),
        (
            "rename",
            format!("{}|{}", at(ws, "plain"), at(ws, "plain-moved")),
        ),
    ]);
    assert_eq!(
        r,
        [
            "DATA:ref: refs/heads/main",
            "LIST:HEAD",
            "EROFS",
            "EROFS",
            "EROFS",
            "EROFS",
            "EROFS",
            "EBUSY",
            "EBUSY",
            "OK",
            "OK",
        ],
        "{who:?} on {base}"
    );
    assert!(ws.join("plain-moved").is_dir());

    let out = w.cordon(
        &["-q"],
        &["sh", "-c", "echo x > .git/HEAD; mv .git g; mv secrets s"],
    );
    for msg in [
        "cannot create .git/HEAD: Read-only file system",
        "cannot move '.git' to 'g': Device or resource busy",
        "cannot move 'secrets' to 's': Device or resource busy",
    ] {
        assert!(out.stderr.contains(msg), "{msg}: {out}");
    }
    assert_eq!(snapshot(&w.ws), before, "the host changed");
    assert!(!ws.join("git-moved").exists() && !ws.join("secrets-moved").exists());
}

// ---------------------------------------------------------------------------------------
// The workspace is writable.

both!(workspace_is_writable_and_shows_on_the_host);
fn workspace_is_writable_and_shows_on_the_host(who: Who, base: &str) {
    let Some(w) = World::new("ws", who, base) else {
        return;
    };
    let ws = &w.ws;
    let (r, _) = w.probe(&[
        ("mkdir", at(ws, "made")),
        ("create", at(ws, "made/file")),
        ("read", at(ws, "made/file")),
        ("list", at(ws, "made")),
        ("create", at(ws, "top")),
        ("write", at(ws, "src/main.txt")),
        (
            "rename",
            format!("{}|{}", at(ws, "top"), at(ws, "made/top")),
        ),
    ]);
    assert_eq!(
        r,
        [
            "OK",
            "OK",
            "DATA:made-inside",
            "LIST:file",
            "OK",
            "OK",
            "OK"
        ],
        "{who:?}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("made/file")).unwrap(),
        "made-inside"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("made/top")).unwrap(),
        "made-inside"
    );
    assert!(std::fs::read_to_string(ws.join("src/main.txt"))
        .unwrap()
        .starts_with("overwritten"));
    for p in ["made", "made/file"] {
        assert_eq!(std::fs::metadata(ws.join(p)).unwrap().uid(), w.uid(), "{p}");
    }
    // The run's private scratch is gone.
    let scratch = w.tmpdir.join(format!("cordon-{}", w.uid()));
    let left: Vec<_> = std::fs::read_dir(&scratch).unwrap().flatten().collect();
    assert!(left.is_empty(), "scratch left behind: {left:?}");
}

// ---------------------------------------------------------------------------------------
// Linking and moving the denied paths.

both!(denied_paths_cannot_be_linked_moved_or_changed, system);
fn denied_paths_cannot_be_linked_moved_or_changed(who: Who, base: &str) {
    let Some(w) = World::new("link", who, base) else {
        return;
    };
    let before = snapshot(&w.ws);
    let ws = &w.ws;
    let (r, _) = w.probe(&[
        ("link", format!("{}|{}", at(ws, ".env"), at(ws, "hl-env"))),
        (
            "link",
            format!("{}|{}", at(ws, "secrets/key"), at(ws, "hl-key")),
        ),
        ("rename", format!("{}|{}", at(ws, "secrets"), at(ws, "s2"))),
        ("rename", format!("{}|{}", at(ws, ".env"), at(ws, "e2"))),
        (
            "rename",
            format!("{}|{}", at(ws, "secrets/bin"), at(ws, "b2")),
        ),
        ("write", at(ws, ".env")),
        ("truncate", at(ws, ".env")),
        ("unlink", at(ws, ".env")),
        ("rmdir", at(ws, "secrets")),
        ("create", at(ws, "secrets/key")),
        ("mkdir", at(ws, "secrets/new")),
        ("chmod", at(ws, ".env")),
        // A new name in the writable workspace for a read-only file would make it
        // writable: the mounts' boundaries refuse it.
        (
            "link",
            format!("{}|{}", at(ws, ".git/HEAD"), at(ws, "hl-head")),
        ),
        (
            "link",
            format!("{}|{}", at(ws, "secrets/bin/tool"), at(ws, "hl-tool")),
        ),
        (
            "rename",
            format!("{}|{}", at(ws, ".git/HEAD"), at(ws, "head-moved")),
        ),
    ]);
    assert_eq!(
        r,
        [
            "EXDEV", "ENOENT", "EBUSY", "EBUSY", "EXDEV", "EACCES", "EACCES", "EBUSY", "EBUSY",
            "EROFS", "EROFS", "EROFS", "EXDEV", "EXDEV", "EXDEV",
        ],
        "{who:?} on {base}"
    );
    let out = w.cordon(
        &["-q"],
        &["sh", "-c", "ln .env hl; ln secrets/key hk; mv secrets s"],
    );
    assert_ne!(out.code, Some(0), "{out}");
    assert!(out.stderr.contains("Invalid cross-device link"), "{out}");
    assert!(out.stderr.contains("Device or resource busy"), "{out}");
    for p in [
        "hl-env",
        "hl-key",
        "s2",
        "e2",
        "b2",
        "hl",
        "hk",
        "s",
        "hl-head",
        "hl-tool",
        "head-moved",
    ] {
        assert!(!ws.join(p).exists(), "{p} was made on the host");
    }
    assert_eq!(snapshot(&w.ws), before, "the host changed");
}

// ---------------------------------------------------------------------------------------
// What no rule grants does not exist inside.

both!(unix_socket_outside_the_grants_cannot_be_reached);
fn unix_socket_outside_the_grants_cannot_be_reached(who: Who, _base: &str) {
    let Some(w) = World::new("sock", who, "default") else {
        return;
    };
    let sock = w.outside.join("agent.sock");
    let _listener = UnixListener::bind(&sock).expect("bind the test's socket");
    // Connectable by anyone from outside, so only the sandbox can stop the command.
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o777)).unwrap();
    UnixStream::connect(&sock).expect("the test connects from outside");
    let connect = "import socket, sys\nc = socket.socket(socket.AF_UNIX)\nc.connect(sys.argv[1])\nprint('connected')";
    let mut outside = w.as_who(Path::new("/usr/bin/python3"));
    outside.args(["-c", connect, s(&sock)]);
    let out = run(&mut outside);
    assert_eq!(
        (out.code, out.stdout.trim()),
        (Some(0), "connected"),
        "{who:?} connects from outside: {out}"
    );

    let (r, _) = w.probe(&[
        ("unix-connect", s(&sock).to_string()),
        ("stat", s(&sock).to_string()),
    ]);
    assert_eq!(r, ["ENOENT", "ENOENT"], "{who:?}");
}

both!(ungranted_directory_does_not_exist);
fn ungranted_directory_does_not_exist(who: Who, _base: &str) {
    let Some(w) = World::new("absent", who, "default") else {
        return;
    };
    std::os::unix::fs::symlink(w.outside.join("file"), w.ws.join("host-link-outside")).unwrap();
    let (r, _) = w.probe(&[
        ("stat", s(&w.outside).to_string()),
        ("list", s(&w.outside).to_string()),
        ("read", at(&w.outside, "file")),
        ("stat", s(&w.home).to_string()),
        ("stat", s(&w.policy).to_string()),
        // The workspace's parent holds only the path to the workspace.
        ("list", s(w.root()).to_string()),
        ("mkdir", at(&w.outside, "made")),
        // A symlink planted on the host, pointing out of the workspace.
        ("read", at(&w.ws, "host-link-outside")),
    ]);
    assert_eq!(
        r,
        ["ENOENT", "ENOENT", "ENOENT", "ENOENT", "ENOENT", "LIST:ws", "ENOENT", "ENOENT"],
        "{who:?}"
    );
    assert!(!w.outside.join("made").exists());
    let out = w.cordon(&["-q"], &["ls", s(&w.outside)]);
    assert_eq!(out.code, Some(2), "{out}");
    assert!(out.stderr.contains("No such file or directory"), "{out}");
}

/// A file removed when dropped.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

both!(tmp_is_private_and_writable);
fn tmp_is_private_and_writable(who: Who, _base: &str) {
    let Some(w) = World::new("tmp", who, "default") else {
        return;
    };
    let inside = PathBuf::from("/tmp").join(unique("made-inside"));
    let _cleanup_inside = RemoveOnDrop(inside.clone());
    // A file of the test's own in the host's /tmp: not to be seen inside.
    let host = PathBuf::from("/tmp").join(unique("host-only"));
    let _cleanup_host = RemoveOnDrop(host.clone());
    std::fs::write(&host, "host").unwrap();

    let (r, _) = w.probe(&[
        ("create", s(&inside).to_string()),
        ("read", s(&inside).to_string()),
        ("mkdir", "/tmp/cordon-vt-dir".to_string()),
        ("stat", s(&host).to_string()),
    ]);
    assert_eq!(r, ["OK", "DATA:made-inside", "OK", "ENOENT"], "{who:?}");
    assert!(
        !inside.exists(),
        "the file made in /tmp reached the host's /tmp"
    );
    let out = w.cordon(
        &["-q"],
        &["sh", "-c", "echo hi > /tmp/x && cat /tmp/x && ls /tmp"],
    );
    assert_eq!(out.code, Some(0), "{out}");
    let listed: Vec<&str> = out.stdout.lines().collect();
    // The private /tmp: the file just made, and the path to the workspace.
    let top = w.root().file_name().unwrap().to_str().unwrap();
    assert_eq!(listed, ["hi", top, "x"], "{out}");
}

// ---------------------------------------------------------------------------------------
// Processes.

both!(proc_lists_only_the_sandbox);
fn proc_lists_only_the_sandbox(who: Who, _base: &str) {
    let Some(w) = World::new("proc", who, "default") else {
        return;
    };
    let me = std::process::id().to_string();
    let (r, out) = w.probe(&[
        ("pids", "/proc".to_string()),
        ("stat", format!("/proc/{me}")),
        ("read", "/proc/1/comm".to_string()),
    ]);
    let pids: Vec<u32> = r[0]
        .strip_prefix("PIDS:")
        .unwrap_or_else(|| panic!("{out}"))
        .split(',')
        .map(|p| p.parse().unwrap())
        .collect();
    // init (1) and python; nothing of the host's.
    assert!(pids.contains(&1) && pids.len() <= 4, "{who:?}: {pids:?}");
    assert!(!pids.contains(&std::process::id()), "{who:?}: {pids:?}");
    assert_eq!(r[1], "ENOENT", "{who:?}");
    // PID 1 is cordon's own init, not the host's.
    assert_eq!(r[2], "DATA:cordon", "{who:?}");
}

/// Host pids whose argv has an argument equal to `marker`.
fn pids_with_arg(marker: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        if cmdline.split(|b| *b == 0).any(|a| a == marker.as_bytes()) {
            found.push(pid);
        }
    }
    found
}

/// A shell script for inside: start a daemon (`setsid`, detached from every descriptor)
/// whose argv carries `$VT_MARK`, wait until it shows in /proc, print `daemons N`. The
/// marker comes through the environment, so nothing else inside has it as an argument.
fn daemon_script() -> String {
    let check = "import os\nm = os.environ['VT_MARK'].encode()\n\
                 n = 0\n\
                 for p in filter(str.isdigit, os.listdir('/proc')):\n\
                 \ttry:\n\t\tn += m in open('/proc/%s/cmdline' % p, 'rb').read().split(b'\\0')\n\
                 \texcept OSError:\n\t\tpass\n\
                 print('daemons', n, flush=True)";
    format!(
        "setsid python3 -c 'import time; time.sleep(300)' \"$VT_MARK\" </dev/null >/dev/null 2>&1 &\n\
         for i in $(seq 100); do python3 -c \"{check}\" | grep -q 'daemons 1' && break; sleep 0.1; done\n\
         python3 -c \"{check}\"\n"
    )
}

/// Fail if a process carrying `marker` is still there after a short grace; kill only
/// those (this test started them) before failing.
fn assert_no_survivor(marker: &str, what: &str) {
    if wait_until(Duration::from_secs(3), || pids_with_arg(marker).is_empty()) {
        return;
    }
    let survivors = pids_with_arg(marker);
    for pid in &survivors {
        // SAFETY: signalling a process carrying this test's unique marker.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    panic!("{what}: processes survived the run: {survivors:?}");
}

both!(daemonised_grandchild_dies_with_the_run);
fn daemonised_grandchild_dies_with_the_run(who: Who, _base: &str) {
    let Some(w) = World::new("daemon", who, "default") else {
        return;
    };
    let marker = unique("daemon");
    let env = format!("VT_MARK={marker}");
    let out = w.cordon(&["-q", "--env", &env], &["sh", "-c", &daemon_script()]);
    assert_no_survivor(&marker, &format!("{who:?}: {out}"));
    assert_eq!(out.code, Some(0), "{out}");
    assert_eq!(
        out.stdout.trim(),
        "daemons 1",
        "the daemon ran inside: {out}"
    );
}

both!(sandbox_dies_when_cordon_is_killed);
fn sandbox_dies_when_cordon_is_killed(who: Who, _base: &str) {
    let Some(w) = World::new("killed", who, "default") else {
        return;
    };
    let marker = unique("killed");
    let env = format!("VT_MARK={marker}");
    // A daemon, then the command itself waits forever, both carrying the marker.
    let script = format!(
        "{}exec python3 -c 'import time; time.sleep(300)' \"$VT_MARK\"\n",
        daemon_script()
    );
    // setpriv execs cordon: the child's pid is cordon's.
    let mut cmd = w.as_who(&w.bin);
    cmd.args([
        "-p",
        s(&w.policy),
        "-q",
        "--env",
        &env,
        "--",
        "sh",
        "-c",
        &script,
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    let mut child = cmd.spawn().expect("spawn cordon");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let ready = rx.recv_timeout(common::DEADLINE);
    // The supervisor dies without a chance to clean up.
    // SAFETY: signalling the child this test spawned (and has not reaped).
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let status = child.wait().unwrap();
    assert_no_survivor(&marker, &format!("{who:?}, after SIGKILL to cordon"));
    assert_eq!(ready.as_deref().map(str::trim), Ok("daemons 1"), "{who:?}");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
}

// ---------------------------------------------------------------------------------------
// Without the view.

both!(no_view_refuses_or_warns_for_each_narrower_rule);
fn no_view_refuses_or_warns_for_each_narrower_rule(who: Who, _base: &str) {
    let Some(w) = World::new("noview", who, "default") else {
        return;
    };
    let ws = s(&w.ws);
    let narrower = [
        format!("ro {ws}/.git"),
        format!("deny {ws}/secrets "),
        format!("deny {ws}/.env"),
    ];
    let out = w.cordon(&["--no-view"], &["echo", "ran"]);
    assert_eq!(out.code, Some(125), "{who:?}: {out}");
    assert!(out.stdout.is_empty(), "the command ran: {out}");
    assert!(out.stderr.starts_with("cordon: strict mode"), "{out}");
    for rule in &narrower {
        assert!(out.stderr.contains(rule.as_str()), "{rule}: {out}");
    }
    assert!(out.stderr.contains("--best-effort"), "{out}");
    // The carve-out is no narrower than what Landlock grants: not named.
    assert!(!out.stderr.contains("secrets/bin"), "{out}");

    let out = w.cordon(&["--no-view", "--best-effort"], &["echo", "ran"]);
    assert_eq!(
        (out.code, out.stdout.trim()),
        (Some(0), "ran"),
        "{who:?}: {out}"
    );
    let warnings: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("cordon: warning: not enforced: "))
        .collect();
    assert_eq!(warnings.len(), narrower.len(), "{out}");
    for rule in &narrower {
        assert_eq!(
            warnings
                .iter()
                .filter(|l| l.contains(rule.as_str()))
                .count(),
            1,
            "one warning for {rule}: {out}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// The README's spelling of the same policy.

both!(readme_policy_with_cwd_variables);
fn readme_policy_with_cwd_variables(who: Who, _base: &str) {
    let Some(w) = World::new("readme", who, "default") else {
        return;
    };
    // The README writes the example relative to the current directory.
    let text = std::fs::read_to_string(&w.policy).unwrap();
    std::fs::write(&w.policy, text.replace(s(&w.ws), "${CWD}")).unwrap();
    assert!(std::fs::read_to_string(&w.policy)
        .unwrap()
        .contains("deny = [\"${CWD}/secrets\", \"${CWD}/.env\"]"));
    let ws = &w.ws;
    let (r, _) = w.probe(&[
        ("read", ".env".to_string()),
        ("read", "secrets/key".to_string()),
        ("exec", at(ws, "secrets/bin/tool")),
        ("write", ".git/HEAD".to_string()),
        ("create", "made".to_string()),
    ]);
    assert_eq!(
        r,
        ["EMPTY", "ENOENT", "OUT:carve-out-ran", "EROFS", "OK"],
        "{who:?}"
    );
}
