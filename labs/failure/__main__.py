"""``torchrun ... -m labs.failure`` and ``python -m labs.failure``: the labs' command line does the rest."""

import sys

from labs.__main__ import main

sys.exit(main(["failure", *sys.argv[1:]]))
