"""HTTP routes beside the Streamlit app, for wallets, verifiers and
employers' systems (no page, no session, GET only):

    /.well-known/did.json        the issuer's DID document (did:web), every key
    /did.json                    the same, for a PUBLIC_URL with a path
    /status/1                    the signed revocation list (Bitstring Status List)
    /credentials/<ID>.json       a certificate's OpenBadgeCredential, JSON + proof
    /credentials/<ID>.jwt        the same credential as a VC-JWT
    /api/verify/<ID>             {"status": "valid" | "replaced" | "revoked" | ..., ...}

``routes()`` returns Starlette routes; the app mounts them with
``st.App("app/main.py", routes=certificates.routes.routes())``. Handlers are
plain functions, so Starlette runs them in its thread pool and the database
calls never block the event loop. Every answer allows any origin (a GET of
public data) and says how long it may be cached: the DID document and the
status list for a minute, so that a new key or a revocation shows within
minutes (the signed list itself expires ``statuslist.VALID_FOR`` after it was
made, so no cache can serve it much longer); a credential, which never
changes once made, for a day; a verification not at all.

``/api/verify`` answers each client (``academy.accounts.client_key``: its
address, read behind ``TRUSTED_PROXY_HOPS`` proxies) at most `VERIFY_BURST`
lookups at once and `VERIFY_PER_S` a second after that, then 429 with
``Retry-After`` (review N-19). A loopback client (the operator, or a proxy on
this machine that nobody configured) is not limited: it speaks for everybody.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import OrderedDict
from typing import Any

from sqlmodel import Session
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from certificates import ids, keys, openbadges, proofs, statuslist, store
from certificates.errors import CertificateNotFound
from certificates.verify import lookup

JSON = "application/json"
DID_JSON = "application/did+json"
VC_JSON = "application/vc"  # VC 2.0's media type for a credential in JSON(-LD)
VC_JWT = "application/vc+jwt"
SHORT = f"public, max-age={statuslist.CACHE_SECONDS}"
LONG = "public, max-age=86400"
NEVER = "no-store"


VERIFY_BURST = 30  # lookups a client may make at once
VERIFY_PER_S = 2.0  # and then per second: a person checking IDs by hand never meets it
_BUCKETS_MAX = 10_000  # clients remembered; the longest idle are forgotten first


class _Buckets:
    """A token bucket per client: ``take(client)`` is 0 when a lookup may go ahead, else the
    seconds until one may. Thread-safe (Starlette runs the handlers in its thread pool)."""

    def __init__(self, burst: int, per_s: float, size: int):
        self.burst, self.per_s, self.size = burst, per_s, size
        self.lock = threading.Lock()
        self.tokens: OrderedDict[str, tuple[float, float]] = OrderedDict()  # client -> (tokens, when)

    def take(self, client: str, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        with self.lock:
            tokens, then = self.tokens.pop(client, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - then) * self.per_s)
            wait = 0.0 if tokens >= 1 else (1 - tokens) / self.per_s
            self.tokens[client] = (tokens - 1 if not wait else tokens, now)
            while len(self.tokens) > self.size:
                self.tokens.popitem(last=False)
            return wait


_verify_buckets = _Buckets(VERIFY_BURST, VERIFY_PER_S, _BUCKETS_MAX)


def _client(request: Request) -> str:
    from academy.accounts import client_key
    from academy.settings import get_settings

    peer = request.client.host if request.client else None
    return client_key(peer, forwarded=request.headers.get("x-forwarded-for"),
                      hops=get_settings().trusted_proxy_hops)


def _session() -> Session:
    from academy.db import get_engine

    return Session(get_engine(), expire_on_commit=False)


def _answer(body: Any, *, media_type: str, cache: str, status: int = 200) -> Response:
    text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False, indent=2)
    return Response(
        text,
        status_code=status,
        media_type=media_type,
        headers={
            "Cache-Control": cache,
            "Access-Control-Allow-Origin": "*",
            "X-Content-Type-Options": "nosniff",
        },
    )


def _error(status: int, code: str) -> Response:
    return _answer({"status": code}, media_type=JSON, cache=NEVER, status=status)


def did_json(_request: Request) -> Response:
    document = proofs.did_document(proofs.base_url(), keys.local_public_keys())
    return _answer(document, media_type=DID_JSON, cache=SHORT)


def status_list(request: Request) -> Response:
    """JSON with its proof; a client that asks for ``application/vc+jwt``
    (and not JSON) gets the same list as a VC-JWT."""
    with _session() as session:
        document = openbadges.signed_status_list(session=session)
    accept = request.headers.get("accept", "")
    if VC_JWT in accept and "json" not in accept:
        return _answer(openbadges.status_list_jwt(document), media_type=VC_JWT, cache=SHORT)
    return _answer(document, media_type=VC_JSON, cache=SHORT)


def _certificate(session: Session, raw_id: str):
    """The row for an ID from the URL, its credential made on first request;
    None if the ID is not one of ours."""
    try:
        cert = store.get_certificate(session=session, cert_id=raw_id)
    except (ids.InvalidId, CertificateNotFound):
        return None
    return openbadges.ensure_credential(session=session, cert=cert)


def credential_json(request: Request) -> Response:
    with _session() as session:
        cert = _certificate(session, request.path_params["cert_id"])
        if cert is None:
            return _error(404, "not_found")
        return _answer(cert.credential_json, media_type=VC_JSON, cache=LONG)


def credential_jwt(request: Request) -> Response:
    with _session() as session:
        cert = _certificate(session, request.path_params["cert_id"])
        if cert is None:
            return _error(404, "not_found")
        return _answer(cert.credential_jwt, media_type=VC_JWT, cache=LONG)


def verify(request: Request) -> Response:
    """The Verify page's answer as JSON: public fields only, never e-mail.
    400 for text that is not an ID, 404 for an unknown one, else 200 with
    ``status`` saying valid, replaced (by a newer certificate of the same
    learner, not for cause), revoked, or why the stored record is not trusted;
    ``replaced_by`` is the newer ID only where its holder chose to show it.
    429 when this client asked too often (see the module docstring)."""
    from academy.accounts import UNKNOWN_CLIENT

    client = _client(request)
    wait = 0.0 if client == UNKNOWN_CLIENT else _verify_buckets.take(client)
    if wait:
        response = _error(429, "too_many_requests")
        response.headers["Retry-After"] = str(math.ceil(wait))
        return response
    with _session() as session:
        result = lookup(session=session, text=request.path_params["cert_id"])
    if result.status in ("malformed", "typo"):
        return _error(400, result.status)
    if result.status == "not_found":
        return _error(404, "not_found")
    base = proofs.base_url()
    body = {
        "status": result.status,
        "valid": result.valid,
        "id": result.id,
        "name": result.name,
        "course": result.course,
        "course_title": result.course_title,
        "score": result.score,
        "pass_date": result.pass_date,
        "language": result.lang,
        "issuer": result.issuer,
        "issuer_did": proofs.did_web(base),
        "key_id": result.key_id,
        "issued_at": result.issued_at.isoformat() if result.issued_at else None,
        "revoked_at": result.revoked_at.isoformat() if result.revoked_at else None,
        "revoked_reason": result.revoked_reason,  # reissued | superseded | revoked
        "replaced_by": result.replaced_by,
        "credential": f"{base}/credentials/{result.id}.json" if result.id else None,
    }
    return _answer(body, media_type=JSON, cache=NEVER)


def preflight(_request: Request) -> Response:
    """CORS preflight: GET from anywhere, with the one header a client sends."""
    return Response(
        status_code=204,
        headers={
            "Access-Control-Allow-Origin": "*",
            "Access-Control-Allow-Methods": "GET, HEAD, OPTIONS",
            "Access-Control-Allow-Headers": "Accept",
            "Access-Control-Max-Age": "86400",
        },
    )


def routes() -> list[BaseRoute]:
    """The routes to pass to ``st.App(..., routes=...)``."""
    table = [
        ("/.well-known/did.json", did_json),
        ("/did.json", did_json),
        (statuslist.LIST_PATH, status_list),
        ("/credentials/{cert_id}.json", credential_json),
        ("/credentials/{cert_id}.jwt", credential_jwt),
        ("/api/verify/{cert_id}", verify),
    ]
    out: list[BaseRoute] = []
    for path, endpoint in table:
        out.append(Route(path, endpoint, methods=["GET", "HEAD"]))
        out.append(Route(path, preflight, methods=["OPTIONS"]))
    return out
