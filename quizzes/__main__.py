"""Validate the question bank.

    python -m quizzes check [--bank content/quiz-bank]

Prints every problem and the question counts per language and type; exits 1
when there is a problem.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from quizzes.bank import TYPES, Bank, Question, load_bank

# What the course asks of the bank as a whole (issue 5, COURSE_BRIEF.md).
MIN_QUESTIONS = 40
FAQ_QUESTIONS = 6


def coverage_problems(bank: Bank) -> list[str]:
    """Problems of the bank as a whole: size, topics covered, FAQ questions."""
    problems = []
    if len(bank.questions) < MIN_QUESTIONS:
        problems.append(f"bank: {len(bank.questions)} usable questions, at least {MIN_QUESTIONS} needed")
    covered = {q.topic for q in bank.questions.values()}
    missing = [t for t in bank.topics if t not in covered]
    if missing:
        problems.append(f"bank: no questions for sections {', '.join(missing)}")
    faq = sum(q.faq for q in bank.questions.values())
    if faq < FAQ_QUESTIONS:
        problems.append(f"bank: {faq} questions marked faq: true, the course brief has {FAQ_QUESTIONS}")
    return problems


def complete_in(question: Question, lang: str) -> bool:
    """Whether every text of a question exists in `lang`."""
    texts = [question.text, question.explain or {lang: "-"}, question.unit or {lang: "-"}]
    texts += [o.text for o in question.options] + [o.explain for o in question.options]
    texts += list(question.items)
    return all(t.get(lang) for t in texts)


def check(directory: Path | None = None) -> int:
    bank = load_bank(directory)
    problems = list(bank.problems) + coverage_problems(bank)
    for problem in problems:
        print(f"PROBLEM {problem}")
    questions = list(bank.questions.values())
    print(f"\n{len(questions)} usable questions, languages {', '.join(bank.languages)}")
    header = f"{'':10}" + "".join(f"{t:>10}" for t in (*TYPES, "total"))
    print(header)
    for lang in bank.languages:
        counts = Counter(q.type for q in questions if complete_in(q, lang))
        row = "".join(f"{counts[t]:>10}" for t in TYPES) + f"{sum(counts.values()):>10}"
        print(f"{lang:10}{row}")
    topics = Counter(q.topic for q in questions)
    print("\nper section: " + ", ".join(f"{t} {topics[t]}" for t in bank.topics))
    print(f"faq: {sum(q.faq for q in questions)}")
    print(f"\n{len(problems)} problem(s)" if problems else "\nOK")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m quizzes")
    sub = parser.add_subparsers(dest="command", required=True)
    check_parser = sub.add_parser("check", help="validate the question bank")
    check_parser.add_argument("--bank", type=Path, help="folder of *.yaml files (default: content/quiz-bank)")
    args = parser.parse_args(argv)
    return check(args.bank)


if __name__ == "__main__":
    sys.exit(main())
