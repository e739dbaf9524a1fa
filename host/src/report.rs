//! One line from an error and its causes, for the places an error leaves the program: the
//! command line's stderr, `/status` and `leasehold check`; and text from outside (a file name, a
//! flag, a database row) with its control characters escaped, so it stays on its line and cannot
//! drive the terminal that shows it.

use std::borrow::Cow;
use std::error::Error;
use std::fmt;

/// The error's message followed by each cause's, joined by `": "`. A cause whose message the
/// line already holds (an error that prints its source itself) is not repeated.
pub fn chain(error: &(dyn Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let text = e.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = e.source();
    }
    line
}

/// Each cause's message, outermost first, without the error's own: for JSON reports.
pub fn causes(error: &(dyn Error + 'static)) -> Vec<String> {
    std::iter::successors(error.source(), |e| (*e).source())
        .map(ToString::to_string)
        .collect()
}

/// `text` with every control character (C0, DEL, C1) written as Rust writes it in a literal
/// (`\n`, `\u{1b}`): one line, and nothing a terminal acts on. Other text is kept as it is.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    let _ = fmt::Write::write_str(&mut EscapeControls(&mut escaped), text);
    Cow::Owned(escaped)
}

/// A writer that passes text on with its control characters escaped as [`escape_controls`]
/// does, for text formatted straight into a log line or a table.
pub struct EscapeControls<W>(pub W);

impl<W: fmt::Write> fmt::Write for EscapeControls<W> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        let mut rest = text;
        while let Some(at) = rest.find(char::is_control) {
            self.0.write_str(&rest[..at])?;
            let c = rest[at..].chars().next().unwrap_or_default();
            for e in c.escape_default() {
                self.0.write_char(e)?;
            }
            rest = &rest[at + c.len_utf8()..];
        }
        self.0.write_str(rest)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_text_is_one_line_a_terminal_only_prints() {
        assert_eq!(escape_controls("plain é ✓"), "plain é ✓");
        assert!(matches!(escape_controls("plain"), Cow::Borrowed(_)));
        assert_eq!(
            escape_controls("\u{1b}]0;pwned\u{7}\u{1b}[2J\nINFO x\r\t\u{7f}\u{9b}"),
            "\\u{1b}]0;pwned\\u{7}\\u{1b}[2J\\nINFO x\\r\\t\\u{7f}\\u{9b}"
        );
    }

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
