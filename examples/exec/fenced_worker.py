#!/usr/bin/env python3
"""A worker for `leasehold exec` that writes to PostgreSQL through the lease's fence.

    export LEASEHOLD_DATABASE_URL=postgres://leasehold:…@db/app   # the host's, never passed on
    export DATABASE_URL=postgres://worker:…@db/app                # the worker's own
    leasehold exec --lease orders -- examples/exec/fenced_worker.py

Each transaction calls leasehold_fence(lease, epoch) before it commits, so it commits only while
the epoch this process was started with still holds the lease. A refused commit raises with
SQLSTATE LH001: the worker is stale, and it exits rather than retry. Needs psycopg 3: Debian's
python3-psycopg, or `pip install psycopg` where python3 is not Debian's. DATABASE_URL is the
worker's own connection: its role needs EXECUTE on leasehold_fence(text, bigint) and somewhere to
create its table (README: "A fence for your own SQL" makes it a schema of its own). The table
keeps each row's lease: the workers of several leases may share it. WORKER_INTERVAL is the
seconds between writes (default 1).
"""

import os
import sys
import time

import psycopg

FENCED_OUT = "LH001"


def main() -> int:
    lease = os.environ["LEASEHOLD_LEASE"]
    epoch = int(os.environ["LEASEHOLD_EPOCH"])
    interval = float(os.environ.get("WORKER_INTERVAL", "1"))
    with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS fenced_writes (lease text NOT NULL, epoch bigint NOT NULL,"
            " n bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())"
        )
        conn.commit()
        n = 0
        while True:
            n += 1
            try:
                with conn.transaction():
                    conn.execute(
                        "INSERT INTO fenced_writes (lease, epoch, n) VALUES (%s, %s, %s)",
                        (lease, epoch, n),
                    )
                    # Qualified and typed: no look-alike on the path can stand in for it.
                    conn.execute(
                        "SELECT public.leasehold_fence(%s::text, %s::bigint)", (lease, epoch)
                    )
            except psycopg.Error as e:
                if e.sqlstate == FENCED_OUT:
                    print(f"fenced out: {e.diag.message_primary}", file=sys.stderr, flush=True)
                    return 1
                raise
            print(f"wrote {n} at epoch {epoch}", flush=True)
            time.sleep(interval)


if __name__ == "__main__":
    sys.exit(main())
