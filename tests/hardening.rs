//! Process hardening (issue #4), through the real binary on the real kernel, attacked the
//! way an exploit would attack it: identity and capabilities, setuid binaries, signals and
//! ptrace across the sandbox's edge, abstract sockets, terminal injection, the timeout and
//! parent death, rlimits, inherited descriptors, the environment, new user namespaces,
//! io_uring and MPTCP, and a setuid install of cordon itself.
//!
//! Every check runs in the default mode (the view) and, where the layer differs, again
//! with `--no-view --best-effort` (Landlock, seccomp and creds alone). Every attack is
//! harmless if the sandbox failed: it only aims at processes, sockets and files the test
//! created itself (pid 1 is attacked only after checking it is the sandbox's own init).
//!
//! These tests need root (the development and CI machines run them as root): `--user`,
//! setuid copies and `setpriv` need it.

mod common;

use common::{run, s, wait_until, Fixture, Out};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The default mode: the mount-namespace view.
const VIEW: &[&str] = &[];
/// Landlock, seccomp and creds only.
const NO_VIEW: &[&str] = &["--no-view", "--best-effort"];
const MODES: [&[&str]; 2] = [VIEW, NO_VIEW];

const NOBODY: &str = "65534";

fn is_view(mode: &[&str]) -> bool {
    !mode.contains(&"--no-view")
}

/// `cordon MODE -q` in the fixture; add options, `--` and the command.
fn cordon(fx: &Fixture, mode: &[&str]) -> Command {
    let mut cmd = fx.bare();
    cmd.args(mode).arg("-q");
    cmd
}

/// The value of `key:` in a /proc/PID/status text.
fn status_field(text: &str, key: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .unwrap_or_else(|| panic!("no {key} in {text}"))
        .trim()
        .to_string()
}

/// The value after `name=` on its own line of the output.
fn field<'a>(out: &'a Out, name: &str) -> &'a str {
    out.stdout
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name}= in {out}"))
        .trim()
}

/// A program of attacks run inside the sandbox: each `op arg` pair is tried and reported
/// as `op OK` (or `op OK:detail`) or `op ERRNO`, one line each.
const ATTACK: &str = r#"
import ctypes, errno, os, socket, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def raw(rc):
    if rc < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return rc
def attempt(op, arg):
    if op == "kill0":
        os.kill(int(arg), 0)
    elif op == "abstract-connect":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect("\0" + arg)
        s.close()
    elif op == "read":
        with open(arg, "rb") as f:
            f.read(64)
    elif op == "write":
        with open(arg, "wb") as f:
            f.write(b"x")
    elif op == "ptrace-seize":
        # PTRACE_SEIZE does not stop the tracee; the attach ends when we exit.
        raw(libc.ptrace(0x4206, int(arg), 0, 0))
    elif op == "ptrace-own-child":
        import subprocess
        child = subprocess.Popen(["sleep", "5"])
        try:
            raw(libc.ptrace(0x4206, child.pid, 0, 0))
        finally:
            child.kill()
            child.wait()
    elif op == "pid1-is":
        # Guard for attacks on pid 1: only the sandbox's own init may be attacked.
        argv0 = open("/proc/1/cmdline", "rb").read().split(b"\0")[0].decode()
        if argv0 != arg:
            raise SystemExit("pid 1 is " + argv0 + ", not the sandbox's init: not attacking it")
    elif op == "socket":
        family, kind, proto = (int(x) for x in arg.split(","))
        socket.socket(family, kind, proto).close()
    elif op == "io_uring_setup":
        params = ctypes.create_string_buffer(120)
        os.close(raw(libc.syscall(425, 8, params)))
    elif op == "clone-newuser" or op == "clone3-newuser":
        CLONE_NEWUSER, SIGCHLD = 0x10000000, 17
        if op == "clone-newuser":
            pid = raw(libc.syscall(56, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0))
        else:
            args = ctypes.create_string_buffer(struct.pack("11Q", CLONE_NEWUSER, 0, 0, 0, SIGCHLD, 0, 0, 0, 0, 0, 0))
            pid = raw(libc.syscall(435, args, 88))
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    elif op == "unshare-newuser":
        raw(libc.unshare(0x10000000))
    elif op == "fds":
        return ",".join(sorted(os.listdir("/proc/self/fd"), key=int))
    elif op == "openat":
        # arg = FD/NAME: open NAME beneath an inherited directory descriptor.
        fd, name = arg.split("/", 1)
        os.close(os.open(name, os.O_RDONLY, dir_fd=int(fd)))
    elif op == "oom-score-adj":
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(arg)
    elif op == "tiocsti":
        import fcntl
        fcntl.ioctl(0, int(arg, 0), b"x")
    elif op == "tiocgwinsz":
        import fcntl, termios
        fcntl.ioctl(0, termios.TIOCGWINSZ, b"\0" * 8)
    else:
        raise SystemExit("unknown op " + op)
