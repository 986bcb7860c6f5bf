"""What every section shares: the run's parameters, a sandbox, small timing helpers."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path

from labs.exercises import EXERCISES

KiB, MiB = 1 << 10, 1 << 20
PAGES = ("home", "lessons", "labs", "quiz", "certificate", "verify", "account")


@dataclass(frozen=True)
class Config:
    """How much each section measures. The defaults are the full run."""

    quick: bool = False
    smoke: bool = False  # every part once at its smallest size, for the tests; not a measurement
    # Collectives: the sweep runs from min_bytes (small sizes pin down the
    # alpha-beta fit's latency) to max_bytes; the table shows report_from up.
    world_sizes: tuple[int, ...] = (2, 4)
    min_bytes: int = 1 * KiB
    max_bytes: int = 64 * MiB
    factor: int = 4
    report_from: int = 1 * MiB
    warmup: int = 2
    iters: int = 5
    sweeps: int = 3  # each figure: the median over this many sweeps
    tcp_bytes: int = 256 * MiB
    tcp_repeats: int = 5
    # Labs.
    lab_repeats: int = 3
    queue_workers: tuple[int, ...] = (1, 2, 3)  # a queue row for each number of workers
    queue_labs: int = 6  # labs submitted at once per worker count (the queue rows)
    ddp_world_sizes: tuple[int, ...] = (1, 2, 4)
    ddp_steps: int | None = None  # None: labs.ddp's own default
    timeline_runs: int = 5  # runs of labs.ddp's timeline section: the overlap's median and spread
    sharding_world_size: int = 4
    sharding_steps: int = 3
    compression_steps: int | None = None  # None: labs.compression's own default (150 steps, 3 seeds)
    compression_seeds: int | None = None
    # The topology lab on 2 namespaces x 2 ranks at its default 200 Mbit/s link.
    topology_sizes: tuple[int, ...] = (256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB)
    topology_repeats: int = 5
    straggler_runs: int = 3  # runs of labs.straggler per mechanism: the model's error, median and range
    straggler_seeds: int = 3
    straggler_steps: int = 24
    straggler_factor: int = 3
    sandbox_repeats: int = 10  # runs per mode of the sandbox overhead (p50, p95)
    # Exercises: submissions of each reference solution through the queue, and
    # gradings per sandbox mode without it (p50, p95), for the exercises named.
    exercise_repeats: int = 5
    exercise_queue: tuple[str, ...] = EXERCISES  # submitted through the queue (Run to report)
    exercise_direct: tuple[str, ...] = EXERCISES
    # Platform.
    quiz_attempts: int = 30
    pdfs: int = 10
    certificates: int = 100_000
    lookups: int = 5_000
    pages: tuple[str, ...] = PAGES
    page_repeats: int = 3
    load_learners: int = 20
    load_browsers: int = 2
    load_seconds: float = 30.0
    classroom_sessions: tuple[int, ...] = (1, 10, 30)  # concurrent websocket sessions
    classroom_seconds: float = 15.0
    arrivals: int = 30  # a class signing up, then in, all at once (threads, Argon2 in turn)
    # The concurrent-learner and classroom parts; smoke mode leaves them to the
    # tests that drive the real server (tests/test_load.py, tests/test_benchmarks.py).
    under_load: bool = True

    @classmethod
    def quick_mode(cls) -> Config:
        return cls(quick=True, min_bytes=16 * KiB, max_bytes=8 * MiB, factor=8, warmup=1,
                   iters=3, sweeps=1, tcp_bytes=64 * MiB, tcp_repeats=3, lab_repeats=1, queue_labs=3,
                   ddp_steps=5, timeline_runs=3, sharding_world_size=2, sharding_steps=2, sandbox_repeats=3,
                   compression_steps=100, compression_seeds=2, topology_sizes=(1 * MiB, 4 * MiB), topology_repeats=3,
                   straggler_runs=1, straggler_steps=12,
                   exercise_repeats=2, exercise_direct=("ring-allreduce",), quiz_attempts=5, pdfs=2, certificates=10_000, lookups=1_000,
                   pages=("home", "quiz", "verify"), page_repeats=1,
                   load_learners=4, load_browsers=0, load_seconds=5.0,
                   classroom_sessions=(1, 5), classroom_seconds=3.0)

    @classmethod
    def smoke_mode(cls) -> Config:
        """Each part once, at its smallest size, without the load and classroom parts: that the
        code runs and reports every figure (tests/test_benchmarks.py), in a minute or two."""
        return cls(smoke=True, world_sizes=(2,), min_bytes=256 * KiB, max_bytes=1 * MiB,
                   factor=4, warmup=1, iters=1, sweeps=1, tcp_bytes=16 * MiB, tcp_repeats=1,
                   lab_repeats=1, queue_workers=(1,), queue_labs=1, ddp_world_sizes=(1, 2),
                   ddp_steps=2, timeline_runs=1, sharding_world_size=2, sharding_steps=1,
                   compression_steps=10, compression_seeds=1, straggler_runs=1, straggler_seeds=1, straggler_steps=4,
                   topology_sizes=(256 * KiB,), topology_repeats=1, sandbox_repeats=1, exercise_repeats=1,
                   exercise_queue=("ring-allreduce", "save-and-resume"),  # the second restarts its ranks
                   exercise_direct=("ring-allreduce",), quiz_attempts=1, pdfs=1, certificates=1_000,
                   lookups=100, pages=("home",), page_repeats=1, load_learners=0, load_browsers=0,
                   load_seconds=0.0, classroom_sessions=(), classroom_seconds=0.0, under_load=False)

    @property
    def mode(self) -> str:
        return "smoke" if self.smoke else "quick" if self.quick else "full"

    def shrunk(self) -> list[str]:
        """What this run measures less of than the full one: "name value (full value)"."""
        full = Config()
        return [f"{f.name} {_show(getattr(self, f.name))} ({_show(getattr(full, f.name))})"
                for f in fields(self)
                if f.name not in ("quick", "smoke") and getattr(self, f.name) != getattr(full, f.name)]


def _show(value: object) -> str:
    if value is None:
        return "lab default"
    if isinstance(value, tuple):
        return "/".join(str(v) for v in value)
    if isinstance(value, int) and value >= MiB and value % MiB == 0:
        return f"{value // MiB} MiB"
    if isinstance(value, int) and value >= KiB and value % KiB == 0:
        return f"{value // KiB} KiB"
    if isinstance(value, int) and value >= 10_000:
        return f"{value:,}"
    return str(value)


def sandbox() -> Path:
    """Point the app at a throw-away database and secrets folder.

    Called before any app module reads its settings, so a benchmark never
    touches ``data/academy.db`` or the real issuer keys.
    """
    base = Path(tempfile.mkdtemp(prefix="dpa-bench-"))
    os.environ["DATABASE_URL"] = f"sqlite:///{base / 'app.db'}"
    os.environ["SECRETS_DIR"] = str(base / "secrets")
    os.environ.setdefault("PUBLIC_URL", "http://localhost:8501")
    # The benchmarks issue certificates in this process with no app answering at PUBLIC_URL:
    # they measure signing and storage, not the address (certificates.addresscheck).
    os.environ.setdefault("PUBLIC_URL_CHECK", "false")
    return base


def use_database(url: str) -> None:
    """Make ``url`` the app's process-wide database (AppTest runs the app in-process)."""
    from academy import db
    from academy.settings import get_settings

    os.environ["DATABASE_URL"] = url
    get_settings.cache_clear()
    db.set_engine(None)


