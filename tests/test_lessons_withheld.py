"""The solution is not in the lesson (issue #21): lab code that solves an exercise a
certificate requires is shown only to a learner who passed that exercise.

The solutions are listed here, not read from ``academy.lessons.SOLUTIONS``: the
references of the required exercises and the lab functions that solve them.
Every section in every language is rendered (AppTest) for a guest and for a
signed-in learner without passes, and no distinctive line of any solution may
appear anywhere on the page, in a code block or in the Markdown; after a pass,
the lab's listing is there.
"""

from __future__ import annotations

import ast

import pytest

from academy import exercises, i18n, lessons
from academy.db import session_scope
from academy.models import LabRun
from labs import exercises as defs
from tests.apptest import open_page
from tests.exercisepass import pass_required_exercises
from tests.factories import learner

LANGS = sorted(i18n.languages())
RING = "labs/ring/allreduce.py::ring_allreduce"
PIPELINED = "labs/ring/allreduce.py::ring_allreduce_pipelined"
NAIVE_SYNC = "labs/ddp/rank.py::naive_sync_gradients"
# Lab functions that solve a required exercise (ring-allreduce; average-gradients with its
# world size taken from dist). Nothing in the labs solves broadcast.
LAB_SOLVERS = {RING: "ring-allreduce", PIPELINED: "ring-allreduce", NAIVE_SYNC: "average-gradients"}

# Lines the solutions share with labs/ring/allreduce.py::naive_allreduce, which the lesson shows on
# purpose (the tutorial's ring, which fails the exercise's bytes check): argument checks,
# the ring's neighbours, one isend/recv/wait exchange and the lab's trace record.
SHOWN_ON_PURPOSE = frozenset({
    'if op not in ("sum", "avg"):',
    """raise ValueError(f"op must be 'sum' or 'avg', not {op!r}")""",
    'if op == "avg" and not tensor.is_floating_point():',
    'raise ValueError("avg of an integer tensor is not an integer tensor; gloo refuses it too")',
    "world = dist.get_world_size(group)",
    "rank = dist.get_rank(group)",
    "right, left = (rank + 1) % world, (rank - 1) % world",
    "request.wait()",
    'if op == "avg":',
    "return tensor",
    "t_start = time.perf_counter()",
    "if trace is not None:",
    "trace.append({",
    '"send_to": right, "recv_from": left,',
})


def distinctive_lines(source: str) -> set[str]:
    """The lines of code of a solution (no docstrings, comments or short lines such as
    ``continue``) that nothing shown on purpose contains."""
    tree = ast.parse(source)
    docs: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef) and ast.get_docstring(node) is not None:
            docs.update(range(node.body[0].lineno, node.body[0].end_lineno + 1))
    found = set()
    for number, line in enumerate(source.splitlines(), 1):
        line = line.split("  #")[0].strip()
        if number not in docs and len(line) >= 12 and not line.startswith("#"):
            found.add(line)
    return found - SHOWN_ON_PURPOSE


def solutions() -> dict[str, str]:
    """Every solution by name: the required exercises' references and the lab functions above."""
    found = {f"{ex} (reference)": defs.reference(ex) for ex in defs.REQUIRED_FOR_CERTIFICATE}
    for ref in {**LAB_SOLVERS, **lessons.SOLUTIONS}:
        found[ref] = lessons.function_source(ref)
    return found


def page_text(at) -> str:
    """Everything a lesson page wrote: code blocks, Markdown, captions, links."""
    parts = [el.value for kind in ("code", "markdown", "caption", "warning") for el in at.get(kind)]
    parts += [el.proto.label for el in at.get("page_link")]
    return "\n".join(str(p) for p in parts)


def leaks(at, lang: str) -> list[str]:
    """(section, solution, line) for every distinctive solution line on any section's page."""
    lines = {line: name for name, source in solutions().items() for line in distinctive_lines(source)}
    found = []
    for section in lessons.section_ids():
        at.query_params["section"] = section
        at.run()
        assert not at.exception, (lang, section, at.exception)
        text = page_text(at)
        found += [f"{lang}/{section}: {name}: {line}" for line, name in lines.items() if line in text]
    return found


def codes(at) -> list[str]:
    """The code blocks on the page (st.code drops the final newline)."""
    return [c.value.strip() for c in at.code]




