//! Write to the host's log.
//!
//! Each line is tagged by the host with the plugin's name, its lease and the epoch, and shown
//! with the host's own logs, filtered by the host's log level. The host may drop lines from a
//! call that logs excessively.
//!
//! The macros [`trace!`](crate::trace), [`debug!`](crate::debug), [`info!`](crate::info),
//! [`warn!`](crate::warn) and [`error!`](crate::error) take what [`format!`] takes; the functions
//! of the same names take a `&str`:
//!
//! ```no_run
//! use leasehold_guest::{info, log, warn};
//! use std::time::Duration;
//!
//! let (n, table) = (3, "orders");
//! info!("reconciled {n} objects in {table}");
//! warn!("retrying {} after {:?}", table, Duration::from_secs(2));
//! log::debug("a line without arguments");
//! ```
//!
//! The macros are also reachable through this module (`log::info!(...)`).
//!
//! Outside a WebAssembly build (for instance in a crate's native unit tests), lines go to stderr
//! as `[Info] message`; while a [`testing::Fake`](crate::testing::Fake) is installed they are
//! also kept for the test to read.

use std::fmt;

#[doc(inline)]
pub use crate::{debug, error, info, trace, warn};

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
    {
        crate::testing::with_fake(|fake| fake.log(level, message));
        eprintln!("[{level:?}] {message}");
    }
}

/// Writes one line at the given level from [`format_args!`]; what the macros call. A message
/// without arguments is sent as it is, without a copy.
pub fn log_args(level: Level, args: fmt::Arguments<'_>) {
    match args.as_str() {
        Some(text) => log(level, text),
        None => log(level, &args.to_string()),
    }
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

/// Writes one line at trace level to the host's log, formatted like [`format!`]:
/// `trace!("row {id}: {state:?}")`.
#[macro_export]
macro_rules! trace {
    ($($arg:tt)+) => {
        $crate::log::log_args($crate::log::Level::Trace, ::core::format_args!($($arg)+))
    };
}

/// Writes one line at debug level to the host's log, formatted like [`format!`]:
/// `debug!("notification on {channel}")`.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)+) => {
        $crate::log::log_args($crate::log::Level::Debug, ::core::format_args!($($arg)+))
    };
}

/// Writes one line at info level to the host's log, formatted like [`format!`]:
/// `info!("tick {} of epoch {}", ctx.tick(), ctx.epoch())`.
#[macro_export]
macro_rules! info {
    ($($arg:tt)+) => {
        $crate::log::log_args($crate::log::Level::Info, ::core::format_args!($($arg)+))
    };
}

/// Writes one line at warn level to the host's log, formatted like [`format!`]:
/// `warn!("sweep refused at epoch {epoch}")`.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)+) => {
        $crate::log::log_args($crate::log::Level::Warn, ::core::format_args!($($arg)+))
    };
}

/// Writes one line at error level to the host's log, formatted like [`format!`]:
/// `error!("giving up on {key}: {e}")`.
#[macro_export]
macro_rules! error {
    ($($arg:tt)+) => {
        $crate::log::log_args($crate::log::Level::Error, ::core::format_args!($($arg)+))
    };
}

#[cfg(test)]
mod tests {
    use super::Level;
    use crate::testing::Fake;

    #[test]
    fn macros_format_like_format() {
        let fake = Fake::new();
        let (n, table) = (3, "orders");
        crate::trace!("t {n}");
        crate::debug!("d {}", n + 1);
        crate::info!("reconciled {n} objects in {table}");
        crate::warn!("w {:?}", std::time::Duration::from_millis(1500),);
        crate::error!("plain, {{braces}}");
        super::info!("through the module");
        super::info("the function");
        let lines: Vec<(Level, String)> = fake
            .logs()
            .into_iter()
            .map(|l| (l.level, l.message))
            .collect();
        assert_eq!(
            lines,
            [
                (Level::Trace, "t 3".to_string()),
                (Level::Debug, "d 4".into()),
                (Level::Info, "reconciled 3 objects in orders".into()),
                (Level::Warn, "w 1.5s".into()),
                (Level::Error, "plain, {braces}".into()),
                (Level::Info, "through the module".into()),
                (Level::Info, "the function".into()),
            ]
        );
    }

    #[test]
    fn without_a_fake_lines_only_go_to_stderr() {
        crate::info!("nobody keeps this {}", 1);
        let fake = Fake::new();
        assert!(fake.logs().is_empty());
    }
}