for op, arg in zip(sys.argv[1::2], sys.argv[2::2]):
    try:
        detail = attempt(op, arg)
        print(op, "OK" if detail is None else "OK:" + detail, flush=True)
    except OSError as e:
        print(op, errno.errorcode.get(e.errno, str(e.errno)), flush=True)
"#;

/// Run [`ATTACK`] with `ops` under `cordon MODE -q FLAGS`; one result per op.
fn attack(fx: &Fixture, mode: &[&str], flags: &[&str], ops: &[(&str, &str)]) -> Vec<String> {
    let mut cmd = cordon(fx, mode);
    cmd.args(flags).args(["--", "python3", "-c", ATTACK]);
    for (op, arg) in ops {
        cmd.args([*op, *arg]);
    }
    results(run(&mut cmd), ops.len())
}

/// The same attacks, unconfined: the other side of each check.
fn attack_unconfined(ops: &[(&str, &str)]) -> Vec<String> {
    let mut cmd = Command::new("python3");
    cmd.env("PATH", common::PATH)
        .stdin(Stdio::null())
        .args(["-c", ATTACK]);
    for (op, arg) in ops {
        cmd.args([*op, *arg]);
    }
    results(run(&mut cmd), ops.len())
}

fn results(out: Out, n: usize) -> Vec<String> {
    assert_eq!(out.code, Some(0), "the attack program failed: {out}");
    let r: Vec<String> = out
        .stdout
        .lines()
        .map(|l| l.split_once(' ').map_or(l, |(_, r)| r).to_string())
        .collect();
    assert_eq!(r.len(), n, "one result per op: {out}");
    r
}

/// A `sleep` of the test's own, outside any sandbox: the only victim attacks may aim at.
struct Victim(std::process::Child);

impl Victim {
    fn start(env: &[(&str, &str)]) -> Victim {
        let mut cmd = Command::new("sleep");
        cmd.arg("60").stdin(Stdio::null()).env_clear();
        for (k, v) in env {
            cmd.env(k, v);
        }
        Victim(cmd.spawn().unwrap())
    }
    fn pid(&self) -> String {
        self.0.id().to_string()
    }
    fn alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

// ---------------------------------------------------------------------------------------
// Identity and capabilities.

#[test]
fn user_nobody_runs_as_65534_with_no_supplementary_groups() {
    let fx = Fixture::new("hard-id");
    for mode in MODES {
        let out = run(cordon(&fx, mode).args([
            "--user",
            "nobody",
            "--",
            "sh",
            "-c",
            "echo uid=$(id -u); echo gid=$(id -g); echo groups=$(id -G); \
             grep '^Groups:' /proc/self/status | sed 's/^Groups:/status-groups=/'",
        ]));
        assert_eq!(out.code, Some(0), "{mode:?}: {out}");
        assert_eq!(field(&out, "uid"), NOBODY, "{mode:?}: {out}");
        assert_eq!(field(&out, "gid"), NOBODY, "{mode:?}: {out}");
        // `id -G` lists the primary gid first; nothing else may follow.
        assert_eq!(field(&out, "groups"), NOBODY, "{mode:?}: {out}");
        assert_eq!(field(&out, "status-groups"), "", "{mode:?}: {out}");
    }
    // The other side: the ids above were changed, not inherited: the test runs as root.
    let host = std::fs::read_to_string("/proc/self/status").unwrap();
    assert_eq!(
        status_field(&host, "Uid").split_whitespace().next(),
        Some("0")
    );
}

#[test]
fn no_capability_in_any_set_and_no_new_privs_as_nobody_and_as_root() {
    let fx = Fixture::new("hard-caps");
    let host = std::fs::read_to_string("/proc/self/status").unwrap();
    assert_ne!(
        status_field(&host, "CapBnd"),
        "0000000000000000",
        "the test must run with capabilities for this test to mean anything"
    );
    for mode in MODES {
        for user in [&["--user", "nobody"][..], &[][..]] {
            let out = run(cordon(&fx, mode)
                .args(user)
                .args(["--", "cat", "/proc/self/status"]));
            assert_eq!(out.code, Some(0), "{mode:?} {user:?}: {out}");
            for key in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
                assert_eq!(
                    status_field(&out.stdout, key),
                    "0000000000000000",
                    "{key} {mode:?} {user:?}"
                );
            }
            assert_eq!(status_field(&out.stdout, "NoNewPrivs"), "1");
            let uid = if user.is_empty() { "0" } else { NOBODY };
            let uids = status_field(&out.stdout, "Uid");
            assert!(
                uids.split_whitespace().all(|u| u == uid),
                "real, effective, saved, fs uid: {uids} {mode:?} {user:?}"
            );
        }
    }
}

