"""The real app under ``streamlit run`` on a free local port, for the load run and the tests.

One place that starts it, waits for its health check and stops its whole
process group; it can be killed and started again on the same port,
database and secrets (the server-restart fault test). Like ``make run`` it
starts one lab worker (``python -m academy.worker``) beside the app, on the same
database and queue (for the app itself, unless ``worker=False``); killing the
app leaves the worker running, as on separate machines.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class AppServer:
    """``base`` holds the database, secrets and ``server.log``; ``env`` adds to the defaults.

    ``PUBLIC_URL`` is the server's own address unless ``env`` says otherwise; ``env={"PUBLIC_URL":
    ""}`` leaves it unset, so that the app derives it from the port it serves on
    (``certificates.address``), as ``make run PORT=...`` does. :attr:`public_url` is then the
    address the app's certificates carry either way.
    """

    def __init__(self, base: Path, *, port: int | None = None, env: dict[str, str] | None = None,
                 script: Path | None = None, worker: bool | None = None):
        self.base = base
        self.script = script or ROOT / "app" / "main.py"  # another script: the empty-page yardstick
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "DATABASE_URL": f"sqlite:///{base / 'app.db'}",
                    "SECRETS_DIR": str(base / "secrets"), "PUBLIC_URL": self.url, **(env or {})}
        self.log = base / "server.log"
        self.proc: subprocess.Popen | None = None
        self.want_worker = script is None if worker is None else worker  # not for a yardstick page
        self.worker: subprocess.Popen | None = None

    @property
    def public_url(self) -> str:
        """The address the app's certificates carry: ``PUBLIC_URL``, or what Streamlit derives
        from ``--server.address 127.0.0.1`` and the port, which is :attr:`url`."""
        return self.env.get("PUBLIC_URL", "").rstrip("/") or self.url

    def start(self, timeout: float = 60) -> None:
        """Start and wait until ``/_stcore/health`` answers; RuntimeError with the log's tail if not."""
        if self.want_worker and (self.worker is None or self.worker.poll() is not None):
            with open(self.base / "worker.log", "a") as log:
                self.worker = subprocess.Popen(
                    [sys.executable, "-m", "academy.worker"], cwd=ROOT, env=self.env, stdout=log,
                    stderr=subprocess.STDOUT, start_new_session=True,
                )
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streamlit", "run", str(self.script),
                 "--server.port", str(self.port), "--server.address", "127.0.0.1",
                 "--server.headless", "true", "--browser.gatherUsageStats", "false",
                 "--server.fileWatcherType", "none"],
                cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2):
                    return
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError("the app did not start: " + self.log.read_text()[-2000:])

    def kill(self) -> None:
        """As a crash or an OOM kill would: no chance to clean up."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        """Stop the app, then the worker (which records any lab still going as stopped)."""
        for proc in (self.proc, self.worker):
            if proc is None or proc.poll() is not None:
                continue
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
