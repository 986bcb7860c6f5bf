"""Many learners at once: threads on the app's own code paths and real browsers
against the running app, then a check that the database holds every
acknowledged write exactly once.

    .venv/bin/python -m benchmarks.load --learners 30 --browsers 5 --seconds 20

Each learner thread signs up, signs in, opens a "stay signed in" session,
takes graded quiz attempts answered from the bank's key (some answers wrong,
one submitted twice as a double click would), finishes them and, once it has
passed, passes the coding exercises a certificate requires, claims its
certificate twice (the second claim must return the first) and looks it up;
then it starts over as a new learner until the time is up. The exercises are
passed as the lab worker records a passing report (a finished run and, in the
same transaction, ``academy.exercises.record_pass``), not graded: grading runs
in the sandbox on a worker and is measured in ``benchmarks.exercise_costs``.
Each browser context opens Home, creates an account on the Account page and
opens Verify with ``?id=`` of a certificate a thread was just given.

A write counts as acknowledged when the call returned; the check compares
the acknowledged writes with what the database holds. Timings are reported,
never asserted (tests/test_load.py asserts only the check).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from academy.content import languages
from benchmarks.appserver import AppServer

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "load test password"
BROWSER_TIMEOUT_MS = 90_000  # 2 cores shared by threads, the server and Chromium
ENV_KEYS = ("DATABASE_URL", "SECRETS_DIR", "PUBLIC_URL")


@dataclass
class Record:
    """What one worker saw: timings per operation and the writes acknowledged to it."""

    times: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    learners: dict[str, int] = field(default_factory=dict)  # e-mail -> learner id
    # attempt id -> {"learner_id", "answers": {position: correct}, "passed"}
    attempts: dict[int, dict[str, Any]] = field(default_factory=dict)
    certificates: dict[str, int] = field(default_factory=dict)  # certificate id -> learner id
    passes: dict[int, list[str]] = field(default_factory=dict)  # learner id -> exercises passed
    browser_sign_ups: list[str] = field(default_factory=list)  # e-mails
    browser_verifies: list[str] = field(default_factory=list)  # certificate ids seen valid
    errors: list[str] = field(default_factory=list)
    busy_retries: int = 0  # "busy, try again" answers to sign-up/sign-in, retried

    @contextmanager
    def timed(self, kind: str) -> Iterator[None]:
        t0 = time.perf_counter()
        yield
        self.times[kind].append(time.perf_counter() - t0)  # successful calls only


# ------------------------------------------------------------------ learners


def _patiently(rec: Record, call: Callable[[], Any], tries: int = 20) -> Any:
    """Call again after a "busy" answer, as a learner clicks again: the server caps
    Argon2 checks at once (review F-4), so a burst of sign-ins is told to retry. Each
    retry is counted, not an error; the call's time includes the waits."""
    from academy.accounts import AccountError

    for attempt in range(tries):
        try:
            return call()
        except AccountError as exc:
            if exc.key != "account.err_busy" or attempt == tries - 1:
                raise
            rec.busy_retries += 1
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def _pass_required_exercises(session, learner_id: int, lang: str) -> list[str]:
    """What the lab worker writes for a passing report of each exercise the certificate
    requires: a finished run of lab ``exercise`` and, in the same transaction, the pass
    (``academy.exercises.record_pass``, the worker's own function); commits. The ids."""
    from academy import exercises
    from academy.models import LabRun, utcnow

    done = list(exercises.required())
    for exercise in done:
        now = utcnow()
        run = LabRun(learner_id=learner_id, lab=exercises.LAB, params={"exercise": exercise, "lang": lang},
                     status="done", created_at=now, started_at=now, finished_at=now,
                     source="# graded elsewhere: benchmarks.load records the pass only\n",
                     result={"exercise": exercise, "status": "passed", "ok": True, "error": None, "cases": []})
        session.add(run)
        session.flush()
        exercises.record_pass(session=session, learner_id=learner_id, exercise=exercise, run_id=run.id)
    session.commit()
    return done


