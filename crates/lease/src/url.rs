//! The database URL: which backend it names, and a redacted form safe to print.
//!
//! A SQLite URL must name one file that every replica on the machine shares, for as long as the
//! leases live: the file is the only place their epochs are kept. So [`DatabaseUrl::parse`]
//! refuses an in-memory database (private to one process, gone at exit: every replica would lead
//! and every restart would hand out epoch 1 again), and turns a relative path into an absolute one
//! against the working directory, once, when the process starts: from then on logs, errors and
//! every later open name the same file, whatever directory the next replica is started from.
//!
//! A URL's password must never be printed, whatever it holds. [`redact`] hides everything from
//! the userinfo's `:` to the last `@` (a `/ ? # @ :` or space in the password cannot end it
//! early), query passwords and any query value the driver does not read, and keyword-string
//! passwords. A value that did not parse is not echoed at all: [`UrlError`] carries no part of
//! it, and callers name the flag, variable or key it came from ([`UrlError::from_origin`]).
//! [`pg_options`] is the one way to the driver's options: it drops query parameters the driver
//! would log with their values, and [`scrub`]s its errors. [`DatabaseUrl::plaintext_host`] tells
//! a remote PostgreSQL URL that would silently fall back to `sslmode=prefer`.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;
use std::path::PathBuf;
use std::str::FromStr;

use sqlx::postgres::PgConnectOptions;

/// A parsed database URL. `Display` and `Debug` never show a password.
#[derive(Clone, PartialEq, Eq)]
pub enum DatabaseUrl {
    /// `postgres://…` or `postgresql://…`, kept verbatim for the driver.
    Postgres(String),
    /// `sqlite:PATH` or `sqlite://PATH`; the file is created when missing.
    Sqlite {
        /// The database file.
        path: PathBuf,
    },
}

/// Why a database URL was refused. The text never holds the URL, which may carry a password
/// (in a place the redaction cannot be sure of, when it did not parse): it reads as the end of
/// a sentence whose start names where the URL came from ("the database URL in
/// LEASEHOLD_DATABASE_URL …"), see [`UrlError::from_origin`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UrlError {
    /// The URL names no backend leasehold knows.
    #[error(
        "is not a postgres://, postgresql:// or sqlite: URL: expected postgres://USER@HOST/DB or sqlite:PATH"
    )]
    UnsupportedScheme,
    /// A libpq keyword connection string (`host=… password=…`) instead of a URL.
    #[error(
        "is a keyword connection string (host=… dbname=…), which leasehold does not take: write it as a URL, postgres://USER:PASSWORD@HOST:PORT/DB, percent-encoding / ? # @ : and spaces in the password"
    )]
    KeywordForm,
    /// The PostgreSQL driver cannot read the URL.
    #[error(
        "cannot be read by the PostgreSQL driver ({reason}): percent-encode / ? # @ : and spaces in the user name and password"
    )]
    Postgres {
        /// The driver's reason, which never holds the URL or its password.
        reason: String,
    },
    /// A `sqlite:` URL without a path.
    #[error("names no SQLite file: expected sqlite:PATH, e.g. sqlite:/var/lib/leasehold/leases.db")]
    MissingPath,
    /// An in-memory SQLite database (`:memory:`, `file::memory:`, `mode=memory`, `vfs=memdb`).
    #[error(
        "is an in-memory SQLite database: it lives inside one process and ends with it, so every replica would lead at once and every restart would reuse epoch 1; use a file all replicas on this machine share, e.g. sqlite:/var/lib/leasehold/leases.db, or PostgreSQL across machines"
    )]
    InMemory,
    /// A SQLite URI filename (`sqlite:file:…`): its parameters and relative paths are SQLite's to
    /// interpret, so the file it names cannot be made absolute or checked here.
    #[error(
        "is a SQLite URI filename (file:…), which leasehold does not take: give the file's path, e.g. sqlite:/var/lib/leasehold/leases.db"
    )]
    UriFilename,
    /// A query parameter neither the driver nor leasehold reads: a misspelt one (`sslmde`) would
    /// be ignored, and the connection made without what it asked for (TLS, a certificate check).
    #[error(
        "has a query parameter {} that {backend} does not read{}: remove it or correct its name",
        name.as_deref().map_or("(its name not shown: it may be part of a password with an unescaped &)".to_string(), |n| format!("{n:?}")),
        did_you_mean.as_deref().map_or(String::new(), |d| format!(" (did you mean {d:?}?)"))
    )]
    UnknownParameter {
        /// The parameter's name, when it can be shown: a word without `=`, or one that is not a
        /// plain name, may be a piece of a password.
        name: Option<String>,
        /// Which backend refused it: "the PostgreSQL driver" or "SQLite".
        backend: &'static str,
        /// The known parameter it is closest to.
        did_you_mean: Option<String>,
    },
    /// A file a parameter names (`sslrootcert`, `sslcert`, `sslkey`) does not exist: the driver
    /// would fail at the first TLS handshake without naming it.
    #[error("names {parameter} = {path:?}, which is not a file that can be read ({reason})")]
    MissingFile {
        /// The parameter.
        parameter: String,
        /// The path as given.
        path: String,
        /// Why it cannot be read.
        reason: String,
    },
    /// A relative SQLite path that cannot be made absolute (no working directory).
    #[error(
        "has a relative path that cannot be resolved ({reason}): give an absolute path, e.g. sqlite:/var/lib/leasehold/leases.db"
    )]
    RelativePath {
        /// Why the working directory is unknown.
        reason: String,
    },
}

