//! The files of a new project: the templates of `host/templates/` filled for one name,
//! language and world, with the WIT and the toolchain pins this checkout builds with.

use std::fmt::Write as _;
use std::path::Path;

use super::sdk;
use super::spec::*;

/// The text of `host/templates/PATH`, compiled in.
macro_rules! template {
    ($path:expr) => {
        include_str!(concat!("../../../templates/", $path))
    };
}

/// Fills `template`'s `{{key}}` placeholders from `vars` in one pass (values are not searched
/// for placeholders). An unknown placeholder is an error.
pub(super) fn render(template: &str, vars: &[(&str, &str)]) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let key_len = after
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .unwrap_or(after.len());
        if key_len == 0 || !after[key_len..].starts_with("}}") {
            // Not a placeholder (`{{` in code): keep it.
            out.push_str(&rest[..start + 2]);
            rest = after;
            continue;
        }
        let key = &after[..key_len];
        let value = vars
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
            .ok_or_else(|| format!("unknown placeholder {{{{{key}}}}}"))?;
        out.push_str(&rest[..start]);
        out.push_str(value);
        rest = &after[key_len + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Every file of the project `name` in `lang` for `world`; `sdk` is the SDK a Rust project
/// depends on.
pub(crate) fn project(
    name: &str,
    lang: Lang,
    world: World,
    sdk: Option<&Path>,
) -> Result<Vec<ProjectFile>, String> {
    let owned = vars(name, lang, world, sdk)?;
    let vars = &borrowed(&owned);
    let readme = readme(readme_parts(lang), vars)?;
    let (source_path, test_path) = source_paths(lang, name);
    let (source, test) = source_templates(lang, world);
    let templates = match lang {
        Lang::Rust => rust_files(source),
        Lang::Python => python_files((&source_path, source, false), (&test_path, test, false)),
        Lang::Js => js_files((&source_path, source, false), (&test_path, test, false)),
    };
    let mut files = Vec::new();
    for (path, template, executable) in templates {
        files.push(rendered(path, template, executable, vars)?);
    }
    files.push(rendered(
        &format!("{name}.toml"),
        manifest_template(world),
        false,
        vars,
    )?);
    files.push(verbatim("README.md", &readme, false));
    files.push(verbatim("wit/plugin.wit", WIT, false));
    files.extend(toolchain_files(lang, name, sdk)?);
    Ok(files)
}

/// A file of the project rendered from a template: its path in the project, the template, and
/// whether it is executable.
type TemplateFile<'a> = (&'a str, &'static str, bool);

/// The project file `path`: `template` with `vars` filled in.
fn rendered(
    path: &str,
    template: &str,
    executable: bool,
    vars: &[(&str, &str)],
) -> Result<ProjectFile, String> {
    let text = render(template, vars).map_err(|e| format!("{path}: {e}"))?;
    Ok(verbatim(path, &text, executable))
}

/// The project file `path` holding `text` as it is.
fn verbatim(path: &str, text: &str, executable: bool) -> ProjectFile {
    ProjectFile {
        path: path.to_string(),
        text: text.to_string(),
        executable,
    }
}

/// Where the source and the test of a project `name` in `lang` live (a Rust project's tests sit
/// in its source).
fn source_paths(lang: Lang, name: &str) -> (String, String) {
    let module = name.replace('-', "_");
    match lang {
        Lang::Rust => ("src/lib.rs".to_string(), "src/lib.rs".to_string()),
        Lang::Python => (format!("{module}.py"), format!("test_{module}.py")),
        Lang::Js => (format!("{name}.js"), format!("test/{name}.test.js")),
    }
}

/// The source and test templates of `lang` for `world`, `LANG/WORLD.EXT` and
/// `LANG/test-WORLD.EXT` (a Rust project's tests sit in its source).
fn source_templates(lang: Lang, world: World) -> (&'static str, &'static str) {
    /// The templates `$dir/$stem.$ext` and `$dir/test-$stem.$ext`.
    macro_rules! tested {
        ($dir:literal, $stem:literal, $ext:literal) => {
            (
                template!(concat!($dir, "/", $stem, ".", $ext)),
                template!(concat!($dir, "/test-", $stem, ".", $ext)),
            )
        };
    }
    let rust = |source| (source, source);
    match (lang, world) {
        (Lang::Rust, World::Reconciler) => rust(template!("rust/reconciler.rs")),
        (Lang::Rust, World::EventReconciler) => rust(template!("rust/event-reconciler.rs")),
        (Lang::Rust, World::HealthCheck) => rust(template!("rust/health-check.rs")),
        (Lang::Python, World::Reconciler) => tested!("python", "reconciler", "py"),
        (Lang::Python, World::EventReconciler) => tested!("python", "event-reconciler", "py"),
        (Lang::Python, World::HealthCheck) => tested!("python", "health-check", "py"),
        (Lang::Js, World::Reconciler) => tested!("js", "reconciler", "js"),
        (Lang::Js, World::EventReconciler) => tested!("js", "event-reconciler", "js"),
        (Lang::Js, World::HealthCheck) => tested!("js", "health-check", "js"),
    }
}

/// A Rust project's templated files, its source given, in the order they are written.
fn rust_files(source: &'static str) -> Vec<TemplateFile<'static>> {
    vec![
        ("Cargo.toml", template!("rust/Cargo.toml"), false),
        ("src/lib.rs", source, false),
        ("build.sh", template!("rust/build.sh"), true),
        ("test.sh", template!("rust/test.sh"), true),
        (".gitignore", template!("rust/gitignore"), false),
    ]
}

/// A Python project's templated files, its source and test given, in the order they are
/// written.
fn python_files<'a>(source: TemplateFile<'a>, test: TemplateFile<'a>) -> Vec<TemplateFile<'a>> {
    vec![
        source,
        test,
        ("fake_host.py", template!("python/fake_host.py"), false),
        ("build.sh", template!("python/build.sh"), true),
        ("test.sh", template!("python/test.sh"), true),
        (
            "componentize-py.sh",
            template!("python/componentize-py.sh"),
            true,
        ),
        (".gitignore", template!("python/gitignore"), false),
    ]
}

/// A JavaScript project's templated files, its source and test given, in the order they are
/// written.
fn js_files<'a>(source: TemplateFile<'a>, test: TemplateFile<'a>) -> Vec<TemplateFile<'a>> {
    vec![
        source,
        test,
        ("test/fake-host.js", template!("js/fake-host.js"), false),
        ("test/register.mjs", template!("js/register.mjs"), false),
        ("test/hooks.mjs", template!("js/hooks.mjs"), false),
        ("package.json", template!("js/package.json"), false),
        ("build.sh", template!("js/build.sh"), true),
        ("test.sh", template!("js/test.sh"), true),
        (".gitignore", template!("js/gitignore"), false),
    ]
}

/// The manifest template of `world`: what it binds to and what it is granted.
fn manifest_template(world: World) -> &'static str {
    match world {
        World::Reconciler => template!("common/manifest-reconciler.toml"),
        World::EventReconciler => {
            template!("common/manifest-event-reconciler.toml")
        }
        World::HealthCheck => template!("common/manifest-health-check.toml"),
    }
}

/// The `@@key` sections `lang` fills into the common README.
fn readme_parts(lang: Lang) -> &'static str {
    match lang {
        Lang::Rust => template!("rust/README-parts.md"),
        Lang::Python => template!("python/README-parts.md"),
        Lang::Js => template!("js/README-parts.md"),
    }
}

