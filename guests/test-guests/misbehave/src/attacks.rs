//! The verbs that attack the host's memory rather than the guest's: each makes the host allocate
//! on the guest's behalf (`random-flood`, `handle-flood`, `big-params`, `null-rows`).

use std::mem::ManuallyDrop;

use leasehold_guest::__private::wit_sql;
use leasehold_guest::Outcome;
use leasehold_guest::sql;

/// The few WASI functions the attacks call directly, declared as subsets of the host's
/// interfaces (an import may name fewer functions than the host provides).
mod wasi {
    wit_bindgen::generate!({
        inline: r#"
            package misbehave:attacks;

            world attacks {
                import wasi:random/random@0.2.0;
                import wasi:sockets/instance-network@0.2.0;
            }

            package wasi:random@0.2.0 {
                interface random {
                    get-random-bytes: func(len: u64) -> list<u8>;
                }
            }
            package wasi:sockets@0.2.0 {
                interface network {
                    resource network;
                }
                interface instance-network {
                    use network.{network};
                    instance-network: func() -> network;
                }
            }
        "#,
        world: "misbehave:attacks/attacks",
        generate_all,
    });
}

/// Asks for 4 KiB of random bytes, then for `mib` MiB in one call.
pub fn random_flood(mib: u64) -> Result<Outcome, String> {
    let small = wasi::wasi::random::random::get_random_bytes(4096);
    if small.len() != 4096 {
        return Err(format!(
            "4 KiB of random bytes came back as {}",
            small.len()
        ));
    }
    let big = wasi::wasi::random::random::get_random_bytes(mib << 20);
    Err(format!(
        "the host handed over {} random bytes in one call",
        big.len()
    ))
}

/// Creates `count` host resources and keeps them all.
pub fn handle_flood(count: u64) -> Result<Outcome, String> {
    let mut kept = Vec::new();
    for _ in 0..count {
        kept.push(wasi::wasi::sockets::instance_network::instance_network());
    }
    Err(format!(
        "the host kept {} resources for the guest",
        kept.len()
    ))
}

/// Sends one query whose `copies` text parameters all point at the same `mib` MiB string.
pub fn big_params(mib: u64, copies: u64) -> Result<Outcome, String> {
    let text = "x".repeat((mib as usize) << 20);
    // Each parameter is a `String` over the same bytes: lowering a parameter only writes its
    // pointer and length, so the guest holds the text once. They must never be dropped.
    let aliases: Vec<wit_sql::Value> = (0..copies)
        .map(|_| {
            // SAFETY: the alias is never dropped or written through (ManuallyDrop below), and
            // `text` outlives the call.
            let alias = unsafe {
                String::from_raw_parts(text.as_ptr().cast_mut(), text.len(), text.capacity())
            };
            wit_sql::Value::Text(alias)
        })
        .collect();
    let aliases = ManuallyDrop::new(aliases);
    let placeholders: Vec<String> = (1..=copies).map(|i| format!("length(${i})")).collect();
    let query = format!("SELECT {}", placeholders.join(", "));
    let answer = wit_sql::query(&query, &aliases);
    drop(text);
    match answer {
        Ok(rows) => Err(format!(
            "the host accepted {copies} parameters of {mib} MiB ({} rows)",
            rows.rows.len()
        )),
        Err(e) => {
            let e = leasehold_guest::CapabilityError::from(e);
            Err(format!("big-params: {} ({e})", e.kind()))
        }
    }
}

/// Queries 10,000 rows of 1,664 NULL columns.
pub fn null_rows() -> Result<Outcome, String> {
    let columns: Vec<String> = (1..=1_664).map(|i| format!("NULL::int AS c{i}")).collect();
    let query = format!(
        "SELECT {} FROM generate_series(1, 10000)",
        columns.join(", ")
    );
    match sql::query(&query, &[]) {
        Ok(rows) => Err(format!(
            "the host built {} rows of {} NULLs",
            rows.len(),
            rows.columns().len()
        )),
        Err(e) => Err(format!("null-rows: {} ({e})", e.kind())),
    }
}
