"""Lab readouts that are true (issue #22): each figure named for what it measures.

- DDP: what bucketing saves (fewer all-reduce calls) and what overlap hides
  (behind backward, so never more than backward) are two figures; the
  bucket-count difference is never called overlap.
- Ring: the alpha-beta line comes from this machine's benchmark fit, or is
  labelled as default values; a line more than 3x off carries the factor.
- Benchmark and ring default to 3 ranks; on 2 the page says why the naive
  and the chunked ring move the same bytes.
- Every result opens with "what to look for" and states its noise.

Real lab runs (2-3 gloo processes, tiny tensors) feed the page; no timing is
asserted, only how the page names and bounds what was measured.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from academy import i18n
from academy.db import session_scope
from academy.labruns import pages as labruns
from academy.models import LabRun
from app import calculators
from labs import model
from labs.__main__ import _parser
from labs.context import world_size_default
from labs.launch import run_lab
from labs.request import Request
from tests.apptest import open_page

ROOT = Path(__file__).resolve().parent.parent


def _record() -> None:
    """One real result per lab (own process: the ranks fork fast there)."""
    runs = {"ring": ("ring", {"size": 4096, "repeats": 3}, 3),
            "ring2": ("ring", {"size": 4096, "algo": "naive", "repeats": 2}, 2),
            "ring1": ("ring", {"size": 4096, "repeats": 2}, 1),
            "bench": ("bench", {"min_bytes": 1024, "max_bytes": 16384, "iters": 3,
                                "impls": ["ring", "naive", "all_reduce"]}, 3),
            "bench2": ("bench", {"min_bytes": 1024, "max_bytes": 4096, "iters": 2}, 2),
            "ddp": ("ddp", {"steps": 3, "warmup": 1, "sections": ["breakdown", "buckets"],
                            "bucket_caps_mb": [0.01, 25.0], "overlap_depth": 3, "overlap_hidden": 128,
                            "overlap_batch": 64}, 2)}
    requests = {name: Request.checked(lab, {**p, "world_size": n}) for name, (lab, p, n) in runs.items()}
    print(json.dumps({name: run_lab(r.run, r.params).to_dict() for name, r in requests.items()}))


@pytest.fixture(scope="module")
def results() -> dict[str, dict]:
    proc = subprocess.run([sys.executable, "-c", "from tests.test_labs_readouts import _record; _record()"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1], parse_constant=lambda _name: None)


def store(result: dict, *, worker: str = "labhost:1", lab: str | None = None) -> int:
    with session_scope() as s:
        run = LabRun(lab=lab or result["lab"], params=result.get("params", {}), machine=result.get("machine", {}),
                     status="done", result=result, worker=worker)
        s.add(run)
        s.flush()
        return run.id


def shown(run_id: int, lang: str = "en"):
    at = open_page("labs", lang, state={"lab_run_id": run_id})
    assert not at.exception, at.exception
    return at


def texts(at) -> list[str]:
    return [e.value for kind in ("markdown", "caption", "success", "info", "warning", "error")
            for e in at.get(kind)]


def step_chart(at) -> dict:
    """The ring lab's chart of measured steps against the model line."""
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    return next(s for s in specs if any(tr.get("type") == "bar" for tr in s["data"])
                and any(tr.get("type") == "scatter" for tr in s["data"]))


# --------------------------------------------------------------------------
# DDP: bucketing and overlap, two figures


def test_ddp_breakdown_keeps_bucketing_and_overlap_apart(results):
    b = results["ddp"]["summary"]["sections"]["breakdown"]
    assert "comm_hidden_by_overlap" not in b  # the old figure: bucketing and overlap mixed
    saving, hidden = b["bucketing_saving"], b["overlap_hidden"]
    # Bucketing: the MLP's 8 tensors, one call each, against DDP's buckets.
    assert saving["calls_before"] == b["tensors"] == b["naive"]["allreduce_calls"] == 8
    assert 1 < saving["calls_after"] == b["buckets"] == b["bucketed"]["allreduce_calls"] < 8
    # Overlap: hidden behind backward, so never more than backward, step by step.
    assert 0 <= hidden["ms"]["min"] <= hidden["ms"]["median"] <= hidden["ms"]["max"]
    assert hidden["ms"]["max"] <= hidden["backward_ms"]["max"]
    for figure in (saving["ms"], hidden["ms"]):
        assert figure["k"] == 3 and figure["q1"] <= figure["median"] <= figure["q3"]
    assert b["max_abs_diff_naive_vs_ddp_weights"] < 1e-5