/// A [`UrlError`] with where the URL came from: "the database URL in ORIGIN is not …".
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the database URL in {origin} {error}")]
pub struct UrlFromError {
    /// Where the URL came from: a flag, a variable or a config key.
    pub origin: String,
    /// Why it was refused.
    pub error: UrlError,
}

impl UrlError {
    /// This error, naming `origin` (a flag, variable or config key) as where the URL came from.
    pub fn from_origin(self, origin: impl Into<String>) -> UrlFromError {
        UrlFromError {
            origin: origin.into(),
            error: self,
        }
    }
}

impl DatabaseUrl {
    /// The URL of the embedded default, a SQLite file in the working directory, so `leasehold run`
    /// needs no setup.
    pub const DEFAULT_SQLITE: &'static str = "sqlite:./leasehold.db";

    /// The embedded default ([`Self::DEFAULT_SQLITE`]), made absolute like any relative path.
    /// Without a working directory it stays relative (and opening it fails).
    pub fn default_sqlite() -> Self {
        Self::parse(Self::DEFAULT_SQLITE).unwrap_or_else(|_| DatabaseUrl::Sqlite {
            path: PathBuf::from("./leasehold.db"),
        })
    }

    /// Parses a URL by its scheme. A relative SQLite path is resolved against the working
    /// directory now, and the absolute path is logged.
    pub fn parse(raw: &str) -> Result<Self, UrlError> {
        let raw = raw.trim();
        if raw.starts_with("postgres://") || raw.starts_with("postgresql://") {
            // Read by the driver now: a URL it cannot use is refused here, with its reason and
            // without its text, rather than at the first connection.
            check_parameters(raw, DRIVER_PARAMETERS, "the PostgreSQL driver")?;
            pg_options(raw)?;
            check_files(raw)?;
            return Ok(DatabaseUrl::Postgres(raw.to_string()));
        }
        if let Some(rest) = raw.strip_prefix("sqlite:") {
            // sqlite://PATH and sqlite:PATH both mean PATH; options after '?' are ours to set.
            let rest = rest.strip_prefix("//").unwrap_or(rest);
            let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
            if is_in_memory(path, query) {
                return Err(UrlError::InMemory);
            }
            check_parameters(&format!("sqlite:?{query}"), SQLITE_PARAMETERS, "SQLite")?;
            if path.is_empty() {
                return Err(UrlError::MissingPath);
            }
            if path.starts_with("file:") {
                return Err(UrlError::UriFilename);
            }
            let given = PathBuf::from(path);
            if given.is_absolute() {
                return Ok(DatabaseUrl::Sqlite { path: given });
            }
            // The same relative path names another file in each working directory: two replicas
            // started from two directories would each lead on their own file.
            let path = std::path::absolute(&given).map_err(|e| UrlError::RelativePath {
                reason: e.to_string(),
            })?;
            tracing::info!(
                given = %given.display(),
                path = %path.display(),
                "relative SQLite path resolved against the working directory"
            );
            return Ok(DatabaseUrl::Sqlite { path });
        }
        if !raw.contains("://") && raw.contains('=') {
            return Err(UrlError::KeywordForm);
        }
        Err(UrlError::UnsupportedScheme)
    }

