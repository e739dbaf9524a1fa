//! Statements on the PostgreSQL database granted in the manifest.
//!
//! Granted by the manifest:
//!
//! ```toml
//! [grants.sql]
//! database_url_env = "APP_DATABASE_URL"  # env var of the HOST holding the PostgreSQL URL; never shown to the plugin
//! statement_timeout = "2s"        # optional
//! max_rows = 10000                # optional, per result
//! max_bytes = "16MiB"             # optional, per result as the host holds it
//! max_connections = 4             # optional, pool size for this grant
//! ```
//!
//! Without the grant every call returns [`CapabilityError::NotGranted`]. The URL and its
//! credentials stay with the host; the plugin only sends statements.
//!
//! ```no_run
//! use leasehold_guest::sql::{self, Statement};
//! use leasehold_guest::{params, Error};
//!
//! # fn main() -> Result<(), Error> {
//! let rows = sql::query("SELECT id, note FROM items WHERE owner = $1 ORDER BY id", &["ann".into()])?;
//! for row in &rows {
//!     let id: i64 = row.get("id")?;
//!     let note: Option<String> = row.get("note")?;
//!     # let _ = (id, note);
//! }
//! let changed: u64 = sql::execute("UPDATE items SET note = $1 WHERE id = $2", params!["done", 7])?;
//! let counts: Vec<u64> = sql::transaction(&[
//!     Statement::new("DELETE FROM items WHERE id = $1", params![7]),
//!     Statement::new("INSERT INTO log (what) VALUES ($1)", params!["deleted 7"]),
//! ])?;
//! # let _ = (changed, counts);
//! # Ok(()) }
//! ```
//!
//! # What runs, and how
//!
//! - [`query`] runs in a read-only transaction: a statement that writes fails with
//!   [`CapabilityError::Database`].
//! - [`execute`] runs one statement in its own transaction; [`transaction`] runs several in one
//!   transaction, all of them or none. When the granted database is the lease database, both are
//!   **fenced** like [`kv`](crate::kv) writes: they commit only if this replica still holds the
//!   lease at the plugin's epoch, and otherwise return [`CapabilityError::LeaseLost`] having kept
//!   nothing. On another database they are not fenced: pass
//!   [`Context::epoch`](crate::Context::epoch) along and have the database refuse stale epochs.
//! - Each statement is a single SQL statement. The host owns transactions and sessions:
//!   transaction control and session commands (`BEGIN`, `START`, `COMMIT`, `END`, `ROLLBACK`,
//!   `ABORT`, `SAVEPOINT`, `RELEASE`, `PREPARE`, `DEALLOCATE`, `SET` other than `SET LOCAL` and
//!   `SET CONSTRAINTS`, `RESET`, `DISCARD`, `LISTEN`, `UNLISTEN`, `LOAD`) are refused with
//!   [`CapabilityError::Invalid`], whatever their case or leading comments. `SET LOCAL` lasts
//!   until the end of the statement's transaction.
//! - Results are capped by the grant's `max_rows` and `max_bytes` ([`CapabilityError::TooLarge`];
//!   bytes as the host holds them: a NULL or a number counts as much as a 32-byte value), and each
//!   statement by its `statement_timeout` ([`CapabilityError::Unavailable`]). What one call sends
//!   is capped too: 1,000 statements per transaction and 4 MiB of SQL and parameters as the host
//!   holds them ([`CapabilityError::TooLarge`]); a call that copies more than 8 MiB out of the
//!   guest traps.
//!
//! # Types
//!
//! Parameters are `$1`, `$2`, ... and are sent as [`Value`]s: `Int` as `bigint`, `Float` as
//! `double precision`, `Text` as `text`, `Bytes` as `bytea`, `Bool` as `boolean`, and `Null`
//! typed by the statement. Where PostgreSQL cannot infer a parameter's type, or the column has
//! another type, cast in SQL: `$1::timestamptz`, `$2::uuid`, `$3::int`.
//!
//! Results come back as [`Value`]s too: `smallint`, `integer` and `bigint` as `Int`; `real` and
//! `double precision` as `Float`; `boolean` as `Bool`; `bytea` as `Bytes`; text types as `Text`;
//! timestamps (RFC 3339, e.g. `2026-11-22T10:00:00.000000Z`), dates, uuids and json as `Text`.
//! `numeric` must be cast (`::text` to keep every digit, or `::float8`); other types likewise.
//! Read values with [`Row::get`] into any [`FromValue`] type.
//!
//! Outside a WebAssembly build calls go to the thread's [`testing::Fake`](crate::testing::Fake)
//! if there is one, and otherwise return [`CapabilityError::Unavailable`].

