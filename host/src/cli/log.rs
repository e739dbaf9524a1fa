//! The text log's fields, as tracing-subscriber's default formatter writes them, with every
//! control character of a value escaped ([`crate::report::escape_controls`]): a value that came
//! from outside (a file name, a replica id, a database's message) cannot start a forged log line
//! or drive the terminal of whoever tails the log. Field names, separators and ANSI colours stay
//! the formatter's. The JSON log needs none of this: serde escapes its strings.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{RecordFields, VisitOutput};
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::{DefaultVisitor, Writer};

use crate::report::EscapeControls;

/// A [`FormatFields`] for the text log: the default fields with control characters escaped.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct EscapedFields;

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = Escaping(DefaultVisitor::new(writer, true));
        fields.record(&mut visitor);
        visitor.0.finish()
    }
}

/// Hands each value to the default visitor wrapped in [`Escaped`].
struct Escaping<'a>(DefaultVisitor<'a>);

impl Visit for Escaping<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.record_debug(field, &Escaped(value));
    }

    // As the default visitor does: the message bare, other strings quoted.
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.record_debug(field, &format_args!("{value}"));
        } else {
            self.record_debug(field, &value);
        }
    }

    // As the default visitor does: `error=MESSAGE error.sources=[CAUSE, …]`, without italics.
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        match value.source() {
            Some(source) => {
                let sources: Vec<String> = std::iter::successors(Some(source), |e| (*e).source())
                    .map(ToString::to_string)
                    .collect();
                let sources = Sources(&sources);
                self.record_debug(
                    field,
                    &format_args!("{value} {}.sources={sources}", field.name()),
                );
            }
            None => self.record_debug(field, &format_args!("{value}")),
        }
    }
}

/// An error's causes as `[a, b]`.
struct Sources<'a>(&'a [String]);

impl fmt::Display for Sources<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, source) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(source)?;
        }
        f.write_str("]")
    }
}

/// A value's `Debug` text with its control characters escaped.
struct Escaped<'a>(&'a dyn fmt::Debug);

impl fmt::Debug for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::write(&mut EscapeControls(f), format_args!("{:?}", self.0))
    }
}

/// `directives` (a `RUST_LOG` value) with each one that names the lease layer by its old path
/// (`leasehold::lease`, `leasehold::lease::driver`, or all of `leasehold`) also given for the
/// crates the lease layer now lives in (`leasehold_lease`, `leasehold_lease_core`), whose log
/// lines carry those targets: a filter written for an earlier release keeps working.
pub(crate) fn lease_targets(directives: &str) -> String {
    let mut out: Vec<String> = directives.split(',').map(str::to_string).collect();
    for directive in directives.split(',') {
        let (target, level) = match directive.split_once('=') {
            Some((target, level)) => (target.trim(), Some(level)),
            None => (directive.trim(), None),
        };
        let with = |target: String| match level {
            Some(level) => format!("{target}={level}"),
            None => target,
        };
        if target == "leasehold" {
            out.push(with("leasehold_lease".into()));
            out.push(with("leasehold_lease_core".into()));
        } else if let Some(rest) = target.strip_prefix("leasehold::lease")
            && (rest.is_empty() || rest.starts_with("::"))
        {
            out.push(with(format!("leasehold_lease{rest}")));
            if rest.is_empty() {
                out.push(with("leasehold_lease_core".into()));
            }
        }
    }
    out.join(",")
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_filter_naming_the_lease_layer_by_its_old_path_also_names_its_crates() {
        assert_eq!(
            super::lease_targets("info,leasehold::lease=debug"),
            "info,leasehold::lease=debug,leasehold_lease=debug,leasehold_lease_core=debug"
        );
        assert_eq!(
            super::lease_targets("info,leasehold::lease::driver=debug"),
            "info,leasehold::lease::driver=debug,leasehold_lease::driver=debug"
        );
        assert_eq!(
            super::lease_targets("leasehold=trace"),
            "leasehold=trace,leasehold_lease=trace,leasehold_lease_core=trace"
        );
        assert_eq!(super::lease_targets("warn,sqlx=error"), "warn,sqlx=error");
        assert_eq!(
            super::lease_targets("leasehold::leases=debug"),
            "leasehold::leases=debug"
        );
    }

    use super::*;

    /// What one event logs through the text formatter, with or without colours.
    fn logged(ansi: bool, emit: impl FnOnce()) -> String {
        let sink = crate::report::CapturedLog::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(sink.clone())
            .with_ansi(ansi)
            .without_time()
            .fmt_fields(EscapedFields)
            .finish();
        tracing::subscriber::with_default(subscriber, emit);
        sink.text()
    }

    #[test]
    fn values_from_outside_stay_on_their_line_and_drive_no_terminal() {
        let name = "x\u{1b}]0;pwned\u{7}\u{1b}[2J\nINFO forged";
        let line = logged(false, || {
            let span = tracing::info_span!("plugin", plugin = %name);
            let _in = span.enter();
            tracing::error!(path = %name, quoted = name, n = 3, "invalid plugin: {name}");
        });
        assert_eq!(line.lines().count(), 1, "{line:?}");
        assert!(
            !line.chars().any(|c| c.is_control() && c != '\n'),
            "{line:?}"
        );
        let escaped = "x\\u{1b}]0;pwned\\u{7}\\u{1b}[2J\\nINFO forged";
        assert!(
            line.contains(&format!("plugin{{plugin={escaped}}}")),
            "{line:?}"
        );
        assert!(
            line.contains(&format!("invalid plugin: {escaped} path={escaped}")),
            "{line:?}"
        );
        assert!(line.contains(" n=3"), "{line:?}");
    }

    #[derive(Debug, thiserror::Error)]
    #[error("cannot renew")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn plain_values_log_as_the_default_formatter_logs_them_colours_included() {
        let emits: [fn(); 2] = [
            || tracing::warn!(lease = "leader", epoch = 7, holder = %"a-1", "held"),
            || {
                let error = Outer(std::io::Error::other("timed out"));
                tracing::warn!(error = &error as &(dyn std::error::Error + 'static), "lost");
            },
        ];
        for (ansi, emit) in [(false, emits[0]), (true, emits[0]), (false, emits[1])] {
            let ours = logged(ansi, emit);
            let sink = crate::report::CapturedLog::default();
            let subscriber = tracing_subscriber::fmt()
                .with_writer(sink.clone())
                .with_ansi(ansi)
                .without_time()
                .finish();
            tracing::subscriber::with_default(subscriber, emit);
            let theirs = sink.text();
            assert_eq!(ours, theirs);
            assert_eq!(ours.contains('\u{1b}'), ansi, "{ours:?}");
        }
    }
}
