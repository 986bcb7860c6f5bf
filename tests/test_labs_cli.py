"""``python -m labs`` as the web app runs it: subprocess, JSON out, signals, no orphans."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.procs import gone, group_members

ROOT = Path(__file__).resolve().parent.parent
TORCHRUN = Path(sys.executable).with_name("torchrun")


def labs(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "labs", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, OMP_NUM_THREADS="1"))


def labs_in_a_session(*args: str) -> tuple[subprocess.CompletedProcess, int]:
    """``python -m labs`` in a session of its own, and its pid (the id of its process group,
    which its ranks join). It must end by itself: 60 s is a safety net above the lab's limits."""
    proc = subprocess.Popen([sys.executable, "-m", "labs", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"the lab {' '.join(args)} did not end by itself")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), proc.pid


def _launch_event(events: Path, wait: float = 60.0) -> dict:
    """Wait until the CLI has started its ranks and some rank has made progress."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if events.exists():
            lines = [json.loads(line) for line in events.read_text().splitlines() if line]
            if lines and any(e["kind"] == "progress" for e in lines):
                return lines[0]
        time.sleep(0.1)
    raise TimeoutError("the lab never started")


@pytest.mark.parametrize("algo", ["ring", "pipelined"])
def test_ring_json_smoke(algo):
    proc = labs("ring", "--world-size", "2", "--algo", algo, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ok"] and doc["summary"]["correct"] and doc["world_size"] == 2
    assert doc["summary"]["algo"] == algo and len(doc["summary"]["traces"][0]) == 2


def test_text_output_events_and_out_file(tmp_path):
    events, out = tmp_path / "events.jsonl", tmp_path / "out.json"
    proc = labs("ring", "--world-size", "3", "--size", "96", "--dtype", "int64",
                "--events", str(events), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "reduce-scatter" in proc.stdout and "all-gather" in proc.stdout
    assert "correct" in proc.stdout
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    assert lines[0]["phase"] == "launch" and len(lines[0]["pids"]) == 3
    assert lines[-1]["phase"] == "done"
    doc = json.loads(out.read_text())
    assert doc["ok"] and doc["summary"]["numel"] == 12 and doc["summary"]["dtype"] == "int64"


def test_bench_and_ddp_smoke():
    proc = labs("bench", "--world-size", "2", "--size", "4096", "--iters", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["summary"]["rows"]
    assert [r["impl"] for r in rows] == ["ring", "ring_pipelined", "naive", "all_reduce",
                                         "reduce_scatter", "all_gather"]
    proc = labs("ddp", "--world-size", "2", "--sections", "equivalence", "--steps", "3")
    assert proc.returncode == 0, proc.stderr
    assert "equivalent" in proc.stdout


def test_crash_exit_code_and_error_json(tmp_path):
    out = tmp_path / "out.json"
    proc, group = labs_in_a_session("ring", "--world-size", "3", "--fail-rank", "2", "--fail-at-step", "1",
                                    "--timeout", "20", "--out", str(out))
    assert proc.returncode == 1
    assert "rank 2" in proc.stderr and "crash" in proc.stderr
    assert "error (crash on rank 2)" in proc.stderr
    doc = json.loads(out.read_text())
    # The failure itself, not the 20 s timeout, ended the run, and it names the rank.
    assert doc["ok"] is False and doc["error"]["kind"] == "crash" and doc["error"]["rank"] == 2
    assert doc["error"]["message"].startswith("rank 2 died")
    assert len(doc["error"]["pids"]) == 3
    assert all(gone(pid, 10.0) for pid in doc["error"]["pids"])
    assert group_members(group) == [], "processes of the lab outlived it"


def test_hang_exit_code():
    proc, group = labs_in_a_session("ring", "--world-size", "2", "--fail-rank", "1", "--fail-at-step", "1",
                                    "--fail-mode", "hang", "--timeout", "20", "--hang-timeout", "2", "--json")
    assert proc.returncode == 1
    assert "error (hang on rank 1)" in proc.stderr
    doc = json.loads(proc.stdout)
    # The hang, not the 20 s timeout, ended the run, and it names the rank.
    assert doc["ok"] is False and doc["error"]["kind"] == "hang" and doc["error"]["rank"] == 1
    assert doc["error"]["message"].startswith("rank 1 hung")
    assert len(doc["error"]["pids"]) == 2
    assert group_members(group) == [], "processes of the lab outlived it"


def test_invalid_requests_exit_2():
    proc = labs("ring", "--world-size", "2", "--dtype", "int64", "--op", "avg", "--json")
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["error"]["kind"] == "invalid"
    proc = labs("ring", "--world-size", "12")
    assert proc.returncode == 2 and "1 to 8" in proc.stderr


def _start_hanging_cli(tmp_path, **popen):
    events = tmp_path / "events.jsonl"
    out = tmp_path / "out.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "labs", "ring", "--world-size", "3", "--fail-rank", "1",
         "--fail-at-step", "1", "--fail-mode", "hang", "--hang-timeout", "300",
         "--events", str(events), "--out", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
    try:
        pids = _launch_event(events)["pids"]
    except BaseException:
        proc.kill()
        raise
    return proc, pids, out


def test_sigterm_to_the_cli_stops_every_rank(tmp_path):
    proc, pids, out = _start_hanging_cli(tmp_path)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert "cancelled" in stderr
    assert json.loads(out.read_text())["error"]["kind"] == "cancelled"
    assert all(gone(pid, 10.0) for pid in pids)


@pytest.mark.parametrize("how", ["kill the group", "kill the cli alone"])
def test_sigkill_leaves_no_rank_behind(tmp_path, how):
    proc, pids, _ = _start_hanging_cli(tmp_path, start_new_session=True)
    if how == "kill the group":  # what the web app does to cancel
        os.killpg(proc.pid, signal.SIGKILL)
    else:  # the ranks notice their parent died (PR_SET_PDEATHSIG)
        proc.kill()
    proc.communicate(timeout=30)
    assert all(gone(pid, 10.0) for pid in pids), pids


@pytest.mark.skipif(not TORCHRUN.exists() and not shutil.which("torchrun"),
                    reason="torchrun not installed")
def test_torchrun_gives_the_same_answer_as_our_launcher(tmp_path):
    torchrun = str(TORCHRUN) if TORCHRUN.exists() else shutil.which("torchrun")
    out = tmp_path / "torchrun.json"
    proc = subprocess.run(
        [torchrun, "--standalone", "--nproc-per-node", "2", "-m", "labs.ring", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
        env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "all-gather" in proc.stdout  # rank 0 printed the per-step table
    via_torchrun = json.loads(out.read_text())
    ours = json.loads(labs("ring", "--world-size", "2", "--json").stdout)
    assert via_torchrun["launcher"] == "torchrun" and ours["launcher"] != "torchrun"
    for key in ("checksum", "numel", "chunk_numels", "correct", "dtype", "op"):
        assert via_torchrun["summary"][key] == ours["summary"][key], key