/// The files a project in `lang` takes as they are, after the templated ones: a Rust project's
/// cargo wrapper, its lock and (unless `--sdk` names one) its copy of the SDK; a JavaScript
/// project's lock.
fn toolchain_files(lang: Lang, name: &str, sdk: Option<&Path>) -> Result<Vec<ProjectFile>, String> {
    let mut files = Vec::new();
    match lang {
        Lang::Rust => {
            files.push(verbatim("cargo-wasm.sh", CARGO_WASM, true));
            files.push(verbatim("Cargo.lock", &sdk::project_lock(name)?, false));
            if sdk.is_none() {
                files.extend(sdk::sdk_files());
            }
        }
        Lang::Js => files.push(verbatim("package-lock.json", &js_lockfile(name)?, false)),
        Lang::Python => {}
    }
    Ok(files)
}

/// `vars` as [`render`] takes them.
fn borrowed<'a>(vars: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    vars.iter()
        .map(|(key, value)| (*key, value.as_str()))
        .collect()
}

/// The placeholders of every template of the project, with their values: the names, the SDK,
/// the toolchain pins, and the world's texts for the README.
fn vars(
    name: &str,
    lang: Lang,
    world: World,
    sdk: Option<&Path>,
) -> Result<Vec<(&'static str, String)>, String> {
    let module = name.replace('-', "_");
    let type_name = type_name(name);
    let channel: String = module.chars().take(63).collect();
    let world_name = world.wit_name();
    let py_version = componentize_py_version()?;
    let python_version = format!("{}.{}", PYTHON_MIN.0, PYTHON_MIN.1);
    let python_version_tuple = format!("{}, {}", PYTHON_MIN.0, PYTHON_MIN.1);
    let js_pins = js_pins()?;
    let (source_path, _) = source_paths(lang, name);
    let (sdk_text, sdk_note) = sdk_dependency(sdk)?;
    let (sdk_rows, wit_role) = sdk_rows(sdk);
    let dev_dependencies = js_dev_dependencies(&js_pins);
    let description = format!("{}: a leasehold {world_name} plugin", name);
    let (componentize_js_version, jco_version) = (
        pin(&js_pins, "@bytecodealliance/componentize-js")?,
        pin(&js_pins, "@bytecodealliance/jco")?,
    );
    let mut vars = vec![
        ("name", name.to_string()),
        ("module", module),
        ("type", type_name),
        ("world", world_name.to_string()),
        ("lang_title", lang.title().to_string()),
        ("source", source_path),
        ("channel", channel),
        ("memory_note", memory_note(lang).to_string()),
        ("sdk", toml_string(sdk_text)),
        ("sdk_note", sdk_note),
        ("sdk_rows", sdk_rows),
        ("wit_role", wit_role.to_string()),
        ("componentize_py_version", py_version),
        ("python_version", python_version),
        ("python_version_tuple", python_version_tuple),
        (
            "componentize_js_version",
            componentize_js_version.to_string(),
        ),
        ("jco_version", jco_version.to_string()),
        ("dev_dependencies", dev_dependencies),
        ("description", description),
    ];
    // The world's texts for the README may use the placeholders above.
    let (blurb, configure, log_example) = world_text(world);
    let view = borrowed(&vars);
    let world_vars = [
        ("world_blurb", render(blurb, &view)?),
        ("configure", render(configure, &view)?),
        ("log_example", render(log_example, &view)?),
    ];
    vars.extend(world_vars);
    Ok(vars)
}

