"""Finished lab runs of a learner, and the right answer to a review card (the tests of issue #42).

The results in ``fixtures/runs`` are real: ``python -m labs <lab> --json`` on the course's
2-core machine with each lab's defaults (gloo), kept as the queue keeps an old run's report
(``academy.labruns.kinds.LAB_KEPT``) and trimmed (a few trace records and spans, three bench sizes,
three points of each compression loss curve, two rows of the topology lab's projections).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from benchmarks.quizkey import right_answer, wrong_answer
from quizzes import own
from quizzes.bank import Bank

RUNS = Path(__file__).resolve().parent / "fixtures" / "runs"
LABS = ("ring", "bench", "ddp", "sharding", "compression", "topology", "straggler", "failure")


def result(lab: str) -> dict[str, Any]:
    return json.loads((RUNS / f"{lab}.json").read_text(encoding="utf-8"))


def asks_its_questions(lab: str, result: dict[str, Any]) -> None:
    """A lab test's fresh run (``result`` as the worker stores it) has every figure its lab's
    templates read, and each template builds a question of it: the recorded runs above
    stay what the lab writes today."""
    from quizzes.figures import FIGURES, figures
    from quizzes.templates import build, load_templates

    found = figures(lab, result)
    assert set(found) == set(FIGURES[lab][1]), found
    templates = load_templates().of(lab)
    assert templates, lab
    for template in templates:
        assert build(template, found, seed=own.seed_of(1, template.id)) is not None, (template.id, found)


def learner_with_runs(session, labs: tuple[str, ...] = ("ring", "sharding"), *, email: str | None = None,
                      admin: bool = False) -> tuple[int, dict[str, int]]:
    """A learner and a finished run of each of ``labs``: (learner id, run id by lab)."""
    from academy.models import LabRun, Learner

    learner = Learner(email=email or f"runs-{uuid.uuid4().hex[:8]}@example.org", password_hash="x",
                      display_name="Zoë", is_admin=admin)
    session.add(learner)
    session.commit()
    runs = {}
    for lab in labs:
        run = LabRun(learner_id=learner.id, lab=lab, status="done", result=result(lab),
                     params={"world_size": result(lab)["world_size"]})
        session.add(run)
        session.commit()
        runs[lab] = run.id
    return learner.id, runs


def answer_for(session, item, plan: dict[str, Any], bank: Bank, lang: str, *, right: bool = True) -> Any:
    """What a learner who knows (or not) answers to a review item shown with ``plan``."""
    if item.question_id is not None:
        return (right_answer if right else wrong_answer)(plan, bank, lang)
    from academy.models import RunQuestion

    feedback = own.grade(session.get(RunQuestion, item.run_question_id), plan, None, lang)
    return next(o.key for o in feedback.explanations if o.correct == right)
