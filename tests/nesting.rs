//! Callers and nesting (issue #7), through the real binary: a cordon inside a cordon can
//! only narrow, three levels deep; an inner `explain` names what the outer sandbox does
//! not grant; the status JSON tells a calling program how a run ended; `--max-output`
//! bounds what a command prints; and 100 runs at once never share a scratch dir.
//!
//! The outer run is tried in the default mode (the view) and with
//! `--no-view --best-effort`; inner runs are always Landlock-only (a sandbox forbids new
//! namespaces), which they must say.

mod common;

use common::{run, s, Fixture, Out};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const VIEW: &[&str] = &[];
const NO_VIEW: &[&str] = &["--no-view", "--best-effort"];
const MODES: [&[&str]; 2] = [VIEW, NO_VIEW];

/// `cordon MODE -q` in the fixture.
fn cordon(fx: &Fixture, mode: &[&str]) -> Command {
    let mut cmd = fx.bare();
    cmd.args(mode).arg("-q");
    cmd
}

/// Copy the binary into the workspace (the inner run must be able to execute it) and
/// return the path it has inside.
fn install_inner(fx: &Fixture) -> PathBuf {
    let inner = fx.cwd.join("cordon");
    std::fs::copy(common::bin(), &inner).unwrap();
    std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(0o755)).unwrap();
    inner
}

fn field<'a>(out: &'a Out, name: &str) -> &'a str {
    out.stdout
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name}= in {out}"))
        .trim()
}

#[test]
fn an_inner_run_can_only_narrow_the_outer_one() {
    let fx = Fixture::new("nest-narrow");
    let inner = install_inner(&fx);
    let ws = s(&fx.cwd);
    for mode in MODES {
        for f in ["by-outer", "by-inner"] {
            let _ = std::fs::remove_file(fx.cwd.join(f));
        }
        let script = format!(
            r#"echo x > {ws}/by-outer && echo outer=ok
            {inner} -q --ro {ws} -- sh -c 'cat {ws}/by-outer >/dev/null && echo inner-read=ok; echo x > {ws}/by-inner' 2>/dev/null
            echo inner=$?"#,
            inner = s(&inner)
        );
        let out = run(cordon(&fx, mode).args(["--rwx", ws, "--", "sh", "-c", &script]));
        assert_eq!(out.code, Some(0), "{mode:?}: {out}");
        assert_eq!(field(&out, "outer"), "ok", "{mode:?}: {out}");
        assert_eq!(field(&out, "inner-read"), "ok", "{mode:?}: {out}");
        assert_ne!(field(&out, "inner"), "0", "{mode:?}: {out}");
        assert!(fx.cwd.join("by-outer").exists(), "{mode:?}");
        assert!(
            !fx.cwd.join("by-inner").exists(),
            "{mode:?}: the inner run wrote"
        );
    }
    assert_eq!(fx.scratch_leftovers(), Vec::<String>::new());
}

#[test]
fn an_inner_grant_the_outer_does_not_make_stays_closed_and_explain_says_so() {
    let fx = Fixture::new("nest-outer");
    let inner = install_inner(&fx);
    fx.write(&fx.outside.join("secret"), "cordon-test-secret\n");
    let ws = s(&fx.cwd);
    let outside = s(&fx.outside);
    for mode in MODES {
        let script = format!(
            r#"{inner} -q --ro {outside} -- cat {outside}/secret; echo read=$?
            {inner} explain --json --ro {outside} -- true > {ws}/explain.json; echo explain=$?"#,
            inner = s(&inner)
        );
        let out = run(cordon(&fx, mode).args(["--rwx", ws, "--", "sh", "-c", &script]));
        assert_eq!(out.code, Some(0), "{mode:?}: {out}");
        assert!(
            !out.stdout.contains("cordon-test-secret"),
            "{mode:?}: {out}"
        );
        assert_ne!(field(&out, "read"), "0", "{mode:?}: {out}");
        assert_eq!(field(&out, "explain"), "0", "{mode:?}: {out}");
        let plan: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(fx.cwd.join("explain.json")).unwrap())
                .unwrap();
        let rule = plan["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["path"] == outside)
            .unwrap_or_else(|| panic!("no rule for {outside}: {plan:#}"));
        // With the view outside, the path does not even exist inside; without it, it
        // exists and the outer plan says it is not granted.
        assert!(
            rule["outer"] == "deny"
                || rule["note"]
                    .as_str()
                    .is_some_and(|n| n.contains("not granted by the outer sandbox")),
            "{mode:?}: {rule:#}"
        );
        // The inner plan is honest: no view inside a sandbox.
        assert_eq!(plan["view"], false, "{mode:?}: {plan:#}");
    }
    // The other side: run directly, the same inner command reads the file.
    let out = run(fx.bare().args([
        "-q",
        "--ro",
        outside,
        "--",
        "cat",
        &format!("{outside}/secret"),
    ]));
    assert_eq!(out.stdout, "cordon-test-secret\n", "{out}");
}