def pass_one(learner_id: int, exercise: str) -> None:
    with session_scope() as session:
        run = LabRun(learner_id=learner_id, lab=exercises.LAB, params={"exercise": exercise, "lang": "en"},
                     status="done", source="# passed in a test\n", result={"exercise": exercise, "status": "passed"})
        session.add(run)
        session.flush()
        exercises.record_pass(session=session, learner_id=learner_id, exercise=exercise, run_id=run.id)


# --- the data --------------------------------------------------------------------------------


def test_the_mapping_names_every_lab_solver_and_real_exercises():
    assert LAB_SOLVERS.items() <= lessons.SOLUTIONS.items()
    assert set(lessons.SOLUTIONS.values()) <= set(defs.EXERCISES)
    assert set(defs.REQUIRED_FOR_CERTIFICATE) <= set(exercises.catalog()), "a learner must be able to pass them"
    for ref in lessons.SOLUTIONS:
        assert "def " in lessons.function_source(ref)


def test_the_solutions_have_something_to_find():
    for name, source in solutions().items():
        assert len(distinctive_lines(source)) >= 4, name


@pytest.mark.parametrize("lang", LANGS)
def test_every_language_has_an_outline_for_each_withheld_listing_and_none_runs(lang):
    own = lessons._outlines(lessons.content.path("lessons", lang, "outlines.yaml"))
    assert set(own) == set(lessons.SOLUTIONS), lang
    for ref, text in own.items():
        with pytest.raises(SyntaxError):  # pseudocode, not Python: nothing here can be submitted
            ast.parse(text)
        if lang != lessons.SOURCE_LANG:
            assert text != lessons.outline(ref, lessons.SOURCE_LANG), f"{lang} {ref}: not written in {lang}"
        lines = {line for source in solutions().values() for line in distinctive_lines(source)}
        assert not [line for line in lines if line in text], (lang, ref)


def test_listing_withholds_until_the_exercise_is_passed():
    outlined = lessons.listing(RING, "zh", set())
    assert outlined.withheld_for == "ring-allreduce" and outlined.code == lessons.outline(RING, "zh")
    assert lessons.listing(RING, "zh", {"broadcast", "average-gradients"}).withheld_for == "ring-allreduce"
    shown = lessons.listing(RING, "zh", {"ring-allreduce"})
    assert (shown.withheld_for, shown.code) == (None, lessons.function_source(RING))
    naive = lessons.listing("labs/ring/allreduce.py::naive_allreduce", "nl", set())
    assert naive.withheld_for is None and naive.code.startswith("def naive_allreduce")


# --- the page, every section and language ---------------------------------------------------


@pytest.mark.usefixtures("app_db")
@pytest.mark.parametrize("lang", LANGS)
def test_no_solution_reaches_a_guest_or_a_learner_without_passes(lang):
    me = learner()
    found = leaks(open_page("lessons", lang), lang) + leaks(open_page("lessons", lang, me), lang)
    assert found == []


@pytest.mark.usefixtures("app_db")
def test_the_outline_says_what_to_pass_and_links_to_the_exercise():
    at = open_page("lessons", "nl", section="ring-allreduce")
    title = exercises.text("ring-allreduce", "nl")["title"]
    assert i18n.t("lessons.code_withheld", "nl", exercise=title) in page_text(at)
    assert lessons.outline(RING, "nl").strip() in codes(at)
    links = [el.proto for el in at.get("page_link") if el.proto.page == "exercises"]
    assert links and all("exercise=ring-allreduce" in link.query_string for link in links)


@pytest.mark.usefixtures("app_db")
@pytest.mark.parametrize("lang", LANGS)
def test_after_a_pass_the_lesson_shows_the_lab_code(lang):
    me = learner()
    pass_one(me, "ring-allreduce")
    at = open_page("lessons", lang, me, section="ring-allreduce")
    code = codes(at)
    assert lessons.function_source(RING).strip() in code and lessons.function_source(PIPELINED).strip() in code
    assert i18n.t("lessons.code_withheld", lang, exercise=exercises.text("ring-allreduce", lang)["title"]) \
        not in page_text(at)
    at.query_params["section"] = "ddp"  # average-gradients is not passed yet
    at.run()
    assert lessons.function_source(NAIVE_SYNC).strip() not in codes(at)
    assert lessons.outline(NAIVE_SYNC, lang).strip() in codes(at)

    other = learner()
    with session_scope() as session:
        pass_required_exercises(session, other)
    at = open_page("lessons", lang, other, section="ddp")
    assert lessons.function_source(NAIVE_SYNC).strip() in codes(at)
