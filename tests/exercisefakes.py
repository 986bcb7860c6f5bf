"""A stand-in for ``labs.exercises`` in the page and store tests: two exercises with
their text, starter and reference, and a grading report in the design's format.

The store and the page ask ``academy.exercises`` for the catalog and the texts;
:func:`install` points those few functions here, so these tests check our own
code (drafts, hints, the queue's bookkeeping, what reaches the browser) and not
the grader, which tests of its own cover.
"""

from __future__ import annotations

from typing import Any

from academy import exercises

IDS = ("ring-allreduce", "broadcast")
REQUIRED = ("ring-allreduce", "broadcast")
STARTER = {ex: f"def {ex.replace('-', '_')}(tensor):\n    raise NotImplementedError  # starter {ex}\n"
           for ex in IDS}
# A line no statement, hint or starter holds: the tests look for it in what reaches the browser.
REFERENCE = {ex: f"def {ex.replace('-', '_')}(tensor):\n    return 'REFERENCE-SOLUTION-{ex}'\n" for ex in IDS}
TEXT = {
    ex: {"title": f"Title {ex}", "summary": f"Summary of {ex}.",
         "statement": f"Write **{ex.replace('-', '_')}** with send and recv.",
         "hints": [f"Hint one of {ex}", f"Hint two of {ex}", f"Hint three of {ex}"]}
    for ex in IDS
}


def message(key: str, lang: str, values: dict[str, Any] | None = None, exercise: str | None = None) -> str:  # noqa: ARG001
    return f"[{lang}] {key} " + " ".join(f"{k}={v}" for k, v in sorted((values or {}).items()))


def install(monkeypatch) -> None:
    monkeypatch.setattr(exercises, "catalog", lambda: IDS)
    monkeypatch.setattr(exercises, "required", lambda: REQUIRED)
    monkeypatch.setattr(exercises, "starter", lambda ex: STARTER[exercises.check_exercise(ex)])
    monkeypatch.setattr(exercises, "reference", lambda ex: REFERENCE[exercises.check_exercise(ex)])
    monkeypatch.setattr(exercises, "text", lambda ex, _lang: TEXT[exercises.check_exercise(ex)])
    monkeypatch.setattr(exercises, "message", message)


def report(exercise: str = "ring-allreduce", *, passed: bool = True) -> dict[str, Any]:
    """A grading report as ``python -m labs.exercises grade --json`` writes it (the JSON of a
    ``labs.exercises.report.GradeReport``, as a run's result keeps it)."""
    traces = [[{"step": s, "phase": "reduce-scatter" if s < 2 else "all-gather", "send_chunk": (r - s) % 3,
                "send_to": (r + 1) % 3, "recv_from": (r - 1) % 3, "bytes": 12,
                "t_start": 0.001 * s, "t_end": 0.001 * s + 0.0008} for s in range(4)] for r in range(3)]
    case_ok = {"id": "w3-n7-float32", "world_size": 3, "size": 7, "dtype": "float32", "status": "passed",
               "findings": [{"check": "values", "passed": True, "key": "values_ok", "values": {}}],
               "waiting": [], "output": {}}
    case_bad = {"id": "w2-n1-float64", "world_size": 2, "size": 1, "dtype": "float64", "status": "failed",
                "findings": [{"check": "bytes", "passed": False, "key": "bytes_whole_buffer",
                              "values": {"rank": 0, "sent": 84, "expected": 56}}],
                "waiting": [], "output": {"0": "<b>printed by rank 0</b>"}}
    return {"exercise": exercise, "status": "passed" if passed else "failed", "ok": passed, "error": None,
            "cases": [case_ok] if passed else [case_ok, case_bad],
            "trace": {"world_size": 3, "size": 7, "dtype": "float32", "traces": traces},
            "pattern": {"case": "w3-n7-float32", "family": "ring", "world_size": 3, "messages": 4},
            "duration_s": 1.5, "sandbox": "none"}
