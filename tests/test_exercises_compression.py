"""Exercise 7, compression-hook: top-k with error feedback, graded on bytes, replicas and its effect.

The checks on hand-made results (fast); the grading on real ranks in the
sandbox, kept to seven gradings: the reference on every case, a hook without
error feedback on two cases, a dense all-reduce, twice the budget, values
without indices, and two red-team submissions (local training behind the
right byte count; information put in the sizes of all-gathers, which the
closed router refuses to echo) on one case each (``tests/fixtures/exercises/more/compress_*.py``). The case
seeds come from the grading's seed, which the ranks never see.
"""

from __future__ import annotations

import ast
import json
import math
import sys

import pytest
import torch

from labs.exercises import EXERCISES, REQUIRED_FOR_CERTIFICATE, grader, messages, reference
from labs.exercises.compression_hook import exercise as ex
from labs.exercises.report import GradeReport
from labs.model import topk_bytes
from tests.apptest import open_page
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
from tests.test_terminology import report

ID = "compression-hook"
SEED = 5


# --------------------------------------------------------------------------
# The checks on results made by hand


def case(world: int = 2) -> dict:
    return next(c for c in ex.cases(SEED) if c["world_size"] == world)


def expected(numels=(132, 288), losses=(0.4, 0.95, 0.42)) -> dict:
    return {"numels": list(numels), "k": [ex.topk_count(n, ex.DENSITY) for n in numels],
            "loss": dict(zip(("fp32", "noef", "ef"), losses, strict=True)), "initial": 1.4,
            "eval": {"x": [[0.0] * 8], "y": [0]}}


def weights(scale: float = 0.0) -> dict:
    """The driver's report of an MLP 8 -> 32 -> 4 (flat lists by name)."""
    return {"0.weight": [scale] * 256, "0.bias": [0.0] * 32, "2.weight": [0.0] * 128, "2.bias": [0.0] * 4}


def ranks(calls_per_step: list[tuple[str, int]], *, world: int = 2, steps: int = 40, params=None,
          exp=None) -> list[dict]:
    calls = [{"op": op, "bytes": n} for _ in range(steps) for op, n in calls_per_step]
    return [{"rank": r, "expected": exp or expected(), "result": {"params": (params or [weights()] * world)[r]},
             "calls": calls, "sent": 0, "received": 0} for r in range(world)]


def keys(found: list[dict]) -> list[str]:
    return [f["key"] for f in found if not f["passed"]]


K = ex.topk_count(132, ex.DENSITY) + ex.topk_count(288, ex.DENSITY)  # 3 + 6 entries per step
HONEST = [("all_gather", 4 * 3), ("all_gather", 4 * 3), ("all_gather", 4 * 6), ("all_gather", 4 * 6)]


def test_the_budget_is_k_values_and_k_indices_per_bucket():
    assert ex.budget([132, 288]) == (8 * K, 12 * K) == (72, 108)
    assert ex.budget([132, 288])[0] == topk_bytes([132, 288], ex.DENSITY)  # the lab's formula, labs.model


def test_the_checks_pass_an_honest_hook_and_name_each_way_to_miss():
    c = case()
    with_loss = lambda losses: expected(losses=losses)  # noqa: E731
    found = ex.check(c, ranks(HONEST, exp=with_loss((0.9, 1.0, 0.92))))
    assert keys(found) == ["compress_loss_high", "compress_no_residual"]  # the weights of zeros: ln 4 = 1.39
    good = ex.check(c, ranks(HONEST, exp=with_loss((1.35, 1.6, 1.36))))
    assert keys(good) == [] and good[0]["values"]["bytes"] == 8 * K
    assert keys(ex.check(c, ranks([("all_reduce", 4 * 420)], exp=with_loss((1.35, 1.6, 1.36))))) == ["compress_dense"]
    assert keys(ex.check(c, ranks([("all_gather", 4 * 3), ("all_gather", 4 * 6)],
                                  exp=with_loss((1.35, 1.6, 1.36))))) == ["compress_no_indices"]
    assert keys(ex.check(c, ranks([("all_gather", 16 * K)], exp=with_loss((1.35, 1.6, 1.36))))) == \
        ["compress_bytes_wrong"]
    apart = ranks(HONEST, params=[weights(), weights(0.5)], exp=with_loss((1.35, 1.6, 1.36)))
    assert keys(ex.check(c, apart)) == ["compress_replicas_differ"]


