//! The policy file as written: serde structures that mirror the TOML exactly.
//!
//! Every table refuses unknown keys, so a typo can never silently drop a rule.
//! Values keep their byte spans so later errors (a missing path, a bad size)
//! can point at the line that caused them.

use serde::Deserialize;
use std::collections::BTreeMap;
use toml::Spanned;

/// A whole policy or profile file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    /// One line on who the profile is for, shown by `cordon profiles list`.
    pub description: Option<String>,
    #[serde(default)]
    pub extends: Vec<Spanned<String>>,
    #[serde(default)]
    pub fs: FsSection,
    #[serde(default)]
    pub runtime: RuntimeSection,
    #[serde(default)]
    pub env: EnvSection,
    #[serde(default)]
    pub net: NetSection,
    #[serde(default)]
    pub process: ProcessSection,
    #[serde(default)]
    pub enforce: EnforceSection,
}

/// `[fs]`: path rules by access level.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FsSection {
    #[serde(default)]
    pub ro: Vec<Spanned<String>>,
    #[serde(default)]
    pub rx: Vec<Spanned<String>>,
    #[serde(default)]
    pub rw: Vec<Spanned<String>>,
    #[serde(default)]
    pub rwx: Vec<Spanned<String>>,
    #[serde(default)]
    pub deny: Vec<Spanned<String>>,
}

/// `[runtime]`: where HOME and TMPDIR live.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeSection {
    pub home: Option<Spanned<String>>,
    pub tmp: Option<Spanned<String>>,
    pub keep: Option<bool>,
}

/// `[env]`: which host variables pass, which are set.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvSection {
    #[serde(default)]
    pub keep: Vec<String>,
    #[serde(default)]
    pub set: BTreeMap<String, String>,
    #[serde(default)]
    pub deny: Vec<String>,
}

/// `[net]`: network mode and the egress allowlist.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetSection {
    pub mode: Option<Spanned<String>>,
    #[serde(default)]
    pub allow: Vec<Spanned<String>>,
    #[serde(default)]
    pub hosts: BTreeMap<String, Spanned<String>>,
    pub allow_local: Option<bool>,
    #[serde(default)]
    pub bind: Vec<u16>,
    #[serde(default)]
    pub connect: Vec<u16>,
    pub log: Option<Spanned<String>>,
}

/// `[process]`: identity, timeout and resource limits.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessSection {
    pub user: Option<String>,
    pub group: Option<String>,
    pub timeout: Option<Spanned<String>>,
    pub kill_grace: Option<Spanned<String>>,
    pub max_output: Option<Spanned<SizeValue>>,
    #[serde(default)]
    pub limits: BTreeMap<String, Spanned<SizeValue>>,
}

/// A size or count written either as a number or as a string such as `"4GiB"`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum SizeValue {
    Number(u64),
    Text(String),
}

/// `[enforce]`: strictness and the layers to use.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnforceSection {
    pub mode: Option<Spanned<String>>,
    pub view: Option<bool>,
    pub allow_unix_sockets: Option<bool>,
}
