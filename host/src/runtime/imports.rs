//! The host side of the `kv` and `sql` imports: check the grant, build the fence from the store's
//! lease view, call into [`crate::capability`], and report refusals in the host's log.

use super::bindings::types::CapabilityError as WitError;
use super::bindings::{kv, sql};
use super::host::HostState;
use crate::capability::sql::{SqlGrant, SqlValue, Statement};
use crate::capability::{CapabilityError, Fence, PluginCapabilities};

impl From<CapabilityError> for WitError {
    fn from(e: CapabilityError) -> Self {
        let text = e.to_string();
        match e {
            CapabilityError::NotGranted { .. } | CapabilityError::GrantRefused(_) => {
                WitError::NotGranted(text)
            }
            CapabilityError::LeaseLost { .. } => WitError::LeaseLost,
            CapabilityError::Invalid(_) => WitError::Invalid(text),
            CapabilityError::TooLarge(_) | CapabilityError::QuotaExceeded(_) => {
                WitError::TooLarge(text)
            }
            CapabilityError::Database(_) => WitError::Database(text),
            CapabilityError::Unavailable(_) => WitError::Unavailable(text),
        }
    }
}

impl HostState {
    fn granted(
        &self,
        capability: &'static str,
        key: &'static str,
        has: impl Fn(&PluginCapabilities) -> bool,
    ) -> Result<PluginCapabilities, CapabilityError> {
        self.capabilities
            .as_ref()
            .filter(|c| has(c))
            .cloned()
            .ok_or(CapabilityError::NotGranted { capability, key })
    }

    fn sql_grant(&self) -> Result<(PluginCapabilities, std::sync::Arc<SqlGrant>), CapabilityError> {
        let caps = self.granted("sql", "[grants.sql]", |c| c.grants.sql.is_some())?;
        let grant = caps.grants.sql.clone().ok_or(CapabilityError::NotGranted {
            capability: "sql",
            key: "[grants.sql]",
        })?;
        Ok((caps, grant))
    }

    /// Runs one sql call as a task of the store's term, so that a statement it leaves in flight
    /// when the guest call is dropped is stopped on the server ([`SqlGrant::in_term`]). The
    /// returned future holds nothing of `self`.
    fn sql_call<T, W, F>(
        &self,
        grant: &std::sync::Arc<SqlGrant>,
        work: F,
    ) -> impl Future<Output = Result<T, CapabilityError>> + use<T, W, F>
    where
        T: Send + 'static,
        W: Future<Output = Result<T, CapabilityError>> + Send + 'static,
        F: FnOnce(std::sync::Arc<SqlGrant>) -> W,
    {
        let (grant, work, term) = (grant.clone(), work(grant.clone()), self.lease.term.clone());
        async move { grant.in_term(term.as_ref(), work).await }
    }

    fn fence(&self) -> Fence {
        Fence::new(
            self.lease.name.clone(),
            self.lease.holder.clone(),
            self.lease.term.clone(),
        )
    }

    /// Logs what the plugin will see go wrong; a refused write is worth a warning, since it means
    /// this replica kept working after losing the lease.
    fn report<T>(&mut self, op: &str, result: Result<T, CapabilityError>) -> Result<T, WitError> {
        if let Err(e) = &result {
            let plugin = &*self.plugin;
            let lease = &self.lease.name;
            let epoch = self.lease.term.as_ref().map(|t| t.epoch.get());
            match e {
                CapabilityError::LeaseLost { .. } => {
                    self.fenced_refusals += 1;
                    tracing::warn!(plugin, lease, epoch, op, "fenced write refused: {e}");
                }
                // The operator's to act on: the plugin's data outgrew what its manifest allows.
                CapabilityError::QuotaExceeded(_) => {
                    tracing::warn!(plugin, lease, epoch, op, "write refused: {e}");
                }
                _ => tracing::debug!(plugin, lease, epoch, op, kind = e.kind(), "{e}"),
            }
        }
        result.map_err(WitError::from)
    }
}

/// The manifest entry that grants `kv`.
const KV_GRANT: &str = "[grants] kv = true";

// The host functions compute everything they need from `self` first and then await only owned
// values: a future holding `&HostState` would need the (non-`Sync`) WASI state to be `Sync`.
impl kv::Host for HostState {
    async fn get(&mut self, key: String) -> Result<Option<Vec<u8>>, WitError> {
        let caps = self.granted("kv", KV_GRANT, |c| c.grants.kv);
        let result = match caps {
            Ok(caps) => async move { caps.host.kv().await?.get(&caps.plugin, &key).await }.await,
            Err(e) => Err(e),
        };
        self.report("kv get", result)
    }

