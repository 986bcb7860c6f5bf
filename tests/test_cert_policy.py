"""Issuance policy (issue #17, F-2, F-3, F-17): one active certificate per
learner and course, enforced by the database; admin disqualification sticks
until lifted; concurrent reissues make exactly one replacement; the 0002
migration cleans up databases that already hold duplicates."""

from __future__ import annotations

import os
import threading
from datetime import UTC, datetime, timedelta

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import inspect, make_url, text
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from academy.db import make_engine, migrate
from academy.models import Certificate, CertificateEvent, Learner, QuizAttempt
from academy.settings import ROOT
from certificates import errors, store, verify
from certificates.eligibility import eligible_attempt, is_disqualified
from tests.exercisepass import pass_required_exercises

pytestmark = pytest.mark.usefixtures("secrets")  # own issuer keys (conftest.py)


def passed_learner(session, email="bob@example.org", admin=False) -> tuple[Learner, QuizAttempt]:
    learner = Learner(email=email, display_name="Bob", password_hash="x", is_admin=admin)
    session.add(learner)
    session.commit()
    session.refresh(learner)
    pass_required_exercises(session, learner.id)  # the certificate's exercises (tested in test_exercises_store)
    attempt = QuizAttempt(learner_id=learner.id, seed=1, status="finished", score=90.0, passed=True,
                          finished_at=datetime(2026, 11, 30, 12, 0, tzinfo=UTC))
    session.add(attempt)
    session.commit()
    session.refresh(attempt)
    return learner, attempt


def active(session, learner_id) -> list[Certificate]:
    return [c for c in store.certificates_of(session=session, learner_id=learner_id) if c.revoked_at is None]


def test_a_second_name_does_not_mint_a_second_certificate(session):
    # F-2: "Bob Learner", then "Jane Impostor", then "Max Mustermann" in Dutch.
    bob, _ = passed_learner(session)
    first = store.issue_for_learner(session=session, learner_id=bob.id, name="Bob Learner", lang="en")
    assert store.issue_for_learner(session=session, learner_id=bob.id, name="Bob Learner", lang="en").id == first.id
    for name, lang in (("Jane Impostor", "en"), ("Max Mustermann", "nl"), ("Bob Learner", "nl")):
        with pytest.raises(errors.AlreadyCertified) as err:
            store.issue_for_learner(session=session, learner_id=bob.id, name=name, lang=lang)
        assert err.value.certificate_id == first.id
    assert [c.id for c in active(session, bob.id)] == [first.id]


def test_the_database_refuses_a_second_active_certificate(session):
    # Even code that skips the store's checks cannot add a second active row.
    bob, attempt = passed_learner(session)
    first = store.issue_for_learner(session=session, learner_id=bob.id, name="Bob", lang="en")
    twin = store._build(store.ids.new_id(), learner_id=bob.id, attempt_id=attempt.id, name="Jane",
                        lang="en", score=90, pass_date="2026-11-30")
    session.add(twin)
    with pytest.raises(IntegrityError):
        session.commit()
    session.rollback()
    # A revoked row does not count: after a reissue there is again exactly one active.
    new = store.reissue(session=session, cert_id=first.id, learner_id=bob.id, new_name="Jane", lang="en")
    assert [c.id for c in active(session, bob.id)] == [new.id]
    # Certificates tied to nobody (the operator's CLI) are not limited.
    for name in ("Ann", "Ann Other"):
        store.issue_certificate(session=session, learner_id=None, attempt_id=None, name=name, lang="en",
                                score=90, pass_date="2026-11-30")


