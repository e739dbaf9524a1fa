#!/usr/bin/env bash
# The orphan-sweeper example end to end: two leasehold replicas on one PostgreSQL database run the
# sweeper plugin; the script plays the application (sandboxes that heartbeat, one backend that goes
# silent), kills the sweeping replica half-way, and shows the other one finish the job.
#
#   DATABASE_URL=postgres://USER@HOST/DB examples/orphan-sweeper/run.sh
#
# The database is used as both the lease database and the application database.
set -euo pipefail

: "${DATABASE_URL:?set DATABASE_URL to an empty PostgreSQL database, e.g. postgres://postgres@127.0.0.1:5432/sweeper}"
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"

say() { printf '\n== %s\n' "$*"; }
sql() { psql -X -q -v ON_ERROR_STOP=1 "$DATABASE_URL" -c "$1"; }
show() { psql -X -q "$DATABASE_URL" -c "SELECT id, backend, state, swept_epoch, now() - last_heartbeat AS silent_for FROM sandboxes ORDER BY id"; }

say "building the host and the guests"
make build guests >/dev/null

mkdir -p "$here/plugins"
cp guests/dist/orphan-sweeper.wasm "$here/plugins/"
# The example's own grace periods: seconds instead of minutes, so the demo is short.
sed -e 's/^orphan_after = .*/orphan_after = "5s"/' -e 's/^delete_after = .*/delete_after = "10s"/' \
    -e 's/^interval = .*/interval = "2s"/' \
    guests/dist/orphan-sweeper.toml >"$here/plugins/orphan-sweeper.toml"

say "the application's table"
psql -X -q -v ON_ERROR_STOP=1 "$DATABASE_URL" -f guests/examples/orphan-sweeper/schema.sql
sql "DELETE FROM sandboxes"
sql "INSERT INTO sandboxes (id, backend) VALUES ('sb-1', 'alpha'), ('sb-2', 'alpha'), ('sb-3', 'beta')"

say "the sweeper's role: its table, nothing of leasehold's (README, Security model)"
sql "DO \$\$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'sweeper') THEN CREATE ROLE sweeper LOGIN; END IF; END \$\$"
sql "GRANT USAGE ON SCHEMA public TO sweeper; GRANT SELECT, UPDATE, DELETE ON sandboxes TO sweeper"
# The same database as the role sweeper (no password here: set one, and put it in the URL, where
# the server asks for one).
app_url=$(printf '%s' "$DATABASE_URL" | sed -E 's#^(postgres(ql)?://)([^@/]*@)?#\1sweeper@#')
export LEASEHOLD_DATABASE_URL="$DATABASE_URL" APP_DATABASE_URL="$app_url"
logs=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; }
trap cleanup EXIT
for r in a b; do
  target/debug/leasehold run --config "$here/leasehold.toml" --replica-id "sweeper-$r" \
    --http 127.0.0.1:0 >"$logs/$r.log" 2>&1 &
  pids+=($!)
done
echo "replica logs: $logs/a.log $logs/b.log"

# The application: backend alpha heartbeats for a while, then goes silent; beta keeps going.
heartbeat() { sql "UPDATE sandboxes SET last_heartbeat = now() WHERE backend = ANY('{$1}'); NOTIFY sandbox_events"; }
for _ in 1 2 3; do heartbeat alpha,beta; sleep 1; done
say "backend alpha goes silent"
for _ in $(seq 1 8); do heartbeat beta; sleep 1; done
show

holder=$(grep -l "sweep epoch=" "$logs"/a.log "$logs"/b.log | head -1 || true)
if [ -n "$holder" ]; then
  name=$(basename "$holder" .log)
  say "killing the sweeping replica ($name) with SIGKILL"
  if [ "$name" = a ]; then kill -9 "${pids[0]}"; else kill -9 "${pids[1]}"; fi
fi
for _ in $(seq 1 16); do heartbeat beta; sleep 1; done
show
say "what the replicas logged about sweeps"
grep -h "sweep epoch=\|acquired\|lease lost\|released" "$logs"/a.log "$logs"/b.log | sed 's/^/  /' | tail -20
