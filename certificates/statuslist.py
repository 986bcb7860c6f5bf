"""Revocation that anyone can check: a W3C Bitstring Status List.

Every certificate gets a random, never reused position (``status_index``) in
one list of ``LIST_SIZE`` bits. Its bit is 1 exactly when the certificate is
no longer current, so the list is *derived* from the ``certificate`` table
each time it is served: revoking (``revoked_at`` set by ``store.revoke``/``reissue``)
flips the bit without any extra write. "No longer current" is both kinds
(issue #22): revoked by the issuer, and replaced by a newer certificate of the
same learner (a reissue). The spec's ``revocation`` purpose means exactly
that (permanent, never cleared); the list does not say which kind, since a
credential names only one revocation entry and issued credentials cannot
change. ``/api/verify/<ID>`` says which ("revoked" or "replaced"), as does
``certificates verify`` when it finds the bit set. The list is published, signed, at
``<PUBLIC_URL>/status/1`` (``certificates.routes``); each credential carries a
``BitstringStatusListEntry`` pointing at its bit.

Positions are random rather than sequential and the list is large (131,072
bits, the spec's minimum) so that reading the list says nothing about who was
revoked or how many certificates were issued when ("herd privacy").

Each signed list carries ``validUntil``, ``VALID_FOR`` after it was made
(review N-7): a verifier refuses an expired list, so a list saved before a
revocation cannot be replayed later to make a revoked credential look valid.
The route lets caches keep it for ``CACHE_SECONDS``, well inside that window;
a mirror must serve a list fresh from ``/status/1``, at most a few minutes old.

Signing the list is ``openbadges.signed_status_list``; this module only knows
bits, so that it stays importable from ``openbadges`` without a cycle.
"""

from __future__ import annotations

import base64
import gzip
import secrets
import threading
import time
import weakref
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlmodel import Session, col, select

from academy.models import Certificate
from certificates.verify import status_trusted

LIST_SIZE = 131_072  # bits: the Bitstring Status List minimum (16 KiB)
LIST_PATH = "/status/1"
PURPOSE = "revocation"
CACHE_SECONDS = 60  # the route's Cache-Control max-age for the list
# How long a signed list stays acceptable: the cache's minute, plus room for a
# mirror's copy and clocks that are a little apart.
VALID_FOR = timedelta(minutes=5)
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


class StatusListError(ValueError):
    """A status list or entry that cannot be read."""


class StatusListExpired(StatusListError):
    """A genuine status list that is too old (or has no ``validUntil``) to say
    anything about revocation now."""


def list_url(public_url: str) -> str:
    return public_url.rstrip("/") + LIST_PATH


def entry(public_url: str, index: int) -> dict[str, Any]:
    """The ``credentialStatus`` of the credential at ``index``."""
    url = list_url(public_url)
    return {
        "id": f"{url}#{index}",
        "type": "BitstringStatusListEntry",
        "statusPurpose": PURPOSE,
        "statusListIndex": str(index),
        "statusListCredential": url,
    }


def draw_index(session: Session) -> int:
    """A free random position in the list. Nothing is written: the caller
    stores it with the credential, and the column is unique, so two processes
    that draw the same position cannot both keep it (the loser retries)."""
    used = set(
        session.exec(
            select(Certificate.status_index).where(col(Certificate.status_index).is_not(None))
        ).all()
    )
    if len(used) >= LIST_SIZE:
        raise StatusListError("the status list is full")
    while True:
        index = secrets.randbelow(LIST_SIZE)
        if index not in used:
            return index


def revoked_indexes(session: Session) -> list[int]:
    """The bits to set: revoked certificates (read afresh each time), and those whose
    revocation state is not the one this server wrote (``verify.status_trusted``: a
    database writer cleared ``revoked_at``, review 2026-12-04 I-3), found by a scan of
    every row's keyed check at most every ``TAMPER_SCAN_S`` per database."""
    revoked = session.exec(select(Certificate.status_index).where(
        col(Certificate.status_index).is_not(None), col(Certificate.revoked_at).is_not(None))).all()
    return sorted({*revoked, *_tampered(session)})


TAMPER_SCAN_S = CACHE_SECONDS  # a tampered state's bit is set within the list's own cache time
_scans: weakref.WeakKeyDictionary[Any, tuple[float, frozenset[int]]] = weakref.WeakKeyDictionary()
_scans_lock = threading.Lock()


