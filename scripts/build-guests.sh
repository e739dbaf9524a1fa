#!/usr/bin/env bash
# Builds every guest under guests/ (release, wasm32-wasip2) into guests/dist/NAME.wasm, with its
# manifest copied to guests/dist/NAME.toml. Called by `make guests`.
#
# A guest is a directory NAME/ under guests/examples or guests/test-guests with a manifest
# NAME.toml and one of: a Cargo.toml (Rust, the toolchain below), NAME.py with `-` as `_`
# (Python: scripts/build-python-guest.sh), or NAME.js (JavaScript: scripts/build-js-guest.sh).
# LEASEHOLD_GUEST_LANGS=rust skips the Python and JavaScript guests (their toolchains are
# installed on first use from PyPI and npm).
#
# Toolchain: scripts/cargo-wasm.sh picks it and runs cargo:
# - where rustup has the wasm32-wasip2 standard library installed, plain
#   `cargo build --release --target wasm32-wasip2`;
# - otherwise Debian's rustc-web/cargo-web with the matching std source (rust-web-src) and
#   wasi-libc, building std for the target with -Zbuild-std, linked by the wasm-component-ld that
#   ships in the rustup toolchain. Missing Debian packages are installed (apt-get update runs
#   once, only then).
# Idempotent and non-interactive; a second run only rebuilds what changed. Set
# LEASEHOLD_GUESTS_TOOLCHAIN=rustup or =debian to force a path.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
guests="$root/guests"
dist="$guests/dist"
target=wasm32-wasip2
# Guests never share the host's target/ (different toolchain, different flags).
export CARGO_TARGET_DIR="$guests/target"

say() { echo "build-guests: $*" >&2; }
die() {
  say "$*"
  exit 1
}

# Every guest is a directory with its source and a manifest named after it.
names=()
dirs=()
others=() # Python and JavaScript guests: "DIR LANG"
langs=${LEASEHOLD_GUEST_LANGS:-rust,python,js}
for dir in "$guests"/examples/*/ "$guests"/test-guests/*/; do
  dir=${dir%/}
  name=$(basename "$dir")
  if [ -f "$dir/Cargo.toml" ]; then
    names+=("$name")
    dirs+=("$dir")
  elif [ -f "$dir/${name//-/_}.py" ]; then
    [[ ",$langs," == *,python,* ]] && others+=("$dir python")
  elif [ -f "$dir/$name.js" ]; then
    [[ ",$langs," == *,js,* ]] && others+=("$dir js")
  else
    die "${dir#"$root"/}: no Cargo.toml, ${name//-/_}.py or $name.js: which language is it in?"
  fi
  [ -f "$dir/$name.toml" ] || die "${dir#"$root"/}: no manifest $name.toml"
done
[ ${#names[@]} -gt 0 ] || die "no guests found under guests/examples or guests/test-guests"

started=$(date +%s)
# cargo-wasm.sh says which toolchain it picked, and why a build failed, as build-guests.
(cd "$guests" && CARGO_WASM_TAG=build-guests "$root/scripts/cargo-wasm.sh" build --release --locked --workspace) || exit 1

mkdir -p "$dist"
# Copy only what changed, so a rebuild that changes nothing leaves dist/ untouched (a host
# watching the directory would otherwise reload every plugin).
install_if_changed() {
  if ! cmp -s "$1" "$2"; then
    cp "$1" "$2.tmp" && mv -f "$2.tmp" "$2"
  fi
}
for i in "${!names[@]}"; do
  name=${names[$i]}
  wasm="$CARGO_TARGET_DIR/$target/release/${name//-/_}.wasm"
  [ -f "$wasm" ] || die "$name: cargo produced no $wasm (is it a cdylib?)"
  # A component starts with \0asm and version 0x0d 0x00 0x01 0x00; a core module with 1 0 0 0.
  header=$(head -c 8 "$wasm" | od -An -tx1 | tr -d ' \n')
  [ "$header" = "0061736d0d000100" ] || die "$name: $wasm is not a WebAssembly component (header $header)"
  install_if_changed "$wasm" "$dist/$name.wasm"
  install_if_changed "${dirs[$i]}/$name.toml" "$dist/$name.toml"
  say "$(printf '%-18s %8d bytes  dist/%s.wasm' "$name" "$(stat -c %s "$dist/$name.wasm")" "$name")"
done

# Python and JavaScript guests. Their builds take seconds each (componentize-py and
# componentize-js bundle a whole interpreter), so each is rebuilt only when its directory, the
# WIT or the pinned toolchain changed: the digest of those is kept beside the build.
stamps="$CARGO_TARGET_DIR/lang-stamps"
mkdir -p "$stamps"
for entry in "${others[@]}"; do
  dir=${entry% *}
  lang=${entry##* }
  name=$(basename "$dir")
  inputs=$(find "$dir" "$root/wit" "$guests/tools/$lang" -maxdepth 1 -type f \( -name '*.py' -o -name '*.js' \
    -o -name '*.toml' -o -name '*.wit' -o -name '*.txt' -o -name 'package*.json' \) | sort)
  digest=$( (echo "$inputs" | xargs cat && cat "$root/scripts/build-$lang-guest.sh") | sha256sum | cut -d' ' -f1)
  built="$stamps/$name.wasm"
  if [ "$(cat "$stamps/$name.digest" 2>/dev/null)" != "$digest" ] || [ ! -f "$built" ]; then
    rm -f "$stamps/$name.digest"
    "$root/scripts/build-$lang-guest.sh" "$dir" "$built" || die "$name: the $lang build failed"
    echo "$digest" >"$stamps/$name.digest"
  fi
  install_if_changed "$built" "$dist/$name.wasm"
  install_if_changed "$dir/$name.toml" "$dist/$name.toml"
  say "$(printf '%-18s %8d bytes  dist/%s.wasm (%s)' "$name" "$(stat -c %s "$dist/$name.wasm")" "$name" "$lang")"
done
say "done in $(($(date +%s) - started)) s"
