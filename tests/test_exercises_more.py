"""Exercises 3-5 (average-gradients, bucketed-overlap, shard-indices): checks, texts, real grading.

Three layers, cheapest first:

- the checks (``labs/exercises/<id>/exercise.py``) on hand-made rank
  results: each rule's finding, with no process started;
- the texts: every language has every message the checks can give, with the
  same placeholders, and follows its glossary;
- real grading: the reference and a solution written from scratch pass every
  case (one through ``python -m labs.exercises grade``, the others through
  ``grader.grade`` behind it; in the sandbox where it can start here, else
  with the sandbox explicitly off), and wrong solutions fail with the finding
  that names their mistake (``grader.grade``, same path).

The solutions live in ``tests/fixtures/exercises/more/``; each file's first
comment says what it does.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from academy import content
from labs.exercises import EXERCISES, grader, load, messages, reference
from labs.exercises.bucketed_overlap.exercise import buckets
from labs.exercises.report import GradeReport
from tests.exercisepass import sandbox_mode
from tests.test_terminology import LESSONS, findings, fixture_rules, report, rules_from, yaml_texts

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "exercises" / "more"
MINE = ("average-gradients", "bucketed-overlap", "shard-indices")
LANGS = ("en", "zh", "nl")
SEED = 5


def folder(exercise_id: str) -> Path:
    return ROOT / "labs" / "exercises" / exercise_id.replace("-", "_")


# --------------------------------------------------------------------------
# The checks, on hand-made results


def avg_case(world: int = 2) -> dict:
    return {"id": "t", "world_size": world, "dtype": "float32", "steps": 3, "batch": 3}


def avg_ranks(world: int, grads: dict, params: dict | None = None) -> list[dict]:
    """Every rank with the same expected values; ``grads`` is what each rank reports after the call."""
    expected = {"params": {"w": [1.0, 2.0], "b": [0.5]},
                "grads": {"w": [0.25, -0.5], "b": [0.125], "spare.w": None},
                "local_grads": {"w": [0.75, -1.0], "b": [0.5], "spare.w": None}}
    params = params or {"w": [1.0, 2.0], "b": [0.5]}
    return [{"rank": r, "expected": expected, "result": {"grads": grads, "params": params}}
            for r in range(world)]


def keys(found: list[dict]) -> list[str]:
    return [f["key"] for f in found if not f["passed"]]


def test_average_check_passes_the_mean_and_leaves_a_gradless_parameter_alone():
    ex = load("average-gradients")
    for spare in (None, [0.0]):  # left as None, or zeroed: both fine
        found = ex.check(avg_case(), avg_ranks(2, {"w": [0.25, -0.5], "b": [0.125], "spare.w": spare}))
        assert keys(found) == [] and {f["key"] for f in found} == {"avg_grads_match", "avg_matches_single"}


@pytest.mark.parametrize(("grads", "key", "param"), [
    ({"w": [0.75, -1.5], "b": [0.375]}, "avg_summed_not_divided", "w"),  # 3 ranks' sum
    ({"w": [0.25, -0.5], "b": [0.5]}, "avg_param_missed", "b"),  # b kept its local gradient
    ({"w": [0.25, -0.5], "b": None}, "avg_grad_removed", "b"),
    ({"w": [0.3, -0.5], "b": [0.125]}, "avg_grad_wrong", "w"),
])
def test_average_check_names_the_mistake(grads, key, param):
    found = load("average-gradients").check(avg_case(3), avg_ranks(3, grads))
    assert keys(found)[0] == key
    assert found[0]["values"]["param"] == param and found[0]["values"]["rank"] == 0


def test_average_check_compares_the_final_parameters_of_every_rank():
    ranks = avg_ranks(2, {"w": [0.25, -0.5], "b": [0.125]})
    ranks[1] = dict(ranks[1], result={"grads": ranks[1]["result"]["grads"],
                                      "params": {"w": [1.0, 2.001], "b": [0.5]}})
    found = load("average-gradients").check(avg_case(), ranks)
    assert keys(found) == ["avg_weights_differ"]
    assert found[1]["values"] | {"diff": "x"} == {"rank": 1, "param": "w", "diff": "x", "steps": 3,
                                                  "global_batch": 6, "tolerance": 1e-5}


SIZES = [12, 192, 64, 1024, 64, 384]  # the graded MLP's gradients, in the order backward produces them


@pytest.mark.parametrize(("cap", "count"), [(1, 6), (100, 3), (268, 3), (400, 2), (1740, 1), (1741, 1), (1 << 20, 1)])
def test_bucket_count_follows_the_statement(cap, count):
    assert buckets(SIZES, cap) == count


def bucket_ranks(calls_per_step: list[list[dict]], params_off: bool = False) -> list[dict]:
    """Each rank as the grader gets it: the harness's expected weights and gradient order, the
    router's record (a step marker, then that step's all-reduces), the driver's backward ends."""
    ready = [[f"p{i}", s] for i, s in enumerate(SIZES)]
    record = []
    for step, calls in enumerate(calls_per_step):
        record += [{"op": "step", "step": step}] + calls
    params = {"w": [1.0 + (0.1 if params_off else 0.0)]}
    return [{"rank": r, "expected": {"params": {"w": [1.0]}, "ready": ready}, "calls": record,
             "result": {"params": params, "steps": [{"backward_end": 10.0} for _ in calls_per_step]}}
            for r in range(2)]


