//! The orders the sources state are the orders the code has.
//!
//! Checked in each crate that states an order: the host, `leasehold-lease`,
//! `leasehold-lease-core` and `leasehold-sim`; Cargo keeps the line between the crates themselves.
//!
//! - A crate's layers: no module names a module listed after it in its `lib.rs`'s numbered list
//!   (the host's "Layers", a lease crate's "Order").
//! - A module's own order: in a module directory whose `mod.rs` states a numbered list of its
//!   modules the same way (the lease groups'), no module names a sibling listed after it.
//! - No cycles: in every module directory, with or without a stated order, no two modules name
//!   each other, directly or through others.
//! - A parent is a table of contents (the host's): no module names an item its parent file
//!   (`mod.rs`, or `name.rs` beside `name/`) declares itself, only the parent's child modules and
//!   what it re-exports from them; a child named `tests` tests its parent and may.
//!
//! Any mention counts: a `use`, a path in an expression, a type, each path of a `use …::{…}`
//! group, written from `crate::`, `super::` or `self::`, and a name the parent re-exports
//! (`pub use store::LeaseStore` in the lease crate's `lib.rs` makes `crate::LeaseStore` a
//! mention of `store`). Comments and string literals do not count. A child module named `tests` tests its
//! parent and is in no order.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The modules in order, read from a numbered list `N. [`name`]: …` in a file's `//!` docs.
fn stated_order(parent: &str) -> Vec<String> {
    parent
        .lines()
        .filter_map(|line| line.strip_prefix("//! "))
        .filter_map(|line| {
            let (number, rest) = line.trim_start().split_once(". [`")?;
            number.parse::<u32>().ok()?;
            Some(rest.split_once("`]")?.0.to_string())
        })
        .collect()
}

/// `text` with its comments and the insides of its string and character literals blanked out,
/// newlines kept, so that what is left is code at the same offsets and lines.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let ident_before = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && (!ident_before
                || chars[i - 1] == 'b'
                    && !(i >= 2 && (chars[i - 2].is_alphanumeric() || chars[i - 2] == '_')))
            && matches!(next, Some('"' | '#'))
            && chars[i + 1..]
                .iter()
                .find(|&&c| c != '#')
                .is_some_and(|&c| c == '"')
        {
            // A raw string: r"…", r#"…"#, br"…".
            let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count();
            out.push('r');
            out.extend(std::iter::repeat_n('#', hashes));
            out.push('"');
            i += 2 + hashes;
            while i < chars.len() {
                if chars[i] == '"'
                    && chars[i + 1..].iter().take_while(|&&c| c == '#').count() >= hashes
                {
                    out.push('"');
                    out.extend(std::iter::repeat_n('#', hashes));
                    i += 1 + hashes;
                    break;
                }
                out.push(blank(chars[i]));
                i += 1;
            }
        } else if c == '"' {
            out.push('"');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if let Some(&c) = chars.get(i) {
                    out.push(blank(c));
                }
                i += 1;
            }
            out.push('"');
            i += 1;
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            // A character literal ('x', '\n', '\''); a lifetime ('a) has no closing quote.
            out.push('\'');
            i += 1;
            if chars.get(i) == Some(&'\\') {
                // The backslash and the character it escapes, which may be a quote.
                out.push_str("  ");
                i += 2;
            }
            while i < chars.len() && chars[i] != '\'' {
                out.push(' ');
                i += 1;
            }
            out.push('\'');
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The tokens of code (after [`code_only`]) with their offsets: identifiers, `::`, and single
/// characters for everything else.
fn tokens(code: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut rest = code.char_indices().peekable();
    while let Some((at, c)) = rest.next() {
        if c.is_whitespace() {
            continue;
        }
        let end = if c.is_alphanumeric() || c == '_' {
            let mut end = at + c.len_utf8();
            while let Some(&(next, c)) = rest.peek() {
                if !(c.is_alphanumeric() || c == '_') {
                    break;
                }
                end = next + c.len_utf8();
                rest.next();
            }
            end
        } else if c == ':' && rest.peek().is_some_and(|&(_, c)| c == ':') {
            rest.next();
            at + 2
        } else {
            at + c.len_utf8()
        };
        out.push((at, &code[at..end]));
    }
    out
}

