"""Does the public address answer as this academy? Asked before a certificate is signed.

A certificate signs links made from ``certificates.address.public_url()`` that can never be
changed afterwards. Before one is issued or reissued, the store asks that address for the
issuer's DID document, the document every verifier of the Open Badge fetches
(``/.well-known/did.json``, or ``<path>/did.json`` for an address with a path: the did:web
rule, served by ``certificates/routes.py`` beside the pages). It must answer within
:data:`TIMEOUT_S`, name the ``did:web`` of that address and list this academy's active key:
then the verification link, the QR code, the badge's issuer and its status list all reach
this academy. Anything else (nothing listening, another app or another academy on that
port, a proxy that is not set up yet) refuses the certificate with ``AddressUnreachable``,
whose text says why in the learner's language; nothing the learner earned is touched.

A server that cannot reach its own public name (some NAT set-ups) turns the check off with
``PUBLIC_URL_CHECK=false``; the Admin page then says that it is off.
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass
from urllib.parse import urlsplit

from academy.settings import get_settings
from certificates import keys, proofs
from certificates.address import public_url
from certificates.errors import AddressUnreachable

TIMEOUT_S = 5.0
MAX_BYTES = 1 << 20  # a DID document with every rotated key is a few KiB


@dataclass(frozen=True)
class Answer:
    """What the address answered: ``ok``, or ``reason`` (``unreachable``, ``not_academy``,
    ``other_academy``) with a ``detail`` in English for the operator."""

    url: str
    ok: bool
    reason: str = ""
    detail: str = ""


def document_url(base: str) -> str:
    """Where a verifier looks for the DID document of ``did:web`` of ``base``."""
    return f"{base}/did.json" if urlsplit(base).path.strip("/") else f"{base}/.well-known/did.json"


def ask(base: str | None = None) -> Answer:
    """Ask ``base`` (by default the public address) for its DID document, once, now."""
    base = (base or public_url()).rstrip("/")
    active = keys.active_key()
    request = urllib.request.Request(document_url(base), headers={"Accept": "application/did+json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:  # our own address, http(s)
            document = json.loads(response.read(MAX_BYTES).decode("utf-8"))
    except (OSError, ValueError) as e:  # refused, timed out, an HTTP error, not JSON
        return Answer(base, False, "unreachable", f"{document_url(base)}: {e}")
    if not isinstance(document, dict) or document.get("id") != proofs.did_web(base):
        got = document.get("id") if isinstance(document, dict) else None
        return Answer(base, False, "not_academy",
                      f"{document_url(base)} names {got!r}, not {proofs.did_web(base)!r}")
    listed = {m.get("publicKeyMultibase") for m in document.get("verificationMethod") or [] if isinstance(m, dict)}
    if proofs.multikey(active.public) not in listed:
        return Answer(base, False, "other_academy",
                      f"{document_url(base)} does not list this academy's active key {active.kid}")
    return Answer(base, True)


def require() -> None:
    """Raise ``AddressUnreachable`` unless the public address answers as this academy (one
    local request, a few milliseconds); nothing when ``PUBLIC_URL_CHECK`` is off."""
    if not get_settings().public_url_check:
        return
    answer = ask()
    if not answer.ok:
        raise AddressUnreachable(url=answer.url, reason=answer.reason, detail=answer.detail)
