#!/usr/bin/env bash
# After a failed `make test`: why each failing test failed (its panic's first line), then the
# machine's state, printed last so that the tail of a CI log shows both. A full disk, or too few
# file descriptors or processes, fails dozens of tests at once, each with a message of its own
# that the list of names alone does not give.
# Usage: scripts/test-report.sh OUTPUT_OF_CARGO_TEST
set -uo pipefail
log=${1:?usage: scripts/test-report.sh OUTPUT_OF_CARGO_TEST}
echo "== the failing tests' panics (first line of each, at most 40) =="
# libtest prints "---- NAME stdout ----", then "thread 'NAME' (ID) panicked at FILE:LINE:COL:"
# and the message on the next line.
awk '
  /^---- .* stdout ----$/ { name = $2; next }
  name != "" && /panicked at/ {
    if ((getline message) > 0) print name ": " substr(message, 1, 240)
    name = ""
  }
' "$log" | head -n 40
echo "== the machine after the tests =="
df -h . "${TMPDIR:-/tmp}" 2>/dev/null
free -m 2>/dev/null
echo "open files limit $(ulimit -n), processes limit $(ulimit -u), processes now $(ps -e --no-headers 2>/dev/null | wc -l)"