/// The paths of a use tree (or of a plain path) starting at token `i` below `base`, each with
/// the name it binds (its last segment, or its alias).
fn tree(tokens: &[(usize, &str)], i: usize, base: &[String]) -> Vec<(Vec<String>, String)> {
    let token = |i: usize| tokens.get(i).map(|t| t.1).unwrap_or("");
    let mut out = Vec::new();
    match token(i) {
        "{" => {
            let mut j = i + 1;
            let mut depth = 0;
            let mut item_start = j;
            while j < tokens.len() {
                match token(j) {
                    "{" => depth += 1,
                    "}" if depth > 0 => depth -= 1,
                    "," | "}" if depth == 0 => {
                        if j > item_start {
                            out.extend(tree(tokens, item_start, base));
                        }
                        if token(j) == "}" {
                            break;
                        }
                        item_start = j + 1;
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        "self" if token(i + 1) != "::" => {
            if let Some(last) = base.last() {
                out.push((base.to_vec(), last.clone()));
            }
        }
        "*" => out.push((base.to_vec(), String::new())),
        name if name.starts_with(|c: char| c.is_alphabetic() || c == '_') => {
            let mut path = base.to_vec();
            path.push(name.to_string());
            let below = match token(i + 1) {
                "::" => tree(tokens, i + 2, &path),
                _ => Vec::new(),
            };
            if !below.is_empty() {
                out.extend(below);
            } else if token(i + 1) == "::" {
                // A turbofish (`f::<T>`) or a path the tree reader does not follow further.
                out.push((path, name.to_string()));
            } else if token(i + 1) == "as" {
                out.push((path, token(i + 2).to_string()));
            } else {
                out.push((path, name.to_string()));
            }
        }
        _ => {}
    }
    out
}

/// Every path the source of module `module` (its path below the crate root) names from
/// `crate::`, `super::` or `self::`, made absolute, with the line it is on. Inline modules
/// (`mod tests { … }`) are followed, so that `super::` inside one means what the compiler reads.
fn mentions(text: &str, module: &[String]) -> Vec<(usize, Vec<String>)> {
    let code = code_only(text);
    let tokens = tokens(&code);
    let token = |i: usize| tokens.get(i).map(|t| t.1).unwrap_or("");
    let line = |at: usize| code[..at].matches('\n').count() + 1;
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut out = Vec::new();
    for i in 0..tokens.len() {
        match token(i) {
            "{" => {
                depth += 1;
                if i >= 2 && token(i - 2) == "mod" {
                    inline.push((token(i - 1).to_string(), depth));
                }
            }
            "}" => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth -= 1;
            }
            start @ ("crate" | "super" | "self")
                if token(i + 1) == "::" && (i == 0 || token(i - 1) != "::") =>
            {
                let mut here: Vec<String> = module.to_vec();
                here.extend(inline.iter().map(|(name, _)| name.clone()));
                let mut j = i + 2;
                let base = match start {
                    "crate" => Vec::new(),
                    "self" => here,
                    _ => {
                        let mut base = here;
                        if base.pop().is_none() {
                            continue;
                        }
                        while token(j) == "super" && token(j + 1) == "::" {
                            if base.pop().is_none() {
                                break;
                            }
                            j += 2;
                        }
                        base
                    }
                };
                let at = line(tokens[i].0);
                out.extend(tree(&tokens, j, &base).into_iter().map(|(p, _)| (at, p)));
            }
            _ => {}
        }
    }
    out
}

/// The child modules a parent declares (`mod name;`, `pub mod name;`), and the names it
/// re-exports (`pub use name::…`) with the child each comes from.
fn children(parent: &str) -> (Vec<String>, BTreeMap<String, String>) {
    let code = code_only(parent);
    let tokens = tokens(&code);
    let token = |i: usize| tokens.get(i).map(|t| t.1).unwrap_or("");
    let declared: Vec<String> = (0..tokens.len())
        .filter(|&i| token(i) == "mod" && token(i + 2) == ";")
        .map(|i| token(i + 1).to_string())
        .collect();
    let mut reexports = BTreeMap::new();
    for (path, name) in reexported(&tokens) {
        if let Some(first) = path.first().filter(|f| declared.contains(f)) {
            reexports.insert(name, first.clone());
        }
    }
    (declared, reexports)
}

/// The paths a file re-exports (`pub use …;`), each with the name it binds; a leading `self::`
/// is dropped, so that `pub use self::store::Store` is a re-export from `store`.
fn reexported(tokens: &[(usize, &str)]) -> Vec<(Vec<String>, String)> {
    let token = |i: usize| tokens.get(i).map(|t| t.1).unwrap_or("");
    let mut out = Vec::new();
    for i in 0..tokens.len() {
        if token(i) == "pub" && token(i + 1) == "use" {
            let start = if token(i + 2) == "self" && token(i + 3) == "::" {
                i + 4
            } else {
                i + 2
            };
            out.extend(tree(tokens, start, &[]));
        }
    }
    out
}

/// One module directory checked against the order its parent file states.
#[derive(Debug, Default)]
struct Findings {
    /// Child modules the order does not list.
    unlisted: Vec<String>,
    /// Listed names that are no child module.
    stale: Vec<String>,
    /// `file:line: ...` for each mention of a sibling listed later.
    upward: Vec<String>,
}

/// One module's mention of a sibling: the module, the sibling, and `file:line` with the path.
struct SiblingMention {
    own: String,
    sibling: String,
    at: String,
}

/// Every mention, in the sources below `dir` (a module path; empty for the crate root), of one
/// child module of `dir` by another: `parent` is `dir`'s `lib.rs`, `mod.rs` or `name.rs`, and
/// `files` the sources (a name for the report, the module path of the file, and its text).
fn sibling_mentions(
    dir: &[String],
    parent: &str,
    files: &[(String, Vec<String>, String)],
) -> Vec<SiblingMention> {
    let (declared, reexports) = children(parent);
    let mut out = Vec::new();
    for (at, own, path) in mentions_below(dir, files) {
        let Some(named) = path.get(dir.len()) else {
            continue;
        };
        let sibling = if declared.contains(named) {
            named
        } else if let Some(child) = reexports.get(named) {
            child
        } else {
            continue;
        };
        if sibling != own && sibling != "tests" {
            out.push(SiblingMention {
                own: own.to_string(),
                sibling: sibling.clone(),
                at: format!("{at}: as `{}`", path.join("::")),
            });
        }
    }
    out
}

/// Every mention, made in a module below `dir` (but in a child named `tests`, which tests its
/// parent), of a path below `dir`: `file:line`, the child of `dir` the mention is made in, and
/// the path.
fn mentions_below<'a>(
    dir: &[String],
    files: &'a [(String, Vec<String>, String)],
) -> Vec<(String, &'a str, Vec<String>)> {
    let mut out = Vec::new();
    for (name, module, text) in files {
        let Some(own) = module.get(dir.len()).filter(|_| module.starts_with(dir)) else {
            continue;
        };
        if own == "tests" {
            continue;
        }
        for (line, path) in mentions(text, module) {
            if path.starts_with(dir) {
                out.push((format!("{name}:{line}"), own.as_str(), path));
            }
        }
    }
    out
}

/// Every mention, in the sources below `dir`, of an item its parent file declares itself rather
/// than a child module or a name it re-exports from one (`file:line: as path`). A glob import of
/// the parent counts: it takes whatever the parent holds. Children named `tests` are left out.
fn parent_items_named(
    dir: &[String],
    parent: &str,
    files: &[(String, Vec<String>, String)],
) -> Vec<String> {
    let (declared, _) = children(parent);
    // Any re-export will do, of a child's item or of another crate's.
    let code = code_only(parent);
    let reexports: Vec<String> = reexported(&tokens(&code))
        .into_iter()
        .map(|(_, name)| name)
        .collect();
    let mut out = Vec::new();
    for (at, own, path) in mentions_below(dir, files) {
        let named = path.get(dir.len());
        if named.is_some_and(|n| n == own || declared.contains(n) || reexports.contains(n)) {
            continue;
        }
        let said = format!("{at}: as `{}`", path.join("::"));
        if !out.contains(&said) {
            out.push(said);
        }
    }
    out
}

/// Checks the modules below `dir` against the order `parent` states (see [`sibling_mentions`]).
fn check_order(dir: &[String], parent: &str, files: &[(String, Vec<String>, String)]) -> Findings {
    let order = stated_order(parent);
    let (declared, _) = children(parent);
    let rank = |m: &str| order.iter().position(|o| o == m);
    let mut found = Findings::default();
    for child in declared.iter().filter(|c| *c != "tests") {
        if rank(child).is_none() {
            found.unlisted.push(child.clone());
        }
    }
    for listed in &order {
        if !declared.contains(listed) {
            found.stale.push(listed.clone());
        }
    }
    for m in sibling_mentions(dir, parent, files) {
        let (Some(own_rank), Some(theirs)) = (rank(&m.own), rank(&m.sibling)) else {
            continue;
        };
        let (file_line, path) = m.at.split_once(": as ").unwrap_or((&m.at, ""));
        let said = format!(
            "{file_line}: `{}` ({}) names `{}`",
            m.own,
            own_rank + 1,
            m.sibling
        );
        // One finding per line and sibling, with the first path that names it.
        if theirs > own_rank && !found.upward.iter().any(|u| u.starts_with(&said)) {
            found
                .upward
                .push(format!("{said} ({}) as {path}", theirs + 1));
        }
    }
    found
}

/// The cycles among the child modules of `dir`: each a list of modules `a → b → … → a`, with
/// one mention that makes each step. Found as the strongly connected components of the graph
/// "names a sibling" (Tarjan), so each tangle is reported once however many loops it holds.
fn cycles(dir: &[String], parent: &str, files: &[(String, Vec<String>, String)]) -> Vec<String> {
    let mut edges: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for m in sibling_mentions(dir, parent, files) {
        edges
            .entry(m.own)
            .or_default()
            .entry(m.sibling)
            .or_insert(m.at);
    }
    let nodes: Vec<String> = edges
        .iter()
        .flat_map(|(own, to)| std::iter::once(own.clone()).chain(to.keys().cloned()))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let index_of = |n: &str| nodes.iter().position(|m| m == n).expect("a node");
    let next: Vec<Vec<usize>> = nodes
        .iter()
        .map(|n| {
            edges
                .get(n)
                .map(|to| to.keys().map(|t| index_of(t)).collect())
                .unwrap_or_default()
        })
        .collect();
    let components = strongly_connected(&next);
    components
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|component| {
            let names: Vec<&str> = component.iter().map(|&i| nodes[i].as_str()).collect();
            let steps: Vec<String> = names
                .iter()
                .flat_map(|own| {
                    edges[*own]
                        .iter()
                        .filter(|(to, _)| names.contains(&to.as_str()))
                        .map(move |(to, at)| format!("  {own} → {to}: {at}"))
                })
                .collect();
            format!("{}:\n{}", names.join(", "), steps.join("\n"))
        })
        .collect()
}

/// Tarjan's strongly connected components of the graph `next` (node → the nodes it points to).
fn strongly_connected(next: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct Walk<'a> {
        next: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        stack: Vec<usize>,
        on_stack: Vec<bool>,
        counter: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(w: &mut Walk, v: usize) {
        w.index[v] = Some(w.counter);
        w.low[v] = w.counter;
        w.counter += 1;
        w.stack.push(v);
        w.on_stack[v] = true;
        for &to in &w.next[v] {
            match w.index[to] {
                None => {
                    visit(w, to);
                    w.low[v] = w.low[v].min(w.low[to]);
                }
                Some(i) if w.on_stack[to] => w.low[v] = w.low[v].min(i),
                Some(_) => {}
            }
        }
        if Some(w.low[v]) == w.index[v] {
            let mut component = Vec::new();
            while let Some(top) = w.stack.pop() {
                w.on_stack[top] = false;
                component.push(top);
                if top == v {
                    break;
                }
            }
            component.sort_unstable();
            w.out.push(component);
        }
    }
    let n = next.len();
    let mut w = Walk {
        next,
        index: vec![None; n],
        low: vec![0; n],
        stack: Vec::new(),
        on_stack: vec![false; n],
        counter: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if w.index[v].is_none() {
            visit(&mut w, v);
        }
    }
    w.out
}

/// The parent of every module directory: `lib.rs`, each `mod.rs`, and each `name.rs` beside a
/// directory `name/`; with the module path of the directory and the file's text.
fn parents(
    src: &Path,
    files: &[(String, Vec<String>, String)],
) -> Vec<(Vec<String>, String, String)> {
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("reading lib.rs");
    let mut out = vec![(Vec::new(), "lib.rs".to_string(), lib)];
    for (name, module, text) in files {
        let dir = src.join(name.trim_end_matches(".rs"));
        if name.ends_with("mod.rs") || dir.is_dir() {
            out.push((module.clone(), name.clone(), text.clone()));
        }
    }
    out
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

/// The module path of a source file below `src` (`lease/driver/tests.rs` is
/// `lease::driver::tests`, `lease/mod.rs` is `lease`), with its text.
fn read_sources(src: &Path) -> Vec<(String, Vec<String>, String)> {
    let mut files = Vec::new();
    sources(src, &mut files);
    files.sort();
    files
        .into_iter()
        .filter_map(|file| {
            let relative = file.strip_prefix(src).expect("under src");
            let mut module: Vec<String> = relative
                .iter()
                .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string())
                .collect();
            if module == ["lib"] || module == ["main"] {
                return None;
            }
            if module.last().is_some_and(|m| m == "mod") {
                module.pop();
            }
            let text = std::fs::read_to_string(&file).expect("reading a source file");
            Some((relative.display().to_string(), module, text))
        })
        .collect()
}

/// The source directories of the workspace's crates that state an order: the host, and the lease
/// crates below it. Cargo keeps the crates apart; these tests keep the order inside each.
fn crate_sources() -> Vec<(&'static str, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    vec![
        ("host", root.join("src")),
        (
            "leasehold-lease-core",
            root.join("../crates/lease-core/src"),
        ),
        ("leasehold-lease", root.join("../crates/lease/src")),
        ("leasehold-sim", root.join("../crates/sim/src")),
    ]
}