def test_the_loss_is_scored_outside_torch_as_torch_scores_it():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    x, y = torch.randn(20, 8), torch.randint(0, 4, (20,))
    flat = {name: p.detach().reshape(-1).tolist() for name, p in model.named_parameters()}
    want = float(torch.nn.functional.cross_entropy(model(x), y))
    assert ex.eval_loss(flat, {"x": x.tolist(), "y": y.tolist()}) == pytest.approx(want, rel=1e-6)
    assert ex.eval_loss({"0.weight": [1.0]}, {"x": x.tolist(), "y": y.tolist()}) == math.inf  # not the model
    assert ex.eval_loss(dict(flat, **{"2.bias": [math.nan] * 4}), {"x": x.tolist(), "y": y.tolist()}) == math.inf


def driver():
    sys.path.insert(0, str(ROOT / "labs" / "exercises" / "runtime"))
    try:
        from drivers import compression_hook
    finally:
        sys.path.pop(0)
    return compression_hook


def test_the_harness_references_separate_on_every_hidden_seed_we_tried():
    """The grade's two thresholds sit between the references: top-k with error feedback ends
    within GAP of fp32 and top-k without it far above, with room on both sides (measured:
    over 900 cases from 300 seeds, ef - fp32 <= 0.041 and noef - ef >= 0.287)."""
    d = driver()
    for c in ex.cases(12345)[:2]:
        refs = d.expected(c, c["world_size"], d.inputs(c, c["world_size"]))[0]["loss"]
        assert refs["ef"] - refs["fp32"] < ex.GAP / 2 and refs["noef"] - refs["ef"] > 2 * ex.MARGIN, (c["id"], refs)


def test_the_references_trained_together_are_the_references_trained_one_by_one():
    """`expected` trains the three references as one batched stack with the backward written
    out (`_train_together`); `_train`, one rank and one mode at a time with autograd, is what
    it stands for. Same losses to float rounding, on every case's world size and width."""
    d = driver()
    for c in ex.cases(SEED):
        world = c["world_size"]
        shares = d.inputs(c, world)
        x, y = d._eval_set(c)
        together = d._train_together(c, world, shares)
        for mode in d.MODES:
            assert d._loss(together[mode], x, y) == pytest.approx(d._loss(d._train(c, world, shares, mode), x, y),
                                                                 abs=1e-5), (c["id"], mode)


# --------------------------------------------------------------------------
# Registry, texts, code that goes where it should


def test_it_is_an_exercise_but_not_one_the_certificate_requires():
    assert ID in EXERCISES and ID not in REQUIRED_FOR_CERTIFICATE


def test_every_language_has_the_whole_text_and_every_message():
    check_texts(ID, emitted_keys(ID), hints=4)


@pytest.mark.parametrize("lang", LANGS)
def test_texts_follow_the_glossary(lang):
    found = glossary_findings([ID], lang)
    assert found == [], report(found)


def test_every_message_renders_with_the_values_its_finding_gives():
    c = case()
    made = []
    for calls, params, losses in ((HONEST, None, (1.35, 1.6, 1.36)), (HONEST, None, (0.9, 1.0, 0.92)),
                                  ([("all_reduce", 1680)], None, (1.35, 1.6, 1.36)),
                                  ([("all_gather", 36)], None, (1.35, 1.6, 1.36)),
                                  ([("all_gather", 999)], [weights(), weights(1.0)], (1.35, 1.6, 1.36))):
        made += ex.check(c, ranks(calls, params=params, exp=expected(losses=losses)))
    assert {f["key"] for f in made} == emitted_keys(ID)
    for finding in made:
        for lang in LANGS:
            template = messages.template(finding["key"], lang, ID)
            assert template and messages.placeholders(template) <= set(finding["values"]), (lang, finding)
            assert "{" not in messages.text(finding["key"], lang, ID, **finding["values"])
        json.dumps(finding)


