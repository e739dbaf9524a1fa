//! `leasehold check`: whether the host would load a plugin file, said as a line or as JSON.

use std::process::ExitCode;

use super::args::CheckArgs;

/// `leasehold check`: exit 0 only for a plugin the host would load, under a name the plugin
/// directory takes and with its manifest (the one beside it, or `--manifest`).
pub(crate) fn check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    use crate::runtime::WIT_PACKAGE;
    // `check NAME.toml` checks NAME.wasm beside it with that manifest.
    let (wasm, manifest) = match (args.file.extension(), &args.manifest) {
        (Some(ext), None) if ext == "toml" => {
            (args.file.with_extension("wasm"), Some(args.file.clone()))
        }
        (Some(ext), Some(_)) if ext == "toml" => {
            anyhow::bail!("give the component (NAME.wasm) with --manifest, not a second manifest")
        }
        _ => (args.file.clone(), args.manifest.clone()),
    };
    let file = crate::report::escape_controls(&wasm.display().to_string()).into_owned();
    match crate::app::check_plugin(&wasm, manifest.as_deref())? {
        Ok(checked) => {
            let world = checked.loaded.prepared.world();
            let binding = checked.manifest.binding.to_string();
            let manifest_shown = checked
                .manifest_path
                .as_ref()
                .map(|p| crate::report::escape_controls(&p.display().to_string()).into_owned());
            if args.json {
                let report = serde_json::json!({
                    "file": file, "ok": true, "package": WIT_PACKAGE, "world": world,
                    "manifest": manifest_shown, "binding": binding,
                    "imports": checked.loaded.imports, "exports": checked.loaded.exports,
                });
                println!("{report}");
            } else {
                println!("{file}: ok: {WIT_PACKAGE} world {}", world.name());
                match &manifest_shown {
                    Some(path) => println!("  manifest: {path}, bound to {binding}"),
                    None => println!("  manifest: none (the defaults: bound to {binding})"),
                }
                println!("  imports: {}", checked.loaded.imports.join(", "));
                println!("  exports: {}", checked.loaded.exports.join(", "));
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            let explanation = match &error {
                crate::plugin::LoadError::Component(e) => e.explain(),
                _ => None,
            };
            Ok(check_failed(&file, &error, explanation, args.json))
        }
    }
}

/// Reports why `file` does not load: one error line (and an explanation, if any) on stderr, or
/// a JSON report on stdout.
pub(super) fn check_failed(
    file: &str,
    error: &(dyn std::error::Error + 'static),
    explanation: Option<String>,
    json: bool,
) -> ExitCode {
    let line = crate::report::chain(error);
    if json {
        let causes = crate::report::causes(error);
        let report = serde_json::json!({
            "file": file, "ok": false, "error": line, "causes": causes,
        });
        println!("{report}");
    } else {
        eprintln!(
            "leasehold: error: {}",
            crate::report::escape_controls(&line)
        );
        if let Some(explanation) = explanation {
            eprintln!("{explanation}");
        }
    }
    ExitCode::FAILURE
}
