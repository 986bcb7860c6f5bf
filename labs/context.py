"""What a lab needs, under our launcher and under torchrun: its rank, failures, the clock.

A lab is a folder ``labs/<name>/`` named in `LABS`. Its ``lab`` module
(``labs.ring.lab``, ``labs.bench.lab``, ...) imports no torch, so that the
platform reads it freely, and has these names:

- ``Params``: the lab's parameters, a pydantic dataclass made with
  ``labs.params.dataclass``, each field declared with ``labs.params.option``
  (validates itself; see ``labs.params``);
- ``check(params, world_size)``: raises ValueError if the lab cannot run so
  (the world size's own limit is ``labs.params.Run``'s);
- ``RANK_MODULE``: the name of the module, imported by the ranks only
  (`rank_code`), whose ``run_rank(ctx, params) -> dict`` does the work of one
  rank (JSON-serialisable, with ``work_s``, the seconds of timed work); ``ctx``
  is a `RankContext`; that module imports torch;
- ``summarize(params, ranks, *, world_size, backend)`` and
  ``format_text(summary) -> str``: combine the ranks' results and print them;
  ``summarize`` returns a dict, or the lab's typed report (its ``SUMMARY``),
  which `stored_summary` turns into the dict a result keeps;
- ``SUMMARY``: the type of that summary as the pages read it, a model of
  ``labs.reports`` (`labs.reports.read` finds it here);
- optionally ``DEFAULT_WORLD_SIZE`` (`world_size_default`);
- optionally ``LAUNCHER``: the module that starts the lab's ranks itself, for a
  lab whose subject is the launcher (the failure lab runs ``torchrun`` with
  elastic restarts); its ``launch(params, *, world_size, backend, timeout,
  hang_timeout, fail, on_event, cancel)`` returns a `LabResult` or a
  `LabError`, and ``labs.launch.run_lab`` hands the run to it once the request
  is checked;
- optionally ``FAILURE_INJECTION = False``: the lab fails on purpose by itself,
  so the Labs page does not offer the injected crash or hang every other lab
  takes (``--fail-rank``).

Beside it, the folder holds the rank code (torch and all), a ``__main__``
(``torchrun -m labs.<name>``) and whatever else only that lab uses.

This module is the labs' side of the contract: `RankContext` (who am I, which
device, report progress), `FailSpec` (inject a crash or a hang for the
lessons on failure), `resolve_backend` (gloo or NCCL, chosen in one place),
`shared_clock_origin` (per-step traces that line up across ranks), and
`run_in_env` for a process that torchrun (or any launcher that sets
RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT) started. A lab imports only this;
``labs.launch`` adds the process supervisor that starts N ranks locally and
watches them, which a rank under torchrun never needs.

Importing this module does not import torch (the platform reads `LABS`,
`LabResult` and `LabError` without it): the functions that run on a rank or
ask the machine import it when called.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import platform
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from labs.params import Run
from labs.settings import Limits

if TYPE_CHECKING:
    import torch

# The labs, in the course's order: each is a folder labs/<name>/ whose ``lab`` module
# has the names above. Adding a lab is adding its folder and its name here.
LABS = ("ring", "bench", "ddp", "sharding", "compression", "straggler", "failure", "topology")
INJECTED_CRASH_EXIT = 13


@dataclass
class FailSpec:
    """Inject a failure: rank ``rank`` crashes or hangs when it reaches ``step``."""

    rank: int
    step: int
    mode: str = "crash"  # "crash": the process exits at once; "hang": it sleeps forever

    def __post_init__(self) -> None:
        if self.mode not in ("crash", "hang"):
            raise ValueError(f"fail mode must be 'crash' or 'hang', not {self.mode!r}")
        if self.rank < 0 or self.step < 0:
            raise ValueError("fail rank and step must be >= 0")

    @classmethod
    def of(cls, run: Run) -> FailSpec | None:
        """The failure ``run`` asks for (``fail_rank``, ``fail_at_step``, ``fail_mode``), if any."""
        return None if run.fail_rank is None else cls(rank=run.fail_rank, step=run.fail_at_step, mode=run.fail_mode)


@dataclass
class LabResult:
    """A lab that finished on every rank."""

    lab: str
    world_size: int
    backend: str
    params: dict
    summary: dict  # the lab's combined result (see the lab's ``summarize``)
    ranks: list[dict]  # each rank's own return value
    wall_s: float  # launch to last rank reaped
    work_s: float  # the slowest rank's timed work
    overhead_s: float  # wall_s - work_s: start-up, rendezvous, checks, shutdown
    pids: list[int]
    launcher: str  # "fork", "spawn" or "torchrun"
    machine: dict
    warnings: list[str] = field(default_factory=list)
    ok: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class LabError:
    """A lab that did not finish: what went wrong, and which rank it was."""

    kind: str  # "crash" | "hang" | "timeout" | "invalid" | "cancelled"
    rank: int | None  # the rank held responsible, when one can be named
    message: str
    lab: str
    world_size: int
    backend: str
    wall_s: float = 0.0
    pids: list[int] = field(default_factory=list)
    ranks: list[dict] = field(default_factory=list)  # per rank: exit code, step, where, log tail
    ok: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


def host_summary() -> dict:
    """The machine without PyTorch: host, platform, Python, CPUs (what a web page may say
    of itself; where a lab ran, its result's ``machine`` says, from `machine_summary`)."""
    return {"hostname": socket.gethostname(), "platform": platform.platform(),
            "python": platform.python_version(), "cpu_count": os.cpu_count()}


def machine_summary() -> dict:
    """What the labs run on: CPUs, torch, backends and GPUs."""
    import torch
    import torch.distributed as dist

    gpus = []
    if torch.cuda.is_available():
        gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {
        **host_summary(),
        "torch": torch.__version__,
        "gloo_available": dist.is_gloo_available(),
        "nccl_available": dist.is_nccl_available(),
        "default_backend": "nccl" if gpus and dist.is_nccl_available() else "gloo",
        "gpus": gpus,
    }


def resolve_backend(backend: str, world_size: int) -> str:
    """Pick the process-group backend; ValueError says why a request cannot be met.

    "auto" means NCCL when there is one GPU per rank, gloo otherwise.
    """
    import torch
    import torch.distributed as dist

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if backend == "auto":
        return "nccl" if dist.is_nccl_available() and gpus >= world_size else "gloo"
    if backend == "gloo":
        if not dist.is_gloo_available():
            raise ValueError("this torch build has no gloo backend")
        return "gloo"
    if backend == "nccl":
        if not dist.is_nccl_available() or gpus == 0:
            raise ValueError(
                "backend nccl needs CUDA GPUs and a CUDA build of torch; "
                f"this machine shows {gpus} GPU(s) (torch {torch.__version__}). "
                "Use --backend gloo (or auto)."
            )
        if gpus < world_size:
            raise ValueError(
                f"backend nccl needs one GPU per rank: {world_size} ranks asked, "
                f"{gpus} GPU(s) visible. Use fewer ranks or --backend gloo."
            )
        return "nccl"
    raise ValueError(f"unknown backend {backend!r}: use auto, gloo or nccl")


def load_lab(lab: str):
    """A lab's ``lab`` module by short name ("ring": ``labs.ring.lab``) or, for
    experiments, by module path."""
    if lab in LABS:
        return importlib.import_module(f"labs.{lab}.lab")
    if "." not in lab:
        raise ValueError(f"unknown lab {lab!r}: choose one of {', '.join(LABS)}")
    return importlib.import_module(lab)


def rank_code(lab: str):
    """The module that does a rank's work for ``lab`` (its ``RANK_MODULE``), PyTorch with it.

    The ranks call it; so does a launcher about to fork ranks, which then
    inherit the imports instead of each paying for them."""
    return importlib.import_module(load_lab(lab).RANK_MODULE)


def world_size_default(lab: str) -> int:
    """The lab's own default number of ranks (its module's ``DEFAULT_WORLD_SIZE``), else `Run`'s.

    The ring and bench labs ask for 3: on 2 ranks the naive ring and the
    chunked ring send the same bytes, so their comparison shows nothing."""
    return getattr(load_lab(lab), "DEFAULT_WORLD_SIZE", Run.__pydantic_fields__["world_size"].default)


def stored_summary(summary) -> dict:
    """What a result keeps of a lab's summary: a typed report (a pydantic model) as plain
    JSON values, which ``labs.reports.read`` turns back into the same model; a dict as it is."""
    return summary.model_dump(mode="json") if hasattr(summary, "model_dump") else summary


def params_dict(params) -> dict:
    """A lab's Params as a plain dict (JSON values)."""
    return asdict(params)


def lab_of(params) -> str:
    """The lab whose ``Params`` ``params`` are: its short name ("ring" for ``labs.ring.lab``),
    or, for a lab loaded by module path (`load_lab`), that path."""
    module = type(params).__module__
    short = module.removeprefix("labs.").removesuffix(".lab")
    return short if short in LABS and module == f"labs.{short}.lab" else module


def event(rank, step, total_steps, phase, message="", *, kind="progress", **extra) -> dict:
    """One progress or status report, as the launcher's ``on_event`` receives it."""
    fraction = None
    if step is not None and total_steps:
        fraction = min(1.0, step / total_steps)
    return {"kind": kind, "rank": rank, "step": step, "total_steps": total_steps,
            "phase": phase, "fraction": fraction, "message": message, **extra}


class RankContext:
    """What a lab's ``run_rank`` gets: who it is, where to compute, how to report.

    ``progress(step, total_steps, phase)`` says that ``step`` steps are done
    (so ``fraction = step / total_steps``); it is also where an injected
    failure fires. ``communicating()`` marks a region in which the rank waits
    on its peers, which helps the launcher tell a hung rank from its victims.
    """

    def __init__(self, *, rank: int, world_size: int, local_rank: int, backend: str,
                 fail: FailSpec | None = None, emit: Callable[[dict], None] | None = None):
        import torch

        self.rank = rank
        self.world_size = world_size
        self.local_rank = local_rank
        self.backend = backend
        self.device = torch.device(f"cuda:{local_rank}") if backend == "nccl" else torch.device("cpu")
        self.fail = fail
        self.step = 0
        self.total_steps = 0
        self.phase = "init"
        self._emit = emit
        self._comm_depth = 0
        self._in_progress = False

    def progress(self, step: int, total_steps: int, phase: str, message: str = "") -> None:
        self._in_progress = True
        self.step, self.total_steps, self.phase = step, total_steps, phase
        if self._emit is not None:
            self._emit(event(self.rank, step, total_steps, phase, message, kind="progress"))
        fail = self.fail
        if fail is not None and fail.rank == self.rank and fail.step == step:
            _inject_failure(fail.mode, self.rank, step, phase)
        self._in_progress = False

    @contextlib.contextmanager
    def communicating(self):
        self._comm_depth += 1
        try:
            yield
        finally:
            self._comm_depth -= 1

    def waiting_on_peers(self, innermost_file: str) -> bool:
        """True when the main thread is blocked on other ranks, not in lab code."""
        if self._in_progress:
            return False
        return innermost_file.startswith(_torch_dir()) or self._comm_depth > 0


def _torch_dir() -> str:
    import torch

    return os.path.dirname(torch.__file__)


def _inject_failure(mode: str, rank: int, step: int, phase: str) -> None:
    sys.stderr.write(f"rank {rank}: injected {mode} at step {step} ({phase})\n")
    sys.stderr.flush()
    if mode == "crash":
        # A hard exit, like an OOM kill or a segfault: no exception, no goodbye.
        os._exit(INJECTED_CRASH_EXIT)
    while True:  # "hang": alive, heartbeating, and never reaching the next collective
        time.sleep(3600)


def shared_clock_origin(device: torch.device | None = None) -> tuple[float, str]:
    """A time origin all ranks agree on, for per-step traces.

    Every rank reads ``time.perf_counter()`` right after a barrier. On Linux
    that is CLOCK_MONOTONIC, one clock for the whole machine, so when all
    ranks share a host we use rank 0's reading: offsets from it are exactly
    comparable across processes. Ranks on different hosts have unrelated
    clocks; there each rank keeps its own post-barrier reading, which is off
    only by how unevenly the ranks left the barrier.
    """
    import torch.distributed as dist

    hosts = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, socket.gethostname())
    dist.barrier()
    mine = time.perf_counter()
    if len(set(hosts)) == 1:
        box = [mine]
        dist.broadcast_object_list(box, src=0, device=device)
        return box[0], "one host: rank 0's CLOCK_MONOTONIC reading after a barrier"
    return mine, "several hosts: each rank's own clock, aligned by a barrier"