use std::fmt;

use crate::CapabilityError;

/// A parameter or a column value: the WIT `sql.value`.
///
/// Build parameters with `.into()` (or [`params!`](crate::params)) from `i64`, `i32`, `u32`,
/// `i16`, `u16`, `u8`, `bool`, `f64`, `f32`, `&str`, `String`, `Vec<u8>`, `&[u8]` and
/// `Option` of any of them (`None` is `Null`).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// `boolean`.
    Bool(bool),
    /// `smallint`, `integer`, `bigint`.
    Int(i64),
    /// `real`, `double precision`.
    Float(f64),
    /// Text types; in results also timestamps (RFC 3339), dates, uuids and json.
    Text(String),
    /// `bytea`.
    Bytes(Vec<u8>),
}

impl Value {
    /// The name of the case as in the WIT: `null`, `boolean`, `int`, `float`, `text` or `bytes`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Text(_) => "text",
            Value::Bytes(_) => "bytes",
        }
    }

    /// Whether this is [`Value::Null`].
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The text of a [`Value::Text`].
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Text(s) => Some(s),
            _ => None,
        }
    }

    /// The number of a [`Value::Int`].
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }
}

/// The value as SQL would show it, e.g. for logs: `NULL`, `true`, `42`, `1.5`, `'text'`
/// (quotes doubled), `'\x0102'`.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("NULL"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Text(s) => write!(f, "'{}'", s.replace('\'', "''")),
            Value::Bytes(b) => {
                f.write_str("'\\x")?;
                for byte in b {
                    write!(f, "{byte:02x}")?;
                }
                f.write_str("'")
            }
        }
    }
}

macro_rules! value_from {
    ($($t:ty => |$v:ident| $e:expr;)*) => {
        $(
            impl From<$t> for Value {
                fn from($v: $t) -> Value {
                    $e
                }
            }
        )*
    };
}

value_from! {
    i64 => |v| Value::Int(v);
    i32 => |v| Value::Int(v.into());
    u32 => |v| Value::Int(v.into());
    i16 => |v| Value::Int(v.into());
    u16 => |v| Value::Int(v.into());
    u8 => |v| Value::Int(v.into());
    bool => |v| Value::Bool(v);
    f64 => |v| Value::Float(v);
    f32 => |v| Value::Float(v.into());
    &str => |v| Value::Text(v.to_string());
    String => |v| Value::Text(v);
    &String => |v| Value::Text(v.clone());
    Vec<u8> => |v| Value::Bytes(v);
    &[u8] => |v| Value::Bytes(v.to_vec());
}

impl<const N: usize> From<[u8; N]> for Value {
    fn from(v: [u8; N]) -> Value {
        Value::Bytes(v.to_vec())
    }
}

impl<const N: usize> From<&[u8; N]> for Value {
    fn from(v: &[u8; N]) -> Value {
        Value::Bytes(v.to_vec())
    }
}

/// `None` is `Null`.
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Value {
        v.map_or(Value::Null, Into::into)
    }
}

/// Parameters for [`query`], [`execute`] and [`Statement::new`] from plain Rust values: each
/// argument goes through [`Value::from`].
///
/// ```no_run
/// use leasehold_guest::{params, sql};
///
/// # fn main() -> Result<(), leasehold_guest::Error> {
/// let note: Option<&str> = None;
/// sql::execute("UPDATE items SET n = $1, note = $2 WHERE id = $3", params![5, note, "x"])?;
/// sql::execute("DELETE FROM items", params![])?;
/// # Ok(()) }
/// ```
#[macro_export]
macro_rules! params {
    () => {
        &[] as &[$crate::sql::Value]
    };
    ($($value:expr),+ $(,)?) => {
        &[$($crate::sql::Value::from($value)),+] as &[$crate::sql::Value]
    };
}

