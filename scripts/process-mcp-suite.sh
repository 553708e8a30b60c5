#!/usr/bin/env bash
# Runs process-mcp's own test suite (test/host.test.ts of anonx3247/process-mcp) against the
# kilntainers CLI with nothing changed but the server command. Their file is never copied into
# this repository: it is read from a local clone or mirror into a temp dir under this checkout
# (so that it resolves the MCP SDK from our node_modules), compiled with esbuild and run with
# node --test.
#
#   scripts/process-mcp-suite.sh [--backend host|docker|podman] [REPO] [REV]
#     --backend  where the server's computers run (default host, as their test's PROCESS_MODE
#                says): KILNTAINERS_BACKEND, read before PROCESS_MODE (and KILNTAINERS_ENGINE=podman)
#     REPO  a clone or bare git directory of anonx3247/process-mcp (default: $PROCESS_MCP_REPO)
#     REV   the revision (default HEAD)
# Needs: npm run build (and what the host backend needs: bubblewrap).
# Our documented supersets fail two of its twelve tests by design: we list more than its five
# tools, and stdin works on pipes too (its test expects "not_tty").
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
backend=host
if [ "${1:-}" = "--backend" ]; then backend="${2:-}"; shift 2 || true; fi
case "$backend" in
  host | docker) export KILNTAINERS_BACKEND="$backend" ;;
  podman) export KILNTAINERS_BACKEND=docker KILNTAINERS_ENGINE=podman ;;
  *) echo "--backend must be host, docker or podman (got '$backend')" >&2; exit 2 ;;
esac
repo="${1:-${PROCESS_MCP_REPO:-}}"
[ -n "$repo" ] || { echo "usage: $0 [--backend host|docker|podman] REPO [REV] (or set PROCESS_MCP_REPO)" >&2; exit 2; }
rev="${2:-HEAD}"
bin="${KILNTAINERS_BIN:-$root/dist/bin/kilntainers.mjs}"
[ -f "$bin" ] || { echo "$bin is missing: run npm run build" >&2; exit 2; }
work="$(mktemp -d "$root/.seed-process-mcp.XXXXXX")"
state="$(mktemp -d)"
trap 'rm -rf "$work" "$state"' EXIT
git -C "$repo" show "$rev:test/host.test.ts" >"$work/host.test.ts"
# The one change: the server command (theirs: node dist/index.js).
grep -q 'args: \["dist/index.js"\]' "$work/host.test.ts" || { echo "the server command was not found in their test" >&2; exit 2; }
sed -i "s#args: \[\"dist/index.js\"\]#args: [\"$bin\", \"--state-dir\", \"$state\"]#" "$work/host.test.ts"
"$root/node_modules/.bin/esbuild" "$work/host.test.ts" --format=esm --platform=node --outfile="$work/host.test.mjs" --log-level=warning
echo "== process-mcp $(git -C "$repo" rev-parse --short "$rev"): test/host.test.ts against $bin on the $backend backend"
set +e
(cd "$root" && node --test --test-reporter=spec "$work/host.test.mjs")
status=$?
set -e
exit $status