#[test]
fn three_levels_of_nesting_work_and_each_narrows() {
    let fx = Fixture::new("nest-three");
    let inner = install_inner(&fx);
    let ws = s(&fx.cwd);
    let data = fx.cwd.join("data");
    std::fs::create_dir(&data).unwrap();
    let level3 = format!(
        "echo 3 > {ws}/level3; echo 3 > {d}/level3; echo depth3=$(cat {ws}/level1)",
        d = s(&data)
    );
    let level2 = format!(
        "echo 2 > {ws}/level2; {inner} -q --ro {ws} --rw {d} -- sh -c '{level3}' 2>/dev/null",
        inner = s(&inner),
        d = s(&data)
    );
    let level1 = format!(
        "echo 1 > {ws}/level1; {inner} -q --rwx {ws} -- sh -c \"{level2}\"",
        inner = s(&inner)
    );
    for mode in MODES {
        for f in ["level1", "level2", "level3", "data/level3"] {
            let _ = std::fs::remove_file(fx.cwd.join(f));
        }
        let out = run(cordon(&fx, mode).args(["--rwx", ws, "--", "sh", "-c", &level1]));
        assert_eq!(field(&out, "depth3"), "1", "{mode:?}: {out}");
        assert!(fx.cwd.join("level1").exists(), "{mode:?}: {out}");
        assert!(fx.cwd.join("level2").exists(), "{mode:?}: {out}");
        // The innermost run: the workspace read-only, its data dir writable.
        assert!(!fx.cwd.join("level3").exists(), "{mode:?}: {out}");
        assert!(data.join("level3").exists(), "{mode:?}: {out}");
    }
}

// ---------------------------------------------------------------------------------------
// The status JSON.

fn status_of(fx: &Fixture, flags: &[&str], command: &[&str]) -> (Out, serde_json::Value) {
    let path = fx.root().join("status.json");
    let _ = std::fs::remove_file(&path);
    let out = run(cordon(fx, VIEW)
        .args(["--status-file", s(&path)])
        .args(flags)
        .arg("--")
        .args(command));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("no status: {e}: {out}"));
    assert!(text.ends_with('\n') && text.lines().count() == 1, "{text}");
    (out, serde_json::from_str(&text).unwrap())
}

#[test]
fn status_file_tells_how_the_run_ended() {
    let fx = Fixture::new("nest-status");
    let (out, st) = status_of(&fx, &[], &["true"]);
    assert_eq!(out.code, Some(0));
    assert_eq!(st["result"], "exited", "{st}");
    assert_eq!(st["exit_code"], 0, "{st}");
    assert_eq!(st["cordon_exit"], 0, "{st}");
    assert!(
        st["cordon_error"].is_null() && st["signal"].is_null(),
        "{st}"
    );
    assert_eq!(st["timed_out"], false, "{st}");
    assert_eq!(st["output_truncated"], false, "{st}");
    assert!(
        st["duration_ms"].is_u64() && st["peak_memory_kib"].is_u64(),
        "{st}"
    );

    // A command that exits 125 is not cordon failing.
    let (out, st) = status_of(&fx, &[], &["sh", "-c", "exit 125"]);
    assert_eq!(out.code, Some(125));
    assert_eq!(st["result"], "exited", "{st}");
    assert_eq!(st["exit_code"], 125, "{st}");
    assert!(st["cordon_error"].is_null(), "{st}");

    let (out, st) = status_of(&fx, &[], &["sh", "-c", "kill -KILL $$"]);
    assert_eq!(out.code, Some(137));
    assert_eq!(st["result"], "signaled", "{st}");
    assert_eq!(st["signal"], 9, "{st}");
    assert!(
        st["exit_code"].is_null() && st["cordon_error"].is_null(),
        "{st}"
    );
    assert_eq!(st["cordon_exit"], 137, "{st}");

    let (out, st) = status_of(&fx, &["--timeout", "1s"], &["sleep", "30"]);
    assert_eq!(out.code, Some(124));
    assert_eq!(st["result"], "timeout", "{st}");
    assert_eq!(st["timed_out"], true, "{st}");
    assert!(st["exit_code"].is_null(), "{st}");
    assert_eq!(st["cordon_exit"], 124, "{st}");

    let missing = fx.root().join("missing");
    let (out, st) = status_of(&fx, &["--ro", s(&missing)], &["true"]);
    assert_eq!(out.code, Some(125));
    assert_eq!(st["result"], "cordon-error", "{st}");
    assert!(st["exit_code"].is_null(), "{st}");
    assert_eq!(st["cordon_exit"], 125, "{st}");
    let why = st["cordon_error"]
        .as_str()
        .unwrap_or_else(|| panic!("{st}"));
    assert!(why.contains(s(&missing)), "{st}");
    assert!(out.stderr.starts_with("cordon: "), "{out}");

    // A bad policy file, too.
    let bad = fx.policy("bad.toml", "[fs]\nrox = []\n");
    let (out, st) = status_of(&fx, &["-p", s(&bad)], &["true"]);
    assert_eq!(out.code, Some(125));
    assert_eq!(st["result"], "cordon-error", "{st}");
    assert!(
        st["cordon_error"]
            .as_str()
            .is_some_and(|e| e.contains("rox")),
        "{st}"
    );
}

