//! `leasehold --version` names the commit it was built from (`LEASEHOLD_COMMIT`): the one checked
//! out in the git repository, else the variable's own value (an image built from a copy without
//! `.git` passes it in), else `unknown`.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=LEASEHOLD_COMMIT");
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let commit = match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(commit) => {
            // Rebuilt when HEAD moves: the file HEAD and the branch it names.
            if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
                let dir = Path::new(&dir);
                println!("cargo:rerun-if-changed={}", dir.join("HEAD").display());
                if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
                    println!("cargo:rerun-if-changed={}", dir.join(branch).display());
                }
            }
            commit
        }
        None => std::env::var("LEASEHOLD_COMMIT").unwrap_or_else(|_| "unknown".into()),
    };
    println!("cargo:rustc-env=LEASEHOLD_COMMIT={commit}");
}