def call(nbytes: int, in_backward: bool, t_wait: float | None) -> dict:
    """An all-reduce as the router records it; ``t_wait``: when the rank began to wait for it."""
    return {"op": "all_reduce", "bytes": nbytes, "in_backward": in_backward, "t_wait": t_wait}


BUCKET_CASE = {"id": "t", "world_size": 2, "cap": 400, "steps": 2, "batch": 3}
GOOD = [call(1292, True, 11.0), call(448, False, 11.5)]  # two buckets; the first awaited in finish()


def test_bucket_trace_draws_the_router_s_all_reduces_and_the_rank_s_backward_and_is_not_graded():
    """The report's timeline of the traced case (issue #25): each all-reduce from the moment the
    rank made it (when that is no later than the router got it) to the moment the router had it
    from every rank; backward as the rank timed it. 1 s = 1000 ms; times from the first span."""
    ranks = bucket_ranks([GOOD])
    for entry in ranks:
        entry["calls"] = [{"op": "step", "step": 0, "t_start": 0.9},
                          dict(GOOD[0], t_rank=1.2, t_start=1.25, t_end=1.5),
                          dict(GOOD[1], t_rank=9.0, t_start=1.45, t_end=1.7)]  # a t_rank after t_start: not used
        entry["result"]["steps"] = [{"start": 1.0, "forward_end": 1.1, "backward_end": 1.4, "finish_end": 1.8,
                                     "step_end": "late"}]  # not a number: left out
    exercise = load("bucketed-overlap")
    assert exercise.TRACE_CASE in {c["id"] for c in exercise.cases(SEED)}
    trace = exercise.trace(dict(BUCKET_CASE, steps=1, hidden=16), ranks)
    assert trace["kind"] == "timeline" and trace["world_size"] == 2 and trace["cap_bytes"] == 400
    spans = trace["learner"]["ranks"][0]["spans"]
    got = {(s["kind"], s["name"]): (round(s["start_ms"], 6), round(s["end_ms"], 6)) for s in spans}
    assert got == {("comm", "all_reduce 1292 B"): (200.0, 500.0), ("comm", "all_reduce 448 B"): (450.0, 700.0),
                   ("compute", "forward"): (0.0, 100.0), ("compute", "backward"): (100.0, 400.0)}
    # comm in flight 200-700 ms, during backward 200-400: overlap 200 of 500 ms
    assert trace["learner"]["overlap"] == pytest.approx(0.4) and trace["learner"]["allreduce_calls"] == 2
    # The check reads none of it: the same findings with the timings or without.
    assert keys(exercise.check(BUCKET_CASE, bucket_ranks([GOOD, GOOD]))) == []