#[test]
fn a_setuid_root_copy_of_id_gains_nothing() {
    let fx = Fixture::new("hard-setuid");
    let id = fx.cwd.join("id");
    std::fs::copy("/usr/bin/id", &id).unwrap();
    // Owned by root (the test runs as root), mode 4755.
    std::fs::set_permissions(&id, std::fs::Permissions::from_mode(0o4755)).unwrap();
    // The other side: outside any sandbox, nobody running it does become root, so the
    // copy and its filesystem really honour the setuid bit.
    let out = run(Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            s(&id),
            "-u",
        ])
        .stdin(Stdio::null()));
    assert_eq!((out.code, out.stdout.trim()), (Some(0), "0"), "{out}");

    for mode in MODES {
        for user in [&["--user", "nobody"][..], &[][..]] {
            let out = run(cordon(&fx, mode).args(user).args([
                "--rwx",
                s(&fx.cwd),
                "--",
                "sh",
                "-c",
                "./id -u; echo rc=$?; ./id -G",
            ]));
            assert_eq!(out.code, Some(0), "{mode:?} {user:?}: {out}");
            // With the view, the workspace is bound nosuid: the exec succeeds and the
            // bit is ignored. Without it, no_new_privs makes execve ignore the bit. Either
            // way `id -u` (the effective uid) stays the caller's; an exec refused outright
            // would also gain nothing and shows as rc=126.
            let first = out.stdout.lines().next().unwrap_or("");
            let expected = if user.is_empty() { "0" } else { NOBODY };
            if first.starts_with("rc=") {
                assert_eq!(first, "rc=126", "{mode:?} {user:?}: {out}");
            } else {
                assert_eq!(first, expected, "{mode:?} {user:?}: {out}");
                assert_eq!(field(&out, "rc"), "0");
            }
        }
        // Even as root (no capabilities), a setuid binary grants none.
        let out = run(cordon(&fx, mode).args([
            "--rwx",
            s(&fx.cwd),
            "--",
            "sh",
            "-c",
            "./id >/dev/null; grep -E '^Cap(Prm|Eff)' /proc/self/status",
        ]));
        assert_eq!(out.code, Some(0), "{mode:?}: {out}");
        assert!(!out.stdout.contains('1'), "{mode:?}: {out}");
    }
}

// ---------------------------------------------------------------------------------------
// Signals, ptrace and /proc across the sandbox's edge.

#[test]
fn kill_0_of_a_process_outside_fails() {
    let fx = Fixture::new("hard-kill");
    let mut victim = Victim::start(&[]);
    for mode in MODES {
        let r = attack(&fx, mode, &[], &[("kill0", &victim.pid())]);
        // The view: a PID namespace where the pid does not exist. Without: Landlock's
        // signal scoping.
        let want = if is_view(mode) { "ESRCH" } else { "EPERM" };
        assert_eq!(r, [want], "{mode:?}");
    }
    assert!(victim.alive());
    // The other side: unconfined, the same probe finds it.
    assert_eq!(attack_unconfined(&[("kill0", &victim.pid())]), ["OK"]);
}

#[test]
fn the_command_cannot_kill_its_supervisor() {
    let fx = Fixture::new("hard-kill-parent");
    for mode in MODES {
        // Without the view the parent is cordon itself (outside the Landlock domain);
        // with it, the sandbox's init, which ignores signals from its own namespace.
        let out = run(cordon(&fx, mode).args([
            "--",
            "sh",
            "-c",
            "kill -KILL $PPID 2>/dev/null; echo kill=$?; sleep 0.3; echo survived",
        ]));
        assert_eq!(out.code, Some(0), "{mode:?}: {out}");
        assert!(out.stdout.contains("survived"), "{mode:?}: {out}");
        if !is_view(mode) {
            assert_eq!(field(&out, "kill"), "1", "{mode:?}: {out}");
        }
    }
}

