//! Whether a sql grant reaches the lease database, and so must fence its writes.
//!
//! The host reads, on its own connection, the schema its lease store's `leasehold_leases` lives in
//! and the random id in `leasehold_database` beside it ([`LeaseDatabase`]). A grant then looks for
//! that very table in that very schema through the catalogs, with every name qualified: its role's
//! `search_path` (which may not list the schema, or may list a table of the same name or a
//! `pg_catalog` look-alike before it) never takes part, and neither does `pg_temp`.
//!
//! - no such table in that schema: positively another database, whose writes nothing fences;
//! - the table, holding the same id: the lease database, fenced;
//! - the table, holding another id: another leasehold installation's database, not fenced;
//! - anything else (the role may not read it, it has no row, the lookup failed): unknown, and a
//!   write that cannot be told apart from a write to the lease database is refused
//!   ([`Identity`] errors are never remembered, so the next write asks again).

use sqlx::postgres::{PgConnection, PgPool};

use crate::capability::CapabilityError;

/// The lease database as the host's own lease store sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseDatabase {
    /// The schema of the lease store's tables.
    pub schema: String,
    /// The random id in its `leasehold_database`.
    pub id: String,
}

/// Where a grant's writes go, as far as the fence is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
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
        Ok(LeaseDatabase { schema, id })
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
        let id: Option<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT id FROM {}",
            qualified(&self.schema, "leasehold_database")
        )))
        .fetch_optional(&mut *conn)
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
}

/// Why a grant's database could not be identified.
#[derive(Debug)]
pub enum Unidentified {
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
