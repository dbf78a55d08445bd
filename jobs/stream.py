"""Speed-layer entry point for spark-submit: ``spark-submit jobs/stream.py --pipeline toll_traffic``.

Takes the arguments of ``lakehouse stream``; settings come from LAKEHOUSE_* environment variables.
"""

import sys

from lakehouse.cli import entry

if __name__ == "__main__":
    entry(["stream", *sys.argv[1:]])
