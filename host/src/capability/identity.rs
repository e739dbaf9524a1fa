//! Whether a sql grant reaches the lease database, and so must fence its writes.
//!
//! The host reads, on its own connection, the schema its lease store's `leasehold_leases` lives in
//! and the random id in `leasehold_database` beside it ([`LeaseDatabase`]). A grant then looks for
//! that very table in that very schema through the catalogs, with every name qualified: its role's
//! `search_path` (which may not list the schema, or may list a table of the same name or a
//! `pg_catalog` look-alike before it) never takes part, and neither does `pg_temp`. It reads the
//! id through `leasehold_database_id()`, which runs with its owner's rights: a grant's role needs
//! no privilege on any `leasehold_*` table, and one that holds any is refused
//! ([`LeaseDatabase::privileges_of`]).
//!
//! - no such table in that schema: positively another database, whose writes nothing fences;
//! - the table, holding the same id: the lease database, fenced;
//! - the table, holding another id: another leasehold installation's database, not fenced;
//! - anything else (the role may not read it, it has no row, the lookup failed): unknown, and a
//!   write that cannot be told apart from a write to the lease database is refused
//!   ([`Identity`] errors are never remembered, so the next write asks again).

use sqlx::postgres::{PgConnection, PgPool};

use crate::capability::error::CapabilityError;

/// The lease database as the host's own lease store sees it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct LeaseDatabase {
    /// The schema of the lease store's tables.
    pub schema: String,
    /// The random id in its `leasehold_database`.
    pub id: String,
    /// The key `leasehold_fence` asks of its caller, from `leasehold_fence_key`, which only the
    /// host's role may read: a plugin that could call the fence itself could hold a lease row's
    /// share lock, and so that lease's renewal, for as long as its transaction ran.
    pub fence_key: String,
}

/// The fence key is a secret.
impl std::fmt::Debug for LeaseDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseDatabase")
            .field("schema", &self.schema)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// Where a grant's writes go, as far as the fence is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Identity {
    /// The lease database: writes are fenced.
    LeaseDatabase,
    /// Positively another database (the reason, for the log): writes are not fenced.
    Other(&'static str),
}

/// `name` as a quoted identifier, so that any name reads as itself.
pub fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `"schema".table`.
pub fn qualified(schema: &str, table: &str) -> String {
    format!("{}.{table}", quoted(schema))
}

