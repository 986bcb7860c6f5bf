"""The launcher: failures end in time, name the rank, and leave no process behind."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest
import torch

from labs.context import LabError, LabResult, machine_summary, resolve_backend
from labs.launch import run_lab
from labs.params import Run
from labs.request import Request
from labs.ring import lab as ring
from labs.settings import Limits
from tests.procs import gone


def launch(lab: str, values: dict, **options):
    """``run_lab`` of the request ``values`` make for ``lab`` (its fields and `Run`'s, flat)."""
    request = Request.checked(lab, values)
    return run_lab(request.run, request.params, **options)


def _assert_no_orphans(outcome) -> None:
    assert outcome.pids, "the launcher should record its children"
    assert all(gone(pid) for pid in outcome.pids), outcome.pids


def test_success_is_a_json_serialisable_result():
    events = []
    result = run_lab(Run(world_size=2, timeout=60), ring.Params(size=4096), on_event=events.append)
    assert isinstance(result, LabResult) and result.ok
    doc = json.loads(json.dumps(result.to_dict()))
    assert doc["ok"] is True and doc["lab"] == "ring" and doc["world_size"] == 2
    # Forked from this single-threaded process: a thread a fixture left behind (a session-wide
    # browser's driver did) makes every in-process run spawn and import PyTorch per rank.
    assert doc["launcher"] == "fork", [t.name for t in threading.enumerate()]
    assert doc["wall_s"] >= doc["work_s"] >= 0 and doc["overhead_s"] >= 0
    assert {"cpu_count", "torch", "gpus", "default_backend"} <= doc["machine"].keys()
    _assert_no_orphans(result)
    # Events: a launch event with the pids, progress per rank, a final done.
    assert events[0]["phase"] == "launch" and events[0]["pids"] == result.pids
    assert events[-1]["phase"] == "done"
    progress = [e for e in events if e["kind"] == "progress"]
    assert {e["rank"] for e in progress} == {0, 1}
    for e in progress:
        assert {"rank", "step", "total_steps", "phase", "fraction", "message", "t",
                "overall"} <= e.keys()
        assert 0.0 <= e["fraction"] <= 1.0
    for rank in (0, 1):
        fractions = [e["fraction"] for e in progress if e["rank"] == rank]
        assert fractions == sorted(fractions) and fractions[-1] == 1.0


def failing(rank: int, step: int, mode: str) -> dict:
    return {"fail_rank": rank, "fail_at_step": step, "fail_mode": mode}


@pytest.mark.parametrize(("lab", "params", "world", "fail"), [
    ("ring", {"size": 4096}, 3, failing(1, 2, "crash")),
    ("ring", {"size": 4096}, 4, failing(3, 0, "crash")),
    ("ddp", {"sections": ["equivalence"], "steps": 6}, 2, failing(0, 3, "crash")),
    ("bench", {"max_bytes": 4096, "iters": 1}, 2, failing(1, 2, "crash")),
])
def test_injected_crash_names_the_rank(lab, params, world, fail):
    start = time.monotonic()
    err = launch(lab, {**params, **fail, "world_size": world, "timeout": 60, "hang_timeout": 30})
    assert isinstance(err, LabError) and not err.ok
    assert err.kind == "crash" and err.rank == fail["fail_rank"], err.message
    assert f"rank {fail['fail_rank']}" in err.message
    assert time.monotonic() - start < 60
    by_rank = {r["rank"]: r for r in err.ranks}
    assert by_rank[fail["fail_rank"]]["exit_code"] == 13  # the injected hard exit
    assert "injected crash" in by_rank[fail["fail_rank"]]["log_tail"]
    json.dumps(err.to_dict())
    _assert_no_orphans(err)


@pytest.mark.parametrize(("lab", "params", "world", "fail"), [
    ("ring", {"size": 4096}, 3, failing(1, 2, "hang")),
    ("ring", {"size": 4096}, 2, failing(0, 0, "hang")),
    ("ddp", {"sections": ["equivalence"], "steps": 6}, 2, failing(1, 2, "hang")),
])
def test_injected_hang_names_the_rank(lab, params, world, fail):
    start = time.monotonic()
    err = launch(lab, {**params, **fail, "world_size": world, "timeout": 60, "hang_timeout": 2})
    assert err.kind == "hang" and err.rank == fail["fail_rank"], err.message
    assert f"rank {fail['fail_rank']}" in err.message
    assert time.monotonic() - start < 60
    others = [r for r in err.ranks if r["rank"] != fail["fail_rank"]]
    assert all(r["waiting_on_peers"] for r in others), err.ranks
    _assert_no_orphans(err)


def test_overall_timeout_kills_everything():
    start = time.monotonic()
    err = run_lab(Run(world_size=2, timeout=3, hang_timeout=300, fail_rank=1, fail_at_step=1, fail_mode="hang"),
                  ring.Params(size=1024))
    assert err.kind == "timeout"
    assert time.monotonic() - start < 15
    _assert_no_orphans(err)


def test_cancel_stops_the_run():
    cancel = threading.Event()

    def on_event(event):
        if event["kind"] == "progress":
            cancel.set()

    err = run_lab(Run(world_size=2, timeout=60, hang_timeout=300, fail_rank=0, fail_at_step=1, fail_mode="hang"),
                  ring.Params(size=1024), cancel=cancel, on_event=on_event)
    assert err.kind == "cancelled"
    _assert_no_orphans(err)


@pytest.mark.parametrize(("lab", "values", "words"), [
    ("ring", {"world_size": 0}, "world size"),
    ("ring", {"world_size": 99}, "world size"),
    ("ring", {"world_size": 9}, "1 to 8"),
    ("ring", {"dtype": "float8"}, "dtype"),
    ("ring", {"dtype": "int64", "op": "avg"}, "avg"),
    ("ring", {"colour": "red"}, "colour"),
    ("ring", {"fail_rank": 5}, "fail rank"),
    ("ring", {"backend": "mpi"}, "backend"),
    ("nosuchlab", {}, "nosuchlab"),
    ("ddp", {"sections": ["magic"]}, "sections"),
    ("ddp", {"samples": 8, "batch": 8}, "8 samples"),  # the lab's own rule across the two models
])
def test_invalid_requests_are_refused_where_they_are_made(lab, values, words):
    """Before anything starts: the request is checked once, where it is made (the page, the
    worker, ``python -m labs``), with the limits in force; the launcher takes it as checked."""
    with pytest.raises((ValueError, TypeError)) as err:
        Request.checked(lab, {"world_size": 2, "timeout": 30, **values}, Limits())
    assert words in str(err.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_nccl_without_gpus_says_so():
    err = run_lab(Run(world_size=2, backend="nccl"), ring.Params())
    assert err.kind == "invalid" and "GPU" in err.message and "gloo" in err.message and err.pids == []
    with pytest.raises(ValueError):
        resolve_backend("nccl", 1)
    assert resolve_backend("auto", 4) == "gloo"


def test_unreached_fail_step_is_reported():
    result = run_lab(Run(world_size=2, fail_rank=0, fail_at_step=99), ring.Params(size=64))
    assert result.ok and "never reached" in result.warnings[0]


def test_spawned_ranks_work_too():
    """The path a multi-threaded caller (a web server) gets: fresh interpreters."""
    result = run_lab(Run(world_size=2, start="spawn", timeout=120), ring.Params(size=256, dtype="int64"))
    assert result.ok, result
    assert result.launcher == "spawn" and result.summary["correct"]
    _assert_no_orphans(result)


def test_auto_start_from_a_thread_spawns():
    box = {}
    thread = threading.Thread(target=lambda: box.update(r=run_lab(
        Run(world_size=1, timeout=120), ring.Params(size=64))))
    thread.start()
    thread.join(150)
    assert box["r"].ok and box["r"].launcher == "spawn"


def test_machine_summary():
    m = machine_summary()
    assert m["cpu_count"] >= 1 and m["torch"] == torch.__version__
    assert m["gloo_available"] is True
    assert isinstance(m["gpus"], list)


def test_labs_import_only_the_lab_side():
    """A rank under torchrun needs no supervisor: the labs and their rank code never import labs.launch."""
    code = ("import json, sys, labs.ring.lab, labs.bench.lab, labs.ddp.lab, labs.sharding.lab; "
            "import labs.ring.allreduce, labs.bench.rank, labs.ddp.rank, labs.sharding.zero; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('labs'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    loaded = json.loads(out)
    assert "labs.context" in loaded and "labs.ring.lab" in loaded
    assert "labs.launch" not in loaded and "labs.verdict" not in loaded, loaded


def test_launch_still_offers_the_names_its_callers_import():
    """run_lab's callers import its types (and machine_summary) from labs.launch."""
    from labs import context, launch

    for name in ("FailSpec", "LabError", "LabResult", "machine_summary", "resolve_backend"):
        assert getattr(launch, name) is getattr(context, name), name
