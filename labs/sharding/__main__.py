"""``torchrun ... -m labs.sharding`` and ``python -m labs.sharding``: the labs' command line does the rest."""

import sys

from labs.__main__ import main

sys.exit(main(["sharding", *sys.argv[1:]]))