/// The SDK a Rust project depends on, as the path its `Cargo.toml` names and the README's note
/// on it: its own copy unless `--sdk` names one.
fn sdk_dependency(sdk: Option<&Path>) -> Result<(&str, String), String> {
    match sdk {
        Some(path) => {
            let text = path
                .to_str()
                .ok_or_else(|| format!("the SDK path {} is not UTF-8", path.display()))?;
            let note = format!(
                "`{text}`, as `--sdk` asked. If that checkout moves, point the path at its `guests/leasehold-guest`."
            );
            Ok((text, note))
        }
        None => Ok((
            sdk::SDK_DIR,
            format!(
                "`{}`, a copy of the SDK of the leasehold that created this project; it builds \
                 against `wit/`. `Cargo.lock` holds the versions that leasehold's own plugins are \
                 built and tested with, so the first `./test.sh` needs no registry.",
                sdk::SDK_DIR
            ),
        )),
    }
}

/// The README's rows for the lock and the SDK's copy, and what its `wit/` is for: the SDK builds
/// against the project's copy only when it is copied in.
fn sdk_rows(sdk: Option<&Path>) -> (String, &'static str) {
    let lock_row = "| `Cargo.lock` | the versions of the SDK's dependencies that leasehold's own plugins are built and tested with |";
    match sdk {
        Some(_) => (
            lock_row.to_string(),
            "for reference: the SDK builds against its checkout's copy",
        ),
        None => (
            format!(
                "{lock_row}\n| `{}/` | the SDK, copied from the leasehold that created the project |",
                sdk::SDK_DIR
            ),
            "the SDK's copy builds against this file",
        ),
    }
}

/// What the README says of a fresh instance's memory in `lang`, as measured for the hello-*
/// examples.
fn memory_note(lang: Lang) -> &'static str {
    match lang {
        Lang::Rust => {
            "A Rust plugin comes up with about 1 MiB of linear memory: this can be far lower."
        }
        Lang::Python => "componentize-py's CPython comes up with about 12 MiB of linear memory.",
        Lang::Js => {
            "The JavaScript engine comes up with about 9 MiB of linear memory; its heap grows from there."
        }
    }
}

