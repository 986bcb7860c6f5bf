"""The DDP lab: equivalence with one big-batch process, and the facts each section shows."""

from __future__ import annotations

import ast
import builtins
import inspect
import json

import pytest
import torch

from labs.ddp import lab as ddp
from labs.ddp import rank as ddp_rank
from labs.ddp import setup as ddp_setup
from labs.launch import run_lab
from labs.params import Run


def test_equivalence_with_one_process_on_the_global_batch():
    params = ddp.Params(sections=["equivalence"], steps=8)
    result = run_lab(Run(world_size=2, timeout=120), params)
    assert result.ok, result
    eq = result.summary["sections"]["equivalence"]
    assert eq["global_batch"] == 2 * params.batch
    assert eq["equivalent"], eq["max_abs_diff_vs_single_process"]
    assert eq["max_abs_diff_vs_single_process"] <= params.tolerance
    assert eq["ranks_identical"] and eq["max_abs_diff_between_ranks"] == 0.0
    assert eq["losses"] == pytest.approx(eq["single_process_losses"], abs=1e-5)
    assert eq["losses"][-1] < eq["losses"][0]  # it learns


def test_every_section_on_three_ranks():
    params = ddp.Params(steps=4, warmup=1, accumulation=2, bucket_caps_mb=[0.01, 25.0],
                        scaling_world_sizes=[1, 2, 3], overlap_hidden=64, overlap_depth=3, overlap_batch=32,
                        timeline_steps=2)
    result = run_lab(Run(world_size=3, timeout=180), params)
    assert result.ok, result
    s = json.loads(json.dumps(result.summary))["sections"]
    assert set(s) == set(ddp.SECTIONS)

    assert s["equivalence"]["equivalent"] and s["equivalence"]["ranks_identical"]

    sampler = s["sampler"]
    # 2048 samples over 3 ranks: DistributedSampler pads to 3 x 683 by repeating one
    assert sampler["shards_disjoint"] is False and sampler["padded"] == 1
    assert sampler["samples_covered"] == params.samples
    assert sampler["same_order_next_epoch_without_set_epoch"] is True
    assert sampler["same_order_next_epoch_with_set_epoch"] is False
    assert sampler["positions_unchanged_epoch0_to_1"]["without_set_epoch"] == 1.0

    b = s["breakdown"]
    for kind in ("naive", "ddp"):
        assert set(b[kind]) >= {"forward", "backward", "exposed_comm", "optimizer", "total"}
        assert all(v >= 0 for v in b[kind].values())
    assert b["max_abs_diff_naive_vs_ddp_weights"] < 1e-5  # same maths, different plumbing
    # The overlap model, not the lab's small MLP: the breakdown's, the buckets' and the timeline's.
    assert (b["hidden"], b["depth"], b["batch_per_rank"]) == (64, 3, 32) == (
        s["timeline"]["hidden"], s["timeline"]["depth"], s["timeline"]["batch_per_rank"])
    assert b["gradient_bytes"] == s["timeline"]["gradient_bytes"] != result.summary["model"]["gradient_bytes"]

    rows = s["buckets"]["rows"]
    assert [r["bucket_cap_mb"] for r in rows] == [0.01, 25.0]
    assert rows[0]["allreduce_calls_per_step"] > rows[1]["allreduce_calls_per_step"] == 1
    assert all(r["bytes_per_step"] == b["gradient_bytes"] for r in rows)

    ns = s["no_sync"]
    assert ns["no_sync"]["allreduce_calls_per_optimizer_step"] == 1
    assert ns["sync_every_micro_batch"]["allreduce_calls_per_optimizer_step"] == 2
    assert ns["max_abs_grad_diff"] < 1e-6

    fp = s["fp16"]
    assert fp["bytes_ratio"] == 0.5
    assert fp["fp32"]["payload_bytes_per_step"] == result.summary["model"]["gradient_bytes"]
    assert abs(fp["fp16"]["final_loss"] - fp["fp32"]["final_loss"]) < 1e-2

    scaling = s["scaling"]["rows"]
    assert [r["world_size"] for r in scaling] == [1, 2, 3]
    assert scaling[0]["efficiency"] == pytest.approx(1.0)
    assert all(r["samples_per_s"] > 0 for r in scaling)
    tl = s["timeline"]["variants"]
    assert [r["rank"] for r in tl["ddp"]["ranks"]] == [0, 1, 2]
    assert tl["naive"]["overlap"] == 0.0 and tl["naive"]["allreduce_calls"] == 2 * (params.overlap_depth + 1)
    # The run timed dist.all_reduce alone and fitted alpha and B: the page's step model needs no benchmark.
    fit = s["timeline"]["fit"]
    assert fit["sizes"][0] == 4096 and fit["sizes"][-1] >= b["gradient_bytes"] and len(fit["time_us"]) == len(fit["sizes"])
    assert fit["points"] == len(fit["sizes"]) and fit["steps"] == 4  # 2(n-1) on 3 ranks
    assert {c["variant"] for c in s["timeline"]["caps"]} == set(tl) - {"naive"}
    assert "equivalence" in ddp.format_text(result.summary) and "[timeline]" in ddp.format_text(result.summary)


def test_params_and_checks():
    with pytest.raises(ValueError):
        ddp.Params(sections=["everything"])
    with pytest.raises(ValueError):
        ddp.Params(batch=0)
    with pytest.raises(ValueError):
        ddp.check(ddp.Params(samples=10, batch=8), world_size=2)


def test_data_and_model_are_reproducible():
    p = ddp.Params()
    x1, y1 = ddp_setup.make_dataset(p)
    x2, y2 = ddp_setup.make_dataset(p)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert set(y1.tolist()) == set(range(p.classes))
    m1, m2 = ddp_setup.make_model(p), ddp_setup.make_model(p)
    assert all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters(), strict=True))


def free_names(func) -> set[str]:
    """Names a function reads that it does not define itself (nor are builtins)."""
    tree = ast.parse(inspect.getsource(func))
    fn = tree.body[0]
    bound = {a.arg for a in ast.walk(fn) if isinstance(a, ast.arg)}
    bound |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)
              and isinstance(n.ctx, ast.Store)}
    bound |= {n.name for n in ast.walk(fn) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    used = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return used - bound - set(dir(builtins))


@pytest.mark.parametrize("name", ["naive_sync_gradients", "ddp_train_step"])
def test_lesson_functions_stand_alone(name):
    """Lessons embed these functions' source: it needs nothing but torch's usual imports."""
    func = getattr(ddp_rank, name)
    assert ast.get_docstring(ast.parse(inspect.getsource(func)).body[0])
    assert free_names(func) <= {"dist", "F", "torch"}
