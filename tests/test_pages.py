"""Every page renders in every language without an exception (AppTest)."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from academy import i18n
from tests.apptest import MAIN, assert_headings_in_order, open_page

PAGES = ["home", "lessons", "labs", "exercises", "quiz", "review", "certificate", "verify", "account"]


def run_page(page: str, lang: str, **params) -> AppTest:
    return open_page(page, lang, **params)


def texts(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [t.value for t in at.title] + [c.value for c in at.caption]
    parts += [h.value for h in at.header] + [h.value for h in at.subheader]
    parts += [i.value for i in at.info] + [w.value for w in at.warning] + [e.value for e in at.error]
    return "\n".join(str(p) for p in parts)


@pytest.mark.parametrize("lang", sorted(i18n.languages()))
@pytest.mark.parametrize("page", PAGES)
@pytest.mark.usefixtures("app_db")
def test_page_renders(page, lang):
    at = run_page(page, lang)
    assert not at.exception, at.exception
    if page not in ("home", "lessons"):
        assert at.title[0].value == i18n.t(f"nav.{page}", lang)
    assert_headings_in_order(at)


@pytest.mark.usefixtures("app_db")
def test_chinese_ui_text():
    at = run_page("home", "zh")
    assert "课程地图" in texts(at)


@pytest.mark.usefixtures("app_db")
def test_unknown_language_falls_back_with_a_message():
    at = run_page("home", "xx")
    assert not at.exception
    assert [w.value for w in at.warning] == [i18n.t("common.unknown_language_link", "en")]  # F-10: not echoed
    assert at.query_params["lang"] == ["en"] or at.query_params["lang"] == "en"


@pytest.mark.usefixtures("app_db")
def test_admin_page_refuses_non_admins():
    at = AppTest.from_file(str(Path(MAIN).parent / "views" / "admin.py"), default_timeout=30)
    at.session_state["lang"] = "en"
    at.session_state["learner_id"] = None
    at.run()
    assert not at.exception
    assert at.error[0].value == i18n.t("admin.refused", "en")


@pytest.mark.usefixtures("app_db")
def test_sign_up_sign_out_sign_in():
    at = run_page("account", "nl")
    at.text_input(key="up_name").input("Zoë Ødegård")
    at.text_input(key="up_email").input("zoe@example.org")
    at.text_input(key="up_password").input("a long enough password")
    at.button[1].click() if len(at.button) > 1 else None
    sign_up_form_button = [b for b in at.button if b.label == i18n.t("account.sign_up", "nl")][0]
    sign_up_form_button.click()
    at.run()
    assert not at.exception
    assert i18n.t("account.created", "nl") in [s.value for s in at.success]
    assert at.session_state["learner_id"] is not None
    [b for b in at.button if b.label == i18n.t("account.sign_out", "nl")][0].click()
    at.run()
    assert at.session_state["learner_id"] is None
    at.text_input(key="in_email").input("ZOE@example.org")
    at.text_input(key="in_password").input("a long enough password")
    [b for b in at.button if b.label == i18n.t("account.sign_in", "nl")][0].click()
    at.run()
    assert at.session_state["learner_id"] is not None


@pytest.mark.usefixtures("app_db")
def test_bad_sign_up_gets_a_message_in_the_language():
    at = run_page("account", "zh")
    at.text_input(key="up_email").input("not an email")
    at.text_input(key="up_password").input("a long enough password")
    [b for b in at.button if b.label == i18n.t("account.sign_up", "zh")][0].click()
    at.run()
    assert i18n.t("account.err_email", "zh") in [e.value for e in at.error]


@pytest.mark.parametrize("lang", sorted(i18n.languages()))
@pytest.mark.usefixtures("app_db")
def test_every_lesson_section_renders(lang):
    from academy import lessons

    for number, section in enumerate(lessons.sections(lang), 1):
        at = run_page("lessons", lang, section=section.id)
        assert not at.exception, (section.id, at.exception)
        assert at.title[0].value == f"{number}. {section.title}"
        assert len(texts(at)) > 500, f"{lang}/{section.id} looks empty"
        assert_headings_in_order(at)  # the lesson's own ## and ### under the page's h1


def test_no_pages_folder_beside_the_entry_script():
    """A `pages/` folder would make Streamlit run a URL like /verify without main.py
    on a fresh server (its old multipage mode): the QR link would fail."""
    assert not (Path(MAIN).parent / "pages").exists()


@pytest.mark.parametrize("lang", sorted(i18n.languages()))
@pytest.mark.usefixtures("app_db")
def test_the_page_says_its_language(lang):
    """Streamlit's page says ``lang="en"`` whatever the language: every run sends the script
    that sets ``<html lang dir>`` (app/static/page.js; the browser test reads the attribute)."""
    import json

    at = run_page("home", lang)
    tag, direction = i18n.page_language(lang)
    bodies = [h.proto.body for h in at.get("html")]
    assert any(json.dumps({"lang": tag, "dir": direction}) in body for body in bodies), bodies
