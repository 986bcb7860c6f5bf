"""The harness: runs one submission's cases on real processes, inside the sandbox.

    python -m harness 2 3 4 < plan.json   # one argument per group: its world size; cwd: a
                                          # private tmp folder; $SANDBOX_INPUT holds
                                          # submission.py (both from labs.exercises.grader)
    python -m harness 2x3 3x2 --preload=torch._dynamo < plan.json   # WxL: L sets of W ranks;
                                          # modules to import before forking

The plan's groups are some of the forked ones (each size once), each using
the first ``sets`` of its size's sets (a case that restarts its ranks goes
on in the next set): a warm harness (``grader.prestart``) forks for every
world size as many sets as any exercise needs before it knows which
exercise comes, and kills the groups and sets the plan leaves out.

Trusted code; the learner's code runs only in the ranks it forks, and the
grade rests on nothing a rank's process holds or says about itself. The
design (docs/contributors/grading.md):

- **Ranks hold only their own inputs.** Every rank of every group is forked
  (torch already imported, so it is fast) BEFORE this process reads the
  plan from stdin: no rank's memory ever held a seed, a case list or an
  expected value. Per case this process makes every rank's inputs and the
  expected results itself (``driver.inputs``, ``driver.expected``) and
  sends each rank only its own tensors, with the case's public fields.
- **Ranks hold no process group.** Their ``torch.distributed`` calls are
  frames on their pipe to the router (``router.py``) in this process, which
  matches, forwards and reduces them and records, per rank, the bytes sent
  and received and every call in order: the counts, the message pattern
  and the learner's animation come from there. The router answers a rank
  with nothing but completions of its own calls and the payloads it
  counted into it, under the case's bounds (``driver.bounds``); whatever
  else a rank asks for ends the case as a protocol failure, which the case
  event carries (``"status": "protocol"``) and no rank is told. A rank cannot make a
  connection of its own: before it runs anything of the learner's it
  installs a seccomp filter that refuses new processes and links
  (``seccomp.rank_program``) and one that refuses new sockets and every other
  way between ranks (``seccomp.sealed_program``).
- **The checks run outside.** This process prints, per case, the expected
  values, each rank's reply (its result, or the exception it raised) and
  the router's record; the grader (outside the sandbox) compares.

Before forking, this process makes itself non-dumpable, so no rank (same
uid) can read its memory, environment or fds through ``/proc``; the ranks
inherit it, so none can read another's either. The guard (``guard.py``)
still refuses forbidden calls by name so the learner reads a clear message,
but nothing depends on it. The ranks are started, reaped and killed by
``processes`` (``labs/processes.py``) and filtered by ``seccomp``
(``labs/sandbox/seccomp.py``): the sandbox puts both beside this file.

Protocol on stdout, one JSON object per line: ``{"event": "start"|"case"|
"error"|"done", ...}``. The ranks' own stdout and stderr (the learner's
prints) go to a file per rank, unlinked as soon as it is made, of which
each case event carries the first bytes.

A case ends when every rank has returned (then a receive, send or
collective left unmatched is a protocol failure), when one has raised (the
others get a moment to finish or raise too), at the router's first
protocol failure, or at ``case_timeout_s``: then the ranks are killed, the
event says what each was waiting for, and the group's remaining cases are
reported as not run.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.util
import json
import os
import sys
import time
import traceback

INPUT = os.environ.get("SANDBOX_INPUT", "/opt/input")
CRASH_GRACE_S = 0.5  # after one rank raised, how long the others may take to finish or raise
SETUP_S = 30.0  # a group's ranks loading the driver (the learner's file gets a case's time)
LOAD_KEYS = ("driver", "function", "allowed", "case_timeout_s")  # what a rank learns of the plan
MAX_FRAMES, MAX_TEXT = 6, 500  # of a rank's exception: its frames, and the length of each text


def emit(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


# --------------------------------------------------------------------------
# The rank side


def _learner_frames(exc: BaseException, path: str) -> list[dict]:
    """The traceback's frames that are in the learner's file: line, function, source."""
    frames = []
    for fs in traceback.extract_tb(exc.__traceback__):
        if os.path.realpath(fs.filename) == os.path.realpath(path):
            frames.append({"line": fs.lineno, "function": str(fs.name)[:100],
                           "code": (fs.line or "").strip()[:200]})
    return frames[-MAX_FRAMES:]


def _error_record(exc: BaseException, path: str) -> dict:
    from guard import ForbiddenCall

    forbidden = exc if isinstance(exc, ForbiddenCall) else None
    # A ForbiddenCall raised inside a library and re-wrapped still counts.
    cause, hops = exc.__cause__ or exc.__context__, 0
    while forbidden is None and cause is not None and hops < 20:
        if isinstance(cause, ForbiddenCall):
            forbidden = cause
        cause, hops = cause.__cause__ or cause.__context__, hops + 1
    if forbidden is not None:
        return {"t": "forbidden", "call": str(forbidden.call)[:200], "kind": str(forbidden.kind)[:20],
                "frames": _learner_frames(exc, path)}
    try:
        message = str(exc)[:MAX_TEXT]
    except Exception:  # noqa: BLE001 - a learner's __str__ may raise too
        message = ""
    return {"t": "crash", "exc": type(exc).__name__[:100], "message": message,
            "frames": _learner_frames(exc, path)}


def _confine() -> None:
    """The rank's seccomp filters (``seccomp``), before it runs anything of the learner's:
    no new process or link (``rank_program``), and no new socket, file written, IPC or
    signal to another process (``sealed_program``): its pipes to this process are its
    only way out. Where the machine has no table of ours (not x86_64/aarch64), the
    sandbox's namespaces and limits remain."""
    import seccomp

    if seccomp.supported():
        seccomp.install(seccomp.rank_program())
        seccomp.install(seccomp.sealed_program(os.getpid()))


