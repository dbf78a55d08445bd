"""Stale-hours entry point for spark-submit: ``spark-submit jobs/stale.py --pipeline P --fill``.

Takes the arguments of ``lakehouse stale``; settings come from LAKEHOUSE_* environment variables.
"""

import sys

from lakehouse.cli import entry

if __name__ == "__main__":
    entry(["stale", *sys.argv[1:]])
