//! Records the commit the build came from, for `punctual_build_info{commit}`:
//! `PUNCTUAL_COMMIT` when set (image builds without `.git`), else `git rev-parse`, else
//! "unknown".

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=PUNCTUAL_COMMIT");
    let git = Path::new("../.git");
    // Rebuilt when HEAD moves: HEAD itself, the branch it names, and the packed refs.
    if let Ok(head) = std::fs::read_to_string(git.join("HEAD")) {
        println!("cargo:rerun-if-changed=../.git/HEAD");
        if let Some(branch) = head.trim().strip_prefix("ref: ") {
            if git.join(branch).exists() {
                println!("cargo:rerun-if-changed=../.git/{branch}");
            }
        }
        if git.join("packed-refs").exists() {
            println!("cargo:rerun-if-changed=../.git/packed-refs");
        }
    }
    let commit = std::env::var("PUNCTUAL_COMMIT").ok().filter(|c| !c.is_empty()).or_else(|| {
        let out = Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    });
    println!("cargo:rustc-env=PUNCTUAL_COMMIT={}", commit.unwrap_or_else(|| "unknown".to_owned()));
}
