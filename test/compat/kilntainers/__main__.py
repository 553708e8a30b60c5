"""`python -m kilntainers ARGS` runs the kilntainers CLI with the same argv and stdio."""

import os
import sys

from kilntainers import command

argv = command(*sys.argv[1:])
os.execvp(argv[0], argv)
