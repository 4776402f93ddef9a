//! The confining syscalls that run in the sandboxed child — the only module with
//! `unsafe`.
//!
//! Everything here is split in two: a *prepare* step that runs in the launcher
//! before `fork` (it may allocate, read files, report rich errors) and an
//! *apply* step that runs in the child between `fork` and `exec`. Apply steps are
//! async-signal-safe: no heap allocation, no locks, no std I/O — only raw
//! syscalls on data prepared before the fork — and report a small `Copy` error.
//!
//! The order in the child is fixed by the design (groups, gid, uid, capabilities,
//! `no_new_privs`, Landlock, seccomp last, then close-on-exec of inherited
//! descriptors, then exec); `launch` owns that sequence.

pub mod creds;
pub mod landlock;
pub mod launch;
pub mod probe;
pub mod seccomp;
pub mod view;

pub use creds::StepError;

/// The calling thread's errno, without allocating.
pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}
