#!/usr/bin/env bash
# Builds, locally and with no registry, the Debian images the tests and CI use, on Docker or Podman:
#   kilntainers-test:bookworm  the tests' own image (test/support/Docker.ts TEST_IMAGE): a minbase
#                              Debian bookworm made with debootstrap from Debian's mirror, plus what
#                              the tests run (python3-minimal, procps, less). CI also builds the
#                              computer image (images/computer) on it: `kilntainers image build
#                              --base kilntainers-test:bookworm`.
#   debian:bookworm-slim       a stand-in for the registry's image, made only when no image has that
#                              name: the same minbase Debian WITHOUT the extras, as bare as the real
#                              one, so the server's default configuration works here without a pull
#                              while any test that borrowed the default image would fail. (--no-standin
#                              skips it.)
# Both carry the label kilntainers-image.recipe=<hash of this script and the mirror>; the test image is
# rebuilt when its label differs (its recipe changed), never merely because the tag exists. The root
# filesystems are kept as tarballs in a cache directory, under the same hash, so a second engine
# imports them without a second debootstrap.
#
# Usage: scripts/docker-test-image.sh [--engine docker|podman] [--no-standin]
#        (root, debootstrap; env KILNTAINERS_DEBIAN_MIRROR, KILNTAINERS_IMAGE_CACHE)
set -euo pipefail
log() { printf 'docker-test-image: %s\n' "$*" >&2; }

engine=docker
standin=yes
while [ $# -gt 0 ]; do
  case "$1" in
    --engine) engine="${2:?--engine needs docker or podman}"; shift 2 ;;
    --engine=*) engine="${1#--engine=}"; shift ;;
    --no-standin) standin=no; shift ;;
    *) log "unknown argument $1 (usage: $0 [--engine docker|podman] [--no-standin])"; exit 2 ;;
  esac
done
case "$engine" in docker|podman) ;; *) log "--engine must be docker or podman, not $engine"; exit 2 ;; esac
command -v "$engine" >/dev/null || { log "no $engine command here"; exit 1; }

TEST_TAG="kilntainers-test:bookworm"
# Podman stores a short name under localhost/; the stand-in gets the name the registry's image has,
# so that `debian:bookworm-slim` finds it on either engine.
STANDIN_TAG="debian:bookworm-slim"
[ "$engine" = podman ] && STANDIN_TAG="docker.io/library/debian:bookworm-slim"
TEST_PACKAGES="python3-minimal procps less"

mirror="${KILNTAINERS_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
cache="${KILNTAINERS_IMAGE_CACHE:-/var/cache/kilntainers}"
recipe="$( { cat "${BASH_SOURCE[0]}"; echo "$mirror"; } | sha256sum | cut -c1-16)"
base_tar="$cache/bookworm-$recipe-base.tar"
test_tar="$cache/bookworm-$recipe-test.tar"

label_of() { "$engine" image inspect -f '{{index .Config.Labels "kilntainers-image.recipe"}}' "$1" 2>/dev/null || true; }
present() { "$engine" image inspect "$1" >/dev/null 2>&1; }

need_test=yes
[ "$(label_of "$TEST_TAG")" = "$recipe" ] && need_test=no
need_standin=no
[ "$standin" = yes ] && ! present "$STANDIN_TAG" && need_standin=yes
if [ "$need_test" = no ] && [ "$need_standin" = no ]; then
  log "$TEST_TAG is up to date on $engine (recipe $recipe)"
  exit 0
fi

# The root filesystems, made once per recipe: debootstrap's minbase, then the tests' packages
# installed into the same tree with apt inside a chroot.
if [ ! -s "$base_tar" ] || [ ! -s "$test_tar" ]; then
  command -v debootstrap >/dev/null || { log "debootstrap is not installed (apt-get install debootstrap)"; exit 1; }
  mkdir -p "$cache"
  root="$(mktemp -d /tmp/kt-rootfs.XXXXXX)"
  trap 'rm -rf "$root"' EXIT
  log "debootstrap bookworm (minbase) into $root from $mirror"
  debootstrap --variant=minbase bookworm "$root" "$mirror" >/tmp/kt-debootstrap.log 2>&1 || {
    tail -30 /tmp/kt-debootstrap.log >&2
    exit 1
  }
  clean() { rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin "$root"/var/lib/apt/lists/* "$root"/var/log/apt/* "$root"/tmp/*; }
  clean
  tar -C "$root" -cf "$base_tar.part" . && mv "$base_tar.part" "$base_tar"
  log "installing $TEST_PACKAGES into the same tree"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
    sh -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends $TEST_PACKAGES" >/tmp/kt-chroot-apt.log 2>&1 || {
    tail -30 /tmp/kt-chroot-apt.log >&2
    exit 1
  }
  : >"$root/etc/resolv.conf"
  clean
  tar -C "$root" -cf "$test_tar.part" . && mv "$test_tar.part" "$test_tar"
  # Older recipes' tarballs are of no further use.
  find "$cache" -maxdepth 1 -name 'bookworm-*.tar' ! -name "bookworm-$recipe-*" -delete
fi

import() { # tarball tag labels...
  local tarball="$1" tag="$2"
  shift 2
  local changes=(-c 'CMD ["/bin/bash"]')
  for label in "$@"; do changes+=(-c "LABEL ${label%%=*}=\"${label#*=}\""); done
  local old
  old="$("$engine" image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true)"
  local quiet=()
  [ "$engine" = podman ] && quiet=(--quiet)
  "$engine" import "${quiet[@]}" "${changes[@]}" - "$tag" <"$tarball" >/dev/null
  # The image this tag named before, unless a container still uses it.
  [ -n "$old" ] && [ "$old" != "$("$engine" image inspect -f '{{.Id}}' "$tag")" ] && "$engine" image rm "$old" >/dev/null 2>&1 || true
  log "$engine: $tag ($("$engine" image inspect -f '{{.Size}}' "$tag") bytes)"
}
# Only the recipe's hash: images built on these inherit their labels, and set their own hash.
[ "$need_test" = yes ] && import "$test_tar" "$TEST_TAG" "kilntainers-image.recipe=$recipe"
[ "$need_standin" = yes ] && import "$base_tar" "$STANDIN_TAG" "kilntainers-image.recipe=$recipe"
exit 0