/// One statement of a [`transaction`]: SQL text with its parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement {
    sql: String,
    params: Vec<Value>,
}

impl Statement {
    /// A statement with its parameters (`$1`, `$2`, ...).
    ///
    /// ```
    /// use leasehold_guest::{params, sql::Statement};
    ///
    /// let a = Statement::new("INSERT INTO t (id, note) VALUES ($1, $2)", &[1.into(), "a".into()]);
    /// let b = Statement::new("INSERT INTO t (id, note) VALUES ($1, $2)", params![1, "a"]);
    /// let c = Statement::new("INSERT INTO t (id, note) VALUES ($1, $2)", &[]).param(1).param("a");
    /// assert!(a == b && b == c);
    /// ```
    pub fn new(sql: impl Into<String>, params: &[Value]) -> Self {
        Statement {
            sql: sql.into(),
            params: params.to_vec(),
        }
    }

    /// Appends one more parameter.
    pub fn param(mut self, value: impl Into<Value>) -> Self {
        self.params.push(value.into());
        self
    }

    /// The SQL text.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// The parameters, in order.
    pub fn params(&self) -> &[Value] {
        &self.params
    }
}

/// The rows of a [`query`], with their column names.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rows {
    columns: Vec<String>,
    rows: Vec<Vec<Value>>,
}

impl Rows {
    /// Rows from column names and each row's values in column order, e.g. to test code that
    /// reads them outside a host.
    pub fn new(columns: Vec<String>, rows: Vec<Vec<Value>>) -> Self {
        Rows { columns, rows }
    }

    /// The column names, in order.
    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    /// The position of the column named `name` (the first one, if several have that name).
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c == name)
    }

    /// How many rows there are.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The row at `index`.
    pub fn get(&self, index: usize) -> Option<Row<'_>> {
        self.rows.get(index).map(|values| Row {
            columns: &self.columns,
            values,
        })
    }

    /// The first row, if any.
    pub fn first(&self) -> Option<Row<'_>> {
        self.get(0)
    }

    /// The rows, in order.
    pub fn iter(&self) -> RowIter<'_> {
        RowIter {
            columns: &self.columns,
            rows: self.rows.iter(),
        }
    }
}

impl<'a> IntoIterator for &'a Rows {
    type Item = Row<'a>;
    type IntoIter = RowIter<'a>;

    fn into_iter(self) -> RowIter<'a> {
        self.iter()
    }
}

/// The iterator of [`Rows::iter`].
#[derive(Debug, Clone)]
pub struct RowIter<'a> {
    columns: &'a [String],
    rows: std::slice::Iter<'a, Vec<Value>>,
}

impl<'a> Iterator for RowIter<'a> {
    type Item = Row<'a>;

    fn next(&mut self) -> Option<Row<'a>> {
        let columns = self.columns;
        self.rows.next().map(|values| Row { columns, values })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.rows.size_hint()
    }
}

impl ExactSizeIterator for RowIter<'_> {}

/// One row of [`Rows`].
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    columns: &'a [String],
    values: &'a [Value],
}

impl<'a> Row<'a> {
    /// The value of the column named `column` as a `T`; [`CapabilityError::Invalid`] naming the
    /// column when there is no such column or its value is not a `T` (read a nullable column as an
    /// `Option`).
    ///
    /// ```
    /// use leasehold_guest::sql::{Rows, Value};
    ///
    /// let rows = Rows::new(vec!["n".into(), "z".into()], vec![vec![Value::Int(42), Value::Null]]);
    /// let row = rows.first().unwrap();
    /// assert_eq!(row.get::<i64>("n"), Ok(42));
    /// assert_eq!(row.get::<Option<String>>("z"), Ok(None));
    /// assert!(row.get::<String>("n").is_err()); // an int is not text
    /// ```
    pub fn get<T: FromValue>(&self, column: &str) -> Result<T, CapabilityError> {
        let Some(index) = self.columns.iter().position(|c| c == column) else {
            return Err(CapabilityError::Invalid(format!(
                "no column {column:?} in the result (columns: {})",
                self.columns.join(", ")
            )));
        };
        self.convert(index, &format!("column {column:?}"))
    }

