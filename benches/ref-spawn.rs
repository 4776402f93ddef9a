//! Reference for benches/launch.sh: a Rust program that only starts the command and
//! waits for it (`std::process::Command`, which uses posix_spawn). What any launcher
//! written in Rust pays before it does anything of its own: its own exec and runtime
//! start, the spawn, the wait. Not part of cordon; compiled by launch.sh with rustc -O.
fn main() {
    let mut args = std::env::args_os().skip(1);
    let program = args.next().expect("usage: ref-spawn COMMAND [ARGS...]");
    let status = std::process::Command::new(program)
        .args(args)
        .status()
        .expect("spawn");
    std::process::exit(status.code().unwrap_or(125));
}
