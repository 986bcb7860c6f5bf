"""The exercises from a terminal; the lab worker runs the same ``grade`` command for the page.

    python -m labs.exercises list [--lang L]
    python -m labs.exercises show ring-allreduce [--lang zh]     # statement, starter code, hints
    python -m labs.exercises grade ring-allreduce my_ring.py [--json] [--lang nl]
                                   [--events events.jsonl] [--out report.json]
    python -m labs.exercises warm [--max-wait 600]   # then, on stdin:
        {"argv": ["grade", "ring-allreduce", "my_ring.py", "--json", ...], "output": "run.log"}

``grade`` exits 0 when every case passed, 1 when a case failed, 2 when the
file cannot be graded (syntax error, missing function, refused by or not
available in the sandbox, or the grader itself failed: its traceback goes
to stderr, and no report is written). ``--json`` prints the report (the JSON of a
``labs.exercises.report.GradeReport``) instead of text; ``--events`` appends one JSON
line per finished case, in the format of the labs' progress events;
``--out`` writes the report. ``show`` never shows the reference solution.

``warm`` is the lab worker's warm grader (``academy.labruns.pool.GraderPool``): it
starts a sandbox at once (``grader.prestart``: the harness with PyTorch and
every exercise's preloads imported and ranks forked for every exercise's
world sizes, waiting for a plan; no exercise chosen yet), then waits on its
stdin for one job, a JSON line: the arguments of a ``grade`` of any
exercise, and the file its stdout and stderr go to from then on. It runs
that ``grade`` in the waiting sandbox (the seed is drawn only now; the same
report, files and exit code as the command alone) and exits: one submission
per warm grader, so nothing crosses from one learner to the next. With no
job within ``--max-wait`` seconds (or its stdin closed) it exits 3 and takes
its sandbox down; a job that comes after the sandbox has died (or that it
does not fit: ``grader.Warm.fits``) is graded as a plain ``grade``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import sys
import time
import traceback
from pathlib import Path

from labs.exercises import EXERCISES, REQUIRED_FOR_CERTIFICATE, available, messages, starter
from labs.exercises.report import Finding, GradeReport, Pattern, Problem

EXIT = {"passed": 0, "failed": 1, "error": 2}
MARK = {"passed": "+", "failed": "x", "not_run": "."}


def _emit(text: str) -> None:
    """Print a line of output for a reader that may stop early (``grade ... | head``).

    Once the reader is gone, the rest of the output goes to /dev/null: the exit
    code still says how the grading went, and Python's own flush at exit finds
    nothing to complain about (it printed a BrokenPipeError traceback before)."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)


def _lang_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lang", default=messages.DEFAULT_LANG, choices=messages.languages(),
                        help="language of the texts (default en)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m labs.exercises", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _lang_option(sub.add_parser("list", help="the exercises"))
    show = sub.add_parser("show", help="statement, starter code and hints of one exercise")
    show.add_argument("exercise", choices=EXERCISES)
    _lang_option(show)
    grade = sub.add_parser("grade", help="grade a file on real ranks in the sandbox")
    grade.add_argument("exercise", choices=EXERCISES)
    grade.add_argument("file", type=Path)
    grade.add_argument("--json", action="store_true", help="print the report as JSON")
    grade.add_argument("--events", metavar="PATH", help="append progress events as JSON lines")
    grade.add_argument("--out", metavar="PATH", help="write the report as JSON")
    grade.add_argument("--seed", type=int, default=None, help="fix the numbers of the cases")
    _lang_option(grade)
    warm = sub.add_parser("warm", help="start the sandbox now, grade one job (any exercise) from stdin later")
    warm.add_argument("--max-wait", type=float, default=600.0, metavar="S",
                      help="exit if no job comes within S seconds (default 600)")
    return parser


def cmd_list(lang: str) -> int:
    loaded = set(available())
    for exercise_id in EXERCISES:
        if exercise_id not in loaded:
            continue
        texts = messages.exercise(exercise_id, lang)
        required = f"  [{messages.text('list_required', lang)}]" if exercise_id in REQUIRED_FOR_CERTIFICATE else ""
        _emit(f"{exercise_id:<18} {texts.get('title', '')}{required}")
        if texts.get("summary"):
            _emit(f"{'':<18} {texts['summary']}")
    return 0


def cmd_show(exercise_id: str, lang: str) -> int:
    texts = messages.exercise(exercise_id, lang)
    _emit(f"# {texts.get('title', exercise_id)}\n")
    _emit(str(texts.get("statement", "")).rstrip() + "\n")
    _emit(f"## {messages.text('show_starter', lang)}\n")
    _emit(starter(exercise_id).rstrip() + "\n")
    for i, hint in enumerate(texts.get("hints") or [], 1):
        _emit(f"## {messages.text('show_hint', lang, n=i)}\n\n{str(hint).rstrip()}\n")
    return 0


def finding_lines(finding: Finding | Problem, lang: str, exercise_id: str) -> list[str]:
    """A finding (or the error) as text lines: its message, then the learner's own frames when it has them."""
    lines = [messages.text(finding.key, lang, exercise=exercise_id, **finding.values)]
    for frame in finding.frames or []:
        lines.append("  " + messages.text("frame", lang, **frame))
    return lines


