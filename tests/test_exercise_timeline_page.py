"""The bucketed-overlap report's timeline (issue #25): the learner's Bucketer as the grader
saw it (the router's all-reduces, the rank's own backward), torch DDP's from the learner's
newest DDP lab run below it, and each overlap, in every language. A real grading of the
reference feeds the page; no timing is asserted, and the grade does not depend on it.
"""

from __future__ import annotations

import json
import uuid

import pytest

from academy import exercises, i18n, labjob
from academy.db import session_scope
from academy.models import LabRun, Learner
from labs import timeline
from labs.exercises import grader, reference
from tests.apptest import open_page
from tests.test_exercises_more import sandbox_mode

EXERCISE = "bucketed-overlap"


@pytest.fixture(scope="module")
def report() -> dict:
    """The reference graded on its traced case only (a few seconds)."""
    source = reference(EXERCISE)
    out = grader.grade(EXERCISE, source, seed=7, mode=sandbox_mode(), case_ids=["w2-cap400"])
    assert out["status"] == "passed", json.dumps(out)[:2000]
    return out


def learner() -> int:
    with session_scope() as session:
        person = Learner(email=f"tl-{uuid.uuid4().hex[:8]}@example.org", password_hash="x", display_name="TL")
        session.add(person)
        session.flush()
        return person.id


def graded(me: int, report: dict) -> int:
    """A submission of the reference, finished with the worker's own functions."""
    run_id = exercises.submit(learner_id=me, exercise=EXERCISE, source=reference(EXERCISE), lang="en")
    assert labjob._claim(run_id, "test-worker") is not None
    labjob._end_node(run_id, 0, "test-worker", "done", result=report, passed=(me, EXERCISE))
    return run_id


def ddp_lab_run(me: int) -> int:
    """A finished DDP lab run of the learner's with a timeline (two ranks, three buckets)."""
    def rank(r):
        return {"rank": r, "spans": [
            {"kind": "compute", "name": "forward", "start_ms": 0.0, "end_ms": 1.0, "step": 0},
            {"kind": "compute", "name": "backward", "start_ms": 1.0, "end_ms": 4.0, "step": 0},
            {"kind": "comm", "name": "bucket 0", "start_ms": 2.0, "end_ms": 5.0, "step": 0},
            {"kind": "compute", "name": "optimizer", "start_ms": 5.0, "end_ms": 5.5, "step": 0}]}
    ddp = timeline.variant([rank(0), rank(1)], bucket_cap_mb=0.05, allreduce_calls=1)
    result = {"lab": "ddp", "summary": {"world_size": 2, "backend": "gloo", "sections": {"timeline": {
        "variants": {"naive": ddp, "ddp": ddp}, "steps": 1, "hidden": 256, "batch_per_rank": 128,
        "caps": [{"bucket_cap_mb": 0.05, "variant": "ddp"}]}}}}
    with session_scope() as session:
        run = LabRun(learner_id=me, lab="ddp", params={"world_size": 2}, machine={}, status="done",
                     result=result, worker="labhost:1")
        session.add(run)
        session.flush()
        return run.id


def lanes_of(at) -> list[str]:
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    spec = next(s for s in specs if any(tr.get("base") for tr in s["data"]))
    return spec["layout"]["yaxis"]["categoryarray"]


def texts(at) -> list[str]:
    return [e.value for kind in ("markdown", "caption", "info") for e in at.get(kind)]


@pytest.mark.usefixtures("app_db")
@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_the_report_draws_the_learner_s_timeline_and_torch_ddp_s_from_a_lab_run(report, lang):
    trace = report["trace"]
    assert trace["kind"] == "timeline" and trace["world_size"] == 2
    mine = trace["learner"]
    assert all({s["kind"] for s in r["spans"]} == {"compute", "comm"} for r in mine["ranks"])
    me = learner()
    graded(me, report)
    at = open_page("exercises", lang, me, exercise=EXERCISE)
    assert not at.exception, at.exception
    yours = i18n.t("exercises.timeline.yours", lang)
    assert lanes_of(at) == [lane for lane in lanes_of(at) if lane.startswith(yours)] and len(lanes_of(at)) == 4
    assert i18n.t("exercises.timeline.title", lang, count=2, cap=400) in [m.value.strip("*") for m in at.markdown]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics[i18n.t("labs.timeline.overlap", lang, name=yours)] == i18n.format_number(mine["overlap"], lang,
                                                                                            ".0%")
    shown = texts(at)
    assert i18n.t("exercises.timeline.source", lang, count=2, cap=400, hidden=16) in shown
    assert i18n.t("exercises.timeline.no_ddp", lang, count=2) in shown
    # With a DDP lab run of the learner's: torch DDP's lanes below, named by the run, and said which.
    run_id = ddp_lab_run(me)
    at = open_page("exercises", lang, me, exercise=EXERCISE)
    assert not at.exception, at.exception
    ddp = i18n.t("exercises.timeline.ddp", lang, run=run_id)
    drawn = lanes_of(at)
    assert len(drawn) == 8 and drawn[0].startswith(yours) and drawn[-1].startswith(ddp)
    assert i18n.t("labs.timeline.overlap", lang, name=ddp) in {m.label for m in at.metric}
    assert i18n.t("exercises.timeline.ddp_source", lang, run=run_id, count=2, hidden=256,
                  cap="0,05" if lang == "nl" else "0.05") in texts(at)


@pytest.mark.usefixtures("app_db")
def test_a_stored_timeline_with_more_spans_than_the_grader_keeps_is_not_drawn(report):
    forged = json.loads(json.dumps(report))
    spans = forged["trace"]["learner"]["ranks"][0]["spans"]
    spans[:] = [dict(spans[0]) for _ in range(5000)]
    me = learner()
    graded(me, forged)
    at = open_page("exercises", "en", me, exercise=EXERCISE)
    assert not at.exception, at.exception
    assert not at.get("plotly_chart")
    assert i18n.t("exercises.timeline.unavailable", "en") in [c.value for c in at.caption]
