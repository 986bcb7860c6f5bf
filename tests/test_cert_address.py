"""The public address a certificate signs (issue #36, journey review M1).

One function, ``certificates.address.public_url``: PUBLIC_URL when set, else the address the
app serves on (``make run PORT=8631`` gives ``http://localhost:8631``); everything a
certificate signs comes from it; issuing asks that address first whether it answers as this
academy, and refuses, saying why in the learner's language, when it does not. The whole
round trip on a real server on another port (QR code, badge verified with revocation, no
flag) is in ``tests/test_journey.py``; these tests need no server.
"""

from __future__ import annotations

import io
import json
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from pypdf import PdfReader
from sqlmodel import select
from streamlit import config
from streamlit.testing.v1.util import patch_config_options

import certificates as certs
from academy import i18n
from academy.db import session_scope
from academy.models import Certificate
from academy.settings import get_settings
from benchmarks.appserver import free_port
from certificates import address, addresscheck, keys, proofs, store
from certificates.errors import AddressUnreachable
from tests.test_certificate_pages import learner_who_passed, open_page


@pytest.fixture
def env(monkeypatch, secrets):  # noqa: ARG001 - asked for its own issuer keys
    """Set environment variables for one test (own issuer keys), with the settings read afresh."""

    def set_env(**values: str) -> None:
        for key, value in values.items():
            monkeypatch.setenv(key, value)
        get_settings.cache_clear()

    yield set_env
    get_settings.cache_clear()


@pytest.fixture
def www(tmp_path):
    """A plain HTTP server on 127.0.0.1 serving a folder: another app on a port."""
    folder = tmp_path / "www"
    (folder / ".well-known").mkdir(parents=True)
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def issue(session, name: str = "Ada Lovelace") -> Certificate:
    return store.issue_certificate(session=session, learner_id=None, attempt_id=None, name=name, lang="en",
                                   score=90, pass_date="2026-12-04")


def test_public_url_is_public_url_when_set(env):
    env(PUBLIC_URL="https://academy.example.org/")
    assert address.public_url() == "https://academy.example.org"
    assert address.notice() is None


@pytest.mark.parametrize(("options", "expected"), [
    ({"server.port": 8631}, "http://localhost:8631"),
    ({"server.port": 8631, "server.address": "127.0.0.1"}, "http://127.0.0.1:8631"),
    ({"server.port": 8631, "server.address": "0.0.0.0"}, "http://localhost:8631"),
    ({"server.port": 8631, "server.address": "::1"}, "http://[::1]:8631"),
    ({"server.port": 8631, "server.baseUrlPath": "/academy/"}, "http://localhost:8631/academy"),
])
def test_without_public_url_the_address_follows_the_port(env, options, expected):
    env(PUBLIC_URL="")
    with patch_config_options(options):
        assert address.public_url() == expected
        assert address.notice() == address.LOCAL


def test_a_browser_address_named_for_streamlit_is_derived_but_not_local(env, monkeypatch):
    env(PUBLIC_URL="")
    monkeypatch.setattr(config, "is_manually_set", lambda name: name == "browser.serverAddress")
    with patch_config_options({"server.port": 8631, "browser.serverAddress": "academy.example.org"}):
        assert address.public_url() == "http://academy.example.org:8631"
        assert address.notice() == address.DERIVED


@pytest.mark.parametrize(("url", "local"), [
    ("http://localhost:8501", True), ("http://127.0.0.2:80", True), ("http://[::1]:8501", True),
    ("http://0.0.0.0:8501", True), ("http://academy.localhost", True), ("https://academy.example.org", False),
    ("http://192.0.2.7:8501", False),
])
def test_what_counts_as_local(url, local):
    assert address.is_local(url) is local


def test_everything_a_certificate_signs_comes_from_the_port_it_serves_on(env, session):
    """Journey M1: started as ``make run PORT=8631`` with no PUBLIC_URL, the page's link, the
    PDF's QR link, the badge's id, issuer, achievement and status list and LinkedIn's certUrl
    all name http://localhost:8631 (none of them 8501)."""
    env(PUBLIC_URL="")
    with patch_config_options({"server.port": 8631}):
        cert = issue(session)
        base = "http://localhost:8631"
        assert store.verify_link(cert) == f"{base}/verify?id={cert.id}"
        badge = json.loads(cert.credential_json)
        assert badge["id"] == f"{base}/credentials/{cert.id}.json"
        assert badge["issuer"]["id"] == proofs.did_web(base) == "did:web:localhost%3A8631"
        assert badge["credentialStatus"]["statusListCredential"] == f"{base}/status/1"
        assert badge["credentialSubject"]["achievement"]["id"].startswith(f"{base}/")
        linkedin = parse_qs(urlsplit(certs.linkedin_url(cert, get_settings())).query)
        assert linkedin["certUrl"] == [f"{base}/verify?id={cert.id}"]
        printed = PdfReader(io.BytesIO(store.render_pdf(cert))).pages[0].extract_text()
        assert f"{base}/verify?id={cert.id}" in printed
        assert "8501" not in cert.credential_json + printed