    /// The value of the column at `index` (from 0) as a `T`; [`CapabilityError::Invalid`] when
    /// there is no such column or its value is not a `T`.
    pub fn get_at<T: FromValue>(&self, index: usize) -> Result<T, CapabilityError> {
        if index >= self.values.len() {
            return Err(CapabilityError::Invalid(format!(
                "no column {index} in the result: it has {} columns",
                self.values.len()
            )));
        }
        let name = self.columns.get(index).map(String::as_str).unwrap_or("?");
        self.convert(index, &format!("column {name:?} (index {index})"))
    }

    fn convert<T: FromValue>(&self, index: usize, what: &str) -> Result<T, CapabilityError> {
        let value = &self.values[index];
        T::from_value(value).map_err(|why| CapabilityError::Invalid(format!("{what}: {why}")))
    }

    /// The raw value of the column named `column`.
    pub fn value(&self, column: &str) -> Option<&'a Value> {
        let index = self.columns.iter().position(|c| c == column)?;
        self.values.get(index)
    }

    /// The values, in column order.
    pub fn values(&self) -> &'a [Value] {
        self.values
    }

    /// The column names, in order.
    pub fn columns(&self) -> &'a [String] {
        self.columns
    }

    /// How many columns the row has.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the row has no columns.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// A Rust type a column value can be read as, with [`Row::get`] or [`Row::get_at`].
///
/// Implemented for `i64`, `i32`, `i16`, `u64`, `u32` (from `Int`, within range), `f64` (from
/// `Float`, or from `Int`), `bool`, `String`, `Vec<u8>`, [`Value`] itself, and `Option<T>` of
/// any of them (`Null` is `None`). A `Null` read as anything but an `Option` or a `Value` is an
/// error.
pub trait FromValue: Sized {
    /// The value as `Self`, or why not (e.g. `"text, expected i64"`); the caller adds the
    /// column's name.
    fn from_value(value: &Value) -> Result<Self, String>;
}

fn mismatch(value: &Value, expected: &str) -> String {
    match value {
        Value::Null => format!("NULL, expected {expected} (read it as an Option<{expected}>)"),
        other => format!("{}, expected {expected}", other.type_name()),
    }
}

macro_rules! from_int {
    ($($t:ty),*) => {
        $(
            impl FromValue for $t {
                fn from_value(value: &Value) -> Result<Self, String> {
                    match value {
                        Value::Int(i) => <$t>::try_from(*i).map_err(|_| {
                            format!("{i} does not fit in {}", stringify!($t))
                        }),
                        other => Err(mismatch(other, stringify!($t))),
                    }
                }
            }
        )*
    };
}

from_int!(i64, i32, i16, u64, u32);

impl FromValue for f64 {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::Float(x) => Ok(*x),
            Value::Int(i) => Ok(*i as f64),
            other => Err(mismatch(other, "f64")),
        }
    }
}

impl FromValue for bool {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::Bool(b) => Ok(*b),
            other => Err(mismatch(other, "bool")),
        }
    }
}

impl FromValue for String {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::Text(s) => Ok(s.clone()),
            other => Err(mismatch(other, "String")),
        }
    }
}

impl FromValue for Vec<u8> {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::Bytes(b) => Ok(b.clone()),
            other => Err(mismatch(other, "Vec<u8>")),
        }
    }
}

impl FromValue for Value {
    fn from_value(value: &Value) -> Result<Self, String> {
        Ok(value.clone())
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::Null => Ok(None),
            other => T::from_value(other).map(Some),
        }
    }
}

#[cfg(target_arch = "wasm32")]
mod host {
    use super::{Rows, Statement, Value};
    use crate::__private::wit_sql as wit;
    use crate::CapabilityError;

    fn to_wit(value: &Value) -> wit::Value {
        match value {
            Value::Null => wit::Value::Null,
            Value::Bool(b) => wit::Value::Boolean(*b),
            Value::Int(i) => wit::Value::Int(*i),
            Value::Float(x) => wit::Value::Float(*x),
            Value::Text(s) => wit::Value::Text(s.clone()),
            Value::Bytes(b) => wit::Value::Bytes(b.clone()),
        }
    }

