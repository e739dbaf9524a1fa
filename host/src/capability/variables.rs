//! Which of the host's environment variables a plugin's manifest may name as its database URL
//! (`[grants.sql] database_url_env`). The plugin directory is often written by people and
//! pipelines not trusted with the host's secrets; without a list, a manifest could name the host's
//! own `LEASEHOLD_DATABASE_URL` (its role owns the lease tables) or any secret the process holds.
//! The operator sets the list (`[grants] url_variables` in the config file); the host's own
//! `LEASEHOLD_*` settings are refused whatever it says.

/// Patterns of variable names: `NAME`, `PREFIX*` or `*SUFFIX`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlVariables {
    /// The patterns, as written.
    patterns: Vec<String>,
}

/// Names ending in `_DATABASE_URL`: the usual name of a variable that holds a database URL, and
/// so of the ones an operator hands the host for its plugins; no credential of another kind (a
/// cloud key, a token) is reached.
pub(crate) const DEFAULT_URL_VARIABLES: &[&str] = &["*_DATABASE_URL"];

/// The prefix of the host's own settings, its database URL among them: never a plugin's.
const HOST_PREFIX: &str = "LEASEHOLD_";

/// Why a list of patterns was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid url variable pattern {pattern:?}: use a variable name of letters, digits and _, with at most one * at its start or its end"
)]
pub struct PatternError {
    /// The pattern.
    pub pattern: String,
}

impl Default for UrlVariables {
    fn default() -> Self {
        UrlVariables {
            patterns: DEFAULT_URL_VARIABLES
                .iter()
                .map(|p| p.to_string())
                .collect(),
        }
    }
}

impl UrlVariables {
    /// The list of `patterns`, each checked.
    pub fn new(patterns: Vec<String>) -> Result<Self, PatternError> {
        for pattern in &patterns {
            let name = pattern
                .strip_prefix('*')
                .or_else(|| pattern.strip_suffix('*'))
                .unwrap_or(pattern);
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(PatternError {
                    pattern: pattern.clone(),
                });
            }
        }
        Ok(UrlVariables { patterns })
    }

    /// The patterns, as written.
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// Whether a manifest may name `name`.
    pub fn allows(&self, name: &str) -> bool {
        if name.starts_with(HOST_PREFIX) {
            return false;
        }
        self.patterns.iter().any(|p| {
            if let Some(suffix) = p.strip_prefix('*') {
                name.len() > suffix.len() && name.ends_with(suffix)
            } else if let Some(prefix) = p.strip_suffix('*') {
                name.len() > prefix.len() && name.starts_with(prefix)
            } else {
                name == p
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::UrlVariables;

    #[test]
    fn the_default_allows_database_urls_and_never_the_host_s_own() {
        let allowed = UrlVariables::default();
        assert!(allowed.allows("APP_DATABASE_URL"));
        for name in [
            "LEASEHOLD_DATABASE_URL",
            "_DATABASE_URL",
            "AWS_SECRET_ACCESS_KEY",
            "DATABASE_URL_X",
            "PATH",
        ] {
            assert!(!allowed.allows(name), "{name}");
        }
    }

    #[test]
    fn prefixes_suffixes_and_names_match_as_written() {
        let allowed = UrlVariables::new(vec!["PLUGIN_*".into(), "BILLING_URL".into(), "*".into()]);
        assert!(allowed.is_err(), "a bare * allows every secret");
        let allowed = UrlVariables::new(vec!["PLUGIN_*".into(), "BILLING_URL".into()]).unwrap();
        assert!(allowed.allows("PLUGIN_A"));
        assert!(allowed.allows("BILLING_URL"));
        assert!(!allowed.allows("BILLING_URL2"));
        assert!(!allowed.allows("PLUGIN_"));
        let only_host = UrlVariables::new(vec!["LEASEHOLD_*".into()]).unwrap();
        assert!(!only_host.allows("LEASEHOLD_DATABASE_URL"));
        for bad in ["", "A B", "*A*", "A*B", "$X"] {
            assert!(UrlVariables::new(vec![bad.into()]).is_err(), "{bad:?}");
        }
    }
}