def _learner_cycle(rec: Record, *, run: str, n: int, cycle: int, rng: random.Random,
                   issued: list[str]) -> None:
    """One learner from sign-up to a looked-up certificate, through the app's functions."""
    from sqlmodel import Session

    import certificates as certs
    from academy import accounts
    from academy.db import get_engine
    from academy.settings import get_settings
    from benchmarks.quizkey import right_answer, wrong_answer
    from quizzes import store
    from quizzes.bank import load_bank
    from quizzes.engine import passed

    engine, bank = get_engine(), load_bank()

    def session() -> Session:
        return Session(engine, expire_on_commit=False)

    email, name, lang = f"{run}-{n}-{cycle}@load.example.org", f"Learner {n}.{cycle}", languages()[(n + cycle) % len(languages())]
    with rec.timed("sign_up"), session() as s:
        learner = _patiently(rec, lambda: accounts.sign_up(session=s, email=email, password=PASSWORD,
                                                            display_name=name, language=lang))
    rec.learners[email] = learner.id
    with rec.timed("sign_in"), session() as s:
        _patiently(rec, lambda: accounts.sign_in(session=s, email=email, password=PASSWORD))
    with rec.timed("session"), session() as s:
        token = accounts.open_session(session=s, learner_id=learner.id)
        back = accounts.learner_for_token(session=s, token=token)
    if back is None or back.id != learner.id:
        rec.errors.append(f"{email}: the session token did not lead back to the learner")

    # First attempt with 0-4 wrong answers (3 or 4 fail at 80 %), then all right.
    for wrong in (rng.randrange(5), 0):
        with rec.timed("start_attempt"), session() as s:
            attempt = store.start_attempt(session=s, learner_id=learner.id, lang=lang, bank=bank)
        if attempt.id in rec.attempts:
            rec.errors.append(f"{email}: start_attempt resumed finished attempt {attempt.id}")
            return
        mine = rec.attempts[attempt.id] = {"learner_id": learner.id, "answers": {}, "passed": None}
        wrong_at = set(rng.sample(range(len(attempt.plan)), wrong))
        double = rng.randrange(len(attempt.plan))
        for pos, item in enumerate(attempt.plan):
            good = pos not in wrong_at
            response = (right_answer if good else wrong_answer)(item, bank, lang)
            for submission in range(2 if pos == double else 1):
                with rec.timed("record_answer"), session() as s:
                    fb = store.record_answer(session=s, attempt_id=attempt.id, learner_id=learner.id,
                                             position=pos, response=response, lang=lang, bank=bank)
                if fb.duplicate != (submission == 1):
                    rec.errors.append(f"{email}: answer {attempt.id}/{pos} submission {submission} "
                                      f"came back with duplicate={fb.duplicate}")
                if fb.correct != good:
                    rec.errors.append(f"{email}: answer {attempt.id}/{pos} graded {fb.correct}, meant {good}")
            mine["answers"][pos] = fb.correct
        with rec.timed("finish_attempt"), session() as s:
            summary = store.finish_attempt(session=s, attempt_id=attempt.id, learner_id=learner.id)
        total = len(attempt.plan)
        expected = passed(total - wrong, total, get_settings().quiz_pass_percent)
        if summary.correct != total - wrong or summary.passed != expected:
            rec.errors.append(f"{email}: attempt {attempt.id} scored {summary.correct}/{total} "
                              f"passed={summary.passed}, expected {total - wrong} passed={expected}")
        mine["passed"] = summary.passed
        if summary.passed:
            break

    with rec.timed("pass_exercises"), session() as s:
        rec.passes[learner.id] = _pass_required_exercises(s, learner.id, lang)
    with rec.timed("issue_certificate"), session() as s:
        cert = certs.issue_for_learner(session=s, learner_id=learner.id, name=name, lang=lang)
    rec.certificates[cert.id] = learner.id
    states = certs.stated_exercises(cert)
    if get_settings().certificate_requires_exercises and states != rec.passes[learner.id]:
        rec.errors.append(f"{email}: certificate {cert.id} states exercises {states}, "
                          f"passed {rec.passes[learner.id]}")
    issued.append(cert.id)
    with rec.timed("issue_certificate"), session() as s:
        again = certs.issue_for_learner(session=s, learner_id=learner.id, name=name, lang=lang)
    if again.id != cert.id:
        rec.errors.append(f"{email}: a second claim made certificate {again.id} beside {cert.id}")
    with rec.timed("lookup"), session() as s:
        result = certs.lookup(session=s, text=cert.id)
    if result.status != "valid" or result.name != name:
        rec.errors.append(f"{email}: lookup of {cert.id} said {result.status} ({result.detail})")


