"""Shared test setup: every test session gets its own database and secrets.

Tests run on CPU, gloo and SQLite. GPU tests are opt-in (``-m gpu``).
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
from pathlib import Path

import pytest

_TMP = Path(tempfile.mkdtemp(prefix="dpa-tests-"))
os.environ["DATABASE_URL"] = f"sqlite:///{_TMP / 'session.db'}"
os.environ["SECRETS_DIR"] = str(_TMP / "secrets")
os.environ.setdefault("PUBLIC_URL", "http://localhost:8501")
# Issuing a certificate asks PUBLIC_URL whether it answers as this academy
# (certificates.addresscheck); in-process tests issue with no app there. The
# session's `server` turns the check on again, and tests of the check set it.
os.environ.setdefault("PUBLIC_URL_CHECK", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")
# A lab run whose ranks all go this long without progress counts as hung. The
# default (20 s) is the product's; on two cores shared with a second xdist
# worker, a browser and other jobs, a 4-rank sharding run went 20 s without a
# step and failed as hung. Tests that are about hangs name their own bound.
os.environ.setdefault("LAB_HANG_TIMEOUT_S", "120")

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"


# Under ``pytest -n 3 --dist loadgroup`` (pyproject.toml) the tests of one
# group run on one worker, one after another: "server-<module>" holds a module's
# tests on the Streamlit server and Chromium (each worker starts its own server
# on first use, so the browser tests, 12 of the suite's 23 minutes when they all
# ran on one worker, spread over the workers); "procs" the tests that find processes by
# their command line, which another worker's processes could answer; and the
# tests of a module that share a module-scoped fixture get the module's name,
# so that one worker builds it (a recording, a module's lab worker).
SERVER_FIXTURES = {"server", "browser"}

# "slow" (the fast lane is ``pytest -m "not slow"``): a test that starts a server,
# a browser, a lab worker, PostgreSQL, Redis or the sandbox (``needs_sandbox``), and every test of the modules
# below, which start lab ranks, workers or CLIs in nearly every test. Modules
# that mix both mark their own (a real grading, a sandbox start).
SLOW_FIXTURES = SERVER_FIXTURES | {"lab_worker", "shared_lab_worker", "stack", "postgres_url", "redis_url"}
SLOW_MODULES = {"test_lab_worker", "test_lab_multinode", "test_lab_scale", "test_labs_launch",
                "test_labs_cli", "test_labs_combos", "test_labs_ddp", "test_labs_bench", "test_faults",
                "test_exercises_page_queue", "test_cert_cli"}
# Modules whose module-scoped fixture runs a lab on real ranks or grades in the sandbox once
# for the module (a recording the page tests then draw): the tests that use it are slow too.
RECORDING_MODULES = {"test_labs_readouts", "test_labs_params", "test_labs_sharding", "test_sharding_page",
                     "test_labs_timeline_page", "test_exercise_timeline_page"}


# These modules read the command lines of the processes under their workers
# (tests/labstack.py) and wait on heartbeats of a few seconds: "procs" as well.
PROCS_MODULES = {"test_lab_worker", "test_lab_multinode", "test_lab_scale"}


def _module_fixture(item) -> bool:
    """Whether the test uses a module-scoped fixture (a recording, a worker, a benchmark run)."""
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    return any(d and d[-1].scope == "module" for name, d in defs.items() if name in item.fixturenames)


@functools.cache
def sandbox_unavailable() -> str | None:
    """Why the exercise sandbox (bubblewrap) cannot start here, or None (asked once per process)."""
    from labs.sandbox import run as sandbox

    try:
        sandbox.check_available("bwrap")
    except sandbox.SandboxUnavailable as exc:
        return exc.reason
    return None


@pytest.hookimpl(tryfirst=True)  # before the test's fixtures start anything in the sandbox
def pytest_runtest_setup(item):
    """``@pytest.mark.needs_sandbox``: a test that starts the exercise sandbox (a grading, a
    red-team probe). Skipped with the reason where bubblewrap cannot start, except as root:
    there ``make test`` installs it first, so a sandbox that does not start is a failure."""
    if item.get_closest_marker("needs_sandbox") and os.geteuid() != 0 and (why := sandbox_unavailable()):
        pytest.skip(f"no sandbox here: {why}")
    _patch_apptest()


_APPTEST_PATCHED = False


def _patch_apptest():
    """Two costs Streamlit's AppTest pays per test that its real server pays once.

    Each new AppTest scans every installed distribution for component manifests
    (0.35-0.45 s), and each run of one builds a new script cache, so the main
    script and the page are read, rewritten for "magic" and compiled again on
    every run: a quarter of the page tests' CPU (py-spy). Neither the installed
    packages nor the app's files change during a session, so the scan runs once
    per process and every run shares one script cache, as the server's runs do.
    """
    global _APPTEST_PATCHED
    if _APPTEST_PATCHED or "streamlit.testing.v1" not in sys.modules:
        return
    from streamlit.components.v2 import manifest_scanner
    from streamlit.runtime.scriptrunner.script_cache import ScriptCache
    from streamlit.testing.v1 import app_test, local_script_runner

    manifest_scanner.scan_component_manifests = functools.cache(manifest_scanner.scan_component_manifests)
    shared = ScriptCache()
    app_test.ScriptCache = local_script_runner.ScriptCache = lambda: shared
    _APPTEST_PATCHED = True


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items):
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        module = item.module.__name__.rsplit(".", 1)[-1]
        grouped = item.get_closest_marker("xdist_group") is not None  # xdist would join two names
        if not grouped and SERVER_FIXTURES & fixtures:  # a module's order is kept (one server's state)
            item.add_marker(pytest.mark.xdist_group(f"server-{module}"))
        elif not grouped and module in PROCS_MODULES:
            item.add_marker(pytest.mark.xdist_group("procs"))
        elif not grouped and _module_fixture(item):  # one worker builds it, not each
            item.add_marker(pytest.mark.xdist_group(module))
        if (SLOW_FIXTURES & fixtures or item.get_closest_marker("browser") or item.get_closest_marker("postgres")
                or item.get_closest_marker("needs_sandbox") or module in SLOW_MODULES
                or (module in RECORDING_MODULES and _module_fixture(item))):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def migrated_template(tmp_path_factory) -> Path:
    """A SQLite file migrated to the newest revision once per session (per xdist worker):
    the tests' databases are copies of it instead of eight migrations each."""
    from academy.db import make_engine, migrate

    path = tmp_path_factory.mktemp("template") / "migrated.db"
    eng = make_engine(f"sqlite:///{path}")
    migrate(eng)
    with eng.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    eng.dispose()
    return path


