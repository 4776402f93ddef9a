//! The built-in profiles, through the real binary on the real kernel: each is listed,
//! shown and resolvable, and each rule it adds is checked from both sides — what it
//! allows works, what it withholds fails with the expected error.
//!
//! Workspaces are fresh directories in the system temp dir, as a user's would be:
//! beneath the host's `/tmp`, which the view replaces with the run's private one.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Every built-in profile, in the order `cordon profiles list` shows them.
const BUILTIN: &[&str] = &[
    "system", "default", "readonly", "ci", "agent", "rust", "python", "node", "go",
];

fn cordon() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cordon"))
}

/// A fresh, empty directory for one test, removed when dropped.
struct Workspace(PathBuf);

impl std::ops::Deref for Workspace {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Workspace {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn workspace(tag: &str) -> Workspace {
    let dir =
        std::env::temp_dir().join(format!("cordon-profiles-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Workspace(dir)
}

/// Run `cordon -p PROFILE [extra] -- ARGS` in `dir`.
fn run(profile: &str, dir: &Path, extra: &[&str], args: &[&str]) -> Output {
    cordon()
        .arg("-p")
        .arg(profile)
        .args(extra)
        .arg("--")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn show(out: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    )
}

/// Whether `program` is on this process's PATH: the toolchain tests run only where the
/// toolchain is installed.
fn installed(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// `cordon explain --json` for a profile in `dir`.
fn explain(profile: &str, dir: &Path, extra: &[&str]) -> serde_json::Value {
    let out = cordon()
        .args(["explain", "--json", "-p", profile])
        .args(extra)
        .args(["--", "true"])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A write refused by the view (read-only bind) or by Landlock.
fn refused_write(stderr: &str) -> bool {
    stderr.contains("Read-only file system") || stderr.contains("Permission denied")
}

#[test]
fn every_profile_file_is_embedded_and_every_builtin_is_listed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".toml").map(str::to_string)
        })
        .collect();
    files.sort();
    let mut embedded: Vec<String> = cordon::policy::builtin::names()
        .map(str::to_string)
        .collect();
    assert_eq!(
        embedded,
        BUILTIN.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    );
    embedded.sort();
    assert_eq!(files, embedded, "profiles/*.toml and builtin.rs disagree");

    let out = cordon().args(["profiles", "list"]).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let listed = text(&out.stdout);
    for name in BUILTIN {
        let line = listed
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("`{name}` not listed:\n{listed}"));
        assert!(line.ends_with("(built-in)"), "{line}");
        assert!(!line.contains("(no description)"), "{line}");
    }
}

#[test]
fn every_builtin_shows_as_commented_toml_and_resolves() {
    let ws = workspace("show");
    for name in BUILTIN {
        let out = cordon()
            .args(["profiles", "show", name])
            .current_dir(&ws)
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: {}", show(&out));
        let shown = text(&out.stdout);
        assert!(
            shown.starts_with(&format!("# {name}: ")),
            "{name}: the header comment must open with `# {name}: `"
        );
        assert!(
            shown.contains("\n# For: "),
            "{name}: header says who it is for"
        );
        assert!(
            shown.contains("\n# Allows: "),
            "{name}: header says what it allows"
        );
        let table: toml::Table =
            toml::from_str(&shown).unwrap_or_else(|e| panic!("{name} does not parse as TOML: {e}"));
        let description = table["description"].as_str().unwrap();
        assert!(!description.is_empty() && !description.contains('\n'));

        let out = cordon()
            .args(["profiles", "show", name, "--resolved"])
            .current_dir(&ws)
            .output()
            .unwrap();
        assert!(out.status.success(), "{name} --resolved: {}", show(&out));
        let resolved: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let sources = resolved["sources"].as_array().unwrap();
        assert_eq!(sources.first().unwrap(), "builtin:system", "{name}");
        assert_eq!(
            sources.last().unwrap().as_str().unwrap(),
            format!("builtin:{name}")
        );

        // Every built-in profile is fully enforceable here (view, Landlock ABI >= 6).
        let out = cordon()
            .args(["explain", "--check", "-p", name, "--", "true"])
            .current_dir(&ws)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name} explain --check: {}",
            show(&out)
        );
    }
}

#[test]
fn unknown_profile_exits_125_listing_the_known_ones() {
    let ws = workspace("unknown");
    for args in [
        &["-p", "no-such-profile", "--", "true"][..],
        &["profiles", "show", "no-such-profile"][..],
    ] {
        let out = cordon().args(args).current_dir(&ws).output().unwrap();
        assert_eq!(out.status.code(), Some(125), "{args:?}: {}", show(&out));
        let err = text(&out.stderr);
        assert!(err.starts_with("cordon:"), "{err}");
        assert!(err.contains("unknown profile `no-such-profile`"), "{err}");
        for name in BUILTIN {
            assert!(err.contains(name), "`{name}` missing from: {err}");
        }
    }
}

