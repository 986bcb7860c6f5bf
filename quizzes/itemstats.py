"""How each question performs, for the instructor's Admin page (issue #42).

Per bank question, over the finished graded attempts that drew it: how many
answered it, how often right, and its discrimination, the point-biserial
correlation between getting it right (1 or 0; a question left unanswered
counts 0, as the score counts it) and the score on the *other* questions of
the same attempt (the rest score, so that a question does not correlate with
itself). A good question is answered right more often by learners who do
well on the rest: r well above 0. Near 0 or below, strong and weak learners
miss it alike, and its wording or key deserves a look
(`LOW_DISCRIMINATION` is the usual rule of thumb).

Per question template over lab runs (``quizzes.own``): how often its
questions were answered on the Review page and how often right; those have
no quiz score to correlate with.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import Integer, cast
from sqlmodel import Session, col, func, select

from academy.models import QuizAnswer, QuizAttempt, ReviewCard, ReviewLog, RunQuestion
from quizzes.store import FINISHED

LOW_DISCRIMINATION = 0.2
MIN_ATTEMPTS = 5  # fewer attempts than this give no correlation worth showing


@dataclass(frozen=True)
class QuestionStats:
    question_id: str
    asked: int  # finished graded attempts that drew it
    answered: int
    right: int
    discrimination: float | None  # None: fewer than MIN_ATTEMPTS, or no spread to correlate

    @property
    def right_share(self) -> float | None:
        """Right answers over answers given (None before anyone answered)."""
        return self.right / self.answered if self.answered else None


@dataclass(frozen=True)
class TemplateStats:
    template: str
    lab: str
    answered: int  # answers on the Review page
    right: int


def point_biserial(pairs: list[tuple[int, float]]) -> float | None:
    """The Pearson correlation of 0/1 outcomes with scores; None without spread in either."""
    n = len(pairs)
    if n < 2:
        return None
    mean_x = sum(x for x, _ in pairs) / n
    mean_y = sum(y for _, y in pairs) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in pairs)
    syy = sum((y - mean_y) ** 2 for _, y in pairs)
    if sxx == 0 or syy == 0:
        return None
    return sum((x - mean_x) * (y - mean_y) for x, y in pairs) / math.sqrt(sxx * syy)


def question_stats(*, session: Session, course_id: str) -> list[QuestionStats]:
    """Every bank question drawn in a finished graded attempt of ``course_id``, the least
    discriminating first (those without a figure last)."""
    attempts = session.exec(select(QuizAttempt.id, QuizAttempt.plan).where(
        QuizAttempt.course_id == course_id, QuizAttempt.status == FINISHED,
        col(QuizAttempt.practice).is_(False))).all()
    right_at: dict[int, dict[int, bool]] = defaultdict(dict)
    if attempts:
        for attempt_id, position, correct in session.exec(
                select(QuizAnswer.attempt_id, QuizAnswer.position, QuizAnswer.correct)
                .where(col(QuizAnswer.attempt_id).in_([a for a, _ in attempts]))):
            right_at[attempt_id][position] = correct
    pairs: dict[str, list[tuple[int, float]]] = defaultdict(list)
    answered: dict[str, int] = defaultdict(int)
    for attempt_id, plan in attempts:
        answers = right_at.get(attempt_id, {})
        total, score = len(plan), sum(answers.values())
        for position, item in enumerate(plan):
            qid = item.get("question_id", "")
            got = int(answers.get(position, False))
            answered[qid] += position in answers
            pairs[qid].append((got, (score - got) / (total - 1) if total > 1 else 0.0))
    stats = [QuestionStats(question_id=qid, asked=len(found), answered=answered[qid], right=sum(x for x, _ in found),
                           discrimination=point_biserial(found) if len(found) >= MIN_ATTEMPTS else None)
             for qid, found in pairs.items()]
    return sorted(stats, key=lambda s: (s.discrimination is None, s.discrimination or 0.0, s.question_id))


def template_stats(*, session: Session) -> list[TemplateStats]:
    """Each template's questions as answered on the Review page, by template."""
    rows = session.exec(
        select(RunQuestion.template, RunQuestion.lab, func.count(col(ReviewLog.id)),
               func.sum(cast(col(ReviewLog.correct), Integer)))
        .join(ReviewCard, col(ReviewCard.run_question_id) == RunQuestion.id)
        .join(ReviewLog, col(ReviewLog.card_id) == ReviewCard.id)
        .group_by(RunQuestion.template, RunQuestion.lab).order_by(RunQuestion.lab, RunQuestion.template)).all()
    return [TemplateStats(template=t, lab=lab, answered=n, right=int(right or 0)) for t, lab, n, right in rows]
