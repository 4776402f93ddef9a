//! Loading: profile lookup, `extends`, variable expansion, merging, flags last.

// A policy error carries the offending line for display; it is built once per failed
// run, so its size does not matter.
#![allow(clippy::result_large_err)]

use super::error::{nearest, PolicyError};
use super::file::{PolicyFile, SizeValue};
use super::{
    builtin, Access, EnforceMode, Limit, LimitUnit, Located, Location, NetMode, Origin, PathRule,
    Policy, DEFAULT_KILL_GRACE, LIMIT_KEYS,
};
use crate::units::{parse_duration, parse_size};
use std::collections::{BTreeMap, HashSet};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

/// What the loader needs to know about the invocation: it never asks the process itself,
/// so loading is deterministic and testable.
#[derive(Debug, Clone)]
pub struct Context {
    /// The current directory (`${CWD}`, relative paths on the command line).
    pub cwd: PathBuf,
    /// The invoking user's real home (`${HOME}`, `~`).
    pub home: PathBuf,
    /// A snapshot of the host environment (`${env:NAME}`, profile lookup).
    pub env: BTreeMap<String, String>,
}

/// The command-line flags that add to the policy, in the order they were given where
/// order matters. Built by `cli`; kept here so `policy` does not depend on clap.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub profiles: Vec<String>,
    /// `(access, path)` in the order given.
    pub paths: Vec<(Access, String)>,
    pub net: Option<NetMode>,
    pub allow_hosts: Vec<String>,
    pub add_hosts: Vec<String>,
    pub env: Vec<String>,
    pub user: Option<String>,
    pub group: Option<String>,
    pub timeout: Option<String>,
    pub best_effort: bool,
    pub no_view: bool,
    pub keep_scratch: bool,
    pub max_output: Option<String>,
}

/// Load and merge the policy: the profiles named (or `default`), then the flags.
pub fn load(overrides: &Overrides, ctx: &Context) -> Result<Policy, PolicyError> {
    let mut merger = Merger::new(ctx);
    let names: Vec<String> = if overrides.profiles.is_empty() {
        vec!["default".to_string()]
    } else {
        overrides.profiles.clone()
    };
    for name in &names {
        merger.load_profile(name, &ctx.cwd, "command line (-p)")?;
    }
    merger.apply_overrides(overrides)?;
    Ok(merger.finish())
}

/// A policy text and where it came from.
struct Source {
    /// Identity for cycle detection: canonical path or `builtin:NAME`.
    id: String,
    /// What messages call it.
    display: String,
    text: String,
    /// `${POLICY_DIR}` and the base of relative paths; None for built-ins.
    dir: Option<PathBuf>,
}

struct Merger<'a> {
    ctx: &'a Context,
    stack: Vec<String>,
    loaded: HashSet<String>,
    policy: Policy,
    /// The rules so far, in order; `None` where a later rule for the same path replaced
    /// one. Compacted into `policy.rules` by `finish`.
    rules: Vec<Option<PathRule>>,
    /// Where the live rule for each path is in `rules`: replacing one is O(1), so
    /// thousands of rules load in linear time.
    rule_at: crate::plan::FastMap<std::ffi::OsString, usize>,
}

impl<'a> Merger<'a> {
    fn new(ctx: &'a Context) -> Self {
        Merger {
            ctx,
            stack: Vec::new(),
            loaded: HashSet::new(),
            rules: Vec::new(),
            rule_at: Default::default(),
            policy: Policy {
                sources: Vec::new(),
                rules: Vec::new(),
                home: Location::Private,
                tmp: Location::Private,
                keep_scratch: false,
                env_keep: Vec::new(),
                env_set: Vec::new(),
                env_deny: Vec::new(),
                net_mode: NetMode::None,
                net_allow: Vec::new(),
                net_hosts: Vec::new(),
                net_allow_local: false,
                net_bind: Vec::new(),
                net_connect: Vec::new(),
                net_log: None,
                user: None,
                group: None,
                timeout: None,
                kill_grace: DEFAULT_KILL_GRACE,
                max_output: None,
                limits: Vec::new(),
                mode: EnforceMode::Strict,
                view: true,
                allow_unix_sockets: false,
            },
        }
    }

