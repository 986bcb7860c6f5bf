"""The compression lab: measured bytes against each family's formula, error feedback's effect, gloo's PowerSGD."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import labs.compression.rank  # noqa: F401 - imported here so that forked ranks inherit it (DDP, the hooks)
from labs import reports
from labs.compression import lab as compression
from labs.launch import run_lab
from labs.model import mean_ci95, powersgd_elements, ring_sent, topk_bytes
from labs.params import Run
from tests.procs import gone

pytestmark = pytest.mark.slow  # lab ranks in nearly every test

ROOT = Path(__file__).resolve().parent.parent
TORCHRUN = Path(sys.executable).with_name("torchrun")
# Every strategy, two seeds, long enough for error feedback to show (about 1,600 steps on 2 ranks).
TWO = compression.Params(steps=100, seeds=2)
# Four ranks, several buckets (8 KB each): PowerSGD through the serial chain, top-k's k per bucket.
FOUR = compression.Params(steps=12, seeds=1, bucket_cap_kb=8,
                          strategies=["fp16", "powersgd_r1", "powersgd_r4", "topk_ef"])


def summary_of(outcome) -> reports.CompressionSummary:
    assert outcome.ok, outcome
    return reports.read("compression", json.loads(json.dumps(outcome.to_dict()))).summary  # as the worker stores it


@pytest.fixture(scope="module")
def two():
    return summary_of(run_lab(Run(world_size=2, timeout=400, hang_timeout=120), TWO))


@pytest.fixture(scope="module")
def four():
    return summary_of(run_lab(Run(world_size=4, timeout=400, hang_timeout=120), FOUR))


def test_every_strategy_ran_with_fp32_as_the_reference(two, four):
    assert list(two.strategies) == list(compression.STRATEGIES)
    assert list(four.strategies) == ["fp32", *FOUR.strategies]  # fp32 runs though not asked for
    assert two.strategies["fp32"].gap is None and two.seeds == [0, 1]
    assert len(two.strategies["topk"].curve) == len(two.curve_steps) == 1 + 100 // 10


@pytest.mark.parametrize("which", ["two", "four"])
def test_every_measured_byte_count_is_its_formula_within_one_percent(which, request):
    s = request.getfixturevalue(which)
    for name, st in s.strategies.items():
        assert st.bytes_per_step == pytest.approx(st.formula_bytes, rel=0.01), name
        assert st.formula_error <= 0.01 and st.ranks_sent_alike, name
    assert s.within_formula


def test_the_formulas_are_the_lessons(two):
    import labs.compression.rank as rank

    st, shapes, total = two.strategies, TWO.shapes, two.parameters
    assert shapes == [list(q.shape) for q in rank.make_model(TWO, 0).parameters()]  # the formula's model is the real one
    assert st["fp32"].bytes_per_step == 4 * total and two.gradient_bytes == 4 * total
    assert st["fp16"].bytes_per_step == st["bf16"].bytes_per_step == 2 * total  # half
    for r in (1, 2, 4):  # (m + n) r per matrix, the biases as they are, 4 bytes each
        assert st[f"powersgd_r{r}"].bytes_per_step == 4 * powersgd_elements(shapes, r)
    assert 4 * powersgd_elements(shapes, 1) == 4 * ((64 + 32) + 64 + (64 + 64) + 64 + (10 + 64) + 10)
    assert st["topk"].bytes_per_step == st["topk_ef"].bytes_per_step == topk_bytes([total], TWO.density)
    assert st["topk"].bytes_per_step == 8 * -(-total // 100)  # k = ceil(1% of P) values and indices
    assert st["fp16"].dtypes == ["float16"] and st["bf16"].dtypes == ["bfloat16"]
    assert st["topk_ef"].dtypes == ["int32"] and set(st["topk_ef"].by_kind) == {"all_gather"}
    assert set(st["powersgd_r2"].by_kind) == {"all_reduce"}
    assert st["powersgd_r1"].dense_steps == 2 and st["topk"].dense_steps == 0  # torch's minimum start


def test_all_gather_costs_grow_with_the_ranks_and_all_reduce_does_not(two, four):
    for s in (two, four):
        n = s.world_size
        top, half = s.strategies["topk_ef"], s.strategies["fp16"]
        assert top.sent_per_step == pytest.approx((n - 1) * top.bytes_per_step)
        assert half.sent_per_step == pytest.approx(2 * (n - 1) / n * half.bytes_per_step)
    assert ring_sent({"all_gather": 100}, 8) == pytest.approx(700)


def test_several_buckets_on_gloo_run_powersgd_serially_and_top_k_per_bucket(four):
    assert four.buckets > 1 and four.powersgd_chain == "serial"
    top = four.strategies["topk_ef"]
    assert top.bytes_per_step > topk_bytes([four.parameters], FOUR.density)  # k rounded up in each bucket
    assert all(st.replicas_equal for st in four.strategies.values())


def test_the_replicas_stay_identical_under_every_hook(two):
    assert all(st.replicas_equal for st in two.strategies.values())


def test_error_feedback_recovers_what_top_k_loses(two):
    plain, fed = two.strategies["topk"], two.strategies["topk_ef"]
    for seed, (a, b) in enumerate(zip(plain.finals, fed.finals, strict=True)):
        assert b < a - 0.2, (seed, a, b)  # measured: about 2.0 against 0.9 at 100 steps
    assert fed.gap.mean < plain.gap.mean
    half = two.strategies["fp16"]  # the same bytes halved, nearly the same loss
    assert abs(half.gap.mean) < 0.01 and half.gap.half_width is not None


def test_the_pareto_front_and_the_gap_statistics(two):
    points = {n: (st.sent_per_step, st.final.median) for n, st in two.strategies.items()}
    front = compression.pareto(points)
    assert front == two.pareto and "topk_ef" in front and "topk" not in front  # same bytes, worse loss
    assert [points[n][0] for n in front] == sorted(points[n][0] for n in front)
    mean, half = mean_ci95([1.0, 2.0, 3.0])
    assert mean == 2.0 and half == pytest.approx(4.303 / 3 ** 0.5)
    assert mean_ci95([0.5]) == (0.5, None)


def test_the_text_says_what_the_summary_says(two):
    text = compression.format_text(two.model_dump())
    assert "within 1% of its formula: True" in text and "same weights: True" in text
    assert all(name in text for name in compression.STRATEGIES)


def test_bad_parameters_are_refused_with_a_reason():
    for bad in ({"density": 0}, {"lr": -1}, {"momentum": 1.0}, {"bucket_cap_kb": 0}, {"strategies": ["zip"]},
                {"seeds": 0}):
        with pytest.raises(ValueError):
            compression.Params(**bad)


@pytest.mark.skipif(not TORCHRUN.exists() and not shutil.which("torchrun"), reason="torchrun not installed")
def test_torchrun_runs_the_same_lab(tmp_path):
    torchrun = str(TORCHRUN) if TORCHRUN.exists() else shutil.which("torchrun")
    out, args = tmp_path / "torchrun.json", ["--steps", "10", "--seeds", "1", "--strategies", "fp16", "topk_ef"]
    proc = subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2", "-m", "labs.compression", *args,
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "within 1% of its formula: True" in proc.stdout  # rank 0 printed the table
    via = reports.read("compression", json.loads(out.read_text())).summary
    ours = summary_of(run_lab(Run(world_size=2, timeout=240),
                              compression.Params(steps=10, seeds=1, strategies=["fp16", "topk_ef"])))
    for name in ("fp32", "fp16", "topk_ef"):  # the same seeds, batches and hooks: the same bytes and losses
        assert via.strategies[name].bytes_per_step == ours.strategies[name].bytes_per_step
        assert via.strategies[name].finals == pytest.approx(ours.strategies[name].finals, abs=1e-6)


def test_a_crashed_rank_is_named_and_a_cancelled_run_leaves_no_process():
    crashed = run_lab(Run(world_size=2, fail_rank=1, fail_at_step=3, fail_mode="crash", timeout=240, hang_timeout=120),
                      compression.Params(steps=40, seeds=1, strategies=["topk_ef"]))
    assert not crashed.ok and crashed.kind == "crash" and crashed.rank == 1, crashed
    assert all(gone(pid) for pid in crashed.pids)
    cancel = threading.Event()

    def on_event(event: dict) -> None:
        if event.get("kind") == "progress" and (event.get("step") or 0) >= 2:
            cancel.set()  # as the worker does when a learner presses Cancel

    stopped = run_lab(Run(world_size=2, timeout=240, hang_timeout=120), compression.Params(steps=2000, seeds=3),
                      cancel=cancel, on_event=on_event)
    assert not stopped.ok and stopped.kind == "cancelled", stopped
    assert stopped.pids and all(gone(pid) for pid in stopped.pids)  # the lab writes no file of its own
