//! Which schema the lease tables are in, found once at start-up; every session of the store then
//! runs with that schema alone as its `search_path` (`super::session_settings`).
//!
//! The host's statements name their tables unqualified. Under the default path (`"$user",
//! public`) a schema named after the hosts' role, created by anyone with `CREATE` on the
//! database, would put a look-alike `leasehold_leases` in front of the real one, and a host
//! would campaign on it. So the schemas of the session's own path (the server's default, the
//! role's or database's setting, or the URL's `options`) are searched for the table through the
//! catalogs: found in one, that one is pinned; found in none, the first schema of the path is
//! (where the migrations will create the tables, as they always have); found in several, the
//! first shadows the next, and the host refuses to guess which one its migrations made.
//!
//! [`others`] then says what could still take the place of the fence on a caller's path: a
//! function named `leasehold_fence*` in another schema or of another owner than the tables', or a
//! lease schema in which every role may create (the default for `public` up to PostgreSQL 14).

use sqlx::postgres::PgConnection;

/// What the session's path holds of the lease tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// The schema the tables are in, or will be created in.
    One(String),
    /// No schema on the path at all: nothing to create the tables in.
    NoSchema,
    /// A relation named `leasehold_leases` in each of these schemas, in the path's order.
    Several(Vec<String>),
}

/// Looks at the path of `conn`'s session (nothing of the store's settings applied to it).
pub async fn find(conn: &mut PgConnection) -> Result<Found, sqlx::Error> {
    // Every name qualified: the path being looked at may not be trusted.
    let rows: Vec<(String, bool)> = sqlx::query_as(
        "SELECT s.nspname::text, EXISTS (
                SELECT FROM pg_catalog.pg_class c
                 WHERE c.relnamespace OPERATOR(pg_catalog.=) n.oid
                   AND c.relname OPERATOR(pg_catalog.=) 'leasehold_leases'::pg_catalog.name)
           FROM pg_catalog.unnest(pg_catalog.current_schemas(false))
                WITH ORDINALITY AS s(nspname, pos)
           JOIN pg_catalog.pg_namespace n ON n.nspname OPERATOR(pg_catalog.=) s.nspname
          ORDER BY s.pos",
    )
    .fetch_all(conn)
    .await?;
    Ok(judge(&rows))
}

/// The verdict on the schemas of a path, in order, each with whether it holds the lease table.
fn judge(path: &[(String, bool)]) -> Found {
    let holding: Vec<String> = path
        .iter()
        .filter(|(_, has)| *has)
        .map(|(s, _)| s.clone())
        .collect();
    match holding.as_slice() {
        [] => path
            .first()
            .map_or(Found::NoSchema, |(s, _)| Found::One(s.clone())),
        [one] => Found::One(one.clone()),
        _ => Found::Several(holding),
    }
}

/// The `search_path` value naming `schema` alone, quoted as an identifier. `pg_catalog` is
/// searched first anyway when a path does not name it; `pg_temp` holds nothing of the host's.
pub fn path_of(schema: &str) -> String {
    format!("\"{}\"", schema.replace('"', "\"\""))
}

/// Pins `conn`'s session to the lease schema found on its own path, for connections to the lease
/// database other than the store's (the fenced kv's), so that they read and lock the tables the
/// store campaigns on; refused as the store refuses ([`Found`]).
pub async fn pin(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    let schema = match find(conn).await? {
        Found::One(schema) => schema,
        found => {
            return Err(sqlx::Error::Configuration(
                format!("the lease schema cannot be told safely: {found:?}").into(),
            ));
        }
    };
    sqlx::query("SELECT pg_catalog.set_config('search_path', $1, false)")
        .bind(path_of(&schema))
        .execute(conn)
        .await?;
    Ok(())
}

/// What could stand in for the fence on a caller's path, for a warning at start-up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Others {
    /// Functions named `leasehold_fence*` outside the lease schema, or in it but owned by another
    /// role than its tables (not the migrations'), as `name(args)`, qualified when outside.
    pub functions: Vec<String>,
    /// Whether every role (PUBLIC) may create objects in the lease schema.
    pub public_may_create: bool,
}

/// Looks, on a session pinned to `schema`, for [`Others`].
pub async fn others(conn: &mut PgConnection, schema: &str) -> Result<Others, sqlx::Error> {
    let functions: Vec<String> = sqlx::query_scalar(
        "SELECT p.oid::pg_catalog.regprocedure::text
           FROM pg_catalog.pg_proc p
           JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
          WHERE p.proname::text LIKE 'leasehold\\_fence%'
            AND (n.nspname OPERATOR(pg_catalog.<>) $1::pg_catalog.name
                 OR p.proowner OPERATOR(pg_catalog.<>) (
                    SELECT c.relowner FROM pg_catalog.pg_class c
                      JOIN pg_catalog.pg_namespace m ON m.oid OPERATOR(pg_catalog.=) c.relnamespace
                     WHERE m.nspname OPERATOR(pg_catalog.=) $1::pg_catalog.name
                       AND c.relname OPERATOR(pg_catalog.=) 'leasehold_leases'::pg_catalog.name))
          ORDER BY 1",
    )
    .bind(schema)
    .fetch_all(&mut *conn)
    .await?;
    let public_may_create: bool = sqlx::query_scalar(
        "SELECT pg_catalog.has_schema_privilege('public', n.oid, 'CREATE')
           FROM pg_catalog.pg_namespace n WHERE n.nspname OPERATOR(pg_catalog.=) $1::pg_catalog.name",
    )
    .bind(schema)
    .fetch_optional(&mut *conn)
    .await?
    .unwrap_or(false);
    Ok(Others {
        functions,
        public_may_create,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(schemas: &[(&str, bool)]) -> Vec<(String, bool)> {
        schemas.iter().map(|(s, h)| (s.to_string(), *h)).collect()
    }

    #[test]
    fn the_one_schema_holding_the_table_is_pinned_wherever_it_is_on_the_path() {
        assert_eq!(
            judge(&path(&[("app", false), ("public", true)])),
            Found::One("public".into())
        );
    }

    #[test]
    fn with_no_table_yet_the_first_schema_of_the_path_is_where_the_migrations_create_it() {
        assert_eq!(
            judge(&path(&[("app", false), ("public", false)])),
            Found::One("app".into())
        );
        assert_eq!(judge(&[]), Found::NoSchema);
    }

    #[test]
    fn a_look_alike_ahead_of_the_table_is_never_chosen() {
        assert_eq!(
            judge(&path(&[("leasehold", true), ("public", true)])),
            Found::Several(vec!["leasehold".into(), "public".into()])
        );
    }

    #[test]
    fn a_schema_name_is_quoted_in_the_path() {
        assert_eq!(path_of("public"), "\"public\"");
        assert_eq!(path_of("a\"b, c"), "\"a\"\"b, c\"");
    }
}