    async fn put(&mut self, key: String, value: Vec<u8>) -> Result<(), WitError> {
        let fence = self.fence();
        let caps = self.granted("kv", KV_GRANT, |c| c.grants.kv);
        let result = match caps {
            Ok(caps) => {
                async move {
                    let kv = caps.host.kv().await?;
                    let quota = caps.grants.kv_quota;
                    kv.put_within(&fence, &caps.plugin, &key, &value, &quota)
                        .await
                }
                .await
            }
            Err(e) => Err(e),
        };
        self.report("kv put", result)
    }

    async fn delete(&mut self, key: String) -> Result<bool, WitError> {
        let fence = self.fence();
        let caps = self.granted("kv", KV_GRANT, |c| c.grants.kv);
        let result = match caps {
            Ok(caps) => {
                async move {
                    caps.host
                        .kv()
                        .await?
                        .delete(&fence, &caps.plugin, &key)
                        .await
                }
                .await
            }
            Err(e) => Err(e),
        };
        self.report("kv delete", result)
    }

    async fn list(
        &mut self,
        prefix: String,
        after: Option<String>,
        limit: u32,
    ) -> Result<kv::Page, WitError> {
        let caps = self.granted("kv", KV_GRANT, |c| c.grants.kv);
        let result = match caps {
            Ok(caps) => {
                async move {
                    let kv = caps.host.kv().await?;
                    kv.list(&caps.plugin, &prefix, after.as_deref(), limit)
                        .await
                }
                .await
            }
            Err(e) => Err(e),
        };
        self.report("kv list", result).map(|page| kv::Page {
            entries: page.entries,
            next: page.next,
        })
    }
}

fn from_wit(value: sql::Value) -> SqlValue {
    match value {
        sql::Value::Null => SqlValue::Null,
        sql::Value::Boolean(b) => SqlValue::Bool(b),
        sql::Value::Int(n) => SqlValue::Int(n),
        sql::Value::Float(f) => SqlValue::Float(f),
        sql::Value::Text(s) => SqlValue::Text(s),
        sql::Value::Bytes(b) => SqlValue::Bytes(b),
    }
}

fn to_wit(value: SqlValue) -> sql::Value {
    match value {
        SqlValue::Null => sql::Value::Null,
        SqlValue::Bool(b) => sql::Value::Boolean(b),
        SqlValue::Int(n) => sql::Value::Int(n),
        SqlValue::Float(f) => sql::Value::Float(f),
        SqlValue::Text(s) => sql::Value::Text(s),
        SqlValue::Bytes(b) => sql::Value::Bytes(b),
    }
}

impl sql::Host for HostState {
    async fn query(&mut self, sql: String, params: Vec<sql::Value>) -> Result<sql::Rows, WitError> {
        let params: Vec<SqlValue> = params.into_iter().map(from_wit).collect();
        let result = match self.sql_grant() {
            Ok((caps, grant)) => {
                self.sql_call(&grant, |g| async move {
                    g.query(&caps.host, &sql, &params).await
                })
                .await
            }
            Err(e) => Err(e),
        };
        self.report("sql query", result).map(|rows| sql::Rows {
            columns: rows.columns,
            rows: rows
                .rows
                .into_iter()
                .map(|row| row.into_iter().map(to_wit).collect())
                .collect(),
        })
    }

    async fn execute(&mut self, sql: String, params: Vec<sql::Value>) -> Result<u64, WitError> {
        let params: Vec<SqlValue> = params.into_iter().map(from_wit).collect();
        let fence = self.fence();
        let result = match self.sql_grant() {
            Ok((caps, grant)) => {
                self.sql_call(&grant, |g| async move {
                    g.execute(&caps.host, &fence, &sql, &params).await
                })
                .await
            }
            Err(e) => Err(e),
        };
        self.report("sql execute", result)
    }

    async fn transaction(&mut self, statements: Vec<sql::Statement>) -> Result<Vec<u64>, WitError> {
        let statements: Vec<Statement> = statements
            .into_iter()
            .map(|s| Statement {
                sql: s.sql,
                params: s.params.into_iter().map(from_wit).collect(),
            })
            .collect();
        let fence = self.fence();
        let result = match self.sql_grant() {
            Ok((caps, grant)) => {
                self.sql_call(&grant, |g| async move {
                    g.transaction(&caps.host, &fence, &statements).await
                })
                .await
            }
            Err(e) => Err(e),
        };
        self.report("sql transaction", result)
    }
}
