"""Adding a language is adding content files (issue #14).

A copy of ``content/`` gets a fake fourth language ``xx`` (the English files
with a marker on every UI string and lesson title) and the app is pointed at
it with ``CONTENT_DIR``. Without a code change, every page then renders in
``?lang=xx``, shows xx's own strings, and offers xx wherever a language is
chosen (the language picker, the certificate's language).
"""

from __future__ import annotations

import copy
import shutil
from typing import Any

import pytest
import yaml

from academy import content, i18n, lessons
from academy.settings import get_settings
from tests.apptest import open_page
from tests.test_certificate_pages import learner_who_passed
from tests.test_pages import PAGES

MARK = "⟦xx⟧ "


def marked(value: Any) -> Any:
    """Every string of a catalog with the marker in front (plural forms too)."""
    if isinstance(value, dict):
        return {key: marked(v) for key, v in value.items()}
    return MARK + str(value)


@pytest.fixture
def xx_content(tmp_path, monkeypatch, request):
    request.getfixturevalue("app_db")  # a migrated database first
    root = tmp_path / "content"
    shutil.copytree(content.root(), root)
    shutil.copytree(root / "lessons" / "en", root / "lessons" / "xx")
    toc = copy.deepcopy(content.load(root / "lessons" / "en" / "toc.yaml"))  # the loaded value is shared
    toc["course_title"] = MARK + toc["course_title"]
    for section in toc["sections"]:
        section["title"] = MARK + section["title"]
    (root / "lessons" / "xx" / "toc.yaml").write_text(yaml.safe_dump(toc, allow_unicode=True), encoding="utf-8")
    strings = content.load(root / "i18n" / "en.yaml")
    (root / "i18n" / "xx.yaml").write_text(yaml.safe_dump(marked(strings), allow_unicode=True), encoding="utf-8")
    monkeypatch.setenv("CONTENT_DIR", str(root))
    get_settings.cache_clear()
    yield root
    monkeypatch.delenv("CONTENT_DIR")
    get_settings.cache_clear()


def test_the_language_list_comes_from_the_content(xx_content):
    assert content.root() == xx_content
    assert content.languages() == ("en", "nl", "xx", "zh")
    assert lessons.languages() == content.languages()
    assert i18n.languages()["xx"] == MARK + i18n.t("meta.name", "en")
    assert lessons.course_title("xx").startswith(MARK)
    assert i18n.normalise_lang("XX") == "xx"


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.usefixtures("xx_content")
def test_every_page_renders_in_the_new_language(page):
    at = open_page(page, "xx")
    assert not at.exception, at.exception
    assert at.session_state["lang"] == "xx"  # not refused as an unknown language
    refused = i18n.t("common.unknown_language", "en", code="xx")
    assert not any(w.value in (refused, MARK + refused) for w in at.warning)
    shown = [t.value for t in at.title] + [m.value for m in at.markdown]
    assert any(MARK.strip() in str(text) for text in shown), f"{page} shows none of xx's strings"


@pytest.mark.usefixtures("xx_content")
def test_a_certificate_can_be_chosen_in_the_new_language():
    learner_id = learner_who_passed("xx@example.org")
    at = open_page("certificate", "xx", learner_id)
    assert not at.exception, at.exception
    [choice] = [s for s in at.selectbox if s.label == i18n.t("certificate.language", "xx")]
    assert choice.label.startswith(MARK)
    assert choice.value == "xx"  # the page's language is preselected
    # ... and issuing it works end to end: the credential, its LinkedIn link and the PDF
    # (certificate texts fall back to English where a language has none yet).
    [create] = [b for b in at.button if b.label == i18n.t("certificate.create", "xx")]
    create.click()
    at.run()
    assert not at.exception, at.exception
    assert i18n.t("certificate.created", "xx") in [s.value for s in at.success]
    assert [b.proto.url for b in at.get("link_button")], "the LinkedIn link is there"
