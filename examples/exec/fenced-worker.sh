#!/bin/sh
# A worker for `leasehold exec` that writes to PostgreSQL through the lease's fence: each of its
# transactions commits only while the epoch it was started with still holds the lease.
#
#   export LEASEHOLD_DATABASE_URL=postgres://leasehold:…@db/app   # the host's, never passed on
#   export DATABASE_URL=postgres://worker:…@db/app                # the worker's own
#   leasehold exec --lease orders -- examples/exec/fenced-worker.sh
#
# DATABASE_URL is the worker's own connection, as a role other than the host's: it needs EXECUTE
# on leasehold_fence(text, bigint) in the lease database, and somewhere to create its table
# (README: "A fence for your own SQL" makes it a schema of its own). LEASEHOLD_LEASE and LEASEHOLD_EPOCH come from the host. The
# table keeps each row's lease: the workers of several leases may share it. WORKER_INTERVAL: seconds between writes (default 1). WORKER_HOLD: seconds each
# transaction stays open after the fence call, standing for slow work (default 0). The fence is
# called by its schema's name (public: where `leasehold migrate` put it, unless told otherwise)
# with typed arguments, so that no function of the same name elsewhere on the path can stand in.
set -eu
: "${DATABASE_URL:?set DATABASE_URL to the worker's PostgreSQL connection}"
: "${LEASEHOLD_LEASE:?run this under leasehold exec}"
: "${LEASEHOLD_EPOCH:?run this under leasehold exec}"

psql "$DATABASE_URL" -X -q -v ON_ERROR_STOP=1 \
  -c "SET client_min_messages = warning" -c "CREATE TABLE IF NOT EXISTS fenced_writes (lease text NOT NULL,
        epoch bigint NOT NULL, n bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())"

n=0
while :; do
  n=$((n + 1))
  # A refused commit makes psql exit non-zero, and with it this script: a stale worker stops.
  psql "$DATABASE_URL" -X -q -o /dev/null -v ON_ERROR_STOP=1 -v lease="$LEASEHOLD_LEASE" \
    -v epoch="$LEASEHOLD_EPOCH" -v n="$n" -v hold="${WORKER_HOLD:-0}" <<'SQL'
BEGIN;
INSERT INTO fenced_writes (lease, epoch, n) VALUES (:'lease', :epoch, :n);
SELECT public.leasehold_fence(:'lease'::text, :epoch::bigint);
\echo fenced :n at epoch :epoch
SELECT pg_sleep(:hold);
COMMIT;
\echo wrote :n at epoch :epoch
SQL
  sleep "${WORKER_INTERVAL:-1}"
done
