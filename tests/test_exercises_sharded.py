"""Exercise 6, sharded-optimizer (ZeRO-1): the router's broadcast and all-gather, the checks, texts, grading.

The router's new collectives are tested as the others are in
``test_exercises_router.py`` (pipes and frames, no sandbox); the checks on
hand-made results; the grading on real ranks in the sandbox, kept to five
gradings: the reference on every case, three wrong solutions
(``tests/fixtures/exercises/more/zero_*.py``) on a few cases each, and a
walk of the driver's heap on one.
"""

from __future__ import annotations

import ast
import json
import os

import pytest
import torch

from labs.exercises import EXERCISES, REQUIRED_FOR_CERTIFICATE, grader, load, messages
from labs.exercises.report import GradeReport
from labs.exercises.sharded_optimizer.exercise import fair_limit
from tests.apptest import open_page
from tests.exercisepass import passing_report, sandbox_mode
from tests.test_exercises_more import (
    FIXTURES,
    LANGS,
    ROOT,
    check_texts,
    emitted_keys,
    failing,
    folder,
    glossary_findings,
    keys,
    texts,
)
from tests.test_exercises_router import (  # noqa: F401
    ROOMY,
    Rank,
    frames,
    from_bytes,
    pump,
    routing,
    tensor_bytes,
    world,
)
from tests.test_terminology import report

ID = "sharded-optimizer"
SEED = 5
COLLECTIVES = ("broadcast", "all_gather", "all_reduce", "barrier")


routed = world  # a router over n hand-driven ranks, its bounds roomy (test_exercises_router)


# --------------------------------------------------------------------------
# The router: broadcast and all_gather, as torch.distributed defines them


def bcast(rank: Rank, src: int, me: int, tensor: torch.Tensor, op_id: int = 1) -> None:
    data = tensor_bytes(tensor)
    rank.write({"t": "broadcast", "id": op_id, "src": src, "dtype": "float32", "n": len(data)},
               data if src == me else b"")


def test_a_broadcast_sends_the_source_tensor_to_every_other_rank_and_counts_it_once(routed):
    r, ranks = routed(3, allowed=COLLECTIVES)
    t = torch.arange(4, dtype=torch.float32)
    for me, x in enumerate(ranks):
        bcast(x, 1, me, t if me == 1 else torch.zeros(4))
        pump(r)
        if me < 2:
            assert x.read() == []  # not every rank has called yet
    for me, x in enumerate(ranks):
        [(h, payload)] = x.read()
        assert h["src"] == 1 and h["id"] == 1
        if me == 1:
            assert payload == b""
        else:
            assert torch.equal(from_bytes(payload, torch.empty(4)), t)
    assert [r.traffic(i)["sent"] for i in range(3)] == [0, 16, 0]
    assert [r.traffic(i)["received"] for i in range(3)] == [16, 0, 16]
    assert r.traffic(0)["calls"][0]["op"] == "broadcast" and r.traffic(0)["calls"][0]["peer"] == 1


def test_ranks_that_name_different_sources_end_the_case_and_the_report_names_them(routed):
    r, (a, b) = routed(2, allowed=COLLECTIVES)
    bcast(a, 0, 0, torch.ones(2))
    bcast(b, 1, 1, torch.ones(2))
    pump(r)
    assert a.read() == [] and b.read() == []  # no rank learns which source another named
    assert r.failure == {"key": "broadcast_sources_differ", "values": {"sources": "0, 1", "world_size": 2, "rank": 1}}
    assert r.traffic(1)["received"] == 0


def test_a_broadcast_of_different_sizes_ends_the_case(routed):
    r, (a, b) = routed(2, allowed=COLLECTIVES)
    bcast(a, 0, 0, torch.ones(2))
    bcast(b, 0, 1, torch.ones(3))
    pump(r)
    assert a.read() == [] and b.read() == []
    assert r.failure["key"] == "protocol_collective_mismatch"
    assert r.failure["values"]["calls"] == ("rank 0: broadcast(float32, 8 B, src=0); "
                                            "rank 1: broadcast(float32, 12 B, src=0)")