def _inputs(specs: list, payload: bytes) -> dict:
    """This rank's tensors for one case, from the go frame: ``[name, dtype, shape, nbytes]`` each."""
    import torch
    from api import from_bytes

    out, offset = {}, 0
    for name, dtype, shape, n in specs:
        like = torch.empty(shape, dtype=getattr(torch, dtype))
        out[name] = from_bytes(payload[offset:offset + n], like).clone()
        offset += n
    return out


def _rank_main(rank: int, world: int, channel) -> None:
    import guard
    import torch
    from api import Api

    _confine()
    torch.set_num_threads(1)
    header, _ = channel.command()
    if header.get("t") != "load":
        return
    driver = importlib.import_module(f"drivers.{header['driver']}")
    if hasattr(driver, "setup"):
        driver.setup(rank, world)
    path = os.path.join(INPUT, "submission.py")
    api = Api(channel, rank, world, source=path)
    guard.arm(api, allowed=header["allowed"], submission_path=path, input_dir=INPUT)
    channel.send({"t": "loading"})  # from here on, time spent is the learner's file loading
    try:
        spec = importlib.util.spec_from_file_location("submission", path)
        submission = importlib.util.module_from_spec(spec)
        sys.modules["submission"] = submission
        spec.loader.exec_module(submission)
    except BaseException as exc:  # noqa: BLE001 - whatever the learner's file raises on import
        channel.send(dict(_error_record(exc, path), stage="import"))
        return
    if not callable(getattr(submission, header["function"], None)):
        channel.send({"t": "missing_function", "function": header["function"]})
        return
    channel.send({"t": "ready"})
    locate = getattr(driver, "locate", None)
    while True:
        command, payload = channel.command()
        if command.get("t") != "go":
            return
        case, inputs = command["case"], _inputs(command["tensors"], payload)
        api.reset(locate and (lambda t, s=inputs, f=locate: f(t, s)))
        sys.stdout.flush()
        try:
            result = driver.run(case, rank, world, submission, api, inputs)
        except BaseException as exc:  # noqa: BLE001 - the learner's exception is the finding
            sys.stdout.flush()
            channel.send(dict(_error_record(exc, path), case=case["id"]))
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        channel.send({"t": "result", "case": case["id"], "result": result})


def _rank(rank: int, world: int, up: int, down: int) -> int:
    """A forked rank (``processes.Group.fork``), its stdin /dev/null: the plan comes on
    this process's stdin after every rank exists, never to a rank."""
    try:
        from api import Channel

        _rank_main(rank, world, Channel(up, down))
    except EOFError:
        pass  # the harness is done with this rank
    except BaseException:  # noqa: BLE001 - a harness failure: say it in the rank's output
        with contextlib.suppress(Exception):
            traceback.print_exc()
        return 3
    return 0


# --------------------------------------------------------------------------
# The parent side