    fn load_profile(&mut self, name: &str, base: &Path, referrer: &str) -> Result<(), PolicyError> {
        let source = resolve(name, base, self.ctx, referrer)?;
        if self.stack.contains(&source.id) {
            let mut chain = self.stack.clone();
            chain.push(source.id.clone());
            return Err(PolicyError::plain(
                &source.display,
                format!("`extends` cycle: {}", chain.join(" → ")),
            )
            .with_hint("remove one of these `extends` entries"));
        }
        if !self.loaded.insert(source.id.clone()) {
            return Ok(()); // already merged through another path: merging twice changes nothing
        }
        let file: PolicyFile = toml::from_str(&source.text)
            .map_err(|e| toml_error(&source.display, &source.text, e))?;
        self.stack.push(source.id.clone());
        let base = source.dir.clone().unwrap_or_else(|| self.ctx.cwd.clone());
        for parent in &file.extends {
            let at = Origin {
                source: source.display.clone(),
                line: line_of(&source.text, parent.span().start),
            };
            self.load_profile(parent.get_ref(), &base, &at.to_string())?;
        }
        self.stack.pop();
        self.merge_file(&source, file)?;
        self.policy.sources.push(source.display);
        Ok(())
    }

    fn merge_file(&mut self, src: &Source, file: PolicyFile) -> Result<(), PolicyError> {
        let lines = LineIndex::new(&src.text);
        let fs = file.fs;
        for (access, list) in [
            (Access::Ro, fs.ro),
            (Access::Rx, fs.rx),
            (Access::Rw, fs.rw),
            (Access::Rwx, fs.rwx),
            (Access::Deny, fs.deny),
        ] {
            for entry in list {
                let (path, optional) = expand_path(entry.get_ref(), src.dir.as_deref(), self.ctx)
                    .map_err(|m| span_error(src, &entry, m))?;
                self.add_rule(PathRule {
                    path,
                    optional,
                    access,
                    origin: lines.origin(src, entry.span().start),
                });
            }
        }

        let rt = file.runtime;
        if let Some(home) = rt.home {
            self.policy.home = self.location(src, &home)?;
        }
        if let Some(tmp) = rt.tmp {
            self.policy.tmp = self.location(src, &tmp)?;
        }
        if let Some(keep) = rt.keep {
            self.policy.keep_scratch = keep;
        }

        let env = file.env;
        extend_unique(&mut self.policy.env_keep, env.keep);
        extend_unique(&mut self.policy.env_deny, env.deny);
        for (name, value) in env.set {
            check_env_name(&name).map_err(|m| PolicyError::plain(&src.display, m))?;
            let value = expand_value(&value, self.ctx);
            self.set_env(name, value);
        }

        let net = file.net;
        if let Some(mode) = net.mode {
            self.policy.net_mode = NetMode::parse(mode.get_ref()).ok_or_else(|| {
                span_error(
                    src,
                    &mode,
                    format!("unknown network mode `{}`", mode.get_ref()),
                )
                .with_hint("use `none`, `egress` or `host`")
            })?;
        }
        for entry in net.allow {
            crate::egress::AllowRule::parse(entry.get_ref())
                .map_err(|m| span_error(src, &entry, m))?;
            self.policy.net_allow.push(Located {
                value: entry.get_ref().clone(),
                origin: lines.origin(src, entry.span().start),
            });
        }
        for (name, ip) in net.hosts {
            crate::egress::parse_host_pin(&format!("{name}={}", ip.get_ref()))
                .map_err(|m| span_error(src, &ip, m))?;
            self.policy.net_hosts.push(Located {
                origin: lines.origin(src, ip.span().start),
                value: (name, ip.into_inner()),
            });
        }
        if let Some(v) = net.allow_local {
            self.policy.net_allow_local = v;
        }
        extend_unique(&mut self.policy.net_bind, net.bind);
        extend_unique(&mut self.policy.net_connect, net.connect);
        if let Some(log) = net.log {
            let (path, _) = expand_path(log.get_ref(), src.dir.as_deref(), self.ctx)
                .map_err(|m| span_error(src, &log, m))?;
            self.policy.net_log = Some(path);
        }

        let process = file.process;
        if process.user.is_some() {
            self.policy.user = process.user;
        }
        if process.group.is_some() {
            self.policy.group = process.group;
        }
        if let Some(t) = process.timeout {
            self.policy.timeout = Some(duration(src, &t)?);
        }
        if let Some(t) = process.kill_grace {
            self.policy.kill_grace = duration(src, &t)?;
        }
        if let Some(m) = process.max_output {
            self.policy.max_output =
                Some(size_value(m.get_ref()).map_err(|msg| span_error(src, &m, msg))?);
        }
        for (key, value) in process.limits {
            let limit = limit(&key, value.get_ref()).map_err(|(msg, hint)| {
                let err = span_error(src, &value, msg);
                match hint {
                    Some(h) => err.with_hint(h),
                    None => err,
                }
            })?;
            self.policy.limits.retain(|l| l.key != limit.key);
            self.policy.limits.push(limit);
        }

        let enforce = file.enforce;
        if let Some(mode) = enforce.mode {
            self.policy.mode = match mode.get_ref().as_str() {
                "strict" => EnforceMode::Strict,
                "best-effort" => EnforceMode::BestEffort,
                other => {
                    return Err(
                        span_error(src, &mode, format!("unknown enforce mode `{other}`"))
                            .with_hint("use `strict` or `best-effort`"),
                    )
                }
            };
        }
        if let Some(view) = enforce.view {
            self.policy.view = view;
        }
        if let Some(v) = enforce.allow_unix_sockets {
            self.policy.allow_unix_sockets = v;
        }
        Ok(())
    }

