"""Exercises: write the distributed code yourself, run it on real processes, read the per-case report.

The learner's code is data everywhere on this page: the text of the editor (Ace, from
streamlit-code-editor, or a plain text area without it), and ``st.code``/``st.text``
when shown, never Markdown or HTML. The reference
solution is read only once the learner has a pass, so nothing of it reaches
the browser before (tests/test_exercises_page_browser.py watches the websocket).
"""

import streamlit as st

try:  # a Streamlit component (Ace); without it the page falls back to a plain text area
    from code_editor import code_editor
except ImportError:
    code_editor = None

from academy import exercises, regrade
from academy.db import session_scope
from academy.labruns import pages as labruns
from academy.labruns import queue as labqueue
from academy.models import ACTIVE
from app import charts_ring, labviews, topology, ui
from app.widgets import chart, lang, ring_labels
from labs.exercises import patterns
from labs.ring.lab import DTYPES
from labs.ring.ringtrace import trace_steps

t = ui.t
state = st.session_state
code = lang()
st.title(t("nav.exercises"))
st.write(t("exercises.intro"))
with st.expander(t("exercises.how_title")):  # how the grader works, as the statements refer to it
    st.markdown(t("exercises.how"))
who = ui.learner()
labruns.recover_after_restart_once()

ids = exercises.catalog()
with session_scope() as session:
    passed = exercises.passes(session=session, learner_id=who.id) if who else {}
    taken_back = exercises.withdrawn(session=session, learner_id=who.id) if who else {}
asked = st.query_params.get("exercise")
current = asked if asked in ids else ids[0]

st.header(t("exercises.list"))
for ex in ids:
    info = exercises.text(ex, code)
    with st.container(border=True):
        left, right = st.columns([5, 1])
        mark = t("exercises.passed_mark") if ex in passed else \
            t("exercises.withdrawn_mark") if ex in taken_back else t("exercises.not_passed")
        left.markdown(f"**{info['title']}** · {mark}")
        left.caption(info.get("summary", ""))
        if right.button(t("exercises.open"), key=f"open_{ex}", disabled=ex == current,
                        icon=":material/edit_note:"):
            st.query_params["exercise"] = ex
            st.rerun()

st.divider()
info = exercises.text(current, code)
st.header(info["title"])
st.markdown(info["statement"])  # our own text, written as Markdown

who = ui.require_learner("exercises.sign_in")
if who is None:
    st.markdown(f"**{t('exercises.starter')}**")
    st.code(exercises.starter(current), language="python")
    st.stop()

if current in taken_back:  # a stricter grader failed the code that earned it (academy.regrade)
    held, regraded = taken_back[current]
    st.warning(t("exercises.withdrawn", passed=ui.date_text(held.passed_at), date=ui.date_text(held.withdrawn_at)),
               icon=":material/undo:")
    st.text(regrade.reason_text(regraded.reason, code, current))  # values from the learner's run: plain text
    st.caption(t("exercises.withdrawn_again"))

with session_scope() as session:
    draft = exercises.get_draft(session=session, learner_id=who.id, exercise=current)
source = draft.source if draft is not None else exercises.starter(current)
hints = info.get("hints") or []
shown = min(draft.hints_shown if draft is not None else 0, len(hints))

# The editor. Its key changes when the draft is reset, so that it shows the starter again.
generation = state.get(f"ex_gen_{current}", 0)
editor_key = f"src_{current}_{generation}"
if code_editor is not None:
    st.markdown(f"**{t('exercises.editor')}**", help=t("exercises.editor_help_live"))
    # Ace, highlighting Python, in an iframe of ours (app/web.py lets our pages frame it). It
    # sends its text when it loses focus (a click on Run or Save included) and on Ctrl+Enter;
    # until the learner has touched it, it sends nothing, and the draft is what it shows.
    reply = code_editor(source, lang="python", height=[18, 40], response_mode="blur", key=editor_key,
                        options={"showLineNumbers": True, "tabSize": 4, "useSoftTabs": True})
    typed = reply["text"] if isinstance(reply, dict) and reply.get("id") else source
    # Text the editor sent that is not the draft yet: kept below as soon as it reaches us, so
    # that a refresh or a closed tab loses nothing the learner typed before leaving the editor.
    unsaved = typed != source and state.get(f"ex_sent_{editor_key}") != reply["id"]
    if unsaved:
        state[f"ex_sent_{editor_key}"] = reply["id"]