class _Ranks:
    """One group's rank processes, forked before the plan is read, with this process's
    ends of their pipes (frames up from each rank, frames down to it)."""

    def __init__(self, world: int, held: list[int]):
        import processes

        self.world = world
        # Each rank's stdout and stderr: a file with no name in our private tmp folder.
        self.procs = processes.Group(folder=".", held=held)
        self.ups: list[int] = []
        self.downs: list[int] = []
        for rank in range(world):
            r_up, w_up = os.pipe()
            r_down, w_down = os.pipe()
            self.procs.fork(lambda rank=rank, up=w_up, down=r_down: _rank(rank, world, up, down),
                            child_fds=(w_up, r_down), parent_fds=(r_up, w_down))
            self.ups.append(r_up)
            self.downs.append(w_down)


def _waiting_list(router, replies: dict[int, dict]) -> list[dict]:
    rows = []
    for rank in range(router.world):
        w = router.waiting[rank]
        if rank in replies:
            op = "finished" if replies[rank]["type"] == "result" else "raised"
            rows.append({"rank": rank, "op": op, "peer": None, "bytes": None})
        elif w is None:
            rows.append({"rank": rank, "op": "running", "peer": None, "bytes": None})
        else:
            row = {"rank": rank, "op": w["op"], "peer": w["peer"], "bytes": w["bytes"]}
            if w.get("line") is not None:  # the learner's line of the blocking call, as the rank said
                row["line"] = w["line"]
            rows.append(row)
    return rows


def _reply(msg: dict) -> dict:
    """A rank's message as the case event carries it: ``type`` instead of the frame's ``t``."""
    reply = {key: value for key, value in msg.items() if key != "t"}
    reply["type"] = msg["t"]
    return reply


def _go(case: dict, tensors: dict) -> tuple[dict, bytes]:
    """The go frame of one rank: the case's public fields and this rank's own tensors."""
    from api import tensor_bytes

    specs, chunks = [], []
    for name, tensor in tensors.items():
        data = tensor_bytes(tensor)
        specs.append([name, str(tensor.dtype).removeprefix("torch."), list(tensor.shape), len(data)])
        chunks.append(data)
    return {"t": "go", "case": case, "tensors": specs}, b"".join(chunks)


def public(driver, case: dict) -> dict:
    """What a rank may know of a case: what the driver declares public, else all but the seed."""
    if hasattr(driver, "public"):
        return driver.public(case)
    return {key: value for key, value in case.items() if key != "seed"}


def _protocol_error(router) -> dict:
    """The error event of a protocol failure before any case (a call while the file loads)."""
    return {"event": "error", "key": router.failure["key"], "values": router.failure["values"]}


def _load(router, ranks: _Ranks, plan: dict) -> dict | None:
    """Have every rank load the driver and the learner's file; None when all are ready,
    else the error event to print."""
    per_rank_output = int(plan.get("output_bytes_per_rank", 2048))
    load = {"t": "load", **{key: plan[key] for key in LOAD_KEYS}}
    for rank in range(ranks.world):
        router.send_to(rank, load)
    ready: set[int] = set()
    loading = [False] * ranks.world
    deadline = time.monotonic() + SETUP_S
    while len(ready) < ranks.world and time.monotonic() < deadline:
        router.pump(deadline)
        if router.failure is not None:
            return _protocol_error(router)
        for rank in range(ranks.world):
            if rank in ready:
                continue
            if not loading[rank] and router.take(rank, ("loading",)) is not None:
                # Loading the learner's file gets the time of a case, not of our setup.
                loading[rank] = True
                deadline = min(deadline, time.monotonic() + float(plan["case_timeout_s"]))
            msg = router.take(rank, ("ready", "missing_function", "crash", "forbidden"))
            if msg is None:
                if router.eof[rank]:
                    # Ended before it was ready: while loading the learner's file, their
                    # doing (os._exit at the top level, a frame the protocol refuses); before that, ours.
                    code = ranks.procs.exit_code(rank, wait_s=1.0)
                    if loading[rank]:
                        return {"event": "error", "key": "import_died", "rank": rank, "returncode": code,
                                "output": ranks.procs.output(rank, 0, per_rank_output)}
                    return {"event": "error", "key": "harness_failed", "rank": rank, "returncode": code,
                            "detail": ranks.procs.output(rank, 0, 2000)}
                continue
            if msg["t"] == "ready":
                ready.add(rank)
            elif msg["t"] == "missing_function":
                return {"event": "error", "key": "missing_function", "function": str(msg.get("function"))[:100]}
            else:  # the learner's file raised while being imported
                return {"event": "error", "key": "import_error" if msg["t"] == "crash" else "forbidden_call",
                        "rank": rank, "exc": msg.get("exc"), "message": msg.get("message"),
                        "call": msg.get("call"), "kind": msg.get("kind"), "frames": msg.get("frames", []),
                        "output": ranks.procs.output(rank, 0, per_rank_output)}
    if len(ready) < ranks.world:
        key = "import_timeout" if any(loading) else "setup_timeout"
        return {"event": "error", "key": key, "world_size": ranks.world, "seconds": plan["case_timeout_s"],
                "output": ranks.procs.output(0, 0, per_rank_output)}
    return None


