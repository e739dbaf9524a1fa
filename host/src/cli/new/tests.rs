//! `leasehold new`'s unit tests: names, and every language and world rendered whole.

use std::path::Path;

use super::project::*;
use super::spec::*;
use super::write::*;

const LANGS: [Lang; 3] = [Lang::Rust, Lang::Python, Lang::Js];
const WORLDS: [World; 3] = [
    World::Reconciler,
    World::EventReconciler,
    World::HealthCheck,
];

#[test]
fn names_are_lowercase_words_joined_by_dashes() {
    for ok in ["a", "hello", "my-plugin", "x1", "a-1-b", &"a".repeat(64)] {
        for lang in LANGS {
            check_name(ok, lang).unwrap_or_else(|e| panic!("{ok:?} {lang:?}: {e}"));
        }
    }
    for bad in [
        "",
        "1abc",
        "-a",
        "My-plugin",
        "my_plugin",
        "my plugin",
        "é",
        "a/b",
        "../x",
        &"a".repeat(65),
    ] {
        let e = check_name(bad, Lang::Js).unwrap_err().to_string();
        assert!(e.starts_with("invalid plugin name"), "{bad:?}: {e}");
        assert!(!e.contains('\n'), "one line: {e}");
    }
}

#[test]
fn names_a_language_would_trip_over_are_refused_for_it_only() {
    for (name, lang) in [
        ("fn", Lang::Rust),
        ("test", Lang::Rust),
        ("leasehold-guest", Lang::Rust),
        ("types", Lang::Python),
        ("import", Lang::Python),
        ("poll-loop", Lang::Python),
        // The first and last words of each line of the lists.
        ("abstract", Lang::Rust),
        ("enum", Lang::Rust),
        ("extern", Lang::Rust),
        ("yield", Lang::Rust),
        ("copy", Lang::Python),
        ("dataclasses", Lang::Python),
        ("yield", Lang::Python),
    ] {
        let e = check_name(name, lang).unwrap_err().to_string();
        assert!(e.contains("pick another"), "{name}: {e}");
        check_name(name, Lang::Js).unwrap();
    }
    check_name("types", Lang::Rust).unwrap();
}

#[test]
fn type_names_are_camel_case_and_avoid_the_names_the_source_uses() {
    assert_eq!(type_name("my-plugin"), "MyPlugin");
    assert_eq!(type_name("a1-b"), "A1B");
    assert_eq!(type_name("config"), "ConfigPlugin");
    assert_eq!(type_name("result"), "ResultPlugin");
    assert_eq!(type_name("level"), "LevelPlugin");
    assert_eq!(type_name("none"), "NonePlugin");
}

#[test]
fn render_fills_placeholders_once_and_refuses_unknown_ones() {
    let vars = [("name", "x-{{name}}"), ("b", "2")];
    assert_eq!(render("{{name}}/{{b}}", &vars).unwrap(), "x-{{name}}/2");
    assert_eq!(render("f({{ x }}) {{}}", &vars).unwrap(), "f({{ x }}) {{}}");
    assert_eq!(
        render("a {{nope}}", &vars).unwrap_err(),
        "unknown placeholder {{nope}}"
    );
}