def _learner_thread(rec: Record, *, run: str, n: int, deadline: float, issued: list[str],
                    start: threading.Barrier) -> None:
    start.wait()
    rng = random.Random(n)
    cycle = 0
    while True:
        try:
            _learner_cycle(rec, run=run, n=n, cycle=cycle, rng=rng, issued=issued)
        except Exception as exc:  # noqa: BLE001 - every failure is a finding, keep going
            rec.errors.append(f"learner {n}.{cycle}: {type(exc).__name__}: {exc}"[:500])
        cycle += 1
        if time.monotonic() >= deadline:
            return


# ------------------------------------------------------------------ browsers


async def _wait_app(page) -> None:
    await page.wait_for_selector('[data-testid="stApp"]', timeout=BROWSER_TIMEOUT_MS)
    await page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')",
                                 timeout=BROWSER_TIMEOUT_MS)


async def _no_exception(page, what: str) -> None:
    shown = page.locator('[data-testid="stException"]')
    if await shown.count():
        raise RuntimeError(f"{what} shows an exception: {(await shown.first.inner_text())[:300]}")


async def _browser_journey(browser, rec: Record, *, url: str, email: str,
                           cert_id: str) -> None:
    import certificates as certs
    from academy import i18n

    def t(key: str) -> str:
        return i18n.t(key, "en")

    ctx = await browser.new_context(locale="en-US", viewport={"width": 1300, "height": 900})
    try:
        page = await ctx.new_page()
        t0 = time.perf_counter()
        await page.goto(f"{url}/?lang=en")
        await _wait_app(page)
        await page.get_by_text(t("home.course_map")).wait_for(timeout=BROWSER_TIMEOUT_MS)
        await _no_exception(page, "Home")
        rec.times["browser_home"].append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        await page.goto(f"{url}/account?lang=en")
        await _wait_app(page)
        await page.get_by_role("tab", name=t("account.sign_up_tab")).click()
        form = page.get_by_test_id("stForm").filter(has_text=t("account.sign_up"))
        await form.get_by_role("textbox", name=t("account.display_name"), exact=True).fill(email.split("@")[0])
        await form.get_by_role("textbox", name=t("account.email"), exact=True).fill(email)
        await form.get_by_role("textbox", name=t("account.password"), exact=True).fill(PASSWORD)
        await form.get_by_role("button", name=t("account.sign_up")).click()
        await page.get_by_text(t("account.created")).wait_for(timeout=BROWSER_TIMEOUT_MS)
        await _no_exception(page, "Account")
        rec.browser_sign_ups.append(email)
        rec.times["browser_sign_up"].append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        await page.goto(f"{url}/verify?lang=en&id={cert_id}")
        await _wait_app(page)
        await page.get_by_text(certs.texts("en")["status"]["valid"]).wait_for(timeout=BROWSER_TIMEOUT_MS)
        await _no_exception(page, "Verify")
        rec.browser_verifies.append(cert_id)
        rec.times["browser_verify"].append(time.perf_counter() - t0)
    finally:
        await ctx.close()


async def _browsers(records: list[Record], *, url: str, run: str, deadline: float,
                    issued: list[str], start: threading.Barrier) -> None:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=shutil.which("chromium"),
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"],
        )
        await asyncio.to_thread(start.wait)

        async def worker(i: int, rec: Record) -> None:
            journey = 0
            while True:
                email = f"{run}-b{i}-{journey}@load.example.org"
                try:
                    await _browser_journey(browser, rec, url=url, email=email, cert_id=issued[-1])
                except Exception as exc:  # noqa: BLE001
                    rec.errors.append(f"browser {i}.{journey}: {type(exc).__name__}: {exc}"[:500])
                journey += 1
                if time.monotonic() >= deadline:
                    return

        await asyncio.gather(*(worker(i, rec) for i, rec in enumerate(records)))
        await browser.close()


