#!/usr/bin/env bash
# Runs Kilntainers' own CLI and MCP tests (test_cli_integration.py, test_e2e_mcp.py) against the
# kilntainers CLI, through the stand-in package in test/compat (python -m kilntainers execs
# node dist/bin/kilntainers.mjs). Their files are never copied into this repository: they are read
# from a local clone or mirror of flujo-app/mcp-sandbox-computer-vm-for-ai into a temp dir.
#
#   scripts/seed-suites.sh [REPO] [REV...]
#     REPO  a clone or bare git directory (default: $KILNTAINERS_SEED_REPO)
#     REV   revisions to test (default: HEAD, the fork, and 79e26f5, the last upstream
#           Kiln-AI/Kilntainers commit in the fork's history)
# Needs: npm run build, python3 with pytest and pytest-asyncio (Debian: python3-pytest,
# python3-pytest-asyncio), a Docker engine for test_e2e_mcp.py (skipped without one).
# Environment: KILNTAINERS_BIN (another built CLI), PYTHON (default /usr/bin/python3).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
repo="${1:-${KILNTAINERS_SEED_REPO:-}}"
[ -n "$repo" ] || { echo "usage: $0 REPO [REV...] (or set KILNTAINERS_SEED_REPO)" >&2; exit 2; }
shift || true
revs=("$@")
[ ${#revs[@]} -gt 0 ] || revs=(HEAD 79e26f5)
python="${PYTHON:-/usr/bin/python3}"
"$python" -c "import pytest, pytest_asyncio" 2>/dev/null ||
  { echo "$python needs pytest and pytest-asyncio (apt-get install python3-pytest python3-pytest-asyncio)" >&2; exit 2; }
bin="${KILNTAINERS_BIN:-$root/dist/bin/kilntainers.mjs}"
[ -f "$bin" ] || { echo "$bin is missing: run npm run build" >&2; exit 2; }

export PYTHONDONTWRITEBYTECODE=1 # nothing written into test/compat
files=(src/kilntainers/test_cli_integration.py src/kilntainers/test_e2e_mcp.py)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
status=0
for rev in "${revs[@]}"; do
  dir="$work/$rev"
  mkdir -p "$dir"
  cp "$root/test/compat/pytest.ini" "$dir/"
  for file in "${files[@]}"; do git -C "$repo" show "$rev:$file" >"$dir/$(basename "$file")"; done
  echo "== $(git -C "$repo" rev-parse --short "$rev") ($rev)"
  set +e
  (cd "$dir" && PYTHONPATH="$root/test/compat" PATH="$root/test/compat/bin:$PATH" KILNTAINERS_BIN="$bin" \
    "$python" -m pytest -p no:cacheprovider -q -rfEs --junitxml="$dir/report.xml" ./*.py)
  set -e
  "$python" - "$dir/report.xml" "$rev" <<'EOF' || status=1
import sys, xml.etree.ElementTree as ET
suite = ET.parse(sys.argv[1]).getroot()
suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
total, failed, errors, skipped = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
passed = total - failed - errors - skipped
print(f"seed suites at {sys.argv[2]}: {passed} of {total} passed ({failed} failed, {errors} errors, {skipped} skipped)")
sys.exit(0 if passed == total else 1)
EOF
done
exit $status
