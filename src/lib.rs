//! cordon: run one command inside a sandbox described by a TOML policy.
//!
//! The pipeline, one way: `cli` → `policy` (pure data) → `plan` (resolved against the
//! machine, pure) → `enforce` (the only confining syscalls) → `supervise`.

pub mod cli;
/// The egress proxy for network mode `egress` (see DESIGN.md, "Network").
pub mod egress;
pub mod enforce;
pub mod explain;
pub mod facts;
pub mod parallel;
pub mod plan;
pub mod policy;
pub mod report;
pub mod supervise;
pub mod units;