# ------------------------------------------------------------------ the check


def check_database(records: list[Record], *, run: str) -> tuple[dict[str, int], list[str]]:
    """Compare the acknowledged writes with the database: every one there exactly once."""
    from sqlmodel import Session, col, select

    from academy.db import get_engine
    from academy.models import (
        Certificate,
        CertificateEvent,
        ExercisePass,
        LabRun,
        Learner,
        QuizAnswer,
        QuizAttempt,
    )

    learners = {e: i for r in records for e, i in r.learners.items()}
    browser_emails = [e for r in records for e in r.browser_sign_ups]
    attempts = {a: v for r in records for a, v in r.attempts.items()}
    certificates = {c: i for r in records for c, i in r.certificates.items()}
    passes = {(learner_id, ex) for r in records for learner_id, done in r.passes.items() for ex in done}
    problems: list[str] = []
    with Session(get_engine()) as s:
        rows = s.exec(select(Learner.email, Learner.id).where(col(Learner.email).like(f"{run}-%"))).all()
        stored = Counter(email for email, _ in rows)
        for email in [*learners, *browser_emails]:
            if stored[email] != 1:
                problems.append(f"learner {email} stored {stored[email]} times")
        for email in set(stored) - set(learners) - set(browser_emails):
            problems.append(f"learner {email} stored but never acknowledged")

        ids = list(learners.values())
        db_attempts = {a.id: a for a in s.exec(select(QuizAttempt).where(col(QuizAttempt.learner_id).in_(ids)))}
        for attempt_id in set(db_attempts) ^ set(attempts):
            where = "only in the database" if attempt_id in db_attempts else "acknowledged but missing"
            problems.append(f"attempt {attempt_id}: {where}")
        for attempt_id, acked in attempts.items():
            row = db_attempts.get(attempt_id)
            if row is not None and (row.status != "finished" or row.passed != acked["passed"]
                                    or row.learner_id != acked["learner_id"]):
                problems.append(f"attempt {attempt_id}: stored {row.status} passed={row.passed}, "
                                f"acknowledged passed={acked['passed']}")

        answers = s.exec(select(QuizAnswer).where(col(QuizAnswer.attempt_id).in_(list(attempts)))).all()
        per_question = Counter((a.attempt_id, a.position) for a in answers)
        for key, count in per_question.items():
            if count > 1:
                problems.append(f"answer {key[0]}/{key[1]} stored {count} times")
        stored_correct = {(a.attempt_id, a.position): a.correct for a in answers}
        acked_correct = {(a, p): c for a, v in attempts.items() for p, c in v["answers"].items()}
        for key in set(stored_correct) ^ set(acked_correct):
            where = "only in the database" if key in stored_correct else "acknowledged but missing"
            problems.append(f"answer {key[0]}/{key[1]}: {where}")
        for key, correct in acked_correct.items():
            if key in stored_correct and stored_correct[key] != correct:
                problems.append(f"answer {key[0]}/{key[1]}: stored correct={stored_correct[key]}")

        db_certs = {c.id: c.learner_id for c in s.exec(select(Certificate).where(col(Certificate.learner_id).in_(ids)))}
        for cert_id in set(db_certs) ^ set(certificates):
            where = "only in the database" if cert_id in db_certs else "acknowledged but missing"
            problems.append(f"certificate {cert_id}: {where}")
        issued_events = Counter(
            e.certificate_id for e in s.exec(
                select(CertificateEvent).where(col(CertificateEvent.certificate_id).in_(list(certificates)),
                                               CertificateEvent.action == "issued"))
        )
        for cert_id in certificates:
            if issued_events[cert_id] != 1:
                problems.append(f"certificate {cert_id}: {issued_events[cert_id]} 'issued' events")

        # Each pass once, and each tied to a finished run of its learner and exercise.
        stored_passes = s.exec(select(ExercisePass, LabRun).join(LabRun, ExercisePass.run_id == LabRun.id)
                               .where(col(ExercisePass.learner_id).in_(ids))).all()
        per_pass = Counter((p.learner_id, p.exercise) for p, _ in stored_passes)
        for key in set(per_pass) ^ passes:
            where = "only in the database" if key in per_pass else "acknowledged but missing"
            problems.append(f"exercise pass {key[1]} of learner {key[0]}: {where}")
        for (learner_id, exercise), count in per_pass.items():
            if count > 1:
                problems.append(f"exercise pass {exercise} of learner {learner_id} stored {count} times")
        for p, run in stored_passes:
            if (run.learner_id, run.status, (run.params or {}).get("exercise")) != (p.learner_id, "done", p.exercise):
                problems.append(f"exercise pass {p.exercise} of learner {p.learner_id}: its run {run.id} is "
                                f"{run.status} for learner {run.learner_id}")
    found = {"learners": len(rows), "attempts": len(db_attempts), "answers": len(answers),
             "certificates": len(db_certs), "exercise_passes": len(stored_passes)}
    return found, problems


