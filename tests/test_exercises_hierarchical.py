"""Exercise 8, hierarchical-allreduce (issue #40): the router's link classes, the checks, texts, grading.

Cheapest first: the router counting bytes per link class from the harness's
node map (pipes and frames, no sandbox); the checks on rank records written
from ``labs.simclock``'s schedules (the honest hierarchical all-reduce, a flat
ring, a root gather, phases out of order, a leader per node, a rail crossed
wrongly); the texts; then four gradings on real ranks in the sandbox: the
reference on every case (and its simulated clock the same for another seed),
and a flat ring, a root gather and a wrong phase order, each on two cases,
failing with the finding that names their phase. Red-team: a rank's own
claims of link classes, or a rewritten map, change nothing the router counts.
"""

from __future__ import annotations

import ast
import json

import pytest
import torch

from labs import simclock
from labs.exercises import EXERCISES, REQUIRED_FOR_CERTIFICATE, grader, load, messages, reference
from labs.exercises.report import GradeReport
from tests.apptest import open_page
from tests.factories import finished_run
from tests.test_exercises_more import (
    FIXTURES,
    LANGS,
    ROOT,
    check_texts,
    emitted_keys,
    failing,
    folder,
    glossary_findings,
    sandbox_mode,
    texts,
)
from tests.test_exercises_router import Rank, pump, routing, tensor_bytes, world  # noqa: F401 - world: a fixture
from tests.test_terminology import report

ID = "hierarchical-allreduce"
SEED = 5
ex = load(ID)


# --------------------------------------------------------------------------
# The router counts each send on the link class the harness's map gives it


@pytest.fixture
def routed(world):  # noqa: F811 - the imported fixture, asked for by name
    """A router over ``n`` hand-driven ranks allowed point-to-point calls; each test sets its bounds."""
    return lambda n: world(n, allowed=("send", "isend", "recv", "irecv"))


def test_the_router_counts_bytes_per_link_class_from_the_harness_map_alone(routed):
    r, ranks = routed(4)
    r.reset(routing.Bounds(message_bytes=64, tags=8, node_of=(0, 1, 0, 1)))  # interleaved: 0 and 2 on node 0
    payload = tensor_bytes(torch.arange(4, dtype=torch.float32))
    # Rank 0 claims its send to rank 1 stays inside the node: the router does not read that.
    ranks[0].write({"t": "isend", "id": 1, "dst": 1, "tag": 0, "link": "intra"}, payload)
    ranks[0].write({"t": "isend", "id": 2, "dst": 2, "tag": 0}, payload[:8])
    ranks[1].write({"t": "recv", "id": 1, "src": 0, "tag": 0, "n": 16})
    ranks[2].write({"t": "recv", "id": 1, "src": 0, "tag": 0, "n": 8})
    pump(r)
    seen = r.traffic(0)
    assert seen["sent_by_link"] == {"inter": 16, "intra": 8} and seen["sent"] == 24
    assert [c["link"] for c in seen["calls"]] == ["inter", "intra"]
    # Replies depend on the rank's own frames only: both sends complete, nothing else arrives.
    assert sorted(h["id"] for h, _ in ranks[0].read()) == [1, 2]
    r.reset(routing.Bounds(message_bytes=64, tags=8))  # a case of another exercise: no map, no classes
    assert "sent_by_link" not in r.traffic(0)


def test_a_map_that_does_not_name_every_rank_is_refused(routed):
    r, _ranks = routed(4)
    with pytest.raises(ValueError, match="node of each"):
        r.reset(routing.Bounds(message_bytes=64, tags=8, node_of=(0, 1)))


# --------------------------------------------------------------------------
# The checks, on rank records written from a message log


def case_of(case_id: str) -> dict:
    return next(c for c in ex.cases(SEED) if c["id"] == case_id)


