"""The coding exercises ring-allreduce and broadcast, graded for real (issue #16).

Solutions written for these tests from scratch (tests/fixtures/exercises/,
not the reference) must pass every case (one from the command line, the
others through ``grader.grade``, the function behind it); known mistakes
must fail with the right message: a whole-buffer ring (values
right, bytes wrong from 3 ranks on), a ring of blocking sends (a deadlock,
with what each rank waited for), a crash (only the learner's frames), a new
tensor returned instead of writing in place. The bytes rules themselves are
checked without any process, on the sends a ring makes for every size.
A grading two tests assert on (the command line's passing and whole-buffer
runs) is made once, in a module-scoped fixture.

The sandbox mode is ``EXERCISE_SANDBOX`` (bwrap, as CI runs as root; none on
a machine without bubblewrap).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from labs import exercises
from labs.exercises import grader
from labs.exercises.broadcast import exercise as bcast_ex
from labs.exercises.report import Finding, GradeReport, Problem
from labs.exercises.ring_allreduce import exercise as ring_ex
from labs.sandbox import run as sandbox
from tests.exercisepass import passing_report

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "exercises"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "labs.exercises", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def failing(report: GradeReport) -> dict[str, list[Finding]]:
    return {c.id: [f for f in c.findings if not f.passed] for c in report.cases if c.status != "passed"}


# --------------------------------------------------------------------------
# The bytes rules, on the sends real rings make (no processes)


def _ring_sends(numel: int, n: int, elem: int, split) -> list[list[int]]:
    """Bytes of each message each rank sends in a ring all-reduce over chunks ``split(numel, n)``."""
    sizes = split(numel, n)
    out = []
    for r in range(n):
        msgs = [sizes[(r - s) % n] * elem for s in range(n - 1)]
        msgs += [sizes[(r + 1 - s) % n] * elem for s in range(n - 1)]
        out.append(msgs)
    return out


def _tensor_split(numel, n):
    return [c.numel() for c in torch.tensor_split(torch.empty(numel), n)]


def _ceil_split(numel, n):
    per = -(-numel // n)
    return [max(0, min(per, numel - i * per)) for i in range(n)]


def _ranks(case, sends_per_rank, *, received=None):
    ranks = []
    for r, msgs in enumerate(sends_per_rank):
        calls = [{"op": "isend", "peer": (r + 1) % len(sends_per_rank), "bytes": b} for b in msgs]
        ranks.append({"rank": r, "sent": sum(msgs), "received": received[r] if received else 0, "calls": calls,
                      "expected": {"values": [0.0] * math.prod(case["shape"])}})
    return ranks


@pytest.mark.parametrize("split", [_tensor_split, _ceil_split])
def test_every_chunked_ring_passes_the_bytes_rule(split):
    for n in (2, 3, 4):
        for numel in range(1, 30):
            for dtype, elem in (("float32", 4), ("float64", 8)):
                case = {"shape": [numel], "dtype": dtype}
                finding = ring_ex.bytes_check(case, _ranks(case, _ring_sends(numel, n, elem, split)))
                assert finding["passed"], (n, numel, dtype, finding)


def test_a_whole_buffer_ring_fails_the_bytes_rule_from_three_ranks_on():
    for n in (2, 3, 4):
        for numel in (1, 2, 7, 16):
            case = {"shape": [numel], "dtype": "float32"}
            size = numel * 4
            finding = ring_ex.bytes_check(case, _ranks(case, [[size] * (n - 1)] * n))
            if n == 2:  # one message of S each: the same as a ring, and as good as it gets
                assert finding["passed"]
                continue
            assert finding["key"] == "bytes_whole_buffer", (n, numel, finding)
            assert finding["values"]["sent"] == (n - 1) * size
            assert finding["values"]["whole"] == (n - 1) * size


def test_nothing_sent_or_one_extra_chunk_fails_the_bytes_rule():
    case = {"shape": [10], "dtype": "float32"}
    assert ring_ex.bytes_check(case, _ranks(case, [[]] * 4))["key"] == "bytes_none"
    sends = _ring_sends(10, 4, 4, _tensor_split)
    sends[2] = sends[2] + [sends[2][0]]  # rank 2 sends one chunk twice
    assert not ring_ex.bytes_check(case, _ranks(case, sends))["passed"]


def test_the_broadcast_bytes_rule():
    case = {"shape": [5], "dtype": "float64", "src": 2}
    s = 40

    def ranks(sent, received):
        return [{"rank": r, "sent": sent[r], "received": received[r], "calls": []} for r in range(4)]

    chain = ranks([s, s, s, 0], [s, s, 0, s])  # 2 -> 3 -> 0 -> 1
    star = ranks([0, 0, 3 * s, 0], [s, s, 0, s])
    assert bcast_ex.bytes_check(case, chain)["passed"]
    assert bcast_ex.bytes_check(case, star)["passed"]
    assert bcast_ex.bytes_check(case, ranks([0, 0, 3 * s, 0], [s, 2 * s, 0, s]))["key"] == "bytes_received"
    assert bcast_ex.bytes_check(case, ranks([0, 0, 3 * s, 0], [s, s, s, s]))["key"] == "bytes_src_received"
    assert bcast_ex.bytes_check(case, ranks([0, 0, 0, 0], [0, 0, 0, 0]))["key"] == "bytes_none"


def _results(case, ranks):
    """``ranks`` with a result the other checks pass: the expected values, in place."""
    for r in ranks:
        r["result"] = {"values": r["expected"]["values"], "shape": case["shape"], "dtype": case["dtype"],
                       "same_storage": True, "returned": None}
    return ranks


def test_values_tolerance_is_rounding_for_floats_and_exact_for_integers():
    def ranks(got, want, sums):
        return [{"rank": 0, "result": {"values": got}, "expected": {"values": want, "abs_sum": sums}}]

    f32 = {"dtype": "float32"}
    assert ring_ex.checks.values(f32, ranks([1.0 + 1e-7], [1.0], [1.0]) * 4)["passed"]
    assert not ring_ex.checks.values(f32, ranks([1.001], [1.0], [1.0]) * 4)["passed"]
    assert not ring_ex.checks.values(f32, ranks([float("nan")], [1.0], [1.0]) * 4)["passed"]
    wrong = ring_ex.checks.values({"dtype": "int64"}, ranks([3, 5], [3, 4], [3.0, 4.0]) * 2)
    assert wrong["key"] == "values_wrong" and wrong["values"]["index"] == 1


def test_cases_cover_what_the_issue_asks():
    ring = ring_ex.cases(1)
    assert {c["world_size"] for c in ring} == {2, 3, 4}
    for n in (2, 3, 4):
        sizes = [math.prod(c["shape"]) for c in ring if c["world_size"] == n]
        assert any(s % n == 0 for s in sizes) and any(s % n for s in sizes)
        assert 1 in sizes and any(s < n for s in sizes)
    assert any(len(c["shape"]) == 2 for c in ring)
    assert {"float32", "float64", "int64"} <= {c["dtype"] for c in ring}
    assert len({c["id"] for c in ring}) == len(ring)
    srcs = {c["src"] for c in bcast_ex.cases(1)}
    assert srcs - {0}, "broadcast must not only come from rank 0"


# --------------------------------------------------------------------------
# Graded on real ranks


@pytest.fixture(scope="module")
def broadcast_star_cli(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict, Path]:
    """``grade broadcast broadcast_star.py --json --events E --out O`` from the command line,
    once for the module: (the process, the report it wrote, its events file)."""
    folder = tmp_path_factory.mktemp("broadcast-star")
    out, events = folder / "report.json", folder / "events.jsonl"
    proc = cli("grade", "broadcast", str(FIXTURES / "broadcast_star.py"), "--json", "--events", str(events),
               "--out", str(out))
    return proc, json.loads(out.read_text()) if out.exists() else {}, events


@pytest.fixture(scope="module")
def whole_buffer_cli() -> subprocess.CompletedProcess:
    """``grade ring-allreduce ring_whole_buffer.py --json`` from the command line, once for the module."""
    return cli("grade", "ring-allreduce", str(FIXTURES / "ring_whole_buffer.py"), "--json")


# Each solution from scratch, and the message pattern its report names (labs.exercises.patterns).
FROM_SCRATCH = (("ring-allreduce", "ring_isend_irecv.py", "ring"), ("ring-allreduce", "ring_pipelined.py", "pipelined_ring"),
                ("broadcast", "broadcast_chain.py", "chain"))


@pytest.mark.needs_sandbox
def test_solutions_from_scratch_pass_every_case_from_the_command_line(broadcast_star_cli):
    """broadcast_star.py through ``python -m labs.exercises grade``; the others through
    ``grader.grade``, the function behind it, with the exit status the command would give.
    The ring with ceil-sized chunks sends empty chunks where a case's tensor leaves some
    empty, and the pipelined ring sends each chunk in up to three segments: both are rings."""
    from labs.exercises.__main__ import EXIT

    proc, written, _events = broadcast_star_cli
    graded = [("broadcast", "broadcast_star.py", "star", proc.returncode, GradeReport.model_validate(written),
               proc.stdout[-3000:] + proc.stderr[-2000:])]
    for exercise_id, fixture, family in FROM_SCRATCH:
        report = grader.grade(exercise_id, (FIXTURES / fixture).read_text("utf-8"))
        graded.append((exercise_id, fixture, family, EXIT[report.status], report, report.model_dump_json()[:3000]))
    for exercise_id, fixture, family, code, report, shown in graded:
        assert code == 0, (fixture, shown)
        assert report.status == "passed" and report.ok is True
        assert len(report.cases) == len(exercises.load(exercise_id).cases(0))
        assert all(f.passed for c in report.cases for f in c.findings)
        assert report.pattern.family == family and report.pattern.world_size == 4, (fixture, report.pattern)


@pytest.mark.needs_sandbox
def test_the_reference_passes_and_the_ring_report_has_the_learners_trace():
    report = passing_report("ring-allreduce")  # asserts that it passed
    assert len(report.cases) == len(exercises.load("ring-allreduce").cases(0))
    trace = report.trace
    assert trace["world_size"] == 4 and len(trace["traces"]) == 4
    assert (trace["size"], trace["size_bytes"], trace["dtype"]) == (10, 40, "float32")
    from labs.ring.ringtrace import trace_steps

    steps, durations = trace_steps(trace["traces"])
    assert len(steps) == 2 * (4 - 1) == len(durations)
    # Step 0 of reduce-scatter: rank r sends its own chunk r to rank r+1 (as labs.ring does).
    assert sorted(steps[0]) == [(r, (r + 1) % 4, r, "reduce-scatter") for r in range(4)]
    assert steps[-1][0][3] == "all-gather"
    assert report.pattern.model_dump() == {"case": "w4-n10-float32", "family": "ring", "world_size": 4, "messages": 6}
    broadcast = passing_report("broadcast")  # asserts that it passed
    assert broadcast.status == "passed" and broadcast.pattern.family == "tree"  # binomial


@pytest.mark.needs_sandbox
def test_a_ring_with_its_own_chunk_split_still_draws_its_chunks():
    """Chunks cut another way than tensor_split (floor-sized, remainder last) are
    still named in the trace, so the page animates the learner's own ring."""
    report = grader.grade("ring-allreduce", (FIXTURES / "ring_floor_chunks.py").read_text("utf-8"),
                          case_ids=["w4-n10-float32"])
    assert report.status == "passed", failing(report)
    from labs.ring.ringtrace import trace_steps

    steps, _ = trace_steps(report.trace["traces"])
    assert sorted(steps[0]) == [(r, (r + 1) % 4, r, "reduce-scatter") for r in range(4)]
    assert all(chunk is not None for step in steps for (_src, _dst, chunk, _phase) in step)


