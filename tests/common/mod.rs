//! Helpers for the integration tests: run the real `cordon` binary on the real kernel.
//!
//! Every test builds its own [`Fixture`]: a fresh directory under /tmp with a unique name,
//! holding the command's current directory, a sibling that no rule grants, the host HOME
//! and the TMPDIR cordon puts its scratch root in. Nothing is shared between tests, so
//! they run in parallel, and an adversarial command that escapes the sandbox can only
//! reach files the test itself created.

#![allow(dead_code)] // each test binary uses a different subset

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Whether this run of the suite uses the mount-namespace view (cordon's default mode).
/// `CORDON_TEST_NO_VIEW` (any value) selects the Landlock-only mode instead.
pub fn view_mode() -> bool {
    std::env::var_os("CORDON_TEST_NO_VIEW").is_none()
}

/// The enforcement flags every run and `explain` gets: none in the view mode (the
/// view, strict: cordon's default), `--no-view --best-effort` in the Landlock-only mode
/// (best-effort for the narrower rules only the view enforces, such as the default
/// profile's hidden dirs inside HOME).
pub fn mode_flags() -> &'static [&'static str] {
    if view_mode() {
        &[]
    } else {
        &["--no-view", "--best-effort"]
    }
}

/// What a path no rule grants answers, as an errno name: it does not exist in the view
/// (`ENOENT`), Landlock refuses it without (`EACCES`).
pub fn ungranted_errno() -> &'static str {
    if view_mode() {
        "ENOENT"
    } else {
        "EACCES"
    }
}

/// The same as the message of `strerror`, as tools print it.
pub fn ungranted_msg() -> &'static str {
    if view_mode() {
        "No such file or directory"
    } else {
        "Permission denied"
    }
}

/// What a write beneath a read-only grant answers: the view binds it read-only
/// (`EROFS`), Landlock refuses it without (`EACCES`).
pub fn readonly_errno() -> &'static str {
    if view_mode() {
        "EROFS"
    } else {
        "EACCES"
    }
}

/// The same as the message of `strerror`.
pub fn readonly_msg() -> &'static str {
    if view_mode() {
        "Read-only file system"
    } else {
        "Permission denied"
    }
}

/// The binary under test.
/// The uid the tests run as (scratch roots are named after it).
pub fn uid() -> u32 {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() }
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_cordon")
}

/// The PATH given to cordon (and, through the default `env.keep`, to the command):
/// the system's directories only, so `python3` is /usr/bin/python3 and not a shim in a
/// developer's home that no rule grants.
pub const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// How long any single cordon invocation may take before the test fails (and kills it).
pub const DEADLINE: Duration = Duration::from_secs(60);