    /// The host this PostgreSQL URL reaches across a network without asking for TLS: it is not a
    /// Unix socket or a loopback address, and neither the URL nor `PGSSLMODE` (read with `env`)
    /// sets `sslmode`, so the driver's default, `prefer`, applies: TLS when the server offers it,
    /// never checked against a certificate, and silently none when it does not. `None` for SQLite.
    pub fn plaintext_host(&self, env: impl Fn(&str) -> Option<String>) -> Option<String> {
        let DatabaseUrl::Postgres(raw) = self else {
            return None;
        };
        let sets_sslmode = raw.split_once('?').is_some_and(|(_, query)| {
            query
                .split('&')
                .any(|kv| matches!(kv.split_once('='), Some(("sslmode" | "ssl-mode", _))))
        });
        if sets_sslmode || env("PGSSLMODE").is_some() {
            return None;
        }
        let options = pg_options(raw).ok()?;
        if options.get_socket().is_some() {
            return None;
        }
        let host = options.get_host();
        let ip = host.trim_start_matches('[').trim_end_matches(']');
        let local = host.starts_with('/')
            || host.eq_ignore_ascii_case("localhost")
            || ip
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        (!local).then(|| host.to_string())
    }

    /// The warning for [`Self::plaintext_host`], naming the host and `what` the URL is of (the
    /// lease database, a plugin's grant), never the password.
    pub fn plaintext_warning(
        &self,
        what: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Option<String> {
        self.plaintext_host(env).map(|host| {
            format!(
                "the PostgreSQL URL of {what} reaches {host} without sslmode: the driver's default, prefer, uses TLS only if the server offers it, checks no certificate, and otherwise sends the password and every statement in the clear; add ?sslmode=verify-full (or require, or disable to say so)"
            )
        })
    }

    /// The backend's short name, for logs and `/status`.
    pub fn backend(&self) -> &'static str {
        match self {
            DatabaseUrl::Postgres(_) => "postgres",
            DatabaseUrl::Sqlite { .. } => "sqlite",
        }
    }
}

/// Refuses a query parameter of `raw` that is not one of `known` (nor `options[NAME]`), naming
/// it when it is a plain name, with the known one it is closest to.
fn check_parameters(raw: &str, known: &[&str], backend: &'static str) -> Result<(), UrlError> {
    // After the last `@`, when there is one: a `?` before it is the password's own.
    let after_at = raw.rfind('@').map_or(raw, |at| &raw[at + 1..]);
    let Some((_, query)) = after_at.split_once('?') else {
        return Ok(());
    };
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let key = pair.split_once('=').map(|(k, _)| k);
        let decoded = key.map(percent_decoded);
        let Some(key) = decoded.as_deref() else {
            return Err(UrlError::UnknownParameter {
                name: None,
                backend,
                did_you_mean: None,
            });
        };
        if known.contains(&key) || key.starts_with("options[") {
            continue;
        }
        let plain = key.len() <= 40
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        let did_you_mean = crate::text::similar(key, known.iter().copied())
            .first()
            .map(|k| k.to_string());
        return Err(UrlError::UnknownParameter {
            name: plain.then(|| key.to_string()),
            backend,
            did_you_mean: did_you_mean.filter(|_| plain),
        });
    }
    Ok(())
}

/// Refuses a certificate or key parameter naming a file that cannot be read.
fn check_files(raw: &str) -> Result<(), UrlError> {
    let Ok(url) = url::Url::parse(raw) else {
        return Ok(());
    };
    for (key, value) in url.query_pairs() {
        let names_file = [
            "sslrootcert",
            "ssl-root-cert",
            "ssl-ca",
            "sslcert",
            "ssl-cert",
            "sslkey",
            "ssl-key",
        ]
        .contains(&key.as_ref());
        // `system` is libpq's word for the system's roots, not a file.
        if !names_file || value == "system" {
            continue;
        }
        if let Err(e) = std::fs::File::open(value.as_ref()) {
            return Err(UrlError::MissingFile {
                parameter: key.into_owned(),
                path: value.into_owned(),
                reason: e.to_string(),
            });
        }
    }
    Ok(())
}

/// Whether the SQLite part of a URL (after `sqlite:` and `//`, split at `?`) asks for an
/// in-memory database, in any of the spellings SQLite or sqlx accept.
fn is_in_memory(path: &str, query: &str) -> bool {
    path.strip_prefix("file:").unwrap_or(path) == ":memory:"
        || query.split('&').any(|kv| {
            matches!(
                kv.split_once('='),
                Some((k, v)) if (k.eq_ignore_ascii_case("mode") && v.eq_ignore_ascii_case("memory"))
                    || (k.eq_ignore_ascii_case("vfs") && v.eq_ignore_ascii_case("memdb"))
            )
        })
}

impl std::str::FromStr for DatabaseUrl {
    type Err = UrlError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DatabaseUrl::Postgres(url) => f.write_str(&redact(url)),
            DatabaseUrl::Sqlite { path } => write!(f, "sqlite:{}", path.display()),
        }
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DatabaseUrl({self})")
    }
}

