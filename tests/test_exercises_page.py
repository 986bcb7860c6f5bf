"""The Exercises page in AppTest: the list, signed-out view, hints, save and reset, Run through the
queue, the per-case report, the ring, and the reference only after a pass.

The exercises are the stand-in of tests/exercisefakes.py, and the grading is
done by hand with the worker's own functions (``labqueue._claim``/``_finish``),
so these tests check the page and the bookkeeping; the worker test runs the
real command.
"""

from __future__ import annotations

import uuid

import pytest
from sqlmodel import select

from academy import exercises, i18n, labqueue
from academy.db import session_scope
from academy.models import ExercisePass, LabRun, Learner
from tests import exercisefakes
from tests.apptest import open_page, press


@pytest.fixture(autouse=True)
def fake_catalog(monkeypatch, app_db):  # noqa: ARG001  (app_db: each test on a fresh database)
    exercisefakes.install(monkeypatch)


def learner() -> int:
    with session_scope() as session:
        person = Learner(email=f"page-{uuid.uuid4().hex[:8]}@example.org", password_hash="x",
                         display_name="Ex Learner")
        session.add(person)
        session.flush()
        return person.id


def texts(at) -> str:
    """Everything the page wrote, as one string (for "is it there / is it not")."""
    parts = []
    for kind in ("markdown", "caption", "code", "text", "info", "success", "error", "warning", "title",
                 "header", "expander"):
        for el in at.get(kind):
            parts.append(str(getattr(el, "value", "") or getattr(el, "label", "") or el.proto))
    parts += [ta.value or "" for ta in at.text_area]
    return "\n".join(parts)


def codes(at) -> list[str]:
    """The st.code blocks, each as typed (st.code drops a final newline)."""
    return [c.value.rstrip("\n") for c in at.code]


def shown_as_code(at, source: str) -> bool:
    return source.rstrip("\n") in codes(at)


def t(key: str, lang: str = "en", **values) -> str:
    return i18n.t(key, lang, **values)


def grade(run_id: int, report: dict) -> None:
    """What a worker does at the end of a run, with the worker's own functions."""
    run = labqueue._claim(run_id, "test-worker")
    assert run is not None
    passed = report["status"] == "passed"
    labqueue._finish(run_id, "test-worker", status="done", result=report,
                     passed=(run.learner_id, run.params["exercise"]) if passed else None)


def test_signed_out_the_page_lists_the_exercises_and_shows_statements_but_not_an_editor():
    at = open_page("exercises", "en")
    assert not at.exception, at.exception
    page = texts(at)
    for ex in exercisefakes.IDS:
        assert exercisefakes.TEXT[ex]["title"] in page and exercisefakes.TEXT[ex]["summary"] in page
    assert "Write **ring_allreduce** with send and recv." in [m.value for m in at.markdown]
    assert shown_as_code(at, exercisefakes.STARTER["ring-allreduce"])
    assert any(t("exercises.sign_in") in i.value for i in at.info)
    assert len(at.text_area) == 0
    assert not [b for b in at.button if b.label == t("exercises.run")]
    assert "REFERENCE-SOLUTION" not in page


def test_hints_open_one_at_a_time_and_stay_open_after_a_reload():
    me = learner()
    at = open_page("exercises", "nl", me, exercise="broadcast")
    assert not at.exception, at.exception
    assert not [i for i in at.info if "Hint one of broadcast" in i.value]
    press(at, t("exercises.hint", "nl"))
    assert [i for i in at.info if "Hint one of broadcast" in i.value]
    assert not [i for i in at.info if "Hint two of broadcast" in i.value]
    assert t("exercises.hints_shown", "nl", count=1, total=3) in [c.value for c in at.caption]
    again = open_page("exercises", "nl", me, exercise="broadcast")
    assert [i for i in again.info if "Hint one of broadcast" in i.value]
    for _ in range(2):
        press(again, t("exercises.hint", "nl"))
    assert [b for b in again.button if b.label == t("exercises.hint", "nl")][0].disabled  # all three open


