#!/usr/bin/env bash
# Builds one Python plugin into a component: scripts/build-python-guest.sh DIR OUT.wasm.
# DIR holds NAME.py (NAME is DIR's basename with '-' as '_'), whose `WitWorld` class implements a
# world of the WIT package in wit/: the one a `# world: NAME` line names, `reconciler` without one.
# Called by scripts/build-guests.sh for guests/*/NAME/NAME.py.
#
# The toolchain is componentize-py, pinned in guests/tools/python/requirements.txt and installed
# into guests/tools/python/venv on first use (idempotent: reinstalled only when the pins change).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools="$root/guests/tools/python"
venv="$tools/venv"

say() { echo "build-python-guest: $*" >&2; }
die() {
  say "$*"
  exit 1
}

[ $# -eq 2 ] || die "usage: $0 DIR OUT.wasm"
dir=$(cd "$1" && pwd)
out=$2
module=$(basename "$dir" | tr '-' '_')
[ -f "$dir/$module.py" ] || die "${dir#"$root"/}: no $module.py (a Python plugin's module is named after its directory)"
world=$(sed -n 's/^# world: *\([a-z-]*\).*/\1/p' "$dir/$module.py" | head -1)
world=${world:-reconciler}

# Install (or refresh) the pinned toolchain. The stamp is the requirements file itself: a venv
# built from other pins is rebuilt from scratch rather than upgraded in place.
if ! cmp -s "$tools/requirements.txt" "$venv/.requirements" 2>/dev/null; then
  command -v python3 >/dev/null 2>&1 ||
    die "python3 is missing: install Python 3.10 or newer (Debian: apt-get install python3 python3-venv)"
  python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
    die "$(python3 --version) is too old: componentize-py needs Python 3.10 or newer"
  rm -rf "$venv"
  say "installing $(grep -v '^#' "$tools/requirements.txt" | tr '\n' ' ')into ${venv#"$root"/}"
  python3 -m venv "$venv" 2>/dev/null ||
    die "python3 cannot create a virtual environment (Debian: apt-get install python3-venv)"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$tools/requirements.txt" >&2 ||
    die "pip could not install $(grep -v '^#' "$tools/requirements.txt" | tr '\n' ' ')(is PyPI reachable?)"
  cp "$tools/requirements.txt" "$venv/.requirements"
fi

"$venv/bin/componentize-py" --wit-path "$root/wit" --world "$world" componentize \
  --python-path "$dir" "$module" --output "$out" >/dev/null ||
  die "componentize-py failed for ${dir#"$root"/}/$module.py (world $world)"