def copy_of(template: Path, path: Path) -> str:
    """A copy of the migrated ``template`` at ``path`` (owner only, as make_engine makes it); its URL."""
    import shutil

    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, path)
    path.chmod(0o600)
    return f"sqlite:///{path}"


@pytest.fixture
def engine(migrated_template):
    """A migrated in-memory SQLite engine shared by all sessions of one test.

    The schema comes from the session's migrated template through SQLite's
    backup API (milliseconds); the migrations themselves are tested on their
    own engines (tests/test_storage.py, tests/migrations.py).
    """
    import sqlite3
    from contextlib import closing

    from sqlalchemy.pool import StaticPool

    from academy.db import make_engine

    eng = make_engine("sqlite://", poolclass=StaticPool)
    raw = eng.raw_connection()
    try:
        with closing(sqlite3.connect(migrated_template)) as template:
            template.backup(raw.driver_connection)
    finally:
        raw.close()
    yield eng
    eng.dispose()


@pytest.fixture
def session(engine):
    from sqlmodel import Session

    with Session(engine, expire_on_commit=False) as s:
        yield s


def use_database(monkeypatch, **env: str):
    """Point the app's process-wide engine (and settings) at ``env``; undo afterwards."""
    from academy import db
    from academy.settings import get_settings

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    db.set_engine(None)
    yield db.get_engine()
    db.get_engine().dispose()
    db.set_engine(None)
    monkeypatch.undo()
    get_settings.cache_clear()


@pytest.fixture
def secrets(tmp_path, monkeypatch):
    """A fresh secrets folder (the issuer keys) for one test; settings re-read around it."""
    from academy.settings import get_settings

    monkeypatch.setenv("SECRETS_DIR", str(tmp_path / "secrets"))
    get_settings.cache_clear()
    yield tmp_path / "secrets"
    get_settings.cache_clear()


@pytest.fixture
def app_db(tmp_path, monkeypatch, migrated_template):
    """Point the app's process-wide engine at a fresh file database (a copy of the migrated template)."""
    yield from use_database(monkeypatch, DATABASE_URL=copy_of(migrated_template, tmp_path / "app.db"))


@pytest.fixture
def lab_worker(request, tmp_path):
    """A ``python -m academy.worker`` on the test's database: the labs a test submits run there."""
    from tests.labstack import Worker

    request.getfixturevalue("app_db")  # first: the worker inherits its DATABASE_URL
    worker = Worker(tmp_path, {}, "--concurrency", "1")  # the test's environment, app_db's database
    worker.wait_ready()
    yield worker
    worker.stop()


@pytest.fixture(scope="module")
def module_lab_worker(tmp_path_factory, migrated_template):
    """One ``python -m academy.worker`` for all the tests of a module, on a database of the
    module's own (a copy of the template): (worker, database URL). Started with the session's
    environment, so for tests that set none the worker must see, and that keep to their own
    runs and learners. No warm grader unless that environment asks for one
    (`tests.labstack.NO_WARM_GRADER`); ready once its warm lab process is, if it starts one
    (the first run forks from it rather than importing PyTorch beside it)."""
    from tests.labstack import Worker

    base = tmp_path_factory.mktemp("lab-worker")
    url = copy_of(migrated_template, base / "app.db")
    worker = Worker(base, {"DATABASE_URL": url}, "--concurrency", "1")
    worker.wait_ready()
    worker.wait_warm()
    yield worker, url
    worker.stop()