def pattern_line(pattern: Pattern, lang: str, exercise_id: str) -> str:
    """The message pattern the report names (``labs.exercises.patterns``): the case, its ranks, the family."""
    family = messages.text(f"family_{pattern.family}", lang, exercise_id)
    return messages.text("pattern_shown", lang, exercise_id, case=pattern.case,
                         world_size=pattern.world_size, family=family)


def waiting_lines(rows: list[dict], lang: str) -> list[str]:
    return [messages.waiting(row, lang) for row in rows]


def render(report: GradeReport, lang: str) -> str:
    exercise_id = report.exercise
    title = messages.exercise(exercise_id, lang).get("title", exercise_id)
    lines = [f"{title}: {messages.text('status_' + report.status, lang)}"]
    if report.error is not None:
        lines += finding_lines(report.error, lang, exercise_id)
        if report.error.output:
            lines += [messages.text("output", lang, rank=0), report.error.output.rstrip()]
    for case in report.cases:
        lines.append(f"  {MARK[case.status]} {case.id}")
        if case.status == "not_run":
            lines.append("      " + messages.text("case_not_run", lang))
        for finding in case.findings:
            if not finding.passed:
                lines += ["      " + line for line in finding_lines(finding, lang, exercise_id)]
        if case.waiting:
            lines += ["      " + line for line in waiting_lines(case.waiting, lang)]
        if case.status != "passed":
            for rank, text in sorted(case.output.items()):
                lines.append("      " + messages.text("output", lang, rank=rank))
                lines += ["        " + line for line in text.rstrip().splitlines()]
    if report.pattern is not None:
        lines.append(pattern_line(report.pattern, lang, exercise_id))
    if report.cases:
        counts = report.counts()
        lines.append(messages.text("summary", lang, passed=counts["passed"], total=len(report.cases),
                                   failed=counts["failed"], not_run=counts["not_run"],
                                   seconds=round(report.duration_s or 0.0, 1), sandbox=report.sandbox))
    return "\n".join(lines)


def cmd_grade(args, warm=None) -> int:
    from labs.exercises.grader import grade

    try:
        # Bytes, as the sandbox gets them: read as text, the file's lone CRs became LFs, so the
        # checks saw other lines than Python runs (review 2026-12-04 L-1). UTF-8 or refused.
        source = args.file.read_bytes()
        source.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        print(messages.text("file_unreadable", args.lang, path=str(args.file), reason=str(exc)), file=sys.stderr)
        return 2
    events = open(args.events, "a", buffering=1, encoding="utf-8") if args.events else None  # noqa: SIM115

    def on_event(event: dict) -> None:
        if events is not None:
            fraction = event["step"] / event["total_steps"] if event["total_steps"] else None
            events.write(json.dumps({"kind": "progress", "rank": None, "step": event["step"],
                                     "total_steps": event["total_steps"], "phase": "case",
                                     "fraction": fraction, "overall": fraction, "message": event["case"],
                                     "status": event["status"]}) + "\n")

    try:
        report = grade(args.exercise, source, seed=args.seed, on_event=on_event, warm=warm)
    except Exception:  # noqa: BLE001 - our own failure: Python's exit 1 would read as "a case failed"
        title = messages.exercise(args.exercise, args.lang).get("title", args.exercise)
        _emit(f"{title}: {messages.text('status_error', args.lang)}")
        traceback.print_exc()
        return EXIT["error"]
    finally:
        if events is not None:
            events.close()
    document = json.dumps(report.dump(), indent=1)
    if args.out:
        Path(args.out).write_text(document, encoding="utf-8")
    _emit(document if args.json else render(report, args.lang))
    return EXIT[report.status]


NO_JOB = 3  # the warm grader's exit when it ends without a job


def cmd_warm(max_wait_s: float) -> int:
    from labs.exercises.grader import prestart
    from labs.sandbox import run as sandbox

    deadline = time.monotonic() + max_wait_s
    with contextlib.ExitStack() as stack:
        try:
            warm = stack.enter_context(prestart())
        except sandbox.SandboxUnavailable:
            warm = None  # the job's grade says why, as the command alone would
        if warm is not None:  # returns at once when the job is there, or when the sandbox ended
            warm.started.wait(0, max_wait_s)
        waited = select.select([0], [], [], max(0.0, deadline - time.monotonic()))[0]
        line = sys.stdin.buffer.readline() if waited else b""
        try:
            job = json.loads(line)
            args = _parser().parse_args(job["argv"])
            output = os.open(job["output"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except (ValueError, KeyError, TypeError, OSError, SystemExit):
            return NO_JOB
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.close(output)
        if args.command != "grade":
            return NO_JOB
        return cmd_grade(args, warm=warm)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "list":
        return cmd_list(args.lang)
    if args.command == "show":
        return cmd_show(args.exercise, args.lang)
    if args.command == "warm":
        return cmd_warm(args.max_wait)
    return cmd_grade(args)


if __name__ == "__main__":
    code = main()
    if sys.argv[1:2] in (["grade"], ["warm"]):
        # The report is written and the sandbox gone; the worker reads the report once this
        # process has exited: skip the interpreter's teardown of PyTorch (a tenth of a second).
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)
    sys.exit(code)
