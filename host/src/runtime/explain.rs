//! `leasehold check`'s longer word on a component that matches no world, written for an author in
//! any language: each world's exports with their WIT signatures, which ones the component lacks
//! or has with another type, and how the common guest toolchains spell them. The one-line error
//! ([`super::load::ComponentError::NoWorld`]) stays what `/status` and the log show.

use std::fmt::Write;

use super::WIT_PACKAGE;

/// One export a world asks for.
struct Export {
    /// Its WIT name.
    name: &'static str,
    /// Its WIT signature.
    signature: &'static str,
    /// When the host calls it.
    role: &'static str,
}

const INIT: Export = Export {
    name: "init",
    signature: "func(config: list<tuple<string, string>>) -> result<_, string>",
    role: "once per start, with the manifest's [config] values",
};
const RECONCILE: Export = Export {
    name: "reconcile",
    signature: "func(ctx: reconcile-context) -> result<outcome, string>",
    role: "on the schedule, while this replica holds the lease",
};
const HANDLE_EVENT: Export = Export {
    name: "handle-event",
    signature: "func(channel: string, payload: string) -> result<_, string>",
    role: "for each PostgreSQL notification on the manifest's channels",
};
const CHECK: Export = Export {
    name: "check",
    signature: "func(role: role) -> result<_, string>",
    role: "before renewals (active) and before campaigns (standby)",
};

/// The worlds, each with what it asks for.
const WORLDS: &[(&str, &[Export])] = &[
    ("reconciler", &[INIT, RECONCILE]),
    ("event-reconciler", &[INIT, RECONCILE, HANDLE_EVENT]),
    ("health-check", &[INIT, CHECK]),
];

/// How each guest toolchain names a world's exports, and where to read more.
const TOOLCHAINS: &str = "\
How guest toolchains spell these exports:
  Python (componentize-py --world WORLD): methods of the class `WitWorld` in the app module,
    with '-' as '_' (handle_event); return the value, raise componentize_py_types.Err(text).
  JavaScript (componentize-js, world WORLD): exported functions of the module, in camelCase
    (handleEvent); return the value, or { tag: 'err', val: text } to fail (a thrown Error traps).
  Rust (leasehold-guest): implement the Reconciler, EventHandler or HealthCheck trait and call
    export_reconciler!, export_event_reconciler! or export_health_check!.
  Any other language: bindings generated from wit/plugin.wit for the world (wit/README.md).
Start from a working plugin with: leasehold new NAME --lang rust|python|js --world WORLD";

/// The explanation for a component exporting `exports`; `type_errors` holds, per world name,
/// the linker's complaint when every export is there but one has another type.
pub(crate) fn no_world(exports: &[String], type_errors: &[(&str, &str)]) -> String {
    let mut text = String::new();
    let found = if exports.is_empty() {
        "nothing".to_string()
    } else {
        exports.join(", ")
    };
    let _ = writeln!(text, "This component exports: {found}.");
    let _ = writeln!(
        text,
        "A leasehold plugin implements one world of {WIT_PACKAGE} (wit/plugin.wit):"
    );
    let has = |name: &str| exports.iter().any(|e| e == name);
    // The world the component came closest to first: it is most likely the one meant.
    let mut worlds: Vec<&(&str, &[Export])> = WORLDS.iter().collect();
    worlds.sort_by_key(|(_, asks)| asks.iter().filter(|e| !has(e.name)).count());
    for (world, asks) in worlds {
        let _ = writeln!(text, "  world {world}:");
        for export in *asks {
            let state = if has(export.name) { "found" } else { "MISSING" };
            let _ = writeln!(
                text,
                "    {state:<7} {}: {}\n            called {}",
                export.name, export.signature, export.role
            );
        }
        if asks.iter().all(|e| has(e.name))
            && let Some((_, error)) = type_errors.iter().find(|(w, _)| w == world)
        {
            let _ = writeln!(text, "    every export is there, but: {error}");
        }
    }
    text.push_str(TOOLCHAINS);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_component_missing_exports_is_told_each_one_with_its_signature_closest_world_first() {
        let text = no_world(&["init".into(), "greet".into()], &[]);
        assert!(
            text.starts_with("This component exports: init, greet."),
            "{text}"
        );
        let reconciler = text.find("world reconciler:").unwrap();
        let event = text.find("world event-reconciler:").unwrap();
        let health = text.find("world health-check:").unwrap();
        assert!(reconciler < health && health < event, "{text}");
        assert!(
            text.contains(
                "MISSING reconcile: func(ctx: reconcile-context) -> result<outcome, string>"
            ),
            "{text}"
        );
        assert!(text.contains("found   init: func("), "{text}");
        assert!(text.contains("class `WitWorld`"), "{text}");
    }

    #[test]
    fn every_signature_shown_is_the_wits_own() {
        let wit = include_str!("../../../wit/plugin.wit");
        for (world, asks) in WORLDS {
            assert!(wit.contains(&format!("world {world} {{")), "{world}");
            for export in *asks {
                let line = format!("export {}: {};", export.name, export.signature);
                assert!(wit.contains(&line), "{line} is not in wit/plugin.wit");
            }
        }
    }

    #[test]
    fn a_component_with_every_export_of_the_wrong_type_is_told_the_linkers_complaint() {
        let exports = ["init".to_string(), "check".to_string()];
        let text = no_world(&exports, &[("health-check", "type mismatch for `check`")]);
        assert!(
            text.contains("every export is there, but: type mismatch for `check`"),
            "{text}"
        );
    }
}
