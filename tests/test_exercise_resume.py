"""save-and-resume: the ranks killed at a hidden step and restarted, graded bit for bit and by the samples fed.

- the router's three new calls keep the closed-router property: a rank gets back only its own
  rank's checkpoint (across the restart too), the data rows it named, nothing of another rank's;
  a checkpoint past the folder's bound, or a fetch out of bounds, ends the case; a held rank is
  answered nothing (the harness kills it there);
- the checks on hand-made results: each thing not restored is named;
- real gradings in the sandbox: the reference passes, a submission that forgets the optimizer,
  the sampler's position or the random state fails with that named; and the red team: state kept
  in the process's memory does not survive the kill, and a restart from scratch, which ends with
  the right weights, fails on the samples it used twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import random
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labs.exercises import grader, load, messages
from labs.exercises.report import GradeReport
from tests.exercisepass import sandbox_mode
from tests.test_exercises_router import Rank, frames, pump, routing

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "exercises" / "resume"
EX = load("save-and-resume")
STORE = ("fetch", "checkpoint_put", "checkpoint_get", "all_reduce")
BOUNDS = routing.Bounds(message_bytes=64, tags=1, checkpoint_bytes=100, fetch_rows=2)
DATA = ([bytes([i]) * 4 for i in range(10)], [bytes([100 + i]) * 8 for i in range(10)])


@pytest.fixture
def net():
    made = []

    def make(n: int, bounds=BOUNDS):
        ranks = [Rank() for _ in range(n)]
        r = routing.Router(n, [x.up_r for x in ranks], [x.down_w for x in ranks], allowed=STORE)
        r.reset(bounds, DATA)
        made.append((r, ranks))
        return r, ranks

    yield make
    for r, ranks in made:
        r.close()
        for x in ranks:
            for fd in (x.up_r, x.up_w, x.down_r, x.down_w):
                with contextlib.suppress(OSError):
                    os.close(fd)


# --------------------------------------------------------------------------
# The router: the checkpoint store, the data feeder, the hold


def test_a_rank_gets_back_its_own_checkpoint_only_and_after_the_restart_too(net):
    r, (a, b) = net(2)
    a.write({"t": "checkpoint_put", "id": 1}, b"rank zero's")
    b.write({"t": "checkpoint_get", "id": 1})
    pump(r)
    assert a.read() == [({"t": "done", "id": 1}, b"")]
    assert b.read() == [({"t": "done", "id": 1}, b"")], "rank 1 saved nothing, so it gets nothing"
    fresh, (a2, b2) = net(2)
    fresh.carry(r)  # the restarted ranks start with the killed ranks' checkpoints
    a2.write({"t": "checkpoint_get", "id": 1})
    b2.write({"t": "checkpoint_get", "id": 1})
    pump(fresh)
    assert a2.read() == [({"t": "done", "id": 1}, b"rank zero's")] and b2.read() == [({"t": "done", "id": 1}, b"")]
    assert r.failure is None and fresh.failure is None


def test_a_checkpoint_past_the_folders_bound_ends_the_case(net):
    r, (a, _b) = net(2)
    a.write({"t": "checkpoint_put", "id": 1}, b"x" * 101)
    pump(r)
    assert r.failure == {"key": "protocol_checkpoint_size", "values": {"rank": 0, "bytes": 101, "limit": 100}}
    assert a.read() == [], "and the rank is told nothing"


@pytest.mark.parametrize("header, payload", [
    ({"t": "fetch", "id": 1, "idx": [10]}, b""),  # past the data set
    ({"t": "fetch", "id": 1, "idx": [0, 1, 2]}, b""),  # more rows than a batch
    ({"t": "fetch", "id": 1, "idx": []}, b""),
    ({"t": "fetch", "id": 1, "idx": [True]}, b""),
    ({"t": "fetch", "id": 1, "idx": "0"}, b""),
    ({"t": "checkpoint_get", "id": 1}, b"a payload where none belongs"),
])
def test_a_fetch_or_get_out_of_bounds_ends_the_case(net, header, payload):
    r, (a, _b) = net(2)
    a.write(header, payload)
    pump(r)
    assert r.failure is not None and r.failure["key"] == "protocol_frame"
    assert a.read() == []


def test_a_fetch_answers_the_rows_named_and_the_router_records_them(net):
    r, (a, _b) = net(2)
    a.write({"t": "fetch", "id": 1, "idx": [3, 1]})
    pump(r)
    assert a.read() == [({"t": "done", "id": 1}, DATA[0][3] + DATA[0][1] + DATA[1][3] + DATA[1][1])]
    (rec,) = r.traffic(0)["calls"]
    assert rec["op"] == "fetch" and rec["indices"] == [3, 1]


def test_a_rank_that_marks_the_hold_step_is_answered_nothing_more(net):
    r, (a, b) = net(2, dataclasses.replace(BOUNDS, hold_step=2))
    for rank in (a, b):
        rank.write({"t": "mark", "step": 1})
        rank.write({"t": "fetch", "id": 1, "idx": [0]})
        rank.write({"t": "mark", "step": 2})
        rank.write({"t": "fetch", "id": 2, "idx": [1]})
    pump(r)
    assert [h["id"] for h, _p in a.read()] == [1] and all(r.held)
    assert [c["op"] for c in r.traffic(0)["calls"]] == ["step", "fetch", "step"]


STORE_CALLS = st.lists(st.sampled_from(["put", "get", "fetch"]), max_size=6)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mine=STORE_CALLS, theirs=st.lists(STORE_CALLS, min_size=2, max_size=2), sizes=st.lists(
    st.integers(0, 100), min_size=12, max_size=12))
def test_what_a_rank_is_told_depends_only_on_its_own_frames(mine, theirs, sizes):
    """Rank 0's answers, with rank 1 doing anything two ways: the same bytes, frame for frame."""
    told = []
    for script in theirs:
        ranks = [Rank() for _ in range(2)]
        r = routing.Router(2, [x.up_r for x in ranks], [x.down_w for x in ranks], allowed=STORE)
        r.reset(BOUNDS, DATA)
        try:
            for who, calls in ((1, script), (0, mine)):
                for i, call in enumerate(calls, start=1):
                    if call == "put":
                        ranks[who].write({"t": "checkpoint_put", "id": i}, bytes([who]) * sizes[i])
                    elif call == "get":
                        ranks[who].write({"t": "checkpoint_get", "id": i})
                    else:
                        ranks[who].write({"t": "fetch", "id": i, "idx": [i % 10]})
                    r.pump(0)
            pump(r, wait=0.002)  # 150 examples of two runs: an idle wait of 0.15 s each was 45 s
            told.append([frames.encode(h, p) for h, p in ranks[0].read()])
        finally:
            r.close()
    assert told[0] == told[1]


