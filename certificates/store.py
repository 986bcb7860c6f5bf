"""Issuing, looking up, revoking and reissuing certificates.

Plain keyword-only functions over a sqlmodel ``Session``; each one that
changes something commits and records a ``CertificateEvent`` (who, when,
why). ``verify_pdf`` needs no database at all.
"""

from __future__ import annotations

import io
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

from pypdf import PdfReader
from pypdf.errors import PyPdfError
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from app.models import Certificate, CertificateEvent, Learner, QuizAttempt, utcnow
from app.settings import get_settings
from certificates import ids, keys, pdf, signing
from certificates.i18n import LANGS, texts

NAME_MAX = 200  # characters, after normalisation
BIDI_CONTROLS = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")  # would make a name read reversed
REASON_MAX = 500

# VerifyResult.status values. Only "valid" is good news.
STATUSES = (
    "valid",
    "revoked",
    "not_found",
    "malformed",  # not shaped like an ID
    "typo",  # shaped like an ID, check digits wrong
    "bad_signature",  # payload or signature altered
    "unknown_key",  # signed by a key we do not know
    "no_payload",  # a PDF without embedded certificate data
    "mismatch",  # a PDF whose printed text is not its signed data
)


class CertificateError(Exception):
    """Base of the errors below."""


class NotEligible(CertificateError):
    """No passed, finished, non-practice attempt to certify."""


class CertificateNotFound(CertificateError):
    pass


class AlreadyRevoked(CertificateError):
    pass


class NotAllowed(CertificateError):
    """The actor may not do this (not an admin; not the certificate's owner)."""


class InvalidInput(CertificateError, ValueError):
    pass


class InvalidName(InvalidInput):
    """Empty, too long, control characters, or characters no font can print
    (listed in ``chars``, for the page to show)."""

    def __init__(self, message: str, chars: list[str] | None = None):
        super().__init__(message)
        self.chars = chars or []


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
    revoked_at: datetime | None = None
    revoked_reason: str | None = None
    replaced_by: str | None = None
    detail: str | None = None  # technical reason in English, for logs and the CLI

    @property
    def valid(self) -> bool:
        return self.status == "valid"


def clean_name(name: str) -> str:
    """The name as it will be printed and signed: NFC, trimmed, single spaces."""
    if not isinstance(name, str):
        raise InvalidName("name must be text")
    name = " ".join(unicodedata.normalize("NFC", name).split())
    if not name:
        raise InvalidName("name is empty")
    if len(name) > NAME_MAX:
        raise InvalidName(f"name is longer than {NAME_MAX} characters")
    bad = [c for c in name if unicodedata.category(c) in ("Cc", "Cs", "Co", "Cn") or c in BIDI_CONTROLS]
    if bad:
        raise InvalidName("name contains control or unassigned characters", bad)
    missing = pdf.unprintable_chars(name)
    if missing:
        raise InvalidName("name contains characters the certificate fonts cannot print", missing)
    return name


def _check_score(score: float) -> float:
    try:
        score = float(score)
    except (TypeError, ValueError) as e:
        raise InvalidInput("score must be a number") from e
    if not 0 <= score <= 100:
        raise InvalidInput("score is a percentage, 0 to 100")
    return score


def _check_date(pass_date: str | date) -> str:
    if isinstance(pass_date, datetime):
        pass_date = pass_date.date()
    try:
        return date.fromisoformat(str(pass_date)).isoformat()
    except ValueError as e:
        raise InvalidInput("pass_date must be an ISO date, YYYY-MM-DD") from e


def attempt_percent(attempt: QuizAttempt) -> float:
    """The attempt's score in percent (a passed attempt scores at least the pass
    mark, so a stored value up to 1.0 can only be a fraction)."""
    score = float(attempt.score or 0.0)
    return score * 100 if score <= 1.0 else score


def attempt_date(attempt: QuizAttempt) -> str:
    return (attempt.finished_at or attempt.started_at).date().isoformat()


def eligible_attempt(*, session: Session, learner_id: int) -> QuizAttempt | None:
    """The learner's best passed, finished, non-practice attempt (earliest of equals)."""
    return session.exec(
        select(QuizAttempt)
        .where(
            QuizAttempt.learner_id == learner_id,
            QuizAttempt.course_id == get_settings().course_id,
            QuizAttempt.passed == True,  # noqa: E712  (SQL, not Python truth)
            QuizAttempt.practice == False,  # noqa: E712
            QuizAttempt.status == "finished",
        )
        .order_by(col(QuizAttempt.score).desc(), col(QuizAttempt.finished_at).asc())
    ).first()


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
    non-practice attempt (``NotEligible`` otherwise). ``learner_id=None``
    and ``attempt_id=None`` issue a certificate tied to nobody (admin CLI).
    Asking again for the same learner, attempt, name and language returns
    the existing valid certificate instead of a duplicate.
    """
    name = clean_name(name)
    if lang not in LANGS:
        raise InvalidInput(f"language must be one of {LANGS}")
    score = _check_score(score)
    pass_date = _check_date(pass_date)
    if learner_id is not None or attempt_id is not None:
        attempt = session.get(QuizAttempt, attempt_id) if attempt_id is not None else None
        if (
            attempt is None
            or attempt.learner_id != learner_id
            or attempt.passed is not True
            or attempt.practice
            or attempt.status != "finished"
        ):
            raise NotEligible("certificates are issued for the learner's passed quiz attempt")
        existing = session.exec(
            select(Certificate).where(
                Certificate.learner_id == learner_id,
                Certificate.attempt_id == attempt_id,
                Certificate.name == name,
                Certificate.language == lang,
                col(Certificate.revoked_at).is_(None),
            )
        ).first()
        if existing is not None:
            return existing

    def make(cert_id: str) -> list[Any]:
        cert = _build(
            cert_id,
            learner_id=learner_id,
            attempt_id=attempt_id,
            name=name,
            lang=lang,
            score=score,
            pass_date=pass_date,
        )
        actor = actor_id if actor_id is not None else learner_id
        return [cert, _event(cert_id, "issued", actor)]

    return _commit_with_fresh_id(session, make)


def issue_for_learner(*, session: Session, learner_id: int, name: str, lang: str) -> Certificate:
    """Issue (or return) the learner's certificate for their best passed attempt."""
    attempt = eligible_attempt(session=session, learner_id=learner_id)
    if attempt is None:
        raise NotEligible("the learner has not passed the quiz")
    return issue_certificate(
        session=session,
        learner_id=learner_id,
        attempt_id=attempt.id,
        name=name,
        lang=lang,
        score=attempt_percent(attempt),
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
        course_title=texts(lang)["course_title"] if lang in LANGS else None,
        score=payload.get("score"),
        pass_date=payload.get("pass_date"),
        lang=lang,
        issuer=payload.get("issuer"),
        key_id=payload.get("kid"),
        issued_at=cert.issued_at if cert is not None else None,
        revoked_at=cert.revoked_at if cert is not None else None,
        revoked_reason=cert.revoked_reason if cert is not None else None,
        replaced_by=cert.replaced_by if cert is not None else None,
        **extra,
    )


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
    status = "revoked" if cert.revoked_at is not None else "valid"
    return _public(cert, payload, status)


