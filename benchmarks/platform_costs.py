"""What the platform costs per learner action, each beside the bare operation under it.

- quiz: draw and grade an attempt of ``QUIZ_QUESTIONS`` answers with the
  pure engine, then the same through ``quizzes.store`` on SQLite (start,
  record every answer, finish), so the database's share shows;
- certificates: sign, QR matrix and PDF render per certificate, and the PDF
  size per language; then issue + render time and PDF size for a name in
  each script the certificate prints (``SCRIPT_NAMES``; targets 50 ms and
  150 KiB);
- verification: ``certificates.lookup`` per second against a SQLite table
  of ``Config.certificates`` signed rows, first look-ups (the row's keyed
  check compared), the same IDs again, and first look-ups of rows without the
  check (old rows: Ed25519 verified), beside a raw primary-key SELECT and a
  bare Ed25519 verify on the same rows;
- a class arrives: ``Config.arrivals`` sign-ups at once, then as many sign-ins
  (threads against ``academy.accounts``), beside one sign-in alone and one
  Argon2 hash with today's and the earlier parameters;
- pages: server-side render of every page in every language (AppTest),
  beside an empty Streamlit script;
- load: ``benchmarks.load.run_load`` (concurrent learners), when present.

Every function takes the sandbox folder from ``common.sandbox`` and never
touches the app's real database or keys.
"""

from __future__ import annotations

import logging
import random
import sqlite3
import statistics
import time
from pathlib import Path
from typing import Any

from academy.content import languages
from benchmarks.common import Config, timed, unavailable, use_database

ROOT = Path(__file__).resolve().parent.parent
MAIN = ROOT / "app" / "main.py"
NAMES = {"en": "Ada Lovelace", "zh": "张伟", "nl": "Zoë Ødegård"}
# A name per script the certificate promises (issue #13): shaping, bidi and
# font fallback cost differs by script, so each gets its own row.
SCRIPT_NAMES = {
    "Latin (Vietnamese)": "Nguyễn Thị Minh Khai",
    "Latin (Icelandic)": "Sigurður Þórðarson",
    "Latin (Polish)": "Zażółć Gęślą-Jaźń",
    "Cyrillic": "Пётр Ильич Чайковский",
    "Greek": "Αλέξανδρος Παπαδόπουλος",
    "Armenian": "Արամ Խաչատրյան",
    "Georgian": "ნინო ჩხეიძე",
    "Han (simplified)": "张伟",
    "Han (traditional)": "張偉",
    "Japanese kana": "山田 たろう カタカナ",
    "Hangul": "김민준",
    "Arabic": "مريم العلي",
    "Hebrew": "דוד כהן",
    "Arabic + Latin": "مريم Anna",
    "Devanagari": "राहुल क्षत्रिय",
    "Bengali": "রবীন্দ্রনাথ ঠাকুর",
    "Tamil": "தமிழ்செல்வன்",
    "Thai": "สมชาย ใจดี",
    "Ethiopic": "አበበ ቢቂላ",
    "combining marks": "Rene\u0301e x\u0301",
    "emoji": "Ana 👩🏽\u200d💻 🎉",
    "200 characters, Thai": ("สมชายใจดี" * 30)[:200],
}


def _engine(path: Path):
    from academy.db import make_engine, migrate

    engine = make_engine(f"sqlite:///{path}")
    migrate(engine)
    return engine


def _learner(session) -> int:
    from academy.models import Learner

    learner = Learner(email=f"bench-{time.perf_counter_ns()}@example.org", password_hash="-")
    session.add(learner)
    session.commit()
    session.refresh(learner)
    return learner.id


# ------------------------------------------------------------------- quiz


def _response(item: dict[str, Any], bank, lang: str) -> Any:
    """A well-formed answer (right for numeric questions, "a" for choices):
    grading reads and checks it whether it is right or not."""
    from quizzes.engine import KEYS, format_number
    from quizzes.formula import compute_answer

    question = bank.questions[item["question_id"]]
    if question.type == "single":
        return "a"
    if question.type == "multiple":
        return ["a"]
    if question.type == "ordering":
        return list(KEYS[: len(item["items"])])
    return format_number(compute_answer(question, item["params"]), lang)


