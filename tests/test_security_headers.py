"""The HTTP surface (review F-13, F-14, F-19): security headers on every response, a CSP the
real front end works under, no request to any other host, no public metrics, a session
cookie that is ``Secure`` over HTTPS, and no global cache flush by a client."""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import urllib.error
import urllib.request

import pytest
import streamlit as st

from academy import i18n
from app import web

PASSWORD = "a long enough password"


def _call(app, path: str, host: str = "127.0.0.1") -> tuple[int, dict[str, str]]:
    """Run an ASGI app once for GET ``path``; its status and headers."""
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": path, "headers": [(b"host", host.encode())],
             "query_string": b""}
    # In a thread of its own: Playwright's sync API may hold an event loop in this one.
    worker = threading.Thread(target=asyncio.run, args=(app(scope, receive, send),))
    worker.start()
    worker.join()
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}


async def _plain_app(_scope, _receive, send) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/html"), (b"x-frame-options", b"SAMEORIGIN")]})
    await send({"type": "http.response.body", "body": b"<html></html>"})


@pytest.mark.parametrize(("origin", "allowed", "passes"), [
    (None, [], True),  # no Origin: not a browser
    ("http://127.0.0.1:8611", [], True),  # the page's own origin
    ("http://127.0.0.1:9999", [], False),  # another port on this machine (N-12)
    ("http://localhost:3000", [], False),
    ("http://127.0.0.1:8611.evil.example", [], False),
    ("http://evil.example", [], False),
    ("null", [], False),
    ("https://academy.example.org", ["https://academy.example.org"], True),  # a proxy that rewrites Host
    ("https://academy.example.org:8443", ["https://academy.example.org"], False),
    ("https://academy.example.org:443", ["https://academy.example.org"], True),  # the same origin, spelt out
    ("http://academy.example.org", ["https://academy.example.org"], False),  # another scheme, another origin
    # Review 2026-12-04 I-4: the scheme counts, and an Origin is scheme://host[:port] and nothing more.
    ("https://127.0.0.1:8611", [], False),  # https against an http page
    ("ws://127.0.0.1:8611", [], False),
    ("http://127.0.0.1:8611/", [], False),
    ("http://127.0.0.1:8611/path", [], False),
    ("http://127.0.0.1:8611 ", [], False),
    (" http://127.0.0.1:8611", [], False),
    ("http://me@127.0.0.1:8611", [], False),
    ("http://127.0.0.1:8611?x", [], False),
    ("http://127.0.0.1:86111", [], False),
])
def test_a_websocket_from_another_origin_is_refused_before_streamlit_sees_it(origin, allowed, passes):
    """N-12: Streamlit let any port of localhost/127.0.0.1 open the websocket and looked up its
    external IP for each Origin it refused; our middleware answers those with 403 first."""
    assert web.origin_allowed(origin, "127.0.0.1:8611", allowed) is passes
    reached, sent = [], []

    async def inner(scope, _receive, _send) -> None:
        reached.append(scope["type"])

    async def receive():
        return {"type": "websocket.connect"}

    async def send(message) -> None:
        sent.append(message)

    headers = [(b"host", b"127.0.0.1:8611")] + ([(b"origin", origin.encode())] if origin else [])
    scope = {"type": "websocket", "path": "/_stcore/stream", "headers": headers, "query_string": b""}
    from streamlit import config

    before = config.get_option("server.corsAllowedOrigins")
    config.set_option("server.corsAllowedOrigins", allowed)
    try:
        worker = threading.Thread(target=asyncio.run, args=(web.SecurityHeaders(inner)(scope, receive, send),))
        worker.start()
        worker.join()
    finally:
        config.set_option("server.corsAllowedOrigins", before)
    assert reached == (["websocket"] if passes else [])
    assert sent == ([] if passes else [{"type": "websocket.close", "code": 1008}])


def test_the_pages_scheme_is_https_behind_tls_or_with_an_https_public_url(monkeypatch):
    """Behind a proxy that ends TLS the socket is plain ws, yet the page was https: with
    PUBLIC_URL https only an https Origin is the page's own (an http page of the same host is not)."""
    from academy.settings import get_settings

    assert web.page_scheme({"scheme": "ws"}) == "http" and web.page_scheme({"scheme": "wss"}) == "https"
    monkeypatch.setenv("PUBLIC_URL", "https://academy.example.org")
    get_settings.cache_clear()
    try:
        assert web.page_scheme({"scheme": "ws"}) == "https"
        assert web.origin_allowed("https://academy.example.org", "academy.example.org", scheme="https")
        assert not web.origin_allowed("http://academy.example.org", "academy.example.org", scheme="https")
        assert not web.origin_allowed("http://academy.example.org:443", "academy.example.org", scheme="https")
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()


