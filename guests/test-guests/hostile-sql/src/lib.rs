//! A reconciler that runs whatever SQL its configuration says, through its sql grant: the host's
//! tests play a hostile plugin with it (rewriting another lease, calling the fence function
//! itself, holding a transaction open, leaving state on a pooled session).
//!
//! On every reconcile it makes one call and logs one line at info:
//! `hostile CALL ok: RESULT` or `hostile CALL err=KIND: TEXT`.
//!
//! Config:
//! - `call`: `transaction` (default; every statement in one `sql.transaction`), `execute` (each
//!   statement its own `sql.execute`, stopping at the first error) or `query` (the first
//!   statement as a `sql.query`; the result's rows are logged as `[[v, …], …]`);
//! - `statements`: the statements, separated by a line holding only `;;` (a single statement
//!   needs none). `{lease}`, `{holder}` and `{epoch}` are replaced by the term's lease, this
//!   replica's holder id and the epoch, so an attack can name the plugin's own lease row.

use leasehold_guest::sql::{self, Statement, Value};
use leasehold_guest::{Config, Context, Error, Outcome, Reconciler, info, lease};

struct Hostile {
    call: String,
    statements: Vec<String>,
}

impl Reconciler for Hostile {
    fn init(config: Config) -> Result<Self, Error> {
        config.deny_unknown(&["call", "statements"])?;
        let statements = config
            .require("statements")?
            .split("\n;;\n")
            .map(str::to_string)
            .collect();
        Ok(Hostile {
            call: config
                .choice("call", &["transaction", "execute", "query"], "transaction")?
                .to_string(),
            statements,
        })
    }

    fn reconcile(&mut self, ctx: Context) -> Result<Outcome, Error> {
        let statements: Vec<String> = self
            .statements
            .iter()
            .map(|s| {
                s.replace("{lease}", ctx.lease())
                    .replace("{holder}", &lease::holder())
                    .replace("{epoch}", &ctx.epoch().to_string())
            })
            .collect();
        let outcome = match self.call.as_str() {
            "query" => sql::query(&statements[0], &[]).map(|rows| {
                format!(
                    "{:?}",
                    rows.iter().map(|r| text(r.values())).collect::<Vec<_>>()
                )
            }),
            "execute" => statements
                .iter()
                .map(|s| sql::execute(s, &[]))
                .collect::<Result<Vec<u64>, _>>()
                .map(|counts| format!("{counts:?}")),
            _ => {
                let batch: Vec<Statement> = statements
                    .iter()
                    .map(|s| Statement::new(s.as_str(), &[]))
                    .collect();
                sql::transaction(&batch).map(|counts| format!("{counts:?}"))
            }
        };
        match outcome {
            Ok(result) => info!("hostile {} ok: {result}", self.call),
            Err(e) => info!("hostile {} err={}: {e}", self.call, e.kind()),
        }
        Ok(Outcome::default())
    }
}

/// A row's values as text, NULL as `null`.
fn text(values: &[Value]) -> Vec<String> {
    values
        .iter()
        .map(|v| match v {
            Value::Null => "null".to_string(),
            Value::Text(s) => s.clone(),
            Value::Int(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            other => format!("{other:?}"),
        })
        .collect()
}

leasehold_guest::export_reconciler!(Hostile);
