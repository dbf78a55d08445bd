"""Late-data correction entry point for spark-submit:
``spark-submit jobs/correct.py --pipeline toll_traffic``.

Takes the arguments of ``lakehouse correct``; settings come from LAKEHOUSE_* environment variables.
"""

import sys

from lakehouse.cli import main

if __name__ == "__main__":
    sys.exit(main(["correct", *sys.argv[1:]]))