# --------------------------------------------------------------------------
# The checks, on results made by hand


def hand_made(*, used_before: int = 6, after: list[list[int]] | None = None, params=None, restored=None) -> list:
    """Two ranks whose run never killed used batch k = [4k .. 4k+3] at step k, 4 batches an epoch;
    killed after ``used_before`` batches, the last checkpoint at step 6 (epoch 1, position 2)."""
    batches = [[4 * k + j for j in range(4)] for k in range(10)]
    orders = [sum(batches[e * 4:(e + 1) * 4], []) for e in range(3)]
    resume = {"step": 6, "epoch": 1, "position": 2, "model": "m", "optimizer": "o", "rng": "g"}
    expected = {"params": {"w": [1.0, 2.0]}, "batches": batches, "resume": resume, "per_epoch": 4,
                "orders": orders}
    before = [{"op": "fetch", "indices": b} for b in batches[:used_before]] + [{"op": "checkpoint_put"}] + \
             [{"op": "fetch", "indices": batches[used_before]}]
    mine = [{"op": "fetch", "indices": b} for b in (after if after is not None else batches[6:])]
    result = {"params": params or {"w": [1.0, 2.0]}, "restored": restored or dict(resume), "start": 6}
    return [{"rank": r, "expected": expected, "result": result, "calls": mine, "calls_before": before}
            for r in range(2)]


