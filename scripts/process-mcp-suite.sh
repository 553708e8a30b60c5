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
# tools, and stdin works on pipes too (its test expects "not_tty"). Exit status 0 when no other test
# fails, 1 otherwise (.ci/run runs this when it is given a clone).
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
(cd "$root" && node --test --test-reporter=spec --test-reporter-destination=stdout \
  --test-reporter=tap --test-reporter-destination="$work/report.tap" "$work/host.test.mjs")
set -e
# The failures, from the TAP report: a suite that failed only through its tests is not one of them.
python3 - "$work/report.tap" "$backend" <<'EOF'
import re, sys
documented = {
    "should list all 5 tools": "we have more tools than its five",
    "should reject stdin for non-TTY process": "stdin works on pipes too",
}
lines = open(sys.argv[1], encoding="utf-8").read().split("\n")
results = []
for i, line in enumerate(lines):
    m = re.match(r"^\s*(ok|not ok) \d+ - (.*?)(?: # (SKIP|TODO).*)?$", line)
    if m is None:
        continue
    block = "\n".join(lines[i + 1:i + 8])
    if "failureType: 'subtestsFailed'" in block or re.search(r"^\s*type: 'suite'", block, re.M):
        continue
    results.append((m.group(1) == "ok" and m.group(3) is None, m.group(2)))
failing = [name for ok, name in results if not ok]
unexplained = [name for name in failing if name not in documented]
print(f"process-mcp on {sys.argv[2]}: {len(results) - len(failing)} of {len(results)} passed")
for name in failing:
    print(f"  {name}: {'a documented superset (' + documented[name] + ')' if name in documented else 'FAILED, and is no documented superset'}")
sys.exit(1 if unexplained or not results else 0)
EOF
