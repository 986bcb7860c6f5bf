"""``python -m benchmarks --smoke`` runs and its JSON has every figure.

Smoke mode runs every part once at its smallest size (``Config.smoke_mode``);
the concurrent-learner part runs in tests/test_load.py and the classroom
part's client here, both against the session's real server. Timings are never
asserted: each figure must be a number, or a string that says why it is
missing ("skipped: ..." or "not available: ...").
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from academy.content import languages
from benchmarks.common import Config

ROOT = Path(__file__).resolve().parent.parent
MiB = 1 << 20

COLLECTIVE_ROW = ("size_bytes", "ring_busbw_GBps", "ring_pipelined_busbw_GBps", "naive_busbw_GBps",
                  "all_reduce_busbw_GBps", "ring_vs_all_reduce", "pipelined_vs_all_reduce", "ring_of_tcp",
                  "ring_pipelined_of_tcp", "naive_of_tcp", "all_reduce_of_tcp")
FIT = ("alpha_us", "bandwidth_GBps", "bandwidth_of_tcp")
LAUNCH = ("wall_s", "collective_s", "overhead_s", "first_progress_in_process_s")
FIRST_EVENT = ("first_progress_cli_s", "python_import_torch_s")
WARM = ("runs", "run_to_result_s", "run_to_result_max_s", "first_progress_p95_s", "python_import_torch_s")
DDP = ("naive_step_ms", "ddp_step_ms", "ddp_vs_naive_step_ratio")
SHARDING = ("wall_s", "work_s", "max_abs_diff_vs_ddp", "zero3_vs_ddp_wire")
COMPRESSION = ("wall_s", "work_s", "max_formula_error")  # and per strategy: bytes, saved, gap, step_ms
QUEUE = ("single_end_to_end_s", "single_queue_wait_s", "burst_queue_wait_s", "burst_end_to_end_s",
         "burst_total_s")
# The sandbox's cost: the same program or grading in mode bwrap and in mode none.
SANDBOX = ("bwrap_p50_s", "bwrap_p95_s", "none_p50_s", "none_p95_s", "overhead_p50_s")
EXERCISE_QUEUE = ("cases", "queue_p50_s", "queue_p95_s", "queue_wait_p50_s", "grading_p50_s")
QUIZ = ("engine_ms", "store_sqlite_ms")
CERTIFICATE = ("sign_ms", "qr_ms", "issue_ms", "render_ms", "total_ms")
VERIFICATION = ("lookups_per_s", "repeat_lookups_per_s", "old_row_lookups_per_s", "raw_select_per_s",
                "ed25519_verify_per_s", "valid_fraction")
ARRIVAL = ("p50_s", "p95_s", "max_s", "busy_notices")
CLASSROOM = ("p50_s", "p95_s", "throughput_per_s", "server_cpu_ms_per_page")
PAGES = ("home", "lessons", "labs", "quiz", "certificate", "verify", "account")
SMOKE = Config.smoke_mode()


def is_reason(value) -> bool:
    return isinstance(value, str) and value.startswith(("skipped", "not available"))


def figure(value, where: str) -> None:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    assert number or is_reason(value), f"{where}: {value!r} is neither a number nor a reason"


def part(data, keys, where: str) -> bool:
    """Check the figures `keys` of one part; False when the whole part is a reason."""
    if is_reason(data):
        return False
    assert isinstance(data, dict), f"{where}: {data!r}"
    for key in keys:
        assert key in data, f"{where}: no {key!r}"
        figure(data[key], f"{where}.{key}")
    return True


_RUNS: dict[str, tuple[str, dict]] = {}


def smoke(only: str) -> tuple[str, dict]:
    """(stdout, JSON) of ``python -m benchmarks --smoke --only ONLY``, run once per xdist
    worker: each test runs only the parts it checks, so the parts spread over the workers
    (the whole smoke run, shared, took 137 s and was built on both)."""
    if only not in _RUNS:
        with tempfile.TemporaryDirectory(prefix="dpa-smoke-") as folder:
            out = Path(folder) / "bench.json"
            proc = subprocess.run([sys.executable, "-m", "benchmarks", "--smoke", "--only", only,
                                   "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=540)
            assert proc.returncode == 0, proc.stderr[-4000:]
            _RUNS[only] = proc.stdout, json.loads(out.read_text())
    stdout, result = _RUNS[only]
    left_out = result["labs"]["launch"] if not only.startswith("labs") else result["collectives"]
    assert left_out.startswith("skipped: not asked for (--only"), "--only runs only the parts named"
    return stdout, result


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_smoke_prints_one_table():
    stdout, result = smoke("gpu")
    assert "| section" in stdout
    for key in ("mode", "date", "command", "machine", "duration_s", "load_average_1min", "shrunk"):
        assert key in result["meta"], key
    assert result["meta"]["mode"] == "smoke"
    assert result["meta"]["command"] == "python -m benchmarks --smoke --only gpu"
    assert result["meta"]["shrunk"], "smoke mode must say what it shrank"
    assert "shrank (full run in brackets):" in stdout


def test_only_refuses_a_part_it_does_not_know(capsys):
    from benchmarks.__main__ import main

    with pytest.raises(SystemExit) as exit_:
        main(["--smoke", "--only", "labs.warm,nope"])
    assert exit_.value.code == 2
    assert "unknown part(s) nope; known: collectives, labs.launch" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_collectives_have_every_figure():
    c = smoke("collectives")[1]["collectives"]
    if is_reason(c):
        return
    assert set(c["world_sizes"]) == {str(n) for n in SMOKE.world_sizes}
    for n, run in c["world_sizes"].items():
        where = f"collectives.{n}"
        if not part(run, ("tcp_loopback_GBps", "min_ring_vs_all_reduce", "min_pipelined_vs_all_reduce"), where):
            continue
        assert run["rows"] and all(r["size_bytes"] >= MiB for r in run["rows"])
        for r in run["rows"]:
            part(r, COLLECTIVE_ROW, f"{where}.{r['size_bytes']}")
        assert set(run["fit"]) == {"ring", "ring_pipelined", "naive", "all_reduce"}
        for impl, fit in run["fit"].items():
            part(fit, FIT, f"{where}.fit.{impl}")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_lab_runs_have_every_figure():
    labs = smoke("labs.launch,labs.first_event,labs.ddp,labs.timeline,labs.sharding,labs.compression,labs.straggler")[1]["labs"]
    part(labs["launch"], LAUNCH, "labs.launch")
    part(labs["first_event"], FIRST_EVENT, "labs.first_event")
    if part(labs["ddp"], DDP, "labs.ddp"):
        assert set(labs["ddp"]["scaling"]) == {str(n) for n in SMOKE.ddp_world_sizes}
        for n, row in labs["ddp"]["scaling"].items():
            part(row, ("efficiency", "samples_per_s"), f"labs.ddp.scaling.{n}")
    if part(labs["timeline"], ("runs",), "labs.timeline"):
        assert {"naive", "ddp"} <= set(labs["timeline"]["variants"])
        for name, v in labs["timeline"]["variants"].items():
            for key in ("overlap", "exposed_comm_ms"):
                part(v[key], ("median", "min", "max"), f"labs.timeline.{name}.{key}")
    if part(labs["sharding"], SHARDING, "labs.sharding"):
        part(labs["sharding"]["ledger_error"], ("ddp", "zero1", "zero2", "zero3"), "labs.sharding.ledger_error")
    if part(labs["compression"], COMPRESSION, "labs.compression"):
        c = labs["compression"]
        assert c["max_formula_error"] <= 0.01 and c["saved"]["fp16"] == pytest.approx(0.5)
        assert set(c["saved"]) == set(c["gap"]) == set(c["bytes_per_step"]) - {"fp32"} == set(c["step_ms"]) - {"fp32"}
        from benchmarks import report

        rows = report.labs({"launch": "skipped", "first_event": "skipped", "ddp": "skipped", "compression": c})
        assert any(r[1].startswith("compression: bytes saved per step") and "topk_ef 9" in r[2] for r in rows)
    if part(labs["straggler"], ("target", "factor", "runs"), "labs.straggler"):  # the error: a figure, not asserted
        assert "stop" in labs["straggler"]["methods"]
        for method, m in labs["straggler"]["methods"].items():
            for key in ("model_error", "achieved", "step_ms", "model_ms", "recovered", "loss_paid"):
                part(m[key], ("median", "min", "max"), f"labs.straggler.{method}.{key}")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_lab_queue_warm_worker_and_sandbox_have_every_figure():
    labs = smoke("labs.queue,labs.warm,labs.sandbox")[1]["labs"]
    if part(labs["queue"], ("bare_cli_s",), "labs.queue"):
        assert set(labs["queue"]["workers"]) == {str(n) for n in SMOKE.queue_workers}
        for n, row in labs["queue"]["workers"].items():
            part(row, QUEUE, f"labs.queue.workers.{n}")
    part(labs["sandbox"], SANDBOX, "labs.sandbox")
    part(labs["warm"], WARM, "labs.warm")


def sandbox_works() -> bool:
    from labs.sandbox.run import SandboxUnavailable, check_available

    try:
        check_available("bwrap")
        check_available("none")
    except SandboxUnavailable:
        return False
    return True


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_exercises_have_every_figure():
    """Two exercises through the queue (the ring, and save-and-resume whose cases restart their ranks: both graded warm), the ring graded alone in both modes.

    Where the sandbox can start here, every figure must be a number: a reason
    instead would hide a broken path from Run to report.
    """
    from labs.exercises import EXERCISES

    stdout, result = smoke("exercises")
    e = result["exercises"]
    if is_reason(e) and not sandbox_works():
        return
    assert isinstance(e, dict), e
    assert set(e["exercises"]) == set(EXERCISES)
    for ex, parts in e["exercises"].items():
        if ex not in SMOKE.exercise_queue:  # smoke mode queues the ring and one that restarts its ranks
            assert parts["queue"].startswith("skipped: smoke mode queues only"), parts["queue"]
            assert parts["direct"].startswith("skipped: smoke mode"), parts["direct"]
            continue
        assert part(parts["queue"], EXERCISE_QUEUE, f"exercises.{ex}.queue"), parts["queue"]
        assert parts["queue"]["runs"] == SMOKE.exercise_repeats
        if ex == "ring-allreduce":  # smoke mode, like quick, grades the ring alone, in both modes
            assert part(parts["direct"], SANDBOX, f"exercises.{ex}.direct"), parts["direct"]
        else:
            assert parts["direct"].startswith("skipped: smoke mode"), parts["direct"]
    queued = [ex for ex in EXERCISES if ex in SMOKE.exercise_queue]
    assert len(queued) == 2 and e["target"]["exercises"] == queued and e["target"]["p95_s"] == 1.5  # #35: each
    assert isinstance(e["target"]["met"], bool)
    assert stdout.count("target: p95 under 1.5 s") == len(queued)
    assert stdout.count("queue + 1 worker, warm grader") == len(queued)  # save-and-resume's restarts too (#35)
    assert stdout.count("| exercises ") == len(EXERCISES) + 1  # a row each, and the ring's sandbox row


def test_report_puts_the_target_beside_each_exercise():
    """An exercise's row compares its p95 with the issue's target; a missing part says why."""
    from benchmarks.report import exercises

    spread = {"runs": 5, "cases": 21, "queue_p50_s": 4.0, "queue_p95_s": 5.0, "queue_wait_p50_s": 0.1,
              "grading_p50_s": 3.5}
    direct = {"runs": 5, "bwrap_p50_s": 3.0, "bwrap_p95_s": 3.2, "none_p50_s": 2.5, "none_p95_s": 2.7,
              "overhead_p50_s": 0.5}
    rows = exercises({"target": {"exercises": ["ring-allreduce", "broadcast"], "p95_s": 10.0, "met": True},
                      "exercises": {"ring-allreduce": {"queue": spread, "direct": direct},
                                    "broadcast": {"queue": "not available: RuntimeError: boom",
                                                  "direct": "skipped: quick mode grades only ring-allreduce"}}})
    ring = rows[0]
    assert ring[1].startswith("ring-allreduce (21 cases)")
    assert ring[2:] == ("4.00 s · 5.00 s", "target: p95 under 10 s", "p95 50% of the target")
    assert rows[1][2:] == ("3.00 s · 3.20 s", "no sandbox 2.50 s · 2.70 s", "+0.50 s (p50)")
    assert rows[2][1:3] == ("broadcast: Run to report through the queue", "not available: RuntimeError: boom")
    assert len(rows) == 3  # a skipped part adds no row


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_platform_has_every_figure():
    stdout, result = smoke("platform")
    p = result["platform"]
    part(p["quiz"], QUIZ, "platform.quiz")
    if part(p["certificate"], CERTIFICATE, "platform.certificate"):
        part(p["certificate"]["pdf_kib"], languages(), "platform.certificate.pdf_kib")
    if part(p["verification"], VERIFICATION, "platform.verification"):
        assert p["verification"]["certificates"] == SMOKE.certificates  # smoke mode's table
    if part(p["arrival"], ("sign_in_alone_s", "hash_s"), "platform.arrival"):
        assert (p["arrival"]["sign_up"]["errors"], p["arrival"]["sign_in"]["errors"]) == (0, 0)
    if part(p["pages"], ("empty_script_ms", "new_session_ms"), "platform.pages"):
        assert p["pages"]["render_ms"], "no page rendered"
        for page, langs in p["pages"]["render_ms"].items():
            part(langs, languages(), f"platform.pages.{page}")
    # Smoke mode leaves these two to the tests on the real server (tests/test_load.py, and
    # test_the_classroom_client_gets_every_page_of_the_real_server below); say so.
    assert p["load"].startswith("skipped: smoke mode"), p["load"]
    assert p["classroom"].startswith("skipped: smoke mode"), p["classroom"]
    assert "classroom: concurrent websocket sessions" in stdout  # its row says why


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_classroom_client_gets_every_page_of_the_real_server(server):
    """The classroom part's client (``benchmarks.wsload``) on the session's server: every page
    served whole, and a one-session drive reports every figure with no error. The drive's
    length is one second of pages; nothing here depends on how fast they come."""
    from benchmarks import wsload

    with wsload.PageClient(server.url) as client:
        for page in wsload.PAGES:
            _, nbytes, ok = client.run_page(page)
            assert ok and nbytes > 0, page or "home"
    row = wsload.summarise(wsload.drive(server, sessions=1, seconds=1.0))
    part(row, CLASSROOM, "classroom.app.1")
    assert row["pages"] > 0 and row["errors"] == 0, row["first_errors"]
    assert set(row["per_page"]) <= {"home", *PAGES[1:]}


def test_page_client_sees_a_page_fail(tmp_path):
    """The load client counts a run that ends in an exception as failed, not as served."""
    from benchmarks.appserver import AppServer
    from benchmarks.wsload import PageClient

    script = tmp_path / "broken.py"
    script.write_text("import streamlit as st\n\nst.write('before')\nraise RuntimeError('boom')\n")
    server = AppServer(tmp_path, script=script)
    server.start()
    try:
        with PageClient(server.url) as client:
            _, nbytes, ok = client.run_page("")
    finally:
        server.stop()
    assert nbytes > 0 and not ok


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_gpu_runs_or_says_why_not():
    import torch

    g = smoke("gpu")[1]["gpu"]
    if torch.cuda.is_available():
        assert isinstance(g, dict) and g["mode"] in ("nccl", "single-gpu ddp") or is_reason(g)
    else:
        assert g == "skipped: no CUDA"


@pytest.mark.slow
def test_the_sharding_rows():
    """The sharding lab's part of the table, from one small run (the quick run checks the rest)."""
    from benchmarks import lab_costs, report
    from benchmarks.common import Config

    sh = lab_costs.sharding(Config.quick_mode())
    part(sh, SHARDING, "labs.sharding")
    assert set(sh["ledger_error"]) == {"ddp", "zero1", "zero2", "zero3"}
    assert max(sh["ledger_error"].values()) <= 0.10 and sh["zero3_vs_ddp_wire"] > 1.3
    skipped = "skipped: not measured here"
    rows = report.labs({"launch": skipped, "first_event": skipped, "ddp": skipped, "sharding": sh})
    figures = [r[1] for r in rows]
    assert any(f.startswith("sharding lab, 2 ranks") for f in figures)
    assert any(f.startswith("sharding ledger") for f in figures)


