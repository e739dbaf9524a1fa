//! Values crossing the `sql` interface: parameters bound with a type PostgreSQL understands, and
//! column values decoded by type name into the few kinds the WIT `value` has; and what they cost
//! the host: the real size of a value ([`SqlValue::size`]) and of a row, counted against the
//! grant's `max_bytes`, and the caps on what one call sends ([`check_call`]).

use sqlx::postgres::types::Oid;
use sqlx::postgres::{
    PgArgumentBuffer, PgArguments, PgRow, PgTypeInfo, PgTypeKind, PgValueFormat, PgValueRef,
    Postgres,
};
use sqlx::{Arguments, Decode, Row, TypeInfo, ValueRef};

use crate::capability::error::CapabilityError;

/// One statement of a transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement {
    /// The SQL: one statement.
    pub sql: String,
    /// Its parameters, `$1` first.
    pub params: Vec<SqlValue>,
}

/// The result of a query.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rows {
    /// Column names, in order.
    pub columns: Vec<String>,
    /// Each row's values, in column order.
    pub rows: Vec<Vec<SqlValue>>,
}

/// The SQL and parameters of one call, as the host holds them, at most: room for a batch of
/// thousands of rows' values or a few 1 MiB blobs. Each accepted byte is held up to four times on
/// its way to the server (lifted from the guest, the statement's copy, the bound arguments, the
/// driver's send buffer), so one call costs the host at most 16 MiB; more is `too-large`.
pub const MAX_CALL_BYTES: usize = 4 << 20;

/// Statements per transaction: each is a round trip while the transaction holds its row locks,
/// and a reconcile batch needs tens; a larger one is several transactions, or one statement
/// over arrays. More is `too-large`.
pub(crate) const MAX_STATEMENTS: usize = 1_000;

/// A parameter or column value (the WIT `sql.value`).
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    /// SQL NULL.
    Null,
    /// boolean.
    Bool(bool),
    /// smallint, integer, bigint (and oid).
    Int(i64),
    /// real, double precision.
    Float(f64),
    /// text types, and timestamps, dates, uuid, json and enums rendered as text.
    Text(String),
    /// bytea.
    Bytes(Vec<u8>),
}

impl SqlValue {
    /// Bytes the value takes in host memory: the enum itself (a NULL costs as much as an integer)
    /// plus what its text or bytes allocate. This, not the value's length on the wire, is what
    /// the grant's `max_bytes` caps: 16 MiB of one-byte NULLs would be half a gigabyte of values.
    pub fn size(&self) -> usize {
        let heap = match self {
            SqlValue::Null | SqlValue::Bool(_) | SqlValue::Int(_) | SqlValue::Float(_) => 0,
            SqlValue::Text(s) => s.capacity(),
            SqlValue::Bytes(b) => b.capacity(),
        };
        std::mem::size_of::<SqlValue>() + heap
    }
}

/// Bytes a result row takes in host memory: its vector and its values.
pub(crate) fn row_size(row: &[SqlValue]) -> usize {
    std::mem::size_of::<Vec<SqlValue>>() + row.iter().map(SqlValue::size).sum::<usize>()
}

/// Bytes one statement takes in host memory: the struct, its SQL and its parameters.
fn statement_size(sql: &str, params: &[SqlValue]) -> usize {
    std::mem::size_of::<Statement>() + sql.len() + params.iter().map(SqlValue::size).sum::<usize>()
}

/// Refuses a call whose statements exceed [`MAX_STATEMENTS`] or whose SQL and parameters take
/// more than [`MAX_CALL_BYTES`] of host memory, before anything of it is copied again.
pub(crate) fn check_call<'a>(
    statements: impl ExactSizeIterator<Item = (&'a str, &'a [SqlValue])>,
) -> Result<(), CapabilityError> {
    let count = statements.len();
    if count > MAX_STATEMENTS {
        return Err(CapabilityError::TooLarge(format!(
            "{count} statements in one transaction, over the {MAX_STATEMENTS} allowed; split the batch"
        )));
    }
    let bytes: usize = statements
        .map(|(sql, params)| statement_size(sql, params))
        .sum();
    if bytes > MAX_CALL_BYTES {
        return Err(CapabilityError::TooLarge(format!(
            "the SQL and parameters of one call take {bytes} bytes in host memory, over the {MAX_CALL_BYTES} allowed"
        )));
    }
    Ok(())
}

/// A NULL whose type PostgreSQL infers from the statement, so `$1` may be NULL wherever a value
/// of any type may go. (A NULL typed as text would fail against an integer column.)
struct UntypedNull;

impl sqlx::Type<Postgres> for UntypedNull {
    fn type_info() -> PgTypeInfo {
        PgTypeInfo::with_oid(Oid(0))
    }
}

