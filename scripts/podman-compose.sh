#!/usr/bin/env bash
# Runs podman-compose with the arguments given, in the current directory, as `docker compose`
# would run: `scripts/podman-compose.sh up -d` beside examples/compose/compose.yaml. The compose
# test (tests/tests/deployment/compose.rs) runs the example through it.
#
# Installs what it needs on first use, idempotently:
# - podman with runc and mmdebstrap (scripts/install-deps.sh --containers);
# - podman-compose from PyPI, pinned below, in a virtual environment under target/tools/
#   (Debian bookworm's own package, 1.0.3, neither removes the project's network on `down` nor
#   honours stop_grace_period); rebuilt from scratch when the pins change;
# - with podman's CNI network backend, the dnsname plugin (Debian's
#   golang-github-containernetworking-plugin-dnsname), without which a container cannot find
#   another by its service name. The netavark backend has DNS of its own (aardvark-dns).
#
# CONTAINERS_CONF defaults to scripts/containers.conf (see its comments).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
pins="podman-compose==1.6.0 python-dotenv==1.2.4 PyYAML==6.0.3"
venv="$root/target/tools/podman-compose"

say() { echo "podman-compose.sh: $*" >&2; }
die() {
  say "$*"
  exit 1
}

# Installs Debian packages, as scripts/install-deps.sh does.
apt_install() {
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "need root or sudo to install: $*"
    sudo="sudo"
  fi
  say "installing $*"
  $sudo apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "$@" >&2
}

"$root/scripts/install-deps.sh" --containers >&2
CONTAINERS_CONF=$(realpath "${CONTAINERS_CONF:-$root/scripts/containers.conf}")
export CONTAINERS_CONF

# Where podman looks for CNI plugins.
have_dnsname() {
  local dir
  for dir in /usr/local/libexec/cni /usr/libexec/cni /usr/local/lib/cni /usr/lib/cni /opt/cni/bin; do
    [ -x "$dir/dnsname" ] && return 0
  done
  return 1
}
if [ "$(podman info --format '{{.Host.NetworkBackend}}')" = cni ] && ! have_dnsname; then
  apt_install golang-github-containernetworking-plugin-dnsname
fi

if [ "$(cat "$venv/.pins" 2>/dev/null)" != "$pins" ]; then
  command -v python3 >/dev/null 2>&1 || apt_install python3 python3-venv
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    # Debian's python3 makes virtual environments only with python3-venv.
    apt_install python3-venv
    rm -rf "$venv"
    python3 -m venv "$venv" >/dev/null || die "python3 cannot create a virtual environment"
  fi
  say "installing $pins into ${venv#"$root"/}"
  # shellcheck disable=SC2086 # one argument per pin
  "$venv/bin/pip" install --quiet --disable-pip-version-check $pins >&2 ||
    die "pip could not install $pins (is PyPI reachable?)"
  printf '%s\n' "$pins" >"$venv/.pins"
fi

exec "$venv/bin/podman-compose" "$@"
