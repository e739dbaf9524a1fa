#!/usr/bin/env python3
"""Leader-only work beside a leasehold host, driven by the lease's watch stream.

    DATABASE_URL=postgresql://app@db/app examples/watch/follow_lease.py [--url URL] [--lease NAME]

Works while this replica holds the lease: from `started` (or a `state` saying leader) until `ended`,
stop_within_ms 0, a role other than leader, or its deadline (the last event's arrival + its
stop_within_ms) passing without news, as when the host is frozen or cut off. The work writes a row
every ~100 ms through the fence, so a write of an epoch that has moved on is refused (LH001) and
the work ends there. DATABASE_URL's role needs EXECUTE on leasehold_fence(text, bigint). One line
per transition on stdout, ending with at=WALL_CLOCK_MS. Needs psycopg 3 (Debian: python3-psycopg).
"""

import argparse
import http.client
import json
import os
import signal
import sys
import threading
import time
import urllib.parse

import psycopg
from psycopg import sql

FENCED_OUT = "LH001"
STALE = 5.0  # seconds: heartbeats come every 2 s at most, so a stream this silent is dead


def say(*words):
    print(*words, f"at={time.time_ns() // 1_000_000}", flush=True)


class Work:
    """One term's work: a thread writing through the fence until told to stop or out of time."""

    def __init__(self, args, epoch, deadline):
        self.args, self.epoch, self.deadline = args, epoch, deadline
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        table, lease, epoch = sql.Identifier(self.args.table), self.args.lease, self.epoch
        insert = sql.SQL("INSERT INTO {} (epoch) VALUES (%s)").format(table)
        try:
            with psycopg.connect(self.args.database_url) as conn:
                wrote = False
                # Checked here too: no write begins after the deadline, whatever the stream does.
                while not self.stop.is_set() and time.monotonic() < self.deadline:
                    try:
                        with conn.transaction():
                            conn.execute(
                                "SELECT public.leasehold_fence(%s::text, %s::bigint)",
                                (lease, epoch),
                            )
                            conn.execute(insert, (epoch,))
                    except psycopg.Error as e:
                        if e.sqlstate != FENCED_OUT:
                            raise
                        say("refused", f"epoch={self.epoch}")
                        return
                    if not wrote:
                        say("wrote", f"epoch={self.epoch}")
                        wrote = True
                    self.stop.wait(0.1)
        except Exception as e:  # the term goes on; only its work failed
            print(f"work at epoch {self.epoch} failed: {e}", file=sys.stderr, flush=True)

    def end(self):
        # Waits for a transaction under way: nothing of the term commits after `stopped`.
        self.stop.set()
        self.thread.join(5)


class Follower:
    def __init__(self, args):
        self.args, self.work, self.backoff = args, None, 0.1
        self.news, self.allowed = 0.0, 0  # the running term's last event: arrival, stop_within_ms

    def stop(self, why):
        if self.work:
            self.work.end()
            say("stopped", f"epoch={self.work.epoch}", f"why={why}")
            self.work = None

    def check_deadline(self):
        if self.work and time.monotonic() >= self.work.deadline:
            silent = round((time.monotonic() - self.news) * 1000)
            self.stop(f"deadline (no news for {silent} ms, allowed {self.allowed})")

    def timeout(self):
        # No wait outlasts the time left: a frozen host sends nothing, not even a goodbye.
        if self.work:
            return max(0.001, min(STALE, self.work.deadline - time.monotonic()))
        return STALE

    def on_event(self, kind, d, received):
        epoch, left = d.get("epoch"), d["stop_within_ms"]
        leading = d["role"] == "leader" and left > 0
        if kind == "state":
            self.backoff = 0.1
            say("connected", f"role={d['role']}", f"epoch={epoch}", f"stop_within_ms={left}")
        if self.work:
            if kind == "ended":
                self.stop(f"ended:{d.get('reason')}")
            elif not leading or epoch != self.work.epoch:
                self.stop("role")
            else:
                self.work.deadline = received + left / 1000
                self.news, self.allowed = received, left
        if not self.work and leading and kind in ("started", "state") and epoch is not None:
            self.news, self.allowed = received, left
            self.work = Work(self.args, epoch, received + left / 1000)
            say("started", f"epoch={epoch}", f"stop_within_ms={left}")

    def follow(self, last_id):
        """Reads one connection's events until it drops or goes silent; returns the last id."""
        url = urllib.parse.urlsplit(self.args.url)
        conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=self.timeout())
        try:
            headers = {"Accept": "text/event-stream"}
            if last_id:
                headers["Last-Event-ID"] = last_id
            conn.request("GET", f"/v1/leases/{self.args.lease}/watch", headers=headers)
            sock = conn.sock  # getresponse may hand it over to the response: keep it for timeouts
            resp = conn.getresponse()
            if resp.status != 200:
                raise OSError(f"watch answered {resp.status}: {resp.read(300)!r}")
            kind, data = "message", []
            while True:
                self.check_deadline()
                sock.settimeout(self.timeout())
                line = resp.readline()
                if not line:
                    raise EOFError("the stream ended")
                line = line.decode().rstrip("\r\n")
                field, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if not line and data:  # a blank line ends an event
                    self.on_event(kind, json.loads("\n".join(data)), time.monotonic())
                    kind, data = "message", []
                elif field == "event":
                    kind = value
                elif field == "data":
                    data.append(value)
                elif field == "id":
                    last_id = value
        except (OSError, EOFError, ValueError, KeyError, http.client.HTTPException) as e:
            print(f"watch: {e or type(e).__name__}; reconnecting", file=sys.stderr, flush=True)
        finally:
            conn.close()
        return last_id

    def run(self):
        last_id = None
        while True:
            last_id = self.follow(last_id)
            self.check_deadline()
            # The term's work goes on while this reconnects, until its deadline: no sleep past it.
            time.sleep(min(self.backoff, self.timeout()))
            self.backoff = min(self.backoff * 2, 2.0)
            self.check_deadline()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", default=os.environ.get("LEASEHOLD_URL", "http://127.0.0.1:9464"))
    p.add_argument("--lease", default=os.environ.get("LEASE", "leader"))
    p.add_argument("--table", default="lease_writes", help="its own table, made if missing")
    p.add_argument("--database-url", default=os.environ.get("DATABASE_URL"))
    args = p.parse_args()
    if not args.database_url:
        p.error("set DATABASE_URL (or --database-url): the connection the writes go through")
    with psycopg.connect(args.database_url, autocommit=True) as conn:
        make = sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (epoch bigint NOT NULL,"
            " at timestamptz NOT NULL DEFAULT clock_timestamp())"
        )
        conn.execute(make.format(sql.Identifier(args.table)))
    follower = Follower(args)
    for stop in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop, lambda *_: sys.exit(0))
    try:
        follower.run()
    finally:
        follower.stop("exit")


if __name__ == "__main__":
    main()
