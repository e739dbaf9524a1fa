#!/usr/bin/env bash
# Prints the step timing tables that `make test` and .ci/run write (scripts/lib/timing.sh), slowest
# first, with the CPU seconds its processes used where measured (user + system, those it waited
# for), then the whole: how long the run took from its first step to its last, which is less than
# the sum wherever steps ran side by side.
#
#   scripts/suite-table.sh WALL_SECONDS TABLE…
set -euo pipefail
wall=${1:?usage: scripts/suite-table.sh WALL_SECONDS TABLE...}
shift
rows=$(cat "$@" 2>/dev/null | sed '/^$/d' | sort -t$'\t' -k1,1gr)
printf '%-34s %9s %8s  %-7s %s\n' step wall cpu result tests
printf '%s\n' "$rows" | awk -F'\t' '
  function mmss(s) { return sprintf("%dm%04.1fs", int(s / 60), s - 60 * int(s / 60)) }
  NF >= 3 { printf "%-34s %9s %8s  %-7s %s\n", $2, mmss($1), ($5 == "" ? "" : $5 "s"), $3, $4 }'
awk -v w="$wall" 'BEGIN { printf "%-34s %9s\n", "the whole, wall time", sprintf("%dm%04.1fs", int(w / 60), w - 60 * int(w / 60)) }'
