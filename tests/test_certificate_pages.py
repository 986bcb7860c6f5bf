"""Certificate and Verify pages in AppTest: claim after a pass, verify, revoke, refuse."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

import certificates as certs
from app import i18n
from app.accounts import sign_up
from app.db import session_scope
from quizzes import store
from quizzes.bank import load_bank
from tests import apptest
from tests.quizkey import right_answer


def learner_who_passed(email: str, name: str = "Zoë Ødegård") -> int:
    bank = load_bank()
    with session_scope() as s:
        learner = sign_up(session=s, email=email, password="long enough pw", display_name=name)
        attempt = store.start_attempt(session=s, learner_id=learner.id, lang="en", bank=bank)
        for pos, item in enumerate(attempt.plan):
            store.record_answer(session=s, attempt_id=attempt.id, learner_id=learner.id, position=pos,
                                response=right_answer(item, bank, "en"), lang="en", bank=bank)
        assert store.finish_attempt(session=s, attempt_id=attempt.id, learner_id=learner.id).passed
    return learner.id


def open_page(page: str, lang: str, learner_id: int | None = None, **params) -> AppTest:
    at = apptest.open_page(page, lang, learner_id, **params)
    assert not at.exception, at.exception
    return at


@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_claim_then_verify_then_revoke(app_db, lang):
    learner_id = learner_who_passed(f"cert-{lang}@example.org", "张伟" if lang == "zh" else "Zoë Ødegård")
    at = open_page("certificate", lang, learner_id)
    at.selectbox[-1].set_value(lang)
    [b for b in at.button if b.label == i18n.t("certificate.create", lang)][0].click()
    at.run()
    assert not at.exception
    assert i18n.t("certificate.created", lang) in [s.value for s in at.success]
    with session_scope() as s:
        (cert,) = certs.certificates_of(session=s, learner_id=learner_id)
    assert any(cert.id in c.value for c in at.code)
    # The public page, reached by the QR link, says valid and shows no e-mail.
    v = open_page("verify", lang, None, id=cert.id)
    assert certs.texts(lang)["status"]["valid"] in [s.value for s in v.success]
    page_text = " ".join(m.value for m in v.markdown)
    assert f"cert-{lang}@example.org" not in page_text
    assert cert.name.split()[0] in page_text.replace("\\", "")
    # An admin revokes it; the page says revoked.
    with session_scope() as s:
        certs.revoke(session=s, cert_id=cert.id, actor_id=None, reason="test revocation")
    v = open_page("verify", lang, None, id=cert.id)
    assert any(e.value.startswith(certs.texts(lang)["status"]["revoked"].split("{")[0]) for e in v.error)


def test_no_certificate_without_a_pass(app_db):
    with session_scope() as s:
        learner = sign_up(session=s, email="nopass@example.org", password="long enough pw")
    at = open_page("certificate", "en", learner.id)
    assert i18n.t("certificate.locked", "en", pass_mark=80) in [i.value for i in at.info]
    assert not [b for b in at.button if b.label == i18n.t("certificate.create", "en")]


@pytest.mark.parametrize(
    ("junk", "status"),
    [("hello", "malformed"), ("DP-0000-0000-0000-0000-00", None), ("<script>alert(1)</script>", "malformed"),
     ("' OR 1=1 --", "malformed"), ("x" * 5000, "malformed")],
)
def test_verify_junk_ids(app_db, junk, status):
    at = open_page("verify", "nl", None, id=junk)
    shown = [m.value for m in at.error] + [m.value for m in at.warning]
    assert shown, "a message is shown"
    if status:
        assert certs.texts("nl")["status"][status] in shown
    assert not at.success


def test_verify_typo_is_caught(app_db):
    learner_id = learner_who_passed("typo@example.org")
    with session_scope() as s:
        cert = certs.issue_for_learner(session=s, learner_id=learner_id, name="Ada", lang="en")
    body = cert.id.replace("-", "")
    i = 5
    swapped = body[:i] + ("0" if body[i] != "0" else "1") + body[i + 1:]
    at = open_page("verify", "en", None, id=swapped)
    assert certs.texts("en")["status"]["typo"] in [w.value for w in at.warning]


def test_admin_revokes_from_the_page(app_db, monkeypatch):
    learner_id = learner_who_passed("revokee@example.org")
    with session_scope() as s:
        cert = certs.issue_for_learner(session=s, learner_id=learner_id, name="Ada", lang="en")
        admin = sign_up(session=s, email="root@example.org", password="long enough pw")
        admin.is_admin = True
        s.add(admin)
    at = open_page("admin", "en", admin.id)
    at.text_input[-2].input(cert.id)
    at.text_input[-1].input("issued in error")
    [b for b in at.button if b.label == i18n.t("admin_certs.revoke_button", "en")][0].click()
    at.run()
    assert i18n.t("admin_certs.revoked", "en", id=cert.id) in [s.value for s in at.success]
    with session_scope() as s:
        assert certs.lookup(session=s, text=cert.id).status == "revoked"