else:
    unsaved = False
    typed = st.text_area(t("exercises.editor"), value=source, height=380, max_chars=exercises.EXERCISE_SOURCE_MAX,
                         key=editor_key, help=t("exercises.editor_help"))
    with st.expander(t("exercises.highlighted")):
        st.code(typed, language="python", line_numbers=True)

c_run, c_save, c_reset, c_hint = st.columns(4)
run_clicked = c_run.button(t("exercises.run"), type="primary", icon=":material/play_arrow:", key="ex_run")
save_clicked = c_save.button(t("exercises.save"), icon=":material/save:", key="ex_save")
if c_reset.button(t("exercises.reset"), icon=":material/restart_alt:", key="ex_reset"):
    state[f"ex_confirm_{current}"] = True


def open_hint() -> None:
    """Before the rerun, so that the count and the button's state below are the new ones."""
    with session_scope() as session:
        exercises.show_hint(session=session, learner_id=who.id, exercise=current)


c_hint.button(t("exercises.hint"), icon=":material/lightbulb:", key="ex_hint", on_click=open_hint,
              disabled=shown >= len(hints))

if state.get(f"ex_confirm_{current}"):
    st.warning(t("exercises.reset_confirm"))
    yes, no = st.columns(2)
    if yes.button(t("exercises.reset_yes"), key="ex_reset_yes"):
        with session_scope() as session:
            exercises.reset_draft(session=session, learner_id=who.id, exercise=current)
        state[f"ex_gen_{current}"] = generation + 1
        state[f"ex_confirm_{current}"] = False
        state["_ex_flash"] = "exercises.reset_done"
        st.rerun()
    if no.button(t("exercises.reset_no"), key="ex_reset_no"):
        state[f"ex_confirm_{current}"] = False
        st.rerun()

# Code refused as it is (too large, not text): the last run's report graded other code, so it is
# not shown under the refusal as if it were this code's (journey review m1).
refused = False
if unsaved and not (save_clicked or run_clicked):  # those two save it themselves, just below
    try:
        with session_scope() as session:
            exercises.save_draft(session=session, learner_id=who.id, exercise=current, source=typed)
    except exercises.SourceRefused as err:
        st.error(ui.error_text(err))
        refused = True

if save_clicked:
    try:
        with session_scope() as session:
            exercises.save_draft(session=session, learner_id=who.id, exercise=current, source=typed)
        st.success(t("exercises.saved"))
    except exercises.SourceRefused as err:
        st.error(ui.error_text(err))
        refused = True

if run_clicked:
    try:
        state[f"ex_run_{current}"] = exercises.submit(learner_id=who.id, exercise=current, source=typed, lang=code)
    except exercises.SourceRefused as err:
        st.error(ui.error_text(err))
        refused = True
    except labqueue.LabRequestError as err:
        st.error(ui.error_text(err))

flash = state.pop("_ex_flash", None)
if flash:
    st.success(t(flash))

if hints:
    st.caption(t("exercises.hints_shown", count=shown, total=len(hints)))
    for number, hint in enumerate(hints[:shown], start=1):
        st.info(f"**{t('exercises.hint_title', number=number)}** · {hint}", icon=":material/lightbulb:")