@pytest.mark.needs_sandbox
def test_a_whole_buffer_ring_passes_values_and_fails_bytes_with_an_explanation(whole_buffer_cli):
    proc = whole_buffer_cli
    assert proc.returncode == 1, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    for case in report["cases"]:
        by_check = {f["check"]: f for f in case["findings"]}
        assert by_check["values"]["passed"] and by_check["in_place"]["passed"], case
        if case["world_size"] == 2:
            assert case["status"] == "passed", case
        else:
            assert by_check["bytes"]["key"] == "bytes_whole_buffer", case
            values = by_check["bytes"]["values"]
            assert values["sent"] == values["whole"] == (case["world_size"] - 1) * values["size"]
    # The animation draws whole-buffer sends: no chunk numbers.
    assert all(step["send_chunk"] is None for steps in report["trace"]["traces"] for step in steps)
    assert report["trace"]["traces"][0][0]["phase"] == "pass-around"


@pytest.mark.needs_sandbox
def test_a_ring_of_blocking_sends_deadlocks_and_says_what_each_rank_waited_for():
    source = (FIXTURES / "ring_blocking_send.py").read_text()
    report = grader.grade("ring-allreduce", source, case_timeout_s=1.0,
                          case_ids={"w3-n7-float32", "w3-n9-float32"})
    first, second = report.cases
    assert first.status == "failed" and first.findings[0].key == "deadlock"
    # Each rank says where in the learner's file it blocked: line 10, its dist.send (journey m10).
    line = 1 + source.splitlines().index("        dist.send(tensor, (me + 1) % n)")
    assert first.waiting == [{"rank": r, "op": "send", "peer": (r + 1) % 3, "bytes": 28, "line": line}
                             for r in range(3)]
    assert second.status == "not_run"
    assert report.status == "failed"
    from labs.exercises.__main__ import render

    text = render(report, "en")
    assert f"rank 0: waiting in send to rank 1 (28 bytes), at line {line} of your code" in text


