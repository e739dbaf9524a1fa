#!/usr/bin/env bash
# Builds one JavaScript guest into a component: scripts/build-js-guest.sh DIR OUT.wasm
#
# DIR/NAME.js (NAME = DIR's basename) is an ES module exporting the functions of its world,
# named by a line `// world: NAME` (default `reconciler`), and importing the host's interfaces as
# `leasehold:plugin/log@0.1.0` and so on; it may import other modules of DIR by relative path.
# It is built against wit/ with componentize-js (SpiderMonkey in the component), at the version
# guests/tools/js/package-lock.json pins, installed there with `npm ci` when the lock changed.
#
# Non-interactive; needs node >= 20 and npm, and the npm registry the first time. Always builds
# (the caller decides when): ~4 s on two cores. Two builds of the same source differ (the engine's
# snapshot holds a temporary path and heap state), so decide from the inputs, not by comparing
# outputs. Messages go to stderr.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools="$root/guests/tools/js"
wit="$root/wit"

say() { echo "build-js-guest: $*" >&2; }
die() {
  say "$*"
  exit 1
}

[ $# -eq 2 ] || die "usage: scripts/build-js-guest.sh DIR OUT.wasm"
[ -d "$1" ] || die "$1: not a directory"
dir=$(cd "$1" && pwd)
out=$2
name=$(basename "$dir")
src="$dir/$name.js"
[ -f "$src" ] || die "no $name.js in $1 (the source is DIR/NAME.js, NAME being the directory's name)"

# `// world: NAME` anywhere in the source picks the world; the first such line counts.
world=$(sed -n -E '/^[[:space:]]*\/\/[[:space:]]*world:/{s#^[[:space:]]*//[[:space:]]*world:[[:space:]]*##;s#[[:space:]]*$##;p;q}' "$src")
world=${world:-reconciler}
[[ "$world" =~ ^[a-z][a-z0-9-]*$ ]] &&
  grep -Eq "^[[:space:]]*world[[:space:]]+$world[[:space:]]*\{" "$wit"/*.wit 2>/dev/null ||
  die "$name.js: '// world: $world' names no world of wit/ (reconciler, event-reconciler, health-check)"

# One line each, saying what is missing and how to get it.
command -v node >/dev/null 2>&1 ||
  die "node is missing: install Node.js 20 or newer (Debian: apt-get install nodejs npm; or https://nodejs.org)"
command -v npm >/dev/null 2>&1 ||
  die "npm is missing: install it beside node (Debian: apt-get install npm; it ships with https://nodejs.org builds)"
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
[ "$node_major" -ge 20 ] 2>/dev/null ||
  die "node $(node --version 2>/dev/null || echo '(unknown)') is too old: componentize-js and its parser need Node.js 20 or newer"

# Install the pinned tools unless node_modules already holds this very lock (on this platform:
# the parser and wizer come as native binaries). npm ci starts from an empty node_modules, so an
# interrupted install leaves no stamp and the next run installs again.
cli="$tools/node_modules/@bytecodealliance/componentize-js/src/cli.js"
stamp="$tools/node_modules/.leasehold-stamp"
want="$(sha256sum "$tools/package-lock.json" | cut -d' ' -f1) $(node -p 'process.platform + "-" + process.arch')"
install_tools() {
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -f "$cli" ] && return 0
  say "installing the pinned tools into ${tools#"$root"/}/node_modules (npm ci)"
  # No install scripts are needed (the native parts are per-platform packages), so none run.
  # Bounded retries and timeouts: a registry that does not answer fails the build, never hangs it.
  (cd "$tools" && npm ci --ignore-scripts --no-audit --no-fund --no-update-notifier \
    --fetch-retries=2 --fetch-timeout=60000 </dev/null >&2) ||
    die "npm ci failed in ${tools#"$root"/} (is the npm registry reachable?)"
  [ -f "$cli" ] || die "npm ci installed no componentize-js CLI at ${cli#"$root"/}"
  echo "$want" >"$stamp"
}
# Two builds at once must not both run npm ci into the same directory.
if command -v flock >/dev/null 2>&1; then
  exec 9<"$tools/package-lock.json"
  flock -w 900 9 || die "waited 15 minutes for another build's npm ci"
fi
install_tools

mkdir -p "$(dirname "$out")"
out="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")" # the build below runs in DIR
tmp="$out.tmp.$$"
# componentize-js works in a directory of $TMPDIR that it leaves behind when it fails early.
work=$(mktemp -d)
trap 'rm -f "$tmp"; rm -rf "$work"' EXIT

# componentize-js reports a syntax error as "failed to parse JS source, encountered [1] errors":
# parse first with the same parser to show where.
(cd "$tools" && node --input-type=module -e '
import oxc from "oxc-parser";
import { readFileSync } from "node:fs";
const [path, name] = process.argv.slice(1);
const { errors } = await oxc.parseAsync(name, readFileSync(path, "utf8"));
for (const e of errors) console.error(e.codeframe ?? e.message);
process.exit(errors.length ? 1 : 0);
' "$src" "$name.js" </dev/null) || die "$name.js does not parse (see above)"

# From DIR, so that the component's stack traces name the module NAME.js.
# http and fetch-event stay out: they would import wasi:http, which the host does not provide.
(cd "$dir" && TMPDIR="$work" node "$cli" "$name.js" --wit "$wit" --world-name "$world" \
  --disable http fetch-event --out "$tmp" </dev/null >&2) ||
  die "$name: componentize-js failed (its message is above)"

# A component starts with \0asm and version 0x0d 0x00 0x01 0x00; a core module with 1 0 0 0.
header=$(head -c 8 "$tmp" | od -An -tx1 | tr -d ' \n')
[ "$header" = "0061736d0d000100" ] || die "$name: componentize-js wrote no WebAssembly component (header $header)"
mv -f "$tmp" "$out"
say "$(printf '%-18s %8d bytes  world %s, componentize-js %s' "$name" "$(stat -c %s "$out")" "$world" \
  "$(node -p 'require(process.argv[1]).version' "$tools/node_modules/@bytecodealliance/componentize-js/package.json")")"
