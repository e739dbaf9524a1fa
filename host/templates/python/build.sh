#!/usr/bin/env bash
# Builds {{name}}.wasm from {{module}}.py (world {{world}} of wit/) with componentize-py, which
# bundles CPython into the component.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

./componentize-py.sh --wit-path wit --world {{world}} componentize {{module}} \
  --output {{name}}.wasm.tmp >/dev/null || {
  echo "build.sh: componentize-py failed (its message is above)" >&2
  exit 1
}
# Replaced whole, never rewritten in place: a host may be loading the previous one.
mv -f {{name}}.wasm.tmp {{name}}.wasm
echo "build.sh: {{name}}.wasm, $(wc -c <{{name}}.wasm) bytes; next: leasehold check {{name}}.wasm" >&2
