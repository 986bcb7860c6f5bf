"""torch DDP's timeline on bucketed-overlap's own model and cap, for the report beside the learner's.

    python -m labs.exercises.ddp_lanes '{"world_size": 2, "cap": 400, "features": 32, "hidden": 128,
                                         "classes": 4, "batch": 1024, "steps": 3, "lr": 0.5, "seed": 1}'

Trusted, and run only by the grading side: never in the sandbox, never in a
rank the learner's code runs in. After a grading the grader asks `lanes` for
the traced case; this returns what torch's ``DistributedDataParallel`` does
on the same MLP (the driver's ``arch``, ``drivers/bucketed_overlap.py``), the
same world size, batch per rank and number of steps, with
``bucket_cap_mb`` set to the case's cap in bytes. The ranks are forked by a
child process (the command above: it prints the lanes as JSON), on gloo over
a file store, and recorded with the DDP lab's instrumentation
(`labs.ddp.timeline.record`: each bucket from its comm hook's launch to its
completion, forward, backward and the optimizer around the calls), so the
figures come from `labs.timeline` exactly as the lab's do. `WARMUP` steps
go first unmeasured: in a grading the traced case is not its ranks' first
(the cases of one world size run in the same ranks, ``TRACE_CASE`` after
two others), so the learner's lanes are warm, and DDP's first step (its
lazy set-up, gloo's first connection) would compare cold with warm.

The lanes depend on the model's shape, the cap and the world size, not on
the case's seed, so they are made once per such key and torch version and
kept on this machine in `cache_dir` (the setting ``EXERCISE_DDP_CACHE``,
``labs.sandbox.limits.Limits.ddp_cache``: by default a folder of this user's
in the temporary directory, mode 0700): a later
grading reads a small file and starts nothing. A cache folder that someone
else owns or could write to is not used. Importing this module does not
import torch; only the child does.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback
from importlib import metadata
from pathlib import Path

from labs.processes import die_with_parent
from labs.sandbox.limits import Limits

WARMUP = 1  # steps run before measuring (see the module's docstring)
# The lanes' arithmetic (``labs.timeline.variant``) in the cache's key: lanes cached by an
# older one (all-reduces counted from each rank's own launch) are made again.
ARITHMETIC = 2
KEY = ("world_size", "cap", "features", "hidden", "classes", "batch", "steps", "lr")
TIMEOUT_S = 60.0  # fork, gloo and a few tiny steps take seconds; a child past this is stuck
LOCK_WAIT_S = 20.0  # the longest a grading waits for another that is making the same lanes
RUNTIME = Path(__file__).resolve().parent / "runtime"  # the drivers' import root
ROOT = RUNTIME.parents[2]  # where ``python -m labs...`` finds the labs


def _torch_version() -> str:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "?"


def key(case: dict) -> dict:
    """What DDP's lanes depend on: the model's shape, the batch, the steps, the cap, the ranks."""
    return {name: case[name] for name in KEY} | {"torch": _torch_version(), "warmup": WARMUP,
                                                 "arithmetic": ARITHMETIC}


def cache_dir() -> Path:
    """Where this machine keeps the lanes: the setting ``EXERCISE_DDP_CACHE`` (read afresh)."""
    return Limits.from_env().ddp_cache


def _private(folder: Path) -> bool:
    """The folder exists (made here if not), is ours, and nobody else may write in it."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = folder.lstat()
    except OSError:
        return False
    return folder.is_dir() and not folder.is_symlink() and info.st_uid == os.getuid() \
        and not info.st_mode & 0o022


def _readable(lanes) -> bool:
    """A cached or computed timeline that the page can draw (`labs.timeline.variant`'s shape)."""
    try:
        return isinstance(lanes, dict) and math.isfinite(float(lanes["overlap"])) and all(
            isinstance(s["start_ms"], float | int) and s["kind"] in ("compute", "comm")
            for r in lanes["ranks"] for s in r["spans"]) and len(lanes["ranks"]) >= 1
    except (KeyError, TypeError, ValueError):
        return False