@pytest.mark.usefixtures("app_db")
def test_ddp_page_never_labels_the_bucketing_saving_as_overlap(results):
    result = results["ddp"]
    b = result["summary"]["sections"]["breakdown"]
    # A learner on a machine where bucketing saves much more than backward lasts.
    b["bucketing_saving"]["ms"].update(median=9.44, q1=9.0, q3=10.0)
    b["overlap_hidden"]["ms"].update(median=0.03, q1=0.01, q3=0.05)
    b["overlap_hidden"]["backward_ms"]["median"] = 0.4
    at = shown(store(result))
    shown_texts = texts(at)
    overlap_label, bucket_label = "Hidden by overlap", "Saved by bucketing"
    overlap = [x for x in shown_texts if overlap_label.lower() in x.lower()]
    bucketing = [x for x in shown_texts if bucket_label.lower() in x.lower()]
    assert len(overlap) == 1 and len(bucketing) == 1, shown_texts
    # The overlap figure is the overlap number, bounded by backward, never the bucket saving.
    assert "0.03 ms" in overlap[0] and "0.40 ms" in overlap[0] and "9.44" not in overlap[0]
    assert "9.44 ms" in bucketing[0] and "from 8 all-reduce calls down to" in bucketing[0]
    assert "overlap" not in bucketing[0].lower()
    # No readout anywhere puts the bucket saving beside the word overlap.
    assert not [x for x in shown_texts if "9.44" in x and "overlap" in x.lower()]
    assert any(x.startswith("Why:") for x in shown_texts) and any("Why so little" in x for x in shown_texts)


@pytest.mark.usefixtures("app_db")
def test_an_old_ddp_result_shows_no_mislabelled_figure(results):
    result = json.loads(json.dumps(results["ddp"]))
    b = result["summary"]["sections"]["breakdown"]
    for key in ("bucketing_saving", "overlap_hidden", "bucketed"):
        b.pop(key)
    b["comm_hidden_by_overlap"] = 9.44
    at = shown(store(result))
    assert not [x for x in texts(at) if "9.44" in x or "9,44" in x]


# --------------------------------------------------------------------------
# Ring: the model line and its label


def _line(at) -> tuple[float, str]:
    """(median measured / median model, the model line's legend name) as drawn."""
    chart = step_chart(at)
    bars = next(tr for tr in chart["data"] if tr["type"] == "bar")
    line = next(tr for tr in chart["data"] if tr["type"] == "scatter")
    return model.gap(bars["y"], line["y"]), line["name"]


def with_steps(result: dict, seconds: float) -> dict:
    """The result with every step measured at ``seconds`` (what a loaded machine shows)."""
    result = json.loads(json.dumps(result))
    s = result["summary"]
    s["step_times"] = [{"median": seconds, "min": seconds / 2, "max": seconds * 2, "k": 3} for _ in s["step_times"]]
    return result


@pytest.mark.usefixtures("app_db")
@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_a_default_model_line_far_off_says_so_and_why(results, lang):
    # 10 ms per step against the default's ~0.05 ms + 1.4 KiB / 1.2 GB/s: a 200x gap.
    at = shown(store(with_steps(results["ring"], 0.010)), lang)
    factor, name = _line(at)
    assert model.off_by_more_than_limit(factor)
    alpha, bandwidth = calculators.LINKS["loopback-gloo"]
    assert name.startswith(i18n.t("labs.ring.model_default", lang))
    assert i18n.t("labs.ring.model_below", lang, times=factor) in name
    note = i18n.t("labs.ring.gap_default", lang, times=factor, count=3, cpus=results["ring"]["machine"]["cpu_count"],
                  direction=i18n.t("labs.ring.slower", lang), alpha=alpha * 1e6, bw=bandwidth / 1e9)
    assert note in texts(at)


