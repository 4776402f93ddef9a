//! cordon: run one command inside a sandbox described by a TOML policy.
//!
//! The pipeline, one way: `cli` → `policy` (pure data) → `plan` (resolved against the
//! machine, pure) → `enforce` (the only confining syscalls) → `supervise`.

pub mod cli;
pub mod enforce;
pub mod plan;
pub mod policy;
pub mod units;