#[test]
fn every_language_and_world_renders_without_leftover_placeholders() {
    let sdk = Path::new("/opt/leasehold/guests/leasehold-guest");
    for lang in LANGS {
        for world in WORLDS {
            let files = project("my-plugin", lang, world, Some(sdk))
                .unwrap_or_else(|e| panic!("{lang:?} {world:?}: {e}"));
            let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
            for expected in [
                "my-plugin.toml",
                "README.md",
                "wit/plugin.wit",
                "build.sh",
                "test.sh",
            ] {
                assert!(paths.contains(&expected), "{lang:?} {world:?}: {paths:?}");
            }
            for file in &files {
                let leftover = file.text.match_indices("{{").find_map(|(at, _)| {
                    let rest = &file.text[at + 2..];
                    let key = rest
                        .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                        .unwrap_or(rest.len());
                    (key > 0 && rest[key..].starts_with("}}")).then(|| &rest[..key])
                });
                assert_eq!(leftover, None, "{lang:?} {world:?} {}", file.path);
                assert_eq!(
                    file.executable,
                    file.path.ends_with(".sh"),
                    "{lang:?} {world:?} {}",
                    file.path
                );
            }
            let text = |path: &str| &files.iter().find(|f| f.path == path).expect(path).text;
            // The manifest is one the host accepts, with the keys of its world.
            let manifest = text("my-plugin.toml");
            let parsed = crate::manifest::Manifest::parse("my-plugin.toml", manifest)
                .unwrap_or_else(|e| panic!("{lang:?} {world:?}: {e}"));
            assert!(parsed.events.is_empty() && !parsed.grants.kv);
            let section = |name: &str| manifest.lines().any(|l| l == name);
            assert_eq!(section("[health]"), world == World::HealthCheck);
            assert_eq!(section("[events]"), world == World::EventReconciler);
            assert!(text("README.md").contains(&format!("world {}`", world.wit_name())));
            if lang == Lang::Rust {
                let cargo: toml::Table = toml::from_str(text("Cargo.toml")).unwrap();
                assert_eq!(
                    cargo["dependencies"]["leasehold-guest"]["path"].as_str(),
                    Some("/opt/leasehold/guests/leasehold-guest")
                );
                assert_eq!(text("cargo-wasm.sh"), CARGO_WASM);
            }
        }
    }
}

#[test]
fn a_rust_project_carries_the_whole_sdk_and_a_lock_of_what_it_reaches() {
    let files = project("my-plugin", Lang::Rust, World::Reconciler, None).unwrap();
    let text = |path: &str| &files.iter().find(|f| f.path == path).expect(path).text;
    let cargo: toml::Table = toml::from_str(text("Cargo.toml")).unwrap();
    assert_eq!(
        cargo["dependencies"]["leasehold-guest"]["path"].as_str(),
        Some("sdk/leasehold-guest")
    );
    // Every source file of the SDK is in the copy, as it is in the checkout.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guests/leasehold-guest/src");
    let mut on_disk: Vec<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    on_disk.sort();
    let mut copied: Vec<String> = files
        .iter()
        .filter_map(|f| f.path.strip_prefix("sdk/leasehold-guest/src/"))
        .map(str::to_string)
        .collect();
    copied.sort();
    assert_eq!(
        copied, on_disk,
        "a file of the SDK is missing from sdk.rs's list"
    );
    for name in &on_disk {
        let path = format!("sdk/leasehold-guest/src/{name}");
        assert_eq!(
            text(&path),
            &std::fs::read_to_string(src.join(name)).unwrap()
        );
    }
    // Its manifest asks for the same wit-bindgen as the guests' workspace.
    let sdk: toml::Table = toml::from_str(text("sdk/leasehold-guest/Cargo.toml")).unwrap();
    let workspace: toml::Table = toml::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../guests/Cargo.toml"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        sdk["dependencies"]["wit-bindgen"],
        workspace["workspace"]["dependencies"]["wit-bindgen"]
    );
    // The lock: the project, the SDK, and wit-bindgen's tree at the guests' versions.
    let lock: toml::Table = toml::from_str(text("Cargo.lock")).unwrap();
    let packages = lock["package"].as_array().unwrap();
    let version_of = |name: &str| {
        packages
            .iter()
            .find(|p| p["name"].as_str() == Some(name))
            .map(|p| p["version"].as_str().unwrap().to_string())
    };
    assert_eq!(version_of("my-plugin").as_deref(), Some("0.1.0"));
    assert_eq!(version_of("leasehold-guest").as_deref(), Some("0.1.0"));
    let guests: toml::Table =
        toml::from_str(include_str!("../../../../guests/Cargo.lock")).unwrap();
    let guests_wit = guests["package"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"].as_str() == Some("wit-bindgen"))
        .map(|p| p["version"].as_str().unwrap().to_string());
    assert_eq!(version_of("wit-bindgen"), guests_wit);
    // No other plugin of the guests' workspace comes along.
    assert_eq!(version_of("hello-rust"), None);
}