/// A directory removed (recursively) when dropped.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// A fresh directory `/tmp/cordon-it-<tag>-<pid>-<n>-<nanos>`.
    pub fn new(tag: &str) -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let path = PathBuf::from(format!(
            "/tmp/cordon-it-{tag}-{}-{n}-{nanos:08x}",
            std::process::id()
        ));
        std::fs::create_dir(&path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// One test's world.
#[derive(Debug)]
pub struct Fixture {
    root: TempDir,
    /// The command's current directory (granted read-write by the default profile).
    pub cwd: PathBuf,
    /// A sibling of `cwd` that no rule grants.
    pub outside: PathBuf,
    /// The HOME cordon is started with (so `~` rules and installed profiles are ours).
    pub host_home: PathBuf,
    /// The TMPDIR cordon is started with: its scratch root is `<tmpdir>/cordon-<uid>`.
    pub tmpdir: PathBuf,
}

impl Fixture {
    pub fn new(tag: &str) -> Fixture {
        let root = TempDir::new(tag);
        let mk = |name: &str| {
            let p = root.path().join(name);
            std::fs::create_dir(&p).unwrap();
            p
        };
        let cwd = mk("cwd");
        let outside = mk("outside");
        let host_home = mk("home");
        let tmpdir = mk("tmpdir");
        Fixture {
            cwd,
            outside,
            host_home,
            tmpdir,
            root,
        }
    }

    /// The fixture's own root directory (not granted to the command).
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// A new directory directly under the fixture root, not granted by default.
    pub fn dir(&self, name: &str) -> PathBuf {
        let p = self.root().join(name);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    /// Write `text` to `path`, creating parents.
    pub fn write(&self, path: &Path, text: &str) {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(path, text).unwrap();
    }

    /// A policy file in the fixture root (outside the cwd, as a user's policy would be).
    pub fn policy(&self, name: &str, text: &str) -> PathBuf {
        let p = self.root().join(name);
        self.write(&p, text);
        p
    }

    /// Where cordon creates the per-run scratch dirs for this fixture.
    pub fn scratch_root(&self) -> PathBuf {
        self.tmpdir.join(format!("cordon-{}", uid()))
    }

    /// Entries left in the scratch root (an absent root counts as empty).
    pub fn scratch_leftovers(&self) -> Vec<String> {
        match std::fs::read_dir(self.scratch_root()) {
            Ok(entries) => entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// `cordon` with a controlled environment and the fixture's cwd, no arguments.
    pub fn bare(&self) -> Command {
        let mut cmd = Command::new(bin());
        cmd.current_dir(&self.cwd)
            .env("PATH", PATH)
            .env("HOME", &self.host_home)
            .env("TMPDIR", &self.tmpdir)
            .env_remove("XDG_CONFIG_HOME")
            .stdin(Stdio::null());
        cmd
    }

    /// `cordon [mode flags] -q` in the fixture: add options, then `--`, then the command.
    pub fn cordon(&self) -> Command {
        let mut cmd = self.cordon_loud();
        cmd.arg("-q");
        cmd
    }

    /// Start `cordon -q -- sh -c SCRIPT` with piped output and wait until the script has
    /// created `ready` (it does so once it is running inside); panics if it never does.
    pub fn spawn_until_ready(&self, script: &str, ready: &Path) -> std::process::Child {
        let child = self
            .cordon()
            .args(["--", "sh", "-c", script])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        assert!(
            wait_until(Duration::from_secs(20), || ready.exists()),
            "the command never started"
        );
        child
    }

    /// Like [`Fixture::cordon`] but without `-q`, for tests that read cordon's notices.
    pub fn cordon_loud(&self) -> Command {
        let mut cmd = self.bare();
        cmd.args(mode_flags());
        cmd
    }

    /// `cordon explain [mode flags]` in the fixture.
    pub fn explain(&self) -> Command {
        let mut cmd = self.bare();
        cmd.arg("explain").args(mode_flags());
        cmd
    }

    /// Run `cordon [mode flags] -q [flags] -- python3 -c PROBE op arg ...` and return one
    /// result per operation: `OK` or the errno's symbolic name (`EACCES`, ...).
    pub fn probe(&self, flags: &[&str], ops: &[(&str, &str)]) -> Vec<String> {
        let mut cmd = self.cordon();
        cmd.args(flags).args(["--", "python3", "-c", PROBE]);
        for (op, arg) in ops {
            cmd.args([*op, *arg]);
        }
        let out = run(&mut cmd);
        assert_eq!(out.code, Some(0), "probe failed to run: {out}");
        let results: Vec<String> = out
            .stdout
            .lines()
            .map(|l| l.split_once(' ').map_or(l, |(_, r)| r).to_string())
            .collect();
        assert_eq!(results.len(), ops.len(), "one result per operation: {out}");
        results
    }
}

/// A tiny program run inside the sandbox: each `op arg` pair is attempted and reported
/// as `op OK` or `op ERRNO` on its own line, so tests check the exact errno.
pub const PROBE: &str = r#"
import errno, os, socket, subprocess, sys
def attempt(op, arg):
    if op == "read":
        with open(arg, "rb") as f:
            f.read()
    elif op == "list":
        os.listdir(arg)
    elif op == "write":
        with open(arg, "r+b") as f:
            f.write(b"x")
    elif op == "create":
        with open(arg, "xb") as f:
            f.write(b"x")
    elif op == "mkdir":
        os.mkdir(arg)
    elif op == "unlink":
        os.unlink(arg)
    elif op == "exec":
        subprocess.run([arg], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    elif op == "fstat":
        os.fstat(int(arg))
    elif op == "kill":
        os.kill(int(arg), 15)
    elif op == "unix-connect":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect(arg.replace("@", "\0", 1) if arg.startswith("@") else arg)
        s.close()
    elif op == "socketpair":
        a, b = socket.socketpair()
        a.sendall(b"x")
        assert b.recv(1) == b"x"
    elif op == "connect":
        socket.create_connection(("127.0.0.1", int(arg)), timeout=5).close()
    else:
        raise SystemExit("unknown op " + op)
for op, arg in zip(sys.argv[1::2], sys.argv[2::2]):
    try:
        attempt(op, arg)
        print(op, "OK", flush=True)
    except OSError as e:
        name = errno.errorcode.get(e.errno) if e.errno else None
        print(op, name or type(e).__name__, flush=True)
    except subprocess.CalledProcessError as e:
        print(op, "EXIT%d" % e.returncode, flush=True)
"#;

/// What a finished cordon run left behind.
#[derive(Debug)]
pub struct Out {
    /// The exit code; None when killed by a signal.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl std::fmt::Display for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?} after {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.elapsed, self.stdout, self.stderr
        )
    }
}

/// Run to completion (at most [`DEADLINE`]), capturing stdout and stderr.
pub fn run(cmd: &mut Command) -> Out {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot spawn {cmd:?}: {e}"));
    finish(child, Instant::now())
}

/// Wait for a spawned child (stdout and stderr piped) with the [`DEADLINE`]; on expiry
/// kill it and fail the test.
pub fn finish(mut child: Child, started: Instant) -> Out {
    let mut so = child.stdout.take().expect("stdout piped");
    let mut se = child.stderr.take().expect("stderr piped");
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = so.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = se.read_to_string(&mut s);
        s
    });
    let status: ExitStatus = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if started.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("cordon did not finish within {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let elapsed = started.elapsed();
    Out {
        code: status.code(),
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
        elapsed,
    }
}

/// Poll until `cond` holds or `limit` passes; whether it held.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// Parse `env` output into (name, value) pairs.
pub fn parse_env(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Make `path` an executable shell script printing `marker`.
pub fn script(path: &Path, marker: &str) {
    std::fs::write(path, format!("#!/bin/sh\necho {marker}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A path as &str (the fixture's paths are all UTF-8).
pub fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}