# --------------------------------------------------------------------------
# Under torchrun (or any launcher that sets RANK and WORLD_SIZE)


def launched_externally() -> bool:
    """True when torchrun (or similar) started this process as one rank of a job."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def launcher_world() -> tuple[int, int] | None:
    """(ranks per node, nodes) of the job torchrun (or similar) started this process in, from
    its environment: what its command line leaves out (``labs.request.Request.from_argv``).
    None when no launcher did."""
    if not launched_externally():
        return None
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    return local, max(1, world // local)


def _attempt_store(world_size: int, timeout: float) -> dict:
    """The store for ``init_process_group`` under torchrun: a prefix of this attempt's own.

    torch 2.13's torchrun shares its rendezvous' TCPStore with the ranks
    (``TORCHELASTIC_USE_AGENT_STORE``) and keeps that store across restarts
    (``--max-restarts``), so after a restart a rank may read the address a
    killed rank of the last attempt published and fail to connect to it
    (pytorch/pytorch#135712, #167288). Every rank of one machine's attempt
    has the same ``TORCHELASTIC_RESTART_COUNT``: its keys go under that.
    Elsewhere: nothing (``init_process_group`` reads MASTER_ADDR/PORT)."""
    import torch.distributed as dist

    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return {}
    shared = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size,
                           is_master=False, timeout=timedelta(seconds=timeout))
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return {"store": dist.PrefixStore(f"labs/attempt-{attempt}", shared),
            "rank": int(os.environ["RANK"]), "world_size": world_size}


def run_in_env(run: Run, params, *, on_event: Callable[[dict], None] | None = None) -> LabResult | None:
    """Run the lab of ``params`` as one rank of a job whose launcher set RANK/WORLD_SIZE/MASTER_*.

    ``run`` and ``params`` are the checked models (``labs.request.Request``);
    the world size is the launcher's, ``run``'s backend is chosen for this
    node's GPUs. Every rank calls this; rank 0 returns the LabResult, the
    others None. Failures raise: torchrun notices a failed rank and stops the
    others. The timeout (for the collectives) is ``run.timeout``, else
    ``LAB_TIMEOUT_S``.
    """
    import torch
    import torch.distributed as dist

    timeout = run.timeout if run.timeout is not None else Limits.from_env().timeout_s
    t0 = time.perf_counter()
    lab = lab_of(params)
    module = load_lab(lab)
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    resolved = resolve_backend(run.backend, local_world)
    if resolved == "nccl":
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group(resolved, timeout=timedelta(seconds=timeout), **_attempt_store(world_size, timeout))
    ctx = RankContext(rank=rank, world_size=world_size, local_rank=local_rank, backend=resolved,
                      fail=FailSpec.of(run), emit=on_event if rank == 0 else None)
    out = rank_code(lab).run_rank(ctx, params)
    gathered = [None] * world_size if rank == 0 else None
    dist.gather_object(out, gathered, dst=0)
    dist.barrier()
    dist.destroy_process_group()
    if rank != 0:
        return None
    wall = time.perf_counter() - t0
    work = max(float(r.get("work_s", 0.0)) for r in gathered)
    return LabResult(lab=lab, world_size=world_size, backend=resolved, params=params_dict(params),
                     summary=stored_summary(module.summarize(params, gathered, world_size=world_size,
                                                             backend=resolved)),
                     ranks=gathered, wall_s=wall, work_s=work, overhead_s=max(0.0, wall - work),
                     pids=[], launcher="torchrun", machine=machine_summary())