def test_the_warm_worker_row_sits_beside_a_bare_torch_import():
    from benchmarks import report

    warm = {"lab": "ring", "world_size": 3, "runs": 3, "run_to_result_s": 2.0, "run_to_result_max_s": 2.5,
            "first_progress_p95_s": 0.4, "python_import_torch_s": 4.0}
    skipped = "skipped: not measured here"
    [row] = [r for r in report.labs({"launch": skipped, "first_event": skipped, "ddp": skipped, "warm": warm})
             if r[1].startswith("Run to result, warm worker")]
    assert row[2:] == ("2.00 s", "`python -c 'import torch'` 4.00 s", "0.50x; first progress event p95 0.40 s")
    assert report.labs({"launch": skipped, "first_event": skipped, "ddp": skipped, "warm": skipped})[-1][1] \
        == "Run to result, warm worker"


@pytest.mark.slow
def test_a_class_arriving_at_once(tmp_path):
    """30 sign-ups, then 30 sign-ins, at once through ``academy.accounts`` (issue #26): every
    one goes through, none is refused "busy". Counts and errors only: no wall time is asserted."""
    from benchmarks import platform_costs, report
    from benchmarks.common import Config

    cfg = Config.quick_mode()
    arrival = platform_costs.class_arrival(cfg, tmp_path)
    assert arrival["arrivals"] == cfg.arrivals == 30
    for op in ("sign_up", "sign_in"):
        burst = arrival[op]
        assert (burst["calls"], burst["ok"], burst["errors"]) == (30, 30, 0), burst["first_errors"]
        part(burst, ARRIVAL, f"platform.arrival.{op}")
    part(arrival, ("sign_in_alone_s", "hash_s", "earlier_hash_s"), "platform.arrival")
    rows = [r[1] for r in report.platform({"quiz": "skipped", "certificate": "skipped",
                                           "verification": "skipped", "arrival": arrival,
                                           "pages": "skipped", "load": "skipped"})]
    assert any(r.startswith("a class arrives: 30 sign-ups") for r in rows)
    assert any(r.startswith("a class arrives: 30 sign-ins") for r in rows)


@pytest.mark.usefixtures("secrets")
def test_verification_rows_with_and_without_the_keyed_check(tmp_path):
    """Rows filled as the store issues them (with their keyed check), every look-up valid,
    first, again and of old rows (issue #26); the report has a row for each. No timing asserted."""
    from dataclasses import replace

    from benchmarks import platform_costs, report

    cfg = replace(Config.smoke_mode(), certificates=300, lookups=60)
    v = platform_costs.verification_lookups(cfg, tmp_path)
    part(v, VERIFICATION, "platform.verification")
    assert (v["certificates"], v["lookups"], v["valid_fraction"]) == (300, 60, 1.0)
    rows = [r[1] for r in report.platform({"quiz": "skipped", "certificate": "skipped", "verification": v,
                                           "arrival": "skipped", "pages": "skipped", "load": "skipped"})]
    assert "verification lookups/s, first look-ups of rows without the check (old rows)" in rows
    assert "verification lookups/s, the same IDs again" in rows
