"""Grade one submission: plan -> sandbox -> the harness's JSON lines -> checks -> report.

    from labs.exercises.grader import grade
    report = grade("ring-allreduce", source)          # a labs.exercises.report.GradeReport
    report.status                                     # "passed" | "failed" | "error"

The trusted half of the grading. Here, outside the sandbox: the syntax check
and the check that the function exists (``ast``: nothing of the learner's
runs here), the plan (the exercise's hidden cases, with this run's seed),
and every check of the results. Inside the sandbox (``labs.sandbox``): the
harness in ``runtime/``, which makes each case's inputs and expected
results in its own process, runs the learner's code in rank processes that
get only their own inputs and hold no process group, routes every message
between them and prints, per case, the expected values, each rank's answer
and the router's record of what it sent (docs/contributors/grading.md). The
report is a `labs.exercises.report.GradeReport` (its cases and findings typed
there, its JSON what ``--json`` prints and the worker stores); every text in
it is a message key plus values, rendered per language by
``labs.exercises.messages``. A case the router ended as a protocol
failure (``runtime/router.py``: a frame beyond what the case can need, a
size mismatch, something left unmatched) fails with a ``protocol`` finding
that names it. An exercise with a ``PATTERN_CASE`` also gets the message
pattern of that case in the report (``pattern``: the case, the family and
its world size, from ``exercise.pattern`` over the router's log,
``labs.exercises.patterns``).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import json
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from labs.exercises import available, load
from labs.exercises.encoding import foreign_encoding
from labs.exercises.report import CaseReport, Finding, GradeReport, Pattern, Problem
from labs.sandbox import run as sandbox

CASE_TIMEOUT_S = 5.0  # a case that takes longer is a deadlock (the cases are tiny)
OUTPUT_BYTES_PER_RANK = 2048  # of the learner's prints, per rank and case
TRACEBACK_FRAMES = 6


def plan(exercise, seed: int, case_timeout_s: float, case_ids=None) -> dict:
    """What the harness runs: the cases grouped by world size (one fork of the ranks each),
    and how many sets of that group's ranks it uses (``sets``, `sets_needed`).

    ``case_ids`` keeps only those cases (tests that need one case, not all)."""
    groups: dict[int, list[dict]] = {}
    for case in exercise.cases(seed):
        if case_ids is not None and case["id"] not in case_ids:
            continue
        groups.setdefault(case["world_size"], []).append(dict(case, function=exercise.FUNCTION))
    listed = [{"world_size": w, "cases": cs} for w, cs in sorted(groups.items())]
    sets = sets_needed(exercise, listed)
    return {"exercise": exercise.ID, "driver": exercise.DRIVER, "function": exercise.FUNCTION,
            "allowed": list(exercise.ALLOWED), "case_timeout_s": case_timeout_s,
            "output_bytes_per_rank": OUTPUT_BYTES_PER_RANK,
            "groups": [dict(group, sets=sets[group["world_size"]]) for group in listed]}


def sets_needed(exercise, groups: list[dict]) -> dict[int, int]:
    """How many sets of ranks each group (world size) of a plan needs: one, or for an exercise
    whose cases kill their ranks and restart them (``RESTARTS``) one for each of the group's
    cases beside the first: every restart goes on in a fresh set, forked before the plan."""
    restarts = getattr(exercise, "RESTARTS", False)
    return {g["world_size"]: len(g["cases"]) + 1 if restarts else 1 for g in groups}


def harness_args(shapes: list[str], preload=()) -> list[str]:
    """The harness's arguments: one shape per group (it forks their ranks before it reads
    the plan), then the modules to import before forking."""
    return list(shapes) + [f"--preload={module}" for module in preload]


def shapes(exercise, groups: list[dict]) -> list[str]:
    """One shape per group of the plan: its world size, or ``WxL`` for L sets of W ranks
    (`sets_needed`: an exercise whose cases restart their ranks)."""
    return _shapes(sets_needed(exercise, groups))


def _shapes(sets: dict[int, int]) -> list[str]:
    return [f"{world}x{n}" if n > 1 else str(world) for world, n in sorted(sets.items())]


def world_sizes(exercise) -> list[int]:
    """The exercise's world sizes, one group each: the same for every seed (the seed draws
    numbers, not cases), so read from its cases of seed 0."""
    return sorted({case["world_size"] for case in exercise.cases(0)})


def warm_shape() -> tuple[dict[int, int], list[str]]:
    """What a warm harness is started with so that it can grade any exercise in place
    (``labs.exercises.available``): for every world size, as many sets of ranks as any
    exercise's plan needs of it (`sets_needed`: save-and-resume's restarts need a fresh
    set per case), and every exercise's preloads. The number of cases per world size is
    the same for every seed (the seed draws numbers, not cases)."""
    sets: dict[int, int] = {}
    preload: set[str] = set()
    for exercise_id in available():
        exercise = load(exercise_id)
        for world, n in sets_needed(exercise, plan(exercise, 0, CASE_TIMEOUT_S)["groups"]).items():
            sets[world] = max(sets.get(world, 0), n)
        preload.update(preloads(exercise))
    return dict(sorted(sets.items())), sorted(preload)


def preloads(exercise) -> list[str]:
    """What the harness imports before forking a grading's ranks: the exercise's ``PRELOAD``
    and its driver (trusted code every rank would import in its first case's time)."""
    return [*getattr(exercise, "PRELOAD", ()), f"drivers.{exercise.DRIVER}"]


@dataclass
class Warm:
    """A harness started in the sandbox ahead of its submission and of its exercise (`prestart`)."""

    sets: dict[int, int]  # world size -> how many sets of its ranks were forked
    preload: list[str]  # imported before forking
    case_timeout_s: float
    mode: str
    started: sandbox.Started

    def fits(self, exercise, sets: dict[int, int], case_timeout_s: float, mode: str) -> bool:
        """Whether it can grade this plan exactly as a fresh harness would: still running, as
        many forked sets of ranks for each of the plan's world sizes as it needs (``sets``,
        `sets_needed`), the exercise's preloads done, and the same case timeout and sandbox mode."""
        return (self.started.alive() and all(n <= self.sets.get(world, 0) for world, n in sets.items())
                and (self.case_timeout_s, self.mode) == (case_timeout_s, mode)
                and set(preloads(exercise)) <= set(self.preload))


@contextlib.contextmanager
def prestart(*, case_timeout_s: float = CASE_TIMEOUT_S) -> Iterator[Warm]:
    """The sandbox for grading started before any submission exists, and before its
    exercise is known: the harness with PyTorch and every exercise's preloads imported,
    for every world size any exercise uses as many sets of ranks forked as any of them
    needs (`warm_shape`: a fresh set for each restart of save-and-resume), waiting on
    stdin for a plan; `grade` given it (``warm=``) uses it for one submission of any
    exercise.

    What the sandbox holds before the submission is only ours: the harness, its
    ranks, an empty input folder; no rank knows which exercise it will run (the
    driver is named in the plan's load frame). The plan and its seed do not exist
    yet (`grade` draws the seed once the submission is here, as without a warm
    start); the submission is put in the input folder and the plan written to the
    harness's stdin only then, and the ranks, forked long before, learn of the
    plan only ``LOAD_KEYS`` and their own inputs, as ever; the groups and sets the
    plan does not use are killed before it runs. The limits are `run_limits`'s; the
    wall clock is set to the plan's own and counts from `grade`'s
    `sandbox.Started.run`, not from here.

    Every exercise's `fingerprint` is taken here too, while the sandbox starts: the
    report names its grader, and hashing the grader's files took 50 to 60 ms of the
    grading once the submission was there. Taken now, it names the code this sandbox
    was started with.
    """
    sets, preload = warm_shape()
    chosen = sandbox.mode()
    with sandbox.start_python("harness", harness_args(_shapes(sets), preload),
                              limits=run_limits(len(sets), case_timeout_s), mode=chosen) as started:
        for exercise_id in available():
            fingerprint(exercise_id)
        yield Warm(sets, preload, case_timeout_s, chosen, started)


def _imported(path: Path, root: Path) -> set[Path]:
    """The files of our own ``labs`` package that the module at ``path`` imports (any depth
    of ``import``/``from``, at any level of the file), as paths under ``root``."""
    found: set[Path] = set()
    for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        for name in names:
            if name.split(".")[0] != "labs":
                continue
            base = root.joinpath(*name.split("."))
            for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                if candidate.is_file():
                    found.add(candidate)
            # ``import labs.a.b`` runs labs/__init__.py and labs/a/__init__.py too
            for depth in range(1, len(name.split("."))):
                init = root.joinpath(*name.split(".")[:depth], "__init__.py")
                if init.is_file():
                    found.add(init)
    return found


@functools.lru_cache(maxsize=16)
def fingerprint(exercise_id: str) -> str:
    """Which grader grades ``exercise_id``: 16 hex digits of SHA-256 over every file whose
    code can decide its verdict, so that any change to them is a new grader and none
    elsewhere is (issue #35: ``academy.regrade`` grades stored passes again under each new one).

    The files: this module and the exercise's definition with everything of ``labs``
    they import, at any depth (the sandbox, its limits, the checks, another exercise's
    helpers); and what runs inside the sandbox: the harness's folder (``runtime/``, of
    the drivers only this exercise's and the shared ``_*.py``) and the modules the
    sandbox puts beside it. Texts (``content/``, ``messages``) are not among them."""
    here = Path(__file__).resolve()
    root = here.parents[2]
    exercise = load(exercise_id)
    runtime = Path(sandbox.HARNESS)
    definition = Path(exercise.__file__).resolve()
    files = {here, definition, definition.parent / "__init__.py", *runtime.glob("*.py")}
    files |= {f for f in (runtime / "drivers").glob("*.py") if f.name.startswith("_") or f.stem == exercise.DRIVER}
    files |= {Path(f).resolve() for f in sandbox.sandbox_layout.OWN_MODULES}
    todo = [f for f in files if f.is_relative_to(root / "labs") and "runtime" not in f.parts]
    while todo:
        for found in _imported(todo.pop(), root) - files:
            files.add(found)
            todo.append(found)
    return _digest(files, root)


def _digest(files: set[Path], root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


GRADING_OUTPUT_BYTES = 8 << 20  # the harness's stdout for one grading, unless EXERCISE_OUTPUT_BYTES says


def run_limits(groups: int, case_timeout_s: float) -> sandbox.Limits:
    """The sandbox's limits for one grading: the operator's (``EXERCISE_*``, see
    `sandbox.Limits`), and, unless ``EXERCISE_WALL_S`` is set, a wall
    clock that fits this plan: 20 s of start-up plus two case timeouts per
    group (world size), at most 60 s; unless ``EXERCISE_OUTPUT_BYTES`` is set,
    an output cap of `GRADING_OUTPUT_BYTES`."""
    operator = sandbox.Limits.from_env()
    fitted: dict[str, float | int] = {}
    if "wall_s" not in operator.model_fields_set:
        fitted["wall_s"] = min(60.0, 20.0 + case_timeout_s * groups * 2)
    if "output_bytes" not in operator.model_fields_set:
        # The report's values come back as JSON (about 600 KB for the ring's cases) beside up to
        # 2 KiB of the learner's prints per rank and case: room for both, still a bound.
        fitted["output_bytes"] = GRADING_OUTPUT_BYTES
    return operator.model_copy(update=fitted)


def static_error(source: str | bytes, function: str) -> Problem | None:
    """``source_encoding``, ``syntax_error`` or ``missing_function``, found without running anything; None when fine.

    ``source`` is best given as the bytes the sandbox will run: ``ast.parse`` then reads
    them as Python does (byte order mark, coding cookie, every kind of line end).

    ``function`` is what the exercise asks for: a function, or a class (bucketed-overlap's
    ``Bucketer``), defined, assigned or imported at the top level."""
    if (declared := foreign_encoding(source)) is not None:  # N-8: Python would run other text than this
        return Problem(key="source_encoding", values={"encoding": declared})
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return Problem(key="syntax_error", values={"line": exc.lineno or 0, "message": exc.msg or ""})
    except ValueError as exc:  # null bytes
        return Problem(key="syntax_error", values={"line": 0, "message": str(exc)})
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == function:
            return None
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == function for t in targets):
            return None  # ring_allreduce = my_ring: fine; the harness checks it is callable
        if isinstance(node, ast.ImportFrom | ast.Import) and any(
                (a.asname or a.name) == function for a in node.names):
            return None
    return Problem(key="missing_function", values={"function": function})


def _report(exercise_id: str, *, error: Problem | None = None, cases=(), trace=None, pattern=None,
            duration=0.0, mode="") -> GradeReport:
    return GradeReport.of(exercise_id, error=error, cases=cases, trace=trace, pattern=pattern,
                          duration_s=round(duration, 3), sandbox=mode, grader=fingerprint(exercise_id))


def _frames(frames: list[dict]) -> list[dict]:
    return frames[-TRACEBACK_FRAMES:]


def _case_entry(exercise, event: dict) -> tuple[CaseReport, list[dict] | None]:
    """One case of the report from the harness's case event; also the ranks' replies when all returned."""
    case = event["case"]

    def entry(status: str, findings: list[Finding], **more) -> CaseReport:
        output = {str(r["rank"]): r["output"] for r in event["ranks"] if r.get("output")} \
            if event["status"] != "not_run" else {}
        return CaseReport(id=case["id"], status=status, world_size=case["world_size"], size=_numel(case),
                          shape=case["shape"], dtype=case["dtype"], src=case.get("src"), nodes=case.get("nodes"),
                          findings=findings, output=output, **more)

    def stopped(check: str, key: str, values: dict, **more) -> Finding:
        return Finding(check=check, passed=False, key=key, values=values, **more)

    if event["status"] == "not_run":
        return entry("not_run", []), None
    if event["status"] == "done":
        # A reply comes from a rank the learner's code runs in: it may have written its
        # own to the harness's pipe. One that the checks cannot read fails the case.
        # ``result`` is what the learner's process returned; ``sent``, ``received`` and
        # ``calls`` are the router's record, made outside it (runtime/router.py).
        try:
            # ``calls_before``: the router's record of the ranks the harness killed in this case
            # (save-and-resume), before it restarted them; None where it killed none.
            ranks = [{"rank": r["rank"], "expected": r["expected"], "result": r["reply"]["result"],
                      "sent": r["traffic"]["sent"], "received": r["traffic"]["received"],
                      "sent_by_link": r["traffic"].get("sent_by_link"),  # with a node map only
                      "calls": r["traffic"]["calls"],
                      "calls_before": (r["traffic"].get("before") or {}).get("calls")} for r in event["ranks"]]
            findings = [Finding.model_validate(f) for f in exercise.check(case, ranks)]
        except (KeyError, IndexError, TypeError, ValueError, AttributeError, RecursionError) as exc:
            return entry("failed", [stopped("reply", "reply_unreadable",
                                            {"detail": f"{type(exc).__name__}: {exc}"[:200]})]), None
        return entry("passed" if all(f.passed for f in findings) else "failed", findings), ranks
    if event["status"] == "protocol":
        # The router ended the case: what a rank asked for is more than the case can need.
        failure = event.get("protocol") or {}
        return entry("failed", [stopped("protocol", str(failure.get("key", "protocol_frame")),
                                        dict(failure.get("values") or {}))]), None
    waiting = event.get("waiting", [])
    if event["status"] == "timeout":
        return entry("failed", [stopped("deadlock", "deadlock", {"seconds": event.get("timeout_s", CASE_TIMEOUT_S)})],
                     waiting=waiting), None
    for r in event["ranks"]:  # the first rank that raised says what happened
        reply = r["reply"] or {}
        if reply.get("type") == "forbidden":
            key = "guard_refused" if reply.get("kind") == "guard" else "forbidden_call"
            return entry("failed", [stopped("forbidden", key, {"call": reply["call"], "rank": r["rank"]},
                                            frames=_frames(reply.get("frames", [])))], waiting=waiting), None
    for r in event["ranks"]:
        reply = r["reply"] or {}
        if reply.get("type") == "crash":
            return entry("failed", [stopped("crash", "crash", {"rank": r["rank"], "exception": reply.get("exc", ""),
                                                               "message": reply.get("message", "")},
                                            frames=_frames(reply.get("frames", [])))], waiting=waiting), None
    died = next((r["rank"] for r in event["ranks"] if (r["reply"] or {}).get("type") == "died"), None)
    return entry("failed", [stopped("crash", "rank_died", {"rank": died})], waiting=waiting), None


def _numel(case: dict) -> int:
    n = 1
    for d in case["shape"]:
        n *= d
    return n


def _code(event: dict):
    """A rank's exit code from a harness event, "?" when the harness could not learn it."""
    return "?" if event.get("returncode") is None else event["returncode"]


def _error_from_event(event: dict) -> Problem:
    key = event["key"]
    if key == "missing_function":
        return Problem(key=key, values={"function": event.get("function", "")})
    if key == "forbidden_call":
        return Problem(key="guard_refused" if event.get("kind") == "guard" else key,
                       values={"call": event.get("call", ""), "rank": event.get("rank")},
                       frames=_frames(event.get("frames", [])))
    if key == "import_error":
        return Problem(key=key, values={"exception": event.get("exc", ""), "message": event.get("message", "")},
                       frames=_frames(event.get("frames", [])), output=event.get("output", ""))
    if key == "import_died":
        return Problem(key=key, values={"rank": event.get("rank"), "returncode": _code(event)},
                       output=event.get("output", ""))
    if key == "harness_failed":
        return Problem(key=key, values={"returncode": _code(event)}, detail=event.get("detail", ""))
    if key == "import_timeout":
        return Problem(key=key, values={"seconds": event.get("seconds")}, output=event.get("output", ""))
    if key.startswith("protocol_"):  # a call while the file was loading, before any case
        return Problem(key=key, values=dict(event.get("values") or {}))
    return Problem(key=key)


def grade(exercise_id: str, source: str | bytes, *, seed: int | None = None, mode: str | None = None,
          case_timeout_s: float = CASE_TIMEOUT_S, limits: sandbox.Limits | None = None,
          case_ids=None, on_event: Callable[[dict], None] | None = None, warm: Warm | None = None) -> GradeReport:
    """Grade ``source`` for ``exercise_id``; the report (see the module docstring).

    ``source``: the file's bytes (a ``str`` is taken as its UTF-8), checked here and
    run in the sandbox byte for byte, with no newline translation between the two.

    ``on_event`` gets ``{"kind": "progress", "step": k, "total_steps": n,
    "case": id, "status": ...}`` as each case finishes (the CLI's --events).
    ``seed`` fixes the numbers in the cases (tests); by default every run
    draws new ones, so a file that prints fixed answers cannot pass.
    ``case_ids`` grades only those cases (see `plan`). ``limits`` default to
    `run_limits`: the operator's ``EXERCISE_*`` settings. ``warm`` is a sandbox
    `prestart` made ahead: used when it fits this grading (`Warm.fits`; default
    limits) and is still running, else the grading starts its own; the report
    is the same either way.
    """
    t0 = time.perf_counter()
    exercise = load(exercise_id)
    chosen = mode or sandbox.mode()
    source = source.encode("utf-8", "surrogatepass") if isinstance(source, str) else bytes(source)
    error = None
    for function in (exercise.FUNCTION, *getattr(exercise, "ALSO_FUNCTIONS", ())):
        error = error or static_error(source, function)
    if error is not None:
        return _report(exercise_id, error=error, duration=time.perf_counter() - t0, mode=chosen)
    try:
        sandbox.check_available(chosen)
    except sandbox.SandboxUnavailable as exc:
        return _report(exercise_id, error=Problem(key="sandbox_unavailable", values={"reason": exc.reason}),
                       duration=time.perf_counter() - t0, mode=chosen)
    the_plan = plan(exercise, secrets.randbelow(1 << 30) if seed is None else seed, case_timeout_s, case_ids)
    cases, traced_ranks = [], {}
    kept = {getattr(exercise, "TRACE_CASE", None), getattr(exercise, "PATTERN_CASE", None)} - {None}
    error = None
    done = False

    def on_line(raw: bytes) -> None:
        nonlocal error, done
        try:
            event = json.loads(raw)
        except (ValueError, RecursionError):
            return
        if not isinstance(event, dict):
            return
        kind = event.get("event")
        if kind == "case":
            entry, ranks = _case_entry(exercise, dict(event, timeout_s=case_timeout_s))
            cases.append(entry)
            if ranks is not None and entry.id in kept:
                traced_ranks[entry.id] = (event["case"], ranks)
            if on_event is not None:
                on_event({"kind": "progress", "step": event["index"], "total_steps": event["total"],
                          "case": entry.id, "status": entry.status})
        elif kind == "error" and error is None:
            error = _error_from_event(event)
        elif kind == "done":
            done = True

    sizes = [group["world_size"] for group in the_plan["groups"]]
    needs = {group["world_size"]: group["sets"] for group in the_plan["groups"]}
    if warm is not None and limits is None and warm.fits(exercise, needs, case_timeout_s, chosen):
        # The warm harness has waited on its stdin since its ranks were forked: the
        # submission goes in first, then the plan (the ranks open the file once told to),
        # under the wall clock a fresh grading of this plan gets.
        warm.started.limits = warm.started.limits.model_copy(
            update={"wall_s": run_limits(len(sizes), case_timeout_s).wall_s})
        warm.started.put("submission.py", source)
        outcome = warm.started.run(stdin=json.dumps(the_plan).encode(), on_line=on_line)
    else:
        args = harness_args(shapes(exercise, the_plan["groups"]), preloads(exercise))
        limits = limits or run_limits(len(the_plan["groups"]), case_timeout_s)
        try:
            # The plan goes on stdin, not into the input folder: a file there could be
            # opened by a route the guard misses; the harness reads the pipe before
            # any learner code exists.
            # The world sizes go as arguments: the harness forks every rank before it reads the plan.
            outcome = sandbox.run_python("harness", args, files={"submission.py": source},
                                         stdin=json.dumps(the_plan).encode(),
                                         limits=limits, mode=chosen, on_line=on_line)
        except sandbox.SandboxUnavailable as exc:
            return _report(exercise_id, error=Problem(key="sandbox_unavailable", values={"reason": exc.reason}),
                           duration=time.perf_counter() - t0, mode=chosen)
    if error is None and outcome.stopped:
        error = Problem(key=f"sandbox_stopped_{outcome.stopped}", values={"limit": outcome.stopped})
    elif error is None and not done:
        tail = outcome.stderr.decode("utf-8", errors="replace")[-1500:]
        if outcome.returncode is not None and outcome.returncode < 0:
            # A signal that is not one of the sandbox's limits (those set ``stopped``): inside
            # the sandbox only the learner's ranks run beside the harness, as its own user,
            # so their code sent it (a route the guard does not see, such as a pidfd).
            error = Problem(key="harness_killed", values={"signal": -outcome.returncode}, detail=tail)
        else:
            error = Problem(key="harness_failed", values={"returncode": outcome.returncode}, detail=tail)
    planned = sum(len(group["cases"]) for group in the_plan["groups"])
    if error is None and len(cases) != planned:
        # A pass means every hidden case passed: a report that lacks some (lines lost,
        # a group skipped) is our failure to grade, never the learner's pass.
        error = Problem(key="harness_failed", values={"returncode": outcome.returncode},
                        detail=f"{len(cases)} of {planned} cases reported")
    trace = pattern = None
    if getattr(exercise, "TRACE_CASE", None) in traced_ranks:
        case, ranks = traced_ranks[exercise.TRACE_CASE]
        trace = exercise.trace(case, ranks)
        if hasattr(exercise, "beside"):  # made here, outside the sandbox, from no rank's word
            trace.update(exercise.beside(case))
    if getattr(exercise, "PATTERN_CASE", None) in traced_ranks:  # from the router's log alone
        case, ranks = traced_ranks[exercise.PATTERN_CASE]
        pattern = Pattern(case=case["id"], **exercise.pattern(case, ranks))
    return _report(exercise_id, error=error, cases=cases, trace=trace, pattern=pattern,
                   duration=time.perf_counter() - t0, mode=outcome.mode)