def get_certificate(*, session: Session, cert_id: str) -> Certificate:
    """The row for an ID as typed (``InvalidId`` or ``CertificateNotFound``)."""
    cert = session.get(Certificate, ids.parse_id(cert_id))
    if cert is None:
        raise CertificateNotFound(cert_id)
    return cert


def _check_reason(reason: str) -> str:
    reason = " ".join((reason or "").split())
    if not reason:
        raise InvalidInput("a reason is required")
    if len(reason) > REASON_MAX:
        raise InvalidInput(f"reason is longer than {REASON_MAX} characters")
    return reason


def revoke(*, session: Session, cert_id: str, actor_id: int | None, reason: str) -> Certificate:
    """Revoke a certificate (admins; ``actor_id=None`` is the operator's CLI)."""
    cert = get_certificate(session=session, cert_id=cert_id)
    if actor_id is not None:
        actor = session.get(Learner, actor_id)
        if actor is None or not actor.is_admin:
            raise NotAllowed("only admins revoke certificates")
    reason = _check_reason(reason)
    if cert.revoked_at is not None:
        raise AlreadyRevoked(cert.id)
    cert.revoked_at = utcnow()
    cert.revoked_reason = reason
    session.add(cert)
    session.add(_event(cert.id, "revoked", actor_id, reason))
    session.commit()
    session.refresh(cert)
    return cert


def reissue(
    *, session: Session, cert_id: str, learner_id: int, new_name: str, lang: str
) -> Certificate:
    """A learner's new certificate (new name and/or language) for the same
    pass; the old one is revoked with reason "reissued" and points to it."""
    old = get_certificate(session=session, cert_id=cert_id)
    if old.learner_id is None or old.learner_id != learner_id:
        raise NotAllowed("only the certificate's owner reissues it")
    if old.revoked_at is not None:
        raise AlreadyRevoked(old.id)
    name = clean_name(new_name)
    if lang not in LANGS:
        raise InvalidInput(f"language must be one of {LANGS}")
    old_id = old.id

    def make(new_id: str) -> list[Any]:
        new = _build(
            new_id,
            learner_id=learner_id,
            attempt_id=old.attempt_id,
            name=name,
            lang=lang,
            score=old.score,
            pass_date=old.pass_date,
        )
        old.revoked_at = utcnow()
        old.revoked_reason = "reissued"
        old.replaced_by = new_id
        return [
            new,
            old,
            _event(new_id, "issued", learner_id, f"reissue of {old_id}"),
            _event(old_id, "reissued", learner_id, f"replaced by {new_id}"),
        ]

    return _commit_with_fresh_id(session, make)


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
    return pdf.render(
        payload=cert.payload, signature=cert.signature, public_url=get_settings().public_url
    )


def pdf_filename(cert: Certificate) -> str:
    return f"certificate-{cert.id}.pdf"


def _squash(text: str) -> str:
    return "".join(unicodedata.normalize("NFC", text).split())


def verify_pdf(
    pdf_bytes: bytes, *, keys_file: Path | None = None, secrets_dir: Path | None = None
) -> VerifyResult:
    """Check a certificate PDF offline: its embedded signature against the
    known public keys (the local key folder plus ``keys_file``), the ID's
    check digits, and that the printed name and ID are the signed ones.
    Revocation cannot be seen offline; ``lookup`` sees it."""
    try:
        reader = PdfReader(io.BytesIO(pdf_bytes))
        keywords = str((reader.metadata or {}).get("/Keywords") or "")
    except (PyPdfError, ValueError, OSError) as e:
        return VerifyResult(status="no_payload", detail=f"not a readable PDF: {e}")
    token = pdf.extract_token(keywords)
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
    try:
        printed = _squash(" ".join(page.extract_text() or "" for page in reader.pages))
    except (PyPdfError, ValueError, KeyError) as e:
        printed = ""
        detail = f"text extraction failed: {e}"
    else:
        detail = "printed name or ID differs from the signed data"
    if _squash(payload["name"]) not in printed or payload["id"] not in printed:
        return _public(None, payload, "mismatch", detail=detail)
    return _public(None, payload, "valid")
