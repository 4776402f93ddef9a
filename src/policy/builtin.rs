//! The built-in profiles, embedded in the binary from `profiles/*.toml`.

/// Name and text of every built-in profile, in the order `cordon profiles list` shows them.
pub const PROFILES: &[(&str, &str)] = &[
    ("system", include_str!("../../profiles/system.toml")),
    ("default", include_str!("../../profiles/default.toml")),
    ("readonly", include_str!("../../profiles/readonly.toml")),
    ("ci", include_str!("../../profiles/ci.toml")),
    ("agent", include_str!("../../profiles/agent.toml")),
    ("rust", include_str!("../../profiles/rust.toml")),
    ("python", include_str!("../../profiles/python.toml")),
    ("node", include_str!("../../profiles/node.toml")),
    ("go", include_str!("../../profiles/go.toml")),
];

/// The text of a built-in profile.
pub fn get(name: &str) -> Option<&'static str> {
    PROFILES.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// The names of the built-in profiles.
pub fn names() -> impl Iterator<Item = &'static str> {
    PROFILES.iter().map(|(n, _)| *n)
}