fn assert_clean(what: &str, found: &Findings) {
    assert!(
        found.unlisted.is_empty() && found.stale.is_empty(),
        "{what}: modules missing from its list: {:?}; listed but no such module: {:?}",
        found.unlisted,
        found.stale
    );
    assert!(
        found.upward.is_empty(),
        "{what}: upward imports (a module may use only those listed before it):\n{}",
        found.upward.join("\n")
    );
}

#[test]
fn no_module_imports_a_module_of_a_higher_layer() {
    for (name, src) in crate_sources() {
        let lib = std::fs::read_to_string(src.join("lib.rs")).expect("reading lib.rs");
        let layers = stated_order(&lib);
        assert!(
            layers.len() >= 5,
            "{name}'s lib.rs states no layer list (`//! N. [`module`]: …`): {layers:?}"
        );
        assert_clean(
            &format!("{name}'s lib.rs"),
            &check_order(&[], &lib, &read_sources(&src)),
        );
    }
}

#[test]
fn no_module_imports_a_sibling_listed_after_it_in_its_parents_order() {
    let mut checked = Vec::new();
    for (name, src) in crate_sources() {
        let files = read_sources(&src);
        for (file, module, text) in &files {
            if file.ends_with("mod.rs") && !stated_order(text).is_empty() {
                assert_clean(
                    &format!("{name}: {file}"),
                    &check_order(module, text, &files),
                );
                checked.push(format!("{name}::{}", module.join("::")));
            }
        }
    }
    // The lease groups state their order; a list lost from its docs must not pass unnoticed.
    assert!(
        checked.iter().any(|m| m == "leasehold-lease-core::groups"),
        "groups/mod.rs states no order: checked {checked:?}"
    );
}

