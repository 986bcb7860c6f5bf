"""Validate the question bank and the templates over lab runs; audit the questions built from runs.

    python -m quizzes check [--bank content/quiz-bank] [--templates content/quiz-templates]
    python -m quizzes audit

``check`` prints every problem, the question counts per language and type, in
how many single-choice questions the answer is the longest option, and the
templates per lab; exits 1 when there is a problem. ``audit`` derives every
question built from a learner's run, in the database that ``DATABASE_URL``
names, again from its run (``quizzes.own.audit``); exits 1 when one differs.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from quizzes.bank import TYPES, Bank, Question, load_bank
from quizzes.lengths import answer_is_longest
from quizzes.templates import load_templates

# What the course asks of the bank as a whole (issue 5, COURSE_BRIEF.md).
MIN_QUESTIONS = 40
FAQ_QUESTIONS = 6
# With four options a blind guess is right a quarter of the time; if the answer
# were the longest option much more often than that, "pick the longest" would
# pay (journey review, Minor 8).
MAX_LONGEST_ANSWER_SHARE = 0.4


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


def longest_answers(bank: Bank, lang: str) -> tuple[int, int]:
    """(single-choice questions whose answer is the widest option in `lang`, all single-choice questions)."""
    singles = [q for q in bank.questions.values() if q.type == "single"]
    return sum(answer_is_longest(q, lang) for q in singles), len(singles)


def answer_length_problems(bank: Bank) -> list[str]:
    """The bank as a whole must not reward picking the longest option."""
    problems = []
    for lang in bank.languages:
        longest, singles = longest_answers(bank, lang)
        if singles and longest > MAX_LONGEST_ANSWER_SHARE * singles:
            problems.append(
                f"bank: options.{lang}: the answer is the longest option in {longest} of {singles} single-choice "
                f"questions, more than {MAX_LONGEST_ANSWER_SHARE:.0%}: picking the longest would pay; "
                "lengthen some wrong options or shorten some answers"
            )
    return problems


def complete_in(question: Question, lang: str) -> bool:
    """Whether every text of a question exists in `lang`."""
    texts = [question.text, question.explain or {lang: "-"}, question.unit or {lang: "-"}]
    texts += [o.text for o in question.options] + [o.explain for o in question.options]
    texts += list(question.items)
    return all(t.get(lang) for t in texts)


def check(directory: Path | None = None, templates_dir: Path | None = None) -> int:
    bank = load_bank(directory)
    templates = load_templates(templates_dir)
    problems = (list(bank.problems) + coverage_problems(bank) + answer_length_problems(bank)
                + list(templates.problems))
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
    counts = {lang: longest_answers(bank, lang) for lang in bank.languages}
    print("answer is the longest option: " + ", ".join(f"{lang} {n} of {m}" for lang, (n, m) in counts.items()))
    labs = Counter(t.lab for t in templates.templates.values())
    print(f"templates over lab runs: {len(templates.templates)} usable "
          f"({', '.join(f'{lab} {n}' for lab, n in sorted(labs.items()))}); each example builds a question")
    print(f"\n{len(problems)} problem(s)" if problems else "\nOK")
    return 1 if problems else 0


def audit() -> int:
    from academy.db import session_scope
    from quizzes.own import audit as audit_questions

    with session_scope() as session:
        checked, problems = audit_questions(session=session)
    for problem in problems:
        print(f"PROBLEM {problem}")
    print(f"{checked} question(s) built from runs checked, {len(problems)} problem(s)")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m quizzes")
    sub = parser.add_subparsers(dest="command", required=True)
    check_parser = sub.add_parser("check", help="validate the question bank and the templates over lab runs")
    check_parser.add_argument("--bank", type=Path, help="folder of *.yaml files (default: content/quiz-bank)")
    check_parser.add_argument("--templates", type=Path,
                              help="folder of *.yaml files (default: content/quiz-templates)")
    sub.add_parser("audit", help="derive every question built from a run again from its run")
    args = parser.parse_args(argv)
    return audit() if args.command == "audit" else check(args.bank, args.templates)


if __name__ == "__main__":
    sys.exit(main())
