#!/usr/bin/env bash
# Builds the leasehold image from examples/docker/Dockerfile with podman (`make image`).
#
#   scripts/image.sh                        release binary; tags leasehold:latest and leasehold:VERSION
#   scripts/image.sh --binary PATH --tag T  that binary (the tests use the dev build); tag T only
#
# Two paths, one runtime stage. When the registry's builder image (rust:1-bookworm) can be had,
# the Dockerfile compiles the binary itself (the documented multi-stage build). Otherwise the
# release binary is built here, outside the image, and handed in as the build context
# `prebuilt`. The Debian base is pulled when it can be, else made from Debian's packages with
# mmdebstrap and imported under the name the Dockerfile asks for. The script says which path it
# took, and prints the image's size.
#
# CONTAINERS_CONF defaults to scripts/containers.conf (see its comments).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

binary=""
given=""
tags=()
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary=${2:?--binary needs a path}; given=1; shift 2 ;;
    --tag) tags+=("${2:?--tag needs a name}"); shift 2 ;;
    *) echo "image: unknown argument $1 (see the head of $0)" >&2; exit 2 ;;
  esac
done

scripts/install-deps.sh --containers
export CONTAINERS_CONF=$(realpath "${CONTAINERS_CONF:-$root/scripts/containers.conf}")

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
[ ${#tags[@]} -gt 0 ] || tags=(leasehold:latest "leasehold:$version")
revision=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then revision="$revision-dirty"; fi
build_args=(--build-arg "VERSION=$version" --build-arg "REVISION=$revision")
# The source label names where this tree came from, when git knows (credentials stripped).
if origin=$(git remote get-url origin 2>/dev/null); then
  build_args+=(--build-arg "SOURCE=$(printf '%s' "$origin" | sed -E 's#//[^@/]*@#//#')")
fi

# The runtime stage's base, as the Dockerfile names it.
base=docker.io/library/debian:bookworm-slim
if podman image exists "$base"; then
  echo "image: base $base is present"
elif podman pull -q "$base" >/dev/null 2>&1; then
  echo "image: base $base pulled from the registry"
else
  echo "image: the registry cannot be reached: making $base from Debian's packages (mmdebstrap, ~30 s)"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # minbase + CA certificates, without manuals, locales and apt's lists (as the registry's slim
  # image leaves them out); /usr merged by a hook instead of the usrmerge package, which would
  # pull in Perl.
  mmdebstrap --quiet --mode=root --variant=minbase --include=ca-certificates \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/log/*.log' \
    bookworm "$work/base.tar"
  podman import -q "$work/base.tar" "$base" >/dev/null
fi

# The image the first tag names now: once the tag moves to the new build it is removed, unless
# something else still uses or names it, so repeated builds do not pile up untagged images.
previous=$(podman image inspect --format '{{.Id}}' "${tags[0]}" 2>/dev/null || true)

# Where the binary comes from.
# No layer cache: the steps after the base take a second, and cached stage images would pile
# up with every new binary.
build=(podman build --pull=never --layers=false --network=host -f examples/docker/Dockerfile "${build_args[@]}")
for tag in "${tags[@]}"; do build+=(-t "$tag"); done
if [ -z "$binary" ] && { podman image exists docker.io/library/rust:1-bookworm \
    || podman pull -q docker.io/library/rust:1-bookworm >/dev/null 2>&1; }; then
  echo "image: building the binary inside the image (multi-stage, rust:1-bookworm)"
  "${build[@]}" --build-arg BINARY=source .
else
  if [ -z "$binary" ]; then
    echo "image: rust:1-bookworm cannot be pulled: building the release binary here (~20 minutes from clean)"
    cargo build --release -p leasehold --locked
    binary=${CARGO_TARGET_DIR:-target}/release/leasehold
  fi
  echo "image: runtime stage with the binary $binary"
  stage=$(mktemp -d)
  # Symbols stripped as the multi-stage build strips them; panics still name file and line.
  strip -o "$stage/leasehold" "$binary"
  "${build[@]}" --build-arg BINARY=prebuilt --build-context "prebuilt=$stage" "$stage"
  rm -rf "$stage"
fi

current=$(podman image inspect --format '{{.Id}}' "${tags[0]}")
if [ -n "$previous" ] && [ "$previous" != "$current" ]; then
  podman rmi "$previous" >/dev/null 2>&1 || true
fi

size=$(podman image inspect --format '{{.Size}}' "${tags[0]}")
mb=$(( (size + 500000) / 1000000 ))
if [ -z "$given" ]; then
  echo "image: ${tags[*]}: $mb MB (goal: under 120 MB)"
else
  echo "image: ${tags[*]}: $mb MB"
fi
