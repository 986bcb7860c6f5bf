"""``torchrun ... -m labs.ddp`` and ``python -m labs.ddp``: the labs' command line does the rest."""

import sys

from labs.__main__ import main

sys.exit(main(["ddp", *sys.argv[1:]]))
