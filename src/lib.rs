//! cordon: run one command inside a sandbox described by a TOML policy.
pub mod egress;