def _locked(lock, wait_s: float) -> bool:
    """``flock`` of ``lock`` (released when the file closes), tried until ``wait_s`` is over."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)


def lanes(case: dict, *, folder: Path | None = None, timeout_s: float = TIMEOUT_S) -> dict | None:
    """torch DDP's timeline for ``case`` (`labs.timeline.variant` with ``bucket_cap_mb``,
    ``allreduce_calls``, ``key`` and ``made``: when and in how many seconds it was
    recorded), from this machine's cache or, the first time, from a fresh run; None
    when the run failed (the report then says so; the grade never depends on it).
    Two gradings that miss the cache together make it once: the second waits on a lock,
    at most `LOCK_WAIT_S` (then it has no lanes, and says so, rather than keep the
    grading's report waiting)."""
    wanted = key(case)
    folder = cache_dir() if folder is None else folder
    name = hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()[:24] + ".json"
    if not _private(folder):
        return _made(case, wanted, timeout_s)  # made for this grading alone, kept nowhere
    with open(folder / ".lock", "a") as lock:
        if not _locked(lock, LOCK_WAIT_S):  # another grading is making them: not worth the wait
            return None
        try:
            cached = json.loads((folder / name).read_text())
            if isinstance(cached, dict) and cached.get("key") == wanted and _readable(cached):
                return cached
        except (OSError, ValueError):
            pass
        made = _made(case, wanted, timeout_s)
        if made is not None:
            part = folder / f".{name}.{os.getpid()}"
            try:
                part.write_text(json.dumps(made))
                os.replace(part, folder / name)
            except OSError:
                part.unlink(missing_ok=True)
        return made


def _made(case: dict, wanted: dict, timeout_s: float) -> dict | None:
    """The lanes from a fresh child (`main`), or None when it failed or timed out."""
    t0 = time.perf_counter()
    try:  # the child and its ranks die with us (PR_SET_PDEATHSIG): a stopped grading leaves none
        done = subprocess.run([sys.executable, "-m", "labs.exercises.ddp_lanes", json.dumps(case)],
                              capture_output=True, timeout=timeout_s, check=True, cwd=ROOT,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
        made = json.loads(done.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if not _readable(made):
        return None
    return dict(made, key=wanted, made={"at": round(time.time()), "seconds": round(time.perf_counter() - t0, 3)})


# --------------------------------------------------------------------------
# The child: N ranks forked here, torch DDP on the exercise's model


def _rank(rank: int, case: dict, store: str, out: str, parent: int) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from drivers._training import load
    from drivers.bucketed_overlap import arch, inputs
    from torch.nn.parallel import DistributedDataParallel

    from labs import timeline
    from labs.context import shared_clock_origin
    from labs.ddp.timeline import record

    die_with_parent(parent)
    world = case["world_size"]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=TIMEOUT_S))
    code = 1
    try:
        mine = inputs(case, world)[rank]  # the same start and shard as the grading's ranks get
        model = DistributedDataParallel(load(arch(case), mine), bucket_cap_mb=case["cap"] / (1 << 20))
        opt = torch.optim.SGD(model.parameters(), lr=case["lr"])
        origin, _ = shared_clock_origin()
        spans, calls = record(model, opt, [(mine["x"], mine["y"])] * (WARMUP + case["steps"]),
                              warmup=WARMUP, origin=origin, world=world)
        every = [None] * world
        dist.all_gather_object(every, [spans, calls])
        if rank == 0:
            ranks = timeline.rebase([{"rank": r, "spans": s} for r, (s, _c) in enumerate(every)])
            Path(out).write_text(json.dumps(timeline.variant(
                ranks, bucket_cap_mb=case["cap"] / (1 << 20), allreduce_calls=max(c for _s, c in every))))
        dist.barrier()  # rank 0 has written the lanes: leave together
        code = 0
    except Exception:  # noqa: BLE001 - said on stderr; the parent sees the exit code
        traceback.print_exc()
    # No teardown: DDP's reducer, freed while this thread holds the GIL, can deadlock
    # gloo's own thread in the process group's destructor (seen with torch 2.13).
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str]) -> int:
    die_with_parent(os.getppid())
    case = json.loads(argv[0])
    sys.path.insert(0, str(RUNTIME))
    # Imported here, before the fork, so that the ranks do not each import them again:
    # DDP's constructor imports torch._dynamo (seconds), the ranks the rest.
    import drivers.bucketed_overlap  # noqa: F401
    import torch._dynamo  # noqa: F401
    import torch.multiprocessing as mp

    import labs.ddp.timeline  # noqa: F401

    with tempfile.TemporaryDirectory() as tmp:
        store, out = os.path.join(tmp, "store"), os.path.join(tmp, "lanes.json")
        mp.start_processes(_rank, args=(case, store, out, os.getpid()), nprocs=case["world_size"], start_method="fork")
        print(Path(out).read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
