"""Questions built from a learner's own lab runs: made, shown, graded and audited (issue #42).

After a finished run of a lab that has templates (``quizzes.templates``),
`add_for_run` reads the run's figures (``quizzes.figures``) and stores one
`~academy.models.RunQuestion` per template the run can answer: the figures
and the drawn values, chosen by a seed made of the run and the template
(`seed_of`), so that the same run always gives the same question. Nothing
else is stored: the answer, the distractors and the working are computed
from those values whenever the question is shown, with the quiz engine's
formulas, rounding and numbers, and `audit` derives every stored question
again from its run.

A question is asked as a choice among numbers. `plan` shuffles the options
for one showing; `public_question` is all the browser gets before the
learner answers (the texts, the numbers, opaque keys); `grade` says what was
right and why, with the working and the learner's numbers, once they have.
"""

from __future__ import annotations

import random
import string
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import defer
from sqlmodel import Session, col, func, select

from academy.models import LabRun, RunQuestion
from quizzes.bank import localized
from quizzes.engine import Feedback, OptionFeedback, PublicQuestion, fill, see_sentence
from quizzes.figures import figures
from quizzes.formula import ExpressionError
from quizzes.numbers import InvalidResponse, QuestionUnavailable, format_number
from quizzes.templates import Template, Templates, build, load_templates, option_values, shown

KEYS = string.ascii_lowercase
DONE = "done"
FULL_WIDTH_END = ("。", "！", "？", "）", "：", "；")
# (run, template) pairs known to build no question: a finished run's figures never change
# (a pruned report keeps its summary), so its report is not read again for them. Per process.
_UNASKABLE: set[tuple[int, str]] = set()
UNASKABLE_MAX = 100_000


def _templates(templates: Templates | None) -> Templates:
    return templates if templates is not None else load_templates()


def seed_of(run_id: int, template_id: str) -> str:
    """The seed that picks a run question's drawn values: the same for the same run and template."""
    return f"{run_id}/{template_id}"


# ---------------------------------------------------------------- making


def add_for_run(*, session: Session, run: LabRun, templates: Templates | None = None) -> list[RunQuestion]:
    """The questions of a finished run of its learner, stored once; returns those this call
    added (none when they exist already, when the run is not a learner's finished run, or
    when no template fits its figures). Commits. Two sessions adding the same run at once
    add each question once: the database refuses a second (run, template)."""
    templates = _templates(templates)
    if run.id is None or run.learner_id is None or run.status != DONE or not templates.of(run.lab):
        return []
    have = set(session.exec(select(RunQuestion.template).where(RunQuestion.run_id == run.id)))
    missing = [t for t in templates.of(run.lab) if t.id not in have and (run.id, t.id) not in _UNASKABLE]
    if not missing:
        return []  # the run's report is not even read
    found = figures(run.lab, run.result)
    added = []
    for template in missing:
        values = build(template, found, seed=seed_of(run.id, template.id), languages=templates.languages)
        if values is None:
            if len(_UNASKABLE) >= UNASKABLE_MAX:
                _UNASKABLE.clear()
            _UNASKABLE.add((run.id, template.id))
            continue
        item = RunQuestion(learner_id=run.learner_id, run_id=run.id, lab=run.lab, template=template.id,
                           params=values)
        session.add(item)
        try:
            session.commit()
        except IntegrityError:  # another session stored it first
            session.rollback()
            continue
        session.refresh(item)
        added.append(item)
    return added


def newest_runs(*, session: Session, learner_id: int, labs: list[str]) -> list[LabRun]:
    """The learner's newest finished run of each of ``labs`` (a newer run's questions
    replace an older run's in the queue, so only the newest is asked)."""
    newest = (select(func.max(LabRun.id)).where(LabRun.learner_id == learner_id, col(LabRun.lab).in_(labs),
                                                LabRun.status == DONE).group_by(LabRun.lab))
    # The reports are read only where a question is still to be built (add_for_run).
    return list(session.exec(select(LabRun).where(col(LabRun.id).in_(newest))
                             .options(defer(LabRun.result), defer(LabRun.source))))


def count_for_run(*, session: Session, run_id: int) -> int:
    """How many questions a run gave."""
    return session.exec(select(func.count()).where(RunQuestion.run_id == run_id)).one()


# ---------------------------------------------------------------- showing


def _template(item: RunQuestion, templates: Templates) -> Template:
    template = templates.templates.get(item.template)
    if template is None or set(item.params) != template.names:
        raise QuestionUnavailable("quiz_errors.question_unavailable", question_id=item.template)
    return template


def plan(item: RunQuestion, *, seed: int, templates: Templates | None = None) -> dict[str, Any]:
    """One showing of the question: the options (0 the answer, then each mistake) in the order
    shown at a, b, c, ..."""
    template = _template(item, _templates(templates))
    order = list(range(1 + len(template.mistakes)))
    random.Random(f"{seed}/{item.id}").shuffle(order)
    return {"run_question_id": item.id, "options": order}


