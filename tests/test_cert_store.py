"""Issuing, lookup, revocation, reissue and offline PDF checks over SQLite."""

from __future__ import annotations

import dataclasses
import io
import random
from datetime import UTC, datetime

import pytest
from pypdf import PdfReader, PdfWriter
from sqlalchemy.pool import StaticPool
from sqlmodel import Session

from academy.db import make_engine, migrate
from academy.models import Certificate, Learner, QuizAttempt
from academy.settings import get_settings
from certificates import errors, ids, keys, names, pdf, signing, store, verify
from certificates.eligibility import eligible_attempt
from certificates.ids import ALPHABET
from tests.exercisepass import pass_required_exercises
from tests.test_cert_policy import BACKENDS, postgres_db, sqlite_file  # noqa: F401 - fixtures for BACKENDS


@pytest.fixture(autouse=True)
def public_url(secrets, monkeypatch):  # own issuer keys (conftest.py) and a fixed public address
    monkeypatch.setenv("PUBLIC_URL", "https://academy.example/")
    get_settings.cache_clear()
    yield secrets
    get_settings.cache_clear()


@pytest.fixture
def session(engine):
    with Session(engine, expire_on_commit=False) as s:
        yield s


def add_learner(session, email="zoe@example.org", admin=False) -> Learner:
    learner = Learner(email=email, display_name="Zoë", password_hash="x", is_admin=admin)
    session.add(learner)
    session.commit()
    session.refresh(learner)
    pass_required_exercises(session, learner.id)  # the certificate's exercises (tested in test_exercises_store)
    return learner


def add_attempt(session, learner, *, score=90.0, passed=True, practice=False, status="finished"):
    attempt = QuizAttempt(
        learner_id=learner.id,
        seed=1,
        practice=practice,
        status=status,
        score=score,
        passed=passed,
        finished_at=datetime(2025, 11, 30, 12, 0, tzinfo=UTC),
    )
    session.add(attempt)
    session.commit()
    session.refresh(attempt)
    return attempt


def issue(session, learner=None, attempt=None, name="Zoë Ødegård", lang="en"):
    return store.issue_certificate(
        session=session,
        learner_id=learner.id if learner else None,
        attempt_id=attempt.id if attempt else None,
        name=name,
        lang=lang,
        score=attempt.score if attempt else 95,
        pass_date="2025-11-30",
    )


def test_issue_and_lookup_round_trip(session):
    learner = add_learner(session)
    attempt = add_attempt(session, learner)
    cert = issue(session, learner, attempt)
    assert ids.parse_id(cert.id) == cert.id
    result = verify.lookup(session=session, text=cert.id.lower().replace("-", " "))
    assert result.status == "valid" and result.valid
    assert (result.name, result.course, result.score, result.pass_date, result.lang) == (
        "Zoë Ødegård",
        "data-parallelism",
        90,
        "2025-11-30",
        "en",
    )
    assert result.course_title == "Data Parallelism"
    assert result.issued_at is not None and result.revoked_at is None
    # public fields only: nothing of the learner's account
    values = [str(v) for v in dataclasses.asdict(result).values()]
    assert not any("zoe@example.org" in v for v in values)
    assert [e.action for e in store.events_of(session=session, cert_id=cert.id)] == ["issued"]


def test_only_a_passed_finished_real_attempt_gets_a_certificate(session):
    learner = add_learner(session)
    other = add_learner(session, "other@example.org")
    failed = add_attempt(session, learner, score=50, passed=False)
    practice = add_attempt(session, learner, practice=True)
    unfinished = add_attempt(session, learner, passed=None, status="in_progress")
    theirs = add_attempt(session, other)
    assert eligible_attempt(session=session, learner_id=learner.id) is None
    for attempt in (failed, practice, unfinished, theirs):
        with pytest.raises(errors.NotEligible):
            issue(session, learner, attempt)
    with pytest.raises(errors.NotEligible):
        store.issue_certificate(
            session=session,
            learner_id=learner.id,
            attempt_id=None,
            name="Zoë",
            lang="en",
            score=90,
            pass_date="2025-11-30",
        )
    with pytest.raises(errors.NotEligible):
        store.issue_for_learner(session=session, learner_id=learner.id, name="Zoë", lang="en")
    best = add_attempt(session, learner, score=95)  # quizzes.store keeps scores in percent
    add_attempt(session, learner, score=85)
    assert eligible_attempt(session=session, learner_id=learner.id).id == best.id
    cert = store.issue_for_learner(session=session, learner_id=learner.id, name="Zoë", lang="nl")
    assert cert.score == 95 and cert.attempt_id == best.id and cert.pass_date == "2025-11-30"