def test_allowed_origins_are_set_explicitly():
    from streamlit import config

    assert config.get_option("server.corsAllowedOrigins") == []  # .streamlit/config.toml
    assert config.get_option("server.enableCORS") is True


@pytest.mark.parametrize("public_url", ["http://localhost:8501", "https://academy.example.org"])
def test_every_response_gets_the_headers_and_hsts_only_over_https(monkeypatch, public_url):
    from academy.settings import get_settings

    monkeypatch.setenv("PUBLIC_URL", public_url)
    get_settings.cache_clear()
    try:
        status, headers = _call(web.SecurityHeaders(_plain_app), "/")
        assert status == 200
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert headers["x-frame-options"] == "DENY"  # ours replaces the app's own
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "no-referrer"
        assert ("strict-transport-security" in headers) == public_url.startswith("https")
        status, headers = _call(web.SecurityHeaders(_plain_app), "/_stcore/metrics")
        assert status == 404 and headers["x-content-type-options"] == "nosniff"
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()


COMPONENT = "/component/code_editor.code_editor/index.html"


@pytest.mark.parametrize(("path", "base", "frameable"), [
    (COMPONENT, "", True),
    ("/component/code_editor.code_editor/static/js/main.1bb1c91a.chunk.js", "", True),
    ("/academy/component/code_editor.code_editor/index.html", "academy", True),
    ("/academy/component/code_editor.code_editor/index.html", "/academy/", True),
    (COMPONENT, "academy", False),  # under a base path, only the base path's own component route
    ("/", "", False),
    ("/exercises", "", False),
    ("/component", "", False),
    ("/component/", "", False),
    ("/componentx/code_editor.code_editor/index.html", "", False),
    ("/exercises/component/code_editor.code_editor/index.html", "", False),
    ("/static/component/index.html", "", False),
    ("/_stcore/health", "", False),
    ("/academy/exercises", "academy", False),
])
def test_only_component_files_may_be_framed_and_only_by_our_pages(path, base, frameable):
    """Our pages frame their components (the exercise editor); nothing else may be framed, and
    a component only by our own origin: SAMEORIGIN and 'self', never a host or '*'."""
    from streamlit import config

    before = config.get_option("server.baseUrlPath")
    config.set_option("server.baseUrlPath", base)
    try:
        status, headers = _call(web.SecurityHeaders(_plain_app), path)
    finally:
        config.set_option("server.baseUrlPath", before)
    assert status == 200 and web.component_file(path, base) is frameable
    csp = headers["content-security-policy"]
    [ancestors] = [d.strip() for d in csp.split(";") if d.strip().startswith("frame-ancestors")]
    assert ancestors == ("frame-ancestors 'self'" if frameable else "frame-ancestors 'none'")
    assert headers["x-frame-options"] == ("SAMEORIGIN" if frameable else "DENY")
    # Apart from who may frame it, a component's file is under the same policy as a page.
    assert csp.replace(ancestors, "") == web.CSP.replace("frame-ancestors 'none'", "")
    assert headers["x-content-type-options"] == "nosniff"


def test_allowed_hosts_refuse_other_host_headers():
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from streamlit import config

    assert config.get_option("server.allowedHosts") == ["localhost", "127.0.0.1"]  # .streamlit/config.toml
    before = config.get_option("server.allowedHosts")
    config.set_option("server.allowedHosts", ["academy.example.org"])
    try:
        stack = web.middleware()
    finally:
        config.set_option("server.allowedHosts", before)
    assert [m.cls for m in stack] == [TrustedHostMiddleware, web.SecurityHeaders]
    assert stack[0].kwargs["allowed_hosts"] == ["academy.example.org"]
    guarded = TrustedHostMiddleware(web.SecurityHeaders(_plain_app), allowed_hosts=["academy.example.org"])
    status, _ = _call(guarded, "/", host="evil.example")
    assert status == 400
    status, _ = _call(guarded, "/", host="academy.example.org")
    assert status == 200