def test_save_keeps_the_draft_and_reset_asks_first_then_brings_back_the_starter():
    me = learner()
    at = open_page("exercises", "en", me)
    assert at.text_area[0].value == exercisefakes.STARTER["ring-allreduce"]
    mine = "def ring_allreduce(tensor):\n    return 42  # <b>mine</b> **not bold**\n"
    at.text_area[0].set_value(mine)
    press(at, t("exercises.save"))
    assert t("exercises.saved") in [s.value for s in at.success]
    again = open_page("exercises", "en", me)
    assert again.text_area[0].value == mine
    assert shown_as_code(again, mine)  # highlighted as code, never as Markdown
    assert not [m for m in again.markdown if "<b>mine</b>" in m.value or "not bold" in m.value]
    press(again, t("exercises.reset"))
    assert t("exercises.reset_confirm") in [w.value for w in again.warning]
    press(again, t("exercises.reset_no"))
    assert again.text_area[0].value == mine
    press(again, t("exercises.reset"))
    press(again, t("exercises.reset_yes"))
    assert again.text_area[0].value == exercisefakes.STARTER["ring-allreduce"]
    with session_scope() as session:
        assert exercises.get_draft(session=session, learner_id=me, exercise="ring-allreduce").source \
            == exercisefakes.STARTER["ring-allreduce"]


def test_run_queues_the_code_then_shows_the_report_and_only_after_a_pass_the_reference():
    me = learner()
    at = open_page("exercises", "en", me)
    wrong = "def ring_allreduce(tensor):\n    pass  # whole buffer\n"
    at.text_area[0].set_value(wrong)
    press(at, t("exercises.run"))
    assert not at.exception, at.exception
    with session_scope() as session:
        run = session.exec(select(LabRun).where(LabRun.learner_id == me)).one()
    assert (run.lab, run.params, run.source, run.status) == \
        ("exercise", {"exercise": "ring-allreduce", "lang": "en"}, wrong, "queued")
    page = texts(at)
    assert t("exercises.no_worker", position=1) in page  # no worker in this test: it says so
    assert "REFERENCE-SOLUTION" not in page

    grade(run.id, exercisefakes.report(passed=False))
    at.run()
    page = texts(at)
    assert t("exercises.failed", failed=1, count=2) in [e.value for e in at.error]
    # The finding in the learner's language, as text; the rank's output as code, not HTML.
    assert "✗ [en] bytes_whole_buffer expected=56 rank=0 sent=84" in [x.value for x in at.text]
    assert shown_as_code(at, "<b>printed by rank 0</b>")
    assert [e for e in at.expander if "w2-n1-float64" in e.label]
    assert "REFERENCE-SOLUTION" not in page
    with session_scope() as session:
        assert session.exec(select(ExercisePass)).all() == []

    right = "def ring_allreduce(tensor):\n    pass  # the real ring\n"
    at.text_area[0].set_value(right)
    press(at, t("exercises.run"))
    with session_scope() as session:
        second = session.exec(select(LabRun).where(LabRun.learner_id == me).order_by(LabRun.id.desc())).first()
    grade(second.id, exercisefakes.report(passed=True))
    at.run()
    assert t("exercises.passed", count=1) in [s.value for s in at.success]
    assert len(at.get("plotly_chart")) == 1  # the learner's ring
    assert shown_as_code(at, exercisefakes.REFERENCE["ring-allreduce"]) and shown_as_code(at, right)
    with session_scope() as session:
        [row] = session.exec(select(ExercisePass)).all()
    assert (row.learner_id, row.exercise, row.run_id) == (me, "ring-allreduce", second.id)
    listed = open_page("exercises", "en", me)
    assert any(m.value.startswith("**Title ring-allreduce** · " + t("exercises.passed_mark")) for m in listed.markdown)


def test_a_source_over_64_kib_is_refused_on_the_page_before_queueing():
    me = learner()
    at = open_page("exercises", "zh", me)
    at.text_area[0].set_value("é" * 40_000)  # 40 000 characters, 80 000 bytes
    press(at, t("exercises.run", "zh"))
    assert t("exercises.err_too_large", "zh", size=80_000, limit=65_536) in [e.value for e in at.error]
    with session_scope() as session:
        assert session.exec(select(LabRun)).all() == []