def quiz_grading(cfg: Config, base: Path) -> dict:
    from sqlmodel import Session

    from academy.settings import get_settings
    from quizzes import store
    from quizzes.bank import load_bank
    from quizzes.engine import draw_attempt, grade

    bank = load_bank()  # read once per process, as in the app
    k = get_settings().quiz_questions

    def engine_only(seed: int, lang: str) -> None:
        for item in draw_attempt(bank, seed=seed, k=k):
            grade(item, bank, _response(item, bank, lang), lang)

    engine = _engine(base / "quiz.db")
    with Session(engine, expire_on_commit=False) as session:
        learner_id = _learner(session)

    def with_store(seed: int, lang: str) -> None:
        with Session(engine, expire_on_commit=False) as session:
            attempt = store.start_attempt(session=session, learner_id=learner_id, lang=lang,
                                          seed=seed, bank=bank)
            for pos, item in enumerate(attempt.plan):
                store.record_answer(session=session, attempt_id=attempt.id, learner_id=learner_id,
                                    position=pos, response=_response(item, bank, lang), lang=lang,
                                    bank=bank)
            store.finish_attempt(session=session, attempt_id=attempt.id, learner_id=learner_id)

    engine_only(0, "en")  # warm the message catalogs
    runs = [(seed, languages()[seed % len(languages())]) for seed in range(1, cfg.quiz_attempts + 1)]
    pure = statistics.median(timed(lambda s=s, lang=lang: engine_only(s, lang)) for s, lang in runs)
    stored = statistics.median(timed(lambda s=s, lang=lang: with_store(s, lang)) for s, lang in runs)
    engine.dispose()
    return {"questions": k, "attempts": len(runs), "engine_ms": pure * 1e3,
            "store_sqlite_ms": stored * 1e3, "store_vs_engine": stored / pure}


# ----------------------------------------------------------- certificates


def certificate_issuance(cfg: Config, base: Path) -> dict:
    import segno
    from sqlmodel import Session

    import certificates as certs
    from academy.settings import get_settings
    from certificates import signing
    from certificates.address import public_url
    from certificates.ids import verify_url
    from certificates.store import issue_certificate

    settings = get_settings()
    engine = _engine(base / "certificates.db")
    sign_s, qr_s, issue_s, render_s, total_s = [], [], [], [], []
    sizes: dict[str, list[int]] = {lang: [] for lang in languages()}
    with Session(engine, expire_on_commit=False) as session:
        issue_certificate(session=session, learner_id=None, attempt_id=None, name="Warm Up",
                          lang="en", score=90, pass_date="2025-01-01")  # creates the issuer key
        for i in range(cfg.pdfs * len(languages())):
            lang = languages()[i % len(languages())]
            name = NAMES[lang]
            payload = signing.make_payload(cert_id=certs.new_id(), name=name,
                                           course=settings.course_id, score=92,
                                           pass_date="2025-01-01", lang=lang,
                                           issuer=settings.issuer)
            sign_s.append(timed(lambda p=payload: signing.sign(p)))
            url = verify_url(public_url(), payload["id"])
            qr_s.append(timed(lambda u=url: segno.make(u, error="m", micro=False).matrix))
            t0 = time.perf_counter()
            cert = issue_certificate(session=session, learner_id=None, attempt_id=None, name=name,
                                     lang=lang, score=92, pass_date="2025-01-01")
            t1 = time.perf_counter()
            pdf = certs.render_pdf(cert)
            t2 = time.perf_counter()
            issue_s.append(t1 - t0)
            render_s.append(t2 - t1)
            total_s.append(t2 - t0)
            sizes[lang].append(len(pdf))
        per_script = {script: _script_costs(session, name, cfg.pdfs)
                      for script, name in SCRIPT_NAMES.items()}
    engine.dispose()
    ms = lambda xs: statistics.median(xs) * 1e3  # noqa: E731
    return {"pdfs": len(total_s), "sign_ms": ms(sign_s), "qr_ms": ms(qr_s),
            "issue_ms": ms(issue_s), "render_ms": ms(render_s), "total_ms": ms(total_s),
            "pdf_kib": {lang: statistics.median(v) / 1024 for lang, v in sizes.items()},
            "per_script": per_script}


