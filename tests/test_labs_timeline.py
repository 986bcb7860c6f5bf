"""The DDP lab's timeline (issue #25): the overlap arithmetic on traces whose answer we
know, and ``python -m labs ddp --sections timeline --trace DIR`` end to end.

No timing is asserted: the naive sync cannot overlap (its all-reduces start when
backward has returned, on the same thread) and DDP's first bucket is launched
before backward ends whenever there are two buckets or more, so both checks
hold on a loaded machine too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from labs import model, timeline

ROOT = Path(__file__).resolve().parent.parent


def span(kind: str, name: str, start: float, end: float, step: int = 0) -> dict:
    return {"kind": kind, "name": name, "start_ms": start, "end_ms": end, "step": step}


def test_union_intersection_and_length():
    assert timeline.union([(5, 7), (0, 2), (1, 3), (7, 8), (4, 4)]) == [(0, 3), (5, 8)]
    assert timeline.length([(0, 2), (1, 3), (10, 11)]) == 4
    assert timeline.intersect([(0, 4), (6, 9)], [(3, 7), (8, 20)]) == [(3, 4), (6, 7), (8, 9)]
    assert timeline.intersect([(0, 1)], [(1, 2)]) == []


def test_naive_step_has_no_overlap_and_all_comm_exposed():
    # forward 0-2, backward 2-6, then two all-reduces 6-7 and 7-9, optimizer 9-10
    spans = [span("compute", "forward", 0, 2), span("compute", "backward", 2, 6),
             span("comm", "all-reduce a", 6, 7), span("comm", "all-reduce b", 7, 9),
             span("compute", "optimizer", 9, 10)]
    assert timeline.overlap_fraction(spans) == 0.0
    assert timeline.exposed_ms(spans) == 3.0
    assert timeline.idle_ms(spans) == 0.0


def test_ddp_step_hides_what_runs_during_backward():
    # backward 2-6; bucket 0 in flight 3-5 (hidden), bucket 1 5-8 (1 of 3 ms hidden)
    spans = [span("compute", "forward", 0, 2), span("compute", "backward", 2, 6),
             span("comm", "bucket 0", 3, 5), span("comm", "bucket 1", 5, 8),
             span("compute", "optimizer", 9, 10)]
    assert timeline.comm_ms(spans) == 5.0
    assert timeline.overlap_ms(spans) == 3.0
    assert timeline.overlap_fraction(spans) == pytest.approx(0.6)
    assert timeline.exposed_ms(spans) == 2.0
    assert timeline.idle_ms(spans) == 1.0  # 8-9: nothing runs


def test_comm_in_flight_together_counts_once_and_only_backward_hides():
    # two all-reduces in flight together 1-5 and 2-4; forward 0-3 is not backward
    spans = [span("compute", "forward", 0, 3), span("comm", "bucket 0", 1, 5), span("comm", "bucket 1", 2, 4),
             span("compute", "backward", 3, 4)]
    assert timeline.comm_ms(spans) == 4.0
    assert timeline.overlap_fraction(spans) == pytest.approx(0.25)
    assert timeline.exposed_ms(spans) == 1.0  # forward and backward hide 1-4


def test_variant_takes_each_step_whole_and_counts_per_step():
    fast = [x for s in (0, 1) for x in (span("compute", "backward", 10 * s, 10 * s + 4, s),
                                        span("comm", "b", 10 * s + 2, 10 * s + 6, s))]
    slow = [x for s in (0, 1) for x in (span("compute", "backward", 10 * s, 10 * s + 2, s),
                                        span("comm", "b", 10 * s + 2, 10 * s + 6, s))]
    v = timeline.variant([{"rank": 0, "spans": fast}, {"rank": 1, "spans": slow}], bucket_cap_mb=0.05)
    assert v["steps"] == 2 and v["bucket_cap_mb"] == 0.05
    # Each step: data moves 2-6 on both ranks, backward runs 0-4 on one of them: half hidden.
    assert v["overlap"] == pytest.approx(0.5) and v["overlap_steps"] == [pytest.approx(0.5)] * 2
    assert v["exposed_comm_ms"] == 2.0  # 4-6 per step: data moving, no rank computing
    assert [r["exposed_comm_ms"] for r in v["ranks"]] == [2.0, 4.0]  # each rank's own view
    assert timeline.variant([{"rank": 0, "spans": [span("compute", "forward", 0, 1)]}])["overlap"] == 0.0


def test_waiting_for_a_late_rank_is_not_communication():
    """Journey review M3: a rank that started its all-reduce while its peer, held back by the
    scheduler, was still in backward read as 100 ms of exposed communication. The collective
    moves data from the last rank's start: the wait before is idle, and the step's overlap is
    what moved while some rank still computed backward."""
    early = [span("compute", "backward", 0, 2), span("comm", "bucket 0", 1, 12), span("comm", "bucket 1", 2, 14)]
    late = [span("compute", "backward", 0, 12), span("comm", "bucket 0", 8, 12), span("comm", "bucket 1", 12, 14)]
    ranks = timeline.started_together([{"rank": 0, "spans": early}, {"rank": 1, "spans": late}])
    ready = [[s.get("ready_ms") for s in r["spans"]] for r in ranks]
    assert ready == [[None, 8.0, 12.0], [None, 8.0, 12.0]]
    assert early[1].get("ready_ms") is None  # a copy: the spans given are left as they were
    assert timeline.comm_ms(ranks[0]["spans"]) == 6.0  # 8-14, not 1-14
    assert timeline.idle_ms(ranks[0]["spans"]) == 6.0  # 2-8: waiting for rank 1 to start
    v = timeline.variant([{"rank": 0, "spans": early}, {"rank": 1, "spans": late}])
    assert v["overlap"] == pytest.approx(4 / 6)  # 8-12 of 8-14 ran during rank 1's backward
    assert v["exposed_comm_ms"] == pytest.approx(2.0)
    assert [s.get("ready_ms") for s in v["ranks"][0]["spans"]] == [None, 8.0, 12.0]  # for the lanes
    # Unequal calls (a learner's ranks that disagree): the unmatched span keeps its own start.
    odd = timeline.started_together([{"rank": 0, "spans": early}, {"rank": 1, "spans": late[:2]}])
    assert [s.get("ready_ms") for s in odd[0]["spans"]] == [None, 8.0, None]


def test_rebase_moves_every_rank_by_the_same_origin():
    ranks = [{"rank": 0, "spans": [span("compute", "forward", 105.0, 107.5)]},
             {"rank": 1, "spans": [span("comm", "bucket 0", 103.0, 104.0)]}]
    moved = timeline.rebase(ranks)
    assert moved[1]["spans"][0]["start_ms"] == 0.0 and moved[0]["spans"][0]["start_ms"] == 2.0
    assert moved[0]["spans"][0]["end_ms"] == 4.5 and ranks[0]["spans"][0]["start_ms"] == 105.0  # a copy


def test_chrome_trace_has_a_process_per_variant_and_rank_and_a_thread_per_kind(tmp_path):
    spans = [span("compute", "backward", 0, 2), span("comm", "bucket 0", 1, 3)]
    variants = {"naive": timeline.variant([{"rank": 0, "spans": spans}, {"rank": 1, "spans": spans}]),
                "ddp": timeline.variant([{"rank": 0, "spans": spans}, {"rank": 1, "spans": spans}])}
    trace = timeline.chrome_trace(variants)
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == 8 and len({e["pid"] for e in complete}) == 4
    assert {e["tid"] for e in complete if e["cat"] == "comm"} == {1}
    assert complete[1]["ts"] == 1000.0 and complete[1]["dur"] == 2000.0  # microseconds
    paths = timeline.write_traces(tmp_path, {"variants": variants})
    assert [p.name for p in paths] == ["rank0.json", "rank1.json"]
    one = json.loads(paths[1].read_text())["traceEvents"]
    assert {e["args"]["name"] for e in one if e["name"] == "process_name"} == {"naive rank 1", "ddp rank 1"}


@pytest.mark.slow  # a lab on two ranks
def test_the_cli_writes_a_trace_per_rank_and_ddp_overlaps_where_naive_cannot(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "labs", "ddp", "--world-size", "2", "--sections", "timeline",
                           "--trace", str(tmp_path), "--json"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    tl = doc["summary"]["sections"]["timeline"]
    variants = tl["variants"]
    assert {"naive", "ddp"} <= set(variants)
    for name, v in variants.items():
        assert [r["rank"] for r in v["ranks"]] == [0, 1], name
        for r in v["ranks"]:
            kinds = {s["kind"] for s in r["spans"]}
            assert kinds == {"compute", "comm"}, (name, r["rank"])
            assert all(s["end_ms"] >= s["start_ms"] for s in r["spans"])
            assert {s["step"] for s in r["spans"]} == set(range(tl["steps"]))
        assert v["exposed_comm_ms"] >= 0 and 0.0 <= v["overlap"] <= 1.0
    assert variants["ddp"]["allreduce_calls"] >= 2  # several buckets: the first can overlap
    assert variants["naive"]["overlap"] < 0.05
    assert variants["ddp"]["overlap"] > variants["naive"]["overlap"]
    assert [c["variant"] for c in tl["caps"]][0] == "ddp"
    for rank in (0, 1):
        trace = json.loads((tmp_path / f"rank{rank}.json").read_text())
        events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
        assert events and {e["cat"] for e in events} == {"compute", "comm"}
        assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in events)


# --------------------------------------------------------------------------
# Predict, then measure: the step model on numbers we know


def test_serial_exposed_queues_all_reduces_and_counts_what_runs_past_backward():
    # naive: both ready when backward ends at 6: all 3 ms exposed
    assert model.serial_exposed([6, 6], [1, 2], 6) == 3
    # DDP: ready at 3 and 5, 2 ms each: 3-5, 5-7: 1 ms past backward's end at 6
    assert model.serial_exposed([5, 3], [2, 2], 6) == 1
    # a queue: ready at 1 and 2, 4 ms each: 1-5, 5-9; backward ends at 6: 3 ms exposed
    assert model.serial_exposed([1, 2], [4, 4], 6) == 3
    assert model.serial_exposed([1], [2], 6) == 0.0 and model.serial_exposed([], [], 6) == 0.0


def test_step_model_is_measured_compute_plus_exposed_comm_from_the_fit():
    # 2 ranks, alpha 1 ms, B = 1e6 B/s: a 1000-byte all-reduce takes 2 alpha + S/B = 2 + 1 ms
    fit = {"alpha_s": 1e-3, "bandwidth_Bps": 1e6}
    assert model.ring_time(2, 1000, 1e-3, 1e6) * 1e3 == pytest.approx(3.0)

    def rank(r, shift):  # forward 0-2, backward 2-6, buckets launched at 3 and 5, optimizer 9-10
        return {"rank": r, "spans": [
            span("compute", "forward", 0, 2), span("compute", "backward", 2, 6 + shift),
            {**span("comm", "bucket 0", 3, 6), "bytes": 1000}, {**span("comm", "bucket 1", 5, 9), "bytes": 1000},
            span("compute", "optimizer", 9 + shift, 10 + shift)]}

    var = {"ranks": [rank(0, 0), rank(1, 1)]}
    out = timeline.step_model(var, world_size=2, fit=fit)
    # rank 1 is the slowest: compute 2 + 5 + 1 = 8; buckets 3-6, 6-9 end 2 ms after backward (7)
    assert out["compute_ms"] == pytest.approx(8.0)
    assert out["exposed_ms"] == pytest.approx(2.0)
    assert out["comm_ms"] == pytest.approx(6.0)
    assert out["model_ms"] == pytest.approx(10.0)
    assert out["measured_ms"] == pytest.approx(11.0)  # rank 1's window, 0 to 11
    assert out["residual_ms"] == pytest.approx(1.0) and out["steps"] == 1
    # Without bytes on the spans, the gradient's bytes in equal shares: the same here.
    bare = {"ranks": [{**r, "spans": [{k: v for k, v in s.items() if k != "bytes"} for s in r["spans"]]}
                      for r in var["ranks"]]}
    assert timeline.step_model(bare, world_size=2, fit=fit, gradient_bytes=2000) == out
    # No fit: only what was measured, never an invented prediction.
    none = timeline.step_model(var, world_size=2, fit=None)
    assert none["compute_ms"] == pytest.approx(8.0) and none["measured_ms"] == pytest.approx(11.0)
    assert none["model_ms"] is none["exposed_ms"] is none["residual_ms"] is None


def test_step_model_averages_steps():
    fit = {"alpha_s": 1e-3, "bandwidth_Bps": 1e9}
    spans = [span("compute", "forward", 0, 1, 0), span("compute", "backward", 1, 3, 0),
             span("compute", "forward", 10, 11, 1), span("compute", "backward", 11, 15, 1)]
    out = timeline.step_model({"ranks": [{"rank": 0, "spans": spans}]}, world_size=2, fit=fit)
    assert out["steps"] == 2 and out["compute_ms"] == pytest.approx(4.0) and out["exposed_ms"] == 0.0