#[test]
fn ptrace_and_proc_of_a_process_outside_fail() {
    let fx = Fixture::new("hard-ptrace");
    let secret = "CORDON_TEST_SECRET=in-the-victims-environment";
    let (k, v) = secret.split_once('=').unwrap();
    let mut victim = Victim::start(&[(k, v)]);
    let pid = victim.pid();
    let environ = format!("/proc/{pid}/environ");
    let mem = format!("/proc/{pid}/mem");
    let ops = [
        ("ptrace-seize", pid.as_str()),
        ("read", environ.as_str()),
        ("read", mem.as_str()),
        ("ptrace-own-child", "-"),
    ];
    for mode in MODES {
        for user in [&[][..], &["--user", "nobody"][..]] {
            let r = attack(&fx, mode, user, &ops);
            let want = if is_view(mode) {
                // Not in the sandbox's PID namespace: neither the pid nor its /proc dir.
                ["ESRCH", "ENOENT", "ENOENT", "OK"]
            } else {
                // Landlock denies ptrace (and the ptrace-mode /proc files) across its
                // domain's edge, whatever the uid.
                ["EPERM", "EACCES", "EACCES", "OK"]
            };
            assert_eq!(r, want, "{mode:?} {user:?}");
        }
    }
    assert!(victim.alive());
    // The other side: unconfined, root reads the secret.
    assert_eq!(
        attack_unconfined(&ops[..2]),
        ["OK", "OK"],
        "the victim must be attackable from outside"
    );
}

#[test]
fn the_sandbox_init_cannot_be_ptraced_or_written() {
    let fx = Fixture::new("hard-init");
    // With the view, pid 1 is cordon's init: running as root, but dumpable=0 and with no
    // capabilities, and the command has none either. The guard op refuses to go on if
    // pid 1 is anything else.
    let r = attack(
        &fx,
        VIEW,
        &[],
        &[
            ("pid1-is", common::bin()),
            ("ptrace-seize", "1"),
            ("read", "/proc/1/environ"),
            ("read", "/proc/1/mem"),
            ("write", "/proc/1/comm"),
            ("write", "/proc/1/oom_score_adj"),
        ],
    );
    assert_eq!(r[0], "OK");
    assert_eq!(r[1], "EPERM", "ptrace of init: {r:?}");
    for (i, res) in r.iter().enumerate().skip(2) {
        assert!(["EACCES", "EPERM"].contains(&res.as_str()), "op {i}: {r:?}");
    }
}

// ---------------------------------------------------------------------------------------
// Abstract unix sockets and terminal injection.

#[test]
fn an_abstract_socket_outside_is_unreachable_inside() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    let fx = Fixture::new("hard-abstract");
    let name = format!(
        "cordon-test-{}-{}",
        std::process::id(),
        fx.root().file_name().unwrap().to_string_lossy()
    );
    let listener =
        UnixListener::bind_addr(&SocketAddr::from_abstract_name(&name).unwrap()).unwrap();
    listener.set_nonblocking(true).unwrap();
    for mode in MODES {
        for user in [&[][..], &["--user", "nobody"][..]] {
            let r = attack(&fx, mode, user, &[("abstract-connect", &name)]);
            // The view has its own network namespace, hence its own abstract namespace:
            // nobody listens there. Without it, Landlock's abstract-socket scoping.
            let want = if is_view(mode) {
                "ECONNREFUSED"
            } else {
                "EPERM"
            };
            assert_eq!(r, [want], "{mode:?} {user:?}");
        }
    }
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the socket saw a connection from inside"
    );
    // The other side: from outside it is reachable.
    assert_eq!(attack_unconfined(&[("abstract-connect", &name)]), ["OK"]);
    assert!(listener.accept().is_ok());
}

/// Run `cordon ARGS` under `script -qec` so its stdin is a pty; the output lines.
fn under_pty(args: &[&str]) -> Out {
    let line = args
        .iter()
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ");
    run(Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env("PATH", common::PATH)
        .stdin(Stdio::null()))
}