#[test]
fn readonly_lists_the_workspace_but_cannot_write_it() {
    let ws = workspace("readonly");
    std::fs::write(ws.join("file.txt"), "readable-content\n").unwrap();

    let out = run("readonly", &ws, &[], &["ls", "-a"]);
    assert!(out.status.success(), "{}", show(&out));
    assert!(text(&out.stdout).contains("file.txt"), "{}", show(&out));
    let out = run("readonly", &ws, &[], &["cat", "file.txt"]);
    assert_eq!(text(&out.stdout), "readable-content\n", "{}", show(&out));

    for script in [
        "echo x > new.txt",
        "echo x >> file.txt",
        "mkdir sub",
        "rm file.txt",
    ] {
        let out = run("readonly", &ws, &[], &["sh", "-c", script]);
        assert!(
            !out.status.success(),
            "`{script}` succeeded: {}",
            show(&out)
        );
        assert!(
            refused_write(&text(&out.stderr)),
            "`{script}`: want EROFS or EACCES: {}",
            show(&out)
        );
    }
    assert!(!ws.join("new.txt").exists() && !ws.join("sub").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join("file.txt")).unwrap(),
        "readable-content\n"
    );

    // The private HOME and TMPDIR are the writable places; there is no network.
    let out = run(
        "readonly",
        &ws,
        &[],
        &["sh", "-c", "echo a > \"$HOME/a\" && echo b > \"$TMPDIR/b\""],
    );
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(explain("readonly", &ws, &[])["net"]["mode"], "none");
}

#[test]
fn ci_runs_git_keeps_ci_variables_and_drops_their_secrets() {
    if !installed("git") {
        eprintln!("skipped: git not installed");
        return;
    }
    let ws = workspace("ci");
    let secrets = [
        ("GITHUB_TOKEN", "secret-github-token"),
        ("CI_JOB_TOKEN", "secret-ci-job-token"),
        ("ACTIONS_RUNTIME_TOKEN", "secret-actions-runtime"),
        ("ACTIONS_ID_TOKEN_REQUEST_TOKEN", "secret-oidc-request"),
        ("CI_JOB_JWT_V2", "secret-gitlab-jwt"),
        (
            "CI_REPOSITORY_URL",
            "https://gitlab-ci-token:secret-in-url@git.example.com/g/p.git",
        ),
        ("CI_REGISTRY_PASSWORD", "secret-registry-password"),
        ("BUILDKITE_AGENT_ACCESS_TOKEN", "secret-buildkite"),
        ("SYSTEM_ACCESSTOKEN", "secret-azure"),
        ("NPM_TOKEN", "secret-npm"),
    ];
    let kept = [
        ("CI", "true"),
        ("GITHUB_SHA", "0123abcd"),
        ("GITHUB_REF_NAME", "main"),
        ("RUNNER_OS", "Linux"),
        ("CI_COMMIT_SHA", "4567ef"),
        ("GITLAB_CI", "true"),
        ("BUILDKITE_BRANCH", "main"),
    ];
    let out = cordon()
        .args(["-p", "ci", "--", "sh", "-c", "git --version && env"])
        .envs(secrets.iter().chain(kept.iter()).copied())
        .env("CORDON_TEST_UNRELATED", "not-a-ci-variable")
        .current_dir(&ws)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("git version "), "{}", show(&out));
    for (name, value) in kept {
        assert!(
            stdout.lines().any(|l| l == format!("{name}={value}")),
            "{name} not kept: {stdout}"
        );
    }
    for (name, value) in secrets {
        assert!(
            !stdout.contains(name) && !stdout.contains(value),
            "{name} leaked: {stdout}"
        );
    }
    assert!(!stdout.contains("CORDON_TEST_UNRELATED"), "{stdout}");

    // A secret passed on purpose still passes.
    let out = cordon()
        .args(["-p", "ci", "--env", "GITHUB_TOKEN", "--", "sh", "-c", "env"])
        .envs(secrets)
        .current_dir(&ws)
        .output()
        .unwrap();
    assert!(text(&out.stdout).contains("GITHUB_TOKEN=secret-github-token"));

    // The workspace is writable and executable; the network is the host's until one
    // --allow-host narrows it to egress.
    let out = run(
        "ci",
        &ws,
        &[],
        &[
            "sh",
            "-c",
            "printf '#!/bin/sh\\necho built\\n' > step.sh && chmod +x step.sh && ./step.sh",
        ],
    );
    assert_eq!(text(&out.stdout), "built\n", "{}", show(&out));
    assert_eq!(explain("ci", &ws, &[])["net"]["mode"], "host");
    let narrowed = explain("ci", &ws, &["--allow-host", "artifacts.example.com"]);
    assert_eq!(narrowed["net"]["mode"], "egress");
    assert_eq!(narrowed["net"]["namespace"], true);
}