    fn from_wit(value: wit::Value) -> Value {
        match value {
            wit::Value::Null => Value::Null,
            wit::Value::Boolean(b) => Value::Bool(b),
            wit::Value::Int(i) => Value::Int(i),
            wit::Value::Float(x) => Value::Float(x),
            wit::Value::Text(s) => Value::Text(s),
            wit::Value::Bytes(b) => Value::Bytes(b),
        }
    }

    fn params(params: &[Value]) -> Vec<wit::Value> {
        params.iter().map(to_wit).collect()
    }

    pub fn query(sql: &str, p: &[Value]) -> Result<Rows, CapabilityError> {
        let rows = wit::query(sql, &params(p)).map_err(CapabilityError::from)?;
        Ok(Rows {
            columns: rows.columns,
            rows: rows
                .rows
                .into_iter()
                .map(|row| row.into_iter().map(from_wit).collect())
                .collect(),
        })
    }

    pub fn execute(sql: &str, p: &[Value]) -> Result<u64, CapabilityError> {
        wit::execute(sql, &params(p)).map_err(CapabilityError::from)
    }

    pub fn transaction(statements: &[Statement]) -> Result<Vec<u64>, CapabilityError> {
        let statements: Vec<wit::Statement> = statements
            .iter()
            .map(|s| wit::Statement {
                sql: s.sql.clone(),
                params: params(&s.params),
            })
            .collect();
        wit::transaction(&statements).map_err(CapabilityError::from)
    }
}

/// Off-target: the thread's `testing::Fake`, or `Unavailable`.
#[cfg(not(target_arch = "wasm32"))]
mod host {
    use super::{Rows, Statement, Value};
    use crate::CapabilityError;
    use crate::capability::outside;
    use crate::testing::{SqlAnswer, SqlOp, with_fake};

    fn call(op: SqlOp, statements: &[Statement]) -> Result<SqlAnswer, CapabilityError> {
        match with_fake(|fake| fake.sql(op, statements)) {
            None => Err(outside("sql")),
            Some(SqlAnswer::Error(e)) => Err(e),
            Some(answer) => Ok(answer),
        }
    }

    pub fn query(sql: &str, params: &[Value]) -> Result<Rows, CapabilityError> {
        match call(SqlOp::Query, &[Statement::new(sql, params)])? {
            SqlAnswer::Rows(rows) => Ok(rows),
            other => unreachable!("the fake checks its answers: {other:?}"),
        }
    }
    pub fn execute(sql: &str, params: &[Value]) -> Result<u64, CapabilityError> {
        match call(SqlOp::Execute, &[Statement::new(sql, params)])? {
            SqlAnswer::Count(n) => Ok(n),
            other => unreachable!("the fake checks its answers: {other:?}"),
        }
    }
    pub fn transaction(statements: &[Statement]) -> Result<Vec<u64>, CapabilityError> {
        match call(SqlOp::Transaction, statements)? {
            SqlAnswer::Counts(counts) => Ok(counts),
            other => unreachable!("the fake checks its answers: {other:?}"),
        }
    }
}

/// Runs one read-only statement and returns its rows. Not fenced (nothing is written).
///
/// A statement that writes fails with [`CapabilityError::Database`] (PostgreSQL refuses it in a
/// read-only transaction); a result beyond the grant's `max_rows` or `max_bytes` fails with
/// [`CapabilityError::TooLarge`].
pub fn query(sql: &str, params: &[Value]) -> Result<Rows, CapabilityError> {
    host::query(sql, params)
}

/// Runs one statement in its own transaction and returns the number of rows it affected
/// (inserted, updated, deleted; 0 for statements that affect none, such as `CREATE TABLE`).
///
/// Fenced when the granted database is the lease database: [`CapabilityError::LeaseLost`] means
/// nothing was kept.
pub fn execute(sql: &str, params: &[Value]) -> Result<u64, CapabilityError> {
    host::execute(sql, params)
}

