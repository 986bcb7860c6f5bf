"""The launcher: failures end in time, name the rank, and leave no process behind."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest
import torch

from labs.context import FailSpec, LabError, LabResult, machine_summary, resolve_backend
from labs.launch import run_lab
from tests.procs import gone


def _assert_no_orphans(outcome) -> None:
    assert outcome.pids, "the launcher should record its children"
    assert all(gone(pid) for pid in outcome.pids), outcome.pids


def test_success_is_a_json_serialisable_result():
    events = []
    result = run_lab("ring", {"size": 4096}, world_size=2, timeout=60, on_event=events.append)
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


@pytest.mark.parametrize(("lab", "params", "world", "fail"), [
    ("ring", {"size": 4096}, 3, FailSpec(rank=1, step=2, mode="crash")),
    ("ring", {"size": 4096}, 4, FailSpec(rank=3, step=0, mode="crash")),
    ("ddp", {"sections": ["equivalence"], "steps": 6}, 2, FailSpec(rank=0, step=3, mode="crash")),
    ("bench", {"max_bytes": 4096, "iters": 1}, 2, FailSpec(rank=1, step=2, mode="crash")),
])
def test_injected_crash_names_the_rank(lab, params, world, fail):
    start = time.monotonic()
    err = run_lab(lab, params, world_size=world, fail=fail, timeout=60, hang_timeout=30)
    assert isinstance(err, LabError) and not err.ok
    assert err.kind == "crash" and err.rank == fail.rank, err.message
    assert f"rank {fail.rank}" in err.message
    assert time.monotonic() - start < 60
    by_rank = {r["rank"]: r for r in err.ranks}
    assert by_rank[fail.rank]["exit_code"] == 13  # the injected hard exit
    assert "injected crash" in by_rank[fail.rank]["log_tail"]
    json.dumps(err.to_dict())
    _assert_no_orphans(err)


@pytest.mark.parametrize(("lab", "params", "world", "fail"), [
    ("ring", {"size": 4096}, 3, FailSpec(rank=1, step=2, mode="hang")),
    ("ring", {"size": 4096}, 2, FailSpec(rank=0, step=0, mode="hang")),
    ("ddp", {"sections": ["equivalence"], "steps": 6}, 2, FailSpec(rank=1, step=2, mode="hang")),
])
def test_injected_hang_names_the_rank(lab, params, world, fail):
    start = time.monotonic()
    err = run_lab(lab, params, world_size=world, fail=fail, timeout=60, hang_timeout=2)
    assert err.kind == "hang" and err.rank == fail.rank, err.message
    assert f"rank {fail.rank}" in err.message
    assert time.monotonic() - start < 60
    others = [r for r in err.ranks if r["rank"] != fail.rank]
    assert all(r["waiting_on_peers"] for r in others), err.ranks
    _assert_no_orphans(err)


def test_overall_timeout_kills_everything():
    start = time.monotonic()
    err = run_lab("ring", {"size": 1024}, world_size=2, timeout=3, hang_timeout=300,
                  fail=FailSpec(rank=1, step=1, mode="hang"))
    assert err.kind == "timeout"
    assert time.monotonic() - start < 15
    _assert_no_orphans(err)


def test_cancel_stops_the_run():
    cancel = threading.Event()

    def on_event(event):
        if event["kind"] == "progress":
            cancel.set()

    err = run_lab("ring", {"size": 1024}, world_size=2, timeout=60, hang_timeout=300,
                  fail=FailSpec(rank=0, step=1, mode="hang"), cancel=cancel, on_event=on_event)
    assert err.kind == "cancelled"
    _assert_no_orphans(err)


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"lab": "ring", "world_size": 0}, "world size"),
    ({"lab": "ring", "world_size": 99}, "world size"),
    ({"lab": "ring", "world_size": 9}, "1 to 8"),
    ({"lab": "ring", "params": {"dtype": "float8"}}, "dtype"),
    ({"lab": "ring", "params": {"dtype": "int64", "op": "avg"}}, "avg"),
    ({"lab": "ring", "params": {"colour": "red"}}, "colour"),
    ({"lab": "ring", "fail": FailSpec(rank=5, step=0)}, "fail rank"),
    ({"lab": "ring", "backend": "mpi"}, "backend"),
    ({"lab": "nosuchlab"}, "nosuchlab"),
    ({"lab": "ddp", "params": {"sections": ["magic"]}}, "sections"),
])
def test_invalid_requests_fail_before_starting_anything(kwargs, words):
    kwargs = {"world_size": 2, **kwargs}
    err = run_lab(timeout=30, **kwargs)
    assert err.kind == "invalid" and err.rank is None and err.pids == []
    assert words in err.message


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_nccl_without_gpus_says_so():
    err = run_lab("ring", world_size=2, backend="nccl")
    assert err.kind == "invalid" and "GPU" in err.message and "gloo" in err.message
    with pytest.raises(ValueError):
        resolve_backend("nccl", 1)
    assert resolve_backend("auto", 4) == "gloo"


def test_unreached_fail_step_is_reported():
    result = run_lab("ring", {"size": 64}, world_size=2, fail=FailSpec(rank=0, step=99))
    assert result.ok and "never reached" in result.warnings[0]


def test_spawned_ranks_work_too():
    """The path a multi-threaded caller (a web server) gets: fresh interpreters."""
    result = run_lab("ring", {"size": 256, "dtype": "int64"}, world_size=2, start="spawn",
                     timeout=120)
    assert result.ok, result
    assert result.launcher == "spawn" and result.summary["correct"]
    _assert_no_orphans(result)


def test_auto_start_from_a_thread_spawns():
    box = {}
    thread = threading.Thread(target=lambda: box.update(r=run_lab(
        "ring", {"size": 64}, world_size=1, timeout=120)))
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