def _script_costs(session, name: str, repeats: int) -> dict:
    """Median issue (clean, sign, store) and render time, and PDF size, for
    one name. One untimed round first: loading a script's font is a cost
    paid once per process, not per certificate."""
    import certificates as certs
    from certificates.store import issue_certificate

    def once(score: float) -> tuple[float, float, int]:
        t0 = time.perf_counter()
        cert = issue_certificate(session=session, learner_id=None, attempt_id=None, name=name,
                                 lang="en", score=score, pass_date="2025-01-01")
        t1 = time.perf_counter()
        size = len(certs.render_pdf(cert))
        return t1 - t0, time.perf_counter() - t1, size

    once(50)
    rounds = [once(60 + i) for i in range(max(repeats, 1))]  # a new score: a new certificate
    issue = statistics.median(r[0] for r in rounds) * 1e3
    render = statistics.median(r[1] for r in rounds) * 1e3
    return {"issue_ms": issue, "render_ms": render, "total_ms": issue + render,
            "pdf_kib": statistics.median(r[2] for r in rounds) / 1024}


# ----------------------------------------------------------- verification


def _fill_certificates(engine, count: int) -> list[str]:
    """Insert ``count`` signed certificates with SQLAlchemy core; their IDs.

    Each row is signed for its own ID with the active issuer key and carries
    its keyed checks, of the row and of its state (exactly what ``certificates.store`` writes, without
    re-reading the key files per row), so every lookup below takes the "valid" path.
    """
    from sqlalchemy import insert

    import certificates as certs
    from academy.models import Certificate, utcnow
    from academy.settings import get_settings
    from certificates import keys, signing

    settings = get_settings()
    key = keys.active_key()
    check_key = keys.check_key()
    ids: set[str] = set()
    while len(ids) < count:
        ids.add(certs.new_id())
    ordered = sorted(ids)
    now = utcnow()
    table = Certificate.__table__
    batch: list[dict] = []
    with engine.begin() as conn:
        for n, cert_id in enumerate(ordered):
            lang = languages()[n % len(languages())]
            payload = signing.make_payload(cert_id=cert_id, name=f"Learner {n}",
                                           course=settings.course_id, score=80 + n % 21,
                                           pass_date="2025-01-01", lang=lang,
                                           issuer=settings.issuer)
            data = signing.canonical({**payload, "kid": key.kid})
            signature = signing.b64url(key.private.sign(data))
            batch.append({"id": cert_id, "learner_id": None, "attempt_id": None,
                          "name": payload["name"], "course_id": settings.course_id,
                          "score": payload["score"], "language": lang, "pass_date": "2025-01-01",
                          "key_id": key.kid, "payload": data.decode("utf-8"), "signature": signature,
                          "check_mac": signing.row_check(data.decode("utf-8"), signature, check_key),
                          "status_mac": signing.status_check(cert_id, None, None, None, False, check_key),
                          "issued_at": now})
            if len(batch) == 10_000:
                conn.execute(insert(table), batch)
                batch = []
        if batch:
            conn.execute(insert(table), batch)
    return ordered