#[test]
fn no_modules_name_each_other_in_a_cycle_anywhere_in_the_crate() {
    // A stated order rules cycles out where there is one; this covers every other module
    // directory: two modules that each need the other are one module, or a third is missing.
    let mut found = Vec::new();
    let mut looked = 0;
    for (crate_name, src) in crate_sources() {
        let files = read_sources(&src);
        for (dir, name, text) in parents(&src, &files) {
            looked += 1;
            for cycle in cycles(&dir, &text, &files) {
                found.push(format!("{crate_name}: below {name}: {cycle}"));
            }
        }
    }
    assert!(looked > 10, "only {looked} module directories found");
    assert!(found.is_empty(), "module cycles:\n{}", found.join("\n"));
}

#[test]
fn the_cycle_check_catches_two_modules_naming_each_other() {
    let parent = "//! A map.\nmod a;\nmod b;\nmod c;\nmod tests;\n";
    let file = |name: &str, text: &str| {
        (
            format!("x/{name}.rs"),
            vec!["x".to_string(), name.to_string()],
            text.to_string(),
        )
    };
    let clean = [
        file("a", "use super::b::B;\n"),
        file("b", "use super::c::C;\n// super::a::A in a comment\n"),
        file("c", "pub struct C;\n"),
        file("tests", "use super::{a, b, c};\n"),
    ];
    assert!(cycles(&["x".to_string()], parent, &clean).is_empty());
    let mut tangled = clean.to_vec();
    tangled[2] = file("c", "fn f() -> crate::x::a::A { todo!() }\n");
    let found = cycles(&["x".to_string()], parent, &tangled);
    assert_eq!(found.len(), 1, "{found:?}");
    for needle in [
        "a, b, c",
        "a → b: x/a.rs:1",
        "c → a: x/c.rs:1: as `x::a::A`",
    ] {
        assert!(
            found[0].contains(needle),
            "{needle:?} missing: {}",
            found[0]
        );
    }
}