#[test]
fn tiocsti_on_the_calling_terminal_is_refused() {
    let fx = Fixture::new("hard-tiocsti");
    let ops = [
        "tiocgwinsz",
        "-",
        "tiocsti",
        "0x5412",
        // The kernel compares only the low 32 bits of the request.
        "tiocsti",
        "0x100005412",
        "tiocsti",
        "0x541C", // TIOCLINUX
    ];
    let cmd_of = |mode: &[&str], user: &[&str]| -> Vec<String> {
        let mut args = vec![common::bin()];
        args.extend_from_slice(mode);
        args.push("-q");
        args.extend_from_slice(user);
        args.extend(["--", "python3", "-c", ATTACK]);
        args.extend(ops);
        args.into_iter().map(String::from).collect()
    };
    for mode in MODES {
        for user in [&[][..], &["--user", "nobody"][..]] {
            let args = cmd_of(mode, user);
            let mut cmd = Command::new("script");
            let line = args
                .iter()
                .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
                .collect::<Vec<_>>()
                .join(" ");
            cmd.args(["-qec", &line, "/dev/null"])
                .current_dir(&fx.cwd)
                .env("PATH", common::PATH)
                .env("HOME", &fx.host_home)
                .env("TMPDIR", &fx.tmpdir)
                .stdin(Stdio::null());
            let out = run(&mut cmd);
            let lines: Vec<&str> = out.stdout.lines().map(str::trim).collect();
            assert_eq!(
                lines,
                [
                    "tiocgwinsz OK",
                    "tiocsti EPERM",
                    "tiocsti EPERM",
                    "tiocsti EPERM"
                ],
                "{mode:?} {user:?}: {out}"
            );
        }
    }
    // The other side: this kernel still lets root push a keystroke into its own pty
    // (legacy TIOCSTI), so the refusal above is the filter's.
    if std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti").is_ok_and(|v| v.trim() == "1") {
        // (The pushed `x` is echoed back by the pty before the report.)
        let out = under_pty(&["python3", "-c", ATTACK, "tiocsti", "0x5412"]);
        assert!(out.stdout.trim().ends_with("tiocsti OK"), "{out}");
    }
}

// ---------------------------------------------------------------------------------------
// Timeout and parent death.

/// Pids of live processes whose command line is exactly `argv`.
fn processes_running(argv: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| {
                let state = st.rsplit_once(')').map_or("", |(_, r)| r.trim_start());
                !state.starts_with('Z') && !state.starts_with('X')
            })
        })
        .collect()
}

/// A `sleep` duration nobody else runs: its command line marks the process.
fn marker_duration(n: u32) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{}.{:09}", 40 + n, nanos.max(1))
}

#[test]
fn timeout_ends_a_command_that_ignores_term_with_124_within_the_grace() {
    let fx = Fixture::new("hard-timeout");
    for mode in MODES {
        let mark = marker_duration(0);
        let started = Instant::now();
        // The sleep's output goes elsewhere, so it cannot hold the test's pipe open.
        let out = run(cordon(&fx, mode).args([
            "--timeout",
            "1s",
            "--",
            "sh",
            "-c",
            &format!("trap '' TERM; sleep {mark} >/dev/null 2>&1; echo not-reached"),
        ]));
        let took = started.elapsed();
        assert_eq!(out.code, Some(124), "{mode:?}: {out}");
        assert!(!out.stdout.contains("not-reached"), "{mode:?}: {out}");
        // 1 s, then TERM (ignored), then KILL after the 3 s default grace; margin for a
        // loaded machine.
        assert!(took >= Duration::from_millis(900), "{mode:?}: {took:?}");
        assert!(took < Duration::from_secs(9), "{mode:?}: {took:?}");
        // With the view the PID namespace dies with init; without it cordon, as the
        // children's subreaper, kills what the command left. Nothing survives.
        assert!(
            wait_until(Duration::from_secs(5), || processes_running(&[
                "sleep", &mark
            ])
            .is_empty()),
            "{mode:?}: the sleep survived the timeout"
        );
    }
}