@pytest.mark.parametrize(("public_url", "name", "secure"), [
    ("http://localhost:8501", "dpa_session", False),
    ("https://academy.example.org", "__Host-dpa_session", True),
])
@pytest.mark.usefixtures("app_db")
def test_session_cookie_is_secure_over_https(monkeypatch, public_url, name, secure):
    """F-13: the cookie script the page sends carries ``Secure`` and the ``__Host-`` name on HTTPS."""
    from academy.accounts import sign_up
    from academy.db import session_scope
    from academy.settings import get_settings
    from tests.apptest import open_page, press

    with session_scope() as s:
        sign_up(session=s, email="cookie@example.org", password=PASSWORD)
    monkeypatch.setenv("PUBLIC_URL", public_url)
    get_settings.cache_clear()
    at = open_page("account")
    at.text_input(key="in_email").input("cookie@example.org")
    at.text_input(key="in_password").input(PASSWORD)
    press(at, i18n.t("account.sign_in", "en"))
    scripts = [h.proto.body for h in at.get("html")]
    get_settings.cache_clear()
    [script] = [s for s in scripts if "document.cookie" in s]
    assert re.search(rf'"{re.escape(name)}=[^;"]+; path=/;', script), script
    assert ("; Secure" in script) == secure


def test_a_client_cannot_flush_the_global_caches():
    """F-14: Streamlit's clear_cache message clears only the sender's own session state."""
    from unittest.mock import MagicMock

    from streamlit.runtime.app_session import AppSession

    calls = []

    @st.cache_data
    def expensive(x: int) -> int:
        calls.append(x)
        return x

    expensive(1)
    original = AppSession._handle_clear_cache_request
    try:
        web.refuse_global_cache_clear()
        fake = MagicMock()
        AppSession._handle_clear_cache_request(fake)
        fake._session_state.clear.assert_called_once()
        expensive(1)
        assert calls == [1]  # still cached
    finally:
        AppSession._handle_clear_cache_request = original
        expensive.clear()


# --- the real server in a real browser ----------------------------------------------------------


def test_metrics_endpoint_is_not_public(server):
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{server.url}/_stcore/metrics", timeout=10)
    assert err.value.code == 404
    with urllib.request.urlopen(f"{server.url}/_stcore/health", timeout=10) as resp:
        assert resp.status == 200 and resp.headers["X-Content-Type-Options"] == "nosniff"