def test_disqualification_sticks_until_an_admin_lifts_it(session):
    # F-3: admin revokes "exam fraud"; the learner must not get a new certificate.
    admin, _ = passed_learner(session, "admin@example.org", admin=True)
    bob, _ = passed_learner(session)
    cert = store.issue_for_learner(session=session, learner_id=bob.id, name="Bob Learner", lang="en")
    with pytest.raises(errors.NotAllowed):
        store.revoke(session=session, cert_id=cert.id, actor_id=bob.id, reason="x", disqualify=True)
    store.revoke(session=session, cert_id=cert.id, actor_id=admin.id, reason="exam fraud", disqualify=True)
    assert is_disqualified(session=session, learner_id=bob.id)
    with pytest.raises(errors.Disqualified):
        store.issue_for_learner(session=session, learner_id=bob.id, name="Bob Learner", lang="en")
    assert active(session, bob.id) == []
    with pytest.raises(errors.NotAllowed):
        store.lift_disqualification(session=session, cert_id=cert.id, actor_id=bob.id, reason="please")
    store.lift_disqualification(session=session, cert_id=cert.id, actor_id=admin.id, reason="appeal upheld")
    assert not is_disqualified(session=session, learner_id=bob.id)
    again = store.issue_for_learner(session=session, learner_id=bob.id, name="Bob Learner", lang="en")
    assert again.id != cert.id and verify.lookup(session=session, text=cert.id).status == "revoked"
    trail = [(e.action, e.actor_id, e.reason) for e in store.events_of(session=session, cert_id=cert.id)]
    assert trail == [("issued", bob.id, None), ("revoked", admin.id, "exam fraud"),
                     ("disqualified", admin.id, "exam fraud"), ("lifted", admin.id, "appeal upheld")]


def test_a_plain_revocation_lets_the_learner_claim_again(session):
    admin, _ = passed_learner(session, "admin@example.org", admin=True)
    bob, _ = passed_learner(session)
    cert = store.issue_for_learner(session=session, learner_id=bob.id, name="Bbo", lang="en")
    store.revoke(session=session, cert_id=cert.id, actor_id=admin.id, reason="name misspelt")
    assert not is_disqualified(session=session, learner_id=bob.id)
    assert store.issue_for_learner(session=session, learner_id=bob.id, name="Bob", lang="en").id != cert.id


@pytest.fixture
def sqlite_file(tmp_path):
    return lambda name: make_engine(f"sqlite:///{tmp_path / name}.db")


@pytest.fixture
def postgres_db(postgres_url):
    """A fresh database on the test cluster for each call (migrations start from nothing)."""
    server = make_engine(postgres_url, isolation_level="AUTOCOMMIT")
    made: list[str] = []

    def fresh(name: str):
        db = f"{name}_{os.getpid()}_{len(made)}"
        with server.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{db}"'))
            conn.execute(text(f'CREATE DATABASE "{db}"'))
        made.append(db)
        return make_engine(make_url(postgres_url).set(database=db).render_as_string(hide_password=False))

    yield fresh
    with server.connect() as conn:
        for db in made:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
    server.dispose()


BACKENDS = ["sqlite_file", pytest.param("postgres_db", marks=pytest.mark.postgres)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_concurrent_reissues_make_exactly_one_replacement(backend, request):
    # F-17: five "Reissue" submissions at once used to leave two valid replacements.
    engine = request.getfixturevalue(backend)("race")
    migrate(engine)
    with Session(engine, expire_on_commit=False) as s:
        bob, _ = passed_learner(s)
        old = store.issue_for_learner(session=s, learner_id=bob.id, name="Bob", lang="en")
    start = threading.Barrier(5)
    outcomes: list[object] = []

    def go(i: int) -> None:
        with Session(engine, expire_on_commit=False) as s:
            start.wait()
            try:
                outcomes.append(store.reissue(session=s, cert_id=old.id, learner_id=bob.id,
                                              new_name=f"Reissued Name {i}", lang="en").id)
            except errors.CertificateError as e:
                outcomes.append(type(e).__name__)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(5)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    new_ids = [o for o in outcomes if o != "AlreadyRevoked"]
    assert len(new_ids) == 1, outcomes
    with Session(engine) as s:
        assert [c.id for c in active(s, bob.id)] == new_ids
        assert s.get(Certificate, old.id).replaced_by == new_ids[0]
        events = s.exec(select(CertificateEvent.action).where(CertificateEvent.certificate_id == old.id)).all()
        assert sorted(events) == ["issued", "reissued"]
    engine.dispose()


def _alembic(engine, revision: str) -> None:
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "academy" / "migrations"))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


