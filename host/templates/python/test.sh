#!/usr/bin/env bash
# Runs the unit tests natively: writes the world's bindings (plain Python) into .bindings/, then
# runs test_{{module}}.py, whose fakes stand in for the host's functions.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

rm -rf .bindings
./componentize-py.sh --wit-path wit --world {{world}} bindings .bindings >/dev/null
# The bindings use typing.Self.
if ! python3 -c 'import sys; sys.exit(sys.version_info < ({{python_version_tuple}}))'; then
  echo "test.sh: the tests need Python {{python_version}} or newer for the bindings, not $(python3 --version)" >&2
  exit 1
fi
exec python3 -m unittest -v test_{{module}} "$@"
