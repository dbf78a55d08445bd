"""spark-submit entry point of ``lakehouse audit``: ``spark-submit jobs/audit.py --pipeline toll_traffic ...``.

Takes the arguments of ``lakehouse audit``; settings come from LAKEHOUSE_* environment variables.
"""

import sys

from lakehouse.cli import entry

if __name__ == "__main__":
    entry(["audit", *sys.argv[1:]])