#[test]
fn sigkill_to_cordon_ends_the_command_and_in_the_view_its_whole_tree() {
    let fx = Fixture::new("hard-pdeath");
    for mode in MODES {
        let child_mark = marker_duration(1);
        let daemon_mark = marker_duration(2);
        let ready = fx.cwd.join("ready");
        let _ = std::fs::remove_file(&ready);
        // A command that double-forks a "daemon" into its own session, then execs its
        // marker: the daemon is what an escape attempt would leave behind.
        let script = format!(
            "setsid sh -c 'exec sleep {daemon_mark}' </dev/null >/dev/null 2>&1 & \
             touch {r}; exec sleep {child_mark}",
            r = s(&ready)
        );
        let mut child = cordon(&fx, mode)
            .args(["--", "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        assert!(wait_until(Duration::from_secs(20), || ready.exists()
            && !processes_running(&["sleep", &child_mark]).is_empty()
            && !processes_running(&["sleep", &daemon_mark]).is_empty()));
        child.kill().unwrap(); // SIGKILL: cordon can do nothing about it
        child.wait().unwrap();
        assert!(
            wait_until(Duration::from_secs(10), || processes_running(&[
                "sleep",
                &child_mark
            ])
            .is_empty()),
            "{mode:?}: the command outlived cordon"
        );
        let daemon_gone = wait_until(
            Duration::from_secs(if is_view(mode) { 10 } else { 1 }),
            || processes_running(&["sleep", &daemon_mark]).is_empty(),
        );
        if is_view(mode) {
            assert!(
                daemon_gone,
                "{mode:?}: a double-forked child outlived cordon"
            );
        } else {
            // Documented limit without the view (README): with cordon itself killed,
            // nothing is left to end what the command detached into its own session.
            for pid in processes_running(&["sleep", &daemon_mark]) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// rlimits, the private HOME, inherited descriptors.

#[test]
fn nofile_limit_is_set_and_cannot_be_raised() {
    let fx = Fixture::new("hard-rlimit");
    let policy = fx.policy(
        "limits.toml",
        "extends = [\"default\"]\n[process]\nlimits = { nofile = 64 }\n",
    );
    for mode in MODES {
        let out = run(cordon(&fx, mode).args([
            "-p",
            s(&policy),
            "--",
            "sh",
            "-c",
            "echo soft=$(ulimit -n); echo hard=$(ulimit -Hn); \
             (ulimit -n 65 2>/dev/null && echo raised=yes) || echo raised=no",
        ]));
        assert_eq!(out.code, Some(0), "{mode:?}: {out}");
        assert_eq!(field(&out, "soft"), "64", "{mode:?}: {out}");
        assert_eq!(field(&out, "hard"), "64", "{mode:?}: {out}");
        // Raising the hard limit needs CAP_SYS_RESOURCE, which root inside has not.
        assert_eq!(field(&out, "raised"), "no", "{mode:?}: {out}");
    }
}

#[test]
fn the_private_home_of_nobody_belongs_to_nobody() {
    let fx = Fixture::new("hard-home");
    for mode in MODES {
        let out = run(cordon(&fx, mode).args([
            "--user",
            "nobody",
            "--",
            "sh",
            "-c",
            "echo home=$(stat -c %u:%g:%a \"$HOME\"); echo tmp=$(stat -c %u:%g:%a \"$TMPDIR\"); \
             touch \"$HOME/f\" && echo home-writable",
        ]));
        assert_eq!(out.code, Some(0), "{mode:?}: {out}");
        assert_eq!(field(&out, "home"), "65534:65534:700", "{mode:?}: {out}");
        assert_eq!(field(&out, "tmp"), "65534:65534:700", "{mode:?}: {out}");
        assert!(out.stdout.contains("home-writable"), "{mode:?}: {out}");
    }
    assert_eq!(fx.scratch_leftovers(), Vec::<String>::new());
}

/// `cmd` with `fd` duplicated onto descriptor `at`, left open across exec (no CLOEXEC).
fn with_inherited_fd(cmd: &mut Command, fd: std::os::fd::RawFd, at: std::os::fd::RawFd) {
    use std::os::unix::process::CommandExt;
    // SAFETY: dup2 is async-signal-safe; the copy has no FD_CLOEXEC.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(fd, at) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[test]
fn a_directory_descriptor_left_open_by_the_caller_is_useless_inside() {
    use std::os::fd::AsRawFd;
    let fx = Fixture::new("hard-fd");
    fx.write(&fx.outside.join("secret"), "do not read");
    let dir = std::fs::File::open(&fx.outside).unwrap();
    let ops = [
        ("fds", "-"),
        ("read", "/proc/self/fd/9/secret"),
        ("openat", "9/secret"),
    ];
    // The other side: an unconfined program does get fd 9 and reads through it.
    let mut direct = Command::new("python3");
    direct
        .env("PATH", common::PATH)
        .stdin(Stdio::null())
        .args(["-c", ATTACK]);
    for (op, arg) in ops {
        direct.args([op, arg]);
    }
    with_inherited_fd(&mut direct, dir.as_raw_fd(), 9);
    let r = results(run(&mut direct), ops.len());
    assert!(r[0].split(',').any(|f| f == "9"), "{r:?}");
    assert_eq!(r[1..], ["OK", "OK"]);

    for mode in MODES {
        let mut cmd = cordon(&fx, mode);
        cmd.args(["--", "python3", "-c", ATTACK]);
        for (op, arg) in ops {
            cmd.args([op, arg]);
        }
        with_inherited_fd(&mut cmd, dir.as_raw_fd(), 9);
        let r = results(run(&mut cmd), ops.len());
        // 0, 1, 2, and 3: the directory listdir itself opened.
        assert_eq!(r[0], "OK:0,1,2,3", "{mode:?}");
        assert_eq!(r[1], "ENOENT", "{mode:?}");
        assert_eq!(r[2], "EBADF", "{mode:?}");
    }
}

#[test]
fn a_directory_handed_as_stdin_does_not_open_what_is_beneath() {
    // The caller's stdin is its choice and stays open, but a descriptor opened before the
    // sandbox is no key: each new open through it is checked like any other. (Listing
    // through the descriptor itself works: Landlock checks rights when a file is opened,
    // and the caller opened this one.)
    use std::os::fd::AsRawFd;
    let fx = Fixture::new("hard-stdin-dir");
    fx.write(&fx.outside.join("secret"), "do not read");
    let dir = std::fs::File::open(&fx.outside).unwrap();
    for mode in MODES {
        // Python cannot start with a directory on stdin: the shell moves it to fd 5.
        let mut cmd = cordon(&fx, mode);
        cmd.args([
            "--",
            "sh",
            "-c",
            r#"exec 5<&0 0</dev/null; exec python3 -c "$0" openat 5/secret read /proc/self/fd/5/secret"#,
            ATTACK,
        ]);
        with_inherited_fd(&mut cmd, dir.as_raw_fd(), 0);
        let r = results(run(&mut cmd), 2);
        assert_eq!(r, ["EACCES", "EACCES"], "{mode:?}");
    }
}

// ---------------------------------------------------------------------------------------
// The environment.

#[test]
fn keep_star_does_not_pass_tokens_or_loader_variables() {
    let fx = Fixture::new("hard-env");
    let policy = fx.policy(
        "keep-all.toml",
        "extends = [\"default\"]\n[env]\nkeep = [\"*\"]\n",
    );
    let secrets = [
        ("GITHUB_TOKEN", "ghp_cordon_test"),
        ("AWS_SECRET_ACCESS_KEY", "cordon-test"),
        ("DB_PASSWORD", "cordon-test"),
        ("DEPLOY_KEY", "cordon-test"),
        // Harmless values: libc is loaded anyway, and the directory does not exist.
        ("LD_PRELOAD", "libc.so.6"),
        ("LD_LIBRARY_PATH", "/nonexistent"),
        ("LD_AUDIT", ""),
    ];
    for mode in MODES {
        let mut cmd = cordon(&fx, mode);
        cmd.args(["-p", s(&policy), "--", "env"])
            .env("CORDON_TEST_ORDINARY", "passes");
        for (k, v) in secrets {
            cmd.env(k, v);
        }
        let out = run(&mut cmd);
        assert_eq!(out.code, Some(0), "{mode:?}: {out}");
        let env = common::parse_env(&out.stdout);
        assert!(
            env.contains(&("CORDON_TEST_ORDINARY".into(), "passes".into())),
            "{mode:?}: {out}"
        );
        for (k, _) in secrets {
            assert!(
                !env.iter().any(|(name, _)| name == k),
                "{k} reached the command ({mode:?}): {out}"
            );
        }
    }
    // The other side: naming one explicitly still passes it.
    let out = run(cordon(&fx, VIEW)
        .args(["-p", s(&policy), "--env", "GITHUB_TOKEN", "--", "env"])
        .env("GITHUB_TOKEN", "ghp_cordon_test"));
    assert!(out.stdout.contains("GITHUB_TOKEN=ghp_cordon_test"), "{out}");
}

// ---------------------------------------------------------------------------------------
// Namespaces, io_uring, MPTCP.

#[test]
fn no_new_user_namespace_by_any_route() {
    let fx = Fixture::new("hard-userns");
    let ops = [
        ("unshare-newuser", "-"),
        ("clone-newuser", "-"),
        // clone3's flags are behind a pointer the filter cannot read: ENOSYS, so libc
        // falls back to clone, where they are visible.
        ("clone3-newuser", "-"),
    ];
    for mode in MODES {
        for user in [&[][..], &["--user", "nobody"][..]] {
            let r = attack(&fx, mode, user, &ops);
            assert_eq!(r, ["EPERM", "EPERM", "ENOSYS"], "{mode:?} {user:?}");
            let out = run(cordon(&fx, mode)
                .args(user)
                .args(["--", "unshare", "-U", "true"]));
            assert_ne!(out.code, Some(0), "{mode:?} {user:?}: {out}");
            assert!(
                out.stderr.contains("Operation not permitted"),
                "{mode:?} {user:?}: {out}"
            );
        }
    }
    // The other side: unconfined, each route works here (one process each: after the
    // first, the process would already be in a new user namespace).
    for op in ops {
        assert_eq!(attack_unconfined(&[op]), ["OK"], "{op:?}");
    }
}

#[test]
fn io_uring_and_mptcp_are_refused() {
    let fx = Fixture::new("hard-uring");
    let mptcp4 = format!("{},{},262", libc::AF_INET, libc::SOCK_STREAM);
    let mptcp6 = format!("{},{},262", libc::AF_INET6, libc::SOCK_STREAM);
    let tcp4 = format!("{},{},0", libc::AF_INET, libc::SOCK_STREAM);
    let ops = [
        ("io_uring_setup", "-"),
        ("socket", mptcp4.as_str()),
        ("socket", mptcp6.as_str()),
        ("socket", tcp4.as_str()),
    ];
    // The other side first: which of these this kernel offers at all.
    let outside = attack_unconfined(&ops);
    for mode in MODES {
        let r = attack(&fx, mode, &[], &ops);
        assert_eq!(
            r[..3],
            ["EPERM", "EPERM", "EPERM"],
            "{mode:?} (outside: {outside:?})"
        );
        // Plain TCP: the view has its own network namespace; without it net `none`
        // refuses new inet sockets too.
        let tcp = if is_view(mode) { "OK" } else { "EPERM" };
        assert_eq!(r[3], tcp, "{mode:?}");
    }
    assert_eq!(outside[3], "OK");
}

// ---------------------------------------------------------------------------------------
// A setuid install of cordon itself.

#[test]
fn a_setuid_install_is_refused_for_every_subcommand() {
    let fx = Fixture::new("hard-setuid-cordon");
    let installed = fx.dir("bin").join("cordon");
    std::fs::copy(common::bin(), &installed).unwrap();
    // Root-only files: what a setuid cordon could be abused to read or overwrite.
    let secret = fx.root().join("root-only");
    fx.write(&secret, "cordon-test-secret-line = = =\n");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let victim = fx.root().join("victim-status");
    fx.write(&victim, "untouched\n");
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
    // nobody's scratch root goes in the fixture, so the test leaves nothing in /tmp.
    std::fs::set_permissions(&fx.tmpdir, std::fs::Permissions::from_mode(0o1777)).unwrap();

    let as_nobody = |args: &[&str]| -> Out {
        run(Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&installed)
            .args(args)
            .current_dir(&fx.cwd)
            .env("PATH", common::PATH)
            .env("HOME", &fx.host_home)
            .env("TMPDIR", &fx.tmpdir)
            .stdin(Stdio::null()))
    };
    for mode in [0o4755, 0o2755] {
        std::fs::set_permissions(&installed, std::fs::Permissions::from_mode(mode)).unwrap();
        let attempts: [&[&str]; 4] = [
            &["-q", "--", "true"],
            &["-q", "--status-file", s(&victim), "--", "true"],
            &["explain", "-p", s(&secret), "--", "true"],
            &["profiles", "show", s(&secret)],
        ];
        for args in attempts {
            let out = as_nobody(args);
            assert_eq!(out.code, Some(125), "{mode:o} {args:?}: {out}");
            assert!(
                out.stderr.starts_with("cordon: refusing to run set"),
                "{mode:o} {args:?}: {out}"
            );
            assert!(
                !out.stdout.contains("cordon-test-secret")
                    && !out.stderr.contains("cordon-test-secret"),
                "{mode:o} {args:?} leaked a root-only file: {out}"
            );
        }
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched\n");
    }
    // The other side: the same copy without the bits runs for nobody.
    std::fs::set_permissions(&installed, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = as_nobody(&["-q", "--", "id", "-u"]);
    assert_eq!((out.code, out.stdout.trim()), (Some(0), NOBODY), "{out}");
}
