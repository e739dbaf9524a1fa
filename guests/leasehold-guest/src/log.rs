//! Write to the host's log.
//!
//! Each line is tagged by the host with the plugin's name, its lease and the epoch, and shown
//! with the host's own logs, filtered by the host's log level. The host may drop lines from a
//! call that logs excessively.
//!
//! ```no_run
//! use leasehold_guest::log;
//!
//! log::info("reconciled 3 objects");
//! log::warn(&format!("retrying {} after {:?}", "orders", std::time::Duration::from_secs(2)));
//! ```
//!
//! Outside a WebAssembly build (for instance in a crate's native unit tests), lines go to stderr.

/// How severe a log line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Very detailed tracing, usually off.
    Trace,
    /// Detail useful when debugging the plugin.
    Debug,
    /// Normal operation worth recording.
    Info,
    /// Something unexpected that the plugin handled.
    Warn,
    /// Something failed.
    Error,
}

/// Writes one line at the given level.
pub fn log(level: Level, message: &str) {
    #[cfg(target_arch = "wasm32")]
    {
        use crate::__private::wit_log::{self, Level as L};
        let level = match level {
            Level::Trace => L::Trace,
            Level::Debug => L::Debug,
            Level::Info => L::Info,
            Level::Warn => L::Warn,
            Level::Error => L::Error,
        };
        wit_log::log(level, message);
    }
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("[{level:?}] {message}");
}

/// Writes one line at trace level.
pub fn trace(message: &str) {
    log(Level::Trace, message)
}

/// Writes one line at debug level.
pub fn debug(message: &str) {
    log(Level::Debug, message)
}

/// Writes one line at info level.
pub fn info(message: &str) {
    log(Level::Info, message)
}

/// Writes one line at warn level.
pub fn warn(message: &str) {
    log(Level::Warn, message)
}

/// Writes one line at error level.
pub fn error(message: &str) {
    log(Level::Error, message)
}
