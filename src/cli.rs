//! The command line: clap definitions, and their translation into policy overrides.
//!
//! `run` may be omitted: `cordon [OPTIONS] -- COMMAND` is `cordon run [OPTIONS] -- COMMAND`.

use crate::policy::{Access, NetMode, Overrides};
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::path::PathBuf;

/// Run a command in a Landlock sandbox described by a TOML policy.
#[derive(Debug, Parser)]
#[command(
    name = "cordon",
    version,
    about = "Run a command in a Landlock sandbox described by a TOML policy",
    long_about = "cordon runs one command confined by a policy: which paths it may read, execute or \
write, which are denied even inside a granted tree, which hosts it may reach. It needs no root \
and no setuid bit, gives the command a private HOME and TMPDIR and an emptied environment, and \
refuses (or, with --best-effort, warns about) every rule the kernel cannot enforce.",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run COMMAND in the sandbox (the default when no subcommand is given)
    Run(RunArgs),
    /// Print the resolved plan for COMMAND and run nothing
    Explain(ExplainArgs),
    /// Report what this kernel and machine can enforce
    Probe(ProbeArgs),
    /// List the known profiles or show one
    Profiles(ProfilesArgs),
}

/// Options shared by `run` and `explain`: each adds to the policy.
#[derive(Debug, Args, Clone, Default)]
pub struct PolicyArgs {
    /// Load a profile or policy file (repeatable; default: the built-in `default`)
    #[arg(short = 'p', long = "profile", value_name = "NAME|PATH")]
    pub profile: Vec<String>,
    /// Grant read access to PATH (a trailing ? skips it when missing)
    #[arg(long, value_name = "PATH")]
    pub ro: Vec<String>,
    /// Grant read and execute access to PATH
    #[arg(long, value_name = "PATH")]
    pub rx: Vec<String>,
    /// Grant read and write access to PATH (create, remove, rename, truncate)
    #[arg(long, value_name = "PATH")]
    pub rw: Vec<String>,
    /// Grant read, write and execute access to PATH
    #[arg(long, value_name = "PATH")]
    pub rwx: Vec<String>,
    /// Deny all access beneath PATH, even inside a granted tree
    #[arg(long, value_name = "PATH")]
    pub deny: Vec<String>,
    /// Network mode: none (loopback only), egress (allowlisted hosts through a proxy), host
    #[arg(long, value_enum, value_name = "MODE")]
    pub net: Option<NetArg>,
    /// Allow egress to HOST[:PORT] (implies --net egress)
    #[arg(long = "allow-host", value_name = "HOST[:PORT]")]
    pub allow_host: Vec<String>,
    /// Pin NAME to IP for the egress proxy
    #[arg(long = "add-host", value_name = "NAME=IP")]
    pub add_host: Vec<String>,
    /// Pass host variable NAME through, or set NAME to VALUE
    #[arg(long, value_name = "NAME[=VALUE]")]
    pub env: Vec<String>,
    /// When started as root: the user the command runs as
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// When started as root: the group the command runs as
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,
    /// Kill the command after DURATION (e.g. 30s, 10m); exit status 124
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
    /// Run even where the kernel cannot enforce every rule, warning for each one
    #[arg(long = "best-effort")]
    pub best_effort: bool,
    /// Skip the mount-namespace view: Landlock only, the lowest launch cost
    #[arg(long = "no-view")]
    pub no_view: bool,
}

/// Options of `run`.
#[derive(Debug, Args, Clone, Default)]
pub struct RunArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Keep the private HOME/TMPDIR after exit and print where it is
    #[arg(long = "keep-scratch")]
    pub keep_scratch: bool,
    /// At exit, print what was refused
    #[arg(long)]
    pub report: bool,
    /// At exit, write one JSON object describing how the run ended to PATH
    #[arg(long = "status-file", value_name = "PATH")]
    pub status_file: Option<std::path::PathBuf>,
    /// At exit, write the status JSON object to descriptor N
    #[arg(long = "status-fd", value_name = "N")]
    pub status_fd: Option<i32>,
    /// Cap stdout and stderr together at BYTES (e.g. 1MiB); past it, cut with a marker and end the command
    #[arg(long = "max-output", value_name = "BYTES")]
    pub max_output: Option<String>,
    /// Print more about what cordon does, on stderr
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Print only errors
    #[arg(short, long, conflicts_with = "verbose")]
    pub quiet: bool,
    /// The command and its arguments
    // No `allow_hyphen_values`: with it a mistyped option (`--best-efort`) became the
    // command. A command that starts with `-` goes after `--`.
    #[arg(value_name = "COMMAND", trailing_var_arg = true)]
    pub command: Vec<OsString>,
}

/// Options of `explain`.
#[derive(Debug, Args, Clone)]
pub struct ExplainArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Print the plan as JSON (stable keys; variable values are never shown)
    #[arg(long)]
    pub json: bool,
    /// Say which rule decides access to PATH, the access it gets and the layer enforcing it
    #[arg(long, value_name = "PATH")]
    pub why: Option<PathBuf>,
    /// Exit 1 when any rule would be degraded (for CI gating)
    #[arg(long)]
    pub check: bool,
    /// The command and its arguments
    // No `allow_hyphen_values`: with it a mistyped option (`--best-efort`) became the
    // command. A command that starts with `-` goes after `--`.
    #[arg(value_name = "COMMAND", trailing_var_arg = true)]
    pub command: Vec<OsString>,
}

/// Options of `probe`.
#[derive(Debug, Args, Clone)]
pub struct ProbeArgs {
    /// Print the findings as JSON
    #[arg(long)]
    pub json: bool,
}

/// Options of `profiles`.
#[derive(Debug, Args, Clone)]
pub struct ProfilesArgs {
    #[command(subcommand)]
    pub action: Option<ProfilesAction>,
}

/// `profiles list` and `profiles show NAME`.
#[derive(Debug, Subcommand, Clone)]
pub enum ProfilesAction {
    /// List the built-in and installed profiles with a one-line description
    List {
        /// Print only the names, one per line (for shell completion)
        #[arg(long)]
        names: bool,
    },
    /// Print a profile's TOML as shipped
    Show {
        /// Profile name or path
        name: String,
        /// Print the merged policy after `extends` instead of the file as written
        #[arg(long)]
        resolved: bool,
    },
}

/// `--net` values.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum NetArg {
    None,
    Egress,
    Host,
}

impl PolicyArgs {
    /// The flags as policy overrides, applied after every profile.
    pub fn overrides(&self) -> Overrides {
        let mut paths = Vec::new();
        for (access, list) in [
            (Access::Ro, &self.ro),
            (Access::Rx, &self.rx),
            (Access::Rw, &self.rw),
            (Access::Rwx, &self.rwx),
            (Access::Deny, &self.deny),
        ] {
            paths.extend(list.iter().map(|p| (access, p.clone())));
        }
        Overrides {
            profiles: self.profile.clone(),
            paths,
            net: self.net.map(|n| match n {
                NetArg::None => NetMode::None,
                NetArg::Egress => NetMode::Egress,
                NetArg::Host => NetMode::Host,
            }),
            allow_hosts: self.allow_host.clone(),
            add_hosts: self.add_host.clone(),
            env: self.env.clone(),
            user: self.user.clone(),
            group: self.group.clone(),
            timeout: self.timeout.clone(),
            best_effort: self.best_effort,
            no_view: self.no_view,
            keep_scratch: false,
            max_output: None,
        }
    }
}

/// The clap command, for the man page and completion generators.
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}
