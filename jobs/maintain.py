"""spark-submit entry point of ``lakehouse maintain``: ``spark-submit jobs/maintain.py --pipeline toll_traffic ...``.

Takes the arguments of ``lakehouse maintain``; settings come from LAKEHOUSE_* environment variables.
"""

import sys

from lakehouse.cli import main

if __name__ == "__main__":
    sys.exit(main(["maintain", *sys.argv[1:]]))