def live(run_id: int, every: float) -> None:
    """Looks at the queued or running submission every ``every`` seconds (``labviews.cadence``);
    reruns the page when it ends, or when it should be looked at faster or slower."""
    run = exercises.own_run(learner_id=who.id, run_id=run_id)
    if run is None or run.status not in ACTIVE:
        st.rerun(scope="app")
    wait = None
    if run.status == "queued":
        wait = labviews.waiting(run_id, "exercises")
    else:
        step = exercises.case_progress(run.progress)
        if step is None:
            st.progress(0.0, text=t("exercises.starting"))
        else:
            st.progress(min(step[0] / max(step[1], 1), 1.0), text=t("exercises.grading", case=step[0], cases=step[1]))
    if st.button(t("exercises.cancel"), icon=":material/stop:", key=f"ex_cancel_{run_id}"):
        labqueue.request_cancel(run_id)
        st.rerun(scope="app")
    if labviews.cadence(run.status, wait) != every:
        st.rerun(scope="app")


FAMILIES = {*patterns.ALLREDUCE_FAMILIES, *patterns.BROADCAST_FAMILIES}


def pattern_line(found, exercise: str | None) -> str | None:  # a labs.exercises.report.Pattern
    """The message pattern the grader named (the report's ``pattern``, from the router's log:
    ``labs.exercises.patterns``) as one line in the learner's language; None without one."""
    if found is None or found.family not in FAMILIES:
        return None
    return exercises.message("pattern_shown", code, {
        "case": found.case if found.case.replace("-", "").isalnum() else "?",
        "world_size": found.world_size,
        "family": exercises.message(f"family_{found.family}", code, None, exercise)}, exercise)


def ring(trace: dict, found, run_id: int, exercise: str | None) -> None:
    """The learner's own ring, animated from the sends their ranks made (as the ring lab's),
    with the family of their message pattern beside it (broadcast: the family alone).

    Chunked sends draw as the ring; sends of the whole buffer as the naive
    ring; sends the grader could not name as a chunk (another split), or that
    the grader found to be no ring (a direct exchange, a tree...), are not
    drawn rather than drawn as something they were not: the family says what
    they were.
    """
    line = pattern_line(found, exercise)
    n = int(trace.get("world_size") or 0)
    traces = trace.get("traces") or []
    no_ring = line is not None and found.family not in patterns.RINGS \
        and found.family in patterns.ALLREDUCE_FAMILIES
    if n < 2 or not any(traces) or no_ring:  # nothing to animate (a broadcast), or no ring
        if line:
            st.caption(line)
        return
    if len(traces) != n or any(len(records) > 2 * (n - 1) + 2 for records in traces):
        # More steps than a ring makes (the grader clips a trace to that): never drawn, so a
        # stored report cannot make this page build thousands of frames (review N-4).
        if line:
            st.caption(line)
        st.caption(t("exercises.ring_unavailable"))
        return
    try:
        steps, durations = trace_steps(traces)
        # The grader writes the tensor's bytes (``size_bytes``); a report from before that
        # is sized from the ring lab's table of element types, without importing PyTorch here.
        whole_bytes = int(trace["size_bytes"] if "size_bytes" in trace
                          else int(trace["size"]) * DTYPES[trace["dtype"]].itemsize)
        sends = [rec for records in traces for rec in records]
        whole = all(rec.get("send_chunk") is None and rec.get("bytes") == whole_bytes for rec in sends)
        if whole:
            labels = {**ring_labels(), "pass-around": t("labs_naive.pass_around"),
                      "buffer": t("labs_naive.whole_buffer"), "carries": t("labs_naive.carries", rank="{rank}")}
            fig = charts_ring.naive_ring_figure(n, steps, labels=labels, step_durations=durations, lang=code)
        elif any(send[2] is None for step in steps for send in step):
            raise ValueError("a send that is no chunk of the ring")
        else:
            fig = charts_ring.ring_figure(n, steps, labels=ring_labels(), step_durations=durations, lang=code)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):  # sends that are no ring
        if line:
            st.caption(line)
        st.caption(t("exercises.ring_unavailable"))
        return
    st.markdown(f"**{t('exercises.ring_whole') if whole else t('exercises.ring')}**")
    if line:
        st.caption(line)  # beside the animation: the family the grader found in the same case
    chart(fig, key=f"ex_ring_{run_id}", caption=t("labs_naive.alt") if whole else t("widgets.ring.alt"))


