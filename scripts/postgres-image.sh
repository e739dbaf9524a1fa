#!/usr/bin/env bash
# Makes a PostgreSQL image from Debian's packages, without a registry:
#
#   scripts/postgres-image.sh TAG
#
# A stand-in for the official image (docker.io/library/postgres) on machines that cannot pull it:
# examples/compose/compose.yaml takes it through LEASEHOLD_POSTGRES_IMAGE=TAG, and the compose
# test (tests/tests/deployment/compose.rs) uses it. The root filesystem is Debian bookworm's
# minbase with the PostgreSQL server (15), made by mmdebstrap and imported with `podman import`;
# the entrypoint, scripts/postgres-entrypoint.sh, behaves like the official image's for what the
# compose file uses (POSTGRES_USER, POSTGRES_PASSWORD and POSTGRES_DB initialise an empty data
# directory, the server listens on 0.0.0.0:5432 as the user postgres, pg_isready is on PATH).
# About 30 s.
#
# Idempotent: nothing is done when TAG exists and was made from the same entrypoint and this
# script (a label records their hash); otherwise TAG is made again, and the image it named before
# is removed.
#
# CONTAINERS_CONF defaults to scripts/containers.conf (see its comments).
set -euo pipefail
tag=${1:?usage: scripts/postgres-image.sh TAG}
cd "$(dirname "$0")/.."
root=$PWD

scripts/install-deps.sh --containers
CONTAINERS_CONF=$(realpath "${CONTAINERS_CONF:-$root/scripts/containers.conf}")
export CONTAINERS_CONF

recipe=$(cat scripts/postgres-image.sh scripts/postgres-entrypoint.sh | sha256sum | cut -c1-16)
label=org.leasehold.postgres-image.recipe
if podman image exists "$tag" \
  && [ "$(podman image inspect --format "{{index .Labels \"$label\"}}" "$tag")" = "$recipe" ]; then
  echo "postgres-image: $tag is present"
  exit 0
fi

# The image the tag names now (made from an older recipe): removed once the tag moves to the new
# one, unless a container still uses it.
previous=$(podman image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)

echo "postgres-image: making $tag from Debian's packages (mmdebstrap, about 30 s)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp scripts/postgres-entrypoint.sh "$work/docker-entrypoint.sh"
# - postgresql-common makes a cluster "main" when the server package is installed; the
#   entrypoint makes its own in $PGDATA, so the essential hook turns that off.
# - Without manuals, locales and apt's lists (as the registry's slim images leave them out); /usr
#   merged by a hook instead of the usrmerge package, which would pull in more.
# - The server's programs (postgres, initdb, pg_isready, …) are linked into /usr/local/bin, so
#   they are on PATH as in the official image, whichever major version bookworm ships.
# - The data directory belongs to the image's user postgres (made in the chroot, so the name is
#   looked up there, not on this machine). /run is emptied in the tarball: the entrypoint makes
#   the socket directory at each start.
# - mmdebstrap's output is shown only when it fails.
# The hooks are single-quoted on purpose: mmdebstrap runs them with the root directory as $1.
# shellcheck disable=SC2016
mmdebstrap --quiet --mode=root --variant=minbase --include=postgresql \
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --essential-hook='mkdir -p "$1"/etc/postgresql-common/createcluster.d && echo "create_main_cluster = false" >"$1"/etc/postgresql-common/createcluster.d/no-main-cluster.conf' \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --customize-hook="install -m 0755 '$work/docker-entrypoint.sh' \"\$1\"/usr/local/bin/docker-entrypoint.sh" \
  --customize-hook='for f in "$1"/usr/lib/postgresql/*/bin/*; do ln -s "${f#"$1"}" "$1"/usr/local/bin/; done' \
  --customize-hook='chroot "$1" install -d -o postgres -g postgres -m 0700 /var/lib/postgresql/data' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/log/*.log' \
  bookworm "$work/rootfs.tar" >"$work/mmdebstrap.log" 2>&1 \
  || { cat "$work/mmdebstrap.log" >&2; echo "postgres-image: mmdebstrap failed" >&2; exit 1; }

# The official image's settings, where the compose file relies on them; the recipe label makes
# the next run skip the build.
podman import -q \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV PGDATA=/var/lib/postgresql/data' \
  --change 'VOLUME /var/lib/postgresql/data' \
  --change 'EXPOSE 5432' \
  --change 'STOPSIGNAL SIGINT' \
  --change 'ENTRYPOINT ["docker-entrypoint.sh"]' \
  --change 'CMD ["postgres"]' \
  --change "LABEL $label=$recipe" \
  --change 'LABEL org.opencontainers.image.description="PostgreSQL from Debian packages, a stand-in for the official image"' \
  "$work/rootfs.tar" "$tag" >/dev/null

current=$(podman image inspect --format '{{.Id}}' "$tag")
if [ -n "$previous" ] && [ "$previous" != "$current" ]; then
  podman rmi "$previous" >/dev/null 2>&1 || true
fi

size=$(podman image inspect --format '{{.Size}}' "$tag")
echo "postgres-image: $tag: $(( (size + 500000) / 1000000 )) MB"
