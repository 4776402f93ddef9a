//! The policy: TOML files, profiles and command-line flags merged into one value.
//!
//! This module is pure data and validation. It reads policy files and the environment
//! snapshot it is given, and never touches the kernel; `plan` resolves the result
//! against the machine.

pub mod builtin;
pub mod error;
pub mod file;
mod load;

pub use error::PolicyError;
pub use load::{describe, load, profile_dirs, profile_text, Context, Overrides};

use serde::Serialize;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// How much a path rule grants, from least to most. `Deny` is a rule like the others:
/// the most specific rule for a path decides its access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    Deny,
    Ro,
    Rx,
    Rw,
    Rwx,
}

impl Access {
    /// The policy keyword for this level.
    pub fn name(self) -> &'static str {
        match self {
            Access::Deny => "deny",
            Access::Ro => "ro",
            Access::Rx => "rx",
            Access::Rw => "rw",
            Access::Rwx => "rwx",
        }
    }

    /// Whether reading is granted.
    pub fn read(self) -> bool {
        self != Access::Deny
    }

    /// Whether executing is granted.
    pub fn exec(self) -> bool {
        matches!(self, Access::Rx | Access::Rwx)
    }

    /// Whether writing, creating and removing are granted.
    pub fn write(self) -> bool {
        matches!(self, Access::Rw | Access::Rwx)
    }

    /// True when `self` grants everything `other` grants. A rule that does not cover
    /// its enclosing rule narrows it, which Landlock alone cannot express.
    pub fn covers(self, other: Access) -> bool {
        (self.read() || !other.read())
            && (self.exec() || !other.exec())
            && (self.write() || !other.write())
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a rule or setting came from, so every message can name it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Origin {
    /// A file path, `builtin:NAME`, or `command line`.
    pub source: String,
    pub line: Option<usize>,
}

impl Origin {
    /// The origin of everything given as a flag.
    pub fn command_line(flag: &str) -> Origin {
        Origin {
            source: format!("command line ({flag})"),
            line: None,
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{}", self.source, line),
            None => f.write_str(&self.source),
        }
    }
}

/// One `[fs]` entry after variable expansion: an absolute path, not yet canonical.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PathRule {
    pub path: PathBuf,
    /// Written with a trailing `?`: skip when missing instead of failing.
    pub optional: bool,
    pub access: Access,
    pub origin: Origin,
}

/// Where HOME or TMPDIR lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Location {
    /// A fresh directory in the run's scratch dir.
    Private,
    /// The host's own (HOME as the caller has it; TMPDIR unchanged).
    Host,
    /// A directory given by the policy, kept across runs (caches across CI steps).
    Path(PathBuf),
}

/// The network mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NetMode {
    None,
    Egress,
    Host,
}

impl NetMode {
    /// Parse the policy keyword.
    pub fn parse(text: &str) -> Option<NetMode> {
        match text {
            "none" => Some(NetMode::None),
            "egress" => Some(NetMode::Egress),
            "host" => Some(NetMode::Host),
            _ => None,
        }
    }

    /// The policy keyword.
    pub fn name(self) -> &'static str {
        match self {
            NetMode::None => "none",
            NetMode::Egress => "egress",
            NetMode::Host => "host",
        }
    }
}

/// What happens when the kernel cannot enforce a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EnforceMode {
    /// Refuse to run (exit 125), naming the rule and the missing feature.
    Strict,
    /// Run, and warn once for every degraded rule.
    BestEffort,
}

/// A value with the place it was written, for errors raised after loading.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Located<T> {
    pub value: T,
    pub origin: Origin,
}

/// A resource limit from `[process.limits]`, already converted to the kernel's unit
/// (bytes, seconds or a count).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Limit {
    pub key: String,
    pub value: u64,
}

/// The names `[process.limits]` accepts and how each value is written.
pub const LIMIT_KEYS: &[(&str, LimitUnit)] = &[
    ("nofile", LimitUnit::Count),
    ("nproc", LimitUnit::Count),
    ("fsize", LimitUnit::Size),
    ("as", LimitUnit::Size),
    ("core", LimitUnit::Size),
    ("cpu", LimitUnit::Duration),
    ("memlock", LimitUnit::Size),
    ("stack", LimitUnit::Size),
];

/// How a limit's value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitUnit {
    Count,
    Size,
    Duration,
}

/// The merged policy: every profile, file and flag applied in order. Pure data.
#[derive(Debug, Clone, Serialize)]
pub struct Policy {
    /// The files and profiles loaded, in merge order.
    pub sources: Vec<String>,
    /// Path rules; for the same path, the later rule has replaced the earlier one.
    pub rules: Vec<PathRule>,
    pub home: Location,
    pub tmp: Location,
    pub keep_scratch: bool,
    pub env_keep: Vec<String>,
    pub env_set: Vec<(String, String)>,
    pub env_deny: Vec<String>,
    pub net_mode: NetMode,
    pub net_allow: Vec<Located<String>>,
    pub net_hosts: Vec<Located<(String, String)>>,
    pub net_allow_local: bool,
    pub net_bind: Vec<u16>,
    pub net_connect: Vec<u16>,
    pub net_log: Option<PathBuf>,
    pub user: Option<String>,
    pub group: Option<String>,
    #[serde(
        rename = "timeout_ms",
        serialize_with = "crate::units::serialize_millis_opt"
    )]
    pub timeout: Option<Duration>,
    #[serde(
        rename = "kill_grace_ms",
        serialize_with = "crate::units::serialize_millis"
    )]
    pub kill_grace: Duration,
    pub max_output: Option<u64>,
    pub limits: Vec<Limit>,
    pub mode: EnforceMode,
    pub view: bool,
    pub allow_unix_sockets: bool,
}

/// The grace period between TERM and KILL when no policy sets `process.kill_grace`.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(3);
