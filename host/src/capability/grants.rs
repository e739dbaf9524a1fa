//! What one plugin file was granted by its manifest ([`Grants`]), resolved at load, and what one
//! store may use ([`PluginCapabilities`]).

use std::sync::Arc;

use super::error::GrantError;
use super::host::Capabilities;
use super::{events, sql};
use crate::lease::DatabaseUrl;
use crate::manifest::Manifest;

/// What one plugin file was granted by its manifest.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    /// `[grants] kv = true`.
    pub kv: bool,
    /// What the plugin may keep in kv.
    pub kv_quota: crate::manifest::KvQuota,
    /// `[grants.sql]`, resolved: its pool is shared by every term of this file.
    pub sql: Option<Arc<sql::SqlGrant>>,
    /// `[events] channels`, with the database they are listened on.
    pub events: Option<Arc<events::EventSource>>,
}

impl Grants {
    /// Resolves what `manifest` grants plugin `plugin`: reads the sql grant's URL from `env` and
    /// picks the database events are listened on. Errors name the manifest key at fault.
    pub fn resolve(
        plugin: &str,
        manifest: &Manifest,
        host: &Capabilities,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Grants, GrantError> {
        let sql = match &manifest.grants.sql {
            None => None,
            Some(spec) => {
                if !host.url_variables().allows(&spec.database_url_env) {
                    return Err(GrantError::UrlVariableNotAllowed {
                        env: spec.database_url_env.clone(),
                        allowed: host.url_variables().patterns().to_vec(),
                    });
                }
                Some(Arc::new(sql::SqlGrant::resolve(plugin, spec, env)?))
            }
        };
        let events = if manifest.events.is_empty() {
            None
        } else {
            let (options, database) = match (&sql, host.lease_url()) {
                (Some(grant), _) => (
                    grant.connect_options().clone(),
                    format!("the database of {}", grant.spec().database_url_env),
                ),
                (None, DatabaseUrl::Postgres(raw)) => (
                    crate::lease::pg_options(raw)
                        .map_err(|reason| GrantError::EventsOptions { reason })?,
                    "the lease database".to_string(),
                ),
                (None, DatabaseUrl::Sqlite { .. }) => {
                    return Err(GrantError::EventsNeedPostgres);
                }
            };
            Some(Arc::new(events::EventSource::new(
                manifest.events.clone(),
                options,
                database,
            )))
        };
        Ok(Grants {
            kv: manifest.grants.kv,
            kv_quota: manifest.grants.kv_quota,
            sql,
            events,
        })
    }
}

/// The capabilities one store (one term of one plugin) may use.
#[derive(Debug, Clone)]
pub struct PluginCapabilities {
    /// The plugin, which scopes its kv keys.
    pub plugin: Arc<str>,
    /// The process's capabilities.
    pub host: Arc<Capabilities>,
    /// The plugin's grants.
    pub grants: Grants,
}