# ------------------------------------------------------------------ running it


def _use_app_settings() -> None:
    """Make the process-wide settings and engine follow the environment again."""
    from academy import db
    from academy.settings import get_settings

    get_settings.cache_clear()
    db.set_engine(None)


def _percentile(values: list[float], q: int) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def run_load(*, learners: int, browsers: int, seconds: float, url: str | None = None) -> dict:
    """Run `learners` threads and `browsers` browser contexts for about `seconds`.

    With `url`, the browsers use that server and the threads the database and
    secrets this process is configured with, which must be the server's (the
    load test points both at one). Without it, a throw-away database, secrets
    folder and server are made for the run and removed afterwards.

    Returns throughput and latency per operation kind (``ops``: count,
    ops_per_s, p50_ms, p95_ms, max_ms), the acknowledged and stored counts,
    and ``errors`` (calls that failed) and ``problems`` (acknowledged writes
    missing, duplicated or unexpected in the database), both empty when all
    went well.
    """
    from academy.db import get_engine

    own = url is None
    saved = {k: os.environ.get(k) for k in ENV_KEYS}
    base = Path(tempfile.mkdtemp(prefix="dpa-load-")) if own else None
    server = None
    errors: list[str] = []
    try:
        if base is not None:
            app = AppServer(base)  # this process and the server share its database and secrets
            os.environ.update({k: app.env[k] for k in ("DATABASE_URL", "SECRETS_DIR", "PUBLIC_URL")})
            _use_app_settings()
            get_engine()  # migrate once, before the server and the threads race for it
            if browsers and shutil.which("chromium"):
                app.start()
                server, url = app, app.url
            elif browsers:
                errors.append("no browsers: no system Chromium (Debian package 'chromium')")
                browsers = 0
        with get_engine().connect() as conn:
            journal_mode = conn.exec_driver_sql("PRAGMA journal_mode").scalar() \
                if conn.dialect.name == "sqlite" else None

        run = f"load{secrets.token_hex(4)}"
        issued: list[str] = []
        seed = Record()  # a first certificate for the browsers to verify, before the clock starts
        _learner_cycle(seed, run=run, n=0, cycle=-1, rng=random.Random(-1), issued=issued)
        errors += seed.errors
        if not issued:
            raise RuntimeError("could not issue the first certificate: " + "; ".join(seed.errors))

        thread_records = [Record() for _ in range(learners)]
        browser_records = [Record() for _ in range(browsers)]
        start = threading.Barrier(learners + (1 if browsers else 0) + 1)
        t_start = time.monotonic() + 0.001
        deadline = t_start + seconds
        threads = [
            threading.Thread(target=_learner_thread, name=f"learner-{n}", daemon=True,
                             kwargs={"rec": rec, "run": run, "n": n, "deadline": deadline,
                                     "issued": issued, "start": start})
            for n, rec in enumerate(thread_records, 1)
        ]
        if browsers:
            threads.append(threading.Thread(
                target=lambda: asyncio.run(_browsers(browser_records, url=url, run=run, deadline=deadline,
                                                     issued=issued, start=start)),
                name="browsers", daemon=True))
        for th in threads:
            th.start()
        start.wait()
        t_start = time.monotonic()
        for th in threads:
            th.join()
        wall = time.monotonic() - t_start

        records = [seed, *thread_records, *browser_records]
        found, problems = check_database(records, run=run)
        for rec in records:
            errors += rec.errors
        if server is not None and base is not None:
            log = (base / "server.log").read_text(errors="replace")
            if "Traceback" in log:
                errors.append("server log: " + log[log.index("Traceback"):][:1000])
    finally:
        if server is not None:
            server.stop()
        if base is not None:
            get_engine().dispose()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            _use_app_settings()
            shutil.rmtree(base, ignore_errors=True)

    times: dict[str, list[float]] = defaultdict(list)
    for rec in [*thread_records, *browser_records]:
        for kind, values in rec.times.items():
            times[kind] += values
    ops = {
        kind: {"count": len(v), "ops_per_s": len(v) / wall, "p50_ms": statistics.median(v) * 1000,
               "p95_ms": _percentile(v, 95) * 1000, "max_ms": max(v) * 1000}
        for kind, v in sorted(times.items())
    }
    thread_ops = sum(o["count"] for k, o in ops.items() if not k.startswith("browser_"))
    return {
        "learners": learners,
        "browsers": browsers,
        "seconds": seconds,
        "wall_s": wall,
        "journal_mode": journal_mode,
        "ops": ops,
        "total_ops": sum(o["count"] for o in ops.values()),
        "ops_per_s": sum(o["count"] for o in ops.values()) / wall,
        "thread_ops_per_s": thread_ops / wall,
        "acknowledged": {
            "learners": sum(len(r.learners) for r in records),
            "attempts": sum(len(r.attempts) for r in records),
            "answers": sum(len(a["answers"]) for r in records for a in r.attempts.values()),
            "certificates": sum(len(r.certificates) for r in records),
            "exercise_passes": sum(len(done) for r in records for done in r.passes.values()),
            "browser_sign_ups": sum(len(r.browser_sign_ups) for r in records),
            "browser_verifies": sum(len(r.browser_verifies) for r in records),
        },
        "stored": found,
        "busy_retries": sum(r.busy_retries for r in records),
        "errors": errors,
        "problems": problems,
    }