    fn location(&self, src: &Source, value: &Spanned<String>) -> Result<Location, PolicyError> {
        Ok(match value.get_ref().as_str() {
            "private" => Location::Private,
            "host" => Location::Host,
            other => {
                let (path, _) = expand_path(other, src.dir.as_deref(), self.ctx)
                    .map_err(|m| span_error(src, value, m))?;
                Location::Path(path)
            }
        })
    }

    /// Add a rule; a later rule for the very same path replaces the earlier one, so a file
    /// that extends a profile, and the command line, can change what the profile said.
    fn add_rule(&mut self, rule: PathRule) {
        // Paths are normalised: equal bytes are the same path.
        // Keyed by bytes: hashing a `Path` goes component by component.
        let key = rule.path.as_os_str().to_os_string();
        if let Some(earlier) = self.rule_at.insert(key, self.rules.len()) {
            self.rules[earlier] = None;
        }
        self.rules.push(Some(rule));
    }

    fn set_env(&mut self, name: String, value: String) {
        self.policy.env_set.retain(|(n, _)| *n != name);
        self.policy.env_set.push((name, value));
    }

    fn apply_overrides(&mut self, o: &Overrides) -> Result<(), PolicyError> {
        for (access, raw) in &o.paths {
            let flag = format!("--{}", access.name());
            let (path, optional) = expand_path(raw, Some(&self.ctx.cwd), self.ctx)
                .map_err(|m| PolicyError::plain(Origin::command_line(&flag).to_string(), m))?;
            self.add_rule(PathRule {
                path,
                optional,
                access: *access,
                origin: Origin::command_line(&flag),
            });
        }
        if let Some(mode) = o.net {
            self.policy.net_mode = mode;
        }
        for host in &o.allow_hosts {
            crate::egress::AllowRule::parse(host)
                .map_err(|m| PolicyError::plain("command line (--allow-host)", m))?;
            self.policy.net_allow.push(Located {
                value: host.clone(),
                origin: Origin::command_line("--allow-host"),
            });
        }
        if !o.allow_hosts.is_empty() && o.net.is_none() {
            self.policy.net_mode = NetMode::Egress;
        }
        for pin in &o.add_hosts {
            crate::egress::parse_host_pin(pin)
                .map_err(|m| PolicyError::plain("command line (--add-host)", m))?;
            let (name, ip) = pin.split_once('=').ok_or_else(|| {
                PolicyError::plain(
                    "command line (--add-host)",
                    format!("`{pin}` is not NAME=IP; write e.g. `--add-host pkg.example.test=127.0.0.1`"),
                )
            })?;
            self.policy.net_hosts.push(Located {
                value: (name.to_string(), ip.to_string()),
                origin: Origin::command_line("--add-host"),
            });
        }
        for item in &o.env {
            match item.split_once('=') {
                Some((name, value)) => {
                    check_env_name(name)
                        .map_err(|m| PolicyError::plain("command line (--env)", m))?;
                    self.set_env(name.to_string(), value.to_string());
                }
                None => {
                    check_env_name(item)
                        .map_err(|m| PolicyError::plain("command line (--env)", m))?;
                    // An explicit name: passes even where a deny glob would drop it.
                    extend_unique(&mut self.policy.env_keep, [item.clone()]);
                }
            }
        }
        if o.user.is_some() {
            self.policy.user = o.user.clone();
        }
        if o.group.is_some() {
            self.policy.group = o.group.clone();
        }
        if let Some(t) = &o.timeout {
            self.policy.timeout = Some(
                parse_duration(t).map_err(|m| PolicyError::plain("command line (--timeout)", m))?,
            );
        }
        if let Some(m) = &o.max_output {
            self.policy.max_output = Some(
                parse_size(m).map_err(|e| PolicyError::plain("command line (--max-output)", e))?,
            );
        }
        if o.best_effort {
            self.policy.mode = EnforceMode::BestEffort;
        }
        if o.no_view {
            self.policy.view = false;
        }
        if o.keep_scratch {
            self.policy.keep_scratch = true;
        }
        Ok(())
    }

