//! Which statements a plugin may run. The host owns transactions: a `COMMIT` inside a fenced
//! transaction would end the fence and let the statements after it run unfenced. PostgreSQL
//! skips empty statements, so `;COMMIT` is a `COMMIT` too: a statement may not open with `;`.
//!
//! Session commands are refused for a clear message, not for safety: session state has too many
//! doors (`set_config(…, false)`, `DO` blocks, advisory locks, cursors `WITH HOLD`, temporary
//! tables) to close them by reading SQL. Every connection is made clean instead when it goes back
//! to its pool ([`super::grant::CLEAN_SESSION`]). Everything else is left to the database and the
//! grant's role.

/// Refuses transaction control and session commands, saying why.
pub fn check(sql: &str) -> Result<(), String> {
    if skip_space_and_comments(sql).starts_with(';') {
        return Err(
            "a statement may not open with ';': PostgreSQL would skip the empty statement and run what follows it (one statement per call; sql.transaction for several)"
                .into(),
        );
    }
    let words = leading_words(sql);
    let Some(first) = words.first() else {
        // Statements may open with punctuation, e.g. `(SELECT 1)`; only an empty one is refused.
        return if skip_space_and_comments(sql).is_empty() {
            Err("empty statement".into())
        } else {
            Ok(())
        };
    };
    let refused = match first.as_str() {
        "BEGIN" | "START" | "COMMIT" | "END" | "ROLLBACK" | "ABORT" | "SAVEPOINT" | "RELEASE"
        | "PREPARE" | "DEALLOCATE" | "RESET" | "DISCARD" | "LISTEN" | "UNLISTEN" | "LOAD" => true,
        // SET LOCAL and SET CONSTRAINTS end with the transaction; plain SET outlives it.
        "SET" => !matches!(
            words.get(1).map(String::as_str),
            Some("LOCAL" | "CONSTRAINTS")
        ),
        _ => false,
    };
    if refused {
        return Err(format!(
            "{first} statements are not allowed: the host manages transactions and sessions (use sql.transaction for atomic batches, SET LOCAL for settings)"
        ));
    }
    Ok(())
}

/// The first two words of `sql`, upper-cased, after whitespace and comments.
fn leading_words(sql: &str) -> Vec<String> {
    let mut rest = sql;
    let mut words = Vec::new();
    while words.len() < 2 {
        rest = skip_space_and_comments(rest);
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        words.push(rest[..end].to_ascii_uppercase());
        rest = &rest[end..];
    }
    words
}

fn skip_space_and_comments(mut s: &str) -> &str {
    loop {
        let trimmed = s.trim_start();
        if let Some(line) = trimmed.strip_prefix("--") {
            s = line.find('\n').map_or("", |i| &line[i + 1..]);
        } else if trimmed.starts_with("/*") {
            // Block comments nest in PostgreSQL.
            let mut depth = 0usize;
            let bytes = trimmed.as_bytes();
            let mut i = 0;
            while i < bytes.len() {
                if bytes[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if bytes[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            s = trimmed.get(i..).unwrap_or("");
        } else {
            return trimmed;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn refuses_transaction_and_session_control() {
        for sql in [
            "COMMIT",
            "  commit;",
            "/* sneaky */ rollback",
            "/* a /* nested */ comment */ END",
            "-- line\nBEGIN",
            "start transaction",
            "savepoint s",
            "RELEASE SAVEPOINT s",
            "PREPARE TRANSACTION 'x'",
            "SET statement_timeout = 0",
            "set session authorization bob",
            "RESET ALL",
            "DISCARD ALL",
            "LISTEN x",
            "",
            "  -- only a comment",
            ";COMMIT",
            " ; SET search_path = evil",
            "/* x */ ;BEGIN",
            ";;ROLLBACK",
        ] {
            assert!(check(sql).is_err(), "{sql:?} should be refused");
        }
    }

    #[test]
    fn allows_ordinary_statements() {
        for sql in [
            "SELECT 1",
            "  insert into t values ($1)",
            "WITH x AS (SELECT 1) UPDATE t SET a = 1",
            "SET LOCAL statement_timeout = '1s'",
            "set constraints all deferred",
            "CREATE TABLE IF NOT EXISTS t (id bigint)",
            "DELETE FROM t",
            "(SELECT 1)",
            "NOTIFY x, 'y'",
            "SELECT 'COMMIT'",
        ] {
            assert!(check(sql).is_ok(), "{sql:?} should be allowed");
        }
    }
}