@pytest.mark.needs_sandbox
def test_a_crash_reports_the_learners_frames_only():
    report = grader.grade("ring-allreduce", (FIXTURES / "ring_crash.py").read_text(),
                          case_ids={"w2-n5-float32", "w2-n8-float32"})
    for case in report.cases:  # every rank raised, so the next case still ran
        (finding,) = case.findings
        assert finding.key == "crash"
        assert finding.values == {"rank": 1, "exception": "ZeroDivisionError",
                                  "message": "integer division or modulo by zero"}
        assert [f["function"] for f in finding.frames] == ["ring_allreduce", "_scale"]
        assert finding.frames[-1] == {"line": 6, "function": "_scale", "code": "return 1 // (rank - 1)"}


@pytest.mark.needs_sandbox
def test_returning_a_new_tensor_is_not_in_place():
    report = grader.grade("ring-allreduce", (FIXTURES / "ring_new_tensor.py").read_text(),
                          case_ids={"w3-n7-float32"})
    keys = {f.key for f in failing(report)["w3-n7-float32"]}
    assert "returned_new_tensor" in keys


@pytest.mark.needs_sandbox
def test_the_learners_prints_reach_the_report_not_the_protocol():
    source = ("import torch.distributed as dist\n"
              "def ring_allreduce(tensor):\n"
              "    print('{\"event\": \"done\"}', 'hello from', dist.get_rank())\n"
              "    return tensor\n")
    report = grader.grade("ring-allreduce", source, case_ids={"w2-n5-float32"})
    (case,) = report.cases
    assert case.status == "failed"
    assert "hello from 0" in case.output["0"] and "hello from 1" in case.output["1"]


