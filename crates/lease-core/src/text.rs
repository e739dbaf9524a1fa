//! Text shown to people, shared by the lease layer and the host: a duration as a person reads
//! it, a database driver's message tidied, text from outside with its control characters
//! escaped, and the nearest names for a "did you mean" hint. Pure.

use std::borrow::Cow;
use std::fmt;

/// A database driver's text made readable: without the PostgreSQL server's C source line the
/// driver appends to each server error (`… at line 3655`, which says nothing to an operator),
/// and without a repeated `error with configuration: ` prefix (the driver wraps its own).
pub fn driver_text(text: &str) -> String {
    const PREFIX: &str = "error with configuration: ";
    let mut out = text.replace(&PREFIX.repeat(2), PREFIX);
    let mut from = 0;
    while let Some(at) = out[from..].find(" at line ").map(|i| from + i) {
        let digits = out[at + 9..]
            .chars()
            .take_while(char::is_ascii_digit)
            .count();
        let end = at + 9 + digits;
        // The driver puts it at the end of the server's message: a line number followed by
        // more (`at line 2, column 3`) is someone else's.
        let ends_there = out[end..]
            .chars()
            .next()
            .is_none_or(|c| matches!(c, ':' | ')' | ';' | '\n'));
        if digits > 0 && ends_there {
            out.replace_range(at..end, "");
        } else {
            from = at + 9;
        }
    }
    out
}

/// `text` with every control character (C0, DEL, C1) and bidirectional override or isolate
/// written as Rust writes it in a literal (`\n`, `\u{1b}`, `\u{202e}`): one line, nothing a
/// terminal acts on, and read in the order it was written (an override would show a forged
/// name or line reversed). Other text is kept as it is.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_escaped) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    let _ = fmt::Write::write_str(&mut EscapeControls(&mut escaped), text);
    Cow::Owned(escaped)
}