def test_a_report_that_could_not_be_graded_shows_the_reason_as_text():
    me = learner()
    run_id = exercises.submit(learner_id=me, exercise="broadcast", source="def broadcast(:\n", lang="nl")
    report = {**exercisefakes.report("broadcast", passed=False), "status": "error", "ok": False, "cases": [],
              "trace": None, "error": {"key": "syntax_error", "values": {"line": 1, "text": "def broadcast(:"}}}
    grade(run_id, report)
    at = open_page("exercises", "nl", me, exercise="broadcast")
    assert not at.exception, at.exception
    assert t("exercises.error", "nl") in [e.value for e in at.error]
    assert "[nl] syntax_error line=1 text=def broadcast(:" in [x.value for x in at.text]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_certificate_page_names_the_missing_exercises_with_links_and_offers_no_claim(lang, secrets):  # noqa: ARG001
    from academy.models import QuizAttempt
    from certificates import store
    from tests.exercisepass import pass_required_exercises

    me = learner()
    with session_scope() as session:
        session.add(QuizAttempt(learner_id=me, seed=1, status="finished", score=92.0, passed=True))
    with session_scope() as session:
        exercises.record_pass(session=session, learner_id=me, exercise="broadcast",
                              run_id=exercises.submit(learner_id=me, exercise="broadcast", source="b = 1\n", lang=lang))
    at = open_page("certificate", lang, me)
    assert not at.exception, at.exception
    assert t("certificate.needs_exercises", lang) in [i.value for i in at.info]
    links = [(p.proto.label, p.proto.page, dict(p.proto.query_string and [kv.split("=") for kv in
              p.proto.query_string.split("&")] or [])) for p in at.get("page_link")]
    todo = [link for link in links if link[0] == t("certificate.exercise_todo", lang, title="Title ring-allreduce")]
    assert todo and todo[0][2].get("exercise") == "ring-allreduce", links
    assert t("certificate.exercise_done", lang, title="Title broadcast") in [m.value for m in at.markdown]
    assert not [b for b in at.button if b.label == t("certificate.create", lang)]

    with session_scope() as session:
        pass_required_exercises(session, me)  # the one still missing (the other is kept, not doubled)
        assert exercises.missing_for_certificate(session=session, learner_id=me) == []
    at = open_page("certificate", lang, me)
    assert t("certificate.needs_exercises", lang) not in [i.value for i in at.info]
    press(at, t("certificate.create", lang))
    with session_scope() as session:
        [cert] = store.certificates_of(session=session, learner_id=me)
    assert '"exercises":["ring-allreduce","broadcast"]' in cert.payload


@pytest.mark.parametrize("kind, key", [("worker_lost", "exercises.stopped"), ("crash", "exercises.grader_failed"),
                                       ("cancelled", "exercises.cancelled")])
def test_a_run_without_a_report_says_why(kind, key):
    me = learner()
    run_id = exercises.submit(learner_id=me, exercise="broadcast", source="x = 1\n", lang="en")
    labqueue._claim(run_id, "test-worker")
    labqueue._finish(run_id, "test-worker", status="cancelled" if kind == "cancelled" else "failed",
                     error={"kind": kind, "message": "boom"})
    at = open_page("exercises", "en", me, exercise="broadcast")
    assert not at.exception, at.exception
    assert t(key) in [m.value for m in (*at.error, *at.warning)]
    assert "boom" not in texts(at)  # the technical message is for the log, not the learner


def test_a_running_submission_shows_case_k_of_n_and_can_be_cancelled():
    me = learner()
    run_id = exercises.submit(learner_id=me, exercise="ring-allreduce", source="x = 1\n", lang="en")
    labqueue._claim(run_id, "test-worker")
    labqueue._beat(run_id, "test-worker", {"kind": "progress", "step": 3, "total_steps": 21, "phase": "case"})
    at = open_page("exercises", "en", me)
    assert not at.exception, at.exception
    [bar] = at.get("progress")
    assert bar.proto.text == t("exercises.grading", case=3, cases=21)
    press(at, t("exercises.cancel"))
    with session_scope() as session:
        assert session.get(LabRun, run_id).cancel_requested


@pytest.mark.parametrize("bytes_sent, drawn", [(28, "exercises.ring_whole"), (12, "exercises.ring_unavailable")])
def test_sends_of_the_whole_buffer_draw_the_naive_ring_and_unnamed_chunks_draw_nothing(bytes_sent, drawn):
    """7 float32 elements are 28 bytes: a whole-buffer ring; 12 bytes the grader could not
    name as a chunk of ours (another split) is not drawn as something it was not."""
    me = learner()
    run_id = exercises.submit(learner_id=me, exercise="ring-allreduce", source="x = 1\n", lang="en")
    report = exercisefakes.report(passed=False)
    for records in report["trace"]["traces"]:
        for rec in records:
            rec.update(send_chunk=None, bytes=bytes_sent)
    grade(run_id, report)
    at = open_page("exercises", "en", me)
    assert not at.exception, at.exception
    charts = at.get("plotly_chart")
    if drawn == "exercises.ring_whole":
        assert len(charts) == 1 and f"**{t(drawn)}**" in [m.value for m in at.markdown]
    else:
        assert len(charts) == 0 and t(drawn) in [c.value for c in at.caption]