def test_bucket_check_passes_async_buckets_started_in_backward():
    found = load("bucketed-overlap").check(BUCKET_CASE, bucket_ranks([GOOD, GOOD]))
    assert keys(found) == [] and [f["check"] for f in found] == ["params", "calls", "overlap"]


@pytest.mark.parametrize(("calls", "key"), [
    ([call(1292, False, 11.0), call(448, False, 11.5)], "bucket_no_overlap"),  # all in finish()
    ([call(1292, True, 9.0), call(448, False, 11.5)], "bucket_not_async"),  # returned inside backward
    ([call(1740, True, 11.0)], "bucket_calls_wrong"),  # one bucket where the cap gives two
    ([call(1292, True, 11.0), call(448, False, 11.5), call(12, False, 12.0)], "bucket_bytes_wrong"),
])
def test_bucket_check_names_the_mistake(calls, key):
    found = load("bucketed-overlap").check(BUCKET_CASE, bucket_ranks([GOOD, calls]))
    assert key in keys(found)
    assert next(f for f in found if f["key"] == key)["values"]["step"] == 2  # numbered from 1


def test_bucket_check_does_not_ask_one_bucket_to_overlap():
    case = dict(BUCKET_CASE, cap=1 << 20, steps=1)
    found = load("bucketed-overlap").check(case, bucket_ranks([[call(1740, False, 11.0)]]))
    assert keys(found) == [] and "overlap" not in [f["check"] for f in found]


def test_bucket_check_compares_the_final_parameters():
    found = load("bucketed-overlap").check(dict(BUCKET_CASE, steps=1), bucket_ranks([GOOD], params_off=True))
    assert keys(found) == ["bucket_weights_differ"]


def shard_case(n: int, world: int) -> dict:
    return {"id": "t", "world_size": world, "n": n, "seed": 1, "other_seed": 2}


def shard_ranks(first: list, again=None, epoch1=None, other=None) -> list[dict]:
    """What each rank's four calls returned; by default epoch 1 and the other seed reorder each shard."""
    again = again or first
    epoch1 = epoch1 or [s[::-1] for s in first]
    other = other or [s[1:] + s[:1] for s in first]
    return [{"rank": r, "expected": None,
             "result": {"first": first[r], "again": again[r], "epoch1": epoch1[r], "other_seed": other[r]}}
            for r in range(len(first))]


PERM = [7, 3, 19, 0, 12, 5, 21, 9, 14, 2, 17, 11, 1, 20, 6, 15, 8, 13, 4, 18, 10, 16]  # 22 shuffled
STRIDED = [(PERM + PERM[:2])[r::3] for r in range(3)]  # n = 22 on 3 ranks: 8 each, 2 padded


def test_shard_check_accepts_padding_by_repetition_and_any_layout():
    blocks = [(PERM + PERM[:2])[r * 8:(r + 1) * 8] for r in range(3)]
    for layout in (STRIDED, blocks):
        found = load("shard-indices").check(shard_case(22, 3), shard_ranks(layout))
        assert found == [{"check": "shards", "passed": True, "key": "shard_ok",
                          "values": {"n": 22, "per_rank": 8, "padding": 2}}]
    # smaller than the number of ranks: the one index on every rank
    assert keys(load("shard-indices").check(shard_case(1, 4), shard_ranks([[0]] * 4))) == []


@pytest.mark.parametrize(("ranks", "key"), [
    (shard_ranks([STRIDED[0], STRIDED[1], STRIDED[2][:-1]]), "shard_count"),
    (shard_ranks([STRIDED[0], STRIDED[1], STRIDED[2][:-1] + [22]]), "shard_out_of_range"),
    (shard_ranks([STRIDED[0], STRIDED[0], STRIDED[2]]), "shard_overlap"),
    (shard_ranks(STRIDED, again=[STRIDED[0][::-1], *STRIDED[1:]]), "shard_not_deterministic"),
    (shard_ranks(STRIDED, epoch1=STRIDED), "shard_same_each_epoch"),
    (shard_ranks(STRIDED, other=STRIDED), "shard_ignores_seed"),
])
def test_shard_check_names_the_broken_rule(ranks, key):
    assert keys(load("shard-indices").check(shard_case(22, 3), ranks)) == [key]