impl sqlx::Encode<'_, Postgres> for UntypedNull {
    fn encode_by_ref(
        &self,
        _buf: &mut PgArgumentBuffer,
    ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        Ok(sqlx::encode::IsNull::Yes)
    }
}

/// Binds `params` as `$1`, `$2`, ...: int as bigint, float as double precision, text as text,
/// bytes as bytea.
pub fn arguments(params: &[SqlValue]) -> Result<PgArguments, CapabilityError> {
    let mut args = PgArguments::default();
    for (i, param) in params.iter().enumerate() {
        let added = match param {
            SqlValue::Null => args.add(UntypedNull),
            SqlValue::Bool(b) => args.add(*b),
            SqlValue::Int(n) => args.add(*n),
            SqlValue::Float(f) => args.add(*f),
            SqlValue::Text(s) => args.add(s.as_str()),
            SqlValue::Bytes(b) => args.add(b.as_slice()),
        };
        added.map_err(|e| CapabilityError::Invalid(format!("parameter ${}: {e}", i + 1)))?;
    }
    Ok(args)
}

/// The values of `row`, in column order.
pub(crate) fn decode_row(row: &PgRow) -> Result<Vec<SqlValue>, CapabilityError> {
    (0..row.len())
        .map(|i| {
            let raw = row
                .try_get_raw(i)
                .map_err(|e| CapabilityError::Database(format!("column {i}: {e}")))?;
            decode(raw).map_err(|why| {
                let name = row.columns().get(i).map_or("?", sqlx::Column::name);
                CapabilityError::Invalid(format!("column {name:?}: {why}"))
            })
        })
        .collect()
}

fn decode(raw: PgValueRef<'_>) -> Result<SqlValue, String> {
    if raw.is_null() {
        return Ok(SqlValue::Null);
    }
    let info = raw.type_info().into_owned();
    let name = info.name().to_string();
    let err = |e: sqlx::error::BoxDynError| format!("cannot decode {name}: {e}");
    // Text-format values (rare with prepared statements) are already text.
    if raw.format() == PgValueFormat::Text && !matches!(name.as_str(), "BYTEA") {
        return raw
            .as_str()
            .map(|s| SqlValue::Text(s.to_string()))
            .map_err(err);
    }
    let value = match name.as_str() {
        "BOOL" => SqlValue::Bool(<bool as Decode<Postgres>>::decode(raw).map_err(err)?),
        "INT2" => SqlValue::Int(<i16 as Decode<Postgres>>::decode(raw).map_err(err)?.into()),
        "INT4" => SqlValue::Int(<i32 as Decode<Postgres>>::decode(raw).map_err(err)?.into()),
        "INT8" => SqlValue::Int(<i64 as Decode<Postgres>>::decode(raw).map_err(err)?),
        "OID" => SqlValue::Int(i64::from(be_u32(raw.as_bytes().map_err(err)?)?)),
        "FLOAT4" => SqlValue::Float(<f32 as Decode<Postgres>>::decode(raw).map_err(err)?.into()),
        "FLOAT8" => SqlValue::Float(<f64 as Decode<Postgres>>::decode(raw).map_err(err)?),
        "TEXT" | "VARCHAR" | "BPCHAR" | "NAME" | "CITEXT" | "UNKNOWN" | "JSON" | "XML" => {
            SqlValue::Text(utf8(raw.as_bytes().map_err(err)?)?)
        }
        "BYTEA" => SqlValue::Bytes(raw.as_bytes().map_err(err)?.to_vec()),
        "JSONB" => {
            // Binary jsonb is a version byte (1) followed by the JSON text.
            let bytes = raw.as_bytes().map_err(err)?;
            SqlValue::Text(utf8(bytes.get(1..).unwrap_or_default())?)
        }
        "TIMESTAMPTZ" => SqlValue::Text(timestamp(be_i64(raw.as_bytes().map_err(err)?)?, "Z")),
        "TIMESTAMP" => SqlValue::Text(timestamp(be_i64(raw.as_bytes().map_err(err)?)?, "")),
        "DATE" => SqlValue::Text(date(be_i32(raw.as_bytes().map_err(err)?)?)),
        "UUID" => SqlValue::Text(uuid(raw.as_bytes().map_err(err)?)?),
        _ if matches!(info.kind(), PgTypeKind::Enum(_)) => {
            // Enum values travel as their label.
            SqlValue::Text(utf8(raw.as_bytes().map_err(err)?)?)
        }
        other => {
            return Err(format!(
                "type {other} is not decoded by the sql capability: cast it in the query (e.g. column::text, or ::float8 for numeric)"
            ));
        }
    };
    Ok(value)
}

fn utf8(bytes: &[u8]) -> Result<String, String> {
    String::from_utf8(bytes.to_vec()).map_err(|e| format!("not UTF-8: {e}"))
}

