"""``torchrun ... -m labs.ring`` and ``python -m labs.ring``: the labs' command line does the rest."""

import sys

from labs.__main__ import main

sys.exit(main(["ring", *sys.argv[1:]]))
