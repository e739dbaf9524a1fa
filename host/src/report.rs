//! One line from an error and its causes, for the places an error leaves the program: the
//! command line's stderr, `/status` and `leasehold check`; and text from outside (a file name, a
//! flag, a database row) with its control characters escaped, so it stays on its line and cannot
//! drive the terminal that shows it; text from a guest, also cut to a bounded length.

use std::borrow::Cow;
use std::error::Error;

pub use leasehold_lease_core::text::{
    EscapeControls, driver_text, duration, escape_controls, similar,
};

/// The error's message followed by each cause's, joined by `": "`. A cause whose message the
/// line already holds (an error that prints its source itself) is not repeated.
pub fn chain(error: &(dyn Error + 'static)) -> String {
    let mut line = driver_text(&error.to_string());
    let mut cause = error.source();
    while let Some(e) = cause {
        // Compared as shown: an error that tidied its cause's text into its own still holds it.
        let text = driver_text(&e.to_string());
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = e.source();
    }
    driver_text(&line)
}

/// Each cause's message, outermost first, without the error's own: for JSON reports.
pub fn causes(error: &(dyn Error + 'static)) -> Vec<String> {
    std::iter::successors(error.source(), |e| (*e).source())
        .map(ToString::to_string)
        .collect()
}

/// `text` cut to at most `max` bytes on a character boundary, with `mark` after the cut; as it is
/// when it fits.
pub fn cut_at(mut text: String, max: usize, mark: &str) -> String {
    if text.len() > max {
        let mut at = max;
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.truncate(at);
        text.push_str(mark);
    }
    text
}

/// The longest text kept from a guest (a log line, an error); longer text is cut so a guest
/// cannot flood a line or `/status`.
pub(crate) const MAX_GUEST_TEXT: usize = 8 * 1024;

/// Text a guest hands the host (a log line, an error) as the host shows it: at most
/// [`MAX_GUEST_TEXT`] bytes, on one line, with its control characters escaped as
/// [`escape_controls`] does, so a guest cannot forge host log lines or bloat `/status`.
pub fn guest_text(text: String) -> String {
    // Cut first (the guest may hand over megabytes), escape, then cut what escaping added.
    let cut = |text: String| cut_at(text, MAX_GUEST_TEXT, "… (truncated)");
    let text = cut(text);
    match escape_controls(&text) {
        Cow::Borrowed(_) => text,
        Cow::Owned(escaped) => cut(escaped),
    }
}

/// Where a TOML parser stopped and why, without the text around it: a manifest that is a link to
/// a file of secrets (`/proc/self/environ`), or a config file's line holding a database password,
/// must not show its content in `/status`, the log or on the command line.
pub fn toml_error(text: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim_end();
    match error.span() {
        Some(span) => {
            let before = text.get(..span.start).unwrap_or(text);
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("line {line}, column {column}: {message}")
        }
        None => message.to_string(),
    }
}

/// A log writer that a test reads back, for the tests of how the host's log lines read
/// (`cli::log`, `runtime::host`).
#[cfg(test)]
#[derive(Clone, Default)]
pub(crate) struct CapturedLog(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

#[cfg(test)]
impl CapturedLog {
    /// Everything written so far.
    pub(crate) fn text(&self) -> String {
        let bytes = self.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

#[cfg(test)]
impl std::io::Write for CapturedLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut bytes) = self.0.lock() {
            bytes.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for CapturedLog {
    type Writer = CapturedLog;
    fn make_writer(&'a self) -> CapturedLog {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn guest_text_is_one_bounded_line_that_keeps_its_letters() {
        use super::{MAX_GUEST_TEXT, guest_text};
        assert_eq!(guest_text("héllo".into()), "héllo");
        assert_eq!(
            guest_text("a\nINFO forged\r\u{1b}[31m".into()),
            "a\\nINFO forged\\r\\u{1b}[31m"
        );
        let long = guest_text("é\n".repeat(100_000));
        assert!(
            long.len() <= MAX_GUEST_TEXT + "… (truncated)".len(),
            "{}",
            long.len()
        );
        assert!(long.ends_with("… (truncated)") && !long.contains('\n'));
    }

    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("plugin.wasm: cannot read")]
    struct Plain(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("config.toml: {0}")]
    struct PrintsItsSource(#[source] std::io::Error);

    #[test]
    fn a_chain_names_every_cause_once() {
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        assert_eq!(
            chain(&Plain(io())),
            "plugin.wasm: cannot read: no such file"
        );
        assert_eq!(chain(&PrintsItsSource(io())), "config.toml: no such file");
        assert_eq!(causes(&Plain(io())), ["no such file"]);
    }
}
