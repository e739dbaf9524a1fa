#!/usr/bin/env bash
# Installs what `make bench` needs beyond scripts/install-deps.sh on a Debian machine: etcd's
# server and CLI, the reference handoff-bench compares leasehold's handoff and failover against
# (`etcdctl lock --ttl`; Debian bookworm ships 3.4.23). Idempotent: it only calls apt-get when
# `etcd` or `etcdctl` is missing from PATH.
set -euo pipefail

if command -v etcd >/dev/null 2>&1 && command -v etcdctl >/dev/null 2>&1; then
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "install-bench-deps: need root or sudo to install: etcd-server etcd-client" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-bench-deps: installing etcd-server etcd-client"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends etcd-server etcd-client