def _play(router, ranks: _Ranks, shown: dict, inputs: list, bounds, data, timeout_s: float, *,
          until_held: bool = False, carry=None) -> tuple[dict[int, dict], list[int], bool]:
    """One life of a case: ``go`` to every rank, then the routing until every rank has replied
    (or one failed and the others had their grace, or the timeout); with ``until_held``, until
    every rank is held at the case's hold step instead; ``carry``: the router of the killed
    life, whose checkpoints this one starts with. Returns (replies, where each rank's output
    began, whether every rank is held)."""
    world = ranks.world
    starts = [ranks.procs.output_size(r) for r in range(world)]
    router.reset(bounds, data)
    if carry is not None:
        router.carry(carry)
    for rank in range(world):
        router.send_to(rank, *_go(shown, inputs[rank]))
    deadline = time.monotonic() + timeout_s
    replies: dict[int, dict] = {}
    first_error = None
    while len(replies) < world and time.monotonic() < deadline and router.failure is None:
        router.pump(deadline)
        if until_held and all(router.held):
            return replies, starts, True
        for rank in range(world):
            if rank in replies:
                continue
            msg = router.take(rank, ("result", "crash", "forbidden"))
            if msg is not None:
                replies[rank] = _reply(msg)
            elif router.eof[rank] and router.failure is None:
                replies[rank] = {"type": "died", "frames": []}
            else:
                continue
            if replies[rank]["type"] != "result" and first_error is None:
                first_error = time.monotonic()
                deadline = min(deadline, first_error + CRASH_GRACE_S)
    return replies, starts, False


def _run_group(plan: dict, driver, sets: list[_Ranks], group: dict, index: int, total: int) -> tuple[int, bool]:
    """Run one group's cases; return (how many case events were printed, whether to go on).

    ``sets``: the group's ranks, forked before the plan was read; one set runs the cases,
    and a case with a hold step (``driver.bounds``: save-and-resume) is run twice: its
    ranks are killed with SIGKILL once every one of them is held at that step, and the
    next set, fresh processes that never saw the case, runs it again from the start,
    with the checkpoints the killed ranks stored (``Router.carry``). The case event
    then carries both lives' records (``traffic.before``: the killed ranks')."""
    from router import Bounds, Router

    world = sets[0].world
    routers = [Router(world, s.ups, s.downs, allowed=plan["allowed"]) for s in sets]
    live = 0  # the set whose ranks run the next case
    cases = group["cases"]
    per_rank_output = int(plan.get("output_bytes_per_rank", 2048))
    timeout_s = float(plan["case_timeout_s"])

    def not_run(from_k: int, n: int) -> int:
        for case in cases[from_k:]:
            n += 1
            emit({"event": "case", "index": n, "total": total, "case": case, "status": "not_run",
                  "ranks": []})
        return n

    try:
        for ranks, router in zip(sets, routers, strict=True):
            error = _load(router, ranks, plan)
            if error is not None:
                emit(error)
                return index, False
        for k, case in enumerate(cases):
            # Made here, in the process no learner code runs in; each rank gets its own share.
            inputs = driver.inputs(case, world)
            expected = driver.expected(case, world, inputs)
            shown = public(driver, case)
            bounds = driver.bounds(case, world)
            data = driver.data(case, world) if hasattr(driver, "data") else None
            router, ranks = routers[live], sets[live]
            hold = bounds.get("hold_step") is not None
            replies, starts, held = _play(router, ranks, shown, inputs, Bounds(**bounds), data, timeout_s,
                                          until_held=hold)
            before = None
            if held:  # every rank waits at the hold: kill them, restart the case on fresh ranks
                before = [{"traffic": router.traffic(r), "output": ranks.procs.output(r, starts[r], per_rank_output)}
                          for r in range(world)]
                ranks.procs.kill()
                live += 1
                if live >= len(sets):
                    emit({"event": "error", "key": "harness_failed", "returncode": None,
                          "detail": "no fresh ranks left for a restart"})
                    return index, False
                killed, router, ranks = router, routers[live], sets[live]
                replies, starts, _ = _play(router, ranks, shown, inputs, Bounds(**dict(bounds, hold_step=None)),
                                           data, timeout_s, carry=killed)
            del inputs
            finished = {r for r, m in replies.items() if m["type"] == "result"}
            if len(finished) == world:
                router.finish()  # every rank returned: nothing may be left unmatched
            index += 1
            timed_out = len(replies) < world and router.failure is None \
                and not any(m["type"] != "result" for m in replies.values())
            event_ranks = [{"rank": rank, "expected": expected[rank], "reply": replies.get(rank),
                            "output": ranks.procs.output(rank, starts[rank], per_rank_output),
                            "traffic": router.traffic(rank)} for rank in range(world)]
            if before is not None:
                for entry, gone in zip(event_ranks, before, strict=True):
                    entry["traffic"]["before"] = gone["traffic"]
                    entry["output"] = gone["output"] + entry["output"]
            if router.failure is not None:
                status = "protocol"
            else:
                status = "timeout" if timed_out else ("done" if len(finished) == world else "error")
            event = {"event": "case", "index": index, "total": total, "case": case, "status": status,
                     "ranks": event_ranks}
            if status == "protocol":
                event["protocol"] = router.failure
            elif len(replies) < world:
                event["waiting"] = _waiting_list(router, replies)
            emit(event)
            if status == "protocol" or len(replies) < world or any(m["type"] == "died" for m in replies.values()):
                # The group's state is unknown now (messages in flight, ranks blocked): stop it.
                index = not_run(k + 1, index)
                break
        return index, True
    finally:
        for router in routers:
            router.close()
        for ranks in sets:
            ranks.procs.kill()