@pytest.mark.usefixtures("app_db")
def test_the_model_line_comes_from_this_machines_benchmark_of_the_same_algorithm(results):
    bench = json.loads(json.dumps(results["bench"]))
    fit = {"alpha_s": 2e-3, "bandwidth_Bps": 0.3e9, "bandwidth_GBps": 0.3, "steps": 4,
           "collective": "all_reduce", "rms_rel_err": 0.1, "points": 3}
    bench["summary"]["fit"]["ring"] = fit
    store(bench, worker="otherhost:7")  # another machine's fit: not this one's
    bench_id = store(bench, worker="labhost:99")  # same host, an earlier worker process
    s = results["ring"]["summary"]
    per_step = model.ring_time(3, s["size_bytes"], fit["alpha_s"], fit["bandwidth_Bps"]) / 4
    at = shown(store(with_steps(results["ring"], per_step * 1.5)))
    factor, name = _line(at)
    assert factor == pytest.approx(1.5)
    assert name == i18n.t("labs.ring.model_fit", "en", run=bench_id, count=3)  # within 3x: no factor
    # The same fit far off (a quieter moment): labelled with the factor, and why.
    at = shown(store(with_steps(results["ring"], per_step * 40)))
    factor, name = _line(at)
    assert factor == pytest.approx(40) and i18n.t("labs.ring.model_below", "en", times=40) in name
    assert any(x.startswith("Even the fit of this machine's own benchmark is 40.0 times off") for x in texts(at))


@pytest.mark.parametrize("measured_ms", [0.02, 0.1, 0.3, 1.0, 10.0, 50.0])
@pytest.mark.usefixtures("app_db")
def test_no_model_line_is_more_than_3x_off_without_its_label(results, measured_ms):
    at = shown(store(with_steps(results["ring"], measured_ms / 1e3)))
    factor, name = _line(at)
    labelled = "×" in name
    assert labelled == model.off_by_more_than_limit(factor), (factor, name)


def test_gap_and_limit():
    assert model.gap([0.01, 0.01], [0.001, 0.001]) == pytest.approx(10)
    assert model.off_by_more_than_limit(3.1) and model.off_by_more_than_limit(1 / 3.1)
    assert not model.off_by_more_than_limit(2.9) and not model.off_by_more_than_limit(1 / 2.9)
    # A fit gives back the benchmark's own time, spread over the steps.
    per = model.step_times(3, 3000, 1000, 4, fit={"alpha_s": 1e-3, "bandwidth_Bps": 1e9})
    assert per == [pytest.approx(model.ring_time(3, 3000, 1e-3, 1e9) / 4)] * 4
    assert model.step_times(3, 3000, 1000, 2, link=(1e-3, 1e9)) == [pytest.approx(1e-3 + 1e-6)] * 2


# --------------------------------------------------------------------------
# Noise, world size, what to look for


def test_ring_and_bench_state_their_noise(results):
    s = results["ring"]["summary"]
    assert s["repeats"] == 3
    for spread in (s["total_time"], s["builtin_time"], *s["step_times"]):
        assert spread["k"] == 3 and spread["min"] <= spread["median"] <= spread["max"]
    assert s["total_time_s"] == s["total_time"]["median"]
    assert len(s["step_times"]) == len(s["traces"][0]) == 4
    assert min(rec["t_start"] for tr in s["traces"] for rec in tr) >= 0  # the replayed run, from its start
    for row in results["bench"]["summary"]["rows"]:
        assert row["min_us"] <= row["time_us"] <= row["max_us"]


def test_comparisons_default_to_three_ranks():
    assert world_size_default("ring") == world_size_default("bench") == 3
    assert world_size_default("ddp") == 2
    parser = _parser(None)
    assert parser.parse_args(["bench"]).world_size == 3 and parser.parse_args(["ring"]).world_size == 3
    assert parser.parse_args(["ddp"]).world_size == 2


@pytest.mark.usefixtures("app_db")
def test_the_form_and_the_queue_default_to_three_ranks_for_comparisons():
    assert labruns.validate("bench", {}).run.world_size == 3
    assert labruns.validate("ring", {}).run.world_size == 3
    assert labruns.validate("ddp", {}).run.world_size == 2
    for lab, n in (("bench", 3), ("ring", 3), ("ddp", 2)):
        at = open_page("labs", lab=lab)
        assert [s for s in at.slider if s.label == i18n.t("labs.world_size", "en")][0].value == n


@pytest.mark.usefixtures("app_db")
@pytest.mark.parametrize("name, two", [("bench2", True), ("ring2", True), ("bench", False), ("ring", False)])
def test_two_ranks_say_why_naive_and_ring_move_the_same_bytes(results, name, two):
    at = shown(store(results[name]))
    assert (i18n.t("labs.two_ranks_same_bytes", "en") in texts(at)) == two


