"""``torchrun ... -m labs.topology`` and ``python -m labs.topology``: the labs' command line does the rest."""

import sys

from labs.__main__ import main

sys.exit(main(["topology", *sys.argv[1:]]))
