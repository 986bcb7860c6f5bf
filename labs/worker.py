"""``python -m labs.worker``: the lab worker under the name the labs package gives it.

The worker itself is ``academy.worker``: it claims runs and writes their
progress to the database, and ``labs`` must not import ``academy`` (that would
be an import cycle; tests/test_layers.py). So this module only hands the
process over to it with the same arguments (``exec``: same PID, same signals).

    python -m labs.worker --queues cpu --concurrency 2
"""

import os
import sys


def main() -> None:
    os.execv(sys.executable, [sys.executable, "-m", "academy.worker", *sys.argv[1:]])


if __name__ == "__main__":
    main()