    fn finish(mut self) -> Policy {
        self.policy.rules = self.rules.into_iter().flatten().collect();
        self.policy
    }
}

/// Find a profile by name or path: a path (contains `/` or ends in `.toml`), then the
/// user's config dir, then `/etc/cordon/profiles`, then the built-in profiles.
fn resolve(name: &str, base: &Path, ctx: &Context, referrer: &str) -> Result<Source, PolicyError> {
    if name.contains('/') || name.ends_with(".toml") {
        let (path, _) =
            expand_path(name, Some(base), ctx).map_err(|m| PolicyError::plain(referrer, m))?;
        return read_file(&path, referrer);
    }
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(
            PolicyError::plain(referrer, format!("`{name}` is not a profile name"))
                .with_hint("give a profile name such as `ci`, or a path to a .toml file"),
        );
    }
    for dir in profile_dirs(ctx) {
        let path = dir.join(format!("{name}.toml"));
        if path.is_file() {
            return read_file(&path, referrer);
        }
    }
    if let Some(text) = builtin::get(name) {
        return Ok(Source {
            id: format!("builtin:{name}"),
            display: format!("builtin:{name}"),
            text: text.to_string(),
            dir: None,
        });
    }
    let known = builtin::names().collect::<Vec<_>>().join(", ");
    let mut err = PolicyError::plain(referrer, format!("unknown profile `{name}`"));
    err = match nearest(name, builtin::names()) {
        Some(close) => err.with_hint(format!(
            "did you mean `{close}`? Known profiles: {known} (and any NAME.toml in the profile dirs, see `cordon profiles list`)"
        )),
        None => err.with_hint(format!(
            "known profiles: {known} (and any NAME.toml in the profile dirs, see `cordon profiles list`); or give a path to a .toml file"
        )),
    };
    Err(err)
}

/// The text of a profile as shipped or installed, for `cordon profiles show`.
pub fn profile_text(name: &str, ctx: &Context) -> Result<String, PolicyError> {
    Ok(resolve(name, &ctx.cwd, ctx, "command line")?.text)
}

/// The one-line `description` of a profile's text, for `cordon profiles list`.
pub fn describe(text: &str) -> String {
    toml::from_str::<PolicyFile>(text)
        .ok()
        .and_then(|f| f.description)
        .unwrap_or_else(|| "(no description)".to_string())
}

/// The directories searched for installed profiles, most personal first.
pub fn profile_dirs(ctx: &Context) -> Vec<PathBuf> {
    let config = match ctx.env.get("XDG_CONFIG_HOME") {
        Some(dir) if Path::new(dir).is_absolute() => PathBuf::from(dir),
        _ => ctx.home.join(".config"),
    };
    vec![
        config.join("cordon/profiles"),
        PathBuf::from("/etc/cordon/profiles"),
    ]
}

fn read_file(path: &Path, referrer: &str) -> Result<Source, PolicyError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        PolicyError::plain(
            referrer,
            format!("cannot read policy file {}: {}", path.display(), e),
        )
        .with_hint("check the path given to -p or in `extends`")
    })?;
    let id = std::fs::canonicalize(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string();
    Ok(Source {
        id,
        display: path.display().to_string(),
        text,
        dir: path.parent().map(Path::to_path_buf),
    })
}

