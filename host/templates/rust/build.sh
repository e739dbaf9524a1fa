#!/usr/bin/env bash
# Builds {{name}}.wasm: this crate as a WebAssembly component (release, wasm32-wasip2).
# cargo-wasm.sh picks the toolchain: rustup's wasm32-wasip2 target when installed, else Debian's
# packages (see its header). CARGO_TARGET_DIR is honoured.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

./cargo-wasm.sh build --release
built="${CARGO_TARGET_DIR:-target}/wasm32-wasip2/release/{{module}}.wasm"
[ -f "$built" ] || { echo "build.sh: cargo produced no $built" >&2; exit 1; }
# Replaced whole, never rewritten in place: a host may be loading the previous one.
cp "$built" {{name}}.wasm.tmp && mv -f {{name}}.wasm.tmp {{name}}.wasm
echo "build.sh: {{name}}.wasm, $(wc -c <{{name}}.wasm) bytes; next: leasehold check {{name}}.wasm" >&2
