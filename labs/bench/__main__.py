"""``torchrun ... -m labs.bench`` and ``python -m labs.bench``: the labs' command line does the rest."""

import sys

from labs.__main__ import main

sys.exit(main(["bench", *sys.argv[1:]]))