def records(case: dict, log: simclock.Log, *, right: bool = True) -> list[dict]:
    """What the grader hands ``check`` for ``log`` run on ``case``'s map: the router's calls with
    their link classes and counts, and values that are right (or, with ``right=False``, not)."""
    _m, _k, where, _local = ex.layout(case)
    n = 1
    for d in case["shape"]:
        n *= d
    out = []
    for rank, ops in enumerate(log):
        calls = [{"op": "isend" if kind == "send" else "recv", "peer": peer, "bytes": int(nbytes),
                  "link": "intra" if where[rank] == where[peer] else "inter", "t_start": 0.0, "t_end": 0.0}
                 for kind, peer, nbytes in ops]
        sends = [c for c in calls if c["op"] == "isend"]
        expected = {"values": [float(i) for i in range(n)], "abs_sum": [1.0] * n}
        values = expected["values"] if right else [v + 1 for v in expected["values"]]
        out.append({"rank": rank, "expected": expected, "calls": calls,
                    "sent": sum(c["bytes"] for c in sends), "received": 0,
                    "sent_by_link": {"intra": sum(c["bytes"] for c in sends if c["link"] == "intra"),
                                     "inter": sum(c["bytes"] for c in sends if c["link"] == "inter")},
                    "result": {"values": values, "shape": case["shape"], "dtype": case["dtype"],
                               "same_storage": True, "returned": None}})
    return out


def failed_keys(found: list[dict]) -> list[str]:
    return [f["key"] for f in found if not f["passed"]]


CONTIGUOUS = ["w4-2x2-n8-float32", "w6-2x3-n12-float32", "w6-3x2-n25-float32", "w4-4x1-n10-float32",
              "w4-1x4-n10-float32"]


@pytest.mark.parametrize("case_id", CONTIGUOUS)
def test_an_honest_hierarchical_all_reduce_passes_and_a_flat_ring_does_not(case_id):
    case = case_of(case_id)
    m, k, _where, _local = ex.layout(case)
    size = 4 * len(records(case, [[]] * case["world_size"])[0]["expected"]["values"])
    found = ex.check(case, records(case, simclock.schedule("hierarchical", m, k, size)))
    assert failed_keys(found) == []
    flat = failed_keys(ex.check(case, records(case, simclock.schedule("flat", m, k, size))))
    if m > 1 and k > 1:
        assert flat == ["hier_inter_flat", "phase_left_early"], flat
    else:  # one rank per node, or one node: the flat ring is the hierarchical all-reduce
        assert flat == []


def log_for(case: dict, pattern) -> simclock.Log:
    """A log from ``pattern(rank, m, k, where, local, size)`` -> that rank's ops."""
    m, k, where, local = ex.layout(case)
    size = 4 * len(records(case, [[]] * case["world_size"])[0]["expected"]["values"])
    return [pattern(r, m, k, where, local, size) for r in range(case["world_size"])]


def root_gather(r, m, k, where, local, size):  # noqa: ARG001 - one signature for every pattern
    n = m * k
    if r == 0:
        return [("recv", p, size) for p in range(1, n)] + [("send", p, size) for p in range(1, n)]
    return [("send", 0, size), ("recv", 0, size)]