def test_the_driver_imports_only_torch_the_stdlib_and_the_runtime():
    tree = ast.parse((ROOT / "labs/exercises/runtime/drivers/compression_hook.py").read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= {"__future__", "torch", "math", "drivers"}, names


def test_starter_has_the_signature_and_is_not_an_answer():
    source = (folder(ID) / "starter.py").read_text("utf-8")
    defined = {n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}
    assert "topk_hook" in defined and "TODO" in source and "NotImplementedError" in source
    assert "all_gather(" not in source and "topk(" not in source and "residual" not in source.split("TODO")[0]


# --------------------------------------------------------------------------
# Real grading on ranks in the sandbox


def grade(source: str, case_ids=None) -> GradeReport:
    return grader.grade(ID, source, seed=SEED, mode=sandbox_mode(), case_ids=case_ids)


def fixture(name: str) -> str:
    return (FIXTURES / f"compress_{name}.py").read_text("utf-8")


@pytest.mark.slow
def test_the_reference_passes_every_case_with_its_bytes_and_error_feedbacks_effect():
    report_ = grade(reference(ID))
    assert report_.status == "passed", report_.model_dump_json(indent=1)[:3000]
    assert sorted(c.id for c in report_.cases) == sorted(c["id"] for c in ex.cases(SEED))
    for c in report_.cases:
        found = {f.key: f.values for f in c.findings}
        numels = [132, 288] if c.id.endswith("h32") else [196, 432]
        assert found["compress_bytes_ok"]["bytes"] == ex.budget(numels)[0]  # int32 indices: 8k per bucket
        loss = found["compress_converged"]
        assert loss["loss"] <= loss["fp32"] + ex.GAP and loss["loss"] <= loss["noef"] - ex.MARGIN


@pytest.mark.slow
def test_without_error_feedback_the_same_bytes_converge_worse_and_the_feedback_says_so():
    report_ = grade(fixture("wrong_no_feedback"), ["w2-h32", "w4-h32"])
    assert report_.error is None
    assert failing(report_) == {i: ["compress_loss_high", "compress_no_residual"] for i in ("w2-h32", "w4-h32")}
    for c in report_.cases:
        found = {f.key: f.values for f in c.findings}
        assert "compress_bytes_ok" in found and "compress_replicas_ok" in found  # the bytes were right
        assert found["compress_no_residual"]["loss"] == pytest.approx(found["compress_no_residual"]["noef"], abs=0.02)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "key"), [("wrong_dense", "compress_dense"), ("wrong_bytes", "compress_bytes_wrong"),
                                           ("wrong_no_indices", "compress_no_indices")])
def test_a_hook_that_sends_the_wrong_bytes_fails_naming_how(name, key):
    report_ = grade(fixture(name), ["w3-h48"])
    assert report_.error is None and failing(report_)["w3-h48"][0] == key


@pytest.mark.slow
def test_red_team_local_training_behind_the_right_byte_count_leaves_the_replicas_apart():
    report_ = grade(fixture("cheat_local"), ["w2-h32"])
    assert failing(report_) == {"w2-h32": ["compress_replicas_differ"]}


@pytest.mark.slow
def test_red_team_all_gathers_of_other_sizes_end_the_case_before_any_rank_learns_them():
    """The closed router: ranks whose all-gathers differ in size are a protocol failure; no
    rank is told the others' sizes (a rank that catches an exception hears nothing)."""
    report_ = grade(fixture("cheat_sizes"), ["w2-h32"])
    assert failing(report_) == {"w2-h32": ["protocol_collective_mismatch"]}


# --------------------------------------------------------------------------
# The Exercises page, with the real catalog: listed, and opened in every language


@pytest.mark.parametrize("lang", LANGS)
def test_the_exercises_page_lists_it_and_opens_its_statement_and_starter(app_db, lang):  # noqa: ARG001
    from tests.test_exercises_page import in_editor, learner
    from tests.test_exercises_page import texts as page_texts

    at = open_page("exercises", lang, learner(), exercise=ID)
    assert not at.exception, at.exception
    page, t = page_texts(at), texts(ID, lang)
    assert t["title"] in page and t["statement"].split("\n")[0][:40] in page
    assert "def topk_hook(state, bucket)" in in_editor(at)
    assert "index_add_(0, rank_indices" not in page  # the reference only after a pass