#[test]
fn the_layer_check_reads_paths_and_skips_comments() {
    let at = |module: &[&str], text: &str| -> Vec<String> {
        let module: Vec<String> = module.iter().map(|m| m.to_string()).collect();
        mentions(text, &module)
            .into_iter()
            .map(|(_, path)| path.join("::"))
            .collect()
    };
    assert_eq!(
        at(
            &["http"],
            "use crate::lease::{Term, name}; let x = crate::runtime::f();"
        ),
        ["lease::Term", "lease::name", "runtime::f"]
    );
    assert!(at(&["http"], "// see crate::cli").is_empty());
    assert!(at(&["http"], "/* crate::cli */ let s = \"crate::cli\";").is_empty());
    assert!(at(&["http"], "use mycrate::cli; use std::io::{self, Write};").is_empty());
    assert_eq!(
        at(
            &["lease", "driver"],
            "use super::{\n    coordinator::Event,\n    store::{self, Epoch},\n};"
        ),
        [
            "lease::coordinator::Event",
            "lease::store",
            "lease::store::Epoch"
        ]
    );
    assert_eq!(
        at(
            &["lease", "driver", "tests"],
            "use super::super::handle::Leases; self::x();"
        ),
        ["lease::handle::Leases", "lease::driver::tests::x"]
    );
    // `super` inside an inline module is the file's own module.
    assert_eq!(
        at(
            &["lease", "groups"],
            "mod tests {\n use super::shard_lease;\n}\nuse super::store;"
        ),
        ["lease::groups::shard_lease", "lease::store"]
    );
    let lifetimes = "fn f<'a>(c: char) -> bool { c == '{' || c == '\\'' } use super::handle;";
    assert_eq!(at(&["lease", "store"], lifetimes), ["lease::handle"]);
    assert_eq!(
        stated_order("//! 1. [`metrics`]: x\n//! 2. [`lease`](mod@lease): y\n//! - [`other`]"),
        ["metrics", "lease"]
    );
}