@pytest.mark.parametrize("backend", BACKENDS)
def test_migration_0002_keeps_the_newest_and_revokes_the_other_duplicates(backend, request):
    engine = request.getfixturevalue(backend)("old")
    _alembic(engine, "0001")
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    rows = [  # (id, learner, issued offset in hours, revoked?)
        ("DP-A", 1, 0, False), ("DP-B", 1, 2, False), ("DP-C", 1, 1, False),  # B is the newest
        ("DP-D", 1, 3, True),  # revoked already: left alone
        ("DP-E", 2, 0, False),  # the only one: kept
        ("DP-F", None, 0, False), ("DP-G", None, 1, False),  # tied to nobody: both kept
    ]
    with engine.begin() as conn:
        for learner in (1, 2):
            conn.execute(text("INSERT INTO learner (id, email, display_name, password_hash, is_admin, language, "
                              "created_at) VALUES (:i, :e, '', 'x', :no, 'en', :t)"),
                         {"i": learner, "e": f"l{learner}@example.org", "t": t0, "no": False})
        for cert_id, learner, hours, revoked in rows:
            conn.execute(text(
                "INSERT INTO certificate (id, learner_id, name, course_id, score, language, pass_date, key_id, "
                "payload, signature, issued_at, revoked_at, revoked_reason) VALUES (:id, :l, 'N', "
                "'data-parallelism', 90, 'en', '2026-11-01', 'k', '{}', 's', :at, :rev, :why)"),
                {"id": cert_id, "l": learner, "at": t0 + timedelta(hours=hours),
                 "rev": t0 if revoked else None, "why": "old reason" if revoked else None})
    _alembic(engine, "head")
    with Session(engine) as s:
        by_id = {c.id: c for c in s.exec(select(Certificate)).all()}
        assert {i for i, c in by_id.items() if c.revoked_at is None} == {"DP-B", "DP-E", "DP-F", "DP-G"}
        for old in ("DP-A", "DP-C"):
            assert by_id[old].revoked_reason == "superseded by policy"
            assert by_id[old].replaced_by == "DP-B"
        assert by_id["DP-D"].revoked_reason == "old reason"
        events = s.exec(select(CertificateEvent.certificate_id, CertificateEvent.action)).all()
        assert sorted(events) == [("DP-A", "superseded"), ("DP-C", "superseded")]
    names = {ix["name"] for ix in inspect(engine).get_indexes("certificate")}
    assert "uq_certificate_one_active" in names
    # And from now on the database itself refuses a second active certificate.
    with pytest.raises(IntegrityError), engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO certificate (id, learner_id, name, course_id, score, language, pass_date, key_id, "
            "payload, signature, issued_at, disqualified) VALUES ('DP-H', 2, 'N', 'data-parallelism', 90, 'en', "
            "'2026-11-01', 'k', '{}', 's', :at, :no)"), {"at": t0, "no": False})
    engine.dispose()


@pytest.mark.parametrize("change, counts", [
    ({}, True),
    ({"practice": True}, False),
    ({"status": "in_progress"}, False),
    ({"passed": False}, False),
    ({"passed": None}, False),
    ({"course_id": "another-course"}, False),
])
def test_one_pass_rule_for_quiz_and_certificates(session, change, counts):
    # quizzes.store.passed_attempt is the only definition of "a passed attempt":
    # the quiz's has_passed, certificate eligibility and issuing all agree with it.
    from quizzes import store as quiz_store

    bob, attempt = passed_learner(session)
    for field, value in change.items():
        setattr(attempt, field, value)
    session.add(attempt)
    session.commit()
    assert quiz_store.has_passed(session=session, learner_id=bob.id) is counts
    assert (eligible_attempt(session=session, learner_id=bob.id) is not None) is counts
    if counts:
        store.issue_certificate(session=session, learner_id=bob.id, attempt_id=attempt.id, name="Bob",
                                lang="en", score=90, pass_date="2026-11-30")
    else:
        with pytest.raises(errors.NotEligible):
            store.issue_certificate(session=session, learner_id=bob.id, attempt_id=attempt.id, name="Bob",
                                    lang="en", score=90, pass_date="2026-11-30")
