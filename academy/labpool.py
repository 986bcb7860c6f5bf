"""The worker's warm lab processes: a CPU lab run starts without paying PyTorch's import.

Each warm process is ``python -m labs.warm`` (PyTorch and every lab imported,
waiting on its stdin for one run's command); ``take`` hands it a run's
``python -m labs ...`` command and returns it as the run's process, exactly as
``subprocess.Popen`` of that command would have been (its own session, dying
with the worker), and its ranks fork from it with the imports done. Each is
used once; the worker starts the next after the run (``refill``), not during
it, so a run's timings never share the CPU with an import. With none ready (the
pool empty, the warm process dead, or a run whose environment differs from the
one the pool was started with) ``take`` returns None and the run starts as a
fresh process. Size: the ``lab_warm_pool`` setting, fewer when memory is short.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("academy.labpool")
PROCESS_MB = 400  # a warm process's resident memory with PyTorch imported, rounded up


def _free_mb() -> int:
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        return int(info["MemAvailable"].split()[0]) // 1024
    except (OSError, KeyError, ValueError):
        return 0


class WarmPool:
    """Up to ``size`` warm lab processes started with ``env`` in ``cwd``."""

    def __init__(self, size: int, env: dict[str, str], cwd: Path,
                 preexec: Callable[[], None] | None = None) -> None:
        self.size, self.env, self.cwd, self.preexec = size, dict(env), cwd, preexec
        self.ready: list[subprocess.Popen] = []
        self.lock = threading.Lock()

    def refill(self) -> None:
        """Start warm processes until ``size`` are up (or memory for another is short)."""
        with self.lock:
            self.ready = [p for p in self.ready if p.poll() is None]
            while len(self.ready) < self.size and _free_mb() > 2 * PROCESS_MB:
                try:
                    self.ready.append(subprocess.Popen(
                        [sys.executable, "-m", "labs.warm"], cwd=self.cwd, env=self.env,
                        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                        start_new_session=True, preexec_fn=self.preexec))
                except OSError as err:
                    log.warning("no warm lab process: %s", err)
                    return

    def take(self, argv: list[str], env: dict[str, str], out: Path) -> subprocess.Popen | None:
        """A warm process running ``argv`` (a ``python -m labs`` command) with its output
        to ``out``; None when none is ready or the run's environment is not the pool's."""
        if argv[1:3] != ["-m", "labs"] or env != self.env:
            return None
        while True:
            with self.lock:
                if not self.ready:
                    return None
                proc = self.ready.pop(0)
            if proc.poll() is not None:  # died while it waited (killed, out of memory)
                continue
            try:
                proc.stdin.write(json.dumps({"argv": argv, "out": str(out)}).encode() + b"\n")
                proc.stdin.close()
            except OSError:  # died just now: the next one, or a fresh process
                proc.kill()
                proc.wait()
                continue
            return proc

    def close(self) -> None:
        """Stop the processes still waiting (their stdin closes: each exits)."""
        with self.lock:
            for proc in self.ready:
                proc.kill()
                proc.wait()
            self.ready = []


def lab_env(extra: dict[str, str] | None = None) -> dict[str, Any]:
    """The environment a lab's process runs in: the worker's, the labs' limits from
    Settings (they may have come from .env), one thread per rank."""
    from academy.settings import get_settings

    return {**os.environ, **get_settings().labs.environ(), "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1", **(extra or {})}
