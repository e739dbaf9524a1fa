//! Plugin names: the one rule every plugin name keeps, checked where a name enters (a file of the
//! plugin directory, `leasehold check`, `leasehold new`). A name becomes a metric label value, a
//! log field, a `/status` key and a column of `leasehold status`, so it is kept to what none of
//! them needs to quote: lowercase ASCII letters, digits and `-`, starting with a letter, at most
//! [`MAX_NAME`] characters.

use std::ffi::OsStr;

/// The longest plugin name: long enough for any descriptive name, short enough for a table
/// column and a metric label.
pub(crate) const MAX_NAME: usize = 64;

/// The rule, as errors state it.
pub(crate) const RULE: &str =
    "lowercase ASCII letters, digits and '-', starting with a letter, at most 64 characters";

/// Why a name breaks the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The name is empty (a file named `.wasm`).
    #[error("empty; use {RULE}")]
    Empty,
    /// The name is longer than [`MAX_NAME`].
    #[error("{0} characters; use {RULE}")]
    TooLong(usize),
    /// The name starts with something other than a lowercase letter.
    #[error("starts with {0:?}; use {RULE}")]
    FirstNotLetter(char),
    /// The name holds a character outside the rule (shown escaped).
    #[error("holds {0:?}; use {RULE}")]
    Character(char),
}

/// Checks `name` against the rule.
pub fn check(name: &str) -> Result<(), NameError> {
    let mut chars = name.chars();
    let first = chars.next().ok_or(NameError::Empty)?;
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return Err(NameError::Character(c));
    }
    if !first.is_ascii_lowercase() {
        return Err(NameError::FirstNotLetter(first));
    }
    if name.len() > MAX_NAME {
        return Err(NameError::TooLong(name.len()));
    }
    Ok(())
}

/// The plugin name a component file's stem (its name without `.wasm`) gives, if it keeps the
/// rule; a stem that is not UTF-8 breaks it.
pub fn of_stem(stem: &OsStr) -> Result<&str, NameError> {
    let name = stem
        .to_str()
        .ok_or(NameError::Character(char::REPLACEMENT_CHARACTER))?;
    check(name).map(|()| name)
}

/// A file stem as it may be shown when it breaks the rule: not UTF-8 replaced by U+FFFD, and
/// `\` and control characters escaped, so it stays on its line, drives no terminal, and no two
/// file names show the same unless one of them is not UTF-8.
pub fn shown(stem: &OsStr) -> String {
    let lossy = stem.to_string_lossy();
    let text = lossy.replace('\\', "\\\\");
    crate::report::escape_controls(&text).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_lowercase_letters_digits_and_dashes_starting_with_a_letter() {
        for ok in [
            "a",
            "hello-reconciler",
            "misbehave",
            "p2",
            &"a".repeat(MAX_NAME),
        ] {
            check(ok).unwrap_or_else(|e| panic!("{ok:?}: {e}"));
        }
        for (bad, error) in [
            ("", NameError::Empty),
            ("2fast", NameError::FirstNotLetter('2')),
            ("-x", NameError::FirstNotLetter('-')),
            ("My", NameError::Character('M')),
            ("my_plugin", NameError::Character('_')),
            ("a b", NameError::Character(' ')),
            ("café", NameError::Character('é')),
            ("evil\"} 1", NameError::Character('"')),
            ("x\u{1b}]0;pwned", NameError::Character('\u{1b}')),
            (&"a".repeat(MAX_NAME + 1), NameError::TooLong(MAX_NAME + 1)),
        ] {
            assert_eq!(check(bad), Err(error), "{bad:?}");
        }
        let e = NameError::Character('\u{1b}').to_string();
        assert!(e.starts_with("holds '\\u{1b}'; use lowercase"), "{e}");
    }

    #[test]
    fn a_shown_name_is_one_line_of_plain_text() {
        assert_eq!(
            shown(OsStr::new("evil\"} 1\nx{a=\"b\"} 1\n#")),
            "evil\"} 1\\nx{a=\"b\"} 1\\n#"
        );
        assert_eq!(
            shown(OsStr::new("\u{1b}]0;pwned\u{7}\u{1b}[2J")),
            "\\u{1b}]0;pwned\\u{7}\\u{1b}[2J"
        );
        assert_ne!(shown(OsStr::new("a\\nb")), shown(OsStr::new("a\nb")));
        use std::os::unix::ffi::OsStrExt;
        assert_eq!(shown(OsStr::from_bytes(b"a\xffb")), "a\u{fffd}b");
    }
}
