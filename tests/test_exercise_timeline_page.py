"""The bucketed-overlap report's timeline (issue #25): the learner's Bucketer as the grader
saw it (the router's all-reduces, the rank's own backward) and, below it on one time axis,
torch DDP on the same model, ranks and cap, as the grading side ran it
(``labs.exercises.ddp_lanes``), with each overlap, in every language. A real grading of the
reference, with a cache of its own (so torch DDP really runs), feeds the page; no timing is
asserted, and the grade does not depend on it.
"""

from __future__ import annotations

import json

import pytest

from academy import exercises, i18n
from academy.labruns import job as labjob
from labs.exercises import ddp_lanes, load, reference
from tests.apptest import open_page
from tests.exercisepass import passing_report
from tests.factories import learner

EXERCISE = "bucketed-overlap"


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    """The reference graded on its traced case only, torch DDP's lanes made afresh (seconds):
    the report as a run's result keeps it."""
    return passing_report(EXERCISE, seed=7, case_ids=("w2-cap400",),
                          EXERCISE_DDP_CACHE=str(tmp_path_factory.mktemp("ddp-lanes"))).dump()


def graded(me: int, report: dict) -> int:
    """A submission of the reference, finished with the worker's own functions."""
    run_id = exercises.submit(learner_id=me, exercise=EXERCISE, source=reference(EXERCISE), lang="en")
    assert labjob._claim(run_id, "test-worker") is not None
    labjob._end_node(run_id, 0, "test-worker", "done", result=report, passed=(me, EXERCISE))
    return run_id


def lanes_of(at) -> list[str]:
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    spec = next(s for s in specs if any(tr.get("base") for tr in s["data"]))
    return spec["layout"]["yaxis"]["categoryarray"]


def texts(at) -> list[str]:
    return [e.value for kind in ("markdown", "caption", "info") for e in at.get(kind)]


def test_a_grading_runs_torch_ddp_on_the_traced_case_s_own_model_ranks_and_cap(report):
    trace = report["trace"]
    assert trace["kind"] == "timeline" and trace["world_size"] == 2 and trace["cap_bytes"] == 400
    case = next(c for c in load(EXERCISE).cases(7) if c["id"] == "w2-cap400")
    ddp, mine = trace["ddp"], trace["learner"]
    # Made by the grading side from the case itself: its key is the case's shape, cap and ranks.
    assert ddp["key"] == ddp_lanes.key(case) and ddp["key"]["hidden"] == trace["hidden"] == 128
    # The traced case's own model (issue #36): a backward as wide as the all-reduces in the lanes,
    # in five buckets at 400 bytes, where every other case trains 6-16-16-3 on 3 samples per rank.
    assert {k: case[k] for k in load(EXERCISE).TRACE_MODEL} == load(EXERCISE).TRACE_MODEL
    assert mine["allreduce_calls"] == ddp["allreduce_calls"] == 5
    assert ddp["bucket_cap_mb"] * (1 << 20) == pytest.approx(400)
    for var in (mine, ddp):
        assert [r["rank"] for r in var["ranks"]] == [0, 1]
        assert all({s["kind"] for s in r["spans"]} == {"compute", "comm"} for r in var["ranks"])
        assert 0.0 <= var["overlap"] <= 1.0
    assert ddp["steps"] == case["steps"] and ddp["allreduce_calls"] >= 1
    assert all(s["name"].startswith("bucket ") for r in ddp["ranks"] for s in r["spans"] if s["kind"] == "comm")


@pytest.mark.usefixtures("app_db")
@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_the_report_draws_your_bucketer_above_torch_ddp_on_the_same_model_and_cap(report, lang):
    trace = report["trace"]
    mine, ddp = trace["learner"], trace["ddp"]
    me = learner()
    graded(me, report)
    at = open_page("exercises", lang, me, exercise=EXERCISE)
    assert not at.exception, at.exception
    yours, theirs = i18n.t("exercises.timeline.yours", lang), i18n.t("exercises.timeline.ddp", lang)
    drawn = lanes_of(at)
    assert len(drawn) == 8
    assert all(lane.startswith(yours) for lane in drawn[:4]) and all(lane.startswith(theirs) for lane in drawn[4:])
    assert i18n.t("exercises.timeline.title", lang, count=2, cap=400) in [m.value.strip("*") for m in at.markdown]
    metrics = {m.label: m.value for m in at.metric}
    for name, var in ((yours, mine), (theirs, ddp)):
        assert metrics[i18n.t("labs.timeline.overlap", lang, name=name)] == i18n.format_number(var["overlap"], lang,
                                                                                                ".0%")
    shown = texts(at)
    # The case is the global batch it trains on, not "65536 elements of float32" (journey m9).
    batch = i18n.t("exercises.case_batch", lang, id="w2-cap400", world=2, count=2048, features=32, per_rank=1024)
    assert [e for e in at.expander if e.label.startswith(batch)], [e.label for e in at.expander]
    assert i18n.t("exercises.timeline.source", lang, count=2, cap=400, hidden=128) in shown
    assert i18n.t("exercises.timeline.ddp_source", lang, count=2, cap=400, hidden=128, steps=3,
                  torch=ddp["key"]["torch"], calls=ddp["allreduce_calls"], yours=mine["allreduce_calls"]) in shown


@pytest.mark.usefixtures("app_db")
@pytest.mark.parametrize(("ddp", "key"), [("absent", "exercises.timeline.ddp_older"),
                                          (None, "exercises.timeline.ddp_failed")])
def test_without_torch_ddp_s_lanes_the_report_draws_yours_and_says_why(report, ddp, key):
    """A report from before the grading ran torch DDP, or one where it could not: never
    another model's lanes in their place."""
    older = json.loads(json.dumps(report))
    if ddp == "absent":
        del older["trace"]["ddp"]
    else:
        older["trace"]["ddp"] = ddp
    me = learner()
    graded(me, older)
    at = open_page("exercises", "en", me, exercise=EXERCISE)
    assert not at.exception, at.exception
    assert len(lanes_of(at)) == 4 and all(lane.startswith("your Bucketer") for lane in lanes_of(at))
    assert i18n.t(key, "en") in texts(at)


@pytest.mark.usefixtures("app_db")
@pytest.mark.parametrize("which", ["learner", "ddp"])
def test_a_stored_timeline_with_more_spans_than_the_grader_keeps_is_not_drawn(report, which):
    forged = json.loads(json.dumps(report))
    spans = forged["trace"][which]["ranks"][0]["spans"]
    spans[:] = [dict(spans[0]) for _ in range(5000)]
    me = learner()
    graded(me, forged)
    at = open_page("exercises", "en", me, exercise=EXERCISE)
    assert not at.exception, at.exception
    assert not at.get("plotly_chart")
    assert i18n.t("exercises.timeline.unavailable", "en") in [c.value for c in at.caption]
