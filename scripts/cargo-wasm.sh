#!/usr/bin/env bash
# Runs cargo for wasm32-wasip2 with a toolchain that can build for it:
#
#   cargo-wasm.sh build --release [more cargo args]
#
# runs `cargo build --target wasm32-wasip2 --release [more cargo args]` in the current directory.
# Used by scripts/build-guests.sh, and copied by `leasehold new` into Rust plugin projects (their
# build.sh calls it), so both pick the toolchain the same way:
# - where rustup has the wasm32-wasip2 standard library installed, plain cargo;
# - otherwise Debian's rustc-web/cargo-web with the matching std source (rust-web-src) and
#   wasi-libc, building std for the target with -Zbuild-std, linked by the wasm-component-ld that
#   ships in the rustup toolchain. Missing Debian packages are installed (apt-get update runs
#   once, only then).
# Non-interactive. LEASEHOLD_GUESTS_TOOLCHAIN=rustup or =debian forces a path; CARGO_WASM_TAG
# names the caller in messages (default cargo-wasm). Messages go to stderr.
set -euo pipefail

target=wasm32-wasip2

say() { echo "${CARGO_WASM_TAG:-cargo-wasm}: $*" >&2; }
die() {
  say "$*"
  exit 1
}

[ $# -ge 1 ] || die "usage: $0 build --release [more cargo args]"

# The rustup-managed sysroot (for wasm-component-ld), whatever `rustc` is first in PATH.
rustup_sysroot() {
  if command -v rustup >/dev/null 2>&1; then
    rustup run "$(rustup show active-toolchain 2>/dev/null | cut -d' ' -f1)" rustc --print sysroot 2>/dev/null && return
  fi
  command -v rustc >/dev/null 2>&1 && rustc --print sysroot 2>/dev/null
}

have_rustup_target() {
  command -v rustup >/dev/null 2>&1 && rustup target list --installed 2>/dev/null | grep -qx "$target"
}

pkg_installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

mode=${LEASEHOLD_GUESTS_TOOLCHAIN:-}
if [ -z "$mode" ]; then
  if have_rustup_target; then mode=rustup; else mode=debian; fi
fi

cargo_cmd=()
case "$mode" in
rustup)
  have_rustup_target || die "LEASEHOLD_GUESTS_TOOLCHAIN=rustup, but rustup has no $target target installed (rustup target add $target)"
  command -v cargo >/dev/null 2>&1 || die "cargo is missing"
  say "toolchain: $(rustc --version) with rustup's $target standard library"
  cargo_cmd=(cargo "$1" --target "$target")
  ;;
debian)
  command -v dpkg-query >/dev/null 2>&1 ||
    die "rustup has no $target standard library and this is not a Debian system: install one (rustup target add $target) and run again"
  pkgs=(rustc-web cargo-web rust-web-src wasi-libc)
  missing=()
  for p in "${pkgs[@]}"; do pkg_installed "$p" || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
      command -v sudo >/dev/null 2>&1 || die "need root or sudo to install the Debian packages: ${missing[*]}"
      sudo="sudo -n"
    fi
    say "installing ${missing[*]} (rustup has no $target standard library)"
    $sudo apt-get update -q >&2 || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q -o Dpkg::Use-Pty=0 --no-install-recommends "${missing[@]}" >&2 ||
      die "apt-get install ${missing[*]} failed"
  fi

  # The binaries rustc-web and cargo-web install (checked, not assumed).
  deb_rustc=$(dpkg -L rustc-web | grep -m1 -E '/bin/rustc$' || true)
  deb_cargo=$(dpkg -L cargo-web | grep -m1 -E '^/usr/bin/cargo$' || dpkg -L cargo-web | grep -m1 -E '/bin/cargo$' || true)
  [ -n "$deb_rustc" ] && [ -x "$deb_rustc" ] || die "rustc-web is installed but provides no rustc binary"
  [ -n "$deb_cargo" ] && [ -x "$deb_cargo" ] || die "cargo-web is installed but provides no cargo binary"
  deb_sysroot=$("$deb_rustc" --print sysroot)
  [ -d "$deb_sysroot/lib/rustlib/src/rust/library" ] ||
    die "no Rust library source under $deb_sysroot/lib/rustlib/src/rust/library (package rust-web-src)"
  "$deb_rustc" --print target-list | grep -qx "$target" ||
    die "$("$deb_rustc" --version) does not know the $target target"

  # wasi-libc's static libraries: Debian has used wasm32-wasi; prefer a wasip2 directory if any.
  libc_dir=$(dpkg -L wasi-libc | grep -E '/lib/wasm32-wasi(p2|p1)?/libc\.a$' | sort -r | head -1 | xargs -r dirname)
  [ -n "$libc_dir" ] || die "wasi-libc is installed but no libc.a for wasm32-wasi was found in it"

  # wasm32-wasip2 links through wasm-component-ld: Debian does not ship it, rustup toolchains do.
  host_triple=$("$deb_rustc" -vV | sed -n 's/^host: //p')
  linker_dir=""
  if sysroot=$(rustup_sysroot) && [ -x "$sysroot/lib/rustlib/$host_triple/bin/wasm-component-ld" ]; then
    linker_dir="$sysroot/lib/rustlib/$host_triple/bin"
  elif [ -x "$deb_sysroot/lib/rustlib/$host_triple/bin/wasm-component-ld" ]; then
    linker_dir="$deb_sysroot/lib/rustlib/$host_triple/bin"
  elif command -v wasm-component-ld >/dev/null 2>&1; then
    linker_dir=$(dirname "$(command -v wasm-component-ld)")
  fi
  [ -n "$linker_dir" ] ||
    die "no wasm-component-ld: expected in a rustup toolchain's lib/rustlib/$host_triple/bin (or install it: cargo install wasm-component-ld)"

  say "toolchain: $("$deb_rustc" --version) (Debian, std built from source), libc from $libc_dir, linker from $linker_dir"
  export PATH="$linker_dir:$PATH"
  export RUSTC="$deb_rustc"
  export RUSTC_BOOTSTRAP=1
  export RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-L $libc_dir"
  cargo_cmd=("$deb_cargo" "$1" --target "$target" -Zbuild-std=std,panic_abort)
  ;;
*)
  die "LEASEHOLD_GUESTS_TOOLCHAIN must be rustup or debian, not '$mode'"
  ;;
esac
shift

"${cargo_cmd[@]}" "$@" || die "cargo ${cargo_cmd[1]} failed (${cargo_cmd[*]} $*)"