def test_all_gather_gives_every_rank_all_tensors_in_rank_order(routed):
    r, ranks = routed(3, allowed=COLLECTIVES)
    for me, x in enumerate(ranks):
        x.write({"t": "all_gather", "id": 1, "dtype": "float32"}, tensor_bytes(torch.full((2,), float(me))))
    pump(r)
    for me, x in enumerate(ranks):
        [(h, payload)] = x.read()
        assert torch.equal(from_bytes(payload, torch.empty(6)), torch.tensor([0.0, 0, 1, 1, 2, 2])), me
        assert r.traffic(me)["sent"] == 8 and r.traffic(me)["received"] == 16  # the others' tensors


def test_an_all_gather_of_different_sizes_or_too_large_ends_the_case(routed, monkeypatch):
    r, (a, b) = routed(2, allowed=COLLECTIVES)
    a.write({"t": "all_gather", "id": 1, "dtype": "float32"}, b"\0" * 8)
    b.write({"t": "all_gather", "id": 1, "dtype": "float32"}, b"\0" * 4)
    pump(r)
    assert a.read() == [] and b.read() == [] and r.failure["key"] == "protocol_collective_mismatch"
    r, (a, b) = routed(2, allowed=COLLECTIVES)  # a failure ends the group's ranks: a new one
    monkeypatch.setattr(frames, "MAX_PAYLOAD", 12)
    for x in (a, b):
        x.write({"t": "all_gather", "id": 2, "dtype": "float32"}, b"\0" * 8)
    pump(r)
    assert a.read() == [] and r.failure["key"] == "protocol_message_size" and r.failure["values"]["limit"] == 12


@pytest.mark.parametrize("frame", [
    frames.encode({"t": "broadcast", "id": 1, "src": 0, "dtype": "float32", "n": 4}, b"\0" * 4),
    frames.encode({"t": "all_gather", "id": 1, "dtype": "float32"}, b"\0" * 4),
])
def test_broadcast_and_all_gather_are_refused_where_the_exercise_does_not_allow_them(routed, frame):
    r, (a, _b) = routed(2)
    os.write(a.up_w, frame)
    pump(r)
    assert r.failure["key"] == "protocol_call_refused" and r.failure["values"]["rank"] == 0


@pytest.mark.parametrize("header, payload", [
    ({"t": "broadcast", "id": 1, "src": 1, "dtype": "float32", "n": 4}, b"\0" * 4),  # not the source's
    ({"t": "broadcast", "id": 1, "src": 0, "dtype": "float32", "n": 8}, b"\0" * 4),  # not n bytes
    ({"t": "broadcast", "id": 1, "src": 5, "dtype": "float32", "n": 4}, b""),  # no such rank
    ({"t": "broadcast", "id": 1, "src": 0, "dtype": "complex", "n": 4}, b"\0" * 4),  # unknown dtype
    ({"t": "all_gather", "id": 1, "dtype": "float32"}, b"\0" * 3),  # no whole number of float32
])
def test_a_broadcast_or_all_gather_the_protocol_does_not_allow_ends_the_case(routed, header, payload):
    r, (a, _b) = routed(2, allowed=COLLECTIVES)
    a.write(header, payload)
    pump(r)
    assert r.failure == {"key": "protocol_frame", "values": {"rank": 0}}


def test_collectives_held_for_other_ranks_count_as_bytes_in_flight(routed, monkeypatch):
    monkeypatch.setattr(routing, "MAX_IN_FLIGHT", 10)
    r, (a, _b) = routed(2, allowed=COLLECTIVES)
    for i in range(3):
        a.write({"t": "all_gather", "id": i + 1, "dtype": "float32"}, b"\0" * 4)
    pump(r)
    assert r.failure == {"key": "protocol_in_flight", "values": {"limit": 10, "rank": 0}}


# --------------------------------------------------------------------------
# The checks, on hand-made results


def zero_case(world: int = 2) -> dict:
    return {"id": "t", "world_size": world, "dtype": "float32", "steps": 3, "batch": 4}