def test_issuing_is_refused_while_the_address_does_not_answer(env, session):
    dead = f"http://127.0.0.1:{free_port()}"
    env(PUBLIC_URL=dead, PUBLIC_URL_CHECK="true")
    with pytest.raises(AddressUnreachable) as refused:
        issue(session)
    assert refused.value.reason == "unreachable" and refused.value.url == dead
    assert session.exec(select(Certificate)).all() == []  # nothing signed, nothing stored
    for lang in ("en", "zh", "nl"):  # said in the learner's language, with the address
        text = refused.value.text(lang)
        assert dead in text and text == i18n.t("certificate.err_address", lang, url=dead)
    # Off (a server that cannot reach its own public name): issued.
    env(PUBLIC_URL_CHECK="false")
    assert issue(session).id


def test_issuing_asks_for_this_academys_did_document(env, session, www):
    """Another app on the port, or another academy there: refused. This academy: issued."""
    folder, url = www
    env(PUBLIC_URL=url, PUBLIC_URL_CHECK="true")
    document = folder / ".well-known" / "did.json"
    document.write_text("<html>another app</html>")
    assert addresscheck.ask().reason == "unreachable"  # answers, but not JSON
    document.write_text(json.dumps({"id": "did:web:example.org"}))
    assert addresscheck.ask().reason == "not_academy"
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    stranger = Ed25519PrivateKey.generate().public_key()
    document.write_text(json.dumps(proofs.did_document(url, {"other": stranger})))
    with pytest.raises(AddressUnreachable) as refused:
        issue(session)
    assert refused.value.reason == "other_academy"
    document.write_text(json.dumps(proofs.did_document(url, {k.kid: k.public for k in [keys.active_key()]})))
    assert addresscheck.ask().ok
    cert = issue(session)
    assert json.loads(cert.credential_json)["issuer"]["id"] == proofs.did_web(url)


@pytest.mark.usefixtures("app_db")
def test_a_reissue_asks_too_and_keeps_the_old_certificate(env):
    learner_id = learner_who_passed("reissue-address@example.org")
    with session_scope() as s:
        old = certs.issue_for_learner(session=s, learner_id=learner_id, name="Ada", lang="en")
    env(PUBLIC_URL=f"http://127.0.0.1:{free_port()}", PUBLIC_URL_CHECK="true")
    with session_scope() as s, pytest.raises(AddressUnreachable):
        certs.reissue(session=s, cert_id=old.id, learner_id=learner_id, new_name="Ada L.", lang="en")
    with session_scope() as s:
        (kept,) = certs.certificates_of(session=s, learner_id=learner_id)
        assert kept.id == old.id and certs.row_status(kept) == "valid"


@pytest.mark.usefixtures("app_db")
@pytest.mark.parametrize("lang", ["zh", "nl"])
def test_the_certificate_page_says_why_in_the_learners_language(env, lang):
    dead = f"http://127.0.0.1:{free_port()}"
    env(PUBLIC_URL=dead, PUBLIC_URL_CHECK="true")
    learner_id = learner_who_passed(f"address-{lang}@example.org")
    at = open_page("certificate", lang, learner_id)
    [b for b in at.button if b.label == i18n.t("certificate.create", lang)][0].click()
    at.run()
    assert not at.exception
    assert i18n.t("certificate.err_address", lang, url=dead) in [e.value for e in at.error]
    assert not at.success
    with session_scope() as s:  # nothing issued, the pass kept: it can be claimed once the address works
        assert certs.certificates_of(session=s, learner_id=learner_id) == []
        assert certs.eligibility(session=s, learner_id=learner_id).eligible


@pytest.mark.usefixtures("app_db")
def test_the_admin_page_warns_of_a_local_address_and_says_it_does_not_answer(env):
    from academy.accounts import make_admin, sign_up

    dead = f"http://localhost:{free_port()}"
    env(PUBLIC_URL=dead, PUBLIC_URL_CHECK="true")
    with session_scope() as s:
        admin_id = sign_up(session=s, email="root@example.org", password="long enough pw", display_name="Root").id
        make_admin(session=s, email="root@example.org")
    at = open_page("admin", "nl", admin_id)
    assert i18n.t("admin.address_local", "nl", url=dead) in [w.value for w in at.warning]
    assert i18n.t("admin.address_refused.unreachable", "nl", url=dead) in [e.value for e in at.error]


@pytest.mark.parametrize(("public", "said"), [
    ("", "WARNING: certificates issued by this app will carry http://localhost:8631"),
    ("http://127.0.0.1:8631", "WARNING: certificates issued by this app will carry http://127.0.0.1:8631"),
    ("https://academy.example.org", None),
])
def test_start_up_says_where_certificates_will_point(env, capsys, public, said):
    from app import web

    env(PUBLIC_URL=public)
    with patch_config_options({"server.port": 8631}):
        web.warn_public_address()
    err = capsys.readouterr().err
    assert err.startswith(said) if said else err == ""
