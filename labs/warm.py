"""A warm lab process: PyTorch and every lab imported, waiting for one run's command.

The worker (``academy.labpool``) starts ``python -m labs.warm`` ahead of time;
when a CPU lab run is claimed it writes one JSON line on this process's stdin,
``{"argv": [...], "out": path}``: the ``python -m labs ...`` command the run
would have started (``academy.labjob.command``) and the file its output goes to.
This process then is that command: it runs ``labs.__main__.main`` on the same
arguments, in the same environment, and its ranks fork from it with the imports
done. Used for one run, then it exits; the worker starts the next one.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> int:
    from labs import __main__ as cli
    from labs import context

    for lab in context.LABS:  # every lab's rank code, PyTorch with it
        context.rank_code(lab)
    line = sys.stdin.readline()
    if not line:  # the worker went away before giving us a run
        return 0
    job = json.loads(line)
    argv = job["argv"]
    if argv[1:3] != ["-m", "labs"]:
        raise SystemExit(f"labs.warm runs only `python -m labs`, not {argv[1:3]}")
    out = os.open(job["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    sys.argv = [argv[0], *argv[3:]]
    return cli.main(argv[3:])


if __name__ == "__main__":
    sys.exit(main())