def zero_ranks(world: int, held: list[int], params: list[dict] | None = None,
               sent: list[int] | None = None) -> list[dict]:
    expected = {"params": {"w": [1.0, 2.0, 3.0], "b": [0.5]}, "state": {"w": 28, "b": 12}}
    params = params or [expected["params"]] * world
    sent = sent or [12] * world
    return [{"rank": r, "expected": expected, "result": {"params": params[r], "held": held[r]},
             "sent": sent[r], "received": 4, "calls": []} for r in range(world)]


def test_the_fair_limit_is_below_the_whole_state_once_there_are_two_parameters():
    assert fair_limit([28, 12], 2) == 34 and fair_limit([28, 12], 4) == 31
    assert fair_limit([100], 3) == 100  # one parameter: its owner holds it all, and that is fair
    assert fair_limit([], 2) == 0
    for sizes in ([1, 1, 2], [500, 10, 10, 10], [8] * 7):
        for n in (2, 3, 4):
            assert max(sizes) <= fair_limit(sizes, n) < sum(sizes)


def test_the_checks_pass_a_fair_shard_and_report_the_wire():
    found = load(ID).check(zero_case(), zero_ranks(2, [28, 12], sent=[16, 4]))
    assert keys(found) == [] and [f["key"] for f in found] == ["zero_matches_single", "zero_state_ok", "zero_wire"]
    wire = found[2]["values"]
    assert wire == {"sent": 20, "received": 8, "most": 16, "rank": 0, "params": 16}


def test_the_checks_name_a_rank_that_keeps_the_whole_state_with_its_bytes():
    found = load(ID).check(zero_case(), zero_ranks(2, [28, 40]))
    assert keys(found) == ["zero_state_too_large"]
    assert found[1]["values"] == {"rank": 1, "held": 40, "limit": 34, "total": 40}


def test_the_checks_name_a_rank_whose_parameters_were_never_sent():
    stale = {"w": [1.0, 2.0, 3.0], "b": [0.75]}
    found = load(ID).check(zero_case(), zero_ranks(2, [28, 12], params=[{"w": [1.0, 2.0, 3.0], "b": [0.5]}, stale]))
    assert keys(found) == ["zero_weights_differ"] and found[0]["values"]["rank"] == 1


def test_a_held_count_that_is_not_a_number_is_an_unreadable_reply():
    with pytest.raises(TypeError):
        load(ID).check(zero_case(), zero_ranks(2, [28, "12"]))


# --------------------------------------------------------------------------
# Registry, texts, code that goes where it should


def test_it_is_an_exercise_but_not_one_the_certificate_requires_by_default():
    assert ID in EXERCISES and ID not in REQUIRED_FOR_CERTIFICATE


def test_every_language_has_the_whole_text_and_every_message():
    emitted = emitted_keys(ID)
    assert emitted == {"zero_matches_single", "zero_weights_differ", "zero_state_ok", "zero_state_too_large",
                       "zero_wire"}
    check_texts(ID, emitted, hints=4)


@pytest.mark.parametrize("lang", LANGS)
def test_texts_follow_the_glossary(lang):
    found = glossary_findings([ID], lang)
    assert found == [], report(found)


def test_every_message_renders_with_the_values_its_finding_gives():
    ex = load(ID)
    found = ex.check(zero_case(), zero_ranks(2, [28, 12]))
    found += ex.check(zero_case(), zero_ranks(2, [28, 40], params=[{"w": [0.0] * 3, "b": [0.0]}] * 2))
    assert {f["key"] for f in found} == emitted_keys(ID)
    sources = {"key": "broadcast_sources_differ", "values": {"sources": "0, 1", "world_size": 2}}
    for finding in [*found, sources]:
        for lang in LANGS:
            template = messages.template(finding["key"], lang, ID)
            assert template and messages.placeholders(template) <= set(finding["values"]), (lang, finding)
            assert "{" not in messages.text(finding["key"], lang, ID, **finding["values"])
        json.dumps(finding)


