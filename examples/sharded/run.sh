#!/usr/bin/env bash
# A sharded reconciler on three leasehold replicas: the lease group `orders` of 12 shards spreads
# four to each, every replica running the sharded-counter plugin once per shard it holds. A
# fourth replica joins and takes three shards by handoff (each carrying on from the checkpoint its
# last holder wrote); then one replica is stopped and the others take its shards back.
#
#   examples/sharded/run.sh                                  # SQLite file in a temporary directory
#   DATABASE_URL=postgres://USER@HOST/DB examples/sharded/run.sh
#
# TTL (default 3s) is the lease ttl. The replicas' logs stay in a temporary directory, named at
# the start.
set -euo pipefail

TTL=${TTL:-3s}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"

say() { printf '\n== %s\n' "$*"; }

say "building the host and the guests"
make build guests >/dev/null

work=$(mktemp -d)
mkdir "$work/plugins"
cp guests/dist/sharded-counter.wasm guests/dist/sharded-counter.toml "$work/plugins/"
export LEASEHOLD_DATABASE_URL="${DATABASE_URL:-sqlite:$work/leases.db}"
export LEASEHOLD_GROUPS="orders=12"

declare -A pid addr
replicas=()
cleanup() { for r in "${replicas[@]}"; do kill "${pid[$r]:-}" 2>/dev/null || true; done; }
trap cleanup EXIT

start() {
  local r=$1
  replicas+=("$r")
  target/debug/leasehold run --replica-id "$r" --http 127.0.0.1:0 --ttl "$TTL" \
    --plugins "$work/plugins" >"$work/$r.log" 2>&1 &
  pid[$r]=$!
  for _ in $(seq 1 200); do
    addr[$r]=$(grep -o 'http listening addr=[0-9.:]*' "$work/$r.log" | head -1 | cut -d= -f2 || true)
    [ -n "${addr[$r]}" ] && return
    kill -0 "${pid[$r]}" 2>/dev/null || { echo "replica $r exited:"; cat "$work/$r.log"; exit 1; }
    sleep 0.1
  done
  echo "replica $r did not start"; exit 1
}

# Each running replica's share, from its /status.
shares() {
  for r in "${replicas[@]}"; do
    kill -0 "${pid[$r]}" 2>/dev/null || continue
    curl -fsS "http://${addr[$r]}/status" | python3 -c '
import json, sys
s = json.load(sys.stdin)
g = s["groups"][0]
held = sorted(int(l["name"].split("/")[1]) for l in s["leases"] if l["role"] == "leader")
print("  %14s: %2d of %d (target %d, %d members) shards %s" % (s["replica"], g["held"], g["shards"], g["target"], g["members"], held))'
  done
}

settle() { sleep "${1:-4}"; shares; }

say "starting replicas a, b and c (ttl $TTL, group orders=12); logs in $work"
for r in a b c; do start "$r"; done
settle 5

say "d joins: a newcomer counts once it has been a member for a renewal interval; then each of the others hands it one shard"
start d
settle 4
grep -h "handing a shard over.*target=3" "$work"/{a,b,c}.log | sed 's/^/  /' | cut -c1-200
grep -h "resumes from checkpoint" "$work/d.log" | sed 's/^/  /' | cut -c1-200

say "c stops (SIGTERM): it leaves the group, releases its shards, and the others take them at once"
kill -TERM "${pid[c]}"
wait "${pid[c]}" || true
settle 2
grep -h "left the lease groups" "$work/c.log" | sed 's/^/  /' | cut -c1-200
for r in a b d; do grep -h "resumes from checkpoint.*written by c-" "$work/$r.log" || true; done | sed 's/^/  /' | cut -c1-200

say "done; the logs are in $work"
