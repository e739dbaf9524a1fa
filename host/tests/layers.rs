//! The layers `lib.rs` states are the layers the code has: no module names a module listed
//! after it in `lib.rs`'s "Layers" list. Any mention counts (`use crate::…`, a path in an
//! expression, a type), except in comments.

use std::path::{Path, PathBuf};

/// The top-level modules in layer order, read from `lib.rs`'s numbered list `N. [`name`]: …`.
fn stated_layers(lib: &str) -> Vec<String> {
    lib.lines()
        .filter_map(|line| line.strip_prefix("//! "))
        .filter_map(|line| {
            let (number, rest) = line.trim_start().split_once(". [`")?;
            number.parse::<u32>().ok()?;
            Some(rest.split_once("`]")?.0.to_string())
        })
        .collect()
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("reading the source tree") {
        let path = entry.expect("reading the source tree").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The modules a line of code names as `crate::NAME`.
fn named_modules(line: &str) -> Vec<&str> {
    let code = line.split("//").next().unwrap_or("");
    code.match_indices("crate::")
        .filter(|(at, _)| {
            // `crate::` itself, not the tail of another path such as `mycrate::`.
            !code[..*at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
        .map(|(at, _)| {
            let rest = &code[at + "crate::".len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

#[test]
fn no_module_imports_a_module_of_a_higher_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("reading lib.rs");
    let layers = stated_layers(&lib);
    assert!(
        layers.len() >= 5,
        "lib.rs states no layer list (`//! N. [`module`]: …`): {layers:?}"
    );
    let rank = |module: &str| layers.iter().position(|l| l == module);

    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut unlisted = Vec::new();
    let mut upward = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&src).expect("under src");
        let top = relative
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|s| s.trim_end_matches(".rs").to_string())
            .unwrap_or_default();
        if top == "lib" || top == "main" {
            continue;
        }
        let Some(own) = rank(&top) else {
            unlisted.push(top);
            continue;
        };
        let text = std::fs::read_to_string(&file).expect("reading a source file");
        let mut in_block_comment = false;
        for (n, line) in text.lines().enumerate() {
            let trimmed = line.trim_start();
            if trimmed.starts_with("/*") {
                in_block_comment = true;
            }
            if in_block_comment {
                in_block_comment = !trimmed.contains("*/");
                continue;
            }
            for module in named_modules(line) {
                match rank(module) {
                    Some(theirs) if theirs > own => upward.push(format!(
                        "{}:{}: `{top}` (layer {}) names `crate::{module}` (layer {})",
                        relative.display(),
                        n + 1,
                        own + 1,
                        theirs + 1
                    )),
                    Some(_) => {}
                    None => unlisted.push(module.to_string()),
                }
            }
        }
    }
    unlisted.sort();
    unlisted.dedup();
    assert!(
        unlisted.is_empty(),
        "modules missing from lib.rs's layer list: {unlisted:?}"
    );
    assert!(
        upward.is_empty(),
        "upward imports (a module may use only the layers listed before it in lib.rs):\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_layer_check_reads_paths_and_skips_comments() {
    assert_eq!(
        named_modules("use crate::lease::{Term, name}; let x = crate::runtime::f();"),
        ["lease", "runtime"]
    );
    assert!(named_modules("// see crate::cli").is_empty());
    assert!(named_modules("use mycrate::cli;").is_empty());
    assert_eq!(
        stated_layers("//! 1. [`metrics`]: x\n//! 2. [`lease`]: y\n//! - [`other`]"),
        ["metrics", "lease"]
    );
}