#[test]
fn the_order_check_catches_a_module_naming_a_later_sibling() {
    let parent = "//! 1. [`store`]: rows\n//! 2. [`handle`]: the handle\n//! 3. [`driver`]: the loop\n\
                  pub mod driver;\npub mod handle;\npub mod store;\n#[cfg(test)]\nmod tests;\n\
                  pub use handle::Leases;\npub use store::{Epoch, LeaseStore as Store};\n\
                  pub fn helper() {}\n";
    let dir = ["lease".to_string()];
    let file = |name: &str, text: &str| {
        (
            format!("lease/{name}.rs"),
            vec!["lease".to_string(), name.to_string()],
            text.to_string(),
        )
    };
    let clean = [
        file(
            "store",
            "use super::helper; // super::driver in a comment\n",
        ),
        file(
            "handle",
            "use super::{Epoch, Store};\nuse crate::lease::store::Epoch;\n",
        ),
        file(
            "driver",
            "use super::handle::Leases;\nuse crate::lease::Store;\n",
        ),
        file("tests", "use super::driver::Driver;\n"),
    ];
    let found = check_order(&dir, parent, &clean);
    assert!(
        found.upward.is_empty() && found.unlisted.is_empty() && found.stale.is_empty(),
        "{found:?}"
    );

    // Upward by path, through a re-export, in a `use` group, and from an inline test module.
    let planted = [
        file("store", "use super::driver::Driver;\n"),
        file(
            "store",
            "fn f() {\n    let _ = crate::lease::Leases::new();\n}\n",
        ),
        file(
            "handle",
            "use crate::lease::{store::Epoch, driver::Driver};\n",
        ),
        file(
            "handle",
            "#[cfg(test)]\nmod tests {\n    use super::super::driver;\n}\n",
        ),
        file(
            "driver",
            "use super::handle::Leases;\nfn f() { crate::lease::store::f::<u8>() }\n",
        ),
    ];
    let found = check_order(&dir, parent, &planted);
    let expected = [
        "lease/store.rs:1: `store` (1) names `driver` (3) as `lease::driver::Driver`",
        "lease/store.rs:2: `store` (1) names `handle` (2) as `lease::Leases::new`",
        "lease/handle.rs:1: `handle` (2) names `driver` (3) as `lease::driver::Driver`",
        "lease/handle.rs:3: `handle` (2) names `driver` (3) as `lease::driver`",
    ];
    assert_eq!(found.upward, expected);

    // A child the order leaves out, and a listed name that is no child.
    let found = check_order(
        &dir,
        "//! 1. [`store`]: rows\n//! 2. [`gone`]: x\npub mod store;\npub mod extra;\n",
        &[],
    );
    assert_eq!(found.unlisted, ["extra"]);
    assert_eq!(found.stale, ["gone"]);
}

