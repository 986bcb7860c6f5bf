"""A grading's report, typed: the grader builds it, the worker stores it, the page reads it.

    from labs.exercises.report import GradeReport
    report = grade("ring-allreduce", source)         # labs.exercises.grader: a GradeReport
    report.status, report.cases[0].findings[0].key    # "passed" | "failed" | "error"; a message key
    stored = report.dump()                            # what --json prints and LabRun.result keeps
    GradeReport.model_validate(stored)                # the same report again, on the page

Every text in it is a message key plus values, rendered per language by
``labs.exercises.messages``: a `Finding` is one check of one case (or what
stopped the case), a `Problem` what kept the whole file from being graded.
Values, frames, the learner's prints and a deadlock's waits come from the
learner's run: plain data, shown as text. ``trace`` is an exercise's own
drawing data (the ring's sends, bucketed-overlap's lanes), read by the page's
drawer for it.

What a stored report may cost is decided here too: `capped` (at most
``LAB_RESULT_MAX_BYTES``; over it, a small error report that says so, never a
pass) and `slim` (what an older run keeps once newer ones follow: the verdict,
the error's key and each case's id and status). Older stored reports read as
they were: a field added later is optional, with the value they meant.
Torch-free, like everything the platform reads.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field
from pydantic_core import to_json

from labs.reports import TOO_LARGE

Status = Literal["passed", "failed", "error"]
CaseStatus = Literal["passed", "failed", "not_run"]
SMALL_VALUES = 1024  # bytes of an error's values that a slimmed report keeps


def _absent(value: Any) -> bool:
    return value is None


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class Finding(_Model):
    """One check of one case (``labs.exercises.checks``), or what stopped the case (a crash,
    a deadlock, a refused call): ``key`` names its message, ``values`` fill it."""

    check: str
    passed: bool
    key: str
    values: dict[str, Any] = {}
    frames: list[dict[str, Any]] | None = Field(None, exclude_if=_absent)  # the learner's own, newest last


class Problem(_Model):
    """Why the file could not be graded as a whole (a syntax error, a missing function, the
    sandbox), as a message key and its values, with what helps the learner see why."""

    key: str
    values: dict[str, Any] = {}
    frames: list[dict[str, Any]] | None = Field(None, exclude_if=_absent)
    output: str | None = Field(None, exclude_if=_absent)  # what the file printed while loading
    detail: str | None = Field(None, exclude_if=_absent)  # the harness's last words, for us


class CaseReport(_Model):
    """One hidden case: its ranks and tensor, its verdict, and what the checks found."""

    id: str
    status: CaseStatus
    world_size: int
    size: int  # elements (a data set's samples, a batch's: the exercise's CASE_SIZE says)
    shape: list[int] | None = Field(None, exclude_if=_absent)  # a slimmed report drops it
    dtype: str
    src: int | None = Field(None, exclude_if=_absent)  # broadcast: the rank the tensor comes from
    nodes: list[list[int]] | None = Field(None, exclude_if=_absent)  # hierarchical-allreduce: its node map
    findings: list[Finding] = []
    output: dict[str, str] = {}  # each rank's prints (by rank, as text), capped by the harness
    waiting: list[dict[str, Any]] | None = Field(None, exclude_if=_absent)  # a deadlock's blocked calls


class Pattern(_Model):
    """The message pattern of the exercise's ``PATTERN_CASE``, named from the router's log
    (``labs.exercises.patterns``); the family's own figures ride along."""

    model_config = ConfigDict(frozen=True, extra="allow")

    case: str
    family: str
    world_size: int


class GradeReport(_Model):
    """The report of one grading (``labs.exercises.grader.grade``)."""

    exercise: str
    status: Status
    error: Problem | None = None
    cases: list[CaseReport] = []
    trace: dict[str, Any] | None = None  # the exercise's TRACE_CASE, drawn by the page
    pattern: Pattern | None = None  # added with the closed router: older reports have none
    duration_s: float | None = None  # None: a report that was too large to keep
    sandbox: str = ""
    # Its grader's fingerprint (``grader.fingerprint``), which ``academy.regrade`` compares:
    # reports from before issue #35 have none.
    grader: str | None = Field(None, exclude_if=_absent)
    pruned: bool = Field(False, exclude_if=lambda kept: not kept)  # only a slimmed report says it

    @computed_field
    @property
    def ok(self) -> bool:
        """Whether the file passed: every hidden case on every rank (kept in the JSON for its readers)."""
        return self.status == "passed"

    @classmethod
    def of(cls, exercise: str, *, error: Problem | None = None, cases: list[CaseReport] = (),
           **rest: Any) -> GradeReport:
        """A report with the status its error and cases give: an error, every case passed, or failed.

        A report without cases has not passed: a pass means every hidden case passed."""
        cases = list(cases)
        if error is not None:
            status = "error"
        elif cases and all(case.status == "passed" for case in cases):
            status = "passed"
        else:
            status = "failed"
        return cls(exercise=exercise, status=status, error=error, cases=cases, **rest)

    def counts(self) -> dict[str, int]:
        """How many cases passed, failed and were not run (stopped after a failure)."""
        counts = {"passed": 0, "failed": 0, "not_run": 0}
        for case in self.cases:
            counts[case.status] += 1
        return counts

    def dump(self) -> dict[str, Any]:
        """The report as JSON values: what ``--json`` prints and a run's result keeps."""
        return self.model_dump(mode="json")

    def size(self) -> int:
        """Bytes of its compact JSON, as a stored report is measured."""
        return len(self.model_dump_json().encode())

    def capped(self, limit: int) -> GradeReport:
        """This report if it fits in ``limit`` bytes; else a small error report saying how large it was.

        Learner code decides much of a report (crash messages, frames, prints): one
        submission's report had 2.7 MB (review N-6). Too large is never a pass."""
        size = self.size()
        if size <= limit:
            return self
        return GradeReport(exercise=self.exercise, status="error", grader=self.grader,
                           error=Problem(key=TOO_LARGE, values={"size": size, "limit": limit}))

    def slim(self) -> GradeReport:
        """What an older run keeps: the verdict, the error's key (and its values when small),
        each case's id, status, ranks and size, and its grader; no findings, prints, waits,
        trace or pattern."""
        error = self.error
        if error is not None:
            small = len(to_json(error.values)) <= SMALL_VALUES
            error = Problem(key=error.key, values=error.values if small else {})
        cases = [CaseReport(id=c.id, status=c.status, world_size=c.world_size, size=c.size, dtype=c.dtype)
                 for c in self.cases]
        return self.model_copy(update={"error": error, "cases": cases, "trace": None, "pattern": None,
                                       "pruned": True})