def _values(item: RunQuestion, template: Template) -> list[float]:
    """The options' values as shown: the answer first, then each mistake's."""
    try:
        return [shown(v, template) for v in option_values(template, item.params)]
    except ExpressionError as exc:  # a stored question that the template, changed since, no longer fits
        raise QuestionUnavailable("quiz_errors.question_unavailable", question_id=item.template) from exc


def _option_text(value: float, template: Template, lang: str) -> str:
    unit = localized(template.unit, lang) if template.unit else ""
    return format_number(value, lang) + (f" {unit}" if unit else "")


def _checked_plan(item: RunQuestion, plan_item: dict[str, Any], template: Template) -> list[int]:
    order = plan_item.get("options", [])
    if plan_item.get("run_question_id") != item.id or sorted(order) != list(range(1 + len(template.mistakes))):
        raise QuestionUnavailable("quiz_errors.question_unavailable", question_id=item.template)
    return order


def public_question(item: RunQuestion, plan_item: dict[str, Any], lang: str,
                    templates: Templates | None = None) -> PublicQuestion:
    """The question with the learner's numbers, and its options as numbers: nothing says which is right."""
    template = _template(item, _templates(templates))
    order = _checked_plan(item, plan_item, template)
    values = _values(item, template)
    return PublicQuestion(
        question_id=template.id, topic=template.topic, type="single",
        text=fill(localized(template.text, lang), item.params, lang),
        options=[(KEYS[pos], _option_text(values[idx], template, lang)) for pos, idx in enumerate(order)],
    )


def grade(item: RunQuestion, plan_item: dict[str, Any], response: Any, lang: str,
          templates: Templates | None = None) -> Feedback:
    """Grade the key the learner chose (None: unanswered). The right option's explanation is
    the working with the learner's numbers; each distractor's says which mistake gives it.
    Raises InvalidResponse for a key that is not an option."""
    template = _template(item, _templates(templates))
    order = _checked_plan(item, plan_item, template)
    keys = KEYS[: len(order)]
    if response is not None and (not isinstance(response, str) or response not in keys):
        raise InvalidResponse("quiz_errors.invalid_response")
    exact = option_values(template, item.params)[0]
    values = _values(item, template)
    filled = {**item.params, "answer": values[0]}
    see = see_sentence(template.see, lang)

    def explain(idx: int) -> str:
        text = fill(localized(template.explain if idx == 0 else template.mistakes[idx - 1].explain, lang),
                    filled, lang)
        # No space after full-width punctuation (Chinese typography).
        return text + ("" if text.endswith(FULL_WIDTH_END) else " ") + see if see else text

    shown_options = [(KEYS[pos], idx) for pos, idx in enumerate(order)]
    right = next(key for key, idx in shown_options if idx == 0)
    return Feedback(
        question_id=template.id, type="single", correct=response == right, credit=1.0 if response == right else 0.0,
        topic=template.topic,
        correct_answer=[_option_text(values[0], template, lang)],
        given=[] if response is None else [_option_text(values[dict(shown_options)[response]], template, lang)],
        explanations=[OptionFeedback(key=key, text=_option_text(values[idx], template, lang), explain=explain(idx),
                                     chosen=key == response, correct=idx == 0, see=template.see)
                      for key, idx in shown_options],
        see=template.see, expected=exact,
    )


# ------------------------------------------------------------------ audit


def rederive(item: RunQuestion, run: LabRun | None, templates: Templates) -> list[str]:
    """Why ``item`` is not what its run gives today (empty when it is): the run is the
    learner's finished run of the lab, and the template, the run's figures and the seed
    make exactly the stored values, from which the answer and every distractor follow."""
    where = f"run question {item.id} (run {item.run_id}, {item.template})"
    if run is None:
        return [f"{where}: the run is gone"]
    if run.learner_id != item.learner_id or run.lab != item.lab or run.status != DONE:
        return [f"{where}: the run is not this learner's finished {item.lab} run"]
    template = templates.templates.get(item.template)
    if template is None or template.lab != item.lab:
        return [f"{where}: no template {item.template!r} for the {item.lab} lab"]
    again = build(template, figures(run.lab, run.result), seed=seed_of(run.id, template.id),
                  languages=templates.languages)
    if again != item.params:
        return [f"{where}: the run gives {again}, the question holds {item.params}"]
    return []


def audit(*, session: Session, templates: Templates | None = None, batch: int = 200) -> tuple[int, list[str]]:
    """Derive every stored run question again from its run (`rederive`): (questions checked,
    problems). Reads ``batch`` questions at a time, each run once per batch."""
    templates = _templates(templates)
    checked, problems, last = 0, [], 0
    while True:
        items = list(session.exec(select(RunQuestion).where(RunQuestion.id > last)
                                  .order_by(col(RunQuestion.id)).limit(batch)))
        if not items:
            return checked, problems
        runs = {r.id: r for r in session.exec(select(LabRun).where(col(LabRun.id).in_({i.run_id for i in items})))}
        for item in items:
            problems.extend(rederive(item, runs.get(item.run_id), templates))
        checked += len(items)
        last = items[-1].id or last
