"""The HTTP surface (review F-13, F-14, F-19): security headers on every response, a CSP the
real front end works under, no request to any other host, no public metrics, a session
cookie that is ``Secure`` over HTTPS, and no global cache flush by a client."""

from __future__ import annotations

import asyncio
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

    async def receive():  # noqa: ANN202
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message) -> None:  # noqa: ANN001
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": path, "headers": [(b"host", host.encode())],
             "query_string": b""}
    # In a thread of its own: Playwright's sync API may hold an event loop in this one.
    worker = threading.Thread(target=asyncio.run, args=(app(scope, receive, send),))
    worker.start()
    worker.join()
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}


async def _plain_app(_scope, _receive, send) -> None:  # noqa: ANN001
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/html"), (b"x-frame-options", b"SAMEORIGIN")]})
    await send({"type": "http.response.body", "body": b"<html></html>"})


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


@pytest.mark.browser
def test_pages_work_under_the_csp_and_ask_no_other_host(server, browser, artifacts):
    """Every page opens, a sign-up sets the cookie (an inline script), and the browser reports
    no CSP violation and requests nothing from anywhere but the app (F-19: page icon)."""
    from tests import browserkit as kit

    ctx = browser.new_context(locale="en-US", viewport={"width": 1300, "height": 900})
    page = ctx.new_page()
    requests: list[str] = []
    problems: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.on("console", lambda m: problems.append(m.text) if "Content Security Policy" in m.text else None)
    response = page.goto(f"{server.url}/account?lang=en")
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    kit.wait_app(page)
    kit.sign_up(page, "en", name="Csp Tester", email="csp@example.org", password=PASSWORD)
    for key in ("nav.home", "nav.lessons", "nav.labs", "nav.exercises", "nav.quiz", "nav.certificate", "nav.verify",
                "nav.account"):
        heading = re.compile(".+") if key in ("nav.home", "nav.lessons") else None
        kit.nav(page, key, "en", heading)
        page.wait_for_timeout(800)
        assert not page.get_by_test_id("stException").count(), key
    page.screenshot(path=str(artifacts / "security-csp-account.png"), full_page=True)
    ctx.close()
    assert problems == []
    foreign = [u for u in requests if not (u.startswith(server.url) or u.startswith(("data:", "blob:")))]
    assert foreign == []
