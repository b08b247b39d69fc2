#!/usr/bin/env bash
# Builds a ZooKeeper image from Debian packages, with no container registry involved:
# debootstrap a slim bookworm root (OpenJDK 17 headless + libzookeeper-java), add the entrypoint, `docker import` it.
#
#   bash docker/zookeeper/build.sh [IMAGE]     # IMAGE defaults to $ZOOKEEPER_IMAGE, else zk-partitioner/zookeeper:3.8
#
# Idempotent: when the image already exists it prints so and exits 0. Needs root (debootstrap), Docker and access to
# a Debian mirror (DEBIAN_MIRROR, default: the first one in this machine's apt sources, else deb.debian.org).
# One build at a time per machine: it holds ${TMPDIR:-/tmp}/zk-partitioner-image.lock (flock), the lock the test kit
# (zk_partitioner_testing) takes while it pulls or builds an image, so concurrent runs wait and then find the image.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
image=${1:-${ZOOKEEPER_IMAGE:-zk-partitioner/zookeeper:3.8}}
suite=${DEBIAN_SUITE:-bookworm}

say() { printf '[zookeeper-image] %s\n' "$*" >&2; }

if ! docker info >/dev/null 2>&1; then
    say "error: no Docker engine answers (is dockerd running, and may this user use it?)"
    exit 1
fi
lock=${TMPDIR:-/tmp}/zk-partitioner-image.lock
if [ -z "${ZK_PARTITIONER_IMAGE_LOCK_HELD:-}" ] && command -v flock >/dev/null 2>&1; then
    exec 9>>"$lock"
    if ! flock -n 9; then
        say "another process is getting a ZooKeeper image (it holds $lock); waiting for it"
        flock 9
    fi
fi
if docker image inspect "$image" >/dev/null 2>&1; then
    say "image $image already exists; nothing to build"
    exit 0
fi

if ! command -v debootstrap >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then say "error: debootstrap is missing and this is not root"; exit 1; fi
    say "installing debootstrap"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi

mirror=${DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
    mirror=$(grep -hoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list.d/*.sources \
        /etc/apt/sources.list 2>/dev/null | head -n1 | awk '{print $2}' || true)
    mirror=${mirror:-http://deb.debian.org/debian}
fi

work=$(mktemp -d /tmp/zk-image.XXXXXX)
trap 'rm -rf "$work"' EXIT
root="$work/root"
start=$(date +%s)

say "debootstrap $suite from $mirror into $root (openjdk-17-jre-headless, libzookeeper-java)"
debootstrap --variant=minbase --include=openjdk-17-jre-headless,libzookeeper-java \
    "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 || {
    say "error: debootstrap failed; last lines of its log:"
    tail -n 20 "$work/debootstrap.log" >&2
    exit 1
}
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
install -m 0755 "$here/entrypoint.sh" "$root/docker-entrypoint.sh"
mkdir -p "$root/conf" "$root/data" "$root/datalog"

say "importing the root filesystem as $image"
tar -C "$root" -c . | docker import \
    -c 'ENTRYPOINT ["/docker-entrypoint.sh"]' \
    -c 'EXPOSE 2181 2888 3888' \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    -c 'WORKDIR /' \
    -m "zk-partitioner: ZooKeeper from Debian $suite packages" \
    - "$image" >/dev/null

say "built $image in $(( $(date +%s) - start )) s ($(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%d MB", $1/1000000}'))"
