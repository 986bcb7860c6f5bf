"""The shared bandwidth model: nccl-tests' busbw, the alpha-beta ring and its fit.

No processes: plain arithmetic, checked against hand-worked numbers, and the
lessons' calculators checked to be the very same model.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from app import calculators as calc
from labs import model


@pytest.mark.parametrize(("collective", "n", "factor"), [
    ("all_reduce", 1, 0.0), ("all_reduce", 2, 1.0), ("all_reduce", 4, 1.5),
    ("all_reduce", 8, 1.75), ("reduce_scatter", 4, 0.75), ("all_gather", 2, 0.5),
])
def test_busbw_uses_the_nccl_tests_factors(collective, n, factor):
    size, seconds = 64 << 20, 0.125
    assert model.algbw(size, seconds) == pytest.approx(size / seconds)
    assert model.bus_factor(collective, n) == pytest.approx(factor)
    assert model.busbw(size, seconds, n, collective) == pytest.approx(size / seconds * factor)


def test_unknown_collectives_are_refused():
    for fn in (model.bus_factor, model.ring_steps):
        with pytest.raises(ValueError, match="broadcast"):
            fn("broadcast", 4)


@pytest.mark.parametrize(("collective", "n", "steps"), [
    ("all_reduce", 2, 2), ("all_reduce", 8, 14), ("reduce_scatter", 8, 7), ("all_gather", 4, 3),
])
def test_ring_time_by_hand(collective, n, steps):
    # 1 MB at 1 GB/s with 10 us per step: steps * 10 us + factor * 1 ms.
    expected = steps * 10e-6 + model.bus_factor(collective, n) * 1e-3
    assert model.ring_steps(collective, n) == steps
    assert model.ring_time(n, 1e6, 10e-6, 1e9, collective) == pytest.approx(expected)


def test_one_rank_costs_nothing():
    assert model.ring_time(1, 1e9, 1.0, 1.0) == 0.0
    assert model.ring_time(0, 1e9, 1.0, 1.0) == 0.0


def test_the_calculators_use_this_model():
    """One model: the lessons' estimate and the lab's busbw are the same functions."""
    assert calc.busbw is model.busbw
    assert calc.ring_allreduce_time is model.ring_time
    # A link modelled by the lessons, measured as the bench would: its busbw
    # approaches B for a large message, as the lessons claim.
    alpha, bandwidth = calc.LINKS["nvlink4"]
    t = calc.ring_allreduce_time(8, 1e10, alpha, bandwidth)
    assert model.busbw(1e10, t, 8) == pytest.approx(bandwidth, rel=1e-2)


@pytest.mark.parametrize("collective", ["all_reduce", "reduce_scatter"])
@pytest.mark.parametrize("n", [2, 4, 8])
def test_fit_recovers_alpha_and_bandwidth(n, collective):
    alpha, bandwidth = 35e-6, 2.5e9
    sizes = [1024 * 2**k for k in range(19)]
    times = [model.ring_time(n, s, alpha, bandwidth, collective) for s in sizes]
    fit = model.fit_alpha_beta(sizes, times, n, collective)
    assert fit["alpha_s"] == pytest.approx(alpha, rel=1e-6)
    assert fit["bandwidth_Bps"] == pytest.approx(bandwidth, rel=1e-6)
    assert fit["bandwidth_GBps"] == pytest.approx(bandwidth / 1e9, rel=1e-6)
    assert fit["rms_rel_err"] < 1e-9
    assert fit["steps"] == (2 * (n - 1) if collective == "all_reduce" else n - 1)
    assert fit["points"] == len(sizes)


def test_fit_tolerates_noise_and_refuses_degenerate_input():
    alpha, bandwidth, n = 100e-6, 0.8e9, 4
    sizes = [1024 * 4**k for k in range(9)]
    noise = [1.05, 0.96, 1.02, 0.98, 1.04, 0.97, 1.01, 0.99, 1.03]
    times = [model.ring_time(n, s, alpha, bandwidth) * e for s, e in zip(sizes, noise, strict=True)]
    fit = model.fit_alpha_beta(sizes, times, n)
    assert fit["alpha_s"] == pytest.approx(alpha, rel=0.15)
    assert fit["bandwidth_Bps"] == pytest.approx(bandwidth, rel=0.1)
    assert 0 < fit["rms_rel_err"] < 0.1
    assert model.fit_alpha_beta(sizes, times, 1) is None  # one rank: no communication
    assert model.fit_alpha_beta(sizes[:1], times[:1], n) is None
    assert model.fit_alpha_beta(sizes, times[:-1], n) is None
    assert model.fit_alpha_beta([4096, 4096], [1e-3, 1e-3], n) is None  # one size twice


def test_the_calculators_stay_cheap_to_import():
    """The lesson pages import the model through app.calculators: no torch behind it."""
    code = "import sys, app.calculators; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert out.strip() == "False"
