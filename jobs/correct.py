"""Late-data correction entry point for spark-submit:
``spark-submit jobs/correct.py --pipeline toll_traffic``.

Takes the arguments of ``lakehouse correct``; settings come from LAKEHOUSE_* environment variables.
"""

import sys

from lakehouse.cli import entry

if __name__ == "__main__":
    entry(["correct", *sys.argv[1:]])
