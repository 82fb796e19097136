#!/bin/sh
# Make the Dockerfile's base image available locally, then print its name.
#
#   container/base-image.sh [IMAGE]        (default: the Dockerfile's BASE_IMAGE)
#
# Where the registry can be reached, that is `podman pull`. Where it cannot (no route to
# Docker Hub, as on our build VMs), a stand-in is built from Debian's archive: bookworm's minbase
# with Debian's python3.11 and venv, the same Debian release and Python minor version as the
# official python:3.11-slim-bookworm. It is imported under its own name, STANDIN, and that name
# is printed so the build uses it as BASE_IMAGE; the official name is never impersonated.
set -eu
. "$(dirname -- "$0")/env.sh"

OFFICIAL=${1:-$(sed -n 's/^ARG BASE_IMAGE=//p' "$CONTAINER_DIR/../Dockerfile")}
STANDIN=${STANDIN:-localhost/tfopt-base:bookworm-python3.11}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org}

if podman image exists "$OFFICIAL"; then echo "$OFFICIAL"; exit 0; fi
if timeout 60 podman pull --quiet "docker.io/library/$OFFICIAL" >/dev/null 2>&1; then
    echo "$OFFICIAL"; exit 0
fi
if podman image exists "$STANDIN"; then echo "$STANDIN"; exit 0; fi

echo "base-image: $OFFICIAL cannot be pulled; building $STANDIN from Debian bookworm" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# minbase: essential packages and apt only. Docs, man pages and apt lists are left out, as the
# official slim image leaves them out; `python` is the name the official image gives python3.
# The CA store is built once everything is unpacked (ca-certificates' own trigger leaves it
# empty in a minbase chroot), so TLS from the image works as from the official one.
mmdebstrap --quiet --variant=minbase \
    --include=python3.11,python3-venv,ca-certificates \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook='ln -sf python3 "$1/usr/bin/python"' \
    --customize-hook='chroot "$1" update-ca-certificates --fresh >/dev/null' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    bookworm "$work/rootfs.tar" \
    "deb $MIRROR/debian bookworm main" \
    "deb $MIRROR/debian bookworm-updates main" \
    "deb $MIRROR/debian-security bookworm-security main" >&2
podman import --quiet \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    "$work/rootfs.tar" "$STANDIN" >/dev/null
echo "$STANDIN"
