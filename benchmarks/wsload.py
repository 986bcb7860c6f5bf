"""Page time under a classroom: many sessions speaking Streamlit's own websocket protocol.

    .venv/bin/python -m benchmarks.wsload --sessions 1 10 30 --seconds 20

A browser would eat the CPU being measured, so each simulated learner is a
thread with a websocket to ``/_stcore/stream`` that does what the Streamlit
front end does: it connects (subprotocol ``streamlit``), sends a ``rerun_script``
BackMsg with the page, the query string and the browser's context, and reads
ForwardMsgs until ``script_finished``. That round trip is one page time; the
bytes of the ForwardMsgs are what the page sent. Every learner opens a new
session (a first visit), then moves through the pages in that session (what a
click in the sidebar costs), until the time is up.

Beside the app it measures an empty Streamlit page in the same run, so the
figures separate Streamlit's own cost from ours. The server's CPU time per page
run comes from its process's CPU clock before and after the run, divided by
the pages served. Timings are reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from academy.content import languages
from benchmarks.appserver import AppServer

PAGES = ("", "lessons", "labs", "quiz", "certificate", "verify", "account")
EMPTY_APP = "import streamlit as st\n\nst.write('empty')\n"


@dataclass
class Sample:
    """One page run as a client saw it."""

    page: str
    first: bool  # the first run of a new session (connect included)
    seconds: float
    nbytes: int
    ok: bool


@dataclass
class Result:
    samples: list[Sample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    server_cpu_s: float = 0.0
    wall_s: float = 0.0


class PageClient:
    """One browser tab, as the Streamlit front end drives it (protobuf over a websocket)."""

    def __init__(self, base_url: str, *, lang: str = "en", timeout: float = 60.0):
        from websockets.sync.client import connect

        ws_url = base_url.replace("http://", "ws://") + "/_stcore/stream"
        self.base_url = base_url
        self.lang = lang
        self.timeout = timeout
        self._conn = connect(ws_url, subprotocols=["streamlit"], origin=base_url,
                             open_timeout=timeout, max_size=None)

    def __enter__(self) -> PageClient:
        self.ws = self._conn.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._conn.__exit__(*exc)

    def run_page(self, page: str, query: str = "") -> tuple[float, int, bool]:
        """Ask for one script run of ``page``; (seconds, bytes received, finished cleanly)."""
        from streamlit.proto.BackMsg_pb2 import BackMsg
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        msg = BackMsg()
        state = msg.rerun_script
        state.query_string = query or f"lang={self.lang}"
        state.page_name = page
        info = state.context_info
        info.timezone, info.timezone_offset = "UTC", 0
        info.locale = {"en": "en-GB", "zh": "zh-CN", "nl": "nl-NL"}[self.lang]
        info.url = f"{self.base_url}/{page}"
        t0 = time.perf_counter()
        self.ws.send(msg.SerializeToString())
        nbytes, ok, failed = 0, False, False
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            data = self.ws.recv(timeout=max(0.1, deadline - time.monotonic()))
            nbytes += len(data)
            fwd = ForwardMsg()
            fwd.ParseFromString(data)
            kind = fwd.WhichOneof("type")
            if kind == "delta" and fwd.delta.new_element.WhichOneof("type") == "exception":
                failed = True  # the page shows an error box; the run itself still "finishes"
            if kind == "script_finished":
                ok = fwd.script_finished == ForwardMsg.FINISHED_SUCCESSFULLY
                if fwd.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                    break
        return time.perf_counter() - t0, nbytes, ok and not failed


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its threads, from /proc (clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _learner(server: AppServer, idx: int, stop_at: float, pages: tuple[str, ...], res: Result,
             lock: threading.Lock) -> None:
    lang = languages()[idx % len(languages())]
    while time.monotonic() < stop_at:
        t0 = time.perf_counter()  # a first visit: the connection counts
        try:
            with PageClient(server.url, lang=lang) as client:
                _visit(client, idx, stop_at, pages, t0, res, lock)
        except Exception as exc:  # noqa: BLE001 - a refused or broken connection is a result
            with lock:
                res.errors.append(f"{type(exc).__name__}: {exc}")


def _visit(client: PageClient, idx: int, stop_at: float, pages: tuple[str, ...], t0: float,
           res: Result, lock: threading.Lock) -> None:
    """One session: every page once, starting at a different page per learner. The first
    page's time runs from ``t0``, before the connection opened."""
    order = pages[idx % len(pages):] + pages[:idx % len(pages)]
    for n, page in enumerate(order):
        if time.monotonic() >= stop_at:
            break
        secs, nbytes, ok = client.run_page(page)
        if n == 0:
            secs = time.perf_counter() - t0
        with lock:
            res.samples.append(Sample(page or "home", n == 0, secs, nbytes, ok))
            if not ok:
                res.errors.append(f"{page or 'home'}: the run did not finish cleanly")


