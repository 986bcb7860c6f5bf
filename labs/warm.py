"""A warm lab process: PyTorch and every lab imported once, forking one child per run.

The worker (``academy.labruns.pool``) starts ``python -m labs.warm`` ahead of time
and writes one JSON line on its stdin per CPU lab run, ``{"argv": [...],
"out": path}``: the ``python -m labs ...`` command the run would have started
(``academy.labruns.kinds.command``) and the file its output goes to. For each line
this process forks a child that *is* that command: in a session of its own,
its stdout and stderr on ``out``, it runs ``labs.__main__.main`` on the same
arguments and environment, and its ranks fork from it with the imports done.
The child dies with this process (``PR_SET_PDEATHSIG``), and this process with
the worker. Each run is a fresh fork of the same untouched process, so nothing
one run did is seen by the next.

On its stdout this process answers each job line with ``{"pid": child}`` (or
``{"error": why}``), and says ``{"exit": child, "code": c}`` when a child ends
(``c`` as ``subprocess.Popen.returncode``: negative for a signal). It exits
when its stdin closes, and takes its running children with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import sys
import traceback

REAP_EVERY_S = 0.05  # how often a finished child is looked for while no job arrives


def _say(message: dict) -> None:
    os.write(1, (json.dumps(message) + "\n").encode())


def _exit_code(err: SystemExit) -> int:
    """The exit status the interpreter gives ``raise SystemExit(code)``."""
    if err.code is None:
        return 0
    if isinstance(err.code, int):
        return err.code
    print(err.code, file=sys.stderr)
    return 1


def _child(job: dict, parent: int, settled: int) -> None:
    """In the forked child: become the run's ``python -m labs`` command; never returns."""
    from labs import __main__ as cli
    from labs.processes import die_with_parent

    code = 1
    try:
        os.setsid()  # its own session and process group, as start_new_session gives a fresh one
        os.close(settled)
        die_with_parent(parent)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        out = os.open(job["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        os.close(null)
        argv = job["argv"]
        sys.argv = [argv[0], *argv[3:]]
        code = cli.main(argv[3:]) or 0
    except SystemExit as err:
        code = _exit_code(err)
    except BaseException:  # noqa: BLE001 - as the interpreter would: the traceback, then status 1
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # a closed stream: nothing more to say
                stream.flush()
        os._exit(code)


def _start(job: dict) -> None:
    argv = job.get("argv") or []
    if argv[1:3] != ["-m", "labs"] or not job.get("out"):
        _say({"error": f"labs.warm runs only `python -m labs`, not {argv[1:3]}"})
        return
    parent = os.getpid()
    started, settled = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(started)
        _child(job, parent, settled)
    os.close(settled)
    os.read(started, 1)  # EOF once the child has its own process group: the worker may signal it
    os.close(started)
    _say({"pid": pid})


def _reap() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _say({"exit": pid, "code": -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)})


def main() -> int:
    from labs import context

    for lab in context.LABS:  # every lab's rank code, PyTorch with it
        context.rank_code(lab)
    _say({"ready": os.getpid()})
    pending = b""
    while True:
        readable, _, _ = select.select([0], [], [], REAP_EVERY_S)
        _reap()
        if not readable:
            continue
        chunk = os.read(0, 1 << 16)
        if not chunk:  # the worker closed our stdin: done; our children die with us
            return 0
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            try:
                job = json.loads(line)
            except ValueError:
                _say({"error": "not a JSON line"})
                continue
            _start(job)


if __name__ == "__main__":
    sys.exit(main())