def main() -> int:
    # One argument per group: its world size, or "WxL" for L sets of W ranks (a case that
    # kills its ranks and restarts them needs a fresh set for each restart).
    shapes = [tuple(int(n) for n in arg.split("x")) for arg in sys.argv[1:] if not arg.startswith("--preload=")]
    preload = [arg.removeprefix("--preload=") for arg in sys.argv[1:] if arg.startswith("--preload=")]
    import seccomp

    seccomp.undumpable()  # before any rank is forked: they inherit it
    t0 = time.perf_counter()
    import torch

    torch.set_num_threads(1)
    import api  # noqa: F401 - loaded once, here: every rank is forked with it
    import guard
    import router  # noqa: F401

    for module in preload:  # what the exercise's ranks would each import in a case's time
        importlib.import_module(module)
    guard.index_holders()  # where a rank's guard must look, found once here
    # All of it is ours, and stays: out of the collector's walks before the forks, so that a rank's
    # collections (and the gc.collect of a driver's setup) do not walk, and copy, PyTorch's
    # hundreds of thousands of objects: 1.9 s per rank of sharded-optimizer's setup, 0.07 s now.
    gc.collect()
    gc.freeze()
    open_fds: list[int] = []
    # Every rank of every set, before the plan exists in this process.
    groups = [[_Ranks(shape[0], open_fds) for _ in range(shape[1] if len(shape) > 1 else 1)] for shape in shapes]
    plan = json.loads(sys.stdin.buffer.read())
    sys.stdin.close()
    total = sum(len(g["cases"]) for g in plan["groups"])
    emit({"event": "start", "total": total})
    try:
        forked = {sets[0].world: sets for sets in groups}
        wanted = {g["world_size"]: int(g.get("sets", 1)) for g in plan["groups"]}
        if len(wanted) != len(plan["groups"]) or any(n > len(forked.get(w, ())) for w, n in wanted.items()):
            emit({"event": "error", "key": "harness_failed", "returncode": None,
                  "detail": f"ranks forked for {sys.argv[1:]}, the plan's groups need {wanted}"})
        else:
            for world, sets in forked.items():  # a warm harness forks for every exercise's shapes
                for ranks in sets[wanted.get(world, 0):]:  # the groups and sets this plan leaves out
                    ranks.procs.kill()
            driver = importlib.import_module(f"drivers.{plan['driver']}")
            index = 0
            for group in plan["groups"]:
                world = group["world_size"]
                index, go_on = _run_group(plan, driver, forked[world][:wanted[world]], group, index, total)
                if not go_on:
                    break
    finally:
        for sets in groups:
            for ranks in sets:
                ranks.procs.kill()
    emit({"event": "done", "duration_s": time.perf_counter() - t0})
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Everything is said and every rank is gone: skip the interpreter's teardown of
    # PyTorch (most of a second on a busy machine, between "done" and the report).
    os._exit(code)