/// A workspace with the files the agent profile protects.
fn agent_workspace(tag: &str) -> Workspace {
    let ws = workspace(tag);
    std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
    std::fs::create_dir_all(ws.join(".github/workflows")).unwrap();
    std::fs::write(ws.join(".github/workflows/ci.yml"), "on: push\n").unwrap();
    std::fs::write(ws.join(".envrc"), "export A=1\n").unwrap();
    std::fs::write(ws.join(".env"), "API_KEY=agent-env-marker-5f3a\n").unwrap();
    std::fs::write(ws.join("main.txt"), "hello\n").unwrap();
    ws
}

#[test]
fn agent_writes_the_workspace_but_not_hooks_and_cannot_read_dotenv() {
    let ws = agent_workspace("agent");

    // One side: ordinary files can be created and changed.
    let out = run(
        "agent",
        &ws,
        &[],
        &["sh", "-c", "echo new > new.txt && echo more >> main.txt"],
    );
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        std::fs::read_to_string(ws.join("new.txt")).unwrap(),
        "new\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("main.txt")).unwrap(),
        "hello\nmore\n"
    );

    // The other: the files that run code later are read-only.
    for script in [
        "echo evil > .git/hooks/pre-commit",
        "echo '[core] hooksPath = x' >> .git/config",
        "echo evil >> .envrc",
        "echo evil > .github/workflows/ci.yml",
        "rm .github/workflows/ci.yml",
    ] {
        let out = run("agent", &ws, &[], &["sh", "-c", script]);
        assert!(
            !out.status.success(),
            "`{script}` succeeded: {}",
            show(&out)
        );
        assert!(
            refused_write(&text(&out.stderr)),
            "`{script}`: want EROFS or EACCES: {}",
            show(&out)
        );
    }
    assert!(!ws.join(".git/hooks/pre-commit").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join(".github/workflows/ci.yml")).unwrap(),
        "on: push\n"
    );
    // Reading them is fine.
    let out = run("agent", &ws, &[], &["cat", ".git/config"]);
    assert_eq!(text(&out.stdout), "[core]\n", "{}", show(&out));

    // .env is hidden: whatever reading it gives, never its content.
    let out = run(
        "agent",
        &ws,
        &[],
        &["sh", "-c", "cat .env; grep -r marker ."],
    );
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(!all.contains("agent-env-marker-5f3a"), "{}", show(&out));
    assert!(std::fs::read_to_string(ws.join(".env"))
        .unwrap()
        .contains("agent-env-marker-5f3a"));
}

#[test]
fn agent_has_a_minimal_environment_and_no_network() {
    let ws = agent_workspace("agent-env");
    let out = cordon()
        .args(["-p", "agent", "--", "env"])
        .env("LANG", "C.UTF-8")
        .env("LC_TIME", "C")
        .env("TERM", "xterm")
        .env("TZ", "UTC")
        .env("COLORTERM", "truecolor")
        .env("EDITOR", "vi")
        .env("SSH_AUTH_SOCK", "/run/agent.sock")
        .current_dir(&ws)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let names: Vec<String> = text(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k.to_string()))
        .collect();
    for kept in ["PATH", "LANG", "LC_TIME", "TERM"] {
        assert!(names.iter().any(|n| n == kept), "{kept} missing: {names:?}");
    }
    for dropped in ["TZ", "COLORTERM", "EDITOR", "SSH_AUTH_SOCK"] {
        assert!(!names.iter().any(|n| n == dropped), "{dropped} passed");
    }
    let plan = explain("agent", &ws, &[]);
    assert_eq!(plan["net"]["mode"], "none");
    assert_eq!(plan["net"]["namespace"], true);
}

