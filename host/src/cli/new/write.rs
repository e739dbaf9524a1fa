//! Writing a new project: into a staging directory beside its target, then moved into place, so
//! that a failure leaves nothing half-written; then what to do next.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};

use super::project::project;
use super::sdk;
use super::spec::*;

/// `leasehold new`: writes the project, then says what to do next.
pub(crate) fn run(args: NewArgs) -> anyhow::Result<ExitCode> {
    check_name(&args.name, args.lang)?;
    // `new x` says `x`, not `./x`.
    let target = if args.dir == Path::new(".") {
        PathBuf::from(&args.name)
    } else {
        args.dir.join(&args.name)
    };
    refuse_existing(&target)?;
    let sdk = match args.lang {
        Lang::Rust => args.sdk.as_deref().map(find_sdk).transpose()?,
        Lang::Python | Lang::Js => {
            if args.sdk.is_some() {
                bail!(
                    "--sdk is for Rust projects: a {} project needs no SDK",
                    args.lang.title()
                );
            }
            None
        }
    };
    let files = project(&args.name, args.lang, args.world, sdk.as_deref())
        .map_err(|e| anyhow::anyhow!("a template of this leasehold is broken: {e}"))?;
    write_project(&args.dir, &target, &files)?;

    let shown = target.display();
    let name = &args.name;
    println!(
        "Created {shown}: a {} plugin of the world {}.",
        args.lang.title(),
        args.world.wit_name()
    );
    let mut sdk_files = 0;
    for file in &files {
        if file.path.starts_with(sdk::SDK_DIR) {
            sdk_files += 1;
        } else {
            println!("  {}", file.path);
        }
    }
    if sdk_files > 0 {
        println!("  {}/ (a copy of the SDK, {sdk_files} files)", sdk::SDK_DIR);
    }
    println!("\nNext (its README.md says more):");
    let steps = [
        (format!("cd {shown}"), ""),
        ("./test.sh".to_string(), "# unit tests, against a fake host"),
        ("./build.sh".to_string(), "# writes the component"),
        (
            format!("leasehold check {name}.wasm"),
            "# as the host will load it",
        ),
        (
            format!("cp {name}.wasm {name}.toml DIR/"),
            "# into the host's plugin directory (run --plugins DIR)",
        ),
    ];
    let width = steps.iter().map(|(cmd, _)| cmd.len()).max().unwrap_or(0);
    for (cmd, comment) in steps {
        println!("  {}", format!("{cmd:width$}  {comment}").trim_end());
    }
    Ok(ExitCode::SUCCESS)
}

/// Refuses a target that exists and is not an empty directory.
pub(super) fn refuse_existing(target: &Path) -> anyhow::Result<()> {
    let shown = target.display();
    match std::fs::symlink_metadata(target) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(anyhow::Error::new(e).context(format!("cannot look at {shown}"))),
        Ok(meta) if !meta.is_dir() => {
            bail!("{shown} already exists and is not a directory: nothing was written")
        }
        Ok(_) => {
            let mut entries =
                std::fs::read_dir(target).with_context(|| format!("cannot read {shown}"))?;
            if entries.next().is_some() {
                bail!(
                    "{shown} already exists and is not empty: nothing was written (pick another NAME or --dir)"
                );
            }
            Ok(())
        }
    }
}

/// The SDK `--sdk` names for a Rust project, as an absolute path.
pub(super) fn find_sdk(path: &Path) -> anyhow::Result<PathBuf> {
    let manifest = path.join("Cargo.toml");
    let is_sdk = std::fs::read_to_string(&manifest)
        .is_ok_and(|text| text.contains("name = \"leasehold-guest\""));
    if !is_sdk {
        bail!(
            "--sdk {}: not the leasehold-guest SDK (no Cargo.toml of package leasehold-guest there); pass a leasehold checkout's guests/leasehold-guest",
            path.display()
        );
    }
    std::fs::canonicalize(path).with_context(|| format!("cannot resolve {}", path.display()))
}

/// Writes `files` into a new directory beside `target`, then moves it to `target`: a project
/// appears whole or not at all. A directory is never replaced: a `target` that appears
/// meanwhile is an error, and an empty `target` that was there is filled in place, keeping its
/// mode and owner. On an error only what this call created is removed.
pub(super) fn write_project(
    parent: &Path,
    target: &Path,
    files: &[ProjectFile],
) -> anyhow::Result<()> {
    std::fs::create_dir_all(parent)
        .with_context(|| format!("cannot create {}", parent.display()))?;
    let name = target
        .file_name()
        .and_then(|n| n.to_str())
        .context("the project directory has no name")?;
    let staging = parent.join(format!(".{name}.new-{}", std::process::id()));
    // Not ours if it is already there (a run of the same pid before a reboot, or someone else's):
    // then it is left as it is.
    std::fs::create_dir(&staging).with_context(|| {
        format!(
            "cannot create {} to write the project in (if it is left from an earlier run, remove it)",
            staging.display()
        )
    })?;
    let written = write_files(&staging, files).and_then(|()| place(&staging, target));
    if written.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    written
}

/// Moves the written project `staging` to `target`: a rename that never replaces anything, or,
/// into an existing empty directory, a rename of each of its entries (undone if one fails).
pub(super) fn place(staging: &Path, target: &Path) -> anyhow::Result<()> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    let appeared = || {
        format!(
            "cannot move the new project into {} (did something else create it meanwhile?)",
            target.display()
        )
    };
    let is_dir = std::fs::symlink_metadata(target).is_ok_and(|m| m.is_dir());
    if !is_dir {
        return renameat_with(CWD, staging, CWD, target, RenameFlags::NOREPLACE)
            .map_err(std::io::Error::from)
            .with_context(appeared);
    }
    refuse_existing(target)?;
    let mut moved = Vec::new();
    let mut result = Ok(());
    for entry in
        std::fs::read_dir(staging).with_context(|| format!("cannot read {}", staging.display()))?
    {
        let from = match entry {
            Ok(entry) => entry.path(),
            Err(e) => {
                result = Err(
                    anyhow::Error::new(e).context(format!("cannot read {}", staging.display()))
                );
                break;
            }
        };
        let to = target.join(from.file_name().unwrap_or_default());
        if let Err(e) = renameat_with(CWD, &from, CWD, &to, RenameFlags::NOREPLACE) {
            result = Err(anyhow::Error::new(std::io::Error::from(e)).context(appeared()));
            break;
        }
        moved.push((from, to));
    }
    if result.is_err() {
        // Back into the staging directory, which is removed with them.
        for (from, to) in moved {
            if renameat_with(CWD, &to, CWD, &from, RenameFlags::NOREPLACE).is_err() {
                let _ = match std::fs::symlink_metadata(&to).is_ok_and(|m| m.is_dir()) {
                    true => std::fs::remove_dir_all(&to),
                    false => std::fs::remove_file(&to),
                };
            }
        }
        return result;
    }
    std::fs::remove_dir(staging).with_context(|| format!("cannot remove {}", staging.display()))
}

/// Writes every file into the directory `dir`.
pub(super) fn write_files(dir: &Path, files: &[ProjectFile]) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    for file in files {
        let path = dir.join(&file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let mode = if file.executable { 0o755 } else { 0o644 };
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&path)
            .and_then(|mut f| f.write_all(file.text.as_bytes()))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}