/// Turn a toml/serde error into one that points at the line and suggests the nearest key.
fn toml_error(display: &str, text: &str, e: toml::de::Error) -> PolicyError {
    let message = e.message().trim().to_string();
    let mut err = PolicyError::at(display, text, e.span(), first_sentence(&message));
    if let Some((unknown, expected)) = parse_unknown_field(&message) {
        err.message = format!("unknown key `{unknown}`");
        let hint = match nearest(&unknown, expected.iter().map(String::as_str)) {
            Some(close) => format!(
                "did you mean `{close}`? Known keys here: {}",
                expected.join(", ")
            ),
            None => format!("known keys here: {}", expected.join(", ")),
        };
        err = err.with_hint(hint);
    }
    err
}

fn first_sentence(message: &str) -> String {
    message.lines().next().unwrap_or(message).to_string()
}

/// serde's message is "unknown field `x`, expected one of `a`, `b`" (or "expected `a`").
fn parse_unknown_field(message: &str) -> Option<(String, Vec<String>)> {
    let rest = message.strip_prefix("unknown field `")?;
    let (unknown, rest) = rest.split_once('`')?;
    let expected = rest
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect();
    Some((unknown.to_string(), expected))
}

fn span_error<T>(src: &Source, value: &Spanned<T>, message: impl Into<String>) -> PolicyError {
    PolicyError::at(&src.display, &src.text, Some(value.span()), message)
}

/// Line numbers by offset for one text, counted once: a file with thousands of rules
/// would otherwise be scanned from the top for each of them.
struct LineIndex {
    /// Offsets of every `\n`, ascending.
    newlines: Vec<usize>,
}

impl LineIndex {
    fn new(text: &str) -> LineIndex {
        let newlines = text
            .bytes()
            .enumerate()
            .filter(|(_, b)| *b == b'\n')
            .map(|(i, _)| i)
            .collect();
        LineIndex { newlines }
    }

    /// Where `offset` of `src` is: the same line as `line_of(&src.text, offset)`.
    fn origin(&self, src: &Source, offset: usize) -> Origin {
        Origin {
            source: src.display.clone(),
            line: Some(self.newlines.partition_point(|&nl| nl < offset) + 1),
        }
    }
}

fn line_of(text: &str, offset: usize) -> Option<usize> {
    let upto = &text.as_bytes()[..offset.min(text.len())];
    Some(upto.iter().filter(|b| **b == b'\n').count() + 1)
}

fn duration(src: &Source, value: &Spanned<String>) -> Result<Duration, PolicyError> {
    parse_duration(value.get_ref()).map_err(|m| span_error(src, value, m))
}

fn size_value(value: &SizeValue) -> Result<u64, String> {
    match value {
        SizeValue::Number(n) => Ok(*n),
        SizeValue::Text(t) => parse_size(t),
    }
}

fn limit(key: &str, value: &SizeValue) -> Result<Limit, (String, Option<String>)> {
    let Some((_, unit)) = LIMIT_KEYS.iter().find(|(k, _)| *k == key) else {
        let keys: Vec<&str> = LIMIT_KEYS.iter().map(|(k, _)| *k).collect();
        let hint = match nearest(key, keys.iter().copied()) {
            Some(close) => format!("did you mean `{close}`? Known limits: {}", keys.join(", ")),
            None => format!("known limits: {}", keys.join(", ")),
        };
        return Err((format!("unknown limit `{key}`"), Some(hint)));
    };
    let value = match (unit, value) {
        (_, SizeValue::Number(n)) => *n,
        (LimitUnit::Count, SizeValue::Text(t)) => t.parse().map_err(|_| {
            (
                format!("limit `{key}` takes a whole number, not `{t}`"),
                None,
            )
        })?,
        (LimitUnit::Size, SizeValue::Text(t)) => parse_size(t).map_err(|m| (m, None))?,
        (LimitUnit::Duration, SizeValue::Text(t)) => {
            parse_duration(t).map_err(|m| (m, None))?.as_secs()
        }
    };
    Ok(Limit {
        key: key.to_string(),
        value,
    })
}

fn check_env_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.contains('=') || name.contains('\0') {
        return Err(format!("`{name}` is not a valid environment variable name"));
    }
    Ok(())
}

fn extend_unique<T: PartialEq>(list: &mut Vec<T>, items: impl IntoIterator<Item = T>) {
    for item in items {
        if !list.contains(&item) {
            list.push(item);
        }
    }
}

