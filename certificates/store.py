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

Each row also carries the server's keyed check of its payload and signature
(``signing.row_check``), which lets a look-up trust it without an Ed25519
verify; ``add_checks`` gives one to rows issued before there was one.

What a certificate signs names the academy by its public address
(``certificates.address.public_url``); issuing and reissuing ask that address
first whether it answers as this academy (``certificates.addresscheck``), so
that no certificate is made with a dead link. A certificate keeps the address
it was issued under in its Open Badge; its PDF and verification link are made
with the address of the day.

Neighbours: the refusals are ``certificates.errors``; which names may be
printed is ``certificates.names`` (``clean_name``); whether a certificate is
genuine and in force (the Verify page, the API, the CLI) is
``certificates.verify``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import date, datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, func, select, update

from academy import exercises as exercise_store
from academy.models import Certificate, CertificateEvent, Learner, QuizAttempt, utcnow
from academy.settings import get_settings
from certificates import address, addresscheck, ids, keys, openbadges, pdf, signing
from certificates.eligibility import active_certificate, eligibility, eligible_attempt
from certificates.errors import (
    AlreadyCertified,
    AlreadyRevoked,
    CertificateNotFound,
    Disqualified,
    ExercisesMissing,
    InvalidInput,
    NotAllowed,
    NotDisqualified,
    NotEligible,
    TooManyReissues,
    Unchanged,
)
from certificates.i18n import languages
from certificates.names import clean_name
from quizzes.store import passed_attempt

REASON_MAX = 500
REISSUES_PER_DAY = 5


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
        check_mac=signing.row_check(signed.payload, signed.signature, keys.check_key()),
        status_mac=signing.status_check(cert_id, None, None, None, False, keys.check_key()),
    )


def _commit_with_fresh_id(session: Session, make: Callable[[str], list[Any]]) -> Any:
    """Add ``make(new_id)``'s rows and commit; on an ID collision (another
    process took the same ID in between) roll back, which also undoes what
    ``make`` changed (``reissue``'s claim on the old certificate), and try a
    new ID."""
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
    Either way the public address must answer as this academy first
    (``certificates.addresscheck``, else ``AddressUnreachable``).
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
    # The links it signs must reach this academy, or the certificate is dead on arrival.
    addresscheck.require()

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


def stated_exercises(cert: Certificate) -> list[str]:
    """The exercises a certificate states, from its signed payload (none before version 2);
    not ``academy.exercises.certified_exercises``, the passes a new certificate would state."""
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


def _claim(session: Session, cert_id: str, *, revoked_reason: str, replaced_by: str | None = None,
           show_replacement: bool = False, **values: Any) -> None:
    """Revoke ``cert_id`` only if it is still active: a conditional UPDATE whose row
    count says whether this request won, so two concurrent revocations or reissues
    cannot both succeed. The new state gets its keyed check (``status_mac``)."""
    now = utcnow()
    mac = signing.status_check(cert_id, now, revoked_reason, replaced_by, show_replacement, keys.check_key())
    done = session.exec(
        update(Certificate)
        .where(col(Certificate.id) == cert_id, col(Certificate.revoked_at).is_(None))
        .values(revoked_at=now, revoked_reason=revoked_reason, replaced_by=replaced_by,
                show_replacement=show_replacement, status_mac=mac, **values)
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
    passed_exercises = stated_exercises(old)
    addresscheck.require()  # before the old one is replaced: its links must reach us

    def make(new_id: str) -> list[Any]:
        # Claimed again for each new ID: a collision's rollback undoes the UPDATE too.
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
        return [
            new,
            _event(new_id, "issued", learner_id, f"reissue of {old_id}"),
            _event(old_id, "reissued", learner_id, f"replaced by {new_id}"),
        ]

    new = _commit_with_fresh_id(session, make)
    session.refresh(old)
    return openbadges.ensure_credential(session=session, cert=new)


class AddedChecks(NamedTuple):
    rows: int  # rows read
    added: int  # checks written
    refused: list[str]  # IDs whose signature does not verify: left without a right check
    sealed: int = 0  # revocation states given their check (status_mac) as they stand


def add_checks(*, session: Session, batch: int = 1000) -> AddedChecks:
    """Give every row whose keyed check (``Certificate.check_mac``) is missing or
    not this check key's its check, once its Ed25519 signature verifies against
    the local keys for its own ID: rows issued before migration 0011, or all of
    them after the check key was replaced. A row that does not verify is left as
    it is (a look-up answers "bad_signature" or "unknown_key" for it, as before).

    The same for the check of each row's revocation state (``status_mac``, migration
    0013): a row whose state has no right check (the migration ran away from the keys,
    or the check key was replaced) gets one for its state as it stands now. That trusts
    the database as it is at this moment: run it only where nobody else has written it.
    Commits per ``batch`` rows, so it may run beside the server."""
    key = keys.check_key()
    public = keys.local_public_keys()
    rows = added = sealed = 0
    refused: list[str] = []
    after = ""
    while found := session.exec(
        select(Certificate.id, Certificate.payload, Certificate.signature, Certificate.check_mac,
               Certificate.revoked_at, Certificate.revoked_reason, Certificate.replaced_by,
               Certificate.show_replacement, Certificate.status_mac)
        .where(col(Certificate.id) > after).order_by(col(Certificate.id)).limit(batch)
    ).all():
        for cert_id, payload, signature, check, revoked_at, reason, replaced_by, show, status in found:
            right = signing.row_check(payload, signature, key)
            state = signing.status_check(cert_id, revoked_at, reason, replaced_by, bool(show), key)
            if check == right and status == state:
                continue
            try:
                ok = signing.verify(payload.encode("utf-8"), signature, public)["id"] == cert_id
            except signing.SignatureError:
                ok = False
            if not ok:
                refused.append(cert_id)
                continue
            session.exec(update(Certificate).where(col(Certificate.id) == cert_id)
                         .values(check_mac=right, status_mac=state))
            added += check != right
            sealed += status != state
        session.commit()
        rows += len(found)
        after = found[-1][0]
    return AddedChecks(rows=rows, added=added, refused=refused, sealed=sealed)


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
    return ids.verify_url(address.public_url(), cert.id)


def render_pdf(cert: Certificate) -> bytes:
    """The certificate PDF, carrying its signed payload (for ``verify FILE.pdf``) and its
    Open Badges credential as attached files."""
    printed = pdf.render(
        payload=cert.payload, signature=cert.signature, public_url=address.public_url()
    )
    return openbadges.attach_to_pdf(printed, cert)


def pdf_filename(cert: Certificate) -> str:
    return f"certificate-{cert.id}.pdf"