fn be_i64(bytes: &[u8]) -> Result<i64, String> {
    bytes
        .try_into()
        .map(i64::from_be_bytes)
        .map_err(|_| format!("expected 8 bytes, got {}", bytes.len()))
}

fn be_i32(bytes: &[u8]) -> Result<i32, String> {
    bytes
        .try_into()
        .map(i32::from_be_bytes)
        .map_err(|_| format!("expected 4 bytes, got {}", bytes.len()))
}

fn be_u32(bytes: &[u8]) -> Result<u32, String> {
    bytes
        .try_into()
        .map(u32::from_be_bytes)
        .map_err(|_| format!("expected 4 bytes, got {}", bytes.len()))
}

/// PostgreSQL counts days and microseconds from 2000-01-01.
const PG_EPOCH_DAYS: i64 = 10_957;

/// Microseconds since 2000-01-01 as RFC 3339 (`2026-11-22T10:00:00.000000Z` with `suffix` "Z").
fn timestamp(micros: i64, suffix: &str) -> String {
    match micros {
        i64::MAX => return "infinity".into(),
        i64::MIN => return "-infinity".into(),
        _ => {}
    }
    let days = micros.div_euclid(86_400_000_000);
    let in_day = micros.rem_euclid(86_400_000_000);
    let (y, m, d) = civil_from_days(days + PG_EPOCH_DAYS);
    let secs = in_day / 1_000_000;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:06}{suffix}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        in_day % 1_000_000
    )
}

/// Days since 2000-01-01 as `YYYY-MM-DD`.
fn date(days: i32) -> String {
    match days {
        i32::MAX => return "infinity".into(),
        i32::MIN => return "-infinity".into(),
        _ => {}
    }
    let (y, m, d) = civil_from_days(i64::from(days) + PG_EPOCH_DAYS);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The proleptic Gregorian date of a count of days since 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m as u32, d as u32)
}

fn uuid(bytes: &[u8]) -> Result<String, String> {
    if bytes.len() != 16 {
        return Err(format!("expected 16 bytes, got {}", bytes.len()));
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_and_dates_render_as_rfc3339() {
        assert_eq!(timestamp(0, "Z"), "2000-01-01T00:00:00.000000Z");
        // 2026-11-22T10:11:12.345678Z is 848,657,472.345678 s after 2000-01-01.
        assert_eq!(
            timestamp(848_657_472_345_678, "Z"),
            "2026-11-22T10:11:12.345678Z"
        );
        assert_eq!(timestamp(-1, ""), "1999-12-31T23:59:59.999999");
        assert_eq!(date(0), "2000-01-01");
        assert_eq!(date(-10_957), "1970-01-01");
        assert_eq!(date(60), "2000-03-01"); // 2000 is a leap year
        assert_eq!(timestamp(i64::MAX, "Z"), "infinity");
    }

    #[test]
    fn values_count_what_they_take_in_host_memory() {
        let null = SqlValue::Null.size();
        assert_eq!(null, std::mem::size_of::<SqlValue>());
        assert!(null >= 16, "{null}");
        assert_eq!(SqlValue::Text("abc".into()).size(), null + 3);
        // The NULL rows of `tests/tests/plugins/memory_attacks.rs`: 10,000 rows of 1,664 NULLs were 16.6 MB
        // "on the wire" and half a gigabyte of values; counted as held, they are far over 16 MiB.
        let row = vec![SqlValue::Null; 1_664];
        assert!(row_size(&row) * 10_000 > 16 << 20);
    }

    #[test]
    fn a_call_is_capped_in_statements_and_bytes() {
        let small = [SqlValue::Int(1)];
        let ok = std::iter::repeat_n(("SELECT $1", &small[..]), MAX_STATEMENTS);
        assert!(check_call(ok).is_ok());
        let many = std::iter::repeat_n(("SELECT $1", &small[..]), MAX_STATEMENTS + 1);
        assert!(matches!(
            check_call(many),
            Err(CapabilityError::TooLarge(_))
        ));
        // One text shared by many parameters counts once per parameter: each is its own copy.
        let text = SqlValue::Text("x".repeat(1 << 20));
        let params = vec![text; 4];
        let big = std::iter::once(("SELECT $1, $2, $3, $4", &params[..]));
        assert!(matches!(check_call(big), Err(CapabilityError::TooLarge(_))));
    }

    #[test]
    fn uuids_render_with_dashes() {
        let bytes: Vec<u8> = (0u8..16).collect();
        assert_eq!(
            uuid(&bytes).unwrap(),
            "00010203-0405-0607-0809-0a0b0c0d0e0f"
        );
        assert!(uuid(&[1, 2]).is_err());
    }
}