#[test]
fn max_output_bounds_what_a_command_prints() {
    let fx = Fixture::new("nest-maxout");
    let started = Instant::now();
    let (out, st) = status_of(
        &fx,
        &["--max-output", "1000"],
        &[
            "sh",
            "-c",
            "head -c 10000000 /dev/zero | tr '\\0' a; echo after >&2",
        ],
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    let marker = "cordon: output cut at 1000 bytes (--max-output); ending the command";
    assert!(out.stderr.contains(marker), "{out}");
    let printed = out.stdout.len() + out.stderr.replace(marker, "").trim().len();
    assert!(printed <= 1000, "{printed} bytes got through");
    assert!(
        out.stdout.len() >= 500,
        "the start of the output must pass: {out}"
    );
    assert!(out.stdout.bytes().all(|b| b == b'a'), "{out}");
    assert!(
        !out.stderr.contains("after"),
        "the command was ended: {out}"
    );
    assert_eq!(st["output_truncated"], true, "{st}");

    // The other side: output under the bound passes whole, untruncated.
    let (out, st) = status_of(
        &fx,
        &["--max-output", "1000"],
        &["sh", "-c", "printf %0900d 0"],
    );
    assert_eq!(out.code, Some(0), "{out}");
    assert_eq!(out.stdout.len(), 900);
    assert_eq!(st["output_truncated"], false, "{st}");
}

// ---------------------------------------------------------------------------------------
// Many callers at once.

#[test]
fn a_hundred_concurrent_runs_never_share_a_scratch_dir() {
    const N: usize = 100;
    let fx = Fixture::new("nest-hundred");
    // Each run writes a token of its own to its HOME and TMPDIR, waits a little so the
    // runs overlap, then lists both: it must see its token and nothing else.
    let script = r#"
        echo "$1" > "$HOME/token-$1" && echo "$1" > "$TMPDIR/token-$1" || exit 3
        sleep 0.5
        echo "home=$(ls -A "$HOME" | tr '\n' ' ')"
        echo "tmp=$(ls -A "$TMPDIR" | tr '\n' ' ')"
        echo "read=$(cat "$HOME"/token-*)"
        "#;
    let started = Instant::now();
    let children: Vec<_> = (0..N)
        .map(|i| {
            cordon(&fx, VIEW)
                .args(["--", "sh", "-c", script, "sh", &format!("t{i}")])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<Out> = children
        .into_iter()
        .map(|c| common::finish(c, started))
        .collect();
    let workspace_mountpoint = fx.root().file_name().unwrap().to_str().unwrap();
    for (i, out) in outs.iter().enumerate() {
        assert_eq!(out.code, Some(0), "run {i}: {out}");
        let mine = format!("token-t{i}");
        assert_eq!(field(out, "home"), mine, "run {i}: {out}");
        // With the view the private tmp is also /tmp, so it holds the mountpoint of
        // the fixture's workspace (which lives under /tmp); nothing else.
        let tmp: Vec<&str> = field(out, "tmp")
            .split_whitespace()
            .filter(|e| *e != workspace_mountpoint)
            .collect();
        assert_eq!(tmp, [mine.as_str()], "run {i}: {out}");
        assert_eq!(field(out, "read"), format!("t{i}"), "run {i}: {out}");
    }
    assert_eq!(fx.scratch_leftovers(), Vec::<String>::new(), "left behind");
    // cordon's own TMPDIR holds nothing but the (empty) scratch root.
    let entries: Vec<_> = std::fs::read_dir(&fx.tmpdir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        entries.is_empty() || entries == [fx.scratch_root().file_name().unwrap()],
        "{entries:?}"
    );
}

/// Nesting is bounded by Landlock's 16 stacked layers: 15 cordons inside each other run
/// the innermost command, and the one past the limit is refused with a message that
/// says so (not an obscure errno).
#[test]
fn nesting_depth_is_bounded_and_the_limit_is_named() {
    let fx = Fixture::new("nest-depth");
    install_inner(&fx);
    let script = fx.cwd.join("nest.sh");
    fx.write(
        &script,
        &format!(
            "n=$1\nif [ \"$n\" -le 0 ]; then echo reached; exit 0; fi\n\
             exec ./cordon --no-view -q --rwx {ws} -- sh ./nest.sh $((n-1))\n",
            ws = s(&fx.cwd)
        ),
    );
    let deep = |levels: u32| {
        run(Command::new("sh")
            .arg(s(&script))
            .arg(levels.to_string())
            .current_dir(&fx.cwd)
            .env("TMPDIR", fx.root().join("tmp"))
            .stdin(Stdio::null()))
    };
    std::fs::create_dir_all(fx.root().join("tmp")).unwrap();
    let out = deep(15);
    assert_eq!(out.code, Some(0), "{out}");
    assert_eq!(out.stdout.trim(), "reached", "{out}");
    let out = deep(17);
    assert_eq!(out.code, Some(125), "{out}");
    assert!(!out.stdout.contains("reached"), "{out}");
    assert!(
        out.stderr
            .contains("too deeply nested: Landlock stacks at most 16 sandboxes"),
        "{out}"
    );
}