/// The README: the common skeleton with the language's parts (`@@key` sections of
/// `README-parts.md`) filled in.
fn readme(parts: &str, vars: &[(&str, &str)]) -> Result<String, String> {
    let mut sections: Vec<(String, String)> = Vec::new();
    for line in parts.lines() {
        if let Some(key) = line.strip_prefix("@@") {
            sections.push((key.trim().to_string(), String::new()));
        } else if let Some((_, text)) = sections.last_mut() {
            text.push_str(line);
            text.push('\n');
        } else if !line.trim().is_empty() {
            return Err(format!(
                "README parts: text before the first @@section: {line:?}"
            ));
        }
    }
    let mut filled = Vec::new();
    for (key, text) in &sections {
        let text = render(text.trim_end(), vars).map_err(|e| format!("README {key}: {e}"))?;
        filled.push((key.as_str(), text));
    }
    let mut all: Vec<(&str, &str)> = vars.to_vec();
    all.extend(filled.iter().map(|(k, v)| (*k, v.as_str())));
    render(template!("common/README.md"), &all).map_err(|e| format!("README.md: {e}"))
}

/// What the README says of each world: what it is, how to configure it, and the line it logs.
fn world_text(world: World) -> (&'static str, &'static str, &'static str) {
    match world {
        World::Reconciler => (
            "A reconciler: the host starts it on the replica that acquires its lease (a fresh \
             instance for each term), calls `init` once with the manifest's `[config]`, then \
             `reconcile` on the schedule until the lease is lost. This one logs each tick with \
             its epoch.",
            "`greeting` is the first word of each tick's line. A reconciler can be granted more \
             of the host: `[grants] kv = true`, a key-value store in the lease database whose \
             writes are fenced by the lease, or `[grants.sql]`, statements on a PostgreSQL \
             database whose URL the host keeps (see the commented lines and `wit/plugin.wit`).",
            "`hello from epoch 1, tick 0` every 5 s",
        ),
        World::EventReconciler => (
            "An event reconciler: the host starts it on the replica that acquires its lease (a \
             fresh instance for each term), calls `init` once with the manifest's `[config]`, \
             then `reconcile` on the schedule until the lease is lost, and, between reconciles, \
             `handle-event` for each PostgreSQL notification on the manifest's `[events] \
             channels`. This one logs each tick with its epoch, and each event.",
            "`[events] channels` is empty: notifications need PostgreSQL (the lease database, or \
             the database of a `[grants.sql]`), and the host refuses a plugin that lists \
             channels on a SQLite lease database without one. With PostgreSQL, list a channel, \
             then `NOTIFY {{channel}}, 'hello'` in psql. A notification sent while no replica \
             listens is lost: `reconcile` stays the way all the work gets found. `greeting` is \
             the first word of each tick's line; `[grants]` works as for any reconciler (see \
             the commented lines).",
            "`hello from epoch 1, tick 0` every 5 s",
        ),
        World::HealthCheck => (
            "A health check: the host calls `check(active)` on the replica holding the lease, \
             which gives the lease up after `failure_threshold` consecutive failures, and \
             `check(standby)` on the other replicas, which do not campaign while theirs fails. \
             This one passes unless `[config] fail` says otherwise.",
            "`fail = \"active\"` makes the holder's checks fail: after `[health] \
             failure_threshold` of them it gives the lease up and another replica takes over; \
             `\"standby\"` keeps the others from campaigning. Passing checks log at debug: \
             `RUST_LOG=info,leasehold::runtime::host=debug leasehold run ...` shows them. A \
             health check has no `[grants]` or `[events]`: its world imports only `lease` and \
             `log`.",
            "`checking lease \"leader\" as HOLDER (fail = never)` when it starts",
        ),
    }
}

/// `my-plugin` → `MyPlugin`, suffixed with `Plugin` where that would clash with a name the
/// source uses.
pub(super) fn type_name(name: &str) -> String {
    let mut out = String::new();
    for part in name.split('-').filter(|p| !p.is_empty()) {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            out.push(first.to_ascii_uppercase());
            out.extend(chars);
        }
    }
    if is_listed(RUST_TYPE_RESERVED, &out) {
        out.push_str("Plugin");
    }
    out
}

