"""Labs: choose a lab, run it on real processes, watch progress, read the results.

A guest's runs are listed from a signed cookie (``academy.labruns.guest_token``), so that a
reload keeps them; the list looks at itself again once a second while one of its runs is
queued or running, so that no tab keeps saying "running" after a run ended (journey m14).
"""

import streamlit as st

from academy.db import session_scope
from academy.labruns import pages as labruns
from academy.labruns import queue as labqueue
from academy.models import ACTIVE
from academy.settings import get_settings
from app import labviews, ui
from labs.context import host_summary, load_lab, world_size_default
from labs.params import Run, offered
from quizzes import own, review

t = ui.t
state = st.session_state
st.title(t("nav.labs"))
st.write(t("labs.intro"))
who = ui.learner()
if who is None and "lab_runs" not in state:  # a guest's first run of this session: their cookie's runs
    state["lab_runs"] = labruns.guest_run_ids(ui.cookie(ui.guest_runs_cookie_name()))
settings = get_settings()
machine = st.cache_resource(host_summary)()  # the worker records where the lab ran (academy.labruns.job)
labruns.recover_after_restart_once()

LABS = labruns.lab_names()
asked = st.query_params.get("lab")
lab = st.radio(t("labs.choose"), LABS, index=LABS.index(asked) if asked in LABS else 0,
               format_func=ui.labeler("labs.lab_"), key="lab_choice")
if st.query_params.get("lab") != lab:
    st.query_params["lab"] = lab

# The form is built from the parameters' schema (labs.params): what each
# offers, its range and default; academy.labruns accepts exactly that.
limits = settings.labs
lab_fields = load_lab(lab).Params
main = [(Run, "world_size"), *((lab_fields, name) for name in offered(lab_fields)),
        *((Run, name) for name, (_f, spec) in offered(Run).items()
          if name != "world_size" and not spec.page.advanced)]
advanced = [name for name, (_f, spec) in offered(Run).items() if spec.page.advanced]
with st.form("lab_form"):
    params = {}
    for row in range(0, len(main), 3):
        for column, (cls, name) in zip(st.columns(3), main[row:row + 3], strict=False):
            params[name] = labviews.param_widget(
                column, cls, name, limits, default=world_size_default(lab) if name == "world_size" else None)
    if getattr(load_lab(lab), "FAILURE_INJECTION", True):  # the failure lab kills its rank itself
        with st.expander(t("labs.advanced")):
            chosen = {name: labviews.param_widget(column, Run, name, limits, none=name == "fail_mode")
                      for column, name in zip(st.columns(3), advanced, strict=False)}
            if chosen.get("fail_mode") != "none":
                params.update(chosen)
    submitted = st.form_submit_button(t("labs.run"), type="primary", icon=":material/play_arrow:")

if submitted:
    try:
        run_id = labruns.submit(lab=lab, params=params, learner_id=who.id if who else None, machine=machine,
                                session_runs=state.get("lab_runs", []), client=ui.client())
        state["lab_run_id"] = run_id
        state.setdefault("lab_runs", []).append(run_id)
        if who is None:
            ui.remember_guest_runs(labruns.guest_token(state["lab_runs"]))
    except labruns.LabRequestError as err:
        st.error(ui.error_text(err))

if "lab_run_id" not in state and who is not None:
    # A refresh or a new tab: bring back the learner's lab that is still going.
    state["lab_run_id"] = labruns.active_run_id(learner_id=who.id)
run_id = state.get("lab_run_id")


def live(run_id: int, every: float) -> None:
    """Looks at the queued or running lab every ``every`` seconds (``labviews.cadence``);
    reruns the page when it ends, or when it should be looked at faster or slower."""
    run = labruns.get_run(run_id)
    if run is None or run.status not in ACTIVE:
        st.rerun(scope="app")
    wait = None
    if run.status == "queued":
        wait = labviews.waiting(run_id, "labs")
        if wait is not None:
            st.caption(t("labs.expected_wait", seconds=round(wait)))
    fraction = 0.0
    if run.status != "queued":
        fraction, text = labviews.lab_progress(run.progress)
        st.progress(fraction, text=text)
    duration = labviews.how_long(run, fraction)  # an estimate before a large run, then its pace
    if duration:
        st.caption(duration)
    if st.button(t("labs.cancel"), icon=":material/stop:", key=f"cancel_{run_id}"):
        labqueue.request_cancel(run_id)
        st.rerun(scope="app")
    if labviews.cadence(run.status, wait) != every:
        st.rerun(scope="app")


if run_id is not None:
    run = labruns.get_run(run_id)
    if run is not None and run.status in ACTIVE:
        # A live run is looked at ten times a second, one waiting its turn once a second.
        every = labviews.cadence(run.status, labqueue.expected_wait_s(run_id) if run.status == "queued" else None)
        st.fragment(live, run_every=every)(run_id, every)
    elif run is not None:
        labviews.show_run(run)
        if who is not None and run.learner_id == who.id and run.status == "done":
            # The review queue's questions built from this run's figures (made here at once,
            # or by the next page that brings the queue up to date).
            with session_scope() as session:
                review.sync(session=session, learner_id=who.id)
                made = own.count_for_run(session=session, run_id=run.id)
            if made:
                st.info(t("labs.own_questions", count=made))
                ui.link("review", t("nav.review"), ":material/event_repeat:")


def past_runs() -> list:
    return labruns.history(learner_id=who.id) if who else labruns.runs(state.get("lab_runs", []))


def history(watching: bool) -> None:
    """The runs, each a button that opens it. ``watching``: looked at again every second, while
    a run is queued or running; once none is, the page runs again and stops looking."""
    mine = past_runs()
    for past in mine:
        label = t("labs.history_row", id=past.id, lab=t(f"labs_names.{past.lab}"),
                  count=past.params.get("world_size", "?"), status=t(f"labs.status.{past.status}"),
                  date=ui.date_text(past.created_at, minutes=True))
        if st.button(label, key=f"past_{past.id}", icon=":material/history:"):
            state["lab_run_id"] = past.id
            st.rerun()
    if watching and not any(past.status in ACTIVE for past in mine):
        st.rerun(scope="app")


st.divider()
st.header(t("labs.history") if who else t("labs.history_guest", days=labruns.GUEST_RUNS_DAYS))
watching = any(past.status in ACTIVE for past in past_runs())
st.fragment(history, run_every=labviews.IDLE_EVERY if watching else None)(watching)