impl LeaseDatabase {
    /// Reads it on the host's pool. The schema is the one `leasehold_leases` resolves to there:
    /// the table whose rows the store's campaigns and renewals update, so the one a fence must
    /// lock; `leasehold_database` is created beside it.
    pub async fn read(pool: &PgPool) -> Result<Self, CapabilityError> {
        let err = |e: sqlx::Error| CapabilityError::from_driver("reading the lease database", &e);
        let schema: Option<String> = sqlx::query_scalar(
            "SELECT n.nspname::text
               FROM pg_catalog.pg_class c
               JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
              WHERE c.oid = pg_catalog.to_regclass('leasehold_leases')",
        )
        .fetch_optional(pool)
        .await
        .map_err(err)?;
        let schema = schema.ok_or_else(|| {
            CapabilityError::Unavailable(
                "the lease database has no leasehold_leases table: run `leasehold migrate`".into(),
            )
        })?;
        let id: Option<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT id FROM {}",
            qualified(&schema, "leasehold_database")
        )))
        .fetch_optional(pool)
        .await
        .map_err(err)?;
        let id = id.ok_or_else(|| {
            CapabilityError::Unavailable(format!(
                "{} has no row: run `leasehold migrate`",
                qualified(&schema, "leasehold_database")
            ))
        })?;
        let key_table = qualified(&schema, "leasehold_fence_key");
        let fence_key: Option<String> =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT key FROM {key_table}")))
                .fetch_optional(pool)
                .await
                .map_err(|e| {
                    CapabilityError::from_driver(
                        &format!("reading {key_table} (the host's role needs SELECT on it)"),
                        &e,
                    )
                })?;
        let fence_key = fence_key.ok_or_else(|| {
            CapabilityError::Unavailable(format!("{key_table} has no row: run `leasehold migrate`"))
        })?;
        Ok(LeaseDatabase {
            schema,
            id,
            fence_key,
        })
    }

    /// What the database `conn` is connected to is, compared with this one. `Err` when it
    /// cannot be told (see the module docs); the caller says what to do about it.
    pub async fn identify(&self, conn: &mut PgConnection) -> Result<Identity, Unidentified> {
        // Every name qualified, operators included: a role may put its own schema before
        // pg_catalog on its path.
        let present: bool = sqlx::query_scalar(
            "SELECT EXISTS (
                 SELECT FROM pg_catalog.pg_class c
                   JOIN pg_catalog.pg_namespace n
                     ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
                  WHERE n.nspname OPERATOR(pg_catalog.=) $1::pg_catalog.name
                    AND c.relname OPERATOR(pg_catalog.=) 'leasehold_database'::pg_catalog.name)",
        )
        .bind(&self.schema)
        .fetch_one(&mut *conn)
        .await
        .map_err(Unidentified::Driver)?;
        if !present {
            return Ok(Identity::Other("it has no leasehold_database table"));
        }
        // Through the owner's function: the grant's role may read no leasehold_* table.
        let id: Option<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT {}()",
            qualified(&self.schema, "leasehold_database_id")
        )))
        .fetch_one(&mut *conn)
        .await
        .map_err(Unidentified::Driver)?;
        match id {
            Some(id) if id == self.id => Ok(Identity::LeaseDatabase),
            Some(_) => Ok(Identity::Other(
                "it is the lease database of another leasehold installation",
            )),
            None => Err(Unidentified::NoRow),
        }
    }

    /// The `leasehold_*` tables of the lease schema that the role of `conn` holds any privilege
    /// on, of any kind, on the table or on a column, directly, through a role it inherits, or as
    /// a member of the table's owner (which it could `SET LOCAL ROLE` to); empty when none. A
    /// grant's role needs none: with `UPDATE` on `leasehold_leases` a plugin could end or extend
    /// any lease, with `SELECT` on `leasehold_kv` read every plugin's entries.
    pub async fn privileges_of(&self, conn: &mut PgConnection) -> Result<Vec<String>, sqlx::Error> {
        sqlx::query_scalar(
            "SELECT c.relname::pg_catalog.text
               FROM pg_catalog.pg_class c
               JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
              WHERE n.nspname OPERATOR(pg_catalog.=) $1::pg_catalog.name
                AND c.relname OPERATOR(pg_catalog.~~) 'leasehold\\_%'
                AND c.relkind OPERATOR(pg_catalog.=)
                    ANY (ARRAY['r', 'p', 'v', 'm', 'f']::pg_catalog.\"char\"[])
                AND (pg_catalog.has_table_privilege(c.oid,
                         'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')
                     OR pg_catalog.has_any_column_privilege(c.oid, 'SELECT, INSERT, UPDATE, REFERENCES')
                     OR pg_catalog.pg_has_role(c.relowner, 'MEMBER'))
              ORDER BY 1",
        )
        .bind(&self.schema)
        .fetch_all(&mut *conn)
        .await
    }
}

/// Why a grant's database could not be identified.
#[derive(Debug)]
pub(crate) enum Unidentified {
    /// The lookup failed: no privilege to read the table, or the database did not answer.
    Driver(sqlx::Error),
    /// The lease schema's `leasehold_database` has no row.
    NoRow,
}

#[cfg(test)]
mod tests {
    use super::qualified;

    #[test]
    fn names_are_quoted_whatever_the_schema_is_called() {
        assert_eq!(
            qualified("public", "leasehold_leases"),
            "\"public\".leasehold_leases"
        );
        assert_eq!(qualified("a\"b", "t"), "\"a\"\"b\".t");
        assert_eq!(qualified("Mixed Case", "t"), "\"Mixed Case\".t");
    }
}
