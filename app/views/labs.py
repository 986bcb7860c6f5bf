"""Labs: choose a lab, run it on real processes, watch progress, read the results."""

import streamlit as st

from academy.settings import get_settings
from app import labjobs, labviews, ui
from labs.launch import machine_summary

t = ui.t
state = st.session_state
st.title(t("nav.labs"))
st.write(t("labs.intro"))
who = ui.learner()
settings = get_settings()
machine = st.cache_resource(machine_summary)()
labjobs.recover_after_restart_once()

LABS = labjobs.LABS
asked = st.query_params.get("lab")
lab = st.radio(t("labs.choose"), LABS, index=LABS.index(asked) if asked in LABS else 0,
               format_func=ui.labeler("labs.lab_"), key="lab_choice")
if st.query_params.get("lab") != lab:
    st.query_params["lab"] = lab

SIZES = [2**k for k in range(10, 27, 2)]  # 1 KiB .. 64 MiB
with st.form("lab_form"):
    c1, c2, c3 = st.columns(3)
    params = {"world_size": c1.slider(t("labs.world_size"), 1, settings.lab_max_world_size, 2)}
    if lab == "ring":
        params["size"] = c2.select_slider(t("labs.size"), SIZES, value=2**20, format_func=labviews._fmt_bytes)
        params["algo"] = c3.selectbox(t("labs.algo"), ["ring", "pipelined", "naive"],
                                      format_func=ui.labeler("labs.algo_"))
        c4, c5, _ = st.columns(3)
        params["dtype"] = c4.selectbox(t("labs.dtype"), ["float32", "float64", "bfloat16", "int64"])
        params["op"] = c5.selectbox(t("labs.op"), ["sum", "avg"])
    elif lab == "bench":
        params["max_bytes"] = c2.select_slider(t("labs.max_size"), SIZES[3:], value=2**22,
                                               format_func=labviews._fmt_bytes)
        params["min_bytes"] = 1024
    else:
        params["steps"] = c2.slider(t("labs.steps"), 2, 20, 5)
    params["backend"] = st.selectbox(t("labs.backend"), ["auto", "gloo", "nccl"], help=t("labs.backend_help"))
    with st.expander(t("labs.advanced")):
        f1, f2, f3 = st.columns(3)
        mode = f1.selectbox(t("labs.fail_mode"), ["none", "crash", "hang"], format_func=ui.labeler("labs.fail_"))
        fail_rank = f2.number_input(t("labs.fail_rank"), 0, settings.lab_max_world_size - 1, 1)
        fail_step = f3.number_input(t("labs.fail_step"), 0, 100, 1)
        if mode != "none":
            params.update(fail_mode=mode, fail_rank=int(fail_rank), fail_at_step=int(fail_step))
    submitted = st.form_submit_button(t("labs.run"), type="primary", icon=":material/play_arrow:")

if submitted:
    try:
        run_id = labjobs.submit(lab=lab, params=params, learner_id=who.id if who else None, machine=machine,
                                session_runs=state.get("lab_runs", []))
        state["lab_run_id"] = run_id
        state.setdefault("lab_runs", []).append(run_id)
    except labjobs.LabRequestError as err:
        st.error(t(err.code, **err.values))

if "lab_run_id" not in state and who is not None:
    # A refresh or a new tab: bring back the learner's lab that is still going.
    state["lab_run_id"] = labjobs.active_run_id(learner_id=who.id)
run_id = state.get("lab_run_id")


@st.fragment(run_every=1.0)
def live(run_id: int) -> None:
    """Polls the running lab once a second; reruns the page when it ends."""
    run = labjobs.get_run(run_id)
    if run is None or run.status not in ("queued", "running"):
        st.rerun(scope="app")
    if run.status == "queued":
        position, slots, wait = labjobs.queue_info(run_id)
        if slots:
            st.info(t("labs.queued", position=position or 1, count=slots))
        else:
            st.warning(t("labs.no_worker", position=position or 1))
        if wait is not None:
            st.caption(t("labs.expected_wait", seconds=round(wait)))
    else:
        event = labjobs.progress(run_id) or {}
        fraction = event.get("fraction")
        if event.get("phase") and event.get("step") is not None and event.get("rank") is not None:
            text = t("labs.running", phase=event["phase"], step=event["step"])
        elif event.get("message"):
            text = t("labs.running_plain", message=event["message"])
        else:
            text = t("labs.starting")
        st.progress(min(max(fraction or 0.0, 0.0), 1.0), text=text)
    if st.button(t("labs.cancel"), icon=":material/stop:", key=f"cancel_{run_id}"):
        labjobs.cancel(run_id)
        st.rerun(scope="app")


if run_id is not None:
    run = labjobs.get_run(run_id)
    if run is not None and run.status in ("queued", "running"):
        live(run_id)
    elif run is not None:
        labviews.show_run(run, latest_bench=labjobs.latest_result(who.id if who else None, "bench"))

st.divider()
mine = labjobs.history(learner_id=who.id) if who else labjobs.runs(state.get("lab_runs", []))
st.markdown(f"#### {t('labs.history') if who else t('labs.history_guest')}")
for past in mine:
    label = t("labs.history_row", id=past.id, lab=t(f"labs_names.{past.lab}"),
              count=past.params.get("world_size", "?"), status=t(f"labs.status.{past.status}"),
              date=f"{past.created_at:%Y-%m-%d %H:%M}")
    if st.button(label, key=f"past_{past.id}", icon=":material/history:"):
        state["lab_run_id"] = past.id
        st.rerun()