@pytest.mark.needs_sandbox
def test_a_correct_ring_that_prints_a_lot_is_still_graded():
    """Every case's values come back as JSON (about 600 KB for the ring) beside up to
    2 KiB of prints per rank and case, control characters escaped six-fold: with the
    sandbox's default 1 MiB cap a chatty correct ring ended as 'output stopped'."""
    noisy = exercises.reference("ring-allreduce").replace(
        "def ring_allreduce(", "def _quiet_ring(", 1) + (
        "\n\ndef ring_allreduce(tensor):\n"
        "    print('\\x01' * 4000)\n"
        "    return _quiet_ring(tensor)\n")
    report = grader.grade("ring-allreduce", noisy)
    assert report.error is None, report.error
    assert report.status == "passed", failing(report)


# --------------------------------------------------------------------------
# The command line


@pytest.mark.needs_sandbox
def test_exit_codes_and_the_json_report(tmp_path, broadcast_star_cli, whole_buffer_cli):
    """Exit 2 (a syntax error, as JSON; a missing function, as text in Dutch), 0 with the
    JSON report and its events (broadcast_star.py), 1 when a case failed (a whole-buffer
    ring): the last two gradings are the module's, shared with the tests above."""
    broken = tmp_path / "broken.py"
    broken.write_text("def ring_allreduce(tensor)\n    return tensor\n")
    proc = cli("grade", "ring-allreduce", str(broken), "--json")
    assert proc.returncode == 2
    report = json.loads(proc.stdout)
    assert report["status"] == "error" and report["error"]["key"] == "syntax_error"
    assert report["error"]["values"]["line"] == 1 and report["cases"] == []

    proc = cli("grade", "ring-allreduce", str(FIXTURES / "ring_missing_function.py"), "--lang", "nl")
    assert proc.returncode == 2
    assert "ring_allreduce" in proc.stdout

    proc, _report, events = broadcast_star_cli
    assert proc.returncode == 0, proc.stdout[-2000:]
    report = json.loads(proc.stdout)
    assert set(report) == {"exercise", "status", "ok", "error", "cases", "trace", "pattern", "duration_s", "sandbox",
                           "grader"}
    assert report["grader"] == grader.fingerprint("broadcast")  # which grader graded it (issue #35)
    assert report["sandbox"] in sandbox.MODES and report["error"] is None
    case = report["cases"][0]
    assert {"id", "world_size", "size", "dtype", "status", "findings", "output"} <= set(case)
    assert {"check", "passed", "key", "values"} <= set(case["findings"][0])
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    assert [e["step"] for e in lines] == list(range(1, len(report["cases"]) + 1))
    assert lines[-1]["fraction"] == 1.0 and lines[-1]["kind"] == "progress"

    assert whole_buffer_cli.returncode == 1