/// Whether [`escape_controls`] escapes `c`: a control character (C0, DEL, C1), or one that
/// reorders the text around it (U+202A–202E: embeddings and overrides; U+2066–2069: isolates).
fn is_escaped(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A writer that passes text on with its control characters escaped as [`escape_controls`]
/// does, for text formatted straight into a log line or a table.
pub struct EscapeControls<W>(pub W);

impl<W: fmt::Write> fmt::Write for EscapeControls<W> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        let mut rest = text;
        while let Some(at) = rest.find(is_escaped) {
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

/// The candidates closest to `word` by edit distance (at most 2, and less than half its length,
/// so that short words do not match everything), nearest first: for "did you mean" hints.
pub fn similar<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let limit = 2.min(word.chars().count().saturating_sub(1) / 2).max(1);
    let mut found: Vec<(usize, &str)> = candidates
        .into_iter()
        .map(|c| (edit_distance(&word.to_lowercase(), &c.to_lowercase()), c))
        .filter(|(d, c)| *d <= limit && *c != word)
        .collect();
    found.sort();
    found.into_iter().map(|(_, c)| c).collect()
}

/// Edit distance by characters, a swap of two neighbours counting as one edit (`mdoe` is one
/// from `mode`): the optimal string alignment distance.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// A duration as a person reads it: whole days, hours or minutes when it is one (`24days`,
/// `2h`, `5m`), else seconds to the millisecond (`3.333s`, `15s`), or milliseconds under a
/// second (`250ms`, `0.5ms`). Each form reads back with `humantime` when it is whole; the
/// fraction of `3.333s` is only ever shown, never parsed.
pub fn duration(d: std::time::Duration) -> String {
    let secs = d.as_secs();
    let whole = d.subsec_nanos() == 0;
    match () {
        _ if whole && secs >= 86_400 && secs.is_multiple_of(86_400) => {
            format!("{}days", secs / 86_400)
        }
        _ if whole && secs >= 3_600 && secs.is_multiple_of(3_600) => format!("{}h", secs / 3_600),
        _ if whole && secs >= 60 && secs.is_multiple_of(60) => format!("{}m", secs / 60),
        _ if secs >= 1 => trimmed(format!("{:.3}", d.as_secs_f64()), "s"),
        _ => trimmed(format!("{:.3}", d.as_secs_f64() * 1000.0), "ms"),
    }
}

/// `number` without trailing zeros after its decimal point (nor the point itself), then `unit`.
fn trimmed(number: String, unit: &str) -> String {
    let number = match number.contains('.') {
        true => number.trim_end_matches('0').trim_end_matches('.'),
        false => number.as_str(),
    };
    format!("{number}{unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_s_source_line_and_a_doubled_prefix_are_left_out() {
        assert_eq!(
            super::driver_text(
                "campaign failed: error returned from database: canceling statement due to lock timeout at line 3655: x"
            ),
            "campaign failed: error returned from database: canceling statement due to lock timeout: x"
        );
        assert_eq!(
            super::driver_text(
                "a: error with configuration: error with configuration: b at line 12"
            ),
            "a: error with configuration: b"
        );
        assert_eq!(
            super::driver_text("at line 2, column 3"),
            "at line 2, column 3"
        );
        assert_eq!(
            super::driver_text("x at line 2, column 3"),
            "x at line 2, column 3"
        );
    }

    #[test]
    fn similar_words_are_found_by_a_few_edits_and_only_those() {
        let known = ["sslmode", "sslrootcert", "password", "host"];
        assert_eq!(super::similar("sslmde", known), ["sslmode"]);
        assert_eq!(super::similar("Password", known), ["password"]);
        assert_eq!(super::similar("passwd", known), ["password"]);
        assert!(super::similar("zzz", known).is_empty());
        assert!(super::similar("sslmode", known).is_empty(), "not itself");
        assert_eq!(super::similar("ledaer", ["leader", "jobs"]), ["leader"]);
        assert_eq!(super::similar("mdoe", ["mode", "cache", "vfs"]), ["mode"]);
    }

    #[test]
    fn durations_read_as_a_person_writes_them() {
        use std::time::Duration;
        let cases = [
            (Duration::from_secs(24 * 86_400), "24days"),
            (Duration::from_secs(7_200), "2h"),
            (Duration::from_secs(300), "5m"),
            (Duration::from_secs(15), "15s"),
            (Duration::from_nanos(3_333_333_333), "3.333s"),
            (Duration::from_millis(1_500), "1.5s"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_micros(500), "0.5ms"),
            (Duration::ZERO, "0ms"),
        ];
        for (d, shown) in cases {
            assert_eq!(super::duration(d), shown, "{d:?}");
        }
    }

    #[test]
    fn escaped_text_is_one_line_a_terminal_only_prints() {
        assert_eq!(escape_controls("plain é ✓"), "plain é ✓");
        assert!(matches!(escape_controls("plain"), Cow::Borrowed(_)));
        assert_eq!(
            escape_controls("\u{1b}]0;pwned\u{7}\u{1b}[2J\nINFO x\r\t\u{7f}\u{9b}"),
            "\\u{1b}]0;pwned\\u{7}\\u{1b}[2J\\nINFO x\\r\\t\\u{7f}\\u{9b}"
        );
    }

    #[test]
    fn bidirectional_overrides_and_isolates_are_escaped_so_text_reads_in_its_own_order() {
        // A name that shows as `invoiceexe.txt` on screen, and ends in `.exe`.
        assert_eq!(
            escape_controls("invoice\u{202e}txt.exe"),
            "invoice\\u{202e}txt.exe"
        );
        for c in ('\u{202a}'..='\u{202e}').chain('\u{2066}'..='\u{2069}') {
            let escaped = escape_controls(&format!("a{c}b")).into_owned();
            assert_eq!(escaped, format!("a\\u{{{:x}}}b", u32::from(c)));
        }
        // Marks that only hint a direction (U+200E, U+200F, U+061C), and letters of right-to-left
        // scripts, are text: kept.
        for kept in ["\u{200e}", "\u{200f}", "\u{61c}", "שלום", "مرحبا"] {
            assert_eq!(escape_controls(kept), kept);
        }
        let mut written = String::new();
        fmt::Write::write_str(&mut EscapeControls(&mut written), "x\u{2066}y").unwrap();
        assert_eq!(written, "x\\u{2066}y");
    }
}
