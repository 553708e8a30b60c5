#!/usr/bin/env bash
# Builds the Docker images the tests use, locally (no registry is reachable from CI):
#   debian:bookworm-slim  — a minbase Debian bookworm made with debootstrap from Debian's mirror,
#                           plus python3 and procps, tagged with the name of kilntainers' default image
#                           so the default configuration works without a pull.
# Usage: scripts/docker-test-image.sh [image-tag]   (needs root, docker and debootstrap)
set -euo pipefail
tag="${1:-debian:bookworm-slim}"
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "docker-test-image: $tag already present"
  exit 0
fi
mirror="${KILNTAINERS_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
root="$(mktemp -d /tmp/kt-rootfs.XXXXXX)"
trap 'rm -rf "$root"' EXIT
echo "docker-test-image: debootstrap bookworm into $root from $mirror"
debootstrap --variant=minbase --include=python3-minimal,procps,less bookworm "$root" "$mirror" >/tmp/kt-debootstrap.log 2>&1 || {
  tail -30 /tmp/kt-debootstrap.log
  exit 1
}
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import -c 'CMD ["/bin/bash"]' - "$tag" >/dev/null
echo "docker-test-image: built $tag ($(docker image inspect -f '{{.Size}}' "$tag") bytes)"