@pytest.mark.slow
def test_list_and_show_never_show_the_reference():
    proc = cli("list")
    assert proc.returncode == 0
    assert "ring-allreduce" in proc.stdout and "broadcast" in proc.stdout
    for lang in ("en", "zh", "nl"):
        proc = cli("show", "ring-allreduce", "--lang", lang)
        assert proc.returncode == 0
        assert "def ring_allreduce(tensor):" in proc.stdout  # the starter
        assert "chunks[recv_c].add_(into)" not in proc.stdout  # a line only the reference has
        assert proc.stdout.count("## ") >= 4  # starter code and three or more hints


def test_the_sandbox_refusing_is_exit_2(monkeypatch):
    def unavailable(_mode=None):
        raise sandbox.SandboxUnavailable("bwrap: not installed")

    monkeypatch.setattr(sandbox, "check_available", unavailable)
    report = grader.grade("ring-allreduce", exercises.reference("ring-allreduce"))
    assert report.status == "error"
    assert report.error == Problem(key="sandbox_unavailable", values={"reason": "bwrap: not installed"})
    from labs.exercises.__main__ import EXIT

    assert EXIT[report.status] == 2


def test_static_checks_find_syntax_errors_and_missing_names_without_running_anything():
    assert grader.static_error("def ring_allreduce(t):\n    return t\n", "ring_allreduce") is None
    assert grader.static_error("class Bucketer:\n    pass\n", "Bucketer") is None
    assert grader.static_error("def mine(t):\n    return t\nring_allreduce = mine\n", "ring_allreduce") is None
    assert grader.static_error("from helpers import ring_allreduce\n", "ring_allreduce") is None
    nested = "def outer():\n    def ring_allreduce(t):\n        return t\n"
    assert grader.static_error(nested, "ring_allreduce").key == "missing_function"
    error = grader.static_error("x = 1\ndef f(:\n", "f")
    assert error.key == "syntax_error" and error.values["line"] == 2
    assert grader.static_error("x = '\0'", "f").key in ("syntax_error", "missing_function")


def test_static_check_refuses_a_declared_encoding_that_hides_code():
    # Review N-8. Under utf-7 "+AAo-" is a line break: what the page shows (and ast reads from the
    # text) is a one-line stub; what Python runs from the file's bytes has a second statement.
    import ast

    from labs.exercises import messages

    source = "# -*- coding: utf-7 -*-\ndef ring_allreduce(tensor):\n    return tensor  # done+AAo-import os\n"
    assert (len(ast.parse(source).body), len(ast.parse(source.encode()).body)) == (1, 2)
    assert grader.static_error(source, "ring_allreduce") == Problem(key="source_encoding", values={"encoding": "utf-7"})
    assert grader.static_error("# coding: latin-1\ndef f():\n    pass\n", "f").key == "source_encoding"
    for utf8 in ("# -*- coding: utf-8 -*-\n", "# coding: UTF8\n", "x = 1\n# coding: latin-1\n"):
        assert grader.static_error(f"{utf8}def f():\n    pass\n", "f") is None, utf8
    said = [messages.text("source_encoding", lang, encoding="utf-7") for lang in ("en", "zh", "nl")]
    assert all("utf-7" in text for text in said) and len(set(said)) == 3


# Review 2026-12-04 L-1: a lone CR ends a line for Python's compiler, so this cookie is on line 2
# and the file runs as utf-7 ("+ACM-" is "#": the stub's return is commented out, the hidden line runs).
LONE_CR = b"\r# coding: utf-7\ndef ring_allreduce(tensor):\n    return tensor  +ACM-\n"


