"""The benchmark's sweep sizes (no processes) and the shape of its JSON (2 gloo ranks).

The bandwidth arithmetic itself is tested in test_labs_model.py.
"""

from __future__ import annotations

import json
import math

import pytest

from labs.bench import lab as bench
from labs.launch import run_lab
from labs.params import Run


def test_sweep_sizes_are_geometric_and_inclusive():
    assert bench.sweep_sizes(1024, 64 << 20, 4) == [1024 * 4**k for k in range(9)]
    assert bench.sweep_sizes(1 << 20, 1 << 20, 2) == [1 << 20]
    with pytest.raises(ValueError):
        bench.sweep_sizes(0, 10, 2)
    with pytest.raises(ValueError):
        bench.sweep_sizes(16, 8, 2)


def test_params_validate():
    with pytest.raises(ValueError):
        bench.Params(impls=["ring", "tree"])
    with pytest.raises(ValueError):
        bench.Params(dtype="int64", op="avg")
    with pytest.raises(ValueError):
        bench.Params(iters=0)


def test_bench_lab_json_shape_and_arithmetic():
    params = bench.Params(min_bytes=1024, max_bytes=16384, factor=4, warmup=1, iters=2)
    result = run_lab(Run(world_size=2, timeout=120), params)
    assert result.ok, result
    doc = json.loads(json.dumps(result.to_dict()))  # JSON all the way down
    summary = doc["summary"]
    assert summary["world_size"] == 2
    assert summary["sizes"] == [1024, 4096, 16384]
    rows = summary["rows"]
    assert len(rows) == 3 * len(bench.IMPLS)
    assert {r["impl"] for r in rows} == set(bench.IMPLS)
    keys = {"size", "count", "dtype", "op", "impl", "collective", "time_us", "algbw", "busbw",
            "wrong"}
    for row in rows:
        assert keys <= row.keys()
        assert row["wrong"] == 0, row
        assert row["size"] == row["count"] * 4
        t = row["time_us"] / 1e6
        assert row["algbw"] == pytest.approx(row["size"] / t / 1e9)
        factor = 1.0 if row["collective"] == "all_reduce" else 0.5  # n = 2
        assert row["busbw"] == pytest.approx(row["algbw"] * factor)
    for impl, fit in summary["fit"].items():
        assert fit is not None, impl
        assert {"alpha_s", "bandwidth_Bps", "rms_rel_err"} <= fit.keys()
        assert math.isfinite(fit["alpha_s"])
    assert [c["size"] for c in summary["ring_vs_all_reduce"]] == summary["sizes"]
    # The pipelined ring is in the default sweep, compared the same way.
    assert "ring_pipelined" in bench.IMPLS
    versus = summary["pipelined_vs_all_reduce"]
    assert [c["size"] for c in versus] == summary["sizes"]
    for c in versus:
        mine = next(r for r in rows if r["impl"] == "ring_pipelined" and r["size"] == c["size"])
        assert c["ring_pipelined_busbw"] == mine["busbw"]
        assert c["ratio"] == pytest.approx(mine["busbw"] / c["all_reduce_busbw"])
    text = bench.format_text(summary)
    assert "busbw" in text and "alpha" in text
    assert "pipelined ring vs dist.all_reduce" in text


def test_bench_counts_wrong_results_for_other_dtypes():
    params = bench.Params(min_bytes=4096, max_bytes=4096, factor=2, warmup=0, iters=1,
                          dtype="bfloat16", op="avg",
                          impls=["ring", "ring_pipelined", "naive", "all_reduce"])
    result = run_lab(Run(world_size=3, timeout=120), params)
    assert result.ok, result
    assert all(r["wrong"] == 0 for r in result.summary["rows"])
    assert result.summary["fit"]["ring"] is None  # a single size: nothing to fit


def test_sweep_without_the_builtin_has_no_comparison():
    params = bench.Params(min_bytes=4096, max_bytes=4096, factor=2, warmup=0, iters=1,
                          impls=["ring_pipelined"])
    result = run_lab(Run(world_size=2, timeout=120), params)
    assert result.ok, result
    assert [r["impl"] for r in result.summary["rows"]] == ["ring_pipelined"]
    assert result.summary["rows"][0]["wrong"] == 0
    assert result.summary["pipelined_vs_all_reduce"] == []
    assert result.summary["ring_vs_all_reduce"] == []