/// Runs the statements in one transaction, all of them or none, and returns each one's count of
/// affected rows, in order.
///
/// If any statement fails (or is refused, e.g. a `COMMIT` among them), the whole transaction is
/// rolled back and its error returned. Fenced when the granted database is the lease database:
/// [`CapabilityError::LeaseLost`] means nothing was kept. An empty list does nothing.
pub fn transaction(statements: &[Statement]) -> Result<Vec<u64>, CapabilityError> {
    host::transaction(statements)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_from_rust() {
        assert_eq!(Value::from(5), Value::Int(5));
        assert_eq!(Value::from(5u32), Value::Int(5));
        assert_eq!(Value::from(-5i64), Value::Int(-5));
        assert_eq!(Value::from(true), Value::Bool(true));
        assert_eq!(Value::from(1.5), Value::Float(1.5));
        assert_eq!(Value::from("x"), Value::Text("x".into()));
        assert_eq!(Value::from(String::from("x")), Value::Text("x".into()));
        assert_eq!(Value::from(vec![1u8, 2]), Value::Bytes(vec![1, 2]));
        assert_eq!(Value::from(&[1u8, 2][..]), Value::Bytes(vec![1, 2]));
        assert_eq!(Value::from(None::<i64>), Value::Null);
        assert_eq!(Value::from(Some("y")), Value::Text("y".into()));
        let p: &[Value] = &[5.into(), "x".into()];
        assert_eq!(p, params![5, "x"]);
        assert!(params![].is_empty());
    }

    #[test]
    fn rows_read_typed() {
        let rows = Rows::new(
            vec![
                "n".into(),
                "t".into(),
                "z".into(),
                "b".into(),
                "f".into(),
                "neg".into(),
            ],
            vec![vec![
                Value::Int(42),
                Value::Text("hi".into()),
                Value::Null,
                Value::Bytes(vec![1, 2, 3]),
                Value::Float(1.5),
                Value::Int(-1),
            ]],
        );
        assert_eq!(rows.len(), 1);
        assert_eq!(rows.columns()[1], "t");
        let row = rows.iter().next().unwrap();
        assert_eq!(row.get::<i64>("n"), Ok(42));
        assert_eq!(row.get::<i32>("n"), Ok(42));
        assert_eq!(row.get::<u64>("n"), Ok(42));
        assert_eq!(row.get::<f64>("n"), Ok(42.0));
        assert_eq!(row.get::<String>("t"), Ok("hi".into()));
        assert_eq!(row.get::<Option<i64>>("z"), Ok(None));
        assert_eq!(row.get::<Option<i64>>("n"), Ok(Some(42)));
        assert_eq!(row.get::<Vec<u8>>("b"), Ok(vec![1, 2, 3]));
        assert_eq!(row.get_at::<f64>(4), Ok(1.5));
        assert_eq!(row.get::<Value>("z"), Ok(Value::Null));

        let err = row.get::<i64>("t").unwrap_err();
        assert_eq!(
            err,
            CapabilityError::Invalid(r#"column "t": text, expected i64"#.into())
        );
        let err = row.get::<String>("z").unwrap_err();
        assert!(
            matches!(&err, CapabilityError::Invalid(m)
                if m.contains("NULL") && m.contains("Option")),
            "{err}"
        );
        let err = row.get::<u64>("neg").unwrap_err();
        assert!(
            matches!(&err, CapabilityError::Invalid(m) if m.contains("-1 does not fit in u64")),
            "{err}"
        );
        let err = row.get::<i64>("nope").unwrap_err();
        assert!(
            matches!(&err, CapabilityError::Invalid(m)
                if m.contains("\"nope\"") && m.contains("n, t, z")),
            "{err}"
        );
        let err = row.get_at::<i64>(9).unwrap_err();
        assert_eq!(err.kind(), "invalid");
        let err = row.get_at::<bool>(1).unwrap_err();
        assert_eq!(
            err,
            CapabilityError::Invalid(r#"column "t" (index 1): text, expected bool"#.into())
        );
    }

    #[test]
    fn statements_and_display() {
        let s = Statement::new("SELECT $1", &[])
            .param(Some(3))
            .param(None::<&str>);
        assert_eq!(s.sql(), "SELECT $1");
        assert_eq!(s.params(), &[Value::Int(3), Value::Null]);
        assert_eq!(Value::Text("it's".into()).to_string(), "'it''s'");
        assert_eq!(Value::Bytes(vec![1, 0xab]).to_string(), "'\\x01ab'");
    }
}
