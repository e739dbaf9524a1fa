//! The database URL: which backend it names, and a redacted form safe to print.

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
        "database URL {0:?} names no SQLite file: expected sqlite:PATH, e.g. sqlite:./leasehold.db"
    )]
    MissingPath(String),
}

impl DatabaseUrl {
    /// The embedded default: a SQLite file in the working directory, so `leasehold run` needs no setup.
    pub fn default_sqlite() -> Self {
        DatabaseUrl::Sqlite {
            path: PathBuf::from("./leasehold.db"),
        }
    }

    /// Parses a URL by its scheme.
    pub fn parse(raw: &str) -> Result<Self, UrlError> {
        let raw = raw.trim();
        if raw.starts_with("postgres://") || raw.starts_with("postgresql://") {
            return Ok(DatabaseUrl::Postgres(raw.to_string()));
        }
        if let Some(rest) = raw.strip_prefix("sqlite:") {
            // sqlite://PATH and sqlite:PATH both mean PATH; options after '?' are ours to set.
            let rest = rest.strip_prefix("//").unwrap_or(rest);
            let path = rest.split('?').next().unwrap_or_default();
            if path.is_empty() {
                return Err(UrlError::MissingPath(redact(raw)));
            }
            return Ok(DatabaseUrl::Sqlite {
                path: PathBuf::from(path),
            });
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
                path: "./a.db".into()
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