/// A database URL as given (flag, environment, config file), before parsing: `Debug` and
/// `Display` show it redacted, so printing the arguments or the config file never shows a password.
#[derive(Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub struct RawUrl(String);

impl RawUrl {
    /// The URL itself, password included: for the driver only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for RawUrl {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(RawUrl(s.to_string()))
    }
}

impl From<&str> for RawUrl {
    fn from(s: &str) -> Self {
        RawUrl(s.to_string())
    }
}

/// Redacted when it has a scheme leasehold knows; anything else (a keyword string, a value
/// given by mistake) is not shown at all, as where its password is cannot be known.
impl fmt::Display for RawUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let url = self.0.trim();
        if ["postgres://", "postgresql://", "sqlite:"]
            .iter()
            .any(|scheme| url.starts_with(scheme))
        {
            f.write_str(&redact(url))
        } else {
            f.write_str("(not shown: not a database URL)")
        }
    }
}

impl fmt::Debug for RawUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RawUrl({self})")
    }
}

/// Replaces every password in `url` with `***`: the userinfo's from its first `:` to the last `@`
/// of the whole string (so a `/ ? # : @` or a space in the password cannot end it early), a
/// `password=` query value and any query value the driver would not read, and a `password=`
/// value of a keyword connection string (`host=h password='a b'`). When it cannot tell, it hides
/// more rather than less.
pub fn redact(url: &str) -> String {
    let mut out = url.to_string();
    for span in secret_spans(url, true).into_iter().rev() {
        out.replace_range(span, "***");
    }
    out
}

/// Whether `url` holds a password (in its userinfo, a `password=` query value, or a keyword
/// string's `password`), which [`redact`] would hide.
pub fn holds_password(url: &str) -> bool {
    !secret_spans(url, false).is_empty()
}

/// Replaces `url`, and each password it holds (as written and percent-decoded), with their
/// redacted forms wherever they appear in `text`: for a driver's message about `url`.
pub fn scrub(text: &str, url: &str) -> String {
    let mut out = text.replace(url, &redact(url));
    let mut secrets: Vec<String> = secret_spans(url, false)
        .into_iter()
        .flat_map(|span| {
            let written = &url[span];
            [
                written.to_string(),
                percent_decoded(written),
                unquoted(written),
            ]
        })
        .filter(|s| !s.is_empty())
        .collect();
    // The longest first, so that a password holding another is replaced whole.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    for secret in secrets {
        out = out.replace(&secret, "***");
    }
    out
}

/// The query parameters the PostgreSQL driver reads (sqlx 0.9's
/// `PgConnectOptions::parse_from_url`, besides `options[NAME]`). It logs any other one at warn
/// *with its value*, and ignores it: [`pg_options`] drops them first.
const DRIVER_PARAMETERS: &[&str] = &[
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
];

/// The query parameters of a `sqlite:` URL, whose values are shown.
const SQLITE_PARAMETERS: &[&str] = &["mode", "cache", "vfs"];

/// Whether the value of query parameter `key` may be shown: the driver's but the password, and
/// SQLite's. Any other value is hidden, as a misspelt `passwd=` may hold a password all the same.
fn shown(key: &str) -> bool {
    (DRIVER_PARAMETERS.contains(&key) && key != "password") || SQLITE_PARAMETERS.contains(&key)
}

/// The byte ranges of the passwords in `url` (with `unknown_values`, of every query value not in
/// [`shown`] too), sorted and merged.
fn secret_spans(url: &str, unknown_values: bool) -> Vec<Range<usize>> {
    let mut spans = Vec::new();
    if let Some(scheme_end) = url.find("://") {
        let start = scheme_end + 3;
        let last_at = url[start..].rfind('@').map(|i| start + i);
        if let Some(at) = last_at
            && let Some(colon) = url[start..at].find(':')
        {
            spans.push(start + colon + 1..at);
        }
        // Where the host starts: a `?` or `&` before it is the password's own, already hidden.
        let host = last_at.map_or(start, |at| at + 1);
        // Query values, split at `?` as well as `&`: a `?` inside the password must not hide a
        // `password=` after it.
        if let Some(q) = url[start..].find('?').map(|i| start + i) {
            let mut at = q + 1;
            for pair in url[q + 1..].split(['?', '&']) {
                match pair.split_once('=') {
                    Some((key, _)) if key.eq_ignore_ascii_case("password") => {
                        spans.push(at + key.len() + 1..at + pair.len());
                    }
                    Some((key, _)) if unknown_values && at >= host && !shown(key) => {
                        spans.push(at + key.len() + 1..at + pair.len());
                    }
                    // A word without `=`: a piece of a password with a raw `&` in it, perhaps.
                    None if unknown_values && at >= host => spans.push(at..at + pair.len()),
                    _ => {}
                }
                at += pair.len() + 1;
            }
        }
    } else if url.contains('=') {
        spans.extend(keyword_password_spans(url));
    }
    spans.retain(|s| !s.is_empty());
    spans.sort_by_key(|s| s.start);
    let mut merged: Vec<Range<usize>> = Vec::new();
    for span in spans {
        match merged.last_mut() {
            Some(last) if span.start <= last.end => last.end = last.end.max(span.end),
            _ => merged.push(span),
        }
    }
    merged
}

