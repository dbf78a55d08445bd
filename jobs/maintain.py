"""spark-submit entry point of ``lakehouse maintain``: ``spark-submit jobs/maintain.py --pipeline toll_traffic ...``.

Takes the arguments of ``lakehouse maintain``; settings come from LAKEHOUSE_* environment variables.
"""

import sys

from lakehouse.cli import entry

if __name__ == "__main__":
    entry(["maintain", *sys.argv[1:]])