def test_shard_check_sees_a_single_index_on_two_ranks():
    """Rank 2's first index replaced by rank 0's: one repeat beyond the padding, and 19 on no rank."""
    found = load("shard-indices").check(shard_case(22, 3), shard_ranks(
        [STRIDED[0], STRIDED[1], [STRIDED[0][0]] + STRIDED[2][1:]]))
    assert found == [{"check": "disjoint", "passed": False, "key": "shard_overlap",
                      "values": {"epoch": 0, "seed": 1, "n": 22, "world_size": 3, "extra": 1, "padding": 2,
                                 "example": 19}}]


def test_shard_check_sees_an_unshuffled_order_despite_the_padding():
    order = list(range(22)) + [0, 1]
    found = load("shard-indices").check(shard_case(22, 3), shard_ranks([order[r::3] for r in range(3)]))
    assert keys(found) == ["shard_not_shuffled"]


def test_shard_check_reports_a_result_that_is_not_a_list():
    ranks = shard_ranks(STRIDED)
    ranks[2]["result"]["epoch1"] = "NoneType"  # what the driver sends for a function that returned None
    assert keys(load("shard-indices").check(shard_case(22, 3), ranks)) == ["shard_not_list"]


# --------------------------------------------------------------------------
# Texts


def texts(exercise_id: str, lang: str) -> dict:
    return content.load(content.path(content.EXERCISES, lang, f"{exercise_id}.yaml"))


PREFIX = {"average-gradients": "avg_", "bucketed-overlap": "bucket_", "shard-indices": "shard_",
          "compression-hook": "compress_", "sharded-optimizer": "zero_", "hierarchical-allreduce": "(?:hier|phase)_"}


def emitted_keys(exercise_id: str) -> set[str]:
    """The message keys the exercise's checks can give: its source's strings with the exercise's prefix."""
    ex = load(exercise_id)
    tree = ast.parse((folder(exercise_id) / "exercise.py").read_text("utf-8"))
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return {s for s in strings if re.fullmatch(rf"{PREFIX[exercise_id]}[a-z_]+", s)} - {ex.FUNCTION, ex.DRIVER}


def check_texts(exercise_id: str, emitted: set[str], *, hints: int | None = None, page_keys=()) -> None:
    """Every language has the exercise's title, summary, statement, as many hints as English
    (``hints`` of them, or at least 3), a message for each key its checks emit (and the page's
    ``page_keys``), each with English's placeholders."""
    en = texts(exercise_id, "en")
    for lang in LANGS:
        t = texts(exercise_id, lang)
        assert all(isinstance(t[k], str) and t[k].strip() for k in ("title", "summary", "statement")), lang
        assert len(t["hints"]) == len(en["hints"]), lang
        assert (len(t["hints"]) == hints) if hints else (len(t["hints"]) >= 3), lang
        assert set(t["feedback"]) == emitted | {"forbidden_call", "passed", "reference_note", *page_keys}, lang
        for key, message in t["feedback"].items():
            assert messages.placeholders(message) == messages.placeholders(en["feedback"][key]), (lang, key)


def glossary_findings(exercise_ids, lang: str) -> list:
    """Where the exercises' texts in ``lang`` break its glossary (tests.test_terminology)."""
    rules = rules_from(LESSONS / lang / "glossary.yaml") + fixture_rules(lang)
    return [f for ex in exercise_ids for f in
            findings(yaml_texts(ROOT / "content" / "exercises" / lang / f"{ex}.yaml"), lang, rules)]


@pytest.mark.parametrize("exercise_id", MINE)
def test_every_language_has_the_whole_text_and_every_message(exercise_id):
    emitted = emitted_keys(exercise_id)
    assert len(emitted) >= 5
    check_texts(exercise_id, emitted)