def format_report(result: dict) -> str:
    lines = [f"{result['learners']} learner threads, {result['browsers']} browsers, "
             f"{result['wall_s']:.1f} s, journal_mode={result['journal_mode']}",
             f"{'operation':<18} {'count':>6} {'ops/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}"]
    for kind, o in result["ops"].items():
        lines.append(f"{kind:<18} {o['count']:>6} {o['ops_per_s']:>8.1f} {o['p50_ms']:>8.1f} "
                     f"{o['p95_ms']:>8.1f} {o['max_ms']:>8.1f}")
    lines.append(f"{'all':<18} {result['total_ops']:>6} {result['ops_per_s']:>8.1f}"
                 f"  ({result['busy_retries']} busy answers retried)")
    lines.append("acknowledged: " + ", ".join(f"{k} {v}" for k, v in result["acknowledged"].items()))
    lines.append("stored:       " + ", ".join(f"{k} {v}" for k, v in result["stored"].items()))
    for title in ("errors", "problems"):
        lines.append(f"{title}: {len(result[title])}")
        lines += [f"  {item}" for item in result[title][:20]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.load", description=__doc__.split("\n")[0])
    parser.add_argument("--learners", type=int, default=30, help="learner threads (default 30)")
    parser.add_argument("--browsers", type=int, default=5, help="browser contexts (default 5)")
    parser.add_argument("--seconds", type=float, default=20.0, help="start no new learner after this")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    result = run_load(learners=args.learners, browsers=args.browsers, seconds=args.seconds)
    print(json.dumps(result, indent=1) if args.json else format_report(result))
    return 1 if result["errors"] or result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
