//! Locked doors: what a layer of the host makes `pub` is what some other part of the workspace
//! names. Everything else is `pub(crate)` or narrower, so that a reader can tell a layer's face
//! from its rooms, and the compiler finds what nobody uses.
//!
//! The count is textual: an item is named outside its layer when its name, as a word, appears in
//! the code (comments left out) of another layer of `host/src`, of `main.rs`, or of another crate
//! of the workspace (the tests and benchmarks, the lease crates, the examples). A type that must
//! stay `pub` because a public item's signature holds it (an error type of a public function, a
//! field's type) counts as unnamed: the count says how much of the public face nobody asks for.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The most public items named nowhere outside their layer.
const MOST: usize = 20;

/// The kinds of module-level item a `pub` may open.
const KINDS: [&str; 8] = [
    "fn", "struct", "enum", "const", "static", "trait", "type", "mod",
];

/// Every `.rs` file under `dir`, skipping build output.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path
                .file_name()
                .is_some_and(|n| n == "target" || n == "node_modules")
            {
                continue;
            }
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `text` without its line comments (doc comments included): a name in prose is no use.
fn without_comments(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `name` appears in `text` as a whole word.
fn names(text: &str, name: &str) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(name).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + name.len()..].chars().next();
        !before.is_some_and(word) && !after.is_some_and(word)
    })
}

/// The names a file's module-level `pub` items bind, each with its line: `pub fn x`, `pub
/// struct X`, … and each name of a `pub use a::{B, C as D}` (here `B` and `D`).
fn public_items(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(rest) = line.strip_prefix("pub ") else {
            continue;
        };
        let rest = rest
            .trim_start_matches("async ")
            .trim_start_matches("unsafe ");
        if let Some(tree) = rest.strip_prefix("use ") {
            let mut tree = tree.to_string();
            let mut next = i + 1;
            while !tree.contains(';') && next < lines.len() {
                tree.push_str(lines[next]);
                next += 1;
            }
            let tree = tree.split(';').next().unwrap_or_default();
            for part in tree.split(['{', '}', ',']) {
                let part = part.trim();
                let name = match part.split_once(" as ") {
                    Some((_, alias)) => alias.trim(),
                    None => part.rsplit("::").next().unwrap_or_default().trim(),
                };
                if !name.is_empty() && name != "self" && name != "*" {
                    out.push((i + 1, name.to_string()));
                }
            }
            continue;
        }
        for kind in KINDS {
            if let Some(after) = rest.strip_prefix(kind).and_then(|r| r.strip_prefix(' ')) {
                let name: String = after
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.push((i + 1, name));
                }
            }
        }
    }
    out
}

/// `file:line: name` of each public item of the host named nowhere outside its layer.
fn unnamed_outside(root: &Path) -> (usize, Vec<String>) {
    let src = root.join("host/src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    // Each layer's code, by layer: `lease.rs` and `lease/…` are one layer.
    let mut layers: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    let mut elsewhere = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).expect("under src");
        let text = std::fs::read_to_string(file).expect("reading a source file");
        let first = relative.iter().next().expect("a path").to_string_lossy();
        let layer = first.trim_end_matches(".rs").to_string();
        if layer == "lib" || layer == "main" {
            elsewhere.push(without_comments(&text));
            continue;
        }
        layers
            .entry(layer)
            .or_default()
            .push((relative.display().to_string(), text));
    }
    let mut others = Vec::new();
    for dir in ["tests", "crates", "host/tests", "examples"] {
        sources(&root.join(dir), &mut others);
    }
    for file in others {
        elsewhere.push(without_comments(
            &std::fs::read_to_string(&file).expect("reading a source file"),
        ));
    }
    let code: BTreeMap<&str, Vec<String>> = layers
        .iter()
        .map(|(layer, files)| {
            let texts = files.iter().map(|(_, t)| without_comments(t)).collect();
            (layer.as_str(), texts)
        })
        .collect();
    let mut total = 0;
    let mut unnamed = Vec::new();
    for (layer, files) in &layers {
        for (file, text) in files {
            for (line, name) in public_items(text) {
                total += 1;
                let outside = code
                    .iter()
                    .filter(|(other, _)| *other != layer)
                    .flat_map(|(_, texts)| texts)
                    .chain(&elsewhere)
                    .any(|text| names(text, &name));
                if !outside {
                    unnamed.push(format!("host/src/{file}:{line}: {name}"));
                }
            }
        }
    }
    (total, unnamed)
}

#[test]
fn fewer_than_twenty_public_items_are_named_nowhere_outside_their_layer() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let (total, unnamed) = unnamed_outside(&root);
    println!(
        "{total} public items in host/src; {} named nowhere outside their layer:\n{}",
        unnamed.len(),
        unnamed.join("\n")
    );
    assert!(
        total > 100,
        "only {total} public items found: is the scan reading host/src?"
    );
    assert!(
        unnamed.len() < MOST,
        "{} public items are named nowhere outside their layer (at most {} may be): make them \
         pub(crate) or narrower, or say why they are public:\n{}",
        unnamed.len(),
        MOST - 1,
        unnamed.join("\n")
    );
}

#[test]
fn the_scan_reads_items_uses_and_words() {
    let text = "pub fn run() {}\npub(crate) fn hidden() {}\n    pub fn method() {}\n\
                pub async fn serve() {}\npub use a::{B, c::D as E,\n    F};\npub struct S;\n";
    let found: Vec<String> = public_items(text).into_iter().map(|(_, n)| n).collect();
    assert_eq!(found, ["run", "serve", "B", "E", "F", "S"]);
    assert!(names("let x = run();", "run"));
    assert!(!names("let x = rerun();", "run"));
    assert!(!names(&without_comments("// run"), "run"));
}
