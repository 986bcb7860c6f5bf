"""Labs in the browser's code paths: page runs, animation from a real trace, queue, cancel, failure."""

from __future__ import annotations

import json
import time

import pytest
from streamlit.testing.v1 import AppTest

from academy import i18n
from academy.labruns import job as labjob
from academy.labruns import pages as labruns
from academy.labruns import queue as labqueue
from app import charts, charts_ring, labviews
from labs import context
from labs.ring import ringtrace
from tests.apptest import MAIN, login_token, open_page, record_cadence
from tests.factories import wait_for_run
from tests.procs import gone, lab_pids

LABELS = {k: k for k in ["rank", "chunk", "holds", "start", "play", "pause", "step", "reduce-scatter",
                         "all-gather", "phase", "sends"]}




def open_labs(lang: str = "en") -> AppTest:
    at = open_page("labs", lang)
    assert not at.exception, at.exception
    return at


def poll(at: AppTest, until, timeout: float = 90) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        at.run()
        assert not at.exception, at.exception
        if until(at):
            return
        time.sleep(0.5)
    raise AssertionError("the page never showed the expected result")


@pytest.mark.usefixtures("shared_lab_worker")
def test_page_runs_the_default_three_rank_ring_and_shows_the_animation():
    at = open_labs("zh")
    [b for b in at.button if b.label == i18n.t("labs.run", "zh")][0].click()
    at.run()
    poll(at, lambda a: len(a.get("plotly_chart")) >= 2)
    # The run's own figures, in full (a prefix such as "用时 0" held only for runs under a second).
    res = labruns.get_run(at.session_state["lab_run_id"]).result
    done = i18n.t("labs.done", "zh", seconds=res["wall_s"], overhead=res["overhead_s"])
    assert done in [s.value for s in at.success]
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert len(spec["frames"]) == 2 * (3 - 1) + 1  # the ring lab's default: 3 ranks


@pytest.mark.parametrize("algo", ["ring", "pipelined"])
@pytest.mark.usefixtures("shared_lab_worker")
def test_animation_replays_a_real_four_rank_trace(algo):
    run_id = labruns.submit(lab="ring", params={"world_size": 4, "size": 4 * 1001, "algo": algo},
                            learner_id=None, machine={})
    assert wait_for_run(run_id, poll=0.2, reap=True).status == "done"
    summary = labruns.get_run(run_id).result["summary"]
    assert summary["correct"]
    steps, durations = ringtrace.trace_steps(summary["traces"])
    assert len(steps) == 6 and all(d > 0 for d in durations)
    assert len(set(summary["chunk_numels"])) > 1, "uneven chunks are exercised"
    fig = charts_ring.ring_figure(4, steps, labels=LABELS, step_durations=durations)
    assert len(fig.frames) == 7
    for k in range(1, 7):
        sends = next(tr for tr in fig.frames[k].data if tr.name == "sends")
        shown = sorted(tuple(c[:3]) for c in sends.customdata)
        expected = sorted(
            (r, rec["send_to"], rec["send_chunk"]) for r, recs in enumerate(summary["traces"])
            for rec in recs if rec["step"] == k - 1
        )
        assert shown == expected, k
        assert len(fig.frames[k].layout.annotations) == 4
    final = next(tr for tr in fig.frames[-1].data if tr.name == "chunks")
    assert all(c[2] == 4 for c in final.customdata), "every chunk complete on every rank"
    first = next(tr for tr in fig.frames[0].data if tr.name == "chunks")
    assert all(c[2] == 1 for c in first.customdata)