/// Expand `${HOME}`, `${CWD}` and a leading `~` (`~` or `~/…`) in an `[env] set` value,
/// so a profile can point a tool at the invoking user's real home (`CARGO_HOME =
/// "${HOME}/.cargo"`) while `HOME` itself is private. Anything else, `${env:NAME}` and
/// unknown `${…}` included, stays as written: a value may legitimately contain `${`.
fn expand_value(raw: &str, ctx: &Context) -> String {
    let home = ctx.home.display().to_string();
    let mut value = raw.to_string();
    if value == "~" {
        value = home.clone();
    } else if let Some(rest) = value.strip_prefix("~/") {
        value = format!("{home}/{rest}");
    }
    value
        .replace("${HOME}", &home)
        .replace("${CWD}", &ctx.cwd.display().to_string())
}

/// Expand variables and make the path absolute. Returns the path and whether it was
/// marked optional with a trailing `?`.
///
/// `base` is the directory relative paths resolve against: the policy file's directory,
/// or the current directory for flags; None (built-in profiles) makes relative paths an
/// error.
pub fn expand_path(
    raw: &str,
    base: Option<&Path>,
    ctx: &Context,
) -> Result<(PathBuf, bool), String> {
    let (text, optional) = match raw.strip_suffix('?') {
        Some(t) => (t, true),
        None => (raw, false),
    };
    if text.is_empty() {
        return Err("empty path".to_string());
    }
    if text.starts_with('/') && !text.contains("${") {
        // The common case, thousands of times in a large policy: an absolute path with
        // no variable, usually normal already.
        return Ok((normalize(PathBuf::from(text)), optional));
    }
    let mut out = String::new();
    let mut rest = text;
    if rest == "~" || rest.starts_with("~/") {
        out.push_str(&ctx.home.display().to_string());
        rest = &rest[1..];
    }
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("unclosed `${{` in `{raw}`"))?;
        let var = &after[..end];
        let value = match var {
            "CWD" => ctx.cwd.display().to_string(),
            "HOME" => ctx.home.display().to_string(),
            "POLICY_DIR" => base
                .filter(|_| true)
                .map(|b| b.display().to_string())
                .ok_or_else(|| "`${POLICY_DIR}` has no meaning in a built-in profile".to_string())?,
            _ => match var.strip_prefix("env:") {
                Some(name) => ctx
                    .env
                    .get(name)
                    .cloned()
                    .ok_or_else(|| format!("`${{env:{name}}}`: the variable {name} is not set"))?,
                None => {
                    return Err(format!(
                        "unknown variable `${{{var}}}`; use ${{CWD}}, ${{HOME}}, ${{POLICY_DIR}} or ${{env:NAME}}"
                    ))
                }
            },
        };
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    let path = PathBuf::from(out);
    let path = if path.is_absolute() {
        path
    } else {
        match base {
            Some(b) => b.join(path),
            None => {
                return Err(format!(
                "relative path `{raw}` in a built-in profile; write ${{CWD}}/… or an absolute path"
            ))
            }
        }
    };
    Ok((normalize(path), optional))
}

/// Absolute, with no `.`, `..`, doubled or trailing slash: what `normalize` returns.
fn is_normal(path: &Path) -> bool {
    let b = path.as_os_str().as_encoded_bytes();
    b == b"/"
        || (b.first() == Some(&b'/')
            && b[1..]
                .split(|c| *c == b'/')
                .all(|c| !c.is_empty() && c != b"." && c != b".."))
}