def verification_lookups(cfg: Config, base: Path) -> dict:
    from sqlalchemy import text
    from sqlmodel import Session

    from certificates import keys, lookup, signing

    path = base / "verify.db"
    engine = _engine(path)
    t0 = time.perf_counter()
    filled = _fill_certificates(engine, cfg.certificates)
    fill_s = time.perf_counter() - t0
    sample = random.Random(0).choices(filled, k=cfg.lookups)

    statuses: dict[str, int] = {}

    def one(cert_id: str) -> None:
        # One session per lookup, as the verify page opens one per request.
        with Session(engine) as session:
            status = lookup(session=session, text=cert_id).status
        statuses[status] = statuses.get(status, 0) + 1

    for cert_id in filled[-50:]:  # warm the pool and the page cache (IDs not in the sample)
        one(cert_id)
    statuses.clear()
    # First look-up of each ID: its keyed check (``verify._checked_payload``) compared. Then the
    # same IDs again, and other IDs whose rows lack the check, as rows issued before it had one:
    # their signature is checked (Ed25519), as every look-up did before.
    lookups_s = timed(lambda: [one(c) for c in sample])
    repeat_s = timed(lambda: [one(c) for c in sample])
    asked = set(sample) | set(filled[-50:])
    old = random.Random(1).sample([c for c in filled if c not in asked], k=min(cfg.lookups, len(filled) - len(asked)))
    with engine.begin() as db:
        db.execute(text("UPDATE certificate SET check_mac = NULL WHERE id = :id"), [{"id": c} for c in old])
    old_s = timed(lambda: [one(c) for c in old])

    conn = sqlite3.connect(path)
    rows = []
    select_s = timed(lambda: rows.extend(
        conn.execute("SELECT payload, signature FROM certificate WHERE id = ?", (c,)).fetchone()
        for c in sample))
    conn.close()
    public = keys.local_public_keys()
    verify_s = timed(lambda: [signing.verify(p.encode(), s, public) for p, s in rows])
    engine.dispose()
    n = len(sample)
    return {"certificates": cfg.certificates, "lookups": n, "bulk_insert_s": fill_s,
            "lookups_per_s": n / lookups_s, "repeat_lookups_per_s": n / repeat_s,
            "old_row_lookups_per_s": len(old) / old_s, "raw_select_per_s": n / select_s,
            "ed25519_verify_per_s": n / verify_s,
            "valid_fraction": statuses.get("valid", 0) / (2 * n + len(old))}


# -------------------------------------------------------- a class arrives


def class_arrival(cfg: Config, base: Path) -> dict:
    """``cfg.arrivals`` threads sign up at once through ``academy.accounts``, then the
    same number sign in at once (each thread its own session, as each page run has);
    latency p50/p95/max and errors per burst. Yardsticks in the same run: one sign-in
    alone, and one Argon2 hash with today's parameters and with the earlier ones
    (argon2-cffi's defaults: 64 MiB, 3 passes, 4 lanes)."""
    import threading

    from argon2 import PasswordHasher
    from sqlmodel import Session

    from academy import accounts

    engine = _engine(base / "arrival.db")
    password = "a class arrives at nine"

    def burst(call) -> dict:
        times: list[float] = []
        errors: list[str] = []
        notices: list[int] = []
        start = threading.Barrier(cfg.arrivals)

        def one(n: int) -> None:
            start.wait()
            t0 = time.perf_counter()
            try:
                with Session(engine) as session:
                    call(session, f"learner{n}@example.org", lambda: notices.append(1))
                times.append(time.perf_counter() - t0)
            except Exception as exc:  # noqa: BLE001 - counted, shown in the table
                errors.append(f"{type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=one, args=(n,)) for n in range(cfg.arrivals)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        ordered = sorted(times) or [float("nan")]
        return {"calls": cfg.arrivals, "ok": len(times), "errors": len(errors), "first_errors": errors[:3],
                "busy_notices": len(notices), "p50_s": statistics.median(ordered),
                "p95_s": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], "max_s": ordered[-1]}

    sign_ups = burst(lambda s, email, on_wait: accounts.sign_up(
        session=s, email=email, password=password, on_wait=on_wait))
    sign_ins = burst(lambda s, email, on_wait: accounts.sign_in(
        session=s, email=email, password=password, on_wait=on_wait))
    with Session(engine) as session:
        alone_s = timed(lambda: accounts.sign_in(session=session, email="learner0@example.org",
                                                 password=password))
    today = accounts._hasher
    earlier = PasswordHasher()
    engine.dispose()
    return {"arrivals": cfg.arrivals, "sign_up": sign_ups, "sign_in": sign_ins, "sign_in_alone_s": alone_s,
            "argon2": f"m={today.memory_cost} KiB, t={today.time_cost}, p={today.parallelism}",
            "gate_slots": accounts._SLOTS.slots,
            "hash_s": timed(lambda: today.hash(password)), "earlier_hash_s": timed(lambda: earlier.hash(password))}


