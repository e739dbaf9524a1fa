#!/usr/bin/env bash
# Builds {{name}}.wasm from {{name}}.js (world {{world}} of wit/) with componentize-js, which
# bundles a JavaScript engine into the component. Installs the pinned tools of
# package-lock.json into node_modules first (npm ci) when they are missing or the lock changed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

say() { echo "build.sh: $*" >&2; }
die() {
  say "$*"
  exit 1
}

command -v node >/dev/null 2>&1 ||
  die "node is missing: install Node.js 20.6 or newer (Debian: apt-get install nodejs npm)"
command -v npm >/dev/null 2>&1 || die "npm is missing: install it (Debian: apt-get install npm)"
# module.register, which the tests use, came with 20.6.
node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a * 100 + b < 2006 ? 1 : 0)' ||
  die "node $(node --version) is too old: componentize-js and the tests need Node.js 20.6 or newer"

stamp=node_modules/.leasehold-stamp
want="$(cksum <package-lock.json) $(node -p 'process.platform + "-" + process.arch')"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing the pinned tools into node_modules (npm ci)"
  # No install scripts are needed: the native parts come as per-platform packages.
  npm ci --ignore-scripts --prefer-offline --no-audit --no-fund --fetch-retries=2 \
    --fetch-timeout=60000 </dev/null >&2 ||
    die "npm ci failed (is the npm registry reachable?)"
  echo "$want" >"$stamp"
fi

# componentize-js reports a syntax error without its place: node says where.
node --check {{name}}.js || die "{{name}}.js does not parse (see above)"
# From here, so that the component's stack traces name {{name}}.js, not this machine's path.
npm run --silent build </dev/null >&2 || die "componentize-js failed (its message is above)"
say "{{name}}.wasm ($(wc -c <{{name}}.wasm) bytes); next: leasehold check {{name}}.wasm"