/// Remove `.` and `..` lexically, so rules compare by components. Symlinks are resolved
/// later, by `plan`.
fn normalize(path: PathBuf) -> PathBuf {
    if is_normal(&path) {
        return path; // the common case, with thousands of rules
    }
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(part) => out.push(part),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> Context {
        let mut env = BTreeMap::new();
        env.insert("PROJ".to_string(), "/srv/proj".to_string());
        Context {
            cwd: PathBuf::from("/work/here"),
            home: PathBuf::from("/home/u"),
            env,
        }
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// A fresh directory for one test, removed when the test ends.
    struct TestDir(PathBuf);

    impl std::ops::Deref for TestDir {
        type Target = PathBuf;
        fn deref(&self) -> &PathBuf {
            &self.0
        }
    }

    impl Drop for TestDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn tempdir(tag: &str) -> TestDir {
        let d =
            std::env::temp_dir().join(format!("cordon-policy-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TestDir(d)
    }

    #[test]
    fn normalize_keeps_normal_paths_and_makes_the_rest_normal() {
        for (raw, want) in [
            ("/", "/"),
            ("/a/b", "/a/b"),
            ("/a/./b/", "/a/b"),
            ("/a//b", "/a/b"),
            ("/a/../b", "/b"),
            ("/..", "/"),
            ("/a/.b/..c", "/a/.b/..c"),
        ] {
            let got = normalize(PathBuf::from(raw));
            assert_eq!(got, Path::new(want), "{raw}");
            assert_eq!(got.as_os_str(), want, "{raw}");
            assert!(is_normal(&got), "{raw}");
        }
        assert!(!is_normal(Path::new("/a/")));
        assert!(!is_normal(Path::new("a/b")));
    }

    #[test]
    fn line_index_agrees_with_line_of() {
        let text = "a\n\nbc\nd";
        let src = Source {
            id: "t".into(),
            display: "t".into(),
            text: text.into(),
            dir: None,
        };
        let lines = LineIndex::new(text);
        for offset in 0..=text.len() + 1 {
            assert_eq!(
                lines.origin(&src, offset).line,
                line_of(text, offset),
                "{offset}"
            );
        }
    }

    #[test]
    fn a_later_rule_for_the_same_path_replaces_the_earlier_one() {
        let ctx = ctx();
        let mut m = Merger::new(&ctx);
        for (path, access) in [("/a", Access::Ro), ("/b", Access::Ro), ("/a", Access::Rw)] {
            m.add_rule(PathRule {
                path: path.into(),
                optional: false,
                access,
                origin: Origin::command_line("--ro"),
            });
        }
        let rules = m.finish().rules;
        let got: Vec<_> = rules.iter().map(|r| (r.path.clone(), r.access)).collect();
        assert_eq!(
            got,
            [
                (PathBuf::from("/b"), Access::Ro),
                (PathBuf::from("/a"), Access::Rw)
            ]
        );
    }

    #[test]
    fn expands_variables() {
        let c = ctx();
        let base = Path::new("/etc/pol");
        assert_eq!(
            expand_path("~/.ssh", Some(base), &c).unwrap().0,
            PathBuf::from("/home/u/.ssh")
        );
        assert_eq!(
            expand_path("${CWD}/.env", Some(base), &c).unwrap().0,
            PathBuf::from("/work/here/.env")
        );
        assert_eq!(
            expand_path("${env:PROJ}/x", Some(base), &c).unwrap().0,
            PathBuf::from("/srv/proj/x")
        );
        assert_eq!(
            expand_path("${POLICY_DIR}/a", Some(base), &c).unwrap().0,
            PathBuf::from("/etc/pol/a")
        );
        assert_eq!(
            expand_path("rel/../b", Some(base), &c).unwrap().0,
            PathBuf::from("/etc/pol/b")
        );
        assert_eq!(
            expand_path("/lib64?", Some(base), &c).unwrap(),
            (PathBuf::from("/lib64"), true)
        );
        assert!(expand_path("${env:NOPE}", Some(base), &c)
            .unwrap_err()
            .contains("NOPE is not set"));
        assert!(expand_path("${WHAT}", Some(base), &c)
            .unwrap_err()
            .contains("unknown variable"));
        assert!(expand_path("rel", None, &c).is_err());
    }

    #[test]
    fn env_set_values_expand_home_and_cwd() {
        let c = ctx();
        assert_eq!(expand_value("${HOME}/.cargo", &c), "/home/u/.cargo");
        assert_eq!(expand_value("~/.rustup", &c), "/home/u/.rustup");
        assert_eq!(expand_value("~", &c), "/home/u");
        assert_eq!(expand_value("${CWD}/target", &c), "/work/here/target");
        assert_eq!(expand_value("a~/b", &c), "a~/b");
        assert_eq!(expand_value("${env:PROJ} ${X}", &c), "${env:PROJ} ${X}");
        assert_eq!(expand_value("true", &c), "true");

        let d = tempdir("envset");
        let p = write(
            &d,
            "p.toml",
            "[env]\nset = { CARGO_HOME = \"${HOME}/.cargo\", LIT = \"$HOME\" }\n",
        );
        let o = Overrides {
            profiles: vec![p.display().to_string()],
            env: vec!["FLAG=${HOME}".into()],
            ..Default::default()
        };
        let pol = load(&o, &c).unwrap();
        let get = |n: &str| {
            pol.env_set
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(get("CARGO_HOME").as_deref(), Some("/home/u/.cargo"));
        assert_eq!(get("LIT").as_deref(), Some("$HOME"));
        // The command line is already expanded by the shell: left as given.
        assert_eq!(get("FLAG").as_deref(), Some("${HOME}"));
    }

    #[test]
    fn unknown_key_names_line_and_suggests() {
        let d = tempdir("typo");
        let p = write(&d, "p.toml", "[fs]\nrox = [\"/usr\"]\n");
        let o = Overrides {
            profiles: vec![p.display().to_string()],
            ..Default::default()
        };
        let err = load(&o, &ctx()).unwrap_err();
        let shown = err.to_string();
        assert!(shown.contains("p.toml:2:1: unknown key `rox`"), "{shown}");
        assert!(shown.contains("did you mean `ro`?"), "{shown}");
    }

    #[test]
    fn extends_cycle_is_refused() {
        let d = tempdir("cycle");
        write(&d, "a.toml", "extends = [\"b.toml\"]\n");
        write(&d, "b.toml", "extends = [\"a.toml\"]\n");
        let o = Overrides {
            profiles: vec![d.join("a.toml").display().to_string()],
            ..Default::default()
        };
        let shown = load(&o, &ctx()).unwrap_err().to_string();
        assert!(shown.contains("cycle"), "{shown}");
    }

    #[test]
    fn later_rule_for_same_path_wins_and_flags_come_last() {
        let d = tempdir("merge");
        write(
            &d,
            "base.toml",
            "[fs]\nro = [\"/data\"]\n[env]\nkeep=[\"A\"]\n",
        );
        let p = write(&d, "top.toml", "extends=[\"base.toml\"]\n[fs]\nrw = [\"/data\", \"/other\"]\n[env]\nkeep=[\"B\"]\n[process]\ntimeout=\"10m\"\n");
        let o = Overrides {
            profiles: vec![p.display().to_string()],
            paths: vec![(Access::Deny, "/other".to_string())],
            timeout: Some("5s".into()),
            ..Default::default()
        };
        let pol = load(&o, &ctx()).unwrap();
        let data: Vec<_> = pol
            .rules
            .iter()
            .filter(|r| r.path == Path::new("/data"))
            .collect();
        assert_eq!(data.len(), 1);
        assert_eq!(data[0].access, Access::Rw);
        let other = pol
            .rules
            .iter()
            .find(|r| r.path == Path::new("/other"))
            .unwrap();
        assert_eq!(other.access, Access::Deny);
        assert_eq!(pol.env_keep, vec!["A".to_string(), "B".to_string()]);
        assert_eq!(pol.timeout, Some(Duration::from_secs(5)));
        assert_eq!(pol.sources.len(), 2);
    }

    #[test]
    fn unknown_profile_lists_known_ones() {
        let o = Overrides {
            profiles: vec!["defualt".into()],
            ..Default::default()
        };
        let shown = load(&o, &ctx()).unwrap_err().to_string();
        assert!(shown.contains("unknown profile `defualt`"), "{shown}");
        assert!(shown.contains("did you mean `default`?"), "{shown}");
    }

    #[test]
    fn bad_values_are_errors() {
        let d = tempdir("values");
        for (text, needle) in [
            ("[net]\nmode = \"open\"\n", "unknown network mode"),
            ("[process.limits]\nnofiles = 3\n", "did you mean `nofile`?"),
            ("[process.limits]\nas = \"8 lightyears\"\n", "unknown unit"),
            ("[process]\ntimeout = \"soon\"\n", "duration \"soon\""),
            ("[enforce]\nmode = \"lenient\"\n", "unknown enforce mode"),
            ("[net]\nallow = [\"*\"]\n", "p.toml:2:10"),
            ("[fs\n", "p.toml:1"),
        ] {
            let p = write(&d, "p.toml", text);
            let o = Overrides {
                profiles: vec![p.display().to_string()],
                ..Default::default()
            };
            let shown = load(&o, &ctx()).unwrap_err().to_string();
            assert!(shown.contains(needle), "{text:?} gave {shown}");
        }
    }
}
