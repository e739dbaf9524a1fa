//! Which tests cannot run where `cargo test` is building them, as cfgs their `#[cfg_attr(…,
//! ignore = "why")]` reads: the test runner then counts them as ignored and says why, where a test
//! that returned early would count as passed without having tested anything.
//!
//! - `given_server`: `DATABASE_URL` names a PostgreSQL server others may use, so tests that stop
//!   the server, start servers of their own or create cluster-wide roles cannot run.
//! - `not_root`: the build runs as a user other than root, so tests that give files away to
//!   another user cannot run.
//!
//! Cargo rebuilds the tests when `DATABASE_URL` (or `USER`) changes; a test binary run in another
//! setting than it was built for fails at the test's own check, never passes.

use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(given_server)");
    println!("cargo::rustc-check-cfg=cfg(not_root)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=DATABASE_URL");
    // Cargo cannot watch the uid; `USER` changes with it under su and sudo.
    println!("cargo::rerun-if-env-changed=USER");
    if std::env::var_os("DATABASE_URL").is_some() {
        println!("cargo::rustc-cfg=given_server");
    }
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    if !root {
        println!("cargo::rustc-cfg=not_root");
    }
}