def test_websocket_messages_are_capped_at_a_few_megabytes(server):
    """Review 2026-12-04 L-2: one 150 MB message cost the server 300 MB before it was refused.
    ``server.maxMessageSize`` (megabytes) bounds it: room for the largest message a learner
    sends (a 64 KiB exercise source), and a larger one is refused by its frame's header alone:
    the server answers 1009 before a byte of the rest has come (at 200 MB it waited for it)."""
    import base64
    import os
    import socket
    import struct
    from urllib.parse import urlsplit

    from streamlit import config

    from academy.models import EXERCISE_SOURCE_MAX

    limit = config.get_option("server.maxMessageSize") * 10**6
    assert 8 * EXERCISE_SOURCE_MAX < limit <= 8 * 10**6
    where = urlsplit(server.url)
    with socket.create_connection((where.hostname, where.port), timeout=30) as sock:
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall((f"GET /_stcore/stream HTTP/1.1\r\nHost: {where.netloc}\r\nUpgrade: websocket\r\n"
                      f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                      f"Sec-WebSocket-Protocol: streamlit\r\nOrigin: {server.url}\r\n\r\n").encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(4096)
        assert answer.startswith(b"HTTP/1.1 101"), answer[:200]
        # A binary frame that declares a length one byte over the limit, and 1 KiB of it.
        sock.sendall(struct.pack("!BBQ", 0x82, 0x80 | 127, limit + 1) + os.urandom(4) + b"\0" * 1024)
        frame = answer.split(b"\r\n\r\n", 1)[1]
        while len(frame) < 4:
            chunk = sock.recv(4096)
            assert chunk, "closed without a close frame"
            frame += chunk
    assert frame[0] == 0x88, frame[:20]  # a close frame...
    assert struct.unpack("!H", frame[2:4])[0] == 1009  # ...saying "message too big"


EDITOR_FONT = "https://fonts.googleapis.com/css2?family=Source+Code+Pro"


@pytest.mark.browser
def test_pages_work_under_the_csp_and_ask_no_other_host(server, browser, artifacts):
    """Every page opens, a sign-up sets the cookie (an inline script), and the browser reports
    no CSP violation and requests nothing from anywhere but the app (F-19: page icon), except
    the exercise editor's web font, which the CSP refuses before anything is sent."""
    from tests import browserkit as kit

    ctx = browser.new_context(locale="en-US", viewport={"width": 1300, "height": 900})
    page = ctx.new_page()
    requests: list[str] = []
    problems: list[str] = []
    refused: list[tuple[str, str | None]] = []
    page.on("request", lambda r: requests.append(r.url))
    page.on("requestfailed", lambda r: refused.append((r.url, r.failure)))
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.on("console", lambda m: problems.append(m.text) if "Content Security Policy" in m.text else None)
    response = page.goto(f"{server.url}/account?lang=en")
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    kit.wait_app(page)
    kit.sign_up(page, "en", name="Csp Tester", email="csp@example.org", password=PASSWORD)
    for key in ("nav.home", "nav.lessons", "nav.labs", "nav.exercises", "nav.quiz", "nav.certificate", "nav.verify",
                "nav.account"):
        heading = re.compile(".+") if key in ("nav.home", "nav.lessons") else None
        if key == "nav.exercises":  # its editor asks for the font: wait for the refusal itself
            with page.expect_console_message(lambda m: EDITOR_FONT in m.text, timeout=kit.WAIT):
                kit.nav(page, key, "en", heading)
        else:
            kit.nav(page, key, "en", heading)
        for frame in page.frames:  # the components' frames have loaded what they ask for
            frame.wait_for_load_state("load", timeout=kit.WAIT)
        kit.still(page)
        assert not page.get_by_test_id("stException").count(), key
    page.screenshot(path=str(artifacts / "security-csp-account.png"), full_page=True)
    ctx.close()
    # The one refusal we expect, and the only one: the exercise editor's themes (streamlit-code-
    # editor) @import Google's Source Code Pro. The CSP stops it in the browser, so nothing goes
    # out and the editor uses the system's monospace font.
    font = [p for p in problems if EDITOR_FONT in p and "has been blocked" in p]
    assert font, "the exercise editor was not on a page (or no longer asks for the font)"
    assert [p for p in problems if p not in font] == []
    foreign = [u for u in requests if not (u.startswith(server.url) or u.startswith(("data:", "blob:")))]
    assert foreign and all(u.startswith(EDITOR_FONT) for u in foreign), foreign
    assert {url for url, why in refused if why == "csp"}  # refused in the browser, never sent == set(foreign), refused


@contextlib.contextmanager
def _other_site():
    """A bare HTML page served from another port: the origin of a site that would frame ours."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's name
            body = b"<!doctype html><html><body>another site</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    site = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=site.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{site.server_address[1]}/"
    finally:
        site.shutdown()
        site.server_close()


@pytest.mark.browser
def test_no_other_site_can_frame_a_page_or_a_component_and_our_pages_frame_only_components(server, browser):
    """Clickjacking: a page of another origin framing our pages and our editor's component gets
    the browser's error page for both; our own page can frame the component, not a page."""
    from tests import browserkit as kit

    ctx = browser.new_context(locale="en-US")
    page = ctx.new_page()
    page.goto(f"{server.url}/exercises?lang=en")  # the page imports the editor: its files are served
    kit.wait_app(page)
    with urllib.request.urlopen(f"{server.url}{COMPONENT}", timeout=10) as resp:
        assert resp.status == 200 and resp.headers["X-Frame-Options"] == "SAMEORIGIN"

    def framed(host_page, paths: list[str]) -> list[str]:
        """Frame each path in ``host_page``; the URL each frame ended on."""
        host_page.evaluate("""paths => Promise.all(paths.map(p => new Promise(done => {
            const f = document.createElement('iframe'); f.src = p; f.onload = done; f.onerror = done;
            document.body.appendChild(f); setTimeout(done, 10000); })))""", paths)
        return [f.url for f in host_page.frames if f.parent_frame == host_page.main_frame
                and f.url != "about:blank"][-len(paths):]

    targets = [f"{server.url}{COMPONENT}", f"{server.url}/exercises", f"{server.url}/account"]
    # Our own page: the component loads, a page does not.
    ours = framed(page, targets)
    assert ours[0] == targets[0], ours
    assert [u.startswith("chrome-error:") for u in ours[1:]] == [True, True], ours
    # Another site: a server of its own on another port of this machine, so another origin in
    # the same (loopback) address space, where only our headers can stop the framing.
    with _other_site() as evil:
        page.goto(evil)
        theirs = framed(page, targets)
    assert len(theirs) == 3 and all(u.startswith("chrome-error:") for u in theirs), theirs
    ctx.close()