def test_issuing_twice_returns_the_same_certificate(session):
    learner = add_learner(session)
    attempt = add_attempt(session, learner)
    first = issue(session, learner, attempt)
    assert issue(session, learner, attempt).id == first.id
    # Another language (or name) is a reissue, not a second active certificate.
    with pytest.raises(errors.AlreadyCertified):
        issue(session, learner, attempt, lang="zh")
    assert len(store.certificates_of(session=session, learner_id=learner.id)) == 1


@pytest.mark.parametrize(
    "name", ["", "   ", "a" * 201, "Ann\x00", "Bob\u0007", "Ravi \ue000", "\u0378\u0379"]
)
def test_bad_names_are_refused(session, name):
    with pytest.raises(names.InvalidName):
        issue(session, name=name)


@pytest.mark.parametrize("hidden", ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u202e", "\u2066"])
def test_invisible_and_bidi_characters_are_refused_and_named(hidden):
    # F-16: "Bob\u200b\u200dZero\u2060Width" was issued and verified.
    with pytest.raises(names.InvalidName) as err:
        names.clean_name(f"Bob{hidden}Zero")
    assert err.value.kind == "hidden" and err.value.chars == [hidden]
    assert names.char_names(err.value.chars)[0].startswith(f"U+{ord(hidden):04X} ")


def test_names_are_normalised():
    assert names.clean_name("  Nguye\u0302\u0303n   Thi\u0323  ") == "Nguyễn Thị"


def test_bad_language_score_and_date(session):
    with pytest.raises(errors.InvalidInput):
        issue(session, lang="fr")
    for score, date in ((101, "2025-11-30"), (-1, "2025-11-30"), (90, "30/11/2025")):
        with pytest.raises(errors.InvalidInput):
            store.issue_certificate(
                session=session,
                learner_id=None,
                attempt_id=None,
                name="Zoë",
                lang="en",
                score=score,
                pass_date=date,
            )


def test_id_collision_retries(session, monkeypatch):
    taken = issue(session)
    fresh = ids.new_id()
    sequence = iter([taken.id, fresh])
    monkeypatch.setattr(store.ids, "new_id", lambda: next(sequence))
    assert issue(session, name="Another").id == fresh


def test_revoked_shows_revoked_with_when_and_why(session):
    admin = add_learner(session, "admin@example.org", admin=True)
    learner = add_learner(session)
    cert = issue(session, learner, add_attempt(session, learner))
    with pytest.raises(errors.NotAllowed):
        store.revoke(session=session, cert_id=cert.id, actor_id=learner.id, reason="no")
    with pytest.raises(errors.InvalidInput):
        store.revoke(session=session, cert_id=cert.id, actor_id=admin.id, reason="  ")
    store.revoke(session=session, cert_id=cert.id, actor_id=admin.id, reason="cheating")
    result = verify.lookup(session=session, text=cert.id)
    assert result.status == "revoked" and not result.valid
    assert result.revoked_reason == "revoked" and result.revoked_at is not None  # its kind, not the words
    with pytest.raises(errors.AlreadyRevoked):
        store.revoke(session=session, cert_id=cert.id, actor_id=admin.id, reason="again")
    events = store.events_of(session=session, cert_id=cert.id)
    assert [(e.action, e.actor_id, e.reason) for e in events] == [
        ("issued", learner.id, None),
        ("revoked", admin.id, "cheating"),
    ]


def test_reissue_links_old_and_new(session):
    learner = add_learner(session)
    other = add_learner(session, "other@example.org")
    old = issue(session, learner, add_attempt(session, learner))
    with pytest.raises(errors.NotAllowed):
        store.reissue(session=session, cert_id=old.id, learner_id=other.id, new_name="X", lang="en")
    new = store.reissue(
        session=session, cert_id=old.id, learner_id=learner.id, new_name="Zoë Berg", lang="nl"
    )
    assert new.id != old.id
    assert (new.name, new.language, new.score, new.pass_date) == (
        "Zoë Berg",
        "nl",
        90,
        "2025-11-30",
    )
    old_result = verify.lookup(session=session, text=old.id)
    assert old_result.status == "replaced" and not old_result.valid  # issue #22: not "revoked"
    assert old_result.revoked_reason == "reissued" and new.id not in repr(old_result)  # no link to the new name
    assert old_result.replaced_by is None  # the holder did not choose to show it
    assert verify.lookup(session=session, text=new.id).status == "valid"
    assert [e.action for e in store.events_of(session=session, cert_id=old.id)] == [
        "issued",
        "reissued",
    ]
    assert store.events_of(session=session, cert_id=new.id)[0].reason == f"reissue of {old.id}"
    with pytest.raises(errors.AlreadyRevoked):
        store.reissue(
            session=session, cert_id=old.id, learner_id=learner.id, new_name="Y", lang="en"
        )
    assert [c.id for c in store.certificates_of(session=session, learner_id=learner.id)] == [
        new.id,
        old.id,
    ]


def test_lookup_statuses_before_the_database(session):
    assert verify.lookup(session=session, text="hello").status == "malformed"
    cert = issue(session)
    typo = cert.id[:-4] + ("0" if cert.id[-4] != "0" else "1") + cert.id[-3:]
    assert verify.lookup(session=session, text=typo).status == "typo"
    assert verify.lookup(session=session, text=ids.new_id()).status == "not_found"


def test_ten_thousand_random_and_mutated_ids_are_never_valid(session):
    rng = random.Random(6)
    real = [issue(session, name=f"Learner {i}").id for i in range(20)]
    digits = lambda cert_id: cert_id.replace("-", "")[2:]  # noqa: E731
    candidates: list[tuple[str, str]] = []
    while len(candidates) < 10_000:
        base = digits(rng.choice(real))
        kind = rng.choice(["random", "random-shape", "substitute", "swap", "truncate", "insert"])
        if kind == "random":
            n = rng.randint(0, 30)
            text = "".join(rng.choice(ALPHABET + "ILOU-_ #%<>é张") for _ in range(n))
        elif kind == "random-shape":
            text = ids.format_id("".join(rng.choice(ALPHABET) for _ in range(16)))[:-2] + "".join(
                rng.choice(ALPHABET) for _ in range(2)
            )
        elif kind == "substitute":
            pos = rng.randrange(len(base))
            text = base[:pos] + rng.choice(ALPHABET.replace(base[pos], "")) + base[pos + 1 :]
        elif kind == "swap":
            pos = rng.randrange(len(base) - 1)
            if base[pos] == base[pos + 1]:
                continue
            text = base[:pos] + base[pos + 1] + base[pos] + base[pos + 2 :]
        elif kind == "truncate":
            text = base[: rng.randrange(len(base))]
        else:
            pos = rng.randrange(len(base) + 1)
            text = base[:pos] + rng.choice(ALPHABET) + base[pos:]
        if kind != "random" or not any(text.upper().endswith(digits(r)) for r in real):
            candidates.append((kind, text))
    seen = {}
    for kind, text in candidates:
        result = verify.lookup(session=session, text=text)
        assert result.status != "valid", (kind, text)
        assert result.status in {"not_found", "malformed", "typo"}
        if kind in ("substitute", "swap"):
            assert result.status == "typo", (kind, text)
        seen[result.status] = seen.get(result.status, 0) + 1
    assert seen["malformed"] and seen["typo"]


def test_a_revoke_right_after_a_cached_lookup_shows_revoked(session):
    """The signature check is remembered, the status never: revoking or replacing shows at once."""
    admin = add_learner(session, "admin@example.org", admin=True)
    learner = add_learner(session)
    cert = issue(session, learner, add_attempt(session, learner))
    assert verify.lookup(session=session, text=cert.id).status == "valid"
    assert verify.lookup(session=session, text=cert.id).status == "valid"  # the check from the cache
    store.revoke(session=session, cert_id=cert.id, actor_id=admin.id, reason="issued in error")
    assert verify.lookup(session=session, text=cert.id).status == "revoked"
    other = add_learner(session, "yan@example.org")
    old = issue(session, other, add_attempt(session, other))
    assert verify.lookup(session=session, text=old.id).status == "valid"
    new = store.reissue(session=session, cert_id=old.id, learner_id=other.id, new_name="Yan Li", lang="en")
    assert verify.lookup(session=session, text=old.id).status == "replaced"
    assert verify.lookup(session=session, text=new.id).status == "valid"


def test_a_row_altered_after_a_cached_lookup_or_a_key_removed_does_not_verify(session):
    cert = issue(session)
    assert verify.lookup(session=session, text=cert.id).status == "valid"
    row = session.get(Certificate, cert.id)
    good = row.payload
    row.payload = good.replace("Zoë Ødegård", "Mallory")
    session.commit()
    assert verify.lookup(session=session, text=cert.id).status == "bad_signature"
    row.payload = good
    session.commit()
    assert verify.lookup(session=session, text=cert.id).status == "valid"
    for public in keys.keys_dir().glob("*.pub"):
        public.unlink()
    assert verify.lookup(session=session, text=cert.id).status == "unknown_key"


def test_a_tampered_database_row_does_not_verify(session):
    cert = issue(session)
    row = session.get(Certificate, cert.id)
    row.payload = row.payload.replace("Zoë Ødegård", "Mallory")
    session.add(row)
    session.commit()
    result = verify.lookup(session=session, text=cert.id)
    assert result.status == "bad_signature" and result.name is None


@pytest.mark.usefixtures("secrets")
def test_verify_pdf_offline_round_trip(session, tmp_path):
    cert = issue(session, name="张伟", lang="zh")
    data = store.render_pdf(cert)
    assert store.verify_link(cert) == f"https://academy.example/verify?id={cert.id}"
    result = verify.verify_pdf(data)
    assert result.valid and result.name == "张伟" and result.id == cert.id
    assert result.course_title == "数据并行"
    # Offline means offline: a verifier with only the exported public keys.
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(keys.export_public_keys_json())
    assert verify.verify_pdf(data, keys_file=keys_file, secrets_dir=tmp_path / "none").valid
    assert verify.verify_pdf(data, secrets_dir=tmp_path / "none").status == "unknown_key"


def _with_keywords(data: bytes, keywords: str) -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.add_metadata({"/Keywords": keywords})
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_verify_pdf_rejects_tampering(session):
    cert = issue(session)
    data = store.render_pdf(cert)
    keywords = PdfReader(io.BytesIO(data)).metadata["/Keywords"]
    payload, signature = pdf.extract_token(keywords)

    forged = payload.replace("Zoë Ødegård".encode(), b"Mallory")
    result = verify.verify_pdf(_with_keywords(data, pdf.embed_token(forged.decode(), signature)))
    assert result.status == "bad_signature"

    sig = bytearray(signing.b64url_decode(signature))
    sig[5] ^= 0x40
    bad_sig = pdf.embed_token(payload.decode(), signing.b64url(bytes(sig)))
    assert verify.verify_pdf(_with_keywords(data, bad_sig)).status == "bad_signature"

    assert verify.verify_pdf(_with_keywords(data, "nothing here")).status == "no_payload"
    assert verify.verify_pdf(b"%PDF-1.4 garbage").status == "unreadable"
    assert verify.verify_pdf(b"not a pdf").status == "unreadable"

    # A genuine token moved onto another certificate's page: no printed text
    # is read (F-7: that check could be fooled), the result carries the
    # *signed* name and ID for the reader to compare with the document.
    other = store.render_pdf(issue(session, name="Someone Else"))
    moved = verify.verify_pdf(_with_keywords(other, keywords))
    assert (moved.status, moved.name, moved.id) == ("valid", "Zoë Ødegård", cert.id)


@pytest.mark.usefixtures("session")
def test_verify_pdf_checks_the_id_check_digits():
    # A validly signed payload whose ID has bad check digits (a buggy or
    # hostile issuer) is still refused.
    cert_id = ids.new_id()
    bad_id = cert_id[:-2] + ("00" if cert_id[-2:] != "00" else "11")
    signed = signing.sign(
        signing.make_payload(
            cert_id=bad_id,
            name="Zoë",
            course="data-parallelism",
            score=90,
            pass_date="2025-11-30",
            lang="en",
            issuer="Data Parallelism Academy",
        )
    )
    data = pdf.render(payload=signed.payload, signature=signed.signature, public_url="https://x")
    assert verify.verify_pdf(data).status == "typo"


@pytest.mark.parametrize(("name", "ok"), [
    ("\U0001f469\U0001f3fd\u200d\U0001f4bb Ada", True),  # a ZWJ inside an emoji sequence
    ("\u0915\u094d\u200d\u0937", True),  # Devanagari half form chosen with a ZWJ
    ("\u0645\u200c\u0646", True),  # Arabic letters kept apart with a ZWNJ
    ("Bob\u200dWidth", False),  # between Latin letters it only makes a look-alike
    ("\u200d\U0001f4bb", False),  # at an edge
    ("Bob\u200b\u200dZero", False),  # next to another invisible character
])
def test_joiners_pass_only_where_a_script_needs_them(name, ok):
    if ok:
        assert names.clean_name(name) == name
    else:
        with pytest.raises(names.InvalidName) as err:
            names.clean_name(name)
        assert err.value.kind == "hidden"


@pytest.mark.parametrize("name", [
    "Bob\u3164Smith",  # HANGUL FILLER: shows as nothing
    "Bob\u2800",  # BRAILLE PATTERN BLANK
    "Bo\u034fb",  # COMBINING GRAPHEME JOINER
    "Bob\ufe0f",  # an emoji-style selector after a Latin letter
])
def test_default_ignorable_characters_are_refused(name):
    with pytest.raises(names.InvalidName) as err:
        names.clean_name(name)
    assert err.value.kind == "hidden"


def test_stacked_marks_are_refused_but_real_names_with_marks_pass():
    with pytest.raises(names.InvalidName) as err:
        names.clean_name("Z" + "\u0336\u0337\u0338\u0334\u0335" + "oe")  # none composes under NFC
    assert err.value.kind == "stacked"
    for name in ("Nguyễn Thị Minh Khai", "Nguye\u0302\u0303n", "अनुष्का", "1\ufe0f\u20e3 ❤\ufe0f Ada"):
        assert names.clean_name(name)


def test_a_reissue_must_change_something_and_is_limited_per_day(session):
    """Review: each certificate takes a status-list bit for good, and reissues were free."""
    learner = add_learner(session)
    cert = issue(session, learner, add_attempt(session, learner))
    with pytest.raises(errors.Unchanged):
        store.reissue(session=session, cert_id=cert.id, learner_id=learner.id, new_name=cert.name,
                      lang=cert.language)
    for n in range(store.REISSUES_PER_DAY):
        cert = store.reissue(session=session, cert_id=cert.id, learner_id=learner.id, new_name=f"Name {n}",
                             lang="en")
    with pytest.raises(errors.TooManyReissues):
        store.reissue(session=session, cert_id=cert.id, learner_id=learner.id, new_name="One more", lang="en")
    assert verify.lookup(session=session, text=cert.id).status == "valid"  # the last one stands


def test_a_reissued_certificate_is_replaced_and_names_its_successor_only_if_its_holder_chose(session):
    """Issue #22: a replaced certificate is "replaced by a newer certificate", distinct from
    revoked (for cause or in error); the new ID is shown only by the holder's choice."""
    learner = add_learner(session)
    old = issue(session, learner, add_attempt(session, learner))
    middle = store.reissue(session=session, cert_id=old.id, learner_id=learner.id, new_name="Zoë Berg",
                           lang="en", show_new_id=True)
    newest = store.reissue(session=session, cert_id=middle.id, learner_id=learner.id, new_name="Zoë Bergman",
                           lang="en")
    shown = verify.lookup(session=session, text=old.id)
    assert (shown.status, shown.revoked_reason, shown.replaced_by) == ("replaced", "reissued", middle.id)
    hidden = verify.lookup(session=session, text=middle.id)
    assert (hidden.status, hidden.replaced_by) == ("replaced", None) and newest.id not in repr(hidden)
    assert verify.row_status(old) == "replaced" and verify.row_status(newest) == "valid"
    store.revoke(session=session, cert_id=newest.id, actor_id=None, reason="issued in error")
    revoked = verify.lookup(session=session, text=newest.id)
    assert (revoked.status, revoked.revoked_reason, revoked.replaced_by) == ("revoked", "revoked", None)


def test_migration_0009_adds_and_removes_the_holders_choice():
    from tests.migrations import alembic, columns

    engine = make_engine("sqlite://", poolclass=StaticPool)
    migrate(engine)
    assert "show_replacement" in columns(engine, "certificate")
    alembic(engine, "downgrade", "0008")
    assert "show_replacement" not in columns(engine, "certificate")
    alembic(engine, "upgrade", "head")
    assert "show_replacement" in columns(engine, "certificate")
    engine.dispose()


# --- the keyed check of each row (issue #26) ------------------------------------------------------


def _ed25519_calls(monkeypatch) -> list[str]:
    """The IDs whose payload ``signing.verify`` checks from now on (the Ed25519 path)."""
    calls: list[str] = []
    real = signing.verify

    def counted(payload_bytes, signature, public_keys):
        found = real(payload_bytes, signature, public_keys)
        calls.append(found["id"])
        return found

    monkeypatch.setattr(signing, "verify", counted)
    return calls


def _set_row(session, cert_id: str, **values) -> None:
    row = session.get(Certificate, cert_id)
    for name, value in values.items():
        setattr(row, name, value)
    session.commit()


def test_every_issued_row_carries_its_check_and_a_first_lookup_needs_no_ed25519(session, monkeypatch):
    learner = add_learner(session)
    cert = issue(session, learner, add_attempt(session, learner))
    new = store.reissue(session=session, cert_id=cert.id, learner_id=learner.id, new_name="Zoë Berg", lang="nl")
    loose = issue(session, name="Nobody's")  # the admin CLI's kind, tied to no learner
    for c in (cert, new, loose):
        assert c.check_mac == signing.row_check(c.payload, c.signature, keys.check_key())
    calls = _ed25519_calls(monkeypatch)
    assert verify.lookup(session=session, text=new.id).status == "valid"
    assert verify.lookup(session=session, text=cert.id).status == "replaced"  # the state is the row's
    assert calls == []
    store.revoke(session=session, cert_id=new.id, actor_id=None, reason="issued in error")
    assert verify.lookup(session=session, text=new.id).status == "revoked"  # at once
    assert calls == []


def test_a_row_without_its_check_is_verified_by_its_signature(session, monkeypatch):
    """Rows issued before migration 0011 have no check: Ed25519, as before."""
    cert = issue(session)
    _set_row(session, cert.id, check_mac=None)
    calls = _ed25519_calls(monkeypatch)
    result = verify.lookup(session=session, text=cert.id)
    assert (result.status, result.name, calls) == ("valid", "Zoë Ødegård", [cert.id])
    store.revoke(session=session, cert_id=cert.id, actor_id=None, reason="issued in error")
    assert verify.lookup(session=session, text=cert.id).status == "revoked"


@pytest.mark.parametrize("field", ["payload", "signature"])
def test_a_tampered_row_with_its_old_check_is_a_bad_signature(session, field):
    cert = issue(session)
    check = cert.check_mac
    altered = {"payload": cert.payload.replace("Zoë Ødegård", "Mallory"),
               "signature": signing.b64url(bytes(64))}[field]
    _set_row(session, cert.id, **{field: altered})
    assert session.get(Certificate, cert.id).check_mac == check  # the check left as it was
    result = verify.lookup(session=session, text=cert.id)
    assert result.status == "bad_signature" and result.name is None


def test_a_check_made_with_another_key_falls_back_to_the_signature(session):
    """Someone who can write the database but not read the secrets folder makes the
    check with a key of their own: it does not match ours, so Ed25519 decides."""
    cert = issue(session)
    good, signature = cert.payload, cert.signature
    forged = good.replace("Zoë Ødegård", "Mallory")
    _set_row(session, cert.id, payload=forged, check_mac=signing.row_check(forged, signature, bytes(32)))
    result = verify.lookup(session=session, text=cert.id)
    assert result.status == "bad_signature" and result.name is None
    # The same with a good row: a wrong (or unreadable) check costs a verify, nothing more.
    for wrong in (signing.row_check(good, signature, bytes(32)), "ünïcode", ""):
        _set_row(session, cert.id, payload=good, check_mac=wrong)
        assert verify.lookup(session=session, text=cert.id).status == "valid"


def test_a_right_check_still_needs_the_signing_key_to_be_ours(session, monkeypatch):
    cert = issue(session)
    calls = _ed25519_calls(monkeypatch)
    assert verify.lookup(session=session, text=cert.id).status == "valid" and calls == []
    for public in keys.keys_dir().glob("*.pub"):
        public.unlink()
    assert verify.lookup(session=session, text=cert.id).status == "unknown_key"


def test_the_check_key_is_made_once_owner_only_and_a_reader_makes_none(secrets):
    import stat
    from concurrent.futures import ThreadPoolExecutor

    assert keys.check_key(create=False) is None and not secrets.exists()
    with ThreadPoolExecutor(8) as pool:
        made = set(pool.map(lambda _: keys.check_key(), range(16)))
    assert len(made) == 1 and len(made.pop()) == 32
    path = secrets / keys.KEYS_SUBDIR / keys.CHECK_KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert keys.check_key(create=False) == keys.check_key()


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_lean_read_gives_what_the_session_reads(backend, request):
    """``verify._read_row`` without a transaction (the driver's cursor) and within one
    (the session's) give the same values and types on SQLite and PostgreSQL."""
    engine = request.getfixturevalue(backend)("lean")
    migrate(engine)
    with Session(engine, expire_on_commit=False) as s:
        learner = add_learner(s)
        cert = issue(s, learner, add_attempt(s, learner))
        new = store.reissue(session=s, cert_id=cert.id, learner_id=learner.id, new_name="Zoë Berg", lang="en",
                            show_new_id=True)
    for cert_id in (cert.id, new.id, ids.new_id()):
        with Session(engine) as s:
            lean = verify._read_row(s, cert_id)
            assert not s.in_transaction()
        with Session(engine) as s, s.begin():
            full = verify._read_row(s, cert_id)
        assert lean == full
        if lean is not None:
            assert [type(v) for v in lean] == [type(v) for v in full]
            assert lean.issued_at.tzinfo is not None and isinstance(lean.show_replacement, bool)
    old = verify._read_row(Session(engine), cert.id)
    assert (old.revoked_reason, old.replaced_by, old.show_replacement) == ("reissued", new.id, True)
    assert verify.lookup(session=Session(engine), text=cert.id).replaced_by == new.id
    engine.dispose()


def test_migration_0011_adds_and_removes_the_check():
    from tests.migrations import alembic, columns

    engine = make_engine("sqlite://", poolclass=StaticPool)
    migrate(engine)
    assert "check_mac" in columns(engine, "certificate")
    alembic(engine, "downgrade", "0010")
    assert "check_mac" not in columns(engine, "certificate")
    alembic(engine, "upgrade", "head")
    assert "check_mac" in columns(engine, "certificate")
    engine.dispose()


# --- Review 2026-12-04 I-3: the revocation state under its own keyed check -------------------------


def test_a_database_writer_cannot_un_revoke_revoke_or_re_point_a_certificate_unseen(session, monkeypatch):
    """Clearing ``revoked_at`` made a revoked row verify "valid". Every change of the state
    now carries the row-check key's HMAC of it; a state without its right check is trusted
    neither way (a forged revocation, a changed ``replaced_by``), and the public status list
    sets the bit of such a credential too."""
    from certificates import statuslist

    monkeypatch.setattr(statuslist, "TAMPER_SCAN_S", 0)  # each list scans afresh
    learner = add_learner(session)
    cert = issue(session, learner, add_attempt(session, learner))
    new = store.reissue(session=session, cert_id=cert.id, learner_id=learner.id, new_name="Zoë Berg", lang="nl")
    assert (verify.lookup(session=session, text=cert.id).status,
            verify.lookup(session=session, text=new.id).status) == ("replaced", "valid")
    store.revoke(session=session, cert_id=new.id, actor_id=None, reason="exam fraud")
    assert verify.lookup(session=session, text=new.id).status == "revoked"
    index = session.get(Certificate, new.id).status_index
    assert index is not None and index in statuslist.revoked_indexes(session)

    _set_row(session, new.id, revoked_at=None, revoked_reason=None)  # un-revoked in the database alone
    result = verify.lookup(session=session, text=new.id)
    assert (result.status, result.name) == ("bad_signature", None) and "revocation state" in result.detail
    assert index in statuslist.revoked_indexes(session), "the public list still says: not in force"

    other = add_learner(session, "ada@example.org")
    fine = issue(session, other, add_attempt(session, other))
    _set_row(session, fine.id, revoked_at=datetime(2026, 1, 1, tzinfo=UTC), revoked_reason="forged")
    assert verify.lookup(session=session, text=fine.id).status == "bad_signature"
    _set_row(session, fine.id, revoked_at=None, revoked_reason=None)  # put back as it was: in force again
    assert verify.lookup(session=session, text=fine.id).status == "valid"
    _set_row(session, cert.id, replaced_by=fine.id, show_replacement=True)  # pointed at someone else's
    assert verify.lookup(session=session, text=cert.id).status == "bad_signature"
    _set_row(session, fine.id, status_mac=None)
    assert verify.lookup(session=session, text=fine.id).status == "bad_signature"
    _set_row(session, fine.id, status_mac=signing.status_check(fine.id, None, None, None, False, bytes(32)))
    assert verify.lookup(session=session, text=fine.id).status == "bad_signature"  # a key of their own

    # The operator's add-checks seals each state as the database holds it now (its docstring says so).
    done = store.add_checks(session=session)
    assert (done.sealed, done.refused) == (3, [])
    assert [verify.lookup(session=session, text=c.id).status for c in (cert, new, fine)] == ["replaced", "valid",
                                                                                             "valid"]


def test_migration_0013_seals_the_rows_already_there(session, engine):
    from sqlalchemy import text

    from tests.migrations import alembic, columns

    learner = add_learner(session)
    cert = issue(session, learner, add_attempt(session, learner))
    store.revoke(session=session, cert_id=cert.id, actor_id=None, reason="issued in error")
    alembic(engine, "downgrade", "0012")
    assert "status_mac" not in columns(engine, "certificate")
    alembic(engine, "upgrade", "0013")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT status_mac FROM certificate")).scalar() is not None
    session.expire_all()
    assert verify.lookup(session=session, text=cert.id).status == "revoked"