def report(run) -> None:  # a LabRun
    """The grading report: the verdict, each case with its findings, and the learner's ring."""
    if run.status == "cancelled":
        st.warning(t("exercises.cancelled"))
        return
    if run.status != "done" or not run.result:
        # The machine went away or ran out of time, or else the grader itself broke.
        kind = (run.error or {}).get("kind")
        stopped = kind in ("worker_lost", "worker_stopped", "timeout", "restart", "queue_unavailable")
        st.error(t("exercises.stopped") if stopped else t("exercises.grader_failed"))
        return
    res = exercises.read_report(run.result)
    if res is None:  # a stored result that is no grading report: the grader broke
        st.error(t("exercises.grader_failed"))
        return
    exercise = run.params.get("exercise")
    cases = res.cases
    counts = res.counts()
    if res.status == "passed":
        # The exercise's own words: what "right" means differs (bytes for the ring, not for averaging).
        st.success(exercises.message("passed", code, {"count": len(cases)}, exercise))
    elif res.status == "error" or res.error is not None:
        st.error(t("exercises.error"))
        st.text(exercises.message(res.error.key if res.error else "crash", code,
                                  res.error.values if res.error else None, exercise))
    else:
        # Cases stopped after a failure are "not run", not failures: the headline counts them apart.
        key = "exercises.failed_not_run" if counts["not_run"] else "exercises.failed"
        st.error(t(key, passed=counts["passed"], failed=counts["failed"], not_run=counts["not_run"],
                   count=len(cases)))
    if res.duration_s is not None:
        st.caption(t("exercises.duration", seconds=res.duration_s, sandbox=res.sandbox))
    first_failure = next((case.id for case in cases if case.status != "passed"), None)
    for case in cases:
        label = exercises.case_label(exercise, case, code)  # a tensor, a data set or a batch, as sized
        icon = {"passed": ":material/check_circle:", "failed": ":material/cancel:"}.get(case.status,
                                                                                       ":material/block:")
        with st.expander(f"{label} · {t(f'exercises.case_status.{case.status}')}", icon=icon,
                         expanded=case.id == first_failure):
            # Findings and waits carry values from the learner's run: shown as plain text.
            for finding in case.findings:
                if not finding.passed:
                    st.text("✗ " + exercises.message(finding.key, code, finding.values, exercise))
            if case.status == "not_run":
                st.caption(exercises.message("case_not_run", code))
            for wait in case.waiting or []:  # with its direction: send *to*, recv *from*
                st.text(exercises.waiting(wait, code, exercise))
            for rank, output in sorted(case.output.items()):
                if output:
                    st.caption(t("exercises.output", rank=rank))
                    st.code(output, language=None)
    ring(res.trace or {}, res.pattern, run.id, exercise)
    labviews.bucket_timeline(res.trace or {}, run.id)
    topology.exercise_clock(res.trace or {}, run.id)


run_id = state.get(f"ex_run_{current}")
run = exercises.own_run(learner_id=who.id, run_id=run_id) if run_id else \
    exercises.latest_run(learner_id=who.id, exercise=current)
if run is not None:
    st.divider()
    if run.status in ACTIVE:
        # A live run is looked at ten times a second, one waiting its turn once a second.
        every = labviews.cadence(run.status, labqueue.expected_wait_s(run.id) if run.status == "queued" else None)
        st.fragment(live, run_every=every)(run.id, every)
    elif refused:
        st.caption(t("exercises.previous_hidden"))
    else:
        report(run)

# After a pass, and only then: the reference with the code that passed.
with session_scope() as session:
    mine = exercises.passes(session=session, learner_id=who.id).get(current)
    passing = exercises.own_run(learner_id=who.id, run_id=mine.run_id) if mine else None
if mine is not None:
    st.divider()
    st.caption(exercises.message("reference_note", code, None, current))
    # One above the other, each at the page's width: side by side, code lines scrolled sideways.
    st.markdown(f"**{t('exercises.yours')}**")
    st.code(passing.source if passing is not None and passing.source else typed, language="python")
    st.markdown(f"**{t('exercises.reference')}**")
    st.code(exercises.reference(current), language="python")
