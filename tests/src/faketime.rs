//! A wall clock the tests can step: libfaketime preloaded into a process (a `leasehold` host or a
//! PostgreSQL server) reads its offset from a file on every call, so writing the file steps the
//! process's realtime clock at once, like `date -s` or an NTP step. Monotonic clocks are left
//! alone (`FAKETIME_DONT_FAKE_MONOTONIC=1`), as a real step leaves them.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};

/// Where Debian's `libfaketime` package puts the library.
const LIBRARY: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// A steppable wall clock shared by every process started with [`SteppedClock::env`].
#[derive(Debug)]
pub struct SteppedClock {
    /// The offset file the processes read.
    file: PathBuf,
    /// Keeps the file's directory alive.
    _dir: tempfile::TempDir,
}

impl SteppedClock {
    /// A clock at offset zero; fails when libfaketime is not installed.
    pub fn new() -> anyhow::Result<Self> {
        if !std::path::Path::new(LIBRARY).is_file() {
            bail!(
                "{LIBRARY} is missing: install Debian's libfaketime package (scripts/install-deps.sh does)"
            );
        }
        let dir = tempfile::Builder::new()
            .prefix("leasehold-clock-")
            .tempdir()?;
        // Readable by the server's own user, which is not the test's when tests run as root.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )?;
        let clock = SteppedClock {
            file: dir.path().join("offset"),
            _dir: dir,
        };
        clock.set(Duration::ZERO)?;
        Ok(clock)
    }

    /// The environment that makes a process follow this clock.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("LD_PRELOAD", LIBRARY.to_string()),
            ("FAKETIME_TIMESTAMP_FILE", self.file.display().to_string()),
            // Read the file on every call, so a step is seen at once.
            ("FAKETIME_NO_CACHE", "1".to_string()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_string()),
        ]
    }

    /// Sets the offset from the real wall clock (a forward step when it grows).
    pub fn set(&self, ahead: Duration) -> anyhow::Result<()> {
        let tmp = self.file.with_extension("tmp");
        std::fs::write(&tmp, format!("+{:.3}\n", ahead.as_secs_f64()))?;
        // Atomic, so a process never reads a half-written offset.
        std::fs::rename(&tmp, &self.file).context("writing the clock offset")?;
        std::fs::set_permissions(
            &self.file,
            std::os::unix::fs::PermissionsExt::from_mode(0o644),
        )?;
        Ok(())
    }
}
