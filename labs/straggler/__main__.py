"""``torchrun ... -m labs.straggler`` and ``python -m labs.straggler``: the labs' command line does the rest."""

import sys

from labs.__main__ import main

sys.exit(main(["straggler", *sys.argv[1:]]))
