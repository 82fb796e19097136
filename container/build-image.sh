#!/bin/sh
# `make image`: build the project image on a fresh machine, with one command.
#
#   container/build-image.sh [IMAGE]          (default tfopt:0.1.0)
#
# 1. installs podman and what it needs from Debian (apt-get, as root; skipped when present);
# 2. makes the base image available (container/base-image.sh: pulled, or built from Debian);
# 3. builds the Dockerfile with the host's extra CA certificates as the build secret extra_ca
#    (EXTRA_CA_CERTS, default /usr/local/share/ca-certificates/*.crt; trusted during the build
#    only; KEEP_EXTRA_CA=yes keeps them in the image's trust store).
# Podman reads container/containers.conf and container/storage.conf (container/env.sh).
set -eu
. "$(dirname -- "$0")/env.sh"
cd "$CONTAINER_DIR/.."

IMAGE=${1:-tfopt:0.1.0}
PACKAGES="podman buildah runc mmdebstrap uidmap containernetworking-plugins iptables catatonit"
AS_ROOT=$([ "$(id -u)" = 0 ] || echo sudo)

missing=""
for package in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" \
        || missing="$missing $package"
done
if [ -n "$missing" ]; then
    echo "image: installing$missing" >&2
    $AS_ROOT apt-get update -qq
    # shellcheck disable=SC2086 # one word per package
    $AS_ROOT env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends $missing >&2
fi

base=$(container/base-image.sh)

certs=$(mktemp)
trap 'rm -f "$certs"' EXIT
# shellcheck disable=SC2086 # a glob, by design
cat ${EXTRA_CA_CERTS:-/usr/local/share/ca-certificates/*.crt} > "$certs" 2>/dev/null || true

echo "image: building $IMAGE on $base" >&2
started=$(date +%s)
podman build --network host --pull=never \
    --build-arg "BASE_IMAGE=$base" --build-arg "KEEP_EXTRA_CA=${KEEP_EXTRA_CA:-no}" \
    --secret "id=extra_ca,src=$certs" --layers \
    --label "tfopt.sources=$("${PYTHON:-python3}" container/source_digest.py)" \
    --tag "$IMAGE" .
# The build stage's layers are kept (--layers), so a change of the sources rebuilds in a minute:
# `podman image prune` frees the space of earlier builds, and that cache with it.
size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
echo "image: $IMAGE built in $(( $(date +%s) - started )) s," \
     "$(( size / 1000000 )) MB (podman image inspect)" >&2
