//! The `cordon` binary: parse the command line and hand over to the pipeline.

use anyhow::Context as _;
use clap::Parser;
use cordon::cli::{Cli, Command, PolicyArgs, ProfilesAction, RunArgs};
use cordon::enforce::probe;
use cordon::explain::{self, ProbeReport};
use cordon::facts;
use cordon::plan::{self, Plan};
use cordon::policy::{self, builtin, Context};
use cordon::supervise::{self, NamespacesRefused, RunOptions, Status, Verbosity, EXIT_CORDON};
use std::mem::ManuallyDrop;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => {
            // --help and --version: clap prints them on stdout.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // A usage error: like every cordon error, it starts with `cordon:`.
            let text = e.render().to_string();
            eprint!("cordon: {}", text.strip_prefix("error: ").unwrap_or(&text));
            return ExitCode::from(EXIT_CORDON as u8);
        }
    };
    match dispatch(cli) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("cordon: {e:#}");
            ExitCode::from(EXIT_CORDON as u8)
        }
    }
}

fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    // Before anything reads a file: a setuid install would read policy files (and print
    // the offending line of a broken one) with the owner's rights, for `explain` and
    // `profiles show PATH` as much as for `run`.
    supervise::refuse_setuid()?;
    match cli.command {
        None => run(cli.run),
        Some(Command::Run(args)) => run(args),
        Some(Command::Explain(args)) => {
            let (plan, _) = make_plan(&args.policy, &args.command)?;
            if let Some(path) = &args.why {
                emit(&format!("{}\n", explain::why_text(&plan, path)));
            } else if args.json {
                emit(&format!("{}\n", serde_json::to_string_pretty(&plan)?));
            } else {
                emit(&explain::plan_text(&plan));
            }
            Ok(if args.check && !plan.degraded.is_empty() {
                1
            } else {
                0
            })
        }
        Some(Command::Probe(args)) => {
            let report = probe_report();
            if args.json {
                emit(&format!("{}\n", serde_json::to_string_pretty(&report)?));
            } else {
                emit(&explain::probe_text(&report));
            }
            Ok(0)
        }
        Some(Command::Profiles(args)) => {
            profiles(args.action.unwrap_or(ProfilesAction::List { names: false }))
        }
    }
}

fn context(facts: &plan::Facts) -> Context {
    Context {
        cwd: facts.cwd.clone(),
        home: facts.home.clone(),
        env: facts.env.clone(),
    }
}

fn make_plan(
    args: &PolicyArgs,
    command: &[std::ffi::OsString],
) -> anyhow::Result<(Plan, plan::Facts)> {
    let facts = facts::gather()?;
    let policy = policy::load(&args.overrides(), &context(&facts))?;
    let plan = plan::build(&policy, &facts, command)?;
    Ok((plan, facts))
}

fn run(args: RunArgs) -> anyhow::Result<i32> {
    let started = std::time::Instant::now();
    let result = run_sandboxed(&args);
    let status = match &result {
        Ok(outcome) => Status::from_outcome(outcome),
        Err(e) => Status::from_error(format!("{e:#}"), started.elapsed()),
    };
    write_status(&args, &status)?;
    result.map(|o| o.code)
}

/// Write the status JSON where the caller asked for it.
fn write_status(args: &RunArgs, status: &Status) -> anyhow::Result<()> {
    let mut json = serde_json::to_string(status)?;
    json.push('\n');
    if let Some(path) = &args.status_file {
        std::fs::write(path, &json)
            .with_context(|| format!("cannot write the status file {}", path.display()))?;
    }
    if let Some(fd) = args.status_fd {
        cordon::enforce::launch::write_to_fd(fd, json.as_bytes())
            .with_context(|| format!("cannot write the status to descriptor {fd}"))?;
    }
    Ok(())
}

