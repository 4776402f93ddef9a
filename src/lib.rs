//! cordon: run one command inside a sandbox described by a TOML policy.
/// The egress proxy for network mode `egress` (see DESIGN.md, "Network").
pub mod egress;
