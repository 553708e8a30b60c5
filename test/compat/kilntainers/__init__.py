"""A stand-in for Kilntainers' Python package, so that Kilntainers' own CLI and MCP tests run
against the kilntainers CLI (`node dist/bin/kilntainers.mjs`) unchanged. See scripts/seed-suites.sh.

Only what those tests import exists here: `python -m kilntainers`, `kilntainers.cli.build_parser`
and `kilntainers.backends.test_docker_integration.get_docker_backend`. Every answer comes from
the real CLI; nothing is emulated in Python.
"""

import os

_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

#: The built CLI; KILNTAINERS_BIN points elsewhere (another build, another revision).
BIN = os.environ.get("KILNTAINERS_BIN", os.path.join(_ROOT, "dist", "bin", "kilntainers.mjs"))
NODE = os.environ.get("KILNTAINERS_NODE", "node")


def command(*args: str) -> list[str]:
    """The argv that runs the CLI with `args`."""
    return [NODE, BIN, *args]