@pytest.mark.parametrize("lang", LANGS)
def test_texts_follow_the_glossary(lang):
    found = glossary_findings(MINE, lang)
    assert found == [], report(found)


def all_findings() -> list[tuple[str, dict]]:
    """A finding for every message key, from the hand-made results above."""
    out = []
    avg = load("average-gradients")
    out += [("average-gradients", f) for f in avg.check(avg_case(), avg_ranks(2, {"w": [0.25, -0.5], "b": [0.125]}))]
    for grads in ({"w": [0.5, -1.0], "b": [0.25]}, {"w": [0.25, -0.5], "b": [0.5]},
                  {"w": [0.25, -0.5], "b": None}, {"w": [0.3, -0.5], "b": [0.125]}):
        out += [("average-gradients", f) for f in avg.check(avg_case(), avg_ranks(2, grads, {"w": [0.0, 0.0], "b": [0.0]}))]
    bucket = load("bucketed-overlap")
    for calls in (GOOD, [call(1292, False, 11.0), call(448, False, 11.5)], [call(1292, True, 9.0), call(448, False, 11.5)],
                  [call(1740, True, 11.0)], [call(1292, True, 11.0), call(448, False, 11.5), call(12, False, 12.0)]):
        out += [("bucketed-overlap", f) for f in bucket.check(dict(BUCKET_CASE, steps=1), bucket_ranks([calls], params_off=True))]
        out += [("bucketed-overlap", f) for f in bucket.check(dict(BUCKET_CASE, steps=1), bucket_ranks([calls]))]
    shard = load("shard-indices")
    order = list(range(22)) + [0, 1]
    for ranks in (shard_ranks(STRIDED), shard_ranks(STRIDED[:2] + [STRIDED[2][:-1]]),
                  shard_ranks(STRIDED[:2] + [STRIDED[2][:-1] + [22]]), shard_ranks([STRIDED[0]] * 2 + STRIDED[2:]),
                  shard_ranks(STRIDED, again=[STRIDED[0][::-1], *STRIDED[1:]]),
                  shard_ranks([order[r::3] for r in range(3)]), shard_ranks(STRIDED, epoch1=STRIDED),
                  shard_ranks(STRIDED, other=STRIDED)):
        out += [("shard-indices", f) for f in shard.check(shard_case(22, 3), ranks)]
    not_list = shard_ranks(STRIDED)
    not_list[0]["result"]["first"] = "list of float"
    out += [("shard-indices", f) for f in shard.check(shard_case(22, 3), not_list)]
    return out


def test_every_message_renders_with_the_values_its_finding_gives():
    found = all_findings()
    covered = {f["key"] for _, f in found}
    assert covered == set().union(*(emitted_keys(ex) for ex in MINE))
    for exercise_id, finding in found:
        for lang in LANGS:
            template = texts(exercise_id, lang)["feedback"][finding["key"]]
            assert messages.placeholders(template) <= set(finding["values"]), (lang, finding)
            json.dumps(finding)  # the report is JSON


# --------------------------------------------------------------------------
# Code that goes where it should


