"""Batch-layer entry point for spark-submit:
``spark-submit jobs/backfill.py --pipeline toll_traffic --start 2026-01-05T08:00Z --end 2026-01-05T09:00Z``.

Takes the arguments of ``lakehouse backfill``; settings come from LAKEHOUSE_* environment variables.
"""

import sys

from lakehouse.cli import entry

if __name__ == "__main__":
    entry(["backfill", *sys.argv[1:]])
