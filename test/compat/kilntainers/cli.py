"""`build_parser()` in the shape Kilntainers' tests use: `format_help()` is the CLI's `--help`
output, and `parse_args(argv)` is what the CLI resolves for `argv` (its `--print-config`),
as an argparse-style namespace. Errors exit like argparse: the CLI's stderr and exit code."""

import argparse
import json
import subprocess
import sys

from kilntainers import command

# argparse destinations that are not the flag name with dashes as underscores.
_DESTINATIONS = {"docker-run-flag": "docker_run_flags"}


class Parser:
    def format_help(self) -> str:
        result = subprocess.run(command("--help"), capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            raise RuntimeError(f"kilntainers --help failed: {result.stderr}")
        return result.stdout

    def print_help(self, file=None) -> None:
        (file or sys.stdout).write(self.format_help())

    def parse_args(self, args=None) -> argparse.Namespace:
        argv = sys.argv[1:] if args is None else list(args)
        result = subprocess.run(command("--print-config", *argv), capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            sys.stderr.write(result.stderr)
            raise SystemExit(result.returncode)
        config = json.loads(result.stdout)
        namespace = argparse.Namespace()
        for name, entry in config["flags"].items():
            setattr(namespace, _DESTINATIONS.get(name, name.replace("-", "_")), entry["value"])
        # The backend that would run: `auto` decided as the server decides it.
        namespace.backend = config["backend"]
        return namespace


def build_parser() -> Parser:
    return Parser()


def main() -> None:
    import os

    argv = command(*sys.argv[1:])
    os.execvp(argv[0], argv)