fn run_sandboxed(args: &RunArgs) -> anyhow::Result<supervise::Outcome> {
    if args.command.is_empty() {
        anyhow::bail!("no command given; usage: cordon [OPTIONS] -- COMMAND [ARGS...]");
    }
    let verbosity = if args.quiet {
        Verbosity::Quiet
    } else if args.verbose > 0 {
        Verbosity::Verbose
    } else {
        Verbosity::Normal
    };
    let opts = RunOptions {
        verbosity,
        report: args.report,
    };
    let mut overrides = args.policy.overrides();
    overrides.keep_scratch = args.keep_scratch;
    overrides.max_output = args.max_output.clone();
    let facts = facts::gather()?;
    // The policy and the plan live until the process exits: freeing them (tens of
    // thousands of allocations for a large policy) would only delay the exit.
    let policy = ManuallyDrop::new(policy::load(&overrides, &context(&facts))?);
    let plan = ManuallyDrop::new(plan::build(&policy, &facts, &args.command)?);
    supervise::check_enforceable(&plan, verbosity)?;
    match supervise::run(&plan, &facts, &opts) {
        Ok(outcome) => Ok(outcome),
        Err(e) => match e.downcast::<NamespacesRefused>() {
            Ok(refused) => {
                // The kernel refused the namespaces (nested in another sandbox, or user
                // namespaces restricted): plan again without the view, honestly.
                let mut facts = facts;
                facts.namespaces = Err(if facts.outer.is_some() {
                    format!("{refused}: {}", facts::NESTED_NO_NAMESPACES)
                } else {
                    refused.to_string()
                });
                let plan = plan::build(&policy, &facts, &args.command)?;
                supervise::check_enforceable(&plan, verbosity).context("and without the view")?;
                supervise::run(&plan, &facts, &opts)
            }
            Err(e) => Err(e),
        },
    }
}

fn probe_report() -> ProbeReport {
    let is_root = nix::unistd::getuid().is_root();
    let abi = probe::landlock_abi();
    let user = probe::try_unshare(libc::CLONE_NEWUSER);
    let extra = if is_root { 0 } else { libc::CLONE_NEWUSER };
    let mount = probe::try_unshare(extra | libc::CLONE_NEWNS);
    let pid = probe::try_unshare(extra | libc::CLONE_NEWPID);
    let net = probe::try_unshare(extra | libc::CLONE_NEWNET);
    ProbeReport {
        landlock_abi: abi,
        landlock_features: explain::landlock_features(abi),
        view_possible: mount.is_ok() && pid.is_ok(),
        user_namespaces: user.into(),
        mount_namespaces: mount.into(),
        network_namespaces: net.into(),
        pid_namespaces: pid.into(),
        seccomp: probe::seccomp_available(),
        legacy_tiocsti: probe::legacy_tiocsti(),
        audit_log: match probe::audit_enabled() {
            Ok(true) => Ok(()),
            Ok(false) => Err("off: Landlock's denial records are not kept".to_string()),
            Err(e) => Err(e),
        }
        .into(),
        running_as_root: is_root,
    }
}

fn profiles(action: ProfilesAction) -> anyhow::Result<i32> {
    let facts = facts::gather()?;
    let ctx = context(&facts);
    match action {
        ProfilesAction::List { names } => {
            let mut found: Vec<(String, String, String)> = builtin::PROFILES
                .iter()
                .map(|(name, text)| {
                    (
                        name.to_string(),
                        policy::describe(text),
                        "built-in".to_string(),
                    )
                })
                .collect();
            for dir in policy::profile_dirs(&ctx) {
                let Ok(entries) = std::fs::read_dir(&dir) else {
                    continue;
                };
                let mut paths: Vec<_> = entries
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "toml"))
                    .collect();
                paths.sort();
                for p in paths {
                    let text = std::fs::read_to_string(&p).unwrap_or_default();
                    let name = p
                        .file_stem()
                        .map(|s| s.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    found.push((name, policy::describe(&text), p.display().to_string()));
                }
            }
            for (name, description, from) in found {
                if names {
                    emit(&format!("{name}\n"));
                } else {
                    emit(&format!("{name:<10} {description}  ({from})\n"));
                }
            }
            Ok(0)
        }
        ProfilesAction::Show { name, resolved } => {
            if resolved {
                let overrides = policy::Overrides {
                    profiles: vec![name],
                    ..Default::default()
                };
                let pol = policy::load(&overrides, &ctx)?;
                emit(&format!("{}\n", serde_json::to_string_pretty(&pol)?));
            } else {
                emit(&policy::profile_text(&name, &ctx)?);
            }
            Ok(0)
        }
    }
}

/// Print to stdout; a reader that went away (`cordon explain | head`) is not an error.
fn emit(text: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("cordon: cannot write to stdout: {e}");
        std::process::exit(EXIT_CORDON);
    }
}