@pytest.mark.usefixtures("shared_lab_worker")
def test_naive_animation_moves_whole_buffers_as_the_real_trace_says():
    run_id = labruns.submit(lab="ring", params={"world_size": 4, "size": 4 * 1001, "algo": "naive"},
                            learner_id=None, machine={})
    assert wait_for_run(run_id, poll=0.2, reap=True).status == "done"
    summary = labruns.get_run(run_id).result["summary"]
    assert summary["correct"]
    steps, durations = ringtrace.trace_steps(summary["traces"])
    assert len(steps) == 3 and all(d > 0 for d in durations)
    labels = {**LABELS, "pass-around": "pass-around", "buffer": "buffer", "carries": "rank {rank}'s whole buffer"}
    fig = charts_ring.naive_ring_figure(4, steps, labels=labels, step_durations=durations, buffer_size="3.9 KiB")
    assert len(fig.frames) == 4
    for k in range(1, 4):
        sends = next(tr for tr in fig.frames[k].data if tr.name == "sends")
        shown = sorted((src, dst) for src, dst, _whose in sends.customdata)
        expected = sorted((r, rec["send_to"]) for r, recs in enumerate(summary["traces"])
                          for rec in recs if rec["step"] == k - 1)
        assert shown == expected, k
        # In step k each rank forwards the buffer that started k-1 places to its left.
        assert all(whose == (src - (k - 1)) % 4 for src, _dst, whose in sends.customdata), k
        texts = sorted(a.text for a in fig.frames[k].layout.annotations)  # each arrow names whose buffer
        assert texts == sorted(f"rank {whose}" for _src, _dst, whose in sends.customdata)
        row = charts.table(fig)["rows"][k - 1][3]
        assert all(f"rank {src} → {dst}: rank {whose}'s whole buffer (3.9 KiB)" in row
                   for src, dst, whose in sends.customdata)
    counts = [[c[1] for c in next(tr for tr in f.data if tr.name == "buffers").customdata] for f in fig.frames]
    assert counts == [[1] * 4, [2] * 4, [3] * 4, [4] * 4], "one more rank's data added per step"


@pytest.mark.parametrize("world_size", [2, 3, 5, 8])
def test_schedule_replay_completes_for_any_world_size(world_size):
    from app.calculators import ring_schedule

    states = charts_ring.replay(world_size, ring_schedule(world_size))
    after_rs = states[world_size - 1].counts()
    for r in range(world_size):
        assert after_rs[r][(r + 1) % world_size] == world_size
    assert all(c == world_size for row in states[-1].counts() for c in row)


@pytest.mark.xdist_group("procs")
def test_second_lab_waits_its_turn_and_cancel_leaves_no_process(shared_lab_worker):
    hang = labruns.submit(lab="ring", params={"world_size": 2, "fail_mode": "hang", "fail_rank": 1,
                                              "fail_at_step": 0}, learner_id=None, machine={})
    second = labruns.submit(lab="ring", params={"world_size": 2}, learner_id=None, machine={})
    deadline = time.time() + 30
    while labruns.get_run(hang).status != "running" and time.time() < deadline:
        time.sleep(0.1)
    pids = lab_pids(hang, shared_lab_worker.proc.pid)
    while not pids and time.time() < deadline + 30:  # its ranks start (torch's import) on a busy machine
        time.sleep(0.2)
        pids = lab_pids(hang, shared_lab_worker.proc.pid)
    assert labruns.get_run(second).status == "queued"
    assert labqueue.queue_position(second) == 1
    assert pids, "the hanging lab has live processes"
    labqueue.request_cancel(hang)
    assert wait_for_run(hang, poll=0.2, reap=True).status == "cancelled"
    assert all(gone(pid) for pid in pids), "every process of the cancelled lab has exited"
    assert wait_for_run(second, poll=0.2, reap=True).status == "done"


@pytest.mark.usefixtures("shared_lab_worker")
def test_injected_crash_shows_a_message_naming_the_rank():
    at = open_labs("en")
    run_id = labruns.submit(lab="ring", params={"world_size": 2, "fail_mode": "crash", "fail_rank": 1,
                                                "fail_at_step": 1}, learner_id=None, machine={})
    assert wait_for_run(run_id, poll=0.2, reap=True).status == "failed"
    at.session_state["lab_run_id"] = run_id
    at.run()
    errors = [e.value for e in at.error]
    assert i18n.t("labs.failed", "en") in errors
    assert any(e.startswith("Rank 1 crashed at step 1") for e in errors), errors
    assert i18n.t("labs.why_hang", "en") in [i.value for i in at.info]
    pids = labruns.get_run(run_id).error["pids"]
    assert pids and all(gone(pid) for pid in pids), "no rank of the failed lab is left running"


def test_bad_requests_are_refused_clearly():
    with pytest.raises(labruns.LabRequestError) as err:
        labruns.validate("ring", {"world_size": 99})
    assert err.value.key == "labs.err_world_size"
    with pytest.raises(labruns.LabRequestError):
        labruns.validate("rm -rf", {})
    with pytest.raises(labruns.LabRequestError):
        labruns.validate("ring", {"world_size": 2, "fail_rank": 5})
    assert "evil" not in labruns.validate("ring", {"world_size": 2, "evil": "; rm -rf /"}).stored()


