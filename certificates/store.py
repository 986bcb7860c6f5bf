"""Issuing, looking up, revoking and reissuing certificates.

Plain keyword-only functions over a sqlmodel ``Session``; each one that
changes something commits and records a ``CertificateEvent`` (who, when,
why).

The issuance policy (issue #17): a learner holds at most one active
certificate per course. The database enforces it (a unique partial index,
see ``academy.models.Certificate``); a different name or language goes through
``reissue``, which revokes the old certificate in the same transaction with
a conditional UPDATE, so concurrent reissues make exactly one replacement;
verification then calls the old one "replaced", not "revoked" (issue #22).
An admin's "revoke and disqualify" blocks new certificates for that learner
and course until an admin lifts it. Who may claim one is decided by
``certificates.eligibility.eligibility``, which the pages ask too.

Hands-on exercises (issue #16): with ``certificate_requires_exercises`` on
(the default) a learner's certificate also needs the exercises of
``labs.exercises.REQUIRED_FOR_CERTIFICATE`` passed; ``issue_certificate``
refuses with ``ExercisesMissing`` otherwise, whatever page or script asks, and
the passed exercises go into the signed payload, which the PDF and the Open
Badges credential then state.

Uploaded PDFs: the signed data is the authority. ``verify_pdf`` (offline,
the CLI's) reads the PDF only through ``pdfscan`` (size cap, one page, a
resource-limited child process) and checks the signature; ``check_pdf``
(the Verify page's) then looks the certificate up in the database. No
printed text is read: the reader compares the signed name and ID with the
document.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, func, select, update

from academy import exercises as exercise_store
from academy.accounts import joins_here as _joins_here
from academy.errors import UserError
from academy.models import Certificate, CertificateEvent, Learner, QuizAttempt, utcnow
from academy.settings import get_settings
from certificates import ids, keys, openbadges, pdf, pdfscan, signing
from certificates.eligibility import active_certificate, eligibility, eligible_attempt
from certificates.eligibility import (
    is_disqualified as is_disqualified,  # re-exported: callers ask the store
)
from certificates.i18n import languages, texts
from quizzes.store import passed_attempt

NAME_MAX = 200  # characters, after normalisation
# Characters a printed name must not hold: controls, unassigned and private
# code points, and format characters (Cf): zero-width spaces and joiners,
# word joiners and bidi controls, which are invisible or reorder the text,
# so two names that look alike would be signed differently (F-16).
HIDDEN_CATEGORIES = ("Cc", "Cf", "Cs", "Co", "Cn")
REASON_MAX = 500

# VerifyResult.status values. Only "valid" is good news.
STATUSES = (
    "valid",
    "revoked",  # withdrawn by the issuer (an admin: for cause, or issued in error)
    "replaced",  # superseded by a newer certificate of the same learner (a reissue), not for cause
    "not_found",
    "malformed",  # not shaped like an ID
    "typo",  # shaped like an ID, check digits wrong
    "bad_signature",  # payload or signature altered
    "unknown_key",  # signed by a key we do not know
    "no_payload",  # a PDF without embedded certificate data
    "unreadable",  # an upload that is not a readable PDF
    "too_large",  # an upload larger than a certificate PDF can be
    "pages",  # an upload with other than exactly one page
    "too_complex",  # an upload that needs more than the reader's limits
    "busy",  # the server is reading as many uploads as it allows at once
    "busy_client",  # this client's previous upload is still being read
)


class CertificateError(UserError):
    """Base of the errors below: each names its text in the UI catalog
    (``academy.errors``); ``str()`` is English, for the CLI."""

    key = "common.error"


class NotEligible(CertificateError):
    """No passed, finished, non-practice attempt to certify."""

    key = "certificate.err_not_eligible"


class ExercisesMissing(NotEligible):
    """The quiz is passed but required exercises are not (``missing``: their ids, in course order)."""

    key = "certificate.err_exercises"

    def __init__(self, missing: list[str]):
        super().__init__(count=len(missing), exercises=", ".join(missing))
        self.missing = missing


class CertificateNotFound(CertificateError):
    key = "admin_certs.not_found"


class AlreadyRevoked(CertificateError):
    key = "admin_certs.already"


class NotAllowed(CertificateError):
    """The actor may not do this (not an admin; not the certificate's owner)."""

    key = "certificate.err_not_allowed"


class AlreadyCertified(CertificateError):
    """The learner already holds an active certificate for the course, with
    another name or language: ``reissue`` it instead."""

    key = "certificate.already"

    def __init__(self, certificate_id: str):
        super().__init__(id=certificate_id)
        self.certificate_id = certificate_id


class Disqualified(CertificateError):
    """An admin revoked this learner's certificate for cause; no new one
    until an admin lifts it."""

    key = "certificate.disqualified"


class NotDisqualified(CertificateError):
    """Lifting a disqualification that is not there."""

    key = "admin_certs.not_blocked"


class Unchanged(CertificateError):
    """A reissue with the same name and language: nothing to make."""

    key = "certificate.unchanged"


class TooManyReissues(CertificateError):
    """More reissues in a day than ``REISSUES_PER_DAY`` (``count``)."""

    key = "certificate.too_many_reissues"


class InvalidInput(CertificateError, ValueError):
    key = "certificate.err_invalid"


class InvalidName(InvalidInput):
    """Empty, too long, hidden characters (``kind`` "hidden": controls,
    invisible, default-ignorable and bidi format characters), a pile of marks on
    one letter (``kind`` "stacked") or characters no font can print (``kind``
    "unprintable"), listed in ``chars``; the page names them."""

    def __init__(self, key: str, chars: list[str] | None = None, kind: str = "other", **values: Any):
        self.chars = chars or []
        self.kind = kind
        if kind in ("hidden", "stacked"):
            # Invisible characters and marks cannot be shown alone, so they are named:
            # "U+200B ZERO WIDTH SPACE".
            values["chars"] = ", ".join(char_names(self.chars[:10]))
        elif kind == "unprintable":
            values["chars"] = ", ".join(f"U+{ord(c):04X}" for c in self.chars[:10])
        super().__init__(key, **values)

    def text(self, lang: str) -> str:
        """Unprintable characters are named with their kind in ``lang``
        ("U+E000 (private-use character)"): most show as nothing or a box."""
        if self.kind == "unprintable":
            return pdf.refusal_message(self.chars[:10], lang)
        return super().text(lang)


@dataclass(frozen=True)
class VerifyResult:
    """What the Verify page and the CLI show. Public fields only, never e-mail."""

    status: str
    id: str | None = None
    name: str | None = None
    course: str | None = None  # course id, e.g. "data-parallelism"
    course_title: str | None = None  # in the certificate's language
    score: float | None = None  # percent
    pass_date: str | None = None  # ISO date
    lang: str | None = None
    issuer: str | None = None
    key_id: str | None = None
    issued_at: datetime | None = None  # database lookups only
    revoked_at: datetime | None = None  # when it was revoked or replaced
    # Public: "reissued", "superseded" or "revoked", never the admin's own words
    # (they may say why, e.g. "exam fraud").
    revoked_reason: str | None = None
    # The newer certificate of a "replaced" one, only if its holder chose to show it
    # when reissuing (issue #22): its page shows the new name, which may tell of a
    # change of name.
    replaced_by: str | None = None
    detail: str | None = None  # technical reason in English, for logs and the CLI

    @property
    def valid(self) -> bool:
        return self.status == "valid"


def clean_name(name: str) -> str:
    """The name as it will be printed and signed: NFC, trimmed, single spaces."""
    if not isinstance(name, str):
        raise InvalidName("certificate.empty_name")
    name = " ".join(unicodedata.normalize("NFC", name).split())
    if not name:
        raise InvalidName("certificate.empty_name")
    if len(name) > NAME_MAX:
        raise InvalidName("certificate.err_name_long", max=NAME_MAX)
    hidden = list(dict.fromkeys(c for i, c in enumerate(name) if _hidden_here(name, i)))
    if hidden:
        raise InvalidName("certificate.err_hidden", hidden, "hidden")
    stacked = _stacked_marks(name)
    if stacked:
        raise InvalidName("certificate.err_stacked", stacked, "stacked", count=MARKS_MAX)
    missing = pdf.unprintable_chars(name)
    if missing:
        raise InvalidName("certificate.err_unprintable", missing, "unprintable")
    return name


# Unicode's Default_Ignorable_Code_Point ranges (DerivedCoreProperties.txt), which
# the standard library cannot look up, plus the blank Braille pattern: characters
# that show as nothing, so a name with them looks like one without. Most are Cf
# (caught by category anyway); these are the ones that are not.
_IGNORABLE = (
    (0x034F, 0x034F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x2800, 0x2800),
    (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFFA0, 0xFFA0), (0x1D173, 0x1D17A), (0xE0100, 0xE01EF),
)
REISSUES_PER_DAY = 5
MARKS_MAX = 4  # combining marks in a row: Vietnamese and Indic names need 2 or 3


def _ignorable(c: str) -> bool:
    return any(lo <= ord(c) <= hi for lo, hi in _IGNORABLE)


def _hidden_here(name: str, i: int) -> bool:
    """Whether ``name[i]`` is invisible where it stands: controls, format and
    unassigned characters and default-ignorable ones, except joiners between
    letters of scripts that use them and a variation selector after an emoji."""
    c = name[i]
    if unicodedata.category(c) in HIDDEN_CATEGORIES:
        return not _joins_here(name, i)
    if not _ignorable(c):
        return False
    # U+FE0E/FE0F choose text or emoji style after a pictograph, a digit or # and * (keycaps).
    return not (c in "\ufe0e\ufe0f" and i > 0
                and (unicodedata.category(name[i - 1]) in ("So", "Sk") or name[i - 1] in "0123456789#*"))


def _stacked_marks(name: str) -> list[str]:
    """The marks of a run of more than MARKS_MAX combining marks (a "zalgo" name that
    draws over the lines around it), or none."""
    run: list[str] = []
    for c in name:
        if unicodedata.category(c) in ("Mn", "Me"):
            run.append(c)
            if len(run) > MARKS_MAX:
                return list(dict.fromkeys(run))
        else:
            run = []
    return []


def char_names(chars: list[str]) -> list[str]:
    """``U+200B ZERO WIDTH SPACE`` for each character: how a page names
    characters that cannot be seen."""
    return [f"U+{ord(c):04X} {unicodedata.name(c, '')}".strip() for c in chars]


def _check_score(score: float) -> float:
    try:
        score = float(score)
    except (TypeError, ValueError) as e:
        raise InvalidInput(field="score") from e
    if not 0 <= score <= 100:
        raise InvalidInput(field="score")
    return score


def _check_date(pass_date: str | date) -> str:
    if isinstance(pass_date, datetime):
        pass_date = pass_date.date()
    try:
        return date.fromisoformat(str(pass_date)).isoformat()
    except ValueError as e:
        raise InvalidInput(field="pass_date") from e


def attempt_date(attempt: QuizAttempt) -> str:
    return (attempt.finished_at or attempt.started_at).date().isoformat()


def _event(cert_id: str, action: str, actor_id: int | None, reason: str | None = None):
    return CertificateEvent(certificate_id=cert_id, action=action, actor_id=actor_id, reason=reason)


def _build(
    cert_id: str,
    *,
    learner_id: int | None,
    attempt_id: int | None,
    name: str,
    lang: str,
    score: float,
    pass_date: str,
    exercises: list[str] | tuple[str, ...] = (),
) -> Certificate:
    settings = get_settings()
    signed = signing.sign(
        signing.make_payload(
            cert_id=cert_id,
            name=name,
            course=settings.course_id,
            score=score,
            pass_date=pass_date,
            lang=lang,
            issuer=settings.issuer,
            exercises=exercises,
        )
    )
    return Certificate(
        id=cert_id,
        learner_id=learner_id,
        attempt_id=attempt_id,
        name=name,
        course_id=settings.course_id,
        score=score,
        language=lang,
        pass_date=pass_date,
        key_id=signed.kid,
        payload=signed.payload,
        signature=signed.signature,
    )


def _commit_with_fresh_id(session: Session, make: Callable[[str], list[Any]]) -> Any:
    """Add ``make(new_id)``'s rows and commit; on an ID collision (another
    process took the same ID in between) roll back and try a new ID."""
    for _ in range(8):
        cert_id = ids.new_id()
        if session.get(Certificate, cert_id) is not None:
            continue
        rows = make(cert_id)
        session.add_all(rows)
        try:
            session.commit()
        except IntegrityError:
            session.rollback()
            if session.get(Certificate, cert_id) is None:
                raise  # some other constraint, not a collision
            continue
        for row in rows:
            session.refresh(row)
        return rows[0]
    raise RuntimeError("no free certificate ID after 8 tries")


def issue_certificate(
    *,
    session: Session,
    learner_id: int | None,
    attempt_id: int | None,
    name: str,
    lang: str,
    score: float,
    pass_date: str | date,
    actor_id: int | None = None,
) -> Certificate:
    """Sign and store a certificate; commits.

    A learner's certificate needs ``attempt_id`` of their passed, finished,
    non-practice attempt (``NotEligible`` otherwise), and then what
    ``certificates.eligibility.eligibility`` answers, the rule the pages show:
    no disqualification (``Disqualified``); one active certificate per course,
    so asking again with the same name and language returns it (a double
    click, a second tab) and another name or language raises
    ``AlreadyCertified`` (use ``reissue``); with
    ``certificate_requires_exercises`` on, the required exercises passed
    (``ExercisesMissing``), which the certificate then names. ``learner_id=None`` and ``attempt_id=None`` issue a
    certificate tied to nobody (admin CLI), which the policy does not limit.
    """
    name = clean_name(name)
    if lang not in languages():
        raise InvalidInput(field="lang")
    score = _check_score(score)
    pass_date = _check_date(pass_date)
    passed_exercises: list[str] = []
    if learner_id is not None or attempt_id is not None:
        attempt = session.exec(
            select(QuizAttempt.id).where(
                QuizAttempt.id == attempt_id, QuizAttempt.learner_id == learner_id, passed_attempt()
            )
        ).first()
        if attempt is None:
            raise NotEligible  # not a passed attempt of this learner's, whatever the rule says
        verdict = eligibility(session=session, learner_id=learner_id)
        if verdict.reason == "disqualified":
            raise Disqualified
        if verdict.reason == "already_issued":
            return _same_or_refuse(get_certificate(session=session, cert_id=verdict.certificate_id), name, lang)
        if verdict.reason == "exercises_missing":
            raise ExercisesMissing(list(verdict.missing))
        if not verdict.eligible:
            raise NotEligible
        passed_exercises = exercise_store.certified_exercises(session=session, learner_id=learner_id)

    def make(cert_id: str) -> list[Any]:
        cert = _build(
            cert_id,
            learner_id=learner_id,
            attempt_id=attempt_id,
            name=name,
            lang=lang,
            score=score,
            pass_date=pass_date,
            exercises=passed_exercises,
        )
        actor = actor_id if actor_id is not None else learner_id
        return [cert, _event(cert_id, "issued", actor)]

    try:
        cert = _commit_with_fresh_id(session, make)
    except IntegrityError:
        # Another request issued one between our check and our commit: the
        # unique index kept it to one. Answer as if we had come second.
        existing = active_certificate(session=session, learner_id=learner_id) if learner_id is not None else None
        if existing is None:
            raise
        return _same_or_refuse(existing, name, lang)
    # Its Open Badges form and status-list bit, made once (certificates/openbadges.py).
    return openbadges.ensure_credential(session=session, cert=cert)


def _same_or_refuse(existing: Certificate, name: str, lang: str) -> Certificate:
    if existing.name == name and existing.language == lang:
        return existing
    raise AlreadyCertified(existing.id)


def certified_exercises(cert: Certificate) -> list[str]:
    """The exercises a certificate states, from its signed payload (none before version 2)."""
    return list(json.loads(cert.payload).get("exercises") or [])


def issue_for_learner(*, session: Session, learner_id: int, name: str, lang: str) -> Certificate:
    """Issue (or return) the learner's certificate for their best passed attempt."""
    attempt = eligible_attempt(session=session, learner_id=learner_id)
    if attempt is None:
        raise NotEligible  # issue_certificate asks eligibility() for the rest
    return issue_certificate(
        session=session,
        learner_id=learner_id,
        attempt_id=attempt.id,
        name=name,
        lang=lang,
        score=float(attempt.score or 0.0),  # stored in percent
        pass_date=attempt_date(attempt),
    )


def _public(
    cert: Certificate | None, payload: dict[str, Any], status: str, **extra: Any
) -> VerifyResult:
    """A result from the *signed* payload (what the PDF says), plus row state."""
    lang = payload.get("lang")
    return VerifyResult(
        status=status,
        id=payload.get("id"),
        name=payload.get("name"),
        course=payload.get("course"),
        course_title=texts(lang)["course_title"] if lang in languages() else None,
        score=payload.get("score"),
        pass_date=payload.get("pass_date"),
        lang=lang,
        issuer=payload.get("issuer"),
        key_id=payload.get("kid"),
        issued_at=cert.issued_at if cert is not None else None,
        revoked_at=cert.revoked_at if cert is not None else None,
        revoked_reason=public_reason(cert.revoked_reason) if cert is not None else None,
        **extra,
    )


def public_reason(reason: str | None) -> str | None:
    """What anyone may read about why a certificate was revoked: its kind only."""
    if reason is None:
        return None
    return {"reissued": "reissued", "superseded by policy": "superseded"}.get(reason, "revoked")


REPLACED_REASONS = ("reissued", "superseded")  # public reasons that mean "replaced", not revoked


def row_status(cert: Certificate) -> str:
    """"valid", "replaced" (a newer certificate of the same learner took its place:
    a reissue, or the one-certificate policy) or "revoked" (by an admin)."""
    if cert.revoked_at is None:
        return "valid"
    return "replaced" if public_reason(cert.revoked_reason) in REPLACED_REASONS else "revoked"


def lookup(*, session: Session, text: str) -> VerifyResult:
    """Check typed text (an ID or a pasted link) against the database."""
    try:
        cert_id = ids.parse_id(text)
    except ids.InvalidId as e:
        return VerifyResult(status=e.kind, detail=str(e))
    cert = session.get(Certificate, cert_id)
    if cert is None:
        return VerifyResult(status="not_found", id=cert_id)
    try:
        payload = signing.verify(
            cert.payload.encode("utf-8"), cert.signature, keys.local_public_keys()
        )
    except signing.SignatureError as e:
        # The stored row no longer matches what was signed: show nothing of it.
        return VerifyResult(status=e.kind, id=cert_id, detail=str(e))
    if payload["id"] != cert_id:
        return VerifyResult(status="bad_signature", id=cert_id, detail="payload is for another ID")
    status = row_status(cert)
    shown = cert.replaced_by if status == "replaced" and cert.show_replacement else None
    return _public(cert, payload, status, replaced_by=shown)


def get_certificate(*, session: Session, cert_id: str) -> Certificate:
    """The row for an ID as typed (``InvalidId`` or ``CertificateNotFound``)."""
    cert = session.get(Certificate, ids.parse_id(cert_id))
    if cert is None:
        raise CertificateNotFound(id=cert_id)
    return cert


def _check_reason(reason: str) -> str:
    reason = " ".join((reason or "").split())
    if not reason:
        raise InvalidInput(field="reason")
    if len(reason) > REASON_MAX:
        raise InvalidInput(field="reason")
    return reason


def _check_admin(session: Session, actor_id: int | None, what: str) -> None:
    if actor_id is not None:
        actor = session.get(Learner, actor_id)
        if actor is None or not actor.is_admin:
            raise NotAllowed(what=what)


def _claim(session: Session, cert_id: str, **values: Any) -> None:
    """Revoke ``cert_id`` with ``values`` only if it is still active: a
    conditional UPDATE whose row count says whether this request won, so two
    concurrent revocations or reissues cannot both succeed."""
    done = session.exec(
        update(Certificate)
        .where(col(Certificate.id) == cert_id, col(Certificate.revoked_at).is_(None))
        .values(revoked_at=utcnow(), **values)
    )
    if done.rowcount != 1:
        session.rollback()
        raise AlreadyRevoked(id=cert_id)


def revoke(
    *, session: Session, cert_id: str, actor_id: int | None, reason: str, disqualify: bool = False
) -> Certificate:
    """Revoke a certificate (admins; ``actor_id=None`` is the operator's CLI).

    ``disqualify=True`` is revocation for cause: the learner gets no new
    certificate for the course until ``lift_disqualification``. Without it
    (a misspelt name, issued in error) the learner may claim a new one.
    """
    cert = get_certificate(session=session, cert_id=cert_id)
    _check_admin(session, actor_id, "revoke certificates")
    reason = _check_reason(reason)
    if cert.revoked_at is not None:
        raise AlreadyRevoked(id=cert.id)
    _claim(session, cert.id, revoked_reason=reason, disqualified=disqualify)
    session.add(_event(cert.id, "revoked", actor_id, reason))
    if disqualify:
        session.add(_event(cert.id, "disqualified", actor_id, reason))
    session.commit()
    session.refresh(cert)
    return cert


def lift_disqualification(
    *, session: Session, cert_id: str, actor_id: int | None, reason: str | None = None
) -> Certificate:
    """Let the learner of a certificate revoked for cause claim a new one
    (admins). The revoked certificate stays revoked."""
    cert = get_certificate(session=session, cert_id=cert_id)
    _check_admin(session, actor_id, "lift disqualifications")
    reason = _check_reason(reason) if reason and reason.strip() else None
    done = session.exec(
        update(Certificate)
        .where(col(Certificate.id) == cert.id, Certificate.disqualified == True)  # noqa: E712
        .values(disqualified=False)
    )
    if done.rowcount != 1:
        session.rollback()
        raise NotDisqualified(id=cert.id)
    session.add(_event(cert.id, "lifted", actor_id, reason))
    session.commit()
    session.refresh(cert)
    return cert


def disqualified_certificates(*, session: Session) -> list[Certificate]:
    """Certificates revoked for cause whose block is not lifted (Admin page)."""
    return list(
        session.exec(
            select(Certificate)
            .where(Certificate.disqualified == True)  # noqa: E712
            .order_by(col(Certificate.revoked_at).desc())
        ).all()
    )


def reissue(
    *, session: Session, cert_id: str, learner_id: int, new_name: str, lang: str,
    show_new_id: bool = False,
) -> Certificate:
    """A learner's new certificate (new name and/or language) for the same
    pass; the old one is revoked with reason "reissued" (its status is then
    "replaced", not "revoked") and points to it. ``show_new_id`` is the
    learner's choice: the old certificate's public verification names the
    new ID (off by default, as the new name may tell of a change of name).

    One transaction: a conditional UPDATE revokes the old certificate only
    if it is still active (else ``AlreadyRevoked``), then the new one is
    inserted. Of several concurrent reissues exactly one wins."""
    old = get_certificate(session=session, cert_id=cert_id)
    if old.learner_id is None or old.learner_id != learner_id:
        raise NotAllowed
    if old.revoked_at is not None:
        raise AlreadyRevoked(id=old.id)
    name = clean_name(new_name)
    if lang not in languages():
        raise InvalidInput(field="lang")
    if (name, lang) == (old.name, old.language):
        raise Unchanged()
    # Each certificate takes a bit of the public status list for good: a learner
    # cannot burn through it (or the audit log) by reissuing in a loop.
    since = utcnow() - timedelta(days=1)
    recent = session.exec(
        select(func.count()).where(
            CertificateEvent.action == "reissued", CertificateEvent.actor_id == learner_id,
            col(CertificateEvent.at) >= since,
        )
    ).one()
    if recent >= REISSUES_PER_DAY:
        raise TooManyReissues(count=REISSUES_PER_DAY)
    old_id, attempt_id, score, pass_date = old.id, old.attempt_id, old.score, old.pass_date
    # The same achievement under a new name: the exercises it stated, and no others.
    passed_exercises = certified_exercises(old)
    for _ in range(8):
        new_id = ids.new_id()
        _claim(session, old_id, revoked_reason="reissued", replaced_by=new_id, show_replacement=show_new_id)
        new = _build(
            new_id,
            learner_id=learner_id,
            attempt_id=attempt_id,
            name=name,
            lang=lang,
            score=score,
            pass_date=pass_date,
            exercises=passed_exercises,
        )
        session.add_all(
            [
                new,
                _event(new_id, "issued", learner_id, f"reissue of {old_id}"),
                _event(old_id, "reissued", learner_id, f"replaced by {new_id}"),
            ]
        )
        try:
            session.commit()
        except IntegrityError:
            session.rollback()  # undoes the UPDATE too
            if session.get(Certificate, new_id) is None:
                raise  # some other constraint, not an ID collision
            continue
        session.refresh(new)
        session.refresh(old)
        return openbadges.ensure_credential(session=session, cert=new)
    raise RuntimeError("no free certificate ID after 8 tries")


def certificates_of(*, session: Session, learner_id: int) -> list[Certificate]:
    """The learner's certificates, newest first (revoked ones included)."""
    return list(
        session.exec(
            select(Certificate)
            .where(Certificate.learner_id == learner_id)
            .order_by(col(Certificate.issued_at).desc())
        ).all()
    )


def events_of(*, session: Session, cert_id: str) -> list[CertificateEvent]:
    """The audit trail of one certificate, oldest first."""
    return list(
        session.exec(
            select(CertificateEvent)
            .where(CertificateEvent.certificate_id == cert_id)
            .order_by(col(CertificateEvent.at), col(CertificateEvent.id))
        ).all()
    )


def verify_link(cert: Certificate) -> str:
    """The public verification link (what the QR code holds)."""
    return pdf.verify_url(get_settings().public_url, cert.id)


def render_pdf(cert: Certificate) -> bytes:
    """The certificate PDF, carrying its signed payload (for ``verify FILE.pdf``) and its
    Open Badges credential as attached files."""
    printed = pdf.render(
        payload=cert.payload, signature=cert.signature, public_url=get_settings().public_url
    )
    return openbadges.attach_to_pdf(printed, cert)


def pdf_filename(cert: Certificate) -> str:
    return f"certificate-{cert.id}.pdf"


def verify_pdf(
    pdf_bytes: bytes, *, keys_file: Path | None = None, secrets_dir: Path | None = None,
    client: str | None = None,
) -> VerifyResult:
    """Check a certificate PDF offline: its embedded signature against the
    known public keys (the local key folder plus ``keys_file``) and the ID's
    check digits. The file is read only through ``pdfscan`` (size cap,
    exactly one page, a limited child process, one at a time per ``client``).
    No printed text is compared: the result carries the signed name and ID for
    a person to compare with the document. Revocation cannot be seen offline;
    ``check_pdf`` sees it."""
    found = pdfscan.scan(pdf_bytes, client=client)
    if found.status != "ok":
        return VerifyResult(status=found.status, detail=found.detail)
    token = pdf.extract_token(found.keywords or "")
    if token is None:
        return VerifyResult(status="no_payload", detail="no embedded certificate data")
    payload_bytes, signature = token
    try:
        payload = signing.verify(payload_bytes, signature, keys.public_keys(secrets_dir, keys_file))
    except signing.SignatureError as e:
        return VerifyResult(status=e.kind, detail=str(e))
    try:
        if ids.parse_id(payload["id"]) != payload["id"]:
            raise ids.MalformedId("ID is not in canonical form")
    except ids.InvalidId as e:
        return VerifyResult(status=e.kind, detail=str(e))
    return _public(None, payload, "valid")


def check_pdf(*, session: Session, pdf_bytes: bytes, client: str | None = None) -> VerifyResult:
    """The Verify page's check of an uploaded PDF: ``verify_pdf``, then the
    database, which knows revocation and replacement (F-6, #22). ``client`` is the
    uploader's address: one upload of theirs is read at a time (N-9)."""
    offline = verify_pdf(pdf_bytes, client=client)
    if not offline.valid:
        return offline
    online = lookup(session=session, text=offline.id)
    signed = (offline.id, offline.name, offline.course, offline.score, offline.pass_date, offline.lang)
    if online.status not in ("valid", "revoked", "replaced"):
        return VerifyResult(status="not_found", id=offline.id, detail="signed, but not in this site's records")
    if (online.id, online.name, online.course, online.score, online.pass_date, online.lang) != signed:
        return VerifyResult(status="not_found", id=offline.id, detail="the records hold other data for this ID")
    return online
