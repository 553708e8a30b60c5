#!/usr/bin/env bash
# Builds, locally and with no registry, a Node.js image to build the server image (Dockerfile) on:
#   Debian bookworm   the image named by KILNTAINERS_DEBIAN_IMAGE (default debian:bookworm-slim: the one
#                     scripts/docker-test-image.sh makes with debootstrap, or Docker Hub's)
#   + Node.js and npm this machine's own, put where the official node images have them
#                     (/usr/local/bin/node, /usr/local/lib/node_modules/npm).
#   + this machine's extra CA certificates (NODE_EXTRA_CA_CERTS or npm's cafile), when it has any, so
#                     that npm inside builds reaches the registry as it does here (behind a proxy that
#                     inspects TLS, say).
# Node comes from this machine because Debian bookworm's nodejs is 18.x, below package.json's
# engines (>= 20.19); the Dockerfile's default base, Docker Hub's node:20-bookworm-slim, has the same
# layout. The image is rebuilt when this recipe, the Node binary or the Debian image changes (a label
# records their digest). Prints the image's tag on stdout.
# Usage: scripts/node-base-image.sh [tag]     (default kilntainers-ci/node:<version>-bookworm)
set -euo pipefail
log() { printf 'node-base-image: %s\n' "$*" >&2; }

from="${KILNTAINERS_DEBIAN_IMAGE:-debian:bookworm-slim}"
node_bin="$(readlink -f "$(command -v node)")"
version="$(node -p process.versions.node)"
node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 19) ? 0 : 1)' ||
  { log "Node.js $version is older than 20.19 (package.json engines)"; exit 1; }
npm_dir="$(npm root -g)/npm"
[ -f "$npm_dir/bin/npm-cli.js" ] || { log "npm is not at $npm_dir"; exit 1; }
tag="${1:-kilntainers-ci/node:${version}-bookworm}"

from_id="$(docker image inspect -f '{{.Id}}' "$from" 2>/dev/null)" ||
  { log "no image $from here: build it with scripts/docker-test-image.sh (or pull it)"; exit 1; }
ca="${NODE_EXTRA_CA_CERTS:-$(npm config get cafile 2>/dev/null || true)}"
[ -n "$ca" ] && [ "$ca" != "null" ] && [ -f "$ca" ] || ca=""
recipe="$( { sha256sum "${BASH_SOURCE[0]}" "$node_bin" ${ca:+"$ca"}; echo "$from_id"; cat "$npm_dir/package.json"; } | sha256sum | cut -c1-16)"
if [ "$(docker image inspect -f '{{index .Config.Labels "kilntainers.recipe"}}' "$tag" 2>/dev/null || true)" = "$recipe" ]; then
  log "$tag is up to date"
  echo "$tag"
  exit 0
fi

context="$(mktemp -d /tmp/kt-node-base.XXXXXX)"
trap 'rm -rf "$context"' EXIT
cp "$node_bin" "$context/node"
cp -r "$npm_dir" "$context/npm"
if [ -n "$ca" ]; then
  cp "$ca" "$context/extra-ca.crt"
  ca_lines='COPY extra-ca.crt /usr/local/share/kilntainers-ci/extra-ca.crt
ENV NODE_EXTRA_CA_CERTS=/usr/local/share/kilntainers-ci/extra-ca.crt'
else
  ca_lines=""
fi
cat > "$context/Dockerfile" <<EOF
FROM $from
COPY node /usr/local/bin/node
COPY npm /usr/local/lib/node_modules/npm
$ca_lines
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \\
 && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \\
 && node --version && npm --version
LABEL kilntainers.recipe="$recipe" kilntainers.node="$version" kilntainers.debian="$from"
CMD ["node"]
EOF
log "building $tag from $from and Node.js $version ($node_bin)${ca:+, with the CA certificates of $ca}"
docker build -q -t "$tag" "$context" >/dev/null
log "built $tag ($(docker image inspect -f '{{.Size}}' "$tag") bytes)"
echo "$tag"
