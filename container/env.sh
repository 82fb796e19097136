# Sourced by the container/ scripts: Podman reads this project's settings instead of /etc's.
# shellcheck shell=sh
CONTAINER_DIR=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
export CONTAINERS_CONF="${CONTAINERS_CONF:-$CONTAINER_DIR/containers.conf}"
export CONTAINERS_STORAGE_CONF="${CONTAINERS_STORAGE_CONF:-$CONTAINER_DIR/storage.conf}"