#[test]
fn no_module_names_an_item_of_its_parent_file_only_its_children_and_re_exports() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = read_sources(&src);
    let mut found = Vec::new();
    let mut looked = 0;
    for (dir, name, text) in parents(&src, &files) {
        looked += 1;
        for at in parent_items_named(&dir, &text, &files) {
            found.push(format!("below {name}: {at}"));
        }
    }
    assert!(looked > 10, "only {looked} module directories found");
    assert!(
        found.is_empty(),
        "modules naming an item of their parent file (move it into a module of its own and \
         re-export it from the parent if other layers use it):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_parent_check_catches_a_child_naming_an_item_of_its_parent() {
    let parent = "//! A map.\nmod a;\nmod b;\n#[cfg(test)]\nmod tests;\npub use self::a::A;\n\
                  pub use other_crate::Far;\npub struct Kept;\nfn helper() {}\n";
    let dir = ["x".to_string()];
    let file = |name: &str, text: &str| {
        (
            format!("x/{name}.rs"),
            vec!["x".to_string(), name.to_string()],
            text.to_string(),
        )
    };
    let clean = [
        file("a", "pub struct A;\nmod inner { use super::A; }\n"),
        file(
            "b",
            "use super::{A, Far};\nuse crate::x::a::A as B;\n// super::Kept\n",
        ),
        file("tests", "use super::{Kept, helper};\nuse super::*;\n"),
    ];
    assert!(parent_items_named(&dir, parent, &clean).is_empty());
    let planted = [
        file("a", "use super::Kept;\n"),
        file("b", "fn f() { crate::x::helper() }\n"),
        file("b", "use super::*;\n"),
    ];
    assert_eq!(
        parent_items_named(&dir, parent, &planted),
        [
            "x/a.rs:1: as `x::Kept`",
            "x/b.rs:1: as `x::helper`",
            "x/b.rs:1: as `x`"
        ]
    );
}