#[test]
fn the_js_project_pins_the_tools_leasehold_builds_with() {
    let files = project("my-plugin", Lang::Js, World::Reconciler, None).unwrap();
    let text = |path: &str| &files.iter().find(|f| f.path == path).unwrap().text;
    let package: serde_json::Value = serde_json::from_str(text("package.json")).unwrap();
    let tools: serde_json::Value = serde_json::from_str(JS_TOOLS_PACKAGE).unwrap();
    assert_eq!(package["devDependencies"], tools["dependencies"]);
    assert_eq!(package["name"], "my-plugin");
    let lock: serde_json::Value = serde_json::from_str(text("package-lock.json")).unwrap();
    let tools_lock: serde_json::Value = serde_json::from_str(JS_TOOLS_LOCK).unwrap();
    assert_eq!(
        lock["packages"][""]["devDependencies"],
        tools["dependencies"]
    );
    let tree = |l: &serde_json::Value| -> Vec<(String, serde_json::Value)> {
        let packages = l["packages"].as_object().unwrap();
        let mut tree: Vec<(String, serde_json::Value)> = packages
            .iter()
            .filter(|(path, _)| !path.is_empty())
            .map(|(path, p)| (path.clone(), p["version"].clone()))
            .collect();
        tree.sort_by(|a, b| a.0.cmp(&b.0));
        tree
    };
    assert_eq!(tree(&lock), tree(&tools_lock));
}

#[test]
fn pins_come_from_guests_tools() {
    let version = componentize_py_version().unwrap();
    assert!(version.split('.').count() == 3, "{version}");
    let files = project("p", Lang::Python, World::HealthCheck, None).unwrap();
    let script = &files
        .iter()
        .find(|f| f.path == "componentize-py.sh")
        .unwrap()
        .text;
    assert!(script.contains(&format!("want={version}\n")), "{script}");
}

#[test]
fn an_existing_project_is_never_written_to() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("p");
    std::fs::create_dir(&target).unwrap();
    refuse_existing(&target).unwrap(); // empty: fine
    std::fs::write(target.join("keep"), "mine").unwrap();
    let e = refuse_existing(&target).unwrap_err().to_string();
    assert!(e.contains("not empty"), "{e}");
    let files = project("p", Lang::Js, World::Reconciler, None).unwrap();
    assert!(write_project(dir.path(), &target, &files).is_err());
    assert_eq!(
        std::fs::read_to_string(target.join("keep")).unwrap(),
        "mine"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(left.len(), 1, "no staging directory is left behind");

    std::fs::remove_file(target.join("keep")).unwrap();
    write_project(dir.path(), &target, &files).unwrap();
    assert!(target.join("package-lock.json").is_file());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(target.join("build.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0o111);
}

/// Every Python version `text` names: `Python 3.N` in prose, `(3, N)` in a version check.
fn python_versions(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for prefix in ["Python 3.", "(3, "] {
        for (at, _) in text.match_indices(prefix) {
            let minor: String = text[at + prefix.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if !minor.is_empty() {
                found.push(format!("3.{minor}"));
            }
        }
    }
    found
}

#[test]
fn a_python_project_and_the_readme_name_one_python_version() {
    let want = format!("{}.{}", PYTHON_MIN.0, PYTHON_MIN.1);
    for world in WORLDS {
        let files = project("my-plugin", Lang::Python, world, None).unwrap();
        let mut named = 0;
        for file in &files {
            for version in python_versions(&file.text) {
                assert_eq!(
                    version, want,
                    "{world:?}: {} names Python {version}",
                    file.path
                );
                named += 1;
            }
        }
        // The README (twice), componentize-py.sh and test.sh (a message and a check each).
        assert!(
            named >= 6,
            "{world:?}: only {named} mentions of the version"
        );
    }
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let section = readme
        .split("\n## Write a plugin\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .unwrap();
    let versions = python_versions(section);
    assert!(
        !versions.is_empty(),
        "README's \"Write a plugin\" names no Python version"
    );
    for version in versions {
        assert_eq!(
            version, want,
            "README's \"Write a plugin\" names Python {version}"
        );
    }
}
