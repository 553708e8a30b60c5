"""`python -m kilntainers ARGS` runs the kilntainers CLI with the same argv and stdio.

scripts/seed-suites.sh --backend sets KILNTAINERS_SEED_BACKEND (and KILNTAINERS_SEED_ENGINE): the
servers the tests start get it as KILNTAINERS_BACKEND (KILNTAINERS_ENGINE), while build_parser()
still answers with the command line's own defaults, as argparse does."""

import os
import sys

from kilntainers import command

for seed, ours in (("KILNTAINERS_SEED_BACKEND", "KILNTAINERS_BACKEND"), ("KILNTAINERS_SEED_ENGINE", "KILNTAINERS_ENGINE")):
    if os.environ.get(seed):
        os.environ[ours] = os.environ[seed]

argv = command(*sys.argv[1:])
os.execvp(argv[0], argv)