@pytest.mark.parametrize("exercise_id", MINE)
def test_drivers_import_nothing_of_ours(exercise_id):
    """A driver runs in the sandbox beside the learner: it may import torch and the stdlib, nothing
    that could lead to the reference or the cases (labs, academy, the exercise folders)."""
    tree = ast.parse((ROOT / "labs/exercises/runtime/drivers" / f"{exercise_id.replace('-', '_')}.py").read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= {"__future__", "torch", "time", "operator", "random", "drivers"}, names  # drivers: runtime helpers


@pytest.mark.parametrize("exercise_id", MINE)
def test_starter_has_the_signature_and_is_not_an_answer(exercise_id):
    ex = load(exercise_id)
    source = (folder(exercise_id) / "starter.py").read_text("utf-8")
    tree = ast.parse(source)
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    assert ex.FUNCTION in defined
    assert "TODO" in source and "NotImplementedError" in source


@pytest.mark.parametrize("exercise_id", MINE)
def test_show_gives_statement_starter_and_hints_never_the_reference(exercise_id):
    starter = (folder(exercise_id) / "starter.py").read_text("utf-8")
    for lang in messages.languages():  # the languages the CLI offers (a shared feedback.yaml each)
        proc = subprocess.run([sys.executable, "-m", "labs.exercises", "show", exercise_id, "--lang", lang],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        t = texts(exercise_id, lang)
        assert t["title"] in proc.stdout and all(h in proc.stdout for h in t["hints"])
        assert starter.strip() in proc.stdout
        shown_anyway = starter + t["statement"] + "".join(t["hints"])
        secret = [line.strip() for line in exercises_reference(exercise_id).splitlines()
                  if len(line.strip()) > 20 and line.strip() not in shown_anyway]
        assert len(secret) >= 3
        assert not [line for line in secret if line in proc.stdout], lang


def exercises_reference(exercise_id: str) -> str:
    return (folder(exercise_id) / "reference.py").read_text("utf-8")


# --------------------------------------------------------------------------
# Real grading on gloo ranks


def cli_grade(exercise_id: str, path: Path) -> tuple[int, GradeReport]:
    proc = subprocess.run(
        [sys.executable, "-m", "labs.exercises", "grade", exercise_id, str(path), "--json", "--seed", str(SEED)],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
        env={**os.environ, "EXERCISE_SANDBOX": sandbox_mode()})
    return proc.returncode, GradeReport.model_validate_json(proc.stdout)


PASSING = [
    ("average-gradients", folder("average-gradients") / "reference.py"),
    ("average-gradients", FIXTURES / "avg_good_flat.py"),
    ("bucketed-overlap", folder("bucketed-overlap") / "reference.py"),
    ("bucketed-overlap", FIXTURES / "bucket_good_closures.py"),
    ("shard-indices", folder("shard-indices") / "reference.py"),
    ("shard-indices", FIXTURES / "shard_good_blocks.py"),
    # torch.manual_seed queues device seeding with a stack walk the guard must not refuse.
    ("shard-indices", FIXTURES / "shard_good_torch_seed.py"),
]


def grade_passing(exercise_id: str, path: Path) -> tuple[int, GradeReport]:
    """The first solution through ``python -m labs.exercises grade``; the others through
    ``grader.grade``, the function behind it, with the exit status the command would give."""
    if (exercise_id, path) == PASSING[0]:
        return cli_grade(exercise_id, path)
    from labs.exercises.__main__ import EXIT

    report_ = grader.grade(exercise_id, path.read_text("utf-8"), seed=SEED, mode=sandbox_mode())
    return EXIT[report_.status], report_


@pytest.mark.slow
@pytest.mark.parametrize(("exercise_id", "path"), PASSING, ids=lambda v: getattr(v, "name", v))
def test_correct_solutions_pass_every_case_from_the_cli(exercise_id, path):
    code, report_ = grade_passing(exercise_id, path)
    assert code == 0 and report_.status == "passed", report_.model_dump_json(indent=1)[:3000]
    assert sorted(c.id for c in report_.cases) == sorted(c["id"] for c in load(exercise_id).cases(SEED))
    assert all(c.status == "passed" and c.findings for c in report_.cases)


def failing(report_: GradeReport) -> dict[str, list[str]]:
    """{case id: keys of its failed findings} for the cases that failed."""
    return {c.id: [f.key for f in c.findings if not f.passed] for c in report_.cases if c.status != "passed"}


def grade_fixture(exercise_id: str, name: str) -> GradeReport:
    report_ = grader.grade(exercise_id, (FIXTURES / name).read_text("utf-8"), seed=SEED, mode=sandbox_mode())
    assert report_.error is None, report_.error
    assert report_.status == "failed"
    return report_


@pytest.mark.slow
def test_average_wrong_solutions_fail_with_their_finding():
    for name, key in (("avg_wrong_sum.py", "avg_summed_not_divided"),
                      ("avg_wrong_skips_bias.py", "avg_param_missed")):
        cases = failing(grade_fixture("average-gradients", name))
        assert len(cases) == len(load("average-gradients").cases(SEED)), name
        assert all(found[0] == key and "avg_weights_differ" in found for found in cases.values()), cases
    # Forgetting that a gradient can be None: only the cases with an unused layer crash.
    cases = failing(grade_fixture("average-gradients", "avg_wrong_none.py"))
    unused = [c["id"] for c in load("average-gradients").cases(SEED) if c["unused"]]
    assert sorted(cases) == sorted(unused) and all(found == ["crash"] for found in cases.values())
    # A collective this exercise does not allow.
    cases = failing(grade_fixture("average-gradients", "avg_wrong_broadcast.py"))
    assert {tuple(found) for found in cases.values() if found} == {("forbidden_call",)}


@pytest.mark.slow
def test_bucketed_wrong_solutions_fail_with_their_finding():
    one_bucket = [c["id"] for c in load("bucketed-overlap").cases(SEED) if c["cap"] >= 1 << 20]
    several = [c["id"] for c in load("bucketed-overlap").cases(SEED) if c["id"] not in one_bucket]
    # All-reducing in finish(): equivalent, the right number of calls, but no overlap.
    cases = failing(grade_fixture("bucketed-overlap", "bucket_wrong_finish_only.py"))
    assert sorted(cases) == sorted(several) and all(found == ["bucket_no_overlap"] for found in cases.values())
    cases = failing(grade_fixture("bucketed-overlap", "bucket_wrong_blocking.py"))
    assert sorted(cases) == sorted(several) and all(found == ["bucket_not_async"] for found in cases.values())
    # One all-reduce per parameter whatever the cap: right only when the cap is below every gradient.
    cases = failing(grade_fixture("bucketed-overlap", "bucket_wrong_per_param.py"))
    below = [c["id"] for c in load("bucketed-overlap").cases(SEED) if c["cap"] == 1]
    assert sorted(cases) == sorted(set(several + one_bucket) - set(below))
    assert all(found == ["bucket_calls_wrong"] for found in cases.values())


@pytest.mark.slow
def test_shard_wrong_solutions_fail_with_their_finding():
    all_cases = load("shard-indices").cases(SEED)
    large = [c["id"] for c in all_cases if c["n"] >= 20]
    uneven = [c["id"] for c in all_cases if c["n"] % c["world_size"]]
    cases = failing(grade_fixture("shard-indices", "shard_wrong_global_rng.py"))
    assert set(large) <= set(cases) and {k for found in cases.values() for k in found} <= {
        "shard_overlap", "shard_not_deterministic"}
    assert all(cases[i] == ["shard_overlap"] for i in large)
    for name, key, where in (("shard_wrong_no_epoch.py", "shard_same_each_epoch", large),
                             ("shard_wrong_unshuffled.py", "shard_not_shuffled", large),
                             ("shard_wrong_drop_last.py", "shard_count", uneven)):
        cases = failing(grade_fixture("shard-indices", name))
        assert sorted(cases) == sorted(where) and all(found == [key] for found in cases.values()), (name, cases)


DEVELOPER_WORDS = ("trusted", "sandbox", "grader", "the page", "learner", "labs/", "reference solution", "todo")


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_the_reference_shown_after_a_pass_holds_no_notes_for_us(exercise_id):
    """Review m12: the page showed "Trusted: it never enters the sandbox, and the page shows it
    only after the learner has passed" inside the solution. Docstrings and comments are read by
    the learner; what concerns us lives in the folder's __init__.py."""
    source = reference(exercise_id)
    words = [node.value for node in ast.walk(ast.parse(source))
             if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    words += [line.split("#", 1)[1] for line in source.splitlines() if "#" in line]
    found = [(w, text.strip()[:60]) for text in words for w in DEVELOPER_WORDS if w in text.lower()]
    assert found == [], found