# ------------------------------------------------------------------ pages


def _page_run(page: str, lang: str, learner_id: int) -> tuple[float, float]:
    """Seconds for a new session's first run (the home page) and for the
    rerun that shows ``page`` after a click in the navigation."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(MAIN), default_timeout=120)
    at.query_params["lang"] = lang
    at.session_state["learner_id"] = learner_id
    first = timed(at.run)
    if page != "home":
        at.switch_page(f"views/{page}.py")
    switch = timed(at.run)
    if at.exception:
        raise RuntimeError(f"{page} ({lang}): {at.exception[0].message}")
    return first, switch


def _empty_script() -> float:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_string("import streamlit as st\nst.write('hello')", default_timeout=60)
    at.run()
    return timed(at.run)


def page_renders(cfg: Config, base: Path) -> dict:
    """Server-side render time of each page in each language, signed in.

    Timed is the rerun after ``switch_page``: what a click in the
    navigation costs the server once its caches are warm (one untimed render
    of each page and language first). The yardstick is the same rerun of a
    one-line Streamlit script.
    """
    from streamlit.testing.v1 import AppTest  # noqa: F401 - creates the logger silenced below

    from academy.accounts import sign_up
    from academy.db import session_scope

    # AppTest sets session state from outside a script run, and Streamlit
    # warns about that twice per AppTest: noise in a benchmark's output. (A
    # filter, because each run sets the logger's level again.)
    logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context").addFilter(
        lambda record: "missing ScriptRunContext" not in record.getMessage())

    use_database(f"sqlite:///{base / 'pages.db'}")
    with session_scope() as session:
        learner_id = sign_up(session=session, email="pages@example.org",
                             password="a long enough password").id

    yardstick = statistics.median(_empty_script() for _ in range(5))
    renders: dict[str, dict[str, float | str]] = {}
    firsts: list[float] = []
    for page in cfg.pages:
        renders[page] = {}
        for lang in languages():
            try:
                _page_run(page, lang, learner_id)  # loads this page's content into the caches
                runs = [_page_run(page, lang, learner_id) for _ in range(cfg.page_repeats)]
                firsts.extend(first for first, _ in runs)
                renders[page][lang] = statistics.median(switch for _, switch in runs) * 1e3
            except Exception as exc:  # noqa: BLE001 - one broken page must not hide the others
                renders[page][lang] = unavailable(exc)
    return {"signed_in": True, "repeats": cfg.page_repeats,
            "empty_script_ms": yardstick * 1e3,
            "new_session_ms": statistics.median(firsts) * 1e3 if firsts else "not available",
            "render_ms": renders}


# ------------------------------------------------------------------- load


def concurrent_load(cfg: Config) -> dict | str:
    if not cfg.under_load:
        return "skipped: smoke mode (tests/test_load.py drives the real server)"
    try:
        from benchmarks.load import run_load
    except Exception as exc:  # noqa: BLE001 - written by another change; may be missing
        return unavailable(exc)
    try:
        result = run_load(learners=cfg.load_learners, browsers=cfg.load_browsers,
                          seconds=cfg.load_seconds)
    except Exception as exc:  # noqa: BLE001
        return unavailable(exc)
    return {"learners": cfg.load_learners, "browsers": cfg.load_browsers,
            "seconds": cfg.load_seconds, **result}


# -------------------------------------------------------------- classroom


def classroom(cfg: Config) -> dict | str:
    """Page time at 1, 10 and 30 concurrent sessions over Streamlit's websocket, beside an
    empty Streamlit page in the same run (``benchmarks.wsload``)."""
    if not cfg.under_load:
        return "skipped: smoke mode (tests/test_benchmarks.py drives the real server)"
    from benchmarks import wsload

    return {"seconds": cfg.classroom_seconds,
            "empty": wsload.measure(list(cfg.classroom_sessions), cfg.classroom_seconds, empty=True),
            "app": wsload.measure(list(cfg.classroom_sessions), cfg.classroom_seconds)}