def _tampered(session: Session) -> frozenset[int]:
    """Positions of rows in force by their columns whose state's check is wrong or missing:
    an HMAC per row (some seconds of CPU at 100,000 rows), so done once per ``TAMPER_SCAN_S``."""
    engine = session.get_bind()
    with _scans_lock:
        done = _scans.get(engine)
    if done is not None and time.monotonic() - done[0] < TAMPER_SCAN_S:
        return done[1]
    rows = session.exec(
        select(Certificate.status_index, Certificate.id, Certificate.revoked_at, Certificate.revoked_reason,
               Certificate.replaced_by, Certificate.show_replacement, Certificate.status_mac)
        .where(col(Certificate.status_index).is_not(None), col(Certificate.revoked_at).is_(None))
    ).all()
    found = frozenset(row.status_index for row in rows if not status_trusted(row.id, row))
    with _scans_lock:
        _scans[engine] = (time.monotonic(), found)
    return found


def encode(indexes: list[int], size: int = LIST_SIZE) -> str:
    """``encodedList``: multibase base64url (``u`` prefix, no padding) of the
    GZIP of the bitstring; index 0 is the most significant bit of byte 0."""
    bits = bytearray(size // 8)
    for i in indexes:
        bits[i // 8] |= 0x80 >> (i % 8)
    # mtime=0: the same set of bits always encodes to the same text.
    packed = gzip.compress(bytes(bits), mtime=0)
    return "u" + base64.urlsafe_b64encode(packed).rstrip(b"=").decode("ascii")


def decode(encoded: str) -> bytes:
    """The raw bitstring of an ``encodedList`` (``StatusListError`` if unreadable)."""
    if not isinstance(encoded, str) or not encoded.startswith("u"):
        raise StatusListError("encodedList is not multibase base64url")
    text = encoded[1:]
    try:
        return gzip.decompress(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (ValueError, OSError, EOFError) as e:
        raise StatusListError(f"encodedList does not decode: {e}") from e


def is_set(bits: bytes, index: int) -> bool:
    if not 0 <= index < len(bits) * 8:
        raise StatusListError(f"index {index} is outside the list")
    return bool(bits[index // 8] & (0x80 >> (index % 8)))


def unsigned_list_credential(
    *, session: Session, public_url: str, issuer: str, now: datetime
) -> dict[str, Any]:
    """The status list credential as of ``now``, without its proof; valid
    until ``VALID_FOR`` later."""
    url = list_url(public_url)
    return {
        "@context": ["https://www.w3.org/ns/credentials/v2"],
        "id": url,
        "type": ["VerifiableCredential", "BitstringStatusListCredential"],
        "issuer": issuer,
        "validFrom": now.strftime(TIME_FORMAT),
        "validUntil": (now + VALID_FOR).strftime(TIME_FORMAT),
        "credentialSubject": {
            "id": f"{url}#list",
            "type": "BitstringStatusList",
            "statusPurpose": PURPOSE,
            "encodedList": encode(revoked_indexes(session)),
        },
    }


def index_of(status: Any) -> tuple[str, int]:
    """(status list URL, index) of a ``credentialStatus`` entry we can check."""
    if not isinstance(status, dict) or status.get("type") != "BitstringStatusListEntry":
        raise StatusListError("no BitstringStatusListEntry in the credential")
    if status.get("statusPurpose") != PURPOSE:
        raise StatusListError(f"status purpose {status.get('statusPurpose')!r} is not revocation")
    try:
        index = int(status["statusListIndex"])
        url = str(status["statusListCredential"])
    except (KeyError, TypeError, ValueError) as e:
        raise StatusListError("status entry lacks an index or a list URL") from e
    return url, index


def check_current(listed: dict[str, Any], now: datetime | None = None) -> None:
    """Refuse (``StatusListExpired``) a verified list whose ``validUntil`` is
    missing or past: an old copy cannot show a later revocation."""
    now = now or datetime.now(UTC)
    until = listed.get("validUntil")
    if not isinstance(until, str):
        raise StatusListExpired("the status list has no validUntil, so its age cannot be checked")
    try:
        expires = datetime.strptime(until, TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError as e:
        raise StatusListExpired(f"the status list's validUntil {until!r} is not a UTC time") from e
    if now > expires:
        raise StatusListExpired(
            f"the status list expired at {until} (it is signed for {VALID_FOR.seconds // 60} minutes;"
            " a saved or mirrored copy must be current)"
        )
