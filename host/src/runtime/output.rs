//! What a guest prints: its stdout and stderr, captured in memory per store (WASI grants it no
//! other place to write) and logged line by line after each call, tagged with the plugin.

use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;

use super::host::LeaseView;

/// Bytes of guest stdout/stderr kept per store; a guest that prints more gets write errors.
const OUTPUT_CAPACITY: usize = 1 << 20;

/// Lines per stream and call that reach the log: a guest printing in a loop cannot flood it.
const LINES_PER_CALL: usize = 200;

/// One store's stdout and stderr, and how much of each has been logged.
pub(super) struct GuestOutput {
    /// The guest's stdout.
    stdout: MemoryOutputPipe,
    /// The guest's stderr.
    stderr: MemoryOutputPipe,
    /// Bytes of stdout and stderr logged already.
    seen: (usize, usize),
}

impl GuestOutput {
    /// Fresh pipes, wired into `wasi` as the guest's stdout and stderr.
    pub(super) fn capture(wasi: &mut WasiCtxBuilder) -> Self {
        let stdout = MemoryOutputPipe::new(OUTPUT_CAPACITY);
        let stderr = MemoryOutputPipe::new(OUTPUT_CAPACITY);
        wasi.stdout(stdout.clone()).stderr(stderr.clone());
        GuestOutput {
            stdout,
            stderr,
            seen: (0, 0),
        }
    }

    /// Logs what the guest printed since the last flush, with the plugin's name and lease.
    pub(super) fn flush(&mut self, plugin: &str, lease: &LeaseView) {
        for (name, pipe, seen) in [
            ("stdout", &self.stdout, &mut self.seen.0),
            ("stderr", &self.stderr, &mut self.seen.1),
        ] {
            let contents = pipe.contents();
            if contents.len() <= *seen {
                continue;
            }
            let fresh = String::from_utf8_lossy(&contents[*seen..]);
            *seen = contents.len();
            for line in fresh
                .lines()
                .filter(|l| !l.trim().is_empty())
                .take(LINES_PER_CALL)
            {
                let line = super::host::guest_text(line.to_string());
                tracing::info!(plugin, lease = %lease.name, stream = name, "{line}");
            }
        }
    }
}