@pytest.mark.usefixtures("app_db")
@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
@pytest.mark.parametrize("name", ["ring", "ring2", "bench", "bench2", "ddp"])
def test_every_result_opens_with_what_to_look_for_and_its_noise(results, name, lang):
    result = results[name]
    key, values = {"ring": ("ring", {"count": 3, "steps": 4}), "ring2": ("ring_naive", {"count": 2, "steps": 1}),
                   "bench": ("bench", {"count": 3}), "bench2": ("bench_two", {"count": 2}),
                   "ddp": ("ddp", {})}[name]
    look = i18n.t(f"labs.look.{key}", lang, **values)
    at = shown(store(result), lang)
    # The result's first element: before the machine line and the outcome.
    values_in_order = [_value(e) for e in at.main]
    first = values_in_order.index(look)
    machine = i18n.t("labs.machine", lang, cpus=0, torch="", backend="")[:6]
    assert not [v for v in values_in_order[:first] if isinstance(v, str) and v.startswith(machine)]
    assert at.info[0].value == look
    noise = {"ring": "labs.ring.noise", "ring2": "labs.ring.noise", "bench": "labs.bench.noise",
             "bench2": "labs.bench.noise", "ddp": "labs.ddp.bucket_noise"}[name]
    head = re.split(r"\{", i18n.catalog(lang)[noise])[0]
    assert any(x.startswith(head) for x in texts(at)), (head, texts(at))


@pytest.mark.usefixtures("app_db")
@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_one_rank_says_one_thing_about_the_ring(results, lang):
    """No "2(n-1) = 0 steps, each sending 1/1 of the buffer" above "nothing to exchange" (journey m5)."""
    at = shown(store(results["ring1"]), lang)
    assert at.info[0].value == i18n.t("labs.look.ring_one", lang)
    assert i18n.t("labs.ring.one_rank", lang) in texts(at)
    assert not [x for x in texts(at) if "2(n-1)" in x]
    bench = json.loads(json.dumps(results["bench"]))
    bench["summary"]["world_size"] = 1
    assert shown(store(bench), lang).info[0].value == i18n.t("labs.look.bench_one", lang)


def _busbw(result: dict) -> list[float]:
    return [r["busbw"] for r in sorted(result["summary"]["rows"], key=lambda r: r["size"])
            if r["impl"] == "all_reduce"]


@pytest.mark.usefixtures("app_db")
@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_busbw_is_said_to_level_off_only_where_the_sweep_shows_it(results, lang):
    """The sweep's largest size still rising gets a note; a flat end none; and the table gives
    bandwidths to 3 significant figures, never "0" for a small message (journey m6)."""
    from app.labviews import STILL_RISING

    rising = json.loads(json.dumps(results["bench"]))
    rows = [r for r in rising["summary"]["rows"] if r["impl"] == "all_reduce"]
    rows.sort(key=lambda r: r["size"])
    rows[-1]["busbw"] = 2 * rows[-2]["busbw"]
    at = shown(store(rising), lang)
    note = i18n.t("labs.bench.still_rising", lang, size="16 KiB", before=i18n.format_number(rows[-2]["busbw"], lang, ".3g"),
                  last=i18n.format_number(rows[-1]["busbw"], lang, ".3g"))
    assert note in texts(at)
    assert "until it levels off" not in i18n.t("labs.look.bench", "en")
    table = next(d.value for d in at.dataframe if "algbw (GB/s)" in d.value.columns)
    decimal, _group = i18n.number_marks(lang)
    for column, key in (("algbw (GB/s)", "algbw"), ("busbw (GB/s)", "busbw")):
        shown_values = [float(cell.replace(decimal, ".")) for cell in table[column]]
        assert shown_values == [float(f"{r[key]:.3g}") for r in rising["summary"]["rows"]], list(table[column])
        assert all(v > 0 for v in shown_values)
    flat = json.loads(json.dumps(rising))
    rows = sorted((r for r in flat["summary"]["rows"] if r["impl"] == "all_reduce"), key=lambda r: r["size"])
    rows[-1]["busbw"] = rows[-2]["busbw"] * (STILL_RISING - 0.05)
    at = shown(store(flat), lang)
    assert not [x for x in texts(at) if x.startswith(note[:10])]


def _value(node):
    try:
        return node.value
    except Exception:  # noqa: BLE001 (blocks and elements without a value)
        return None
