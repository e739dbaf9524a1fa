#!/bin/bash
# Entrypoint of the PostgreSQL image that scripts/postgres-image.sh makes from Debian's packages: a
# stand-in for the official image (docker.io/library/postgres) where no registry is reachable. It
# does what examples/compose/compose.yaml relies on, the way the official image does it:
#
# - On first start with an empty data directory ($PGDATA, /var/lib/postgresql/data), initdb makes
#   POSTGRES_USER (default postgres) the superuser with POSTGRES_PASSWORD (required) and creates
#   POSTGRES_DB (default: the user's name). Connections over the local socket are trusted (the
#   healthcheck's pg_isready, `psql` inside the container); over the network they need the
#   password (scram-sha-256). A data directory that is already initialised is used as it is.
# - The server listens on all interfaces, port 5432.
# - Started as root, it takes ownership of the data directory and drops to the user postgres.
# - The server is PID 1 and handles the signals itself: SIGINT (the image's stop signal, as in the
#   official image) is a fast shutdown, SIGTERM a smart one.
# - Any other command (`bash`, `psql …`) runs as it is.
#
# Not covered (unused here): /docker-entrypoint-initdb.d, POSTGRES_INITDB_ARGS,
# POSTGRES_HOST_AUTH_METHOD and the *_FILE variants of the variables.
set -euo pipefail

export PGDATA=${PGDATA:-/var/lib/postgresql/data}

# `docker run IMAGE -c work_mem=…` passes server options, as with the official image.
if [ "${1:0:1}" = '-' ]; then
  set -- postgres "$@"
fi
if [ "${1:-}" != postgres ]; then
  exec "$@"
fi

if [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA" /var/run/postgresql
  # Only what is not postgres' already: a large existing data directory is not walked in full.
  find "$PGDATA" /var/run/postgresql \! -user postgres -exec chown postgres:postgres '{}' +
  chmod 0700 "$PGDATA"
  chmod 2775 /var/run/postgresql
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "postgres-entrypoint: the data directory is empty and POSTGRES_PASSWORD is not set:" \
      "set it to the superuser's password" >&2
    exit 1
  fi
  user=${POSTGRES_USER:-postgres}
  db=${POSTGRES_DB:-$user}
  echo "postgres-entrypoint: initialising $PGDATA (superuser $user, database $db)"
  initdb --username="$user" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
    --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >/dev/null
  printf 'host all all all scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
  printf "listen_addresses = '*'\n" >>"$PGDATA/postgresql.conf"
  if [ "$db" != postgres ]; then
    # Single-user mode: no server to start and stop, and nothing listens before the database
    # exists, so a healthcheck cannot pass early.
    printf 'CREATE DATABASE "%s";\n' "${db//\"/\"\"}" | postgres --single -D "$PGDATA" postgres >/dev/null
  fi
  echo "postgres-entrypoint: initialised; starting the server"
fi

exec "$@"
