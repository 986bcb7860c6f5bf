"""torch DDP's lanes beside bucketed-overlap's report (issue #25): made by the grading side on
the case's own model, ranks and cap, kept once per machine, and never taken from a rank.

No torch runs here: the child that really runs DDP is stood in for (``_made``); the real
one runs in tests/test_exercise_timeline_page.py's grading.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import pytest

from labs.exercises import ddp_lanes, grader, load

CASE = {"id": "w2-cap400", "world_size": 2, "seed": 27, "cap": 400, "features": 6, "hidden": 16,
        "classes": 3, "batch": 3, "steps": 3, "lr": 0.5, "shape": [6, 6], "dtype": "float32"}


def lanes_for(case: dict, overlap: float = 0.25) -> dict:
    spans = [{"kind": "compute", "name": "backward", "start_ms": 0.0, "end_ms": 2.0, "step": 0},
             {"kind": "comm", "name": "bucket 0", "start_ms": 1.5, "end_ms": 3.5, "step": 0}]
    return {"overlap": overlap, "steps": 1, "allreduce_calls": 1, "bucket_cap_mb": case["cap"] / (1 << 20),
            "ranks": [{"rank": r, "spans": spans} for r in range(case["world_size"])], "key": ddp_lanes.key(case)}


def cached_path(folder, case: dict):
    name = hashlib.sha256(json.dumps(ddp_lanes.key(case), sort_keys=True).encode()).hexdigest()[:24]
    return folder / f"{name}.json"


def test_the_key_is_the_model_the_batch_the_steps_the_cap_and_the_ranks_not_the_seed():
    key = ddp_lanes.key(CASE)
    assert key == ddp_lanes.key(dict(CASE, seed=99, id="other"))
    for field, value in (("cap", 100), ("world_size", 3), ("hidden", 32), ("batch", 4), ("steps", 2)):
        assert ddp_lanes.key(dict(CASE, **{field: value})) != key


def test_made_once_then_read_from_the_machine_s_cache(tmp_path, monkeypatch):
    made = []
    monkeypatch.setattr(ddp_lanes, "_made", lambda case, *_: made.append(case) or lanes_for(case))
    first = ddp_lanes.lanes(CASE, folder=tmp_path)
    again = ddp_lanes.lanes(dict(CASE, seed=5), folder=tmp_path)  # another grading, another seed
    assert made == [CASE] and first == again == json.loads(cached_path(tmp_path, CASE).read_text())
    ddp_lanes.lanes(dict(CASE, cap=100), folder=tmp_path)  # another cap: its own lanes
    assert len(made) == 2


def test_a_cached_file_that_is_not_for_this_key_or_not_lanes_is_made_again(tmp_path, monkeypatch):
    monkeypatch.setattr(ddp_lanes, "_made", lambda case, *_: lanes_for(case, overlap=0.5))
    path = cached_path(tmp_path, CASE)
    for stale in (lanes_for(dict(CASE, cap=100)), {"key": ddp_lanes.key(CASE), "ranks": "x"}, "not json"):
        path.write_text(stale if isinstance(stale, str) else json.dumps(stale))
        assert ddp_lanes.lanes(CASE, folder=tmp_path)["overlap"] == 0.5


def test_a_cache_folder_others_may_write_is_neither_read_nor_written(tmp_path, monkeypatch):
    """Lanes planted where another user could have put them are never shown as torch DDP's."""
    folder = tmp_path / "shared"
    folder.mkdir()
    planted = dict(lanes_for(CASE), overlap=1.0)
    cached_path(folder, CASE).write_text(json.dumps(planted))
    os.chmod(folder, 0o777)
    monkeypatch.setattr(ddp_lanes, "_made", lambda case, *_: lanes_for(case))
    assert ddp_lanes.lanes(CASE, folder=folder)["overlap"] == 0.25
    assert json.loads(cached_path(folder, CASE).read_text()) == planted


def test_a_child_that_fails_gives_no_lanes(tmp_path, monkeypatch):
    monkeypatch.setattr(ddp_lanes, "ROOT", tmp_path)  # `python -m labs.exercises.ddp_lanes` is not found there
    assert ddp_lanes.lanes(CASE, folder=tmp_path / "cache") is None
    assert not list((tmp_path / "cache").glob("*.json"))


def test_the_grader_puts_the_grading_side_s_lanes_in_the_trace_over_anything_a_rank_said(monkeypatch):
    """`beside` is asked after `trace`, from the case alone: a rank's reply that names lanes of
    its own is not what the report draws."""
    exercise = load("bucketed-overlap")
    monkeypatch.setattr(ddp_lanes, "lanes", lambda case: lanes_for(case, overlap=0.125))
    forged = lanes_for(CASE, overlap=1.0)
    monkeypatch.setattr(exercise, "trace", lambda *_: {"kind": "timeline", "learner": {}, "ddp": forged})
    events = [{"event": "case", "index": 1, "total": 1, "case": dict(CASE, function="Bucketer"), "status": "done",
               "ranks": [{"rank": r, "expected": {}, "reply": {"result": {"ddp": forged}},
                          "traffic": {"sent": 0, "received": 0, "calls": []}} for r in range(2)]},
              {"event": "done"}]

    def run_python(*_args, on_line, **_kwargs):
        for event in events:
            on_line(json.dumps(event).encode())
        return type("Outcome", (), {"stopped": None, "returncode": 0, "stderr": b"", "mode": "none"})()

    monkeypatch.setattr(grader.sandbox, "run_python", run_python)
    monkeypatch.setattr(grader.sandbox, "check_available", lambda *_: None)
    monkeypatch.setattr(exercise, "check", lambda *_: [{"check": "x", "passed": True, "key": "x_ok"}])
    monkeypatch.setattr(exercise, "cases", lambda *_: [CASE])
    out = grader.grade("bucketed-overlap", "class Bucketer: pass\n", seed=1, mode="none")
    assert out.trace["ddp"]["overlap"] == pytest.approx(0.125)


def test_the_cache_folder_is_a_setting_of_the_exercises(tmp_path, monkeypatch):
    """``EXERCISE_DDP_CACHE`` is read with the other ``EXERCISE_*`` settings (environment or
    ``.env``; ``Settings.exercises``), by default a folder of this user's; a bad value names it."""
    from academy.settings import Settings
    from labs.sandbox.limits import Limits
    from labs.settings import SettingError, read

    monkeypatch.delenv("EXERCISE_DDP_CACHE", raising=False)
    monkeypatch.chdir(tmp_path)
    default = Path(tempfile.gettempdir()) / f"dpa-ddp-lanes-{os.getuid()}"
    assert ddp_lanes.cache_dir() == Settings().exercises.ddp_cache == default
    assert "EXERCISE_DDP_CACHE" not in Settings().exercises.environ()  # the grader finds the same default
    (tmp_path / ".env").write_text(f"EXERCISE_DDP_CACHE={tmp_path / 'from-dotenv'}\n")
    assert ddp_lanes.cache_dir() == tmp_path / "from-dotenv"
    monkeypatch.setenv("EXERCISE_DDP_CACHE", f" {tmp_path / 'lanes'} ")
    assert ddp_lanes.cache_dir() == Settings().exercises.ddp_cache == tmp_path / "lanes"
    assert Settings().exercises.environ()["EXERCISE_DDP_CACHE"] == str(tmp_path / "lanes")
    monkeypatch.setenv("EXERCISE_DDP_CACHE", "  ")  # blank: as if unset
    assert ddp_lanes.cache_dir() == default
    with pytest.raises(SettingError, match="EXERCISE_DDP_CACHE="):
        read(Limits, ddp_cache="lanes\0here")
