"""The signed payload of a certificate.

The payload is canonical JSON (sorted keys, no spaces, UTF-8) of

    {"course", "id", "issuer", "kid", "lang", "name", "pass_date", "score", "v"}

signed with the issuer's Ed25519 key. The signature covers the exact bytes,
so a verifier never re-serialises: it checks the bytes it was given, then
reads them. ``kid`` names the key, so rotated keys keep working.

Version 2 (issue #16) adds ``exercises``: the hands-on coding exercises the
learner passed, when the certificate required them. They are signed, since
the PDF and the credential state them; a certificate without them stays
version 1, byte for byte as before, and both versions verify.

``row_check`` is not part of the certificate: it is the server's own MAC of a
stored row (``certificates.verify.lookup``), which no one else can check.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from certificates import keys

VERSION = 1
FIELDS = ("course", "id", "issuer", "kid", "lang", "name", "pass_date", "score", "v")
# The fields of each version: 2 is 1 plus the exercises passed.
VERSIONS = {1: FIELDS, 2: (*FIELDS, "exercises")}


class SignatureError(ValueError):
    """The payload or its signature cannot be trusted; ``kind`` says why."""

    kind = "bad_signature"


class UnknownKey(SignatureError):
    kind = "unknown_key"


@dataclass(frozen=True)
class Signed:
    payload: str  # canonical JSON, exactly the bytes that were signed (UTF-8)
    signature: str  # base64url, no padding
    kid: str


def canonical(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8"
    )


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def make_payload(
    *,
    cert_id: str,
    name: str,
    course: str,
    score: float,
    pass_date: str,
    lang: str,
    issuer: str,
    exercises: list[str] | tuple[str, ...] = (),
) -> dict[str, Any]:
    """The payload without ``kid`` (``sign`` adds the signing key's); version 2 with
    ``exercises`` when there are any, else version 1."""
    # Whole scores as integers, others to one decimal: stable JSON numbers.
    score = round(float(score), 1)
    if exercises:
        return {**make_payload(cert_id=cert_id, name=name, course=course, score=score,
                               pass_date=pass_date, lang=lang, issuer=issuer),
                "exercises": list(exercises), "v": 2}
    return {
        "course": course,
        "id": cert_id,
        "issuer": issuer,
        "lang": lang,
        "name": name,
        "pass_date": pass_date,
        "score": int(score) if score.is_integer() else score,
        "v": VERSION,
    }


def sign(payload: dict[str, Any], *, secrets_dir: Path | None = None) -> Signed:
    """Sign with the active issuer key, setting ``kid`` in the payload."""
    key = keys.active_key(secrets_dir)
    assert key.private is not None
    data = canonical({**payload, "kid": key.kid})
    return Signed(
        payload=data.decode("utf-8"), signature=b64url(key.private.sign(data)), kid=key.kid
    )


def framed(payload: str, signature: str) -> bytes:
    """The payload's length (4 bytes), its UTF-8 bytes and the signature text: one
    unambiguous byte string of a stored row's signed pair."""
    data = payload.encode("utf-8")
    return len(data).to_bytes(4, "big") + data + signature.encode("utf-8", "surrogatepass")


def row_check(payload: str, signature: str, key: bytes) -> str:
    """HMAC-SHA256 under ``key`` (``keys.check_key``) of ``framed(payload, signature)``,
    base64url: what the database keeps beside a row's signature."""
    return b64url(hmac.digest(key, framed(payload, signature), "sha256"))


def status_check(cert_id: str, revoked_at: datetime | None, revoked_reason: str | None,
                 replaced_by: str | None, show_replacement: bool, key: bytes) -> str:
    """HMAC-SHA256 under ``key`` (``keys.check_key``) of a row's revocation state, base64url:
    what the database keeps beside it (``Certificate.status_mac``, migration 0013), so that
    someone who can write the database but not read the secrets folder cannot revoke,
    un-revoke or re-point a certificate unseen (review 2026-12-04 I-3). ``revoked_at`` counts
    to the second, in UTC (a naive time is taken as UTC, as the database gives it back)."""
    when = ""
    if revoked_at is not None:
        aware = revoked_at if revoked_at.tzinfo is not None else revoked_at.replace(tzinfo=UTC)
        when = aware.astimezone(UTC).isoformat(timespec="seconds")
    fields = ("status-v1", cert_id, when, revoked_reason or "", replaced_by or "", "1" if show_replacement else "0")
    mac = _keyed(key).copy()  # the key's pads hashed once: the status list checks every row
    mac.update("".join(f"{len(f)}:{f}," for f in fields).encode("utf-8", "surrogatepass"))  # netstrings
    return b64url(mac.digest())


@functools.lru_cache(maxsize=4)
def _keyed(key: bytes) -> hmac.HMAC:
    return hmac.new(key, digestmod=hashlib.sha256)


def verify(
    payload_bytes: bytes, signature: str | bytes, public_keys: dict[str, Ed25519PublicKey]
) -> dict[str, Any]:
    """The payload as a dict if the signature is good, else ``SignatureError``.

    ``signature`` is base64url text or the raw 64 bytes.
    """
    try:
        payload = json.loads(payload_bytes.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SignatureError(f"payload is not JSON: {e}") from e
    if not isinstance(payload, dict) or "v" not in payload:
        raise SignatureError("payload does not have the certificate fields")
    fields = VERSIONS.get(payload["v"]) if type(payload["v"]) is int else None
    if fields is None:
        raise SignatureError(f"unknown payload version {payload['v']!r}")
    if set(payload) != set(fields):
        raise SignatureError("payload does not have the certificate fields")
    if "exercises" in payload and not (
        isinstance(payload["exercises"], list) and all(isinstance(e, str) for e in payload["exercises"])
    ):
        raise SignatureError("payload's exercises are not a list of names")
    public = public_keys.get(payload["kid"]) if isinstance(payload["kid"], str) else None
    if public is None:
        raise UnknownKey(f"signed by unknown key {payload['kid']!r}")
    if isinstance(signature, str):
        try:
            signature = b64url_decode(signature)
        except (binascii.Error, ValueError) as e:
            raise SignatureError("signature is not base64url") from e
    try:
        public.verify(signature, payload_bytes)
    except InvalidSignature as e:
        raise SignatureError("signature does not match the payload") from e
    return payload
