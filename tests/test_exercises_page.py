"""The Exercises page in AppTest: the list, signed-out view, hints, save and reset, Run through the
queue, the per-case report, the ring, and the reference only after a pass.

The exercises are the stand-in of tests/exercisefakes.py, and the grading is
done by hand with the worker's own functions (``labjob._claim``/``_end_node``),
so these tests check the page and the bookkeeping; the worker test runs the
real command.
"""

from __future__ import annotations

import json
import sys
import uuid

import pytest
from sqlmodel import select

from academy import exercises, i18n
from academy.db import session_scope
from academy.labruns import job as labjob
from academy.models import ExercisePass, LabRun
from app import labviews
from labs.exercises import messages
from tests import exercisefakes
from tests.apptest import open_page, press, record_cadence
from tests.factories import learner


@pytest.fixture(autouse=True)
def fake_catalog(monkeypatch, app_db):  # noqa: ARG001  (app_db: each test on a fresh database)
    exercisefakes.install(monkeypatch)




def texts(at) -> str:
    """Everything the page wrote, as one string (for "is it there / is it not")."""
    parts = []
    for kind in ("markdown", "caption", "code", "text", "info", "success", "error", "warning", "title",
                 "header", "expander"):
        for el in at.get(kind):
            parts.append(str(getattr(el, "value", "") or getattr(el, "label", "") or el.proto))
    parts += [ta.value or "" for ta in at.text_area]
    parts += [c.proto.json_args for c in at.get("component_instance")]
    return "\n".join(parts)


def editor(at):
    """The code editor (a streamlit-code-editor component) on the page."""
    [element] = at.get("component_instance")
    return element


def in_editor(at) -> str:
    """The text the page put into the editor, or into the text area that stands in for it."""
    if at.text_area:
        return at.text_area[0].value
    return json.loads(editor(at).proto.json_args)["code"]


def write(at, source: str) -> None:
    """Type ``source`` into the editor: the component's reply when the learner leaves it
    (its fields as streamlit-code-editor sends them; a new id for each reply), or the text
    area's value. The next run of the page receives it."""
    if at.text_area:
        at.text_area[0].set_value(source)
        return
    at.session_state[editor(at).key] = {"id": uuid.uuid4().hex[:8], "type": "blur", "lang": "python",
                                         "text": source, "selected": "", "cursor": {"row": 0, "column": 0}}


@pytest.fixture(params=["editor", "text_area"])
def widget(request, monkeypatch) -> str:
    """Each test that takes it runs with the code editor and with the text area that stands in
    for it where the component cannot be imported."""
    if request.param == "text_area":
        monkeypatch.setitem(sys.modules, "code_editor", None)  # ``import`` raises ImportError
    return request.param


def codes(at) -> list[str]:
    """The st.code blocks, each as typed (st.code drops a final newline)."""
    return [c.value.rstrip("\n") for c in at.code]


def shown_as_code(at, source: str) -> bool:
    return source.rstrip("\n") in codes(at)


def t(key: str, lang: str = "en", **values) -> str:
    return i18n.t(key, lang, **values)