def test_a_cookie_after_a_lone_cr_is_found_as_python_finds_it():
    assert grader.static_error(LONE_CR, "ring_allreduce") == Problem(key="source_encoding", values={"encoding": "utf-7"})
    assert grader.static_error(LONE_CR.decode(), "ring_allreduce").key == "source_encoding"
    crlf = b"#!/usr/bin/env python\r\n# vim: fileencoding=latin-1\r\ndef ring_allreduce(t):\r\n    return t\r\n"
    assert grader.static_error(crlf, "ring_allreduce").key == "source_encoding"
    # Line 3 after CRs is past where Python looks, and after code it is a comment: both fine.
    for fine in (b"\n\r# coding: utf-7\n", b"x = 1\r# coding: utf-7\n"):
        assert grader.static_error(fine + b"def ring_allreduce(t):\n    return t\n", "ring_allreduce") is None


def test_the_grade_command_grades_the_files_bytes_without_newline_translation(monkeypatch, tmp_path):
    """The checks and the sandbox see the same bytes: read as text, the CR above became an LF."""
    from labs.exercises import __main__ as cli_main

    seen = []

    def recording(_exercise, source, **_kwargs):
        seen.append(source)
        return grader._report("ring-allreduce", error=Problem(key="syntax_error", values={"line": 1, "message": ""}))

    monkeypatch.setattr(grader, "grade", recording)
    mine = tmp_path / "mine.py"
    body = b"def ring_allreduce(tensor):\r    return tensor\r\n"
    mine.write_bytes(body)
    assert cli_main.main(["grade", "ring-allreduce", str(mine)]) == 2
    assert seen == [body]
    monkeypatch.undo()
    mine.write_bytes(LONE_CR)
    out = tmp_path / "report.json"
    assert cli_main.main(["grade", "ring-allreduce", str(mine), "--out", str(out)]) == 2
    assert json.loads(out.read_text())["error"] == {"key": "source_encoding", "values": {"encoding": "utf-7"}}


@pytest.mark.needs_sandbox
def test_a_file_that_never_finishes_loading_is_stopped_and_says_so():
    source = "print('loading')\nwhile True:\n    pass\n\ndef ring_allreduce(tensor):\n    return tensor\n"
    report = grader.grade("ring-allreduce", source, case_timeout_s=1.0, case_ids={"w2-n5-float32"})
    assert report.status == "error"
    assert report.error.key == "import_timeout" and report.error.values == {"seconds": 1.0}
    assert "loading" in report.error.output


@pytest.mark.needs_sandbox
def test_a_rank_that_exits_is_reported_as_ended_not_as_a_deadlock():
    source = ("import os\nimport torch.distributed as dist\n\n\ndef ring_allreduce(tensor):\n"
              "    if dist.get_rank() == 1:\n        os._exit(0)\n    return tensor\n")
    report = grader.grade("ring-allreduce", source, case_ids={"w2-n5-float32", "w2-n8-float32"})
    first, second = report.cases
    assert first.findings == [Finding(check="crash", passed=False, key="rank_died", values={"rank": 1})]
    assert second.status == "not_run"


def _passing_ring_case_event(case: dict, index: int, total: int) -> dict:
    """A harness "case" event in which both ranks of a one-element ring case did everything right."""
    ranks = [{"rank": r, "expected": {"values": [3.0], "abs_sum": [3.0]}, "output": "",
              "traffic": {"sent": 4, "received": 4, "calls": []},
              "reply": {"type": "result", "result": {"values": [3.0], "shape": [1], "dtype": "float32",
                                                     "same_storage": True, "returned": None}}} for r in range(2)]
    return {"event": "case", "index": index, "total": total, "case": case, "status": "done", "ranks": ranks}