def drive(server: AppServer, *, sessions: int, seconds: float,
          pages: tuple[str, ...] = PAGES) -> Result:
    """``sessions`` concurrent learners for ``seconds``; the server's CPU is read around it."""
    res, lock = Result(), threading.Lock()
    cpu0, t0 = _cpu_seconds(server.proc.pid), time.perf_counter()
    stop_at = time.monotonic() + seconds
    threads = [threading.Thread(target=_learner, args=(server, i, stop_at, pages, res, lock), daemon=True)
               for i in range(sessions)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=seconds + 120)
    res.wall_s = time.perf_counter() - t0
    res.server_cpu_s = _cpu_seconds(server.proc.pid) - cpu0
    return res


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def summarise(res: Result) -> dict:
    times = [s.seconds for s in res.samples if s.ok]
    per_page: dict[str, dict] = {}
    for page in sorted({s.page for s in res.samples}):
        served = [s for s in res.samples if s.page == page and s.ok]
        # A page reached by navigation, not the first visit (which includes the connection),
        # unless this page was only ever a first visit.
        mine = [s for s in served if not s.first] or served
        if mine:
            per_page[page] = {"p50_ms": 1000 * statistics.median(s.seconds for s in mine),
                              "kib": statistics.median(s.nbytes for s in mine) / 1024}
    n = len(res.samples)
    return {
        "pages": n,
        "errors": len(res.errors),
        "first_errors": res.errors[:3],
        "p50_s": _pct(times, 0.5),
        "p95_s": _pct(times, 0.95),
        "throughput_per_s": n / res.wall_s if res.wall_s else 0.0,
        "server_cpu_ms_per_page": 1000 * res.server_cpu_s / n if n else float("nan"),
        "per_page": per_page,
    }


def measure(levels: list[int], seconds: float, *, empty: bool = False) -> dict:
    """Start a fresh server (the app, or an empty page) and drive it at each level."""
    with tempfile.TemporaryDirectory(prefix="wsload-") as tmp:
        base = Path(tmp)
        script = None
        if empty:
            script = base / "empty.py"
            script.write_text(EMPTY_APP)
        server = AppServer(base, script=script)
        server.start()
        try:
            with PageClient(server.url) as client:  # warm imports and the database once
                for page in ("",) if empty else PAGES:
                    client.run_page(page)
            pages = ("",) if empty else PAGES
            return {str(level): summarise(drive(server, sessions=level, seconds=seconds, pages=pages))
                    for level in levels}
        finally:
            server.stop()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, nargs="+", default=[1, 10, 30])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    out = {"empty": measure(args.sessions, args.seconds, empty=True),
           "app": measure(args.sessions, args.seconds)}
    for name, levels in out.items():
        for level, s in levels.items():
            print(f"{name:5} {level:>3} sessions: {s['pages']:5} pages, p50 {s['p50_s']:.3f} s, "
                  f"p95 {s['p95_s']:.3f} s, {s['throughput_per_s']:.1f} pages/s, "
                  f"server CPU {s['server_cpu_ms_per_page']:.1f} ms/page, errors {s['errors']} "
                  f"{s['first_errors']}")
            for page, p in s["per_page"].items():
                print(f"        {page:12} p50 {p['p50_ms']:7.1f} ms  {p['kib']:7.1f} KiB")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
