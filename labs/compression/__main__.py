"""``torchrun ... -m labs.compression`` and ``python -m labs.compression``: the labs' command line does the rest."""

import sys

from labs.__main__ import main

sys.exit(main(["compression", *sys.argv[1:]]))