def test_the_driver_imports_only_torch_the_stdlib_and_the_runtime():
    tree = ast.parse((ROOT / "labs/exercises/runtime/drivers/sharded_optimizer.py").read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= {"__future__", "torch", "gc", "drivers", "guard"}, names


def test_starter_has_the_signature_and_is_not_an_answer():
    source = (folder(ID) / "starter.py").read_text("utf-8")
    defined = {n.name for n in ast.parse(source).body if isinstance(n, ast.ClassDef)}
    assert "ShardedOptimizer" in defined and "TODO" in source and "NotImplementedError" in source
    assert "broadcast(" not in source and "all_gather(" not in source


# --------------------------------------------------------------------------
# Real grading on ranks in the sandbox: four gradings here, the heap walk's below


def grade(source: str, case_ids=None) -> GradeReport:
    return grader.grade(ID, source, seed=SEED, mode=sandbox_mode(), case_ids=case_ids)


@pytest.mark.slow
def test_the_reference_passes_every_case_and_the_report_gives_the_bytes():
    report_ = passing_report(ID, seed=SEED)  # asserts that it passed
    assert sorted(c.id for c in report_.cases) == sorted(c["id"] for c in load(ID).cases(SEED))
    for case in report_.cases:
        wire = next(f for f in case.findings if f.key == "zero_wire").values
        # A broadcast per parameter: every parameter's bytes leave its owner once.
        assert wire["sent"] == wire["params"] * 3 and wire["received"] == wire["sent"] * (case.world_size - 1)
        state = next(f for f in case.findings if f.check == "state").values
        assert 0 < state["held"] <= state["limit"] < state["total"]


# The case with a weight larger than the rest, and the one with more ranks than parameters.
FEW = ["w2-big-sgd", "w4-few-adam"]


@pytest.mark.slow
def test_a_rank_that_keeps_the_whole_state_fails_naming_its_bytes():
    report_ = grade((FIXTURES / "zero_wrong_full_state.py").read_text("utf-8"), FEW)
    assert report_.error is None and failing(report_) == {c: ["zero_state_too_large"] for c in FEW}
    for case in report_.cases:
        state = next(f for f in case.findings if f.check == "state").values
        assert state["held"] == state["total"] > state["limit"]


@pytest.mark.slow
def test_parameters_never_sent_leave_the_ranks_apart():
    report_ = grade((FIXTURES / "zero_wrong_never_sent.py").read_text("utf-8"), FEW)
    assert report_.error is None and sorted(failing(report_)) == sorted(FEW)
    assert all(found[0] == "zero_weights_differ" for found in failing(report_).values())


@pytest.mark.slow
def test_owners_that_disagree_between_ranks_are_named():
    report_ = grade((FIXTURES / "zero_wrong_owners_disagree.py").read_text("utf-8"), ["w3-mlp-adam"])
    assert report_.error is None
    [finding] = report_.cases[0].findings
    assert finding.key == "broadcast_sources_differ" and finding.values["sources"] == "0, 1, 2"


# --------------------------------------------------------------------------
# The Exercises page, with the real catalog (no fakes): listed, and opened in every language


@pytest.mark.parametrize("lang", LANGS)
def test_the_exercises_page_lists_it_and_opens_its_statement_and_starter(app_db, lang):  # noqa: ARG001
    from tests.factories import learner
    from tests.test_exercises_page import in_editor
    from tests.test_exercises_page import texts as page_texts

    at = open_page("exercises", lang, learner(), exercise=ID)
    assert not at.exception, at.exception
    page, t = page_texts(at), texts(ID, lang)
    assert t["title"] in page and t["statement"].split("\n")[0][:40] in page
    assert "class ShardedOptimizer" in in_editor(at)
    assert "dist.broadcast(param.data, src=rank)" not in page  # the reference only after a pass


@pytest.mark.slow
def test_the_drivers_heap_walk_is_refused_to_the_learners_code():
    report_ = grade((FIXTURES / "zero_wrong_walks_the_heap.py").read_text("utf-8"), ["w2-few-adam"])
    [finding] = report_.cases[0].findings
    assert finding.key == "guard_refused" and finding.values["call"] == "gc.get_objects"
