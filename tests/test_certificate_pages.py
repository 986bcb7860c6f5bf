"""Certificate and Verify pages in AppTest: claim after a pass, verify, revoke, refuse."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

import certificates as certs
from academy import i18n
from academy.accounts import sign_up
from academy.db import session_scope
from benchmarks.quizkey import right_answer
from quizzes import store
from quizzes.bank import load_bank
from tests import apptest
from tests.exercisepass import pass_required_exercises


def learner_who_passed(email: str, name: str = "Zoë Ødegård") -> int:
    bank = load_bank()
    with session_scope() as s:
        learner = sign_up(session=s, email=email, password="long enough pw", display_name=name)
        attempt = store.start_attempt(session=s, learner_id=learner.id, lang="en", bank=bank)
        for pos, item in enumerate(attempt.plan):
            store.record_answer(session=s, attempt_id=attempt.id, learner_id=learner.id, position=pos,
                                response=right_answer(item, bank, "en"), lang="en", bank=bank)
        assert store.finish_attempt(session=s, attempt_id=attempt.id, learner_id=learner.id).passed
        pass_required_exercises(s, learner.id)  # the certificate's exercises (test_exercises_store)
    return learner.id


def open_page(page: str, lang: str, learner_id: int | None = None, **params) -> AppTest:
    at = apptest.open_page(page, lang, learner_id, **params)
    assert not at.exception, at.exception
    return at


@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
@pytest.mark.usefixtures("app_db")
def test_claim_then_verify_then_revoke(lang):
    learner_id = learner_who_passed(f"cert-{lang}@example.org", "张伟" if lang == "zh" else "Zoë Ødegård")
    at = open_page("certificate", lang, learner_id)
    # Journey Minor 12: the certificate's languages are named as the sidebar names them (简体中文).
    assert at.selectbox[-1].options == at.sidebar.selectbox[0].options == list(i18n.languages().values())
    at.selectbox[-1].set_value(lang)
    [b for b in at.button if b.label == i18n.t("certificate.create", lang)][0].click()
    at.run()
    assert not at.exception
    assert i18n.t("certificate.created", lang) in [s.value for s in at.success]
    with session_scope() as s:
        (cert,) = certs.certificates_of(session=s, learner_id=learner_id)
    assert any(cert.id in c.value for c in at.code)
    # Beside the PDF: the Open Badges credential and the LinkedIn link, for this certificate.
    labels = [b.proto.label for b in at.get("download_button")]
    assert i18n.t("certificate.download_badge", lang) in labels, labels
    (linkedin,) = [b.proto for b in at.get("link_button")]
    assert linkedin.label == i18n.t("certificate.linkedin", lang)
    assert linkedin.url.startswith("https://www.linkedin.com/profile/add?") and f"certId={cert.id}" in linkedin.url
    with session_scope() as s:
        assert certs.get_certificate(session=s, cert_id=cert.id).credential_json  # what the button serves
    # The public page, reached by the QR link, says valid and shows no e-mail.
    v = open_page("verify", lang, None, id=cert.id)
    assert certs.texts(lang)["status"]["valid"] in [s.value for s in v.success]
    page_text = " ".join(m.value for m in [*v.markdown, *v.text])
    assert f"cert-{lang}@example.org" not in page_text
    assert any(f": {cert.name}" in x.value for x in v.text)  # as plain text, not Markdown
    # An admin revokes it; the page says revoked.
    with session_scope() as s:
        certs.revoke(session=s, cert_id=cert.id, actor_id=None, reason="test revocation")
    v = open_page("verify", lang, None, id=cert.id)
    assert any(e.value.startswith(certs.texts(lang)["status"]["revoked"].split("{")[0]) for e in v.error)


@pytest.mark.usefixtures("app_db")
def test_no_certificate_without_a_pass():
    with session_scope() as s:
        learner = sign_up(session=s, email="nopass@example.org", password="long enough pw")
    at = open_page("certificate", "en", learner.id)
    # The quiz is not all: the page names the exercises the certificate asks for too.
    assert i18n.t("certificate.locked_with_exercises", "en", pass_mark=80) in [i.value for i in at.info]
    links = [link.proto.label for link in at.get("page_link")]
    assert i18n.t("certificate.exercise_todo", "en", title="Ring all-reduce by hand") in links, links
    assert not [b for b in at.button if b.label == i18n.t("certificate.create", "en")]


@pytest.mark.parametrize(
    ("junk", "status"),
    [("hello", "malformed"), ("DP-0000-0000-0000-0000-00", None), ("<script>alert(1)</script>", "malformed"),
     ("' OR 1=1 --", "malformed"), ("x" * 5000, "malformed"),
     ("x://[/?id=1", "malformed"), ("http://[::1/?id=DP-32GY-9968-T9TV-JB45-KH", "malformed"),  # F-12
     # Journey Minor 11: words are not an ID, even when their letters add up to 18 of the alphabet.
     ("hello world'; DROP TABLE", "malformed"), ("hello world drop tabl", "malformed")],
)
@pytest.mark.usefixtures("app_db")
def test_verify_junk_ids(junk, status):
    at = open_page("verify", "nl", None, id=junk)
    shown = [m.value for m in at.error] + [m.value for m in at.warning]
    assert shown, "a message is shown"
    if status:
        assert certs.texts("nl")["status"][status] in shown
    assert not at.success


@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
@pytest.mark.parametrize("blank", ["", "   "])
@pytest.mark.usefixtures("app_db")
def test_verify_with_nothing_typed_says_what_to_type(lang, blank):
    """Journey Minor 11: Verify pressed on an empty or blank ID said nothing at all."""
    at = open_page("verify", lang)
    assert not at.warning and not at.error  # nothing asked yet: nothing to say
    at.text_input[0].set_value(blank)
    [b for b in at.button if b.label == i18n.t("verify.check", lang)][0].click()
    at.run()
    assert [w.value for w in at.warning] == [i18n.t("verify.empty", lang)]
    assert not at.error and not at.success


@pytest.mark.usefixtures("app_db")
def test_verify_typo_is_caught():
    learner_id = learner_who_passed("typo@example.org")
    with session_scope() as s:
        cert = certs.issue_for_learner(session=s, learner_id=learner_id, name="Ada", lang="en")
    body = cert.id.replace("-", "")
    i = 5
    swapped = body[:i] + ("0" if body[i] != "0" else "1") + body[i + 1:]
    at = open_page("verify", "en", None, id=swapped)
    assert certs.texts("en")["status"]["typo"] in [w.value for w in at.warning]


@pytest.mark.usefixtures("app_db", "monkeypatch")
def test_admin_revokes_from_the_page():
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


@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
@pytest.mark.usefixtures("app_db")
def test_plain_revoke_says_the_learner_may_claim_again_and_neither_is_the_default(lang):
    """Review F-3 residue: a plain Revoke, even for "exam fraud", lets the learner issue a
    new certificate at once, and the page did not say so on the button; Revoke and
    disqualify was the primary button, and Enter pressed plain Revoke. Now each button
    says what becomes of the learner, they look alike and Enter submits neither."""
    learner_id = learner_who_passed(f"again-{lang}@example.org")
    with session_scope() as s:
        cert = certs.issue_for_learner(session=s, learner_id=learner_id, name="Bob Learner", lang="en")
        admin = sign_up(session=s, email=f"boss-{lang}@example.org", password="long enough pw")
        admin.is_admin = True
        s.add(admin)
    at = open_page("admin", lang, admin.id)
    plain, for_cause = (i18n.t(f"admin_certs.{k}", lang) for k in ("revoke_button", "revoke_disqualify_button"))
    claim = {"en": "may claim a new certificate", "zh": "重新申领证书", "nl": "opnieuw een certificaat aanvragen"}
    assert claim[lang] in plain and claim[lang] not in for_cause
    buttons = {b.label: b for b in at.button}
    assert {buttons[plain].proto.type, buttons[for_cause].proto.type} == {"secondary"}
    (revoke_form,) = [f.proto.form for f in at.get("form") if f.proto.form.form_id == buttons[plain].form_id]
    assert revoke_form.enter_to_submit is False
    at.text_input[-2].input(cert.id)
    at.text_input[-1].input("exam fraud")
    buttons[plain].click()
    at.run()
    assert i18n.t("admin_certs.revoked", lang, id=cert.id) in [m.value for m in at.success]
    assert i18n.t("admin_certs.may_claim_again", lang) in [m.value for m in at.warning]
    page = open_page("certificate", lang, learner_id)  # as the page said: the learner may claim again
    assert [b for b in page.button if b.label == i18n.t("certificate.create", lang)]


# --- issue #17: user text is text, one active certificate, disqualification ------------------------

HOSTILE_NAMES = ["Bob http://evil.example/login", "Bob www.evil-example.com/reset", "Bob admin@evil.example",
                 "Zo&euml; &amp; &lt;b&gt;bold&lt;/b&gt; X", "**Bold** [x](http://a.example) <b>b</b>"]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
@pytest.mark.usefixtures("app_db")
def test_verify_page_shows_names_as_plain_text(name):
    # F-11: autolinks and HTML entities survived the Markdown escaping.
    with session_scope() as s:
        cert = certs.issue_certificate(session=s, learner_id=None, attempt_id=None, name=name, lang="en",
                                       score=90, pass_date="2026-11-30")
    v = open_page("verify", "en", None, id=cert.id)
    assert certs.texts("en")["status"]["valid"] in [m.value for m in v.success]
    assert any(name in x.value.splitlines() or f": {name}" in x.value for x in v.text), [x.value for x in v.text]
    for m in v.markdown:  # no element interprets the name
        assert "evil" not in m.value and "euml" not in m.value and "Bold" not in m.value


@pytest.mark.parametrize(("name", "named"), [("Bob\u200bZero", "U+200B"), ("Bob\u200dWidth", "U+200D"),
                                             ("Bob\u2060X", "U+2060"), ("\u202egnp.exe", "U+202E")])
@pytest.mark.usefixtures("app_db")
def test_invisible_characters_are_refused_by_name(name, named):
    # F-16 (and F-19's RLO message): named as what they are, not as "not in the fonts".
    learner_id = learner_who_passed(f"inv{named[2:]}@example.org")
    at = open_page("certificate", "en", learner_id)
    at.text_input[0].set_value(name)
    [b for b in at.button if b.label == i18n.t("certificate.create", "en")][0].click()
    at.run()
    (error,) = [e.value for e in at.error]
    assert named in error
    assert certs.texts("en")["unprintable"]["message"].split("{")[0] not in error  # not "cannot print"
    with session_scope() as s:
        assert certs.certificates_of(session=s, learner_id=learner_id) == []


@pytest.mark.usefixtures("app_db")
def test_claiming_again_does_not_mint_a_second_certificate():
    # F-2: "Create my certificate" stays away once a certificate is active; reissue is offered.
    learner_id = learner_who_passed("once@example.org")
    at = open_page("certificate", "en", learner_id)
    create = i18n.t("certificate.create", "en")
    at.text_input[0].set_value("Bob Learner")
    [b for b in at.button if b.label == create][0].click()
    at.run()
    assert not [b for b in at.button if b.label == create]
    assert [b for b in at.button if b.label == i18n.t("certificate.reissue_button", "en")]
    with session_scope() as s:
        assert len(certs.certificates_of(session=s, learner_id=learner_id)) == 1


@pytest.mark.usefixtures("app_db")
def test_admin_disqualifies_and_lifts():
    # F-3: after "revoke and disqualify" the learner cannot claim a new one until an admin lifts it.
    learner_id = learner_who_passed("cheat@example.org")
    with session_scope() as s:
        cert = certs.issue_for_learner(session=s, learner_id=learner_id, name="Bob Learner", lang="en")
        admin = sign_up(session=s, email="boss@example.org", password="long enough pw")
        admin.is_admin = True
        s.add(admin)
    at = open_page("admin", "en", admin.id)
    at.text_input[-2].input(cert.id)
    at.text_input[-1].input("exam fraud")
    [b for b in at.button if b.label == i18n.t("admin_certs.revoke_disqualify_button", "en")][0].click()
    at.run()
    assert i18n.t("admin_certs.disqualified", "en", id=cert.id) in [m.value for m in at.success]
    assert any(cert.id in x.value for x in at.text)
    page = open_page("certificate", "en", learner_id)
    assert i18n.t("certificate.disqualified", "en") in [m.value for m in page.error]
    assert not [b for b in page.button if b.label == i18n.t("certificate.create", "en")]
    [b for b in at.button if b.label == i18n.t("admin_certs.lift_button", "en")][0].click()
    at.run()
    assert i18n.t("admin_certs.lifted", "en", id=cert.id) in [m.value for m in at.success]
    page = open_page("certificate", "en", learner_id)
    assert [b for b in page.button if b.label == i18n.t("certificate.create", "en")]
    with session_scope() as s:
        actions = [(e.action, e.actor_id) for e in certs.events_of(session=s, cert_id=cert.id)]
    assert actions == [("issued", learner_id), ("revoked", admin.id), ("disqualified", admin.id),
                       ("lifted", admin.id)]


@pytest.mark.usefixtures("app_db")
def test_full_width_id_from_a_cjk_keyboard_verifies():
    # F-19: "ＤＰ－３２ＧＹ…" read as "not a certificate ID".
    with session_scope() as s:
        cert = certs.issue_certificate(session=s, learner_id=None, attempt_id=None, name="张伟", lang="zh",
                                       score=90, pass_date="2026-11-30")
    full_width = "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in cert.id)
    v = open_page("verify", "zh", None, id=full_width)
    assert certs.texts("zh")["status"]["valid"] in [m.value for m in v.success]


@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
@pytest.mark.usefixtures("app_db")
def test_dates_read_in_the_learners_language(lang):
    """Issued and revoked dates are Babel's, in the page's language (issue #14), never ISO."""
    learner_id = learner_who_passed(f"dates-{lang}@example.org")
    with session_scope() as s:
        cert = certs.issue_for_learner(session=s, learner_id=learner_id, name="Zoë Ødegård", lang="en")
        issued = cert.issued_at
    day = i18n.format_date(issued, lang)
    assert day != f"{issued:%Y-%m-%d}"
    at = open_page("certificate", lang, learner_id)
    assert any(day in c.value for c in at.caption), [c.value for c in at.caption]
    assert not any(f"{issued:%Y-%m-%d}" in c.value for c in at.caption)
    v = open_page("verify", lang, None, id=cert.id)
    assert any(f": {day}" in x.value for x in v.text)  # the "Issued" row
    with session_scope() as s:
        certs.revoke(session=s, cert_id=cert.id, actor_id=None, reason="test revocation")
    v = open_page("verify", lang, None, id=cert.id)
    assert any(day in e.value for e in v.error), [e.value for e in v.error]


@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
@pytest.mark.usefixtures("app_db")
def test_a_reissued_certificate_reads_replaced_not_revoked_and_the_holder_chooses_the_link(lang):
    """Issue #22: after a reissue the old ID's Verify page says "replaced by a newer
    certificate" (a warning, not a red "revoked"); the reissue form states that showing
    the new ID is the holder's choice, and the new ID appears only when they tick it."""
    learner_id = learner_who_passed(f"rename-{lang}@example.org")
    with session_scope() as s:
        first = certs.issue_for_learner(session=s, learner_id=learner_id, name="Zoë Ødegård", lang=lang).id
    at = open_page("certificate", lang, learner_id)
    choice = i18n.t("certificate.reissue_show_new", lang)
    assert [c for c in at.checkbox if c.label == choice and c.value is False]  # off unless ticked
    assert i18n.t("certificate.reissue_show_new_help", lang) in [c.value for c in at.caption]

    def reissue(page, name: str, show: bool) -> str:
        page.text_input[-1].set_value(name)
        [c for c in page.checkbox if c.label == choice][0].set_value(show)
        [b for b in page.button if b.label == i18n.t("certificate.reissue_button", lang)][0].click()
        page.run()
        assert not page.exception and i18n.t("certificate.reissued", lang) in [m.value for m in page.success]
        with session_scope() as s:
            return certs.certificates_of(session=s, learner_id=learner_id)[0].id

    second = reissue(at, "Zoë Berg", show=False)
    assert any(i18n.t("certificate.status_replaced", lang) in m.value and first in m.value for m in at.markdown)
    status = certs.texts(lang)["status"]
    v = open_page("verify", lang, None, id=first)
    assert not v.error and not v.success
    assert [w for w in v.warning if w.value.startswith(status["replaced"].split("{")[0])]
    assert status["replaced_id_hidden"] in [c.value for c in v.caption]
    assert second not in " ".join(x.value for x in [*v.text, *v.markdown, *v.caption])

    third = reissue(open_page("certificate", lang, learner_id), "Zoë Bergman", show=True)
    v = open_page("verify", lang, None, id=second)
    assert [w for w in v.warning if w.value.startswith(status["replaced"].split("{")[0])]
    label = certs.texts(lang)["labels"]["replaced_by"]
    assert any(f"{label}: {third}" in x.value for x in v.text)
    assert status["replaced_id_hidden"] not in [c.value for c in v.caption]
