"""The lab queue is fair and tidy (security finding F-9).

One guest session once queued 12 labs in 2.7 s and everyone else waited
behind them; every run left a ``lab-<id>-*`` directory and a ``Job`` behind.
Now a learner or guest session may have ``lab_max_per_learner`` labs queued
or running, everyone together ``lab_max_queued``. No worker runs here: the
caps count queued runs too, and a queued run is cancelled at once. That a
run leaves no folder and no process behind is tests/test_lab_worker.py's.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlmodel import func, select

from academy import i18n
from academy.accounts import sign_up
from academy.db import session_scope
from academy.labruns import pages as labruns
from academy.labruns import queue as labqueue
from academy.models import ACTIVE, LabRun, utcnow
from academy.settings import get_settings
from tests.apptest import open_page
from tests.factories import wait_for_run

HANG = {"world_size": 2, "fail_mode": "hang", "fail_rank": 1, "fail_at_step": 0}




def active_runs() -> int:
    with session_scope() as s:
        return s.exec(select(func.count()).select_from(LabRun).where(LabRun.status.in_(ACTIVE))).one()


@pytest.fixture
def limits(monkeypatch):
    """Set lab settings for one test (environment variables, as in production)."""
    def apply(**values: int) -> None:
        for key, value in values.items():
            monkeypatch.setenv(key.upper(), str(value))
        get_settings.cache_clear()

    yield apply
    monkeypatch.undo()
    get_settings.cache_clear()


def cancel_all() -> None:
    with session_scope() as s:
        ids = list(s.exec(select(LabRun.id).where(LabRun.status.in_(ACTIVE))))
    for run_id in [i for i in ids if labqueue.request_cancel(i)]:
        wait_for_run(run_id, timeout=60, reap=True)


@pytest.mark.usefixtures("app_db")
def test_one_guest_session_cannot_fill_the_queue(limits):
    limits(lab_max_concurrent=1)
    at = open_page("labs", "nl")
    [b for b in at.selectbox if b.label == i18n.t("labs.fail_mode", "nl")][0].set_value("hang")
    refused = i18n.t("labs_refused.too_many", "nl", limit=2)
    try:
        for click in range(1, 14):
            [b for b in at.button if b.label == i18n.t("labs.run", "nl")][0].click()
            at.run()
            assert not at.exception, at.exception
            errors = [e.value for e in at.error]
            assert errors == ([refused] if click >= 3 else []), click
        assert len(at.session_state["lab_runs"]) == 2
        assert active_runs() == 2
    finally:
        cancel_all()
    # Once a run has ended, the session may start another.
    [b for b in at.button if b.label == i18n.t("labs.run", "nl")][0].click()
    at.run()
    assert refused not in [e.value for e in at.error]
    assert len(at.session_state["lab_runs"]) == 3
    cancel_all()


@pytest.mark.usefixtures("app_db")
def test_a_new_browser_session_is_the_same_guest(limits, monkeypatch):
    """N-3: the Labs page counts a guest by its client (``ui.client()``), not its session:
    a second session of the same client is refused in the learner's language."""
    from app import ui

    limits(lab_max_concurrent=1)
    monkeypatch.setattr(ui, "client", lambda: "203.0.113.9")
    refused = i18n.t("labs_refused.too_many_guest", "nl", limit=2)
    try:
        for session, expected in ((1, [[], []]), (2, [[refused], [refused]])):
            at = open_page("labs", "nl")
            [b for b in at.selectbox if b.label == i18n.t("labs.fail_mode", "nl")][0].set_value("hang")
            for click in range(2):
                [b for b in at.button if b.label == i18n.t("labs.run", "nl")][0].click()
                at.run()
                assert not at.exception, at.exception
                assert [e.value for e in at.error] == expected[click], (session, click)
        assert active_runs() == 2
    finally:
        cancel_all()


@pytest.mark.usefixtures("app_db")
def test_learner_and_global_caps_are_counted_in_the_database(limits):
    limits(lab_max_concurrent=1, lab_max_per_learner=2, lab_max_queued=3)
    with session_scope() as s:
        ann = sign_up(session=s, email="ann@example.org", password="long enough pw").id
        bob = sign_up(session=s, email="bob@example.org", password="long enough pw").id
    try:
        # A run this process's memory knows nothing of (another server process's) counts too.
        with session_scope() as s:
            # Its worker's heartbeat is old: once the counts are checked, the reaper ends it.
            s.add(LabRun(learner_id=ann, lab="ring", params=HANG, status="running",
                         heartbeat_at=utcnow() - timedelta(minutes=1)))
        labruns.submit(lab="ring", params=HANG, learner_id=ann, machine={})
        with pytest.raises(labruns.LabRequestError) as err:
            labruns.submit(lab="ring", params=HANG, learner_id=ann, machine={})
        assert err.value.key == "labs_refused.too_many" and err.value.values == {"limit": 2}
        bobs = labruns.submit(lab="ring", params=HANG, learner_id=bob, machine={})
        with pytest.raises(labruns.LabRequestError) as err:
            labruns.submit(lab="ring", params=HANG, learner_id=bob, machine={})
        assert err.value.key == "labs_refused.queue_full" and err.value.values == {"limit": 3}
        with pytest.raises(labruns.LabRequestError) as err:  # a guest too
            labruns.submit(lab="ring", params=HANG, learner_id=None, machine={}, session_runs=[])
        assert err.value.key == "labs_refused.queue_full"
        assert active_runs() == 3
        assert labruns.get_run(bobs).status == "queued"
        labqueue.request_cancel(bobs)  # cancelled while queued: a place is free again at once
        assert labruns.get_run(bobs).status == "cancelled"
        labruns.submit(lab="ring", params=HANG, learner_id=bob, machine={})
    finally:
        cancel_all()


@pytest.mark.usefixtures("app_db")
def test_a_run_whose_queue_message_was_lost_is_sent_again_once(limits):
    """Redis flushed (or a worker killed between taking a message and claiming
    the run) leaves a row "queued" with nothing in the queue: it would wait
    forever. The workers' periodic check sends it again, once."""
    limits(lab_requeue_after_s=30)
    kept = labruns.submit(lab="ring", params={"world_size": 2}, learner_id=None, machine={})
    lost = labruns.submit(lab="ring", params={"world_size": 2}, learner_id=None, machine={})
    huey = labqueue.get_huey("cpu")
    try:
        assert labqueue.pending_run_ids("cpu") == {kept, lost}
        huey.flush()  # both messages gone ...
        labqueue.enqueue(kept, "cpu")  # ... and one put back by hand
        # Too young to count as lost: nothing happens yet.
        assert labqueue.requeue_lost(["cpu"]) == 0
        later = utcnow() + timedelta(seconds=31)
        assert labqueue.requeue_lost(["cpu"], now=later) == 1
        assert labqueue.pending_run_ids("cpu") == {kept, lost}
        assert labqueue.pending("cpu") == 2  # no second copy of either
        assert labqueue.requeue_lost(["cpu"], now=later) == 0
        # A run no longer queued is never sent again.
        labqueue.request_cancel(lost)
        huey.flush()
        labqueue.enqueue(kept, "cpu")
        assert labqueue.requeue_lost(["cpu"], now=later) == 0
    finally:
        cancel_all()
        huey.flush()
