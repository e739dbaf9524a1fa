#!/usr/bin/env bash
# Runs componentize-py {{componentize_py_version}}, the version leasehold is tested with, with
# these arguments: the one on PATH if it is that version, else one installed from PyPI into .venv
# beside this script on first use. LEASEHOLD_PY_VENV=DIR keeps that virtual environment in DIR
# instead, e.g. one shared by several projects.
set -euo pipefail
# componentize-py is written in Rust: with RUST_BACKTRACE set in the caller's environment, a
# syntax error in the plugin comes with a backtrace of the tool's own frames under its message.
export RUST_BACKTRACE=0

want={{componentize_py_version}}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv=${LEASEHOLD_PY_VENV:-$here/.venv}

say() { echo "componentize-py.sh: $*" >&2; }
die() {
  say "$*"
  exit 1
}
version_of() { "$1" --version 2>/dev/null | sed -n 's/^componentize-py \([^ ]*\).*/\1/p'; }

if [ "$(version_of componentize-py)" = "$want" ]; then
  exec componentize-py "$@"
fi
if [ "$(version_of "$venv/bin/componentize-py")" != "$want" ]; then
  # A shared environment may be wanted by two builds at once: the second waits for the first's
  # install under a lock, then finds it done. Without flock (macOS) two first builds can still
  # collide; the next build repairs what they left.
  if command -v flock >/dev/null 2>&1; then
    mkdir -p "$(dirname "$venv")"
    exec 9>"$venv.lock"
    flock 9
  fi
fi
if [ "$(version_of "$venv/bin/componentize-py")" != "$want" ]; then
  command -v python3 >/dev/null 2>&1 ||
    die "python3 is missing: install Python {{python_version}} or newer (Debian: apt-get install python3-venv)"
  python3 -c 'import sys; sys.exit(sys.version_info < ({{python_version_tuple}}))' ||
    die "$(python3 --version) is too old: this project needs Python {{python_version}} or newer"
  say "installing componentize-py==$want into $venv (once)"
  python3 -m venv "$venv" ||
    die "python3 cannot create a virtual environment (Debian: apt-get install python3-venv)"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "componentize-py==$want" >&2 ||
    die "pip could not install componentize-py==$want (is PyPI reachable?)"
fi
exec "$venv/bin/componentize-py" "$@"
