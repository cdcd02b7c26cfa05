"""The filter worker process's entry point (``python -m xpushare.scheduler.filter_worker``).

Its own module, imported by nothing, so running it does not import the module that holds
the code a second time (scheduler/workers.py, which the scheduler itself imports).
"""

import sys

from xpushare.scheduler.workers import main

if __name__ == "__main__":
    sys.exit(main())
