"""The sharding lab: each rank's ledger against the lessons' formula, and the same weights."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import labs.sharding.zero  # noqa: F401 - imported here so that forked ranks inherit it (FSDP, DDP)
from app import calculators
from labs.launch import run_lab
from labs.model import STRATEGIES, per_parameter, state_bytes, wire_factor
from labs.params import Run
from labs.sharding import lab as sharding
from labs.sharding.zero import held_bytes

ROOT = Path(__file__).resolve().parent.parent
# Small: 4 layers of 64 (16 640 parameters), two steps; 2 or 4 processes on 2 cores.
SMALL = sharding.Params(width=64, depth=4, steps=2)
WEIGHT_TOLERANCE = 1e-5  # fp32 Adam, two steps: the strategies sum the same gradients in other orders
# The collectives each strategy calls in one step, by kind and stage, in order.
STEP_COLLECTIVES = {
    "ddp": [("all_reduce", "backward")],
    "zero1": [("all_reduce", "backward"), ("broadcast", "step")],  # each owner broadcasts its parameters
    "zero2": [("reduce_scatter", "step"), ("all_gather", "step")],
    "zero3": [("all_gather", "forward"), ("all_gather", "backward"), ("reduce_scatter", "backward")],
}


@pytest.fixture(scope="module", params=[2, 4])
def result(request):
    outcome = run_lab(Run(world_size=request.param, timeout=240), SMALL)
    assert outcome.ok, outcome
    return json.loads(json.dumps(outcome.summary))  # as --json prints it


def test_the_json_is_shaped_as_the_issue_says(result):
    n = result["world_size"]
    assert set(result["strategies"]) == set(STRATEGIES)
    for s in result["strategies"].values():
        assert set(s) == {"ranks", "max_abs_diff_vs_ddp", "mean_abs_diff_vs_ddp", "step_collectives"}
        assert [r["rank"] for r in s["ranks"]] == list(range(n))
        for r in s["ranks"]:
            assert set(r) == {"rank", "measured", "predicted", "peak", "wire_bytes_per_step"}
            assert set(r["measured"]) == set(r["predicted"]) == {"params", "grads", "optimizer"}
            assert r["peak"] is None  # CPU: no allocator counts every byte


def test_every_measured_figure_is_within_ten_percent_of_its_prediction(result):
    for name, s in result["strategies"].items():
        for r in s["ranks"]:
            for part, predicted in r["predicted"].items():
                assert r["measured"][part] == pytest.approx(predicted, rel=0.10), (name, r["rank"], part)
    assert result["within_ledger_tolerance"] and max(result["ledger_error"].values()) <= 0.10


def test_each_stage_holds_less_than_the_last_on_every_rank(result):
    held = {name: [sum(r["measured"].values()) for r in s["ranks"]]
            for name, s in result["strategies"].items()}
    for rank in range(result["world_size"]):
        assert held["ddp"][rank] > held["zero1"][rank] > held["zero2"][rank] > held["zero3"][rank]
    assert result["ordered"] is True


def test_the_four_strategies_reach_the_same_weights(result):
    assert result["tolerance"] == WEIGHT_TOLERANCE
    for name, s in result["strategies"].items():
        assert s["max_abs_diff_vs_ddp"] <= WEIGHT_TOLERANCE, name
    assert result["strategies"]["ddp"]["max_abs_diff_vs_ddp"] == 0.0
    # ... and the weights did move: the tolerance is far below what training changed
    assert result["max_abs_update_ddp"] > 100 * WEIGHT_TOLERANCE
    assert result["equal_weights"] is True


def test_wire_bytes_follow_the_ring_model(result):
    n, params_bytes = result["world_size"], result["model"]["bytes"]
    wire = {name: s["ranks"][0]["wire_bytes_per_step"] for name, s in result["strategies"].items()}
    for name in STRATEGIES:
        assert wire[name] == pytest.approx(wire_factor(name, n) * params_bytes, rel=0.10), name
    assert wire["zero2"] == pytest.approx(wire["ddp"], rel=0.05)  # reduce-scatter + all-gather = all-reduce
    assert wire["zero3"] == pytest.approx(1.5 * wire["ddp"], rel=0.10)


def test_each_strategy_records_the_collectives_of_its_step(result):
    for name, s in result["strategies"].items():
        record = s["step_collectives"]
        assert [(e["kind"], e["stage"]) for e in record] == STEP_COLLECTIVES[name], name
        assert all(e["calls"] >= 1 and e["dtype"] == "float32" for e in record), record
        # The record is what the wire count counted, entry by entry (each rounded down to a byte)
        assert sum(e["bytes"] for e in record) == pytest.approx(s["ranks"][0]["wire_bytes_per_step"],
                                                                abs=len(record))
    zero3 = result["strategies"]["zero3"]["step_collectives"]
    assert zero3[0]["calls"] == SMALL.depth  # FSDP2 gathers layer by layer: one all-gather per layer
    assert result["wire_dtypes"] == ["float32"]


def test_the_text_says_what_the_json_says(result):
    text = sharding.format_text(result)
    assert all(f"[{name}]" in text for name in STRATEGIES)
    assert "within 10% of its prediction: True" in text


@pytest.fixture(scope="module")
def bf16() -> dict:
    params = sharding.Params(width=64, depth=4, steps=2, precision="bf16-mixed")
    outcome = run_lab(Run(world_size=2, timeout=240), params)
    assert outcome.ok, outcome
    return json.loads(json.dumps(outcome.summary))


def test_bf16_mixed_holds_two_two_and_twelve_bytes_per_parameter_as_predicted(bf16):
    total = bf16["model"]["parameters"]
    assert bf16["precision"] == "bf16-mixed" and bf16["model"]["bytes"] == 2 * total
    ddp = bf16["strategies"]["ddp"]["ranks"][0]["predicted"]
    assert ddp == {"params": 2 * total, "grads": 2 * total, "optimizer": 12 * total}  # master copy + Adam
    for name, s in bf16["strategies"].items():
        for r in s["ranks"]:
            for part, predicted in r["predicted"].items():
                assert r["measured"][part] == pytest.approx(predicted, rel=0.10), (name, r["rank"], part)
    held = {name: [sum(r["measured"].values()) for r in s["ranks"]] for name, s in bf16["strategies"].items()}
    for rank in range(2):
        assert held["ddp"][rank] > held["zero1"][rank] > held["zero2"][rank] > held["zero3"][rank]
    assert bf16["within_ledger_tolerance"] and bf16["ordered"] is True


def test_bf16_mixed_sends_bf16_and_ends_near_ddp(bf16):
    assert bf16["wire_dtypes"] == ["bfloat16"]  # gloo reduces and gathers bf16 on CPU: nothing goes as fp32
    for name, s in bf16["strategies"].items():
        assert [(e["kind"], e["stage"]) for e in s["step_collectives"]] == STEP_COLLECTIVES[name]
        wire = s["ranks"][0]["wire_bytes_per_step"]
        assert wire == pytest.approx(wire_factor(name, 2) * 2 * bf16["model"]["parameters"], rel=0.10), name
    # The mean distance from DDP, within a tenth of how far DDP moved the weights on average
    assert bf16["weight_check"] == "mean_relative" and bf16["tolerance"] == sharding.BF16_TOLERANCE
    assert bf16["mean_abs_update_ddp"] > 0 and bf16["equal_weights"] is True
    for s in bf16["strategies"].values():
        assert s["mean_abs_diff_vs_ddp"] <= sharding.BF16_TOLERANCE * bf16["mean_abs_update_ddp"]
    assert "bf16-mixed" in sharding.format_text(bf16)


def test_one_formula_for_the_lessons_and_the_lab():
    # The lessons' numbers: 16 bytes per parameter, then 4 + 4 + 8/N, 4 + 12/N, 16/N.
    assert sum(state_bytes("ddp", 1, world_size=8).values()) == 16
    assert sum(state_bytes("zero1", 1, world_size=8).values()) == 4 + 4 + 8 / 8
    assert sum(state_bytes("zero2", 1, world_size=8).values()) == 4 + 12 / 8
    assert sum(state_bytes("zero3", 1, world_size=8).values()) == 16 / 8
    assert state_bytes("zero1", 100, owned=30)["optimizer"] == 240  # an uneven split: the real share
    for name in STRATEGIES:
        mem = calculators.memory_per_device(7e9, "fp32", "adam", strategy=name, world_size=8)
        assert mem.total == sum(state_bytes(name, 7e9, world_size=8).values())
    with pytest.raises(ValueError):
        state_bytes("zero4", 1)
    # Mixed precision: 2 + 2 + 12, the same formula for the calculator and the lab
    assert per_parameter("bf16-mixed") == {"weights": 2, "grads": 2, "optimizer": 12}
    for name in STRATEGIES:
        mem = calculators.memory_per_device(7e9, "bf16-mixed", "adam", strategy=name, world_size=8)
        assert mem.total == pytest.approx(sum(state_bytes(name, 7e9, world_size=8,
                                                          **per_parameter("bf16-mixed")).values()))
    with pytest.raises(ValueError):
        per_parameter("fp8")


def test_held_bytes_counts_a_storage_once():
    flat = torch.zeros(100)
    a, b = flat[:60], flat[40:]  # overlapping views of one storage: 100 elements in all
    assert held_bytes({"params": [a, b, flat[10:20]]}) == {"params": 400}
    grad = torch.zeros(10)
    assert held_bytes({"params": [flat], "grads": [grad, flat[:5]]}) == {"params": 400, "grads": 40}
    assert held_bytes({"optimizer": [torch.zeros(4, 4).t()]}) == {"optimizer": 64}


def test_params_and_cli():
    with pytest.raises(ValueError):
        sharding.Params(lr=0)
    with pytest.raises(ValueError):
        sharding.Params(width=2)
    with pytest.raises(ValueError):
        sharding.Params(precision="fp16")
    assert sharding.Params().weight_tolerance == 1e-5
    assert sharding.Params(precision="bf16-mixed").weight_tolerance == sharding.BF16_TOLERANCE
    assert sharding.Params(precision="bf16-mixed", tolerance=0.2).weight_tolerance == 0.2
    assert sharding.Params().parameters == 8 * (384 * 384 + 384)


def test_the_lab_module_imports_no_torch():
    code = "import sys, labs.sharding.lab; print([m for m in sys.modules if m.split('.')[0] == 'torch'])"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_peak_is_the_allocators():
    outcome = run_lab(Run(world_size=1, backend="nccl", timeout=240), SMALL)
    assert outcome.ok, outcome
    for name, s in outcome.summary["strategies"].items():
        row = s["ranks"][0]
        # The allocator's peak during the step holds at least the state kept after it.
        assert isinstance(row["peak"], int) and row["peak"] >= sum(row["measured"].values()), name
    assert outcome.summary["within_ledger_tolerance"] and outcome.summary["equal_weights"]