@pytest.mark.usefixtures("app_db")
def test_a_running_lab_comes_back_after_a_refresh():
    from academy.accounts import sign_up
    from academy.db import session_scope

    with session_scope() as s:
        learner = sign_up(session=s, email="lab-refresh@example.org", password="long enough pw")
    run_id = labruns.submit(lab="ring", params={"world_size": 2, "fail_mode": "hang", "fail_rank": 0,
                                                "fail_at_step": 0}, learner_id=learner.id, machine={})
    try:
        at = AppTest.from_file(MAIN, default_timeout=60)  # a new browser session
        at.query_params["lang"] = "en"
        at.session_state["session_token"] = login_token(learner.id)  # signed in, as after a refresh
        at.run()
        at.switch_page("views/labs.py")
        at.run()
        assert at.session_state["lab_run_id"] == run_id
        assert [b for b in at.button if b.label == i18n.t("labs.cancel", "en")]
    finally:
        labqueue.request_cancel(run_id)
        assert wait_for_run(run_id, poll=0.2, reap=True).status == "cancelled"


def test_a_run_is_looked_at_fast_while_live_and_slowly_while_it_waits():
    assert labviews.cadence("running") == labviews.LIVE_EVERY <= 0.1
    assert labviews.cadence("queued", 0.0) == labviews.LIVE_EVERY  # a slot is free: it starts any moment
    assert labviews.cadence("queued", 12.0) == labviews.IDLE_EVERY  # behind others
    assert labviews.cadence("queued", None) == labviews.IDLE_EVERY  # no worker up (or no history yet)


@pytest.mark.usefixtures("app_db")
@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_a_live_run_shows_its_honest_phases_at_the_fast_cadence(monkeypatch, lang):
    """Queued with no worker: the slow cadence; claimed: the fast one, "starting the
    processes" through the launcher's launch and each rank's ready, then the step of
    the total with the bar at that step, then "collecting" once the ranks have ended."""
    from academy.accounts import sign_up
    from academy.db import session_scope

    cadences = record_cadence(monkeypatch)
    with session_scope() as s:
        learner = sign_up(session=s, email=f"lab-live-{lang}@example.org", password="long enough pw")
    run_id = labruns.submit(lab="ring", params={"world_size": 2}, learner_id=learner.id, machine={})
    at = open_page("labs", lang, learner.id)
    assert not at.exception, at.exception
    assert cadences[-1] == labviews.IDLE_EVERY
    assert not at.get("progress")

    labjob._claim(run_id, "test-worker")
    seen = []
    for event in (None, context.event(None, 0, 1, "launch", "started 2 ranks (fork)", kind="status"),
                  context.event(1, 0, None, "ready", "joined the process group", kind="status"),
                  context.event(0, 2, 8, "ring", overall=0.2),
                  context.event(None, 1, 1, "done", "finished in 0.37 s", kind="status")):
        labjob._beat_node(run_id, 0, "test-worker", event)
        at.run()
        assert not at.exception, at.exception
        assert cadences[-1] == labviews.LIVE_EVERY
        [bar] = at.get("progress")
        seen.append((bar.proto.value, bar.proto.text))
    t = lambda key, **v: i18n.t(key, lang, **v)  # noqa: E731
    assert seen == [(0, t("labs.starting"))] * 3 + [(25, t("labs.running", phase="ring", step=2, steps=8)),
                                                     (100, t("labs.collecting"))]
    labjob._end_node(run_id, 0, "test-worker", "cancelled", error={"kind": "cancelled", "message": ""})


def _cookie_written(at: AppTest) -> str | None:
    """The guest-runs cookie a page run wrote (its script), or None."""
    from app import ui

    for block in at.get("html"):
        body = getattr(block, "body", "") or getattr(block.proto, "body", "")
        if f"{ui.guest_runs_cookie_name()}=" in body:
            return body.split(f"{ui.guest_runs_cookie_name()}=", 1)[1].split(";", 1)[0]
    return None


