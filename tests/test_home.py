"""Home in AppTest: the course map in reading order, and status cards that say what the store would do."""

from __future__ import annotations

import re

import pytest
from sqlmodel import delete

import certificates as certs
from academy import exercises, i18n, lessons
from academy.accounts import sign_up
from academy.db import session_scope
from academy.models import ExercisePass, LabRun
from tests import apptest
from tests.test_certificate_pages import learner_who_passed

LANGS = ["en", "zh", "nl"]
STATES = ["nothing", "quiz_only", "eligible", "issued", "disqualified"]


def open_home(lang: str, learner_id: int | None = None):
    at = apptest.open_page("home", lang, learner_id)
    assert not at.exception, at.exception
    return at


def shown(at) -> list[str]:
    """Every text on the page, in page order within each kind."""
    values = [m.value for m in at.markdown] + [c.value for c in at.caption]
    values += [link.proto.label for link in at.get("page_link")]
    return [str(v) for v in values]


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.usefixtures("app_db")
def test_course_map_is_in_reading_order(lang):
    """A phone stacks the columns and a keyboard or screen reader follows the page's order:
    that order must be 1, 2, 3, ..., not one column after the other (review M1)."""
    at = open_home(lang)
    numbers = [int(m.group(1)) for v in (link.proto.label for link in at.get("page_link"))
               if (m := re.match(r"\*\*(\d+)\. ", str(v)))]  # each card's title is its link
    assert numbers == list(range(1, len(lessons.sections(lang)) + 1))


def learner_in(state: str, email: str) -> int:
    """A learner in one of Home's states, made the way the app makes them."""
    if state == "nothing":
        with session_scope() as s:
            return sign_up(session=s, email=email, password="long enough pw", display_name="Zoë").id
    learner_id = learner_who_passed(email, "Zoë")  # quiz and the required exercises
    if state == "quiz_only":
        with session_scope() as s:
            s.exec(delete(ExercisePass).where(ExercisePass.learner_id == learner_id))
            s.commit()
    if state in ("issued", "disqualified"):
        with session_scope() as s:
            cert = certs.issue_for_learner(session=s, learner_id=learner_id, name="Zoë", lang="en")
            if state == "disqualified":
                certs.revoke(session=s, cert_id=cert.id, actor_id=None, reason="test", disqualify=True)
    return learner_id


def store_would_issue(learner_id: int) -> bool:
    """Whether the store's own issue path gives this learner a new certificate now."""
    with session_scope() as s:
        before = {c.id for c in certs.certificates_of(session=s, learner_id=learner_id)}
        try:
            cert = certs.issue_for_learner(session=s, learner_id=learner_id, name="Zoë", lang="en")
        except certs.CertificateError:
            return False
        return cert.id not in before


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("state", STATES)
@pytest.mark.usefixtures("app_db")
def test_home_says_claim_only_when_the_store_would_issue(state, lang):
    learner_id = learner_in(state, f"home-{state}-{lang}@example.org")
    texts = shown(open_home(lang, learner_id))
    claim = i18n.t("home.cert_ready", lang)
    assert (claim in texts) == store_would_issue(learner_id), (state, texts)


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.usefixtures("app_db")
def test_each_state_names_its_reason(lang):
    expected = {
        "nothing": i18n.t("home.cert_needs_quiz_exercises", lang, pass_mark=80),
        "quiz_only": i18n.t("home.cert_needs_exercises", lang, count=len(exercises.required())),
        "disqualified": i18n.t("home.cert_disqualified", lang),
    }
    for state, text in expected.items():
        learner_id = learner_in(state, f"reason-{state}-{lang}@example.org")
        assert text in shown(open_home(lang, learner_id)), state
    learner_id = learner_in("issued", f"reason-issued-{lang}@example.org")
    with session_scope() as s:
        (cert,) = certs.certificates_of(session=s, learner_id=learner_id)
    assert i18n.t("home.cert_issued", lang, id=cert.id) in shown(open_home(lang, learner_id))
    guest = shown(open_home(lang))
    assert i18n.t("home.cert_guest_exercises", lang) in guest
    assert i18n.t("home.exercises_guest", lang) in guest


@pytest.mark.usefixtures("app_db")
def test_exercises_card_and_lab_count_keep_submissions_apart():
    """Exercise submissions share the lab queue's table, but they are no lab runs (review M6e)."""
    learner_id = learner_in("eligible", "counts@example.org")  # three passing submissions
    with session_scope() as s:
        s.add(LabRun(learner_id=learner_id, lab="ring", params={}, status="done"))
        s.commit()
    texts = shown(open_home("en", learner_id))
    assert i18n.t("home.labs_runs", "en", count=1) in texts
    required = len(exercises.required())
    assert i18n.t("home.exercises_passed", "en", passed=required, count=len(exercises.catalog())) in texts
    assert i18n.t("home.exercises_required", "en", done=required, count=required) in texts


@pytest.mark.parametrize("lang, false_promise", [("en", "Every section ends with"), ("zh", "每节末尾都有小测验"),
                                                 ("nl", "Elke sectie eindigt met een quiz")])
def test_the_overview_promises_only_what_exists(lang, false_promise):
    """Review m13: one quiz ends the course; no section has its own. The exercises it needs are named."""
    from academy import content

    text = content.path("lessons", lang, "overview.md").read_text(encoding="utf-8")
    assert false_promise not in text
    assert {"en": "graded coding exercises", "zh": "评分的编程练习", "nl": "oefeningen die worden nagekeken"}[lang] in text
