#!/usr/bin/env bash
# Builds the host binary of an earlier release from this repository's own history, for the
# mixed-version test (tests/tests/deployment/upgrades.rs), into target/releases/VERSION/leasehold.
#
#   scripts/build-release.sh             the release before this tree's version (CHANGELOG.md)
#   scripts/build-release.sh VERSION     that release
#   scripts/build-release.sh --built     no build: the path if it is built, else fail saying so
#
# A release is the commit tagged vVERSION, or else the commit whose message is "Release
# VERSION" (a clone that fetched no tags still finds it). Its tree is exported with git archive
# and built against this tree's target directory and lock file, beside a package that asks for
# every dependency this tree's build asks for (scripts/lib/same-deps.py): so the release gets
# the dependency builds already in target/, and only its own crate compiles (~1-2 minutes on two
# cores) where a build of its own would compile most dependencies again (~10). If that build
# fails (a release whose code needs a dependency this tree no longer has), the release is built
# alone, as it was released. Either way the dev binary it replaced in target/debug is put back
# from this tree's build afterwards. Cached: a binary that names the release's commit is kept.
# Prints the binary's path last; prints nothing and succeeds when the changelog names no earlier
# release.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

current=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
# Releases, newest first, as the changelog's headings name them ("## 0.2.0 — 2026-11-26").
releases=$(sed -n 's/^## \([0-9][0-9.]*\) .*/\1/p' CHANGELOG.md)

only_built=false
if [ "${1:-}" = --built ]; then only_built=true; shift; fi
version=${1:-}
if [ -z "$version" ]; then
  # The newest release below this tree's version: 0.3.0 and 0.3.0-dev alike follow 0.2.0.
  base=${current%%-*}
  for r in $releases; do
    if [ "$r" != "$base" ] && [ "$(printf '%s\n%s\n' "$r" "$base" | sort -V | head -n1)" = "$r" ]; then
      version=$r
      break
    fi
  done
  if [ -z "$version" ]; then
    echo "build-release: CHANGELOG.md names no release before $current" >&2
    exit 0
  fi
fi

commit=$(git rev-parse -q --verify "refs/tags/v$version^{commit}" 2>/dev/null || true)
if [ -z "$commit" ]; then
  commit=$(git log --format=%H -n1 --grep="^Release ${version//./\\.}\$" HEAD)
fi
if [ -z "$commit" ]; then
  if [ "$(git rev-parse --is-shallow-repository)" = true ]; then
    echo "build-release: release $version is not in this shallow clone: run git fetch --unshallow --tags" >&2
  else
    echo "build-release: no tag v$version and no commit \"Release $version\" in this repository's history" >&2
  fi
  exit 1
fi
short=$(git rev-parse --short=12 "$commit")

dir=$root/target/releases/$version
bin=$dir/leasehold
if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -qF "($short)"; then
  echo "$bin"
  exit 0
fi

if $only_built; then
  echo "build-release: leasehold $version ($short) is not built: run scripts/build-release.sh (make test does)" >&2
  exit 1
fi
echo "build-release: building leasehold $version ($short) from history" >&2
rm -rf "$dir"
mkdir -p "$dir/src"
git archive "$commit" | tar -x -C "$dir/src"
# The release's build script asks git for the commit; the export has no .git, and the one
# above it is this tree's, so git must not look past the export: it names the commit given.
build() { # cargo arguments
  (
    cd "$dir/src"
    GIT_CEILING_DIRECTORIES=$dir LEASEHOLD_COMMIT=$short CARGO_TARGET_DIR=$root/target \
      cargo build "$@" >&2
  )
}
cp "$dir/src/Cargo.toml" "$dir/src/Cargo.toml.released"
cp "$dir/src/Cargo.lock" "$dir/src/Cargo.lock.released"
python3 scripts/lib/same-deps.py "$root" "$dir/src/same-deps"
sed -i 's/^members = \[/members = ["same-deps", /' "$dir/src/Cargo.toml"
cp "$root/Cargo.lock" "$dir/src/Cargo.lock"
if ! build -p leasehold -p leasehold-same-deps; then
  echo "build-release: $version did not build with this tree's dependencies; building it alone" >&2
  mv "$dir/src/Cargo.toml.released" "$dir/src/Cargo.toml"
  mv "$dir/src/Cargo.lock.released" "$dir/src/Cargo.lock"
  build --locked -p leasehold --bin leasehold
fi
cp "$root/target/debug/leasehold" "$bin.tmp"
mv "$bin.tmp" "$bin"
rm -rf "$dir/src"
# That build replaced this tree's dev binary in target/debug: cargo puts it back (as `make build`
# builds it, so nothing compiles that was built already).
cargo build -p leasehold -p leasehold-tests >&2
"$bin" --version >&2
echo "$bin"