def test_a_report_that_lacks_planned_cases_is_not_a_pass(monkeypatch):
    """Only a report of every planned case can pass: a harness that ended cleanly after one
    passing case of two (events lost, a group skipped) is a grading failure, never a pass."""
    wanted = {"w2-n1-float32", "w2-n5-float32"}

    def harness_that_stops_early(_module, _args, *, stdin, on_line, mode, **_options):
        plan = json.loads(stdin)
        first = dict(plan["groups"][0]["cases"][0])
        assert first["id"] == "w2-n1-float32"
        for event in ({"event": "start", "total": 2}, _passing_ring_case_event(first, 1, 2),
                      {"event": "done", "duration_s": 0.1}):
            on_line(json.dumps(event).encode())
        return sandbox.Outcome(returncode=0, stdout=b"", stderr=b"", duration_s=0.1, mode=mode, stopped=None)

    monkeypatch.setattr(sandbox, "check_available", lambda _mode=None: None)
    monkeypatch.setattr(sandbox, "run_python", harness_that_stops_early)
    report = grader.grade("ring-allreduce", exercises.reference("ring-allreduce"), case_ids=wanted)
    assert [c.status for c in report.cases] == ["passed"]  # the one case it did report passed
    assert report.status == "error" and not report.ok
    assert report.error.key == "harness_failed"


def test_a_grader_that_breaks_exits_2_not_1(monkeypatch, tmp_path, capsys):
    """1 means "a case failed"; a grader that raises has graded nothing, so it is 2 (cannot be
    graded), with the traceback on stderr for the operator and no report written."""
    from labs.exercises import __main__ as cli_main

    def broken(*_args, **_kwargs):
        raise RuntimeError("the grader's own bug")

    monkeypatch.setattr(grader, "grade", broken)
    source = tmp_path / "mine.py"
    source.write_text(exercises.starter("ring-allreduce"))
    out = tmp_path / "report.json"
    assert cli_main.main(["grade", "ring-allreduce", str(source), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert "could not be graded" in captured.out and "the grader's own bug" in captured.err
    assert not out.exists()


@pytest.mark.needs_sandbox
def test_a_file_that_exits_while_loading_says_so_and_does_not_blame_the_harness():
    """os._exit at the top level ended the rank before it was ready: that was reported as
    harness_failed ("this is not your fault") with its {returncode} placeholder left unfilled."""
    source = "import os\nprint('bye')\nos._exit(3)\n\n\ndef ring_allreduce(tensor):\n    return tensor\n"
    report = grader.grade("ring-allreduce", source, case_ids={"w2-n5-float32"})
    assert report.status == "error"
    assert report.error.key == "import_died", report.error
    assert report.error.values["returncode"] == 3 and report.error.values["rank"] in (0, 1)
    assert "bye" in report.error.output
    from labs.exercises.__main__ import render

    text = render(report, "en")
    assert "not your fault" not in text and "{" not in text


def test_a_harness_failure_event_fills_in_its_exit_code():
    error = grader._error_from_event({"event": "error", "key": "harness_failed", "rank": 1, "returncode": -11,
                                      "detail": "Segmentation fault"})
    assert error.values == {"returncode": -11}
    assert grader._error_from_event({"event": "error", "key": "harness_failed"}).values == {"returncode": "?"}


def test_a_line_nested_deeper_than_json_reads_is_skipped_not_a_crash_of_the_grader(monkeypatch):
    """Review N-13: a reply nested 985 deep made ``json.loads`` raise RecursionError, which is
    no ValueError: the grader exited 2 with a traceback. Such a line is now ignored like any
    other unreadable one, and a case whose reply cannot be read is that case's finding."""
    deep = "[" * 100_000 + "]" * 100_000
    case = {"id": "w2-n1-float32", "world_size": 2, "shape": [1], "dtype": "float32", "seed": 1}

    def harness(_module, _args, *, on_line, mode, **_options):
        event = _passing_ring_case_event(case, 1, 1)
        event["ranks"][0]["reply"]["result"] = {"values": "DEEP"}
        on_line(json.dumps({"event": "start", "total": 1}).encode())
        on_line(deep.encode())  # not an event at all
        on_line(json.dumps(event).replace('"DEEP"', deep).encode())
        on_line(json.dumps({"event": "done", "duration_s": 0.1}).encode())
        return sandbox.Outcome(returncode=0, stdout=b"", stderr=b"", duration_s=0.1, mode=mode, stopped=None)

    monkeypatch.setattr(sandbox, "check_available", lambda _mode=None: None)
    monkeypatch.setattr(sandbox, "run_python", harness)
    report = grader.grade("ring-allreduce", exercises.reference("ring-allreduce"), case_ids={case["id"]})
    assert report.status != "passed"
    assert report.error.key == "harness_failed"  # the deep case event could not be read: 0 of 1 reported
