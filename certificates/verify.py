"""Is this certificate genuine, and is it still in force? What the Verify page,
the verification API and the CLI answer.

The signed data is the authority. ``lookup`` checks a typed ID (or a pasted
link) against the database: the row's keyed check, or else its signature
(``_checked_payload`` says why the check is enough). ``verify_pdf`` (offline, the
CLI's) reads an uploaded PDF only through ``pdfscan`` (size cap, one page, a
resource-limited child process) and checks the signature; ``check_pdf`` (the
Verify page's) then looks the certificate up in the database, which knows
revocation and replacement. No printed text is read: the result carries the
signed name and ID for a person to compare with the document.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from sqlalchemy import bindparam
from sqlalchemy.engine import Dialect
from sqlmodel import Session, col, select

from academy import content
from academy.models import Certificate
from certificates import ids, keys, pdf, pdfscan, signing
from certificates.i18n import texts

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
        course_title=_course_title(content.root(), lang) if isinstance(lang, str) else None,
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


@functools.lru_cache(maxsize=64)
def _course_title(_content: Path, lang: str) -> str | None:
    """The course title in ``lang`` (None for a language the course does not have),
    per content folder, which ``academy.content`` reads once as well."""
    try:
        return texts(lang)["course_title"]
    except ValueError:  # not one of the course's languages
        return None


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


# What a lookup reads of the row: the signed bytes, their check and the state that may change.
_ROW = (Certificate.payload, Certificate.signature, Certificate.check_mac, Certificate.issued_at,
        Certificate.revoked_at, Certificate.revoked_reason, Certificate.replaced_by,
        Certificate.show_replacement, Certificate.status_mac)
_LOOKUP = select(*(col(c) for c in _ROW)).where(col(Certificate.id) == bindparam("cert_id"))
CHECKED_MAX = 65_536  # signature checks remembered (32-byte digests: a few MiB)
_checked: OrderedDict[bytes, None] = OrderedDict()
_checked_lock = threading.Lock()


class _Row(NamedTuple):
    """A row as ``_LOOKUP`` reads it (attribute names as on ``Certificate``)."""

    payload: str
    signature: str
    check_mac: str | None
    issued_at: datetime
    revoked_at: datetime | None
    revoked_reason: str | None
    replaced_by: str | None
    show_replacement: bool
    status_mac: str | None


def _signed_payload(payload: str, signature: str) -> dict[str, Any]:
    """``signing.verify`` of a stored row against the local keys, the Ed25519 check
    skipped for signed bytes already checked (``SignatureError`` as it raises).

    Only the check is remembered, keyed by SHA-256 of the payload and signature
    together and only when it passed: altered bytes are other bytes and are
    checked again. The key must still be one of ours (its kid names its public
    bytes). Nothing that can change (revocation, replacement) is kept here.
    """
    public = keys.local_public_keys()
    digest = hashlib.sha256(signing.framed(payload, signature)).digest()
    with _checked_lock:
        known = digest in _checked
        if known:
            _checked.move_to_end(digest)
    if known:
        found = json.loads(payload)
        if found.get("kid") in public:
            return found
    found = signing.verify(payload.encode("utf-8"), signature, public)
    with _checked_lock:
        _checked[digest] = None
        while len(_checked) > CHECKED_MAX:
            _checked.popitem(last=False)
    return found


def _checked_payload(row: _Row) -> dict[str, Any]:
    """The row's signed payload, trusted by its check (``Certificate.check_mac``)
    when that is right, else by its signature (``_signed_payload``).

    Why a right check is enough: it is an HMAC-SHA256 of the payload and the
    signature under ``keys.check_key``, written only where ``store`` signs a row
    or where ``store.add_checks`` has verified its signature. So a row whose
    check is right holds a payload and signature that this server signed or
    verified; forging one needs the Ed25519 private key or the check key, both
    only in the secrets folder, and someone who can write the database alone can
    do neither. A row without a check (issued before migration 0011), or whose
    check is wrong (altered, or made with another key), is checked by its
    signature exactly as before: an altered row still ends as "bad_signature".
    Either way the signing key must still be one of ours (a key removed from the
    folder ends its certificates as "unknown_key"), and the payload's ID must be
    the one asked for (``lookup``). The PDF, the Open Badges credential and the
    offline check use the signature alone: the check is this server's own.
    """
    if row.check_mac is not None:
        key = keys.check_key(create=False)
        if key is not None and hmac.compare_digest(
            row.check_mac.encode("utf-8", "surrogatepass"),
            signing.row_check(row.payload, row.signature, key).encode("ascii"),
        ):
            found = json.loads(row.payload)
            if found.get("kid") in keys.local_public_keys():
                return found
    return _signed_payload(row.payload, row.signature)


def status_trusted(cert_id: str, row: Any) -> bool:
    """Whether the row's revocation state (``revoked_at``, ``revoked_reason``, ``replaced_by``,
    ``show_replacement``) is the one this server wrote: its ``status_mac`` is right under
    the row-check key (review 2026-12-04 I-3). Written with every change of that state
    (``store``) and for the rows already there by migration 0013, so a missing or wrong one
    is someone else's writing: the look-up then trusts neither "valid" nor "revoked". It
    stops a change made in the database alone; a writer who kept an older copy of the same
    row (a backup from before its revocation) can put that copy back whole, check and all."""
    key = keys.check_key(create=False)
    if key is None or row.status_mac is None:
        return False
    right = signing.status_check(cert_id, row.revoked_at, row.revoked_reason, row.replaced_by,
                                 bool(row.show_replacement), key)
    return hmac.compare_digest(row.status_mac.encode("utf-8", "surrogatepass"), right.encode("ascii"))


@functools.lru_cache(maxsize=8)
def _plan(dialect: Dialect) -> tuple[str, bool, tuple[Callable[[Any], Any] | None, ...]]:
    """``_LOOKUP`` compiled for ``dialect`` once: its SQL, whether its parameters
    are positional, and each column's conversion of what the driver returns (for
    SQLite: text to an aware datetime, 0/1 to a bool), the ones SQLAlchemy applies."""
    sql = str(_LOOKUP.compile(dialect=dialect))
    convert = tuple(col(c).type.dialect_impl(dialect).result_processor(dialect, None) for c in _ROW)
    return sql, dialect.positional, convert


def _read_row(session: Session, cert_id: str) -> _Row | None:
    """The row's ``_ROW`` columns, or None.

    A session with a transaction open reads through it, its own writes first
    (autoflush), as ``session.get`` saw them. Otherwise the session has nothing
    of its own to show, and the row is read on a pooled connection of the
    session's engine with the driver's cursor: the statement compiled once per
    dialect and its columns converted as SQLAlchemy would (``_plan``), without a
    ``Connection``, an execution context or a result object per look-up (they
    were half the cost of a look-up). An error there is answered by the
    ordinary path, so it is raised, wrapped and handled as before.
    """
    if session.in_transaction():
        found = session.execute(_LOOKUP, {"cert_id": cert_id}).one_or_none()
        return None if found is None else _Row(*found)
    engine = session.get_bind()
    sql, positional, convert = _plan(engine.dialect)
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        try:
            cursor.execute(sql, (cert_id,) if positional else {"cert_id": cert_id})
            found = cursor.fetchone()
        finally:
            cursor.close()
    except engine.dialect.loaded_dbapi.Error:
        raw.invalidate()  # a broken connection must not go back to the pool
        with engine.connect() as conn:
            found = conn.execute(_LOOKUP, {"cert_id": cert_id}).one_or_none()
        return None if found is None else _Row(*found)
    finally:
        raw.close()  # back to the pool (a no-op after invalidate)
    if found is None:
        return None
    return _Row(*(value if f is None or value is None else f(value) for f, value in zip(convert, found, strict=True)))


def lookup(*, session: Session, text: str) -> VerifyResult:
    """Check typed text (an ID or a pasted link) against the database.

    One primary-key SELECT of the columns it needs (``_read_row``: no ORM object,
    no SQLAlchemy connection), and the row trusted by its keyed check, or else by
    its signature, that check remembered per signed bytes (``_checked_payload``);
    the status is read from the row on every call, so a revocation shows at once.
    """
    try:
        cert_id = ids.parse_id(text)
    except ids.InvalidId as e:
        return VerifyResult(status=e.kind, detail=str(e))
    row = _read_row(session, cert_id)
    if row is None:
        return VerifyResult(status="not_found", id=cert_id)
    try:
        payload = _checked_payload(row)
    except signing.SignatureError as e:
        # The stored row no longer matches what was signed: show nothing of it.
        return VerifyResult(status=e.kind, id=cert_id, detail=str(e))
    if payload["id"] != cert_id:
        return VerifyResult(status="bad_signature", id=cert_id, detail="payload is for another ID")
    if not status_trusted(cert_id, row):
        return VerifyResult(status="bad_signature", id=cert_id,
                            detail="its revocation state was changed outside the issuer (status check wrong or missing)")
    status = row_status(row)
    shown = row.replaced_by if status == "replaced" and row.show_replacement else None
    return _public(row, payload, status, replaced_by=shown)


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