@pytest.fixture
def shared_lab_worker(module_lab_worker, monkeypatch):
    """``lab_worker`` started once per module: the app's engine on the module worker's database."""
    worker, url = module_lab_worker
    database = use_database(monkeypatch, DATABASE_URL=url)
    next(database)
    yield worker
    next(database, None)


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


def _start_temp_postgres(base: Path) -> tuple[str, callable] | None:
    """Start a throw-away PostgreSQL cluster from Debian's binaries, if installed."""
    import glob
    import shutil
    import socket
    import subprocess

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        return None
    bindir = Path(found[-1]).parent
    data = base / "pgdata"
    run_as: list[str] = []
    if os.geteuid() == 0:  # postgres refuses to run as root: use its own user
        if shutil.which("runuser") is None:
            return None
        run_as = ["runuser", "-u", "postgres", "--"]
        base.mkdir(parents=True, exist_ok=True)
        shutil.chown(base, "postgres")
        os.chmod(base, 0o755)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    subprocess.run([*run_as, str(bindir / "initdb"), "-D", str(data), "-U", "dpa", "-A", "trust"],
                   check=True, capture_output=True)
    # A throw-away cluster: nothing in it has to outlive a crash, so no fsync, no waiting
    # for the WAL at each commit (a worker's heartbeats commit twice a second per run),
    # and no shutdown checkpoint (seconds at the end of a session on a busy disk).
    durability = "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    subprocess.run([*run_as, str(bindir / "pg_ctl"), "-D", str(data), "-w", "-l", str(base / "log"),
                    "-o", f"-p {port} -k {base} -c listen_addresses=127.0.0.1 {durability}", "start"],
                   check=True, capture_output=True)

    def stop() -> None:
        subprocess.run([*run_as, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True)

    return f"postgresql+psycopg://dpa@127.0.0.1:{port}/postgres", stop


@pytest.fixture(scope="session")
def postgres_url():
    """TEST_POSTGRES_URL, or a temporary local cluster; skip when neither is possible."""
    url = os.environ.get("TEST_POSTGRES_URL")
    if url:
        yield url
        return
    base = Path(tempfile.mkdtemp(prefix="dpa-pg-"))
    try:
        started = _start_temp_postgres(base)
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"could not start a local PostgreSQL: {exc}")
    if started is None:
        pytest.skip("no PostgreSQL server: set TEST_POSTGRES_URL or install Debian's postgresql")
    url, stop = started
    yield url
    stop()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def file_engine(request, tmp_path):
    """A migrated database that real concurrent connections share: a SQLite file in WAL
    mode, and PostgreSQL where ``postgres_url`` can reach or start one (the races of the
    quiz store and of the review queue run on both)."""
    from academy.db import make_engine, migrate

    if request.param == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_path / 'racing.db'}")
    else:
        engine = make_engine(request.getfixturevalue("postgres_url"))
    migrate(engine)  # the production schema, its unique constraints included
    if request.param == "sqlite":
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    yield engine
    engine.dispose()


def race(*jobs):
    """Run the jobs in threads released at the same moment; their results or errors."""
    import threading

    barrier = threading.Barrier(len(jobs))
    results: list = [None] * len(jobs)

    def run(i, job):
        barrier.wait()
        try:
            results[i] = job()
        except Exception as exc:  # noqa: BLE001 (the test inspects it)
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, job)) for i, job in enumerate(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """The real app under ``streamlit run`` on a free port with a temporary database.

    As ``make run PORT=<port>`` runs it: without PUBLIC_URL, so that every link its
    certificates sign comes from the port it serves on (``server.public_url``), and with
    the check that this address answers before a certificate is issued.
    """
    import shutil

    from benchmarks.appserver import AppServer

    if shutil.which("chromium") is None:
        pytest.skip("no system Chromium (Debian package 'chromium')")
    srv = AppServer(tmp_path_factory.mktemp("server"), env={"PUBLIC_URL": "", "PUBLIC_URL_CHECK": "true"})
    try:
        srv.start()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield srv
    srv.stop()


@pytest.fixture
def on_server_db(server, monkeypatch):
    """This process uses the real server's database and secrets (issuer keys shared), and
    names the server's public address (which this process cannot derive: it serves nothing)."""
    yield from use_database(monkeypatch, PUBLIC_URL=server.public_url,
                            **{k: server.env[k] for k in ("DATABASE_URL", "SECRETS_DIR")})


@pytest.fixture(scope="module")
def browser():
    """The system Chromium driven by Playwright (``playwright install`` is not needed).

    One per module, not per session: Playwright's driver leaves a thread in
    this process while it runs, and `labs.launch.run_lab` forks its ranks only
    from a single-threaded process. Under a session-wide browser every lab run
    a worker made after its first browser test spawned its ranks instead, each
    importing PyTorch afresh (about 100 s of CPU over the suite). Starting
    Chromium costs about 1.4 s of CPU per module.
    """
    import shutil

    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("no system Chromium (Debian package 'chromium')")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(
            executable_path=chromium,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage"],
        )
        yield b
        b.close()