CASE = {"id": "w2", "world_size": 2, "steps": 10, "batch": 4}


def keys(ranks) -> list[tuple[str, bool]]:
    return [(f["key"], f["passed"]) for f in EX.check(CASE, ranks)]


def test_a_right_restore_passes_both_checks():
    assert keys(hand_made()) == [("resume_samples_ok", True), ("resume_weights_ok", True)]


@pytest.mark.parametrize("after, key", [
    ([[16, 17, 18, 19]] + [[4 * k + j for j in range(4)] for k in range(7, 10)], "resume_position_lost"),
    ([[8, 9, 10, 11]] + [[4 * k + j for j in range(4)] for k in range(7, 10)], "resume_epoch_lost"),
    ([[0, 1, 2, 3]] + [[4 * k + j for j in range(4)] for k in range(7, 10)], "resume_sampler_lost"),
    ([[4 * k + j for j in range(4)] for k in range(10)], "resume_step_lost"),
    ([[4 * k + j for j in range(4)] for k in (6, 8, 8, 9)], "resume_samples_wrong"),
])
def test_the_samples_check_names_what_of_the_sampler_or_step_was_lost(after, key):
    found = EX.check(CASE, hand_made(after=after))
    assert (found[0]["key"], found[0]["passed"]) == (key, False), found[0]
    assert found[0]["values"]["twice"] > 0 or found[0]["values"]["skipped"] > 0


@pytest.mark.parametrize("part", ["model", "optimizer", "rng", None])
def test_the_weights_check_names_the_part_the_restarted_rank_did_not_restore(part):
    said = {"step": 6, "epoch": 1, "position": 2, "model": "m", "optimizer": "o", "rng": "g"}
    if part:
        said[part] = "fresh"
    found = EX.check(CASE, hand_made(params={"w": [1.0, 2.5]}, restored=said))[1]
    assert found["key"] == (f"resume_{part}_lost" if part else "resume_weights_differ") and not found["passed"]
    assert found["values"]["diff"] == 0.5


def test_every_message_renders_in_every_language_with_the_values_its_check_gives():
    findings = EX.check(CASE, hand_made())
    for after in ([[16, 17, 18, 19], *[[4 * k + j for j in range(4)] for k in range(7, 10)]],
                  [[8, 9, 10, 11], *[[4 * k + j for j in range(4)] for k in range(7, 10)]],
                  [[0, 1, 2, 3], *[[4 * k + j for j in range(4)] for k in range(7, 10)]],
                  [[4 * k + j for j in range(4)] for k in range(10)],
                  [[4 * k + j for j in range(4)] for k in (6, 8, 8, 9)]):
        findings += EX.check(CASE, hand_made(after=after))
    for part in ("model", "optimizer", "rng", "step"):
        said = {"step": 6, "epoch": 1, "position": 2, "model": "m", "optimizer": "o", "rng": "g", part: "x"}
        findings += EX.check(CASE, hand_made(params={"w": [0.0, 2.0]}, restored=said))
    keys_found = {f["key"] for f in findings}
    for lang in ("en", "zh", "nl"):
        own = messages.exercise("save-and-resume", lang)["feedback"]
        assert keys_found | {"passed", "reference_note", "forbidden_call"} == set(own), lang
        for f in findings:
            assert messages.placeholders(own[f["key"]]) <= set(f["values"]), (lang, f)
            assert "{" not in messages.text(f["key"], lang, "save-and-resume", **f["values"])


