#!/usr/bin/env python3
"""Writes a package that depends on everything this tree's host and test harness depend on, with the
same features, for scripts/build-release.sh.

Cargo picks each dependency's features from the packages one command builds. An earlier release's
host, built alone, asks for fewer features than this tree's test build did (no test harness, fewer
crates), so cargo would compile most dependencies a second time for it. Built beside this package,
it gets the very dependency builds already in target/, and only its own crates compile.

    same-deps.py THIS_TREE OUT_DIR
"""

import sys
import tomllib
from pathlib import Path


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise ValueError(f"unexpected value in a dependency: {v!r}")


def main():
    tree, out = Path(sys.argv[1]), Path(sys.argv[2])
    workspace = tomllib.loads((tree / "Cargo.toml").read_text())["workspace"]["dependencies"]
    deps = {}
    for crate in ("host", "tests"):
        manifest = tomllib.loads((tree / crate / "Cargo.toml").read_text())
        for name, spec in manifest.get("dependencies", {}).items():
            if name.startswith("leasehold"):
                continue  # this tree's own crates
            spec = dict(spec) if isinstance(spec, dict) else {"version": spec}
            if spec.pop("workspace", False):
                base = workspace[name]
                base = dict(base) if isinstance(base, dict) else {"version": base}
                base["features"] = sorted(set(base.get("features", [])) | set(spec.get("features", [])))
                spec = base
            spec.pop("optional", None)
            have = deps.setdefault(name, spec)
            have["features"] = sorted(set(have.get("features", [])) | set(spec.get("features", [])))
    out.mkdir(parents=True, exist_ok=True)
    (out / "lib.rs").write_text("//! Dependencies only.\n")
    lines = [
        "[package]",
        'name = "leasehold-same-deps"',
        'version = "0.0.0"',
        'edition = "2021"',
        "publish = false",
        "",
        "[lib]",
        'path = "lib.rs"',
        "",
        "[dependencies]",
    ]
    for name, spec in sorted(deps.items()):
        fields = ", ".join(f"{k} = {toml_value(v)}" for k, v in sorted(spec.items()))
        lines.append(f"{name} = {{ {fields} }}")
    (out / "Cargo.toml").write_text("\n".join(lines) + "\n")


main()
