"""The HTTP side of the app: security headers, host check, websocket Origin check, no
public metrics, no global cache flush by anonymous clients, and the start-up warning
when certificates would carry a local address.

``app/main.py`` defines ``app = st.App(...)`` with :func:`middleware`, so that
``streamlit run app/main.py`` serves the pages through Starlette with these
rules in front (Streamlit 1.67 detects the ``st.App`` and runs it under
uvicorn). Imports no page code; the rules are plain functions a test can call.
What cannot be enforced here is listed in docs/contributors/security-model.md.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from academy.settings import get_settings

# What the Streamlit front end needs, found by running every page in Chromium with the
# policy enforced (tests/test_security_headers.py fails on any CSP violation):
# inline styles (emotion), inline/eval'd scripts (the app shell, Plotly, st.html's
# script for the session cookie), data:/blob: images and fonts, the websocket to
# ourselves, and same-origin iframes (st.html / components). No third-party origin.
# No page may be framed at all ('none'); the one exception is FRAMEABLE below.
CSP_DIRECTIVES = [
    "default-src 'self'",
    "script-src 'self' 'unsafe-inline' 'unsafe-eval'",
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data: blob:",
    "font-src 'self' data:",
    "connect-src 'self'",  # CSP3: 'self' covers ws(s):// to this same host
    "frame-src 'self' blob: data:",
    "worker-src 'self' blob:",
    "object-src 'none'",
    "base-uri 'self'",
    "form-action 'self'",
]
CSP = "; ".join([*CSP_DIRECTIVES, "frame-ancestors 'none'"])
# What a component's own files get: our pages put each custom component (the exercise
# editor, streamlit-code-editor) in an iframe of the same origin, which ``'none'`` and
# ``DENY`` refuse. They may be framed by our own pages, still by no other site.
CSP_FRAMEABLE = "; ".join([*CSP_DIRECTIVES, "frame-ancestors 'self'"])
# Where Streamlit serves those files: /component/<module.name>/<file> (its starlette routes,
# BASE_ROUTE_COMPONENT), under server.baseUrlPath when one is set.
FRAMEABLE = "component"

# Streamlit's own endpoints that must not be public: session counts and cache names.
# (/_stcore/host-config stays: the front end reads it on start.)
BLOCKED_PATHS = ("/_stcore/metrics",)  # matched at the end, so under a baseUrlPath too


def component_file(path: str, base_url_path: str = "") -> bool:
    """Whether ``path`` is a custom component's file, which our own pages frame.

    Exactly ``/<base>/component/<name>/...``: no other prefix, no bare ``/component``.
    (A ``..`` in it cannot reach a page: browsers resolve dot segments before asking, and
    Streamlit answers such a path with 404 or 400, never with a file outside the component's folder.)
    """
    base = "/".join(part for part in base_url_path.split("/") if part)
    prefix = f"/{base}/{FRAMEABLE}/" if base else f"/{FRAMEABLE}/"
    return path.startswith(prefix) and len(path) > len(prefix)


def security_headers(*, https: bool, frameable: bool = False) -> list[tuple[bytes, bytes]]:
    """The headers every HTTP response gets (review F-13); ``frameable``: a component's
    file, which our own pages may frame (and no other site)."""
    headers = {
        "Content-Security-Policy": CSP_FRAMEABLE if frameable else CSP,
        "X-Frame-Options": "SAMEORIGIN" if frameable else "DENY",
        "X-Content-Type-Options": "nosniff",
        # Verify links carry certificate IDs: say nothing about them to other sites.
        "Referrer-Policy": "no-referrer",
        "Permissions-Policy": "camera=(), microphone=(), geolocation=(), payment=()",
        "Cross-Origin-Opener-Policy": "same-origin",
    }
    if https:
        headers["Strict-Transport-Security"] = "max-age=31536000; includeSubDomains"
    return [(k.lower().encode(), v.encode()) for k, v in headers.items()]


DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin_parts(text: str, scheme: str | None = None) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an origin as a browser writes it (``https://host[:port]``, nothing
    more), the port filled in from the scheme; with ``scheme`` given, ``text`` is a Host
    header (``host[:port]``) of a page of that scheme. None for anything else: a path, a
    query, user info, white space, another scheme, a port that is no port."""
    if not text or text != text.strip():
        return None
    try:
        parts = urlsplit(f"//{text}" if scheme else text)
        port = parts.port
    except ValueError:
        return None
    scheme = scheme or parts.scheme.lower()
    if (scheme not in DEFAULT_PORTS or not parts.hostname or parts.path or parts.query or parts.fragment
            or parts.username is not None or parts.password is not None or text.endswith(("?", "#"))):
        return None
    return scheme, parts.hostname.lower(), port if port is not None else DEFAULT_PORTS[scheme]


def origin_allowed(origin: str | None, host: str | None, allowed: list[str] | tuple[str, ...] = (), *,
                   scheme: str = "http") -> bool:
    """Whether a websocket handshake with this Origin may reach Streamlit (review N-12).

    No Origin (not a browser), the page's own origin (``scheme``, and the host and
    port of the Host header), or one listed in ``server.corsAllowedOrigins``
    (``STREAMLIT_SERVER_CORS_ALLOWED_ORIGINS``: the public origin behind a proxy
    that rewrites Host), compared as scheme, host and port (review 2026-12-04 I-4:
    ``https://`` against an http page, an Origin with a path or trailing space
    passed when only host and port were compared). Streamlit itself also lets
    in any port of localhost and 127.0.0.1, and for each Origin it refuses
    looks up the machine's external IP on the internet; refused here first,
    it does neither.
    """
    if origin is None:
        return True
    found = _origin_parts(origin)
    if found is None:
        return False
    if host is not None and found == _origin_parts(host.strip(), scheme):
        return True
    return any(found == _origin_parts(o.strip()) for o in allowed if o and o.strip())


def page_scheme(scope: Scope) -> str:
    """The scheme of our own pages, for a websocket's Origin: https when ``PUBLIC_URL`` is
    (TLS ends at the proxy, which need not say so) or the socket itself came over TLS."""
    return "https" if get_settings().https or scope.get("scheme") in ("wss", "https") else "http"


class SecurityHeaders:
    """Pure ASGI middleware: adds :func:`security_headers` to every HTTP response and
    answers 404 for :data:`BLOCKED_PATHS`; refuses (403) a websocket handshake whose
    Origin :func:`origin_allowed` refuses, and lets the others pass untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            from streamlit import config

            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            if not origin_allowed(headers.get("origin"), headers.get("host"),
                                  config.get_option("server.corsAllowedOrigins") or [], scheme=page_scheme(scope)):
                await send({"type": "websocket.close", "code": 1008})  # before accept: HTTP 403
                return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        from streamlit import config

        path = scope.get("path", "")
        extra = security_headers(https=get_settings().https,
                                 frameable=component_file(path, config.get_option("server.baseUrlPath") or ""))
        if path.rstrip("/").endswith(BLOCKED_PATHS):
            await send({"type": "http.response.start", "status": 404,
                        "headers": [(b"content-type", b"text/plain"), *extra]})
            await send({"type": "http.response.body", "body": b"Not Found"})
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in extra}
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message = {**message, "headers": kept + extra}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def middleware() -> list[Middleware]:
    """The middleware for ``st.App``: the headers, and in front of them Streamlit's own
    ``server.allowedHosts`` (which guards only its websocket) applied to every HTTP request
    too, so one list in ``.streamlit/config.toml`` / ``STREAMLIT_SERVER_ALLOWED_HOSTS`` says
    which Host headers the app answers (DNS rebinding)."""
    from streamlit import config

    stack = [Middleware(SecurityHeaders)]
    hosts = [h for h in config.get_option("server.allowedHosts") or [] if h and h != "*"]
    if hosts:
        stack.insert(0, Middleware(TrustedHostMiddleware, allowed_hosts=hosts))
    return stack


def refuse_global_cache_clear() -> None:
    """Make a client's ``clear_cache`` message clear only that client's own session state.

    Streamlit handles that message for every client by flushing the process-wide
    ``st.cache_data``/``st.cache_resource`` (review F-14); our UI never offers it
    (toolbarMode "minimal"). Streamlit has no setting or hook for this, so we
    replace its private handler; if a Streamlit upgrade renames it, start-up
    fails here instead of silently leaving the hole (tests/test_security_headers.py).
    """
    from streamlit.runtime.app_session import AppSession

    if not hasattr(AppSession, "_handle_clear_cache_request"):
        raise RuntimeError("Streamlit changed: AppSession._handle_clear_cache_request is gone")

    def clear_own_state_only(self: AppSession) -> None:
        self._session_state.clear()

    AppSession._handle_clear_cache_request = clear_own_state_only


def warn_public_address() -> None:
    """At start-up, on the console: where the links certificates sign will point, when that is
    not a public address set with PUBLIC_URL (``certificates.address.notice``). The Admin page
    says the same."""
    import sys

    from certificates import address

    kind = address.notice()
    if kind is None:
        return
    url = address.public_url()
    if kind == address.LOCAL:
        text = (f"WARNING: certificates issued by this app will carry {url}, a local address that only "
                "this machine can open. Their verification link, QR code and Open Badge are signed and "
                "can never be changed: for learners elsewhere, set PUBLIC_URL to the address they use, "
                "e.g. PUBLIC_URL=https://academy.example.org make run.")
    else:
        text = (f"NOTE: PUBLIC_URL is not set, so certificates will carry {url}, the address Streamlit's "
                "settings give. If learners reach the app by another address (a proxy, a domain name), "
                "set PUBLIC_URL to it.")
    print(text, file=sys.stderr, flush=True)