/// A TOML basic string.
fn toml_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The componentize-py version of `guests/tools/python/requirements.txt`.
pub(super) fn componentize_py_version() -> Result<String, String> {
    PY_REQUIREMENTS
        .lines()
        .find_map(|line| line.trim().strip_prefix("componentize-py=="))
        .map(|v| v.trim().to_string())
        .ok_or_else(|| "guests/tools/python/requirements.txt pins no componentize-py==X".into())
}

/// The packages `guests/tools/js/package.json` pins, with their versions, in order.
pub(super) fn js_pins() -> Result<Vec<(String, String)>, String> {
    let package: serde_json::Value = serde_json::from_str(JS_TOOLS_PACKAGE)
        .map_err(|e| format!("guests/tools/js/package.json: {e}"))?;
    let deps = package
        .get("dependencies")
        .and_then(|d| d.as_object())
        .ok_or("guests/tools/js/package.json has no dependencies")?;
    deps.iter()
        .map(|(name, version)| {
            version
                .as_str()
                .map(|v| (name.clone(), v.to_string()))
                .ok_or_else(|| {
                    format!("guests/tools/js/package.json: {name}'s version is not a string")
                })
        })
        .collect()
}

/// The version `pins` gives `package`.
fn pin<'a>(pins: &'a [(String, String)], package: &str) -> Result<&'a str, String> {
    pins.iter()
        .find(|(name, _)| name == package)
        .map(|(_, version)| version.as_str())
        .ok_or_else(|| format!("guests/tools/js/package.json does not pin {package}"))
}

/// The pins as package.json's `devDependencies` object, indented as npm writes it.
fn js_dev_dependencies(pins: &[(String, String)]) -> String {
    let lines: Vec<String> = pins
        .iter()
        .map(|(name, version)| format!("    {name:?}: {version:?}"))
        .collect();
    format!("{{\n{}\n  }}", lines.join(",\n"))
}

/// The project's `package-lock.json`: the tree of `guests/tools/js/package-lock.json` (the one
/// leasehold's tests build with), with the project as its root and every package a dev
/// dependency, as npm itself writes it for a project with those `devDependencies`.
pub(super) fn js_lockfile(name: &str) -> Result<String, String> {
    let pins = js_pins()?;
    let root = format!(
        "    \"\": {{\n      \"name\": {name:?},\n      \"version\": \"0.1.0\",\n      \"devDependencies\": {},\n      \"engines\": {{\n        \"node\": \">=20.6\"\n      }}\n    }},\n",
        js_dev_dependencies(&pins).replace("\n", "\n    ")
    );
    let mut out = String::with_capacity(JS_TOOLS_LOCK.len() + 16 * 1024);
    let mut in_root = false;
    for (i, line) in JS_TOOLS_LOCK.lines().enumerate() {
        if in_root {
            if line == "    }," {
                in_root = false;
                out.push_str(&root);
            }
            continue;
        }
        if line == "    \"\": {" {
            in_root = true;
            continue;
        }
        // The lock's own name and version come first.
        if i < 3 && line.starts_with("  \"name\": ") {
            let _ = writeln!(out, "  \"name\": {name:?},");
        } else if i < 3 && line.starts_with("  \"version\": ") {
            out.push_str("  \"version\": \"0.1.0\",\n");
        } else {
            out.push_str(line);
            out.push('\n');
        }
        // npm marks every package reached through devDependencies.
        if line.starts_with("      \"integrity\": ") {
            out.push_str("      \"dev\": true,\n");
        }
    }
    // Checked here, not trusted: the result must be what npm expects.
    let lock: serde_json::Value =
        serde_json::from_str(&out).map_err(|e| format!("the derived package-lock.json: {e}"))?;
    let packages = lock
        .get("packages")
        .and_then(|p| p.as_object())
        .ok_or("the derived package-lock.json has no packages")?;
    let root_ok = packages
        .get("")
        .and_then(|r| r.get("name"))
        .is_some_and(|n| n == name);
    let all_dev = packages
        .iter()
        .filter(|(path, _)| !path.is_empty())
        .all(|(_, p)| p.get("dev") == Some(&serde_json::Value::Bool(true)));
    if !root_ok || !all_dev || lock.get("name").is_none_or(|n| n != name) {
        return Err("guests/tools/js/package-lock.json is not laid out as npm writes it".into());
    }
    Ok(out)
}
