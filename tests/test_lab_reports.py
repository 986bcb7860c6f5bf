"""A stored lab result read through its one reader (``labs.reports.read``).

A run stored before a lab grew a field still parses with the default the page
assumed and still draws; a result that is not its lab's report raises a
`ReportError` naming what does not fit, and the page shows what it shows for a
failed run (the failure and its technical details) instead of a traceback.
No lab is started: the results are built here, in the shape of older runs.
"""

from __future__ import annotations

import json
import typing
from typing import Any

import pytest

from academy import i18n
from labs import reports
from labs.context import load_lab, stored_summary
from tests.apptest import open_page
from tests.factories import finished_run
from tests.runquestions import LABS
from tests.runquestions import result as recorded_result


def _steps(rank: int) -> list[dict]:
    """Rank ``rank``'s records of a 2-rank ring: one reduce-scatter step, one all-gather step."""
    return [{"step": k, "phase": phase, "send_chunk": (rank - k) % 2, "send_to": 1 - rank,
             "t_start": 0.001 * k, "t_end": 0.001 * (k + 1)} for k, phase in enumerate(("reduce-scatter", "all-gather"))]


# A ring run as the lab first stored it: one timed run, no spreads, no algorithm, no step bytes.
OLD_RING = {"ok": True, "lab": "ring", "world_size": 2, "wall_s": 1.5, "overhead_s": 0.5,
            "summary": {"lab": "ring", "world_size": 2, "backend": "gloo", "numel": 4, "dtype": "float32",
                        "element_size": 4, "size_bytes": 16, "chunk_numels": [2, 2], "total_time_s": 0.002,
                        "builtin_time_s": 0.001, "busbw_GBps": 0.008, "correct": True,
                        "traces": [_steps(0), _steps(1)]}}
# A benchmark from before its rows named their collective and their spread.
OLD_BENCH = {"ok": True, "summary": {"lab": "bench", "world_size": 2, "rows": [
    {"size": 1024, "count": 256, "dtype": "float32", "op": "sum", "impl": impl, "time_us": 50.0, "algbw": 0.02,
     "busbw": 0.02, "wrong": 0} for impl in ("ring", "all_reduce")], "fit": {"all_reduce": None}}}


def test_older_results_parse_with_the_defaults_the_pages_assumed():
    ring = reports.read("ring", OLD_RING)
    assert isinstance(ring.summary, reports.RingSummary)
    assert (ring.summary.algo, ring.summary.repeats, ring.summary.step_times, ring.summary.max_abs_err) == (
        "ring", 1, None, None)
    assert (ring.wall_s, ring.overhead_s) == (1.5, 0.5)
    bench = reports.read("bench", OLD_BENCH).summary
    assert [r.collective for r in bench.rows] == [None, None] and bench.iters == 1
    assert bench.fit == {"all_reduce": None} and bench.ring_vs_all_reduce == []
    ddp = reports.read("ddp", {"summary": {"world_size": 2, "sections": {
        "equivalence": {}, "breakdown": {"steps": 3, "comm_hidden_by_overlap": 9.44}}}}).summary
    assert ddp.backend == "gloo" and ddp.sections.equivalence is None and ddp.sections.breakdown is None


def test_a_result_that_is_not_the_lab_s_report_names_what_does_not_fit():
    broken = {"summary": {**OLD_RING["summary"], "world_size": "two"}}
    del broken["summary"]["traces"]
    with pytest.raises(reports.ReportError, match=r"ring lab.*summary\.world_size.*summary\.traces"):
        reports.read("ring", broken)
    for result in (None, {}, {"summary": None}, "text"):
        with pytest.raises(reports.ReportError):
            reports.read("bench", result)
    with pytest.raises(reports.ReportError, match="no report type"):
        reports.read("nonesuch", OLD_RING)


def _stored(lab: str, result: dict) -> int:
    return finished_run(lab, result, machine={"cpu_count": 2, "torch": "2.0"})


@pytest.mark.usefixtures("app_db")
@pytest.mark.parametrize(("lab", "result"), [("ring", OLD_RING), ("bench", OLD_BENCH)])
def test_an_older_result_still_draws(lab, result):
    at = open_page("labs", "en", state={"lab_run_id": _stored(lab, result)}, lab=lab)
    assert not at.exception, at.exception
    assert at.get("plotly_chart") and not at.error
    assert i18n.t("labs.done", "en", seconds=result.get("wall_s", 0.0), overhead=result.get("overhead_s", 0.0)) in [
        s.value for s in at.success]


@pytest.mark.usefixtures("app_db")
def test_a_broken_result_shows_the_failure_and_why():
    broken = {"summary": {**OLD_RING["summary"], "world_size": "two"}}
    at = open_page("labs", "en", state={"lab_run_id": _stored("ring", broken)}, lab="ring")
    assert not at.exception, at.exception
    assert [e.value for e in at.error] == [i18n.t("labs.failed", "en")]
    assert "summary.world_size" in at.code[0].value and not at.get("plotly_chart")


def _as_recorded(stored: Any, recorded: Any) -> Any:
    """``stored`` without the keys ``recorded`` lacks, at any depth."""
    if isinstance(stored, dict) and isinstance(recorded, dict):
        return {key: _as_recorded(value, recorded[key]) for key, value in stored.items() if key in recorded}
    if isinstance(stored, list) and isinstance(recorded, list):
        return [_as_recorded(a, b) for a, b in zip(stored, recorded, strict=True)]
    return stored


@pytest.mark.parametrize("lab", LABS)
def test_a_recorded_summary_is_stored_again_as_it_was(lab):
    """The lab's ``summarize`` returns its report model, and a recorded run's summary read into that
    model gives back the same JSON through ``stored_summary``: every key the run stored is declared,
    with its value as it was (a whole number stays whole). A field the recording lacks (it was made
    before the field, or trimmed) comes back at the default the page assumes, and only such fields."""
    module = load_lab(lab)
    assert typing.get_type_hints(module.summarize)["return"] is module.SUMMARY
    recorded = recorded_result(lab)["summary"]
    model = module.SUMMARY.model_validate(recorded)
    assert json.dumps(model.model_dump(mode="json", exclude_unset=True), sort_keys=True) == json.dumps(
        recorded, sort_keys=True)
    stored = stored_summary(model)
    assert json.dumps(_as_recorded(stored, recorded), sort_keys=True) == json.dumps(recorded, sort_keys=True)
    assert module.SUMMARY.model_validate(stored) == model