def grade(run_id: int, report: dict) -> None:
    """What a worker does at the end of a run, with the worker's own functions."""
    run = labjob._claim(run_id, "test-worker")
    assert run is not None
    passed = report["status"] == "passed"
    labjob._end_node(run_id, 0, "test-worker", "done", result=report,
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
    assert len(at.text_area) == 0 and len(at.get("component_instance")) == 0
    assert not [b for b in at.button if b.label == t("exercises.run")]
    assert "REFERENCE-SOLUTION" not in page


@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_the_page_says_how_code_is_run_and_graded(lang):
    """Issue #36: the intro and its "how" panel describe the grader as it is (the router,
    the harness's own results, what differs from gloo); tests/test_grading_text.py keeps
    every text free of the mechanisms it does not use."""
    at = open_page("exercises", lang)
    assert not at.exception, at.exception
    assert t("exercises.intro", lang) in [m.value for m in at.markdown]
    (how,) = [e for e in at.expander if e.label == t("exercises.how_title", lang)]
    assert t("exercises.how", lang) in [m.value for m in how.markdown]


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


def test_save_keeps_the_draft_and_reset_asks_first_then_brings_back_the_starter(widget):
    me = learner()
    at = open_page("exercises", "en", me)
    assert not at.exception, at.exception
    assert (len(at.get("component_instance")), len(at.text_area)) == ((1, 0) if widget == "editor" else (0, 1))
    assert in_editor(at) == exercisefakes.STARTER["ring-allreduce"]
    mine = "def ring_allreduce(tensor):\n    return 42  # <b>mine</b> **not bold**\n"
    write(at, mine)
    press(at, t("exercises.save"))
    assert t("exercises.saved") in [s.value for s in at.success]
    again = open_page("exercises", "en", me)
    assert in_editor(again) == mine
    if widget == "text_area":
        assert shown_as_code(again, mine)  # its highlighted copy: as code, never as Markdown
    assert not [m for m in again.markdown if "<b>mine</b>" in m.value or "not bold" in m.value]
    press(again, t("exercises.reset"))
    assert t("exercises.reset_confirm") in [w.value for w in again.warning]
    press(again, t("exercises.reset_no"))
    assert in_editor(again) == mine
    press(again, t("exercises.reset"))
    press(again, t("exercises.reset_yes"))
    assert in_editor(again) == exercisefakes.STARTER["ring-allreduce"]
    with session_scope() as session:
        assert exercises.get_draft(session=session, learner_id=me, exercise="ring-allreduce").source \
            == exercisefakes.STARTER["ring-allreduce"]


def test_what_the_editor_sends_is_kept_at_once_and_is_back_in_it_after_a_refresh():
    """No Save, no Run: the text the editor sent when the learner left it is the draft."""
    me = learner()
    at = open_page("exercises", "en", me, exercise="broadcast")
    mine = "def broadcast(tensor, src):\n    pass  # typed, then clicked elsewhere\n"
    write(at, mine)
    at.run()
    assert not at.exception, at.exception
    assert not at.success and not at.error  # quietly
    with session_scope() as session:
        assert exercises.get_draft(session=session, learner_id=me, exercise="broadcast").source == mine
    assert in_editor(open_page("exercises", "en", me, exercise="broadcast")) == mine  # a new session
    assert in_editor(open_page("exercises", "en", me)) == exercisefakes.STARTER["ring-allreduce"]  # its own


def test_an_editor_the_learner_has_not_touched_runs_the_draft():
    """Until the learner types, the component sends nothing (an empty reply): Run takes the
    draft it shows, not an empty text."""
    me = learner()
    saved = "def ring_allreduce(tensor):\n    pass  # saved earlier\n"
    with session_scope() as session:
        exercises.save_draft(session=session, learner_id=me, exercise="ring-allreduce", source=saved)
    at = open_page("exercises", "en", me)
    assert in_editor(at) == saved
    # What the component sends from a browser before any typing (streamlit-code-editor issue #33).
    at.session_state[editor(at).key] = {"id": "", "type": "", "lang": "", "text": "", "selected": "", "cursor": ""}
    press(at, t("exercises.run"))
    with session_scope() as session:
        assert session.exec(select(LabRun).where(LabRun.learner_id == me)).one().source == saved


def test_run_queues_the_code_then_shows_the_report_and_only_after_a_pass_the_reference():
    me = learner()
    at = open_page("exercises", "en", me)
    wrong = "def ring_allreduce(tensor):\n    pass  # whole buffer\n"
    write(at, wrong)
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
    assert t("exercises.failed", passed=1, failed=1, count=2) in [e.value for e in at.error]
    # The finding in the learner's language, as text; the rank's output as code, not HTML.
    assert "✗ [en] bytes_whole_buffer expected=56 rank=0 sent=84" in [x.value for x in at.text]
    assert shown_as_code(at, "<b>printed by rank 0</b>")
    assert [e for e in at.expander if "w2-n1-float64" in e.label]
    assert "REFERENCE-SOLUTION" not in page
    with session_scope() as session:
        assert session.exec(select(ExercisePass)).all() == []

    right = "def ring_allreduce(tensor):\n    pass  # the real ring\n"
    write(at, right)
    press(at, t("exercises.run"))
    with session_scope() as session:
        second = session.exec(select(LabRun).where(LabRun.learner_id == me).order_by(LabRun.id.desc())).first()
    grade(second.id, exercisefakes.report(passed=True))
    at.run()
    assert exercisefakes.message("passed", "en", {"count": 1}) in [s.value for s in at.success]
    assert len(at.get("plotly_chart")) == 1  # the learner's ring
    # Beside it, the family the grader found in the same case (from the router's log).
    assert "[en] pattern_shown case=w3-n7-float32 family=[en] family_ring  world_size=3" in \
        [c.value for c in at.caption]
    assert shown_as_code(at, exercisefakes.REFERENCE["ring-allreduce"]) and shown_as_code(at, right)
    with session_scope() as session:
        [row] = session.exec(select(ExercisePass)).all()
    assert (row.learner_id, row.exercise, row.run_id) == (me, "ring-allreduce", second.id)
    listed = open_page("exercises", "en", me)
    assert any(m.value.startswith("**Title ring-allreduce** · " + t("exercises.passed_mark")) for m in listed.markdown)


def test_a_source_over_64_kib_is_refused_on_the_page_before_queueing(widget):  # noqa: ARG001
    me = learner()
    at = open_page("exercises", "zh", me)
    write(at, "é" * 40_000)  # 40 000 characters, 80 000 bytes
    press(at, t("exercises.run", "zh"))
    too_large = t("exercises.err_too_large", "zh", size=80_000, limit=65_536)
    assert [e.value for e in at.error] == [too_large]  # once: Run refuses it, nothing else tries
    with session_scope() as session:
        assert session.exec(select(LabRun)).all() == []
        assert exercises.get_draft(session=session, learner_id=me, exercise="ring-allreduce") is None


@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_refused_code_hides_the_last_report_which_graded_other_code(lang):
    """Run with code over 64 KiB after a graded run: the refusal, and not the last run's findings
    or verdict below it as if they were this code's (journey review m1)."""
    me = learner()
    at = open_page("exercises", lang, me)
    write(at, "def ring_allreduce(tensor):\n    pass  # whole buffer\n")
    press(at, t("exercises.run", lang))
    with session_scope() as session:
        run = session.exec(select(LabRun).where(LabRun.learner_id == me)).one()
    grade(run.id, exercisefakes.report(passed=False))
    at.run()
    failed = t("exercises.failed", lang, passed=1, failed=1, count=2)
    assert failed in [e.value for e in at.error]
    write(at, "x" * 70_000)
    press(at, t("exercises.run", lang))
    assert not at.exception, at.exception
    errors = [e.value for e in at.error]
    assert errors == [t("exercises.err_too_large", lang, size=70_000, limit=65_536)]
    assert failed not in errors and not [x for x in at.text if "bytes_whole_buffer" in x.value]
    assert t("exercises.previous_hidden", lang) in [c.value for c in at.caption]
    assert not [c for c in at.caption if c.value.startswith(t("exercises.duration", lang, seconds=0, sandbox="")[:6])]


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
    labjob._claim(run_id, "test-worker")
    labjob._end_node(run_id, 0, "test-worker", "cancelled" if kind == "cancelled" else "failed",
                     error={"kind": kind, "message": "boom"})
    at = open_page("exercises", "en", me, exercise="broadcast")
    assert not at.exception, at.exception
    assert t(key) in [m.value for m in (*at.error, *at.warning)]
    assert "boom" not in texts(at)  # the technical message is for the log, not the learner


def test_a_running_submission_shows_case_k_of_n_and_can_be_cancelled():
    me = learner()
    run_id = exercises.submit(learner_id=me, exercise="ring-allreduce", source="x = 1\n", lang="en")
    labjob._claim(run_id, "test-worker")
    labjob._beat_node(run_id, 0, "test-worker", {"kind": "progress", "step": 3, "total_steps": 21, "phase": "case"})
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


@pytest.mark.parametrize("exercise, family, trace", [("ring-allreduce", "direct", True),
                                                     ("broadcast", "tree", False)])
def test_a_pattern_that_is_no_ring_is_named_and_not_drawn_as_one(exercise, family, trace):
    """A direct exchange's sends are chunks too: drawn as a ring they would show a ring that
    never ran. The page names the family instead; a broadcast's report has the family alone."""
    me = learner()
    run_id = exercises.submit(learner_id=me, exercise=exercise, source="x = 1\n", lang="en")
    report = exercisefakes.report(exercise, passed=False)
    report["pattern"] = {"case": "w4-n10-float32", "family": family, "world_size": 4}
    if not trace:
        report["trace"] = None
    grade(run_id, report)
    at = open_page("exercises", "en", me, exercise=exercise)
    assert not at.exception, at.exception
    assert len(at.get("plotly_chart")) == 0
    assert f"[en] pattern_shown case=w4-n10-float32 family=[en] family_{family}  world_size=4" in \
        [c.value for c in at.caption]


def test_a_stored_trace_longer_than_a_ring_is_never_drawn():
    """Review N-4: a report whose trace lists 3,000 sends per rank (forged, or from before the
    grader clipped traces) made this page build a 3,000-frame animation: a minute of the
    server's CPU per view. The page draws no more steps than a ring makes."""
    me = learner()
    run_id = exercises.submit(learner_id=me, exercise="ring-allreduce", source="x = 1\n", lang="en")
    report = exercisefakes.report(passed=True)
    for records in report["trace"]["traces"]:
        records[:] = [dict(records[0], step=i) for i in range(3000)]
    grade(run_id, report)
    at = open_page("exercises", "en", me)
    assert not at.exception, at.exception
    assert len(at.get("plotly_chart")) == 0
    assert t("exercises.ring_unavailable") in [c.value for c in at.caption]


DEADLOCK_WORDS = {"en": ("to rank 1", "from rank 0"), "zh": ("发往 rank 1", "来自 rank 0"),
                  "nl": ("naar rank 1", "van rank 0")}


@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_a_deadlock_names_each_direction_and_the_headline_counts_not_run_apart(lang):
    """Review M3: "waiting in send *from* rank 1" was wrong, and 3 failed of 23 hid 20 not run."""
    me = learner()
    at = open_page("exercises", lang, me)
    write(at, "def ring_allreduce(tensor):\n    pass  # blocking send first\n")
    press(at, t("exercises.run", lang))
    with session_scope() as session:
        run = session.exec(select(LabRun).where(LabRun.learner_id == me)).one()
    report = exercisefakes.report(passed=False)
    stuck = {**report["cases"][1], "id": "w2-n5-float32", "size": 5, "findings": [], "waiting": [
        {"rank": 0, "op": "send", "peer": 1, "bytes": 4194304, "line": 12},
        {"rank": 1, "op": "recv", "peer": 0, "bytes": 0}]}
    not_run = [{**stuck, "id": f"w2-n{k}-float32", "status": "not_run", "waiting": []} for k in (6, 7)]
    grade(run.id, {**report, "cases": [*report["cases"], stuck, *not_run]})
    at.run()
    assert not at.exception, at.exception
    assert t("exercises.failed_not_run", lang, passed=1, failed=2, not_run=2, count=5) in [e.value for e in at.error]
    waits = [x.value for x in at.text if "send" in x.value or "recv" in x.value]
    to, came_from = DEADLOCK_WORDS[lang]
    assert len(waits) == 2 and to in waits[0] and came_from in waits[1], waits
    assert {"en": "4,194,304", "zh": "4,194,304", "nl": "4.194.304"}[lang] in waits[0]  # the reader's marks
    # Where the rank said it blocked, the learner's line (journey m10); the other said nothing.
    line = messages.text("waiting_line", lang, waiting="", line=12)
    assert waits[0].endswith(line) and line not in waits[1]


@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_a_broadcast_case_names_the_rank_it_comes_from(lang):
    """Journey review m11: a broadcast case's src was only in its ID (``w3-src2-…``)."""
    me = learner()
    run_id = exercises.submit(learner_id=me, exercise="broadcast", source="x = 1\n", lang=lang)
    report = exercisefakes.report("broadcast", passed=True)
    report["cases"][0].update(id="w3-src2-n7-float32", src=2)
    report["trace"] = None
    grade(run_id, report)
    at = open_page("exercises", lang, me, exercise="broadcast")
    assert not at.exception, at.exception
    want = t("exercises.case_src", lang, id="w3-src2-n7-float32", world=3, src=2, count=7, dtype="float32")
    assert any(e.label.startswith(want) for e in at.expander), [e.label for e in at.expander]


@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_a_live_submission_is_looked_at_fast_with_honest_phases(monkeypatch, lang):
    """Queued with no worker: the slow cadence; claimed: the fast one, "starting the
    sandbox" until the grader's first case, then case k of n with the bar at k/n."""
    cadences = record_cadence(monkeypatch)
    me = learner()
    run_id = exercises.submit(learner_id=me, exercise="ring-allreduce", source="x = 1\n", lang=lang)
    at = open_page("exercises", lang, me)
    assert not at.exception, at.exception
    assert cadences[-1] == labviews.IDLE_EVERY
    labjob._claim(run_id, "test-worker")
    seen = []
    for event in (None, {"kind": "progress", "step": 3, "total_steps": 12, "phase": "case"}):
        labjob._beat_node(run_id, 0, "test-worker", event)
        at.run()
        assert not at.exception, at.exception
        assert cadences[-1] == labviews.LIVE_EVERY
        [bar] = at.get("progress")
        seen.append((bar.proto.value, bar.proto.text))
    assert seen == [(0, t("exercises.starting", lang)), (25, t("exercises.grading", lang, case=3, cases=12))]