@contextmanager
def scratch_stack(folder: Path, **environ: str) -> Iterator[None]:
    """A fresh embedded stack in ``folder`` (SQLite database, and the lab queue beside it),
    migrated, with ``environ`` set, for the body; the settings and database before it afterwards.

    Workers started in the body inherit the environment, so they see the same
    stack and the same settings.
    """
    from academy.db import get_engine
    from academy.settings import get_settings

    folder.mkdir(parents=True, exist_ok=True)
    keys = ("DATABASE_URL", *environ)
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update(environ)
    use_database(f"sqlite:///{folder / 'app.db'}")
    try:
        get_engine()  # migrated before any worker opens it
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if saved["DATABASE_URL"]:
            use_database(saved["DATABASE_URL"])
        else:
            from academy import db

            db.set_engine(None)
        get_settings.cache_clear()


def unavailable(exc: BaseException) -> str:
    """The reason a figure is missing, as it appears in the table and JSON."""
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
    return f"not available: {text[:200]}"


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def p95(values: list[float]) -> float:
    """The 95th percentile, interpolated between the two largest of a few values (one: itself)."""
    return statistics.quantiles(values, n=20, method="inclusive")[18] if len(values) > 1 \
        else values[0]


def median_time(fn: Callable[[], object], repeats: int) -> float:
    return statistics.median(timed(fn) for _ in range(max(1, repeats)))