#[test]
fn agent_rules_are_enforced_by_the_view_and_refused_without_it() {
    let ws = agent_workspace("agent-explain");
    let out = cordon()
        .args(["explain", "--check", "-p", "agent", "--", "true"])
        .current_dir(&ws)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let plan = explain("agent", &ws, &[]);
    assert_eq!(plan["view"], true);
    assert_eq!(plan["degraded"].as_array().unwrap().len(), 0, "{plan}");
    let hooks = ws.join(".git/hooks");
    let rule = plan["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["path"] == hooks.display().to_string())
        .unwrap();
    assert_eq!(rule["layer"], "view");

    // Landlock alone cannot narrow the writable workspace: strict mode refuses.
    let out = run("agent", &ws, &["--no-view"], &["true"]);
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert!(text(&out.stderr).contains(".git/hooks"), "{}", show(&out));
}

#[test]
fn agent_cannot_plant_a_hook_by_moving_git_aside() {
    // The view pins every directory between the writable workspace and a narrower rule
    // (bound onto itself), and a mountpoint cannot be renamed.
    let ws = agent_workspace("agent-rename");
    let out = run(
        "agent",
        &ws,
        &[],
        &[
            "sh",
            "-c",
            "mv .git .git-old && mkdir -p .git/hooks && echo evil > .git/hooks/pre-commit",
        ],
    );
    assert!(!out.status.success(), "{}", show(&out));
    assert!(text(&out.stderr).contains("busy"), "{}", show(&out));
    assert!(
        !ws.join(".git/hooks/pre-commit").exists(),
        "a hook was planted on the host"
    );
    assert!(ws.join(".git/hooks").is_dir() && !ws.join(".git-old").exists());
    // The workspace itself stays writable.
    let out = run("agent", &ws, &[], &["sh", "-c", "echo ok > new-file"]);
    assert!(out.status.success(), "{}", show(&out));
    assert!(ws.join("new-file").exists());
}

/// Run a toolchain's version command under its profile, or say why not.
fn toolchain(profile: &str, program: &str, args: &[&str]) -> Option<(Workspace, Output)> {
    if !installed(program) {
        eprintln!("skipped: {program} not installed");
        return None;
    }
    let ws = workspace(profile);
    let mut argv = vec![program];
    argv.extend_from_slice(args);
    let out = run(profile, &ws, &[], &argv);
    assert!(out.status.success(), "{profile}: {}", show(&out));
    Some((ws, out))
}

fn home() -> PathBuf {
    PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
}

#[test]
fn rust_runs_cargo_with_the_cache_read_only() {
    let Some((ws, out)) = toolchain("rust", "cargo", &["--version"]) else {
        return;
    };
    assert!(text(&out.stdout).starts_with("cargo "), "{}", show(&out));
    let out = run("rust", &ws, &[], &["sh", "-c", "echo \"$CARGO_HOME\""]);
    assert_eq!(
        text(&out.stdout).trim(),
        home().join(".cargo").display().to_string()
    );
    if home().join(".cargo/registry").is_dir() {
        let out = run(
            "rust",
            &ws,
            &[],
            &[
                "sh",
                "-c",
                "ls \"$CARGO_HOME/registry\" && touch \"$CARGO_HOME/registry/planted\"",
            ],
        );
        assert!(!out.status.success(), "{}", show(&out));
        assert!(refused_write(&text(&out.stderr)), "{}", show(&out));
        assert!(!home().join(".cargo/registry/planted").exists());
    } else {
        eprintln!("skipped the cache check: no ~/.cargo/registry");
    }
}

#[test]
fn python_runs_python3() {
    let Some((ws, out)) = toolchain("python", "python3", &["-c", "print(1)"]) else {
        return;
    };
    assert_eq!(text(&out.stdout), "1\n", "{}", show(&out));
    let out = run(
        "python",
        &ws,
        &[],
        &[
            "python3",
            "-c",
            "import os, sys; print(os.environ['PYTHONDONTWRITEBYTECODE'], sys.dont_write_bytecode)",
        ],
    );
    assert_eq!(text(&out.stdout), "1 True\n", "{}", show(&out));
}

#[test]
fn node_runs_node() {
    let Some((ws, _)) = toolchain("node", "node", &["-e", "1"]) else {
        return;
    };
    let out = run("node", &ws, &[], &["node", "-e", "console.log(40 + 2)"]);
    assert_eq!(text(&out.stdout), "42\n", "{}", show(&out));
}

#[test]
fn go_runs_go() {
    let Some((ws, out)) = toolchain("go", "go", &["version"]) else {
        return;
    };
    assert!(
        text(&out.stdout).starts_with("go version "),
        "{}",
        show(&out)
    );
    let out = run("go", &ws, &[], &["go", "env", "GOPROXY", "GOTOOLCHAIN"]);
    assert_eq!(text(&out.stdout), "off\nlocal\n", "{}", show(&out));
}

#[test]
fn toolchain_profiles_have_no_network_until_a_host_is_named() {
    let ws = workspace("toolchain-net");
    for name in ["rust", "python", "node", "go"] {
        let plan = explain(name, &ws, &[]);
        assert_eq!(plan["net"]["mode"], "none", "{name}");
        let plan = explain(name, &ws, &["--allow-host", "registry.example.com"]);
        assert_eq!(plan["net"]["mode"], "egress", "{name}");
    }
}
