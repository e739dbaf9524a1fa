#!/usr/bin/env bash
# Installs what building and testing leasehold needs on a Debian machine; with --bench, also what
# `make bench` needs: etcd's server and CLI, the reference handoff-bench compares leasehold's
# handoff and failover against (Debian bookworm ships 3.4.23); with --containers, what `make image`
# and the container tests need: podman with runc, slirp4netns (a container's own network that
# still reaches the host's loopback) and mmdebstrap (a Debian base image without a registry).
# Idempotent: it only calls apt-get when something is missing, and never downloads toolchains
# itself.
set -euo pipefail

need_pkgs=()
# gcc builds the bundled SQLite; the PostgreSQL server runs the integration tests.
command -v cc >/dev/null 2>&1 || need_pkgs+=(build-essential)
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then
  need_pkgs+=(postgresql)
fi
command -v curl >/dev/null 2>&1 || need_pkgs+=(curl)
# jq reads cargo's list of the test binaries it built, and GNU time counts each test job's CPU
# (scripts/test-suite.sh).
command -v jq >/dev/null 2>&1 || need_pkgs+=(jq)
[ -x /usr/bin/time ] || need_pkgs+=(time)
# psql takes row locks from outside in the lease tests; libfaketime steps a process's wall clock.
command -v psql >/dev/null 2>&1 || need_pkgs+=(postgresql-client)
# openssl makes the test server's TLS certificate, which the sslmode test connects with.
command -v openssl >/dev/null 2>&1 || need_pkgs+=(openssl)
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || need_pkgs+=(libfaketime)
# promtool checks and unit-tests the alert rules in examples/prometheus/ (the server is not run).
command -v promtool >/dev/null 2>&1 || need_pkgs+=(prometheus)
# Headless Chromium and its WebDriver server load the status page in the browser tests.
[ -x /usr/bin/chromium ] || need_pkgs+=(chromium)
[ -x /usr/bin/chromedriver ] || need_pkgs+=(chromium-driver)
# PgBouncer stands in front of the test server in the pooler tests (session pooling works,
# transaction pooling is refused at start-up).
command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || need_pkgs+=(pgbouncer)
# psycopg runs the Python example worker of examples/exec/ (with the system python3), which the
# exec fence tests start.
/usr/bin/python3 -c 'import psycopg' >/dev/null 2>&1 || need_pkgs+=(python3-psycopg)
# Programs nobody on the project wrote, run under a lease as users run them
# (tests/tests/processes/real_programs.rs): redis as a service started by its activate script, and
# nginx, which daemonizes by default, under exec.
command -v redis-server >/dev/null 2>&1 || need_pkgs+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need_pkgs+=(redis-tools)
[ -x /usr/sbin/nginx ] || need_pkgs+=(nginx)
for arg in "$@"; do
  case "$arg" in
    --bench)
      command -v etcd >/dev/null 2>&1 || need_pkgs+=(etcd-server)
      command -v etcdctl >/dev/null 2>&1 || need_pkgs+=(etcd-client)
      ;;
    --containers)
      for tool in podman runc slirp4netns mmdebstrap; do
        command -v "$tool" >/dev/null 2>&1 || need_pkgs+=("$tool")
      done
      # The init of a pod's infra container, which podman builds its pause image around (the
      # chart's pods run under `podman kube play`).
      command -v catatonit >/dev/null 2>&1 || [ -x /usr/libexec/podman/catatonit ] || need_pkgs+=(catatonit)
      # newuidmap, for podman run by a user other than root.
      command -v newuidmap >/dev/null 2>&1 || need_pkgs+=(uidmap)
      # Service names on a compose project's network, with podman's CNI backend.
      [ -x /usr/lib/cni/dnsname ] || need_pkgs+=(golang-github-containernetworking-plugin-dnsname)
      ;;
    *) echo "install-deps: unknown option $arg" >&2; exit 2 ;;
  esac
done

if [ ${#need_pkgs[@]} -gt 0 ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "install-deps: need root or sudo to install: ${need_pkgs[*]}" >&2; exit 1; }
    sudo="sudo"
  fi
  echo "install-deps: installing ${need_pkgs[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${need_pkgs[@]}"
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "install-deps: cargo is missing: install a Rust toolchain >= 1.95 (rustup) first" >&2
  exit 1
fi
rustc_minor=$(rustc --version | sed -E 's/^rustc 1\.([0-9]+).*/\1/')
if [ "${rustc_minor:-0}" -lt 95 ]; then
  echo "install-deps: rustc $(rustc --version) is too old: leasehold needs 1.95 or newer" >&2
  exit 1
fi
