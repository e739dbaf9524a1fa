//! The database URL: which backend it names, and a redacted form safe to print.
//!
//! A SQLite URL must name one file that every replica on the machine shares, for as long as the
//! leases live: the file is the only place their epochs are kept. So [`DatabaseUrl::parse`]
//! refuses an in-memory database (private to one process, gone at exit: every replica would lead
//! and every restart would hand out epoch 1 again), and turns a relative path into an absolute one
//! against the working directory, once, when the process starts: from then on logs, errors and
//! every later open name the same file, whatever directory the next replica is started from.

use std::fmt;
use std::path::PathBuf;

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

/// Why a database URL was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UrlError {
    /// The URL names no backend leasehold knows.
    #[error(
        "unsupported database URL {0:?}: expected postgres://USER@HOST/DB, postgresql://… or sqlite:PATH"
    )]
    UnsupportedScheme(String),
    /// A `sqlite:` URL without a path.
    #[error(
        "database URL {0:?} names no SQLite file: expected sqlite:PATH, e.g. sqlite:/var/lib/leasehold/leases.db"
    )]
    MissingPath(String),
    /// An in-memory SQLite database (`:memory:`, `file::memory:`, `mode=memory`, `vfs=memdb`).
    #[error(
        "database URL {0:?} is an in-memory SQLite database: it lives inside one process and ends with it, so every replica would lead at once and every restart would reuse epoch 1; use a file all replicas on this machine share, e.g. sqlite:/var/lib/leasehold/leases.db, or PostgreSQL across machines"
    )]
    InMemory(String),
    /// A SQLite URI filename (`sqlite:file:…`): its parameters and relative paths are SQLite's to
    /// interpret, so the file it names cannot be made absolute or checked here.
    #[error(
        "database URL {0:?} is a SQLite URI filename (file:…), which leasehold does not take: give the file's path, e.g. sqlite:/var/lib/leasehold/leases.db"
    )]
    UriFilename(String),
    /// A relative SQLite path that cannot be made absolute (no working directory).
    #[error(
        "database URL {url:?} has a relative path that cannot be resolved ({reason}): give an absolute path, e.g. sqlite:/var/lib/leasehold/leases.db"
    )]
    RelativePath {
        /// The URL.
        url: String,
        /// Why the working directory is unknown.
        reason: String,
    },
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
            return Ok(DatabaseUrl::Postgres(raw.to_string()));
        }
        if let Some(rest) = raw.strip_prefix("sqlite:") {
            // sqlite://PATH and sqlite:PATH both mean PATH; options after '?' are ours to set.
            let rest = rest.strip_prefix("//").unwrap_or(rest);
            let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
            if is_in_memory(path, query) {
                return Err(UrlError::InMemory(redact(raw)));
            }
            if path.is_empty() {
                return Err(UrlError::MissingPath(redact(raw)));
            }
            if path.starts_with("file:") {
                return Err(UrlError::UriFilename(redact(raw)));
            }
            let given = PathBuf::from(path);
            if given.is_absolute() {
                return Ok(DatabaseUrl::Sqlite { path: given });
            }
            // The same relative path names another file in each working directory: two replicas
            // started from two directories would each lead on their own file.
            let path = std::path::absolute(&given).map_err(|e| UrlError::RelativePath {
                url: redact(raw),
                reason: e.to_string(),
            })?;
            tracing::info!(
                given = %given.display(),
                path = %path.display(),
                "relative SQLite path resolved against the working directory"
            );
            return Ok(DatabaseUrl::Sqlite { path });
        }
        Err(UrlError::UnsupportedScheme(redact(raw)))
    }

    /// The backend's short name, for logs and `/status`.
    pub fn backend(&self) -> &'static str {
        match self {
            DatabaseUrl::Postgres(_) => "postgres",
            DatabaseUrl::Sqlite { .. } => "sqlite",
        }
    }
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

impl fmt::Display for RawUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact(&self.0))
    }
}

impl fmt::Debug for RawUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RawUrl({self})")
    }
}

/// Replaces the password of `scheme://user:password@host…` (and a `password=` query value) with `***`.
pub fn redact(url: &str) -> String {
    let mut out = url.to_string();
    if let Some(scheme_end) = out.find("://") {
        let authority_start = scheme_end + 3;
        let authority_end = out[authority_start..]
            .find(['/', '?'])
            .map_or(out.len(), |i| authority_start + i);
        if let Some(at) = out[authority_start..authority_end].rfind('@') {
            let userinfo = &out[authority_start..authority_start + at];
            if let Some(colon) = userinfo.find(':') {
                let start = authority_start + colon + 1;
                out.replace_range(start..authority_start + at, "***");
            }
        }
    }
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => kv.to_string(),
            })
            .collect();
        out = format!("{head}{}", query.join("&"));
    }
    out
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
        assert!(matches!(
            DatabaseUrl::parse("mysql://u:secret@h/db"),
            Err(UrlError::UnsupportedScheme(s)) if !s.contains("secret")
        ));
        assert!(matches!(
            DatabaseUrl::parse("sqlite:"),
            Err(UrlError::MissingPath(_))
        ));
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
            assert!(matches!(e, UrlError::InMemory(_)), "{raw}: {e}");
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
        assert!(matches!(
            DatabaseUrl::parse("sqlite:file:leases.db"),
            Err(UrlError::UriFilename(_))
        ));
        assert!(matches!(
            DatabaseUrl::parse("sqlite:file:///tmp/leases.db"),
            Err(UrlError::UriFilename(_))
        ));
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
}
