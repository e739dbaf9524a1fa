#!/usr/bin/env bash
# Three leasehold replicas on one PostgreSQL database, end to end: they elect a leader, which runs
# the hello-reconciler plugin; the script kills the leader with SIGKILL and shows a standby take
# over once the lease expires (with the next epoch), then stops the new leader with SIGTERM and
# shows the graceful handoff to the last replica, and finally stops that one too.
#
#   DATABASE_URL=postgres://USER@HOST/DB examples/three-replicas/run.sh
#
# TTL (default 3s) is the lease ttl: a killed leader is replaced after at most that long. The
# replicas' logs stay in a temporary directory, named at the start.
set -euo pipefail

: "${DATABASE_URL:?set DATABASE_URL to a PostgreSQL database, e.g. postgres://postgres@127.0.0.1:5432/postgres}"
TTL=${TTL:-3s}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"

say() { printf '\n== %s\n' "$*"; }

say "building the host and the guests"
make build guests >/dev/null

work=$(mktemp -d)
mkdir "$work/plugins"
cp guests/dist/hello-reconciler.wasm "$work/plugins/"
# A tick every second instead of every five, so the handover shows within a few lines.
sed -e 's/^interval = .*/interval = "1s"/' guests/dist/hello-reconciler.toml \
  >"$work/plugins/hello-reconciler.toml"

export LEASEHOLD_DATABASE_URL="$DATABASE_URL"
declare -A pid addr
replicas=(a b c)
cleanup() { for r in "${replicas[@]}"; do kill "${pid[$r]:-}" 2>/dev/null || true; done; }
trap cleanup EXIT

say "starting replicas a, b and c (ttl $TTL); logs in $work"
for r in "${replicas[@]}"; do
  target/debug/leasehold run --replica-id "$r" --http 127.0.0.1:0 --ttl "$TTL" \
    --plugins "$work/plugins" >"$work/$r.log" 2>&1 &
  pid[$r]=$!
done
# Port 0: each replica picks a free port and logs it ("http listening addr=…").
for r in "${replicas[@]}"; do
  for _ in $(seq 1 200); do
    a=$(grep -o 'http listening addr=[0-9.:]*' "$work/$r.log" | head -1 | cut -d= -f2 || true)
    [ -n "$a" ] && break
    kill -0 "${pid[$r]}" 2>/dev/null || { echo "replica $r exited:"; cat "$work/$r.log"; exit 1; }
    sleep 0.1
  done
  [ -n "$a" ] || { echo "replica $r never listened:"; cat "$work/$r.log"; exit 1; }
  addr[$r]=$a
  echo "  $r: pid ${pid[$r]}, http://$a/status"
done

# Prints the replica whose /status says it leads, among the ones given; waits up to $1 seconds.
wait_leader() {
  local limit=$1; shift
  local deadline=$((SECONDS + limit))
  while [ "$SECONDS" -le "$deadline" ]; do
    for r in "$@"; do
      if curl -sf --max-time 1 "http://${addr[$r]}/status" | grep -q '"role":"leader"'; then
        echo "$r"; return 0
      fi
    done
    sleep 0.1
  done
  echo "no leader among $* after ${limit}s" >&2
  return 1
}
# The names in "$@" except $1.
except() { local skip=$1 r; shift; for r in "$@"; do if [ "$r" != "$skip" ]; then echo "$r"; fi; done; }
# Every replica's log lines matching $1, merged in time order and tagged with the replica.
merged() {
  local r
  for r in "${replicas[@]}"; do sed -e "s/^\([^ ]*\) /\1 [$r] /" "$work/$r.log"; done \
    | sort | grep -E "$1" \
    | sed -E -e 's/leasehold::[a-z_:]+: //' -e 's/^/  /'
}
now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN { printf "%.2f", a - b }'; }

say "waiting for a leader"
# A previous run may have left a lease held by a process that no longer exists: up to one ttl.
leader=$(wait_leader 30 "${replicas[@]}")
curl -s "http://${addr[$leader]}/status"
echo
echo "  leader: $leader"
sleep 3

say "kill -9 the leader ($leader): no release, the others wait for the lease to expire"
kill -9 "${pid[$leader]}"
wait "${pid[$leader]}" 2>/dev/null || true
killed_at=$(now)
unset "pid[$leader]"
mapfile -t rest < <(except "$leader" "${replicas[@]}")
second=$(wait_leader 30 "${rest[@]}")
echo "  new leader: $second, $(since "$killed_at") s after the kill (ttl $TTL)"
sleep 3

say "SIGTERM the new leader ($second): ordered release, the last replica takes over at once"
last=$(except "$second" "${rest[@]}")
term_at=$(now)
kill -TERM "${pid[$second]}"
wait "${pid[$second]}" && echo "  $second exited 0 after $(since "$term_at") s" || echo "  $second exited with status $?"
unset "pid[$second]"
wait_leader 10 "$last" >/dev/null
echo "  $last leads ($(since "$term_at") s after the SIGTERM, including the poll of /status)"
sleep 2

say "SIGTERM the last replica ($last)"
kill -TERM "${pid[$last]}"
wait "${pid[$last]}" && echo "  $last exited 0" || echo "  $last exited with status $?"
unset "pid[$last]"

say "the lease table: released, nobody holds it; the next holder gets the next epoch"
RUST_LOG=warn target/debug/leasehold leases list

say "what the replicas logged, in time order"
merged 'lease acquired|lease lost|lease released|SIGTERM received|shutting down|term ended|all leases released|from epoch|starting on lease'
say "full logs: $work/{a,b,c}.log"