def leader_per_node(r, m, k, where, local, size):  # noqa: ARG001
    """Reduce to each node's first rank, all-reduce among the leaders, broadcast back: the right
    bytes across in total, all carried by one rank per node."""
    leader = (r // k) * k
    if r != leader:
        return [("send", leader, size), ("recv", leader, size)]
    others = [leader + i for i in range(1, k)]
    rail = [node * k for node in range(m)]
    ops = [("recv", p, size) for p in others]
    ops += simclock.ring_ops(rail, r, simclock._chunks(size, m, 4), "rs+ag")
    return ops + [("send", p, size) for p in others]


def gather_first(r, m, k, where, local, size):  # noqa: ARG001
    """Reduce-scatter and all-gather inside the node, then the rail exchanges its chunk: the
    all-gather came before the exchange across nodes."""
    inside = [(r // k) * k + i for i in range(k)]
    rail = [node * k + r % k for node in range(m)]
    chunks = simclock._chunks(size, k, 4)
    owned = chunks[(local[r] + 1) % k]
    return (simclock.ring_ops(inside, r, chunks, "rs+ag")
            + simclock.ring_ops(rail, r, simclock._chunks(owned, m, 4), "rs+ag"))


def off_rail(r, m, k, where, local, size):  # noqa: ARG001
    """The exchange across nodes pairs each rank with the other position of the other node."""
    inside = [(r // k) * k + i for i in range(k)]
    node = r // k
    partner = ((node + 1) % m) * k + (k - 1 - r % k)
    chunks = simclock._chunks(size, k, 4)
    owned = chunks[(local[r] + 1) % k]
    return (simclock.ring_ops(inside, r, chunks, "rs") + [("send", partner, owned), ("recv", partner, owned)]
            + simclock.ring_ops(inside, r, chunks, "ag"))


@pytest.mark.parametrize(("pattern", "keys"), [
    (root_gather, ["hier_inter_total", "phase_left_early"]),
    (leader_per_node, ["hier_inter_rank", "phase_left_early"]),
    (gather_first, ["phase_gather_first"]),
    (off_rail, ["phase_off_rail"]),
])
def test_each_wrong_pattern_is_named_by_its_phase(pattern, keys):
    case = case_of("w6-2x3-n12-float32")
    assert failed_keys(ex.check(case, records(case, log_for(case, pattern)))) == keys


def test_wrong_values_fail_on_values_even_with_the_right_messages():
    case = case_of("w4-2x2-n8-float32")
    log = simclock.schedule("hierarchical", 2, 2, 32)
    assert failed_keys(ex.check(case, records(case, log, right=False))) == ["values_wrong"]


# --------------------------------------------------------------------------
# Registry, texts, code where it should be


def test_it_is_an_exercise_but_not_one_the_certificate_requires():
    assert ID in EXERCISES and ID not in REQUIRED_FOR_CERTIFICATE


def test_every_language_has_the_whole_text_and_every_message():
    emitted = emitted_keys(ID)
    assert len(emitted) == 11
    check_texts(ID, emitted, hints=4, page_keys=("links_ok", "phases_ok"))


@pytest.mark.parametrize("lang", LANGS)
def test_texts_follow_the_glossary(lang):
    found = glossary_findings([ID], lang)
    assert found == [], report(found)


def test_every_message_renders_with_the_values_its_finding_gives():
    case = case_of("w6-2x3-n12-float32")
    found = []
    for pattern in (root_gather, leader_per_node, gather_first, off_rail):
        found += ex.check(case, records(case, log_for(case, pattern)))
    found += ex.check(case, records(case, simclock.schedule("hierarchical", 2, 3, 48)))
    flat_case = case_of("w4-2x2-n8-float32")
    found += ex.check(flat_case, records(flat_case, simclock.schedule("flat", 2, 2, 32)))
    for finding in found:
        if finding["check"] not in ("links", "phases"):
            continue
        for lang in LANGS:
            template = messages.template(finding["key"], lang, ID)
            assert template and messages.placeholders(template) <= set(finding["values"]), (lang, finding)
            assert "{" not in messages.text(finding["key"], lang, ID, **finding["values"])
        json.dumps(finding)


def test_the_driver_imports_only_torch_the_stdlib_and_the_runtime():
    tree = ast.parse((ROOT / "labs/exercises/runtime/drivers/hierarchical_allreduce.py").read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= {"__future__", "drivers"}, names


def test_starter_has_the_signature_and_is_not_an_answer():
    source = (folder(ID) / "starter.py").read_text("utf-8")
    defined = {n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}
    assert defined == {"hierarchical_allreduce"} and "TODO" in source and "NotImplementedError" in source
    assert "isend(" not in source and "recv(" not in source


# --------------------------------------------------------------------------
# Real grading on ranks in the sandbox


def grade(source: str, case_ids=None, seed: int = SEED) -> GradeReport:
    return grader.grade(ID, source, seed=seed, mode=sandbox_mode(), case_ids=case_ids)


@pytest.mark.slow
def test_the_reference_passes_every_case_and_its_clock_is_the_same_for_any_numbers():
    report_ = grade(reference(ID))
    assert report_.status == "passed", report_.model_dump_json(indent=1)[:3000]
    assert sorted(c.id for c in report_.cases) == sorted(c["id"] for c in ex.cases(SEED))
    clock = report_.trace
    assert clock["kind"] == "clock" and clock["case"] == ex.TRACE_CASE
    for at in clock["at"]:
        for row in at["targets"].values():  # the reference's messages are the reference schedule's
            assert row["yours"] == row["hierarchical"] < row["flat"] or at["size_bytes"] < 1 << 20
    ib = clock["at"][1]["targets"]["h100_ib"]
    assert ib["flat"] / ib["yours"] > 2  # across InfiniBand, at 64 MiB
    again = grade(reference(ID), [ex.TRACE_CASE], seed=SEED + 1).trace
    assert again["at"] == clock["at"]  # other numbers, the same messages: the same projection


TWO = ["w4-2x2-n1024-float32", "w6-2x3-n12-float32"]


@pytest.mark.slow
@pytest.mark.parametrize(("fixture", "expected"), [
    ("hier_wrong_flat_ring.py", {"w4-2x2-n1024-float32": ["hier_inter_flat", "phase_left_early"],
                                 "w6-2x3-n12-float32": ["hier_inter_flat", "phase_left_early"]}),
    ("hier_wrong_root_gather.py", {c: ["hier_inter_total", "phase_left_early"] for c in TWO}),
    ("hier_wrong_phase_order.py", {c: ["hier_inter_total", "phase_left_early"] for c in TWO}),
])
def test_a_flat_ring_a_root_gather_and_a_wrong_phase_order_fail_naming_the_phase(fixture, expected):
    report_ = grade((FIXTURES / fixture).read_text("utf-8"), TWO)
    assert report_.error is None and failing(report_) == expected, json.dumps(failing(report_))
    text = messages.text(expected[TWO[0]][-1], "en", ID,
                         **next(f for f in report_.cases[0].findings if not f.passed and f.check == "phases").values)
    assert text.startswith("Phase 1 is not finished")


# --------------------------------------------------------------------------
# The Exercises page: listed and opened in every language, and a report's simulated clock


@pytest.mark.parametrize("lang", LANGS)
def test_the_exercises_page_opens_it_and_draws_a_reports_clock(app_db, lang):  # noqa: ARG001
    from tests.test_exercises_page import in_editor, learner
    from tests.test_exercises_page import texts as page_texts

    who = learner()
    at = open_page("exercises", lang, who, exercise=ID)
    assert not at.exception, at.exception
    page, t = page_texts(at), texts(ID, lang)
    assert t["title"] in page and "def hierarchical_allreduce(tensor, nodes)" in in_editor(at)
    assert "reduce_scatter(chunks, mine)" not in page  # the reference only after a pass
    case = case_of(ex.TRACE_CASE)
    trace = ex.trace(case, records(case, simclock.schedule("hierarchical", 2, 2, 4096)))
    run_id = finished_run("exercise", {"exercise": ID, "status": "failed", "ok": False, "error": None, "cases": [],
                                       "trace": trace, "duration_s": 1.0, "sandbox": "none"},
                          params={"exercise": ID, "world_size": 4}, learner_id=who)
    at = open_page("exercises", lang, who, exercise=ID, state={f"ex_run_{ID}": run_id})
    assert not at.exception, at.exception
    from academy import i18n

    assert i18n.t("topology.ex_title", lang) in page_texts(at)
    assert len(at.get("plotly_chart")) == 2  # as run, and scaled to 64 MiB