@pytest.mark.usefixtures("app_db")
@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_a_guest_s_runs_are_back_after_a_reload_and_their_status_follows_them(monkeypatch, lang):
    """"Runs in this visit" emptied on reload, and a tab kept saying "running" after its run had
    ended (journey review m14): the list comes back from a signed cookie, and is looked at every
    second while one of its runs is queued or running."""
    from app import ui

    at = open_page("labs", lang)
    [b for b in at.button if b.label == i18n.t("labs.run", lang)][0].click()
    at.run()
    assert not at.exception, at.exception
    run_id = at.session_state["lab_run_id"]
    token = _cookie_written(at)
    assert token is not None and labruns.guest_run_ids(token) == [run_id]
    # A reload: a new session, whose browser sends the cookie back.
    cookies = {ui.guest_runs_cookie_name(): token}
    monkeypatch.setattr(ui, "cookie", lambda name: cookies.get(name))
    cadences = record_cadence(monkeypatch, of="history")
    again = open_page("labs", lang)
    assert not again.exception, again.exception
    queued = i18n.t("labs.status.queued", lang)
    rows = [b.label for b in again.button if b.label.startswith(f"#{run_id} ")]
    assert len(rows) == 1 and queued in rows[0]
    assert cadences[-1] == labviews.IDLE_EVERY  # a run in the list is active: looked at every second
    labjob._claim(run_id, "test-worker")
    labjob._end_node(run_id, 0, "test-worker", "cancelled", error={"kind": "cancelled", "message": ""})
    again.run()
    rows = [b.label for b in again.button if b.label.startswith(f"#{run_id} ")]
    assert i18n.t("labs.status.cancelled", lang) in rows[0]
    assert cadences[-1] is None  # nothing active: no more looking
    # A cookie the browser wrote itself (its signature broken) lists nothing.
    cookies[ui.guest_runs_cookie_name()] = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
    assert not [b for b in open_page("labs", lang).button if b.label.startswith(f"#{run_id} ")]


@pytest.mark.usefixtures("app_db")
@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_a_large_run_is_announced_with_an_estimate_then_its_pace_and_the_bar_says_what_it_does(lang):
    """8 ranks x 64 MiB showed 65 s of "Starting the processes" with an empty bar and nothing
    to say it would be long (journey review m2): before it starts, an estimate from this
    machine's recent runs of the lab; once under way, the time left at its own pace; and the
    bar names the rank's phase and what it is doing."""
    from datetime import timedelta

    from academy.db import session_scope
    from academy.models import LabRun, utcnow
    from labs.ring import lab as ring

    small = {"size": 1 << 20, "repeats": 5, "warmup": 1, "world_size": 3}
    with session_scope() as s:  # two finished runs: 1 s of work each for 2 x 1 MiB x 11
        for _ in range(2):
            s.add(LabRun(lab="ring", params=small, status="done", result={"wall_s": 3.0, "overhead_s": 2.0}))
    big = {"size": 64 << 20, "repeats": 5, "world_size": 8}
    run_id = labruns.submit(lab="ring", params=big, learner_id=None, machine={"cpu_count": 2})
    unit = 1.0 / ring.cost(ring.Params(**{k: v for k, v in small.items() if k != "world_size"}), 3)
    expected = 2.0 + unit * ring.cost(ring.Params(size=64 << 20, repeats=5), 8)
    assert labruns.estimate_s("ring", labruns.get_run(run_id).params) == pytest.approx(expected)
    at = open_page("labs", lang, state={"lab_run_id": run_id, "lab_runs": [run_id]})
    assert not at.exception, at.exception
    said = i18n.t("labs.estimate", lang, seconds=round(expected), cpus=2)
    assert said in [c.value for c in at.caption]
    # Under way, 30 s in and a quarter done: its own pace says 90 s more.
    labjob._claim(run_id, "test-worker")
    with session_scope() as s:
        row = s.get(LabRun, run_id)
        row.started_at = utcnow() - timedelta(seconds=30)
        s.add(row)
    labjob._beat_node(run_id, 0, "test-worker", context.event(0, 10, 40, "warm-up", "untimed run 1/1"))
    at.run()
    assert not at.exception, at.exception
    captions = [c.value for c in at.caption]
    assert said not in captions
    # 90 s, or a little more as the page's own run took a moment of the clock
    assert [c for c in captions if c in {i18n.t("labs.eta", lang, seconds=s) for s in range(90, 110)}]
    [bar] = at.get("progress")
    assert bar.proto.text == i18n.t("labs.running_detail", lang, phase="warm-up", message="untimed run 1/1",
                                    step=10, steps=40)
    labjob._end_node(run_id, 0, "test-worker", "cancelled", error={"kind": "cancelled", "message": ""})