/// The ranges of `password` values in a libpq keyword connection string: `key = value` pairs
/// apart by whitespace, a value either bare (to the next whitespace) or in single quotes, with
/// `\'` and `\\` escaped.
fn keyword_password_spans(text: &str) -> Vec<Range<usize>> {
    let bytes = text.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    let skip_space = |mut i: usize| {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    while i < bytes.len() {
        i = skip_space(i);
        let key_start = i;
        while i < bytes.len() && bytes[i] != b'=' && !bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let key = &text[key_start..i];
        i = skip_space(i);
        if i >= bytes.len() || bytes[i] != b'=' {
            // A word without a value: not a pair, and nothing to hide.
            continue;
        }
        i = skip_space(i + 1);
        let value_start = i;
        if bytes.get(i) == Some(&b'\'') {
            i += 1;
            while i < bytes.len() && bytes[i] != b'\'' {
                i = past_escape(text, i);
            }
            // The closing quote, or the end of an unterminated value.
            i = (i + 1).min(bytes.len());
        } else {
            while i < bytes.len() && !bytes[i].is_ascii_whitespace() {
                i = past_escape(text, i);
            }
        }
        if key.eq_ignore_ascii_case("password") {
            spans.push(value_start..i);
        }
    }
    spans
}

/// The index past the character at `i` of `text`, and past the one after it when it is a `\\`.
fn past_escape(text: &str, i: usize) -> usize {
    let next = |i: usize| i + text[i..].chars().next().map_or(1, char::len_utf8);
    let after = next(i);
    if text.as_bytes()[i] == b'\\' && after < text.len() {
        next(after)
    } else {
        after
    }
}

/// `text` with `%XX` escapes decoded (lossy), as the driver reads a URL's password.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A keyword value without its quotes and escapes, as libpq reads it.
fn unquoted(value: &str) -> String {
    let inner = value
        .strip_prefix('\'')
        .map(|v| v.strip_suffix('\'').unwrap_or(v))
        .unwrap_or(value);
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

/// The driver's connect options for a `postgres://` URL. Its error never holds the URL: the
/// driver's reason (e.g. "invalid port number"), with anything of the URL in it redacted.
pub fn pg_options(raw: &str) -> Result<PgConnectOptions, UrlError> {
    let (url, _) = driver_url(raw);
    PgConnectOptions::from_str(&url).map_err(|e| {
        let reason = match &e {
            sqlx::Error::Configuration(source) => source.to_string(),
            other => other.to_string(),
        };
        UrlError::Postgres {
            reason: scrub(&reason, raw),
        }
    })
}

/// `raw` without the query parameters the driver would ignore, which it would log with their
/// values (a misspelt `passwd=` or `Password=`), and how many there were. `raw` itself when it
/// has none, or does not parse (the driver then says why).
fn driver_url(raw: &str) -> (Cow<'_, str>, usize) {
    let Ok(mut url) = url::Url::parse(raw) else {
        return (Cow::Borrowed(raw), 0);
    };
    let (kept, dropped): (Vec<_>, Vec<_>) = url.query_pairs().into_owned().partition(|(key, _)| {
        DRIVER_PARAMETERS.contains(&key.as_str()) || key.starts_with("options[")
    });
    if dropped.is_empty() {
        return (Cow::Borrowed(raw), 0);
    }
    if kept.is_empty() {
        url.set_query(None);
    } else {
        url.query_pairs_mut().clear().extend_pairs(kept);
    }
    (Cow::Owned(url.to_string()), dropped.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_backends() {
        assert_eq!(
            DatabaseUrl::parse("sqlite:./a.db").unwrap(),
            DatabaseUrl::Sqlite {
                path: std::env::current_dir().unwrap().join("a.db")
            }
        );
        assert_eq!(
            DatabaseUrl::parse("sqlite:///tmp/a.db?mode=rwc").unwrap(),
            DatabaseUrl::Sqlite {
                path: "/tmp/a.db".into()
            }
        );
        assert_eq!(
            DatabaseUrl::parse("postgres://h/db").unwrap().backend(),
            "postgres"
        );
        assert_eq!(
            DatabaseUrl::parse("mysql://u:secret@h/db"),
            Err(UrlError::UnsupportedScheme)
        );
        assert_eq!(DatabaseUrl::parse("sqlite:"), Err(UrlError::MissingPath));
    }

    #[test]
    fn relative_sqlite_paths_become_absolute_against_the_working_directory() {
        let cwd = std::env::current_dir().unwrap();
        for (raw, file) in [
            ("sqlite:leases.db", "leases.db"),
            ("sqlite:./leases.db", "leases.db"),
            ("sqlite://data/leases.db?mode=rwc", "data/leases.db"),
            ("sqlite:../leases.db", "../leases.db"),
        ] {
            let DatabaseUrl::Sqlite { path } = DatabaseUrl::parse(raw).unwrap() else {
                panic!("{raw}: not sqlite");
            };
            assert!(path.is_absolute(), "{raw}: {}", path.display());
            assert_eq!(path, cwd.join(file), "{raw}");
        }
        let DatabaseUrl::Sqlite { path } = DatabaseUrl::default_sqlite() else {
            panic!("the default is not sqlite");
        };
        assert_eq!(path, cwd.join("leasehold.db"));
        assert_eq!(
            DatabaseUrl::default_sqlite().to_string(),
            format!("sqlite:{}", cwd.join("leasehold.db").display())
        );
    }

    #[test]
    fn in_memory_sqlite_databases_are_refused_with_the_reason() {
        for raw in [
            "sqlite::memory:",
            "sqlite://:memory:",
            "sqlite:file::memory:",
            "sqlite:file::memory:?cache=shared",
            "sqlite:file:leases?mode=memory&cache=shared",
            "sqlite:///tmp/leases.db?mode=memory",
            "sqlite://?MODE=Memory",
            "sqlite:/leases.db?vfs=memdb",
        ] {
            let e = DatabaseUrl::parse(raw).unwrap_err();
            assert_eq!(e, UrlError::InMemory, "{raw}: {e}");
            let text = e.to_string();
            assert!(
                text.contains("every replica would lead")
                    && text.contains("reuse epoch 1")
                    && text.contains("sqlite:/var/lib/leasehold/leases.db"),
                "{text}"
            );
        }
        // A file that merely has "memory" in its name is a file.
        assert!(DatabaseUrl::parse("sqlite:/tmp/memory.db?mode=rwc").is_ok());
    }

    #[test]
    fn sqlite_uri_filenames_are_refused() {
        // SQLite would read file:… as a URI with its own relative paths and parameters.
        assert_eq!(
            DatabaseUrl::parse("sqlite:file:leases.db"),
            Err(UrlError::UriFilename)
        );
        assert_eq!(
            DatabaseUrl::parse("sqlite:file:///tmp/leases.db"),
            Err(UrlError::UriFilename)
        );
    }

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            redact("postgres://u:p@ss@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(
            redact("postgres://h/db?user=u&password=x&sslmode=require"),
            "postgres://h/db?user=u&password=***&sslmode=require"
        );
        let url = DatabaseUrl::parse("postgresql://a:b@h/db").unwrap();
        assert_eq!(
            format!("{url} {url:?}"),
            "postgresql://a:***@h/db DatabaseUrl(postgresql://a:***@h/db)"
        );
    }

    #[test]
    fn a_password_is_found_wherever_a_url_or_keyword_string_holds_one() {
        for url in [
            "postgres://u:p@ss@h/db",
            "postgres://h/db?user=u&password=x",
            "postgres://u@h/db?sslmode=require&Password=x",
            "host=h password='a b'",
        ] {
            assert!(holds_password(url), "{url}");
        }
        for url in [
            "postgres://u@h/db",
            "postgres://h/db?sslmode=require",
            "sqlite:/var/lib/leasehold/leases.db",
            "postgres:///db?host=/run/postgresql",
        ] {
            assert!(!holds_password(url), "{url}");
        }
    }

    /// Passwords holding each character that ends a URL's authority early, or a space.
    const AWKWARD: &[&str] = &[
        "pa/ss", "pa?ss", "pa#ss", "p@ss", "pa:ss", "pa ss", "/?#@: x", "pa%2Fss",
    ];

    #[test]
    fn a_password_holding_slash_question_mark_hash_at_colon_or_space_is_redacted_whole() {
        for password in AWKWARD {
            for url in [
                format!("postgres://u:{password}@db.example:5432/app"),
                format!("postgresql://u:{password}@db.example/app?sslmode=require"),
                format!("postgres://u:{password}@/app?host=/run/postgresql"),
            ] {
                let shown = redact(&url);
                assert!(!shown.contains(password), "{url} -> {shown}");
                assert!(
                    shown.starts_with("postgres") && shown.contains("u:***@"),
                    "{shown}"
                );
            }
        }
        assert_eq!(
            redact("postgres://u:pa/ss@h/db"),
            "postgres://u:***@h/db",
            "the host and database stay readable"
        );
        assert_eq!(
            redact("postgres://u@h:5/db?sslmode=require&options=-c%20a%3D1"),
            "postgres://u@h:5/db?sslmode=require&options=-c%20a%3D1"
        );
    }

    #[test]
    fn a_query_password_is_redacted_whatever_the_authority_holds() {
        for url in [
            "postgres://h/db?user=u&password=s3cr3t&sslmode=require",
            "postgres://h/db?PASSWORD=s3cr3t",
            "postgres://u:a?b@h/db?password=s3cr3t",
            "postgres://h/db?password=s3cr3t@x",
            "postgres://h/db?password=s3c:r3t@x",
        ] {
            let shown = redact(url);
            for part in ["s3cr3t", "s3c", "r3t"] {
                assert!(!shown.contains(part), "{url} -> {shown}");
            }
        }
        assert_eq!(
            redact("postgres://h/db?user=u&password=x&sslmode=require"),
            "postgres://h/db?user=u&password=***&sslmode=require"
        );
    }

    #[test]
    fn a_keyword_connection_string_is_refused_and_its_password_redacted() {
        for (raw, secret) in [
            ("host=db.example password=s3cr3t dbname=app", "s3cr3t"),
            ("host=db.example password = s3cr3t", "s3cr3t"),
            ("password='a b s3cr3t' host=h", "s3cr3t"),
            (r"password='it\'s s3cr3t' host=h", "s3cr3t"),
            (r"password=back\ s3cr3t host=h", "s3cr3t"),
            ("user=u password='unterminated s3cr3t", "s3cr3t"),
            ("password=pässwörd-s3cr3t", "s3cr3t"),
        ] {
            assert_eq!(DatabaseUrl::parse(raw), Err(UrlError::KeywordForm), "{raw}");
            let shown = redact(raw);
            assert!(!shown.contains(secret), "{raw} -> {shown}");
            assert!(shown.contains("password"), "{shown}");
            let raw_url = RawUrl::from(raw);
            let printed = format!("{raw_url} {raw_url:?}");
            assert!(!printed.contains(secret), "{printed}");
        }
        assert_eq!(
            redact("host=h password='a b' dbname=app"),
            "host=h password=*** dbname=app"
        );
        let error = UrlError::KeywordForm.from_origin("LEASEHOLD_DATABASE_URL");
        assert!(
            error
                .to_string()
                .starts_with("the database URL in LEASEHOLD_DATABASE_URL is a keyword"),
            "{error}"
        );
    }

    #[test]
    fn a_url_the_driver_cannot_read_is_refused_without_echoing_it() {
        for password in AWKWARD {
            let raw = format!("postgres://leasehold:{password}-s3cr3t@db.example:5432/app");
            match DatabaseUrl::parse(&raw) {
                // '@', ':' and a percent-escape are read whole by the driver.
                Ok(url) => assert!(!url.to_string().contains("s3cr3t"), "{url}"),
                Err(e) => {
                    let text = e.from_origin("--database-url").to_string();
                    assert!(!text.contains("s3cr3t"), "{text}");
                    assert!(
                        text.contains("cannot be read by the PostgreSQL driver"),
                        "{text}"
                    );
                }
            }
        }
        for raw in [
            "postgres://u:s3cr3t@[::1/x",
            "postgres://u:s3cr3t@h:notaport/db",
            "postgres://u:s3cr3t@h/db?sslmode=s3cr3t",
            "postgres://u:s3cr3t@h/db?port=s3cr3t",
        ] {
            let e = DatabaseUrl::parse(raw).unwrap_err();
            assert!(matches!(e, UrlError::Postgres { .. }), "{raw}: {e}");
            assert!(!e.to_string().contains("s3cr3t"), "{raw}: {e}");
        }
        let gibberish = RawUrl::from("s3cr3t");
        assert!(!format!("{gibberish} {gibberish:?}").contains("s3cr3t"));
    }

    #[test]
    fn an_unknown_query_parameter_is_refused_by_name_with_the_one_it_is_close_to() {
        let e = DatabaseUrl::parse("postgres://u:s3cr3t@h/db?sslmde=verify-full").unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("\"sslmde\"") && text.contains("did you mean \"sslmode\"?"),
            "{text}"
        );
        let e = DatabaseUrl::parse("postgres://u@h/db?Password=s3cr3t").unwrap_err();
        assert!(e.to_string().contains("did you mean \"password\"?"), "{e}");
        assert!(!e.to_string().contains("s3cr3t"), "{e}");
        let e = DatabaseUrl::parse("postgres://u@h/db?password=a&s3cr3t").unwrap_err();
        assert!(
            matches!(e, UrlError::UnknownParameter { name: None, .. })
                && !e.to_string().contains("s3cr3t"),
            "{e}"
        );
        let e = DatabaseUrl::parse("sqlite:/tmp/a.db?mdoe=rwc").unwrap_err();
        assert!(
            e.to_string().contains("\"mdoe\"") && e.to_string().contains("SQLite"),
            "{e}"
        );
        assert!(
            DatabaseUrl::parse("postgres://u@h/db?sslmode=require&options[search_path]=a").is_ok()
        );
    }

    #[test]
    fn a_certificate_file_that_is_missing_is_named() {
        let e = DatabaseUrl::parse(
            "postgres://u@h/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.crt",
        )
        .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("sslrootcert = \"/nonexistent/ca.crt\"") && text.contains("No such file"),
            "{text}"
        );
    }

    #[test]
    fn a_parameter_the_driver_does_not_read_is_hidden_and_never_reaches_it() {
        let url = "postgres://u@h/db?sslmode=require&Password=s3cr3t&passwd=s3cr3t&pass&options[search_path]=a";
        let shown = redact(url);
        assert!(
            !shown.contains("s3cr3t") && !shown.contains("pass&"),
            "{shown}"
        );
        assert!(shown.contains("sslmode=require"), "{shown}");
        let (given, ignored) = driver_url(url);
        assert_eq!(ignored, 3);
        assert!(!given.contains("s3cr3t"), "{given}");
        assert!(
            given.contains("sslmode=require") && given.contains("search_path"),
            "{given}"
        );
        let options = pg_options(url).unwrap();
        assert_eq!(options.get_host(), "h");
        assert_eq!(options.get_options(), Some("-c search_path=a"));
        assert_eq!(driver_url("postgres://u@h/db?sslmode=require").1, 0);
    }

    #[test]
    fn a_driver_message_is_scrubbed_of_the_url_and_its_password() {
        let url = "postgres://u:pa%2Fs3cr3t@h/db?password=q-s3cr3t";
        let message = format!("failed for {url}: pa/s3cr3t, q-s3cr3t, pa%2Fs3cr3t");
        let shown = scrub(&message, url);
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("postgres://u:***@h/db"), "{shown}");
    }

    #[test]
    fn a_remote_postgres_url_without_sslmode_is_named_with_its_host_only() {
        let none = |_: &str| None;
        let remote = DatabaseUrl::parse("postgres://u:s3cr3t@db.example:5432/app").unwrap();
        assert_eq!(remote.plaintext_host(none), Some("db.example".into()));
        let warning = remote
            .plaintext_warning("LEASEHOLD_DATABASE_URL", none)
            .unwrap();
        assert!(
            warning.contains("db.example")
                && warning.contains("LEASEHOLD_DATABASE_URL")
                && warning.contains("sslmode")
                && !warning.contains("s3cr3t"),
            "{warning}"
        );
        for quiet in [
            "postgres://u:p@db.example/app?sslmode=require",
            "postgres://u:p@db.example/app?sslmode=disable",
            "postgres://u:p@db.example/app?ssl-mode=verify-full",
            "postgres://u:p@127.0.0.1/app",
            "postgres://u:p@127.8.0.1/app",
            "postgres://u:p@[::1]:5432/app",
            "postgres://u:p@localhost/app",
            "postgres:///app?host=/var/run/postgresql",
            "postgres://u:p@%2Fvar%2Frun%2Fpostgresql/app",
        ] {
            let url = DatabaseUrl::parse(quiet).unwrap();
            assert_eq!(url.plaintext_host(none), None, "{quiet}");
        }
        assert_eq!(
            remote.plaintext_host(|k| (k == "PGSSLMODE").then(|| "require".into())),
            None,
            "PGSSLMODE chooses for the URL"
        );
        assert_eq!(DatabaseUrl::default_sqlite().plaintext_host(none), None);
    }
}
