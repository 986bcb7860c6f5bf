"""The message-pattern classifier (labs/exercises/patterns.py) and the ring exercise's pattern rule.

Pure functions of the router's log, tested on the sends the textbook
algorithms make (no processes): each family is named, the ring passes in
every split and direction, a pipelined ring passes, and every other family
fails the ring exercise with where it left the ring and its cost in the
alpha-beta model, in every language.
"""

from __future__ import annotations

import math

import pytest
import torch

from academy import content
from labs import model
from labs.exercises import load, messages, patterns
from labs.exercises.ring_allreduce import exercise as ring_ex

LANGS = ("en", "zh", "nl")
CONTENT = content.path(content.EXERCISES)


def tensor_split(numel: int, n: int) -> list[int]:
    return [c.numel() for c in torch.tensor_split(torch.empty(numel), n)]


def ceil_split(numel: int, n: int) -> list[int]:
    per = -(-numel // n)
    return [max(0, min(per, numel - i * per)) for i in range(n)]


def ring(n: int, numel: int, elem: int = 4, split=tensor_split, step: int = 1, pieces: int = 1) -> list:
    """Each rank's sends in a ring all-reduce going r -> r + step, each chunk in ``pieces`` messages."""
    sizes = split(numel, n)
    out = []
    for r in range(n):
        chunks = [sizes[(r - step * s) % n] for s in range(n - 1)]
        chunks += [sizes[(r + step - step * s) % n] for s in range(n - 1)]
        msgs = []
        for c in chunks:
            msgs += [(c // pieces + (i < c % pieces)) * elem for i in range(pieces)] if pieces > 1 else [c * elem]
        out.append([((r + step) % n, b) for b in msgs])
    return out


def direct(n: int, numel: int, elem: int = 4) -> list:
    """Reduce-scatter straight to each chunk's owner, then all-gather straight from it."""
    sizes = tensor_split(numel, n)
    return [[(c, sizes[c] * elem) for c in range(n) if c != r] + [(p, sizes[r] * elem) for p in range(n) if p != r]
            for r in range(n)]


def halving(n: int, size: int) -> list:
    """Recursive halving (reduce-scatter), then recursive doubling (all-gather): partners r XOR 2^k."""
    rounds = n.bit_length() - 1
    out = []
    for r in range(n):
        down = [(r ^ (n >> (k + 1)), size >> (k + 1)) for k in range(rounds)]
        out.append(down + down[::-1])
    return out


def binomial_tree(size: int) -> list:
    """Four ranks: a reduction up a binomial tree to rank 0 and a broadcast back down."""
    return [[(2, size), (1, size)], [(0, size)], [(0, size), (3, size)], [(2, size)]]


def gather(n: int, size: int) -> list:
    return [[(p, size) for p in range(1, n)]] + [[(0, size)] for _ in range(1, n)]


# --------------------------------------------------------------------------
# All-reduce families


@pytest.mark.parametrize("split", [tensor_split, ceil_split])
def test_a_ring_is_a_ring_in_every_split_size_and_direction(split):
    for n in (2, 3, 4, 5, 6):
        for numel in (1, 2, 7, 10, 16, 1001):
            for step in (1, -1):
                found = patterns.allreduce(n, ring(n, numel, split=split, step=step))
                assert found["family"] == "ring" and found["left"] is None, (n, numel, step, found)
                assert found["messages"] == 2 * (n - 1)


def test_a_ring_in_another_order_of_the_ranks_is_a_ring():
    order = [0, 2, 1, 3]  # 0 -> 2 -> 1 -> 3 -> 0
    succ = {order[i]: order[(i + 1) % 4] for i in range(4)}
    sends = [[(succ[r], 8)] * 6 for r in range(4)]
    assert patterns.allreduce(4, sends)["family"] == "ring"


def test_a_whole_buffer_ring_is_a_ring_and_left_to_the_bytes_rule():
    sends = [[((r + 1) % 4, 40)] * 3 for r in range(4)]
    assert patterns.allreduce(4, sends)["family"] == "ring"


def test_a_pipelined_ring_passes_and_extra_messages_do_not():
    sends = ring(4, 1027, pieces=3)
    found = patterns.allreduce(4, sends, chunk=257 * 4)
    assert found["family"] == "pipelined_ring" and found["messages"] == 18
    # More messages than a ring's, one of them larger than any chunk: not segments of one.
    extra = ring(4, 10)
    extra[2] = extra[2] + [(3, 40)]
    found = patterns.allreduce(4, extra, chunk=12)
    assert found["family"] == "extra"
    assert found["left"] == {"rank": 2, "step": 7, "peer": 3, "expected": 3}


@pytest.mark.parametrize("n", [3, 4, 6])
def test_a_direct_reduce_scatter_and_all_gather_is_named_and_where_it_left_the_ring(n):
    found = patterns.allreduce(n, direct(n, 10 * n))
    assert found["family"] == "direct"
    # Rank 0's first message goes to rank 1, the ring's way; rank 1's first goes back to rank 0.
    assert found["left"] == {"rank": 1, "step": 1, "peer": 0, "expected": 2}


def test_each_other_family_is_named():
    assert patterns.allreduce(4, halving(4, 64))["family"] == "halving"
    assert patterns.allreduce(8, halving(8, 64))["family"] == "halving"
    assert patterns.allreduce(4, binomial_tree(40))["family"] == "tree"
    assert patterns.allreduce(4, gather(4, 40))["family"] == "gather"
    assert patterns.allreduce(3, gather(3, 40))["family"] == "gather"
    two_rings = [[(2, 8)] * 6, [(3, 8)] * 6, [(0, 8)] * 6, [(1, 8)] * 6]  # 0 <-> 2 and 1 <-> 3
    assert patterns.allreduce(4, two_rings)["family"] == "other"
    silent = ring(4, 10)
    silent[3] = []
    found = patterns.allreduce(4, silent)
    assert found["family"] == "silent" and found["left"] == {"rank": 3, "step": 1, "peer": None, "expected": 0}


def test_the_cost_in_the_alpha_beta_model():
    n, s = 4, 40
    ring_cost = {"ring_steps": 6, "ring_bytes": 60}
    assert ring_cost["ring_bytes"] == model.bus_factor("all_reduce", n) * s
    assert patterns.cost("ring", n, s, ring(n, 10)) == {"steps": 6, "bytes": 60, **ring_cost}
    # A direct exchange: the ring's steps and bytes (here, where the chunks are equal).
    assert patterns.cost("direct", n, 48, direct(n, 12)) == {"steps": 6, "bytes": 72, "ring_steps": 6, "ring_bytes": 72}
    assert patterns.cost("halving", n, s, halving(n, s)) == {"steps": 4, "bytes": 60, **ring_cost}
    assert patterns.cost("tree", n, s, binomial_tree(s)) == {"steps": 4, "bytes": 160, **ring_cost}
    assert patterns.cost("gather", n, s, gather(n, s)) == {"steps": 6, "bytes": 240, **ring_cost}
    # Another pattern: what the log shows, the busiest rank's messages and bytes either way.
    assert patterns.cost("other", 3, 12, [[(1, 4), (2, 4)], [(0, 4)], []]) == \
        {"steps": 2, "bytes": 8, "ring_steps": 4, "ring_bytes": 16}
    assert patterns.cost("ring", 3, 28, ring(3, 7))["ring_bytes"] == 37.3  # 2(n-1)/n x S, one decimal


# --------------------------------------------------------------------------
# The ring exercise's rule and its messages


def _ranks(n: int, numel: int, sends: list) -> tuple[dict, list[dict]]:
    case = {"id": "t", "world_size": n, "shape": [numel], "dtype": "float32"}
    ranks = [{"rank": r, "calls": [{"op": "isend", "peer": p, "bytes": b} for p, b in s],
              "sent": sum(b for _, b in s), "received": 0, "expected": {"values": [0.0] * numel}}
             for r, s in enumerate(sends)]
    return case, ranks


def test_the_ring_exercise_passes_rings_and_fails_the_rest_with_their_message():
    for n in (3, 4):
        assert ring_ex.pattern_check(*_ranks(n, 10, ring(n, 10)))["passed"]
        assert ring_ex.pattern_check(*_ranks(n, 1027, ring(n, 1027, pieces=4)))["passed"]
    # Floor-sized chunks keep the remainder in the last one (259 of 1027 on 4 ranks, above the
    # ceil-sized 257): a pipelined ring that cuts only that one is still a ring.
    floor = ring(4, 1027, split=lambda m, n: [m // n] * (n - 1) + [m - (n - 1) * (m // n)])
    cut = [[(p, b) for p, whole in s for b in ([258 * 4, 4] if whole == 259 * 4 else [whole])] for s in floor]
    assert max(len(s) for s in cut) > 6 and ring_ex.pattern_check(*_ranks(4, 1027, cut))["passed"]
    finding = ring_ex.pattern_check(*_ranks(4, 10, direct(4, 10)))
    assert not finding["passed"] and finding["key"] == "pattern_direct"
    # Rank 0 sends chunks of 12, 8 and 8 bytes out and its own 12 to three ranks: 64 bytes, each way.
    assert finding["values"] == {"rank": 1, "step": 1, "peer": 0, "expected": 2, "steps": 6, "bytes": 64,
                                 "ring_steps": 6, "ring_bytes": 60, "world_size": 4, "size": 40, "messages": 6}
    for sends, key in ((halving(4, 40), "pattern_halving"), (binomial_tree(40), "pattern_tree"),
                       (gather(4, 40), "pattern_gather")):
        assert ring_ex.pattern_check(*_ranks(4, 10, sends))["key"] == key
    # Two ranks: one other rank to send to, so every exchange is a ring.
    assert ring_ex.pattern_check(*_ranks(2, 10, [[(1, 40)], [(0, 40)]]))["passed"]


def _failing_findings() -> list[dict]:
    extra = ring(4, 10)
    extra[1] = extra[1] + [(2, 40)]
    silent = ring(4, 10)
    silent[2] = []
    cases = [direct(4, 10), halving(4, 40), binomial_tree(40), gather(4, 40), extra, silent,
             [[(2, 4)] * 6, [(3, 4)] * 6, [(0, 4)] * 6, [(1, 4)] * 6]]
    return [ring_ex.pattern_check(*_ranks(4, 10, sends)) for sends in cases]


def test_every_family_that_is_no_ring_has_its_own_finding():
    assert sorted(f["key"] for f in _failing_findings()) == sorted(ring_ex.PATTERN_KEYS.values())
    assert set(ring_ex.PATTERN_KEYS) | set(patterns.RINGS) == set(patterns.ALLREDUCE_FAMILIES)


@pytest.mark.parametrize("lang", LANGS)
def test_every_pattern_message_renders_in_every_language_with_its_values(lang):
    own = content.load(CONTENT / lang / "ring-allreduce.yaml")["feedback"]
    for finding in _failing_findings():
        assert finding["key"] in own, (lang, finding["key"])  # the language's own words, not English's
        template = messages.template(finding["key"], lang, "ring-allreduce")
        assert messages.placeholders(template) <= set(finding["values"]), (lang, finding)
        shown = messages.text(finding["key"], lang, "ring-allreduce", **finding["values"])
        assert "{" not in shown and str(finding["values"]["rank"]) in shown
    for family in patterns.ALLREDUCE_FAMILIES:
        assert own.get(f"family_{family}"), (lang, family)
    bcast = content.load(CONTENT / lang / "broadcast.yaml")["feedback"]
    for family in patterns.BROADCAST_FAMILIES:
        assert bcast.get(f"family_{family}"), (lang, family)
    shown = messages.text("pattern_shown", lang, case="w4-n10-float32", world_size=4,
                          family=messages.text("family_direct", lang, "ring-allreduce"))
    assert "w4-n10-float32" in shown and "{" not in shown


def test_the_report_names_the_pattern_of_the_traced_case():
    ex = load("ring-allreduce")
    case, ranks = _ranks(4, 10, direct(4, 10))
    assert ex.pattern(case, ranks) == {"family": "direct", "world_size": 4, "messages": 6}
    assert ex.PATTERN_CASE == ex.TRACE_CASE  # the family goes beside the animation of that case


# --------------------------------------------------------------------------
# Broadcast families


def test_broadcast_families():
    s = 40
    star = [[], [(0, s), (2, s), (3, s)], [], []]
    assert patterns.broadcast(4, 1, star) == {"family": "star", "world_size": 4, "depth": 1}
    chain = [[(1, s)], [], [(3, s)], [(0, s)]]  # 2 -> 3 -> 0 -> 1
    assert patterns.broadcast(4, 2, chain) == {"family": "chain", "world_size": 4, "depth": 3}
    pipeline = [[(1, s // 2)] * 2, [], [(3, s // 2)] * 2, [(0, s // 2)] * 2]
    assert patterns.broadcast(4, 2, pipeline)["family"] == "pipeline"
    tree = [[(1, s), (2, s)], [(3, s)], [], []]  # the reference's binomial tree from rank 0
    assert patterns.broadcast(4, 0, tree) == {"family": "tree", "world_size": 4, "depth": 2}
    # Scatter then all-gather: a rank hears from several ranks.
    scatter_gather = [[(1, 10), (2, 10), (3, 10)], [(2, 10), (3, 10)], [(1, 10), (3, 10)], [(1, 10), (2, 10)]]
    assert patterns.broadcast(4, 0, scatter_gather)["family"] == "other"
    assert patterns.broadcast(4, 0, [[(1, s)], [(2, s)], [], []])["family"] == "other"  # rank 3 heard nothing
    assert patterns.broadcast(4, 0, [[(1, s), (2, s), (3, s)], [(0, s)], [], []])["family"] == "other"  # back to src
    assert patterns.broadcast(2, 1, [[], [(0, s)]])["family"] == "star"  # two ranks: one message


def test_broadcast_reports_the_family_of_its_pattern_case():
    ex = load("broadcast")
    case = next(c for c in ex.cases(1) if c["id"] == ex.PATTERN_CASE)
    assert case["world_size"] == 4
    v = [(r - case["src"]) % 4 for r in range(4)]
    sends = [[] for _ in range(4)]
    for r in range(4):  # the reference's binomial tree, numbered from src
        step = 1
        while step < 4:
            if v[r] < step and v[r] + step < 4:
                sends[r].append(((v[r] + step + case["src"]) % 4, 40))
            step *= 2
    ranks = [{"rank": r, "calls": [{"op": "send", "peer": p, "bytes": b} for p, b in s]} for r, s in enumerate(sends)]
    assert ex.pattern(case, ranks)["family"] == "tree"
    assert math.isclose(math.log2(4), patterns.broadcast(4, case["src"], sends)["depth"])