def test_the_harness_forks_a_fresh_set_of_ranks_for_every_restart():
    plan = grader.plan(EX, 5, 5.0)
    assert [g["sets"] for g in plan["groups"]] == [3, 2]
    assert grader.shapes(EX, plan["groups"]) == ["2x3", "3x2"]
    sets, _ = grader.warm_shape()  # the warm sandbox holds as many (issue #35), beside every other size
    assert sets[2] >= 3 and sets[3] >= 2 and set(sets) >= {2, 3, 4, 6}
    assert grader.harness_args(grader.shapes(EX, plan["groups"]), grader.preloads(EX)) == [
        "2x3", "3x2", "--preload=torch._dynamo", "--preload=drivers.save_resume"]
    assert grader.static_error("def save_checkpoint(*a):\n    pass\n", "load_checkpoint").key == "missing_function"
    for case in EX.cases(5):  # a restart goes on in the middle of an epoch: its position matters
        assert case["kill_step"] % case["every"] and (case["kill_step"] // case["every"]) * case["every"] > 0
    public = set(__import__("drivers.save_resume", fromlist=["public"]).public(EX.cases(5)[0]))
    assert not public & {"seed", "kill_step"}


def test_the_driver_checkpoint_roundtrips_through_torch_save_without_files():
    buffer = io.BytesIO()
    torch.save({"rng": torch.get_rng_state(), "epoch": 1, "nested": {"a": [1, 2]}}, buffer)
    back = torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)
    assert back["epoch"] == 1 and torch.equal(back["rng"], torch.get_rng_state())
    assert len(buffer.getvalue()) < routing.Bounds(message_bytes=0, tags=0, checkpoint_bytes=256 << 10).checkpoint_bytes


# --------------------------------------------------------------------------
# Real gradings in the sandbox


def graded(path: Path, case_ids=None) -> GradeReport:
    return grader.grade("save-and-resume", path.read_text("utf-8"), seed=random.Random(7).randrange(1 << 30),
                        mode=sandbox_mode(), case_ids=case_ids)


def failed_keys(report: GradeReport) -> dict[str, list[str]]:
    return {c.id: [f.key for f in c.findings if not f.passed] for c in report.cases}


@pytest.mark.needs_sandbox
def test_the_reference_resumes_bit_for_bit_in_every_case():
    from labs.exercises import folder

    report = graded(folder("save-and-resume") / "reference.py")
    assert report.status == "passed", report
    assert sorted(c.id for c in report.cases) == sorted(c["id"] for c in EX.cases(0))
    for case in report.cases:
        assert [f.key for f in case.findings] == ["resume_samples_ok", "resume_weights_ok"]


@pytest.mark.needs_sandbox
@pytest.mark.parametrize("fixture, key", [("forgets_optimizer", "resume_optimizer_lost"),
                                          ("forgets_position", "resume_position_lost"),
                                          ("forgets_rng", "resume_rng_lost")])
def test_what_was_not_restored_is_named(fixture, key):
    report = graded(FIXTURES / f"{fixture}.py", case_ids={"w3-epoch1"})
    assert report.status == "failed"
    assert key in failed_keys(report)["w3-epoch1"], report.cases


@pytest.mark.needs_sandbox
def test_state_kept_in_the_process_does_not_survive_the_kill_even_in_a_warm_sandbox():
    """The restarted ranks are other processes, never the killed ones: graded warm (issue #35),
    where every set of ranks was forked long before the submission came, as fresh."""
    with grader.prestart() as warm:
        report = grader.grade("save-and-resume", (FIXTURES / "keeps_in_memory.py").read_text("utf-8"), seed=7,
                              case_ids={"w3-epoch1"}, warm=warm)
        assert not warm.started.alive(), "graded in the warm sandbox, and it is gone"
    (case,) = report.cases
    assert case.status == "failed" and case.findings[0].key == "crash"
    assert case.findings[0].values["exception"] == "KeyError"


@pytest.mark.needs_sandbox
def test_a_restart_from_scratch_has_the_right_weights_and_fails_on_the_samples_used_twice():
    report = graded(FIXTURES / "saves_nothing.py", case_ids={"w3-epoch1"})
    (case,) = report.cases
    found = {f.key: f for f in case.findings}
    assert found["resume_weights_ok"].passed, "a fresh run is the uninterrupted run"
    assert not found["resume_step_lost"].passed and found["resume_step_lost"].values["twice"] > 0
    assert report.status == "failed"
