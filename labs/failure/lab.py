"""A rank dies: torchrun restarts the job and it resumes from its last checkpoint.

Launch:

    python -m labs failure --world-size 2                        # kills rank 1 at a random step, ~20-40 s
    python -m labs failure --world-size 2 --kill-step 37 --checkpoint-every 10
    python -m labs failure --world-size 3 --kills 2 --max-restarts 3 --json
    torchrun --standalone --nproc-per-node 2 --max-restarts 3 -m labs.failure

``python -m labs failure`` starts ``torchrun`` itself (``labs.failure.supervise``):
elastic restarts (``--max-restarts``), the c10d rendezvous on 127.0.0.1, gloo.
Every rank trains the same DDP MLP (SGD with momentum) for ``steps`` steps;
rank 0 saves a checkpoint every ``checkpoint_every`` steps. On its first
attempt, rank ``kill_rank`` sends itself SIGKILL when it reaches
``kill_step`` (0: a step drawn from ``seed``), as a crashed node would die:
no exception, no goodbye. torchrun sees the exit, stops the other ranks and
starts every rank again; the new ranks load the last checkpoint and go on.
``kills`` > 1 kills the same rank again on later attempts, at later steps.

Why a rank-0 save rather than ``torch.distributed.checkpoint``: under DDP the
replicas are identical, so one copy holds the whole state, and one writer
that saves to a temporary name and renames it (atomic on one file system)
never leaves half a checkpoint: a rank killed mid-save leaves the previous
one. DCP earns its place when the state is sharded (FSDP, ZeRO: the
sharding lab), where each rank holds a part no other rank has, and writes
it in parallel.

A checkpoint holds the model, the optimizer (momentum buffers and all) and
the step: the data order is a pure function of the seed and the epoch
(``DistributedSampler`` with ``set_epoch``), so the step gives the epoch and
the position in it; the model has no dropout, so no RNG state is needed (the
exercise ``save-and-resume`` asks for it). After the last step the same
ranks train again from the first step, never killed and never resumed:
``same_weights`` says whether both end with the same weights, bit for bit.

What the summary shows: every rank's timeline of work kept, lost (done after
the last checkpoint, then thrown away by the kill) and redone, the
checkpoints and the restarts (from the kill to the first step of the next
attempt: torchrun noticing, new processes importing PyTorch, the rendezvous,
loading); the measured cost of a checkpoint ``delta``, of a restart ``R`` and
of a step; and, for a chosen mean time between failures ``mtbf_s``, the
Young/Daly interval sqrt(2 delta M) beside the run's own interval.

This module imports no torch. The ranks run ``labs.failure.rank``; the
launcher is ``labs.failure.supervise``.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence

from labs import reports
from labs.failure import report
from labs.params import Page, ParamError, dataclass, option

RANK_MODULE = "labs.failure.rank"  # what the ranks import, torch and all
LAUNCHER = "labs.failure.supervise"  # starts torchrun (labs.context: LAUNCHER)
SUMMARY = report.FailureSummary  # what the pages read of the summary
DEFAULT_WORLD_SIZE = 2
FAILURE_INJECTION = False  # it kills its rank itself: the Labs page offers no --fail-* (labs.context)


@dataclass
class Params:
    steps: int = option(60, key="labs.steps", help="training steps", low=4, high=2000,
                        page=Page(widget="slider", low=20, high=120, default=60))
    checkpoint_every: int = option(10, key="failure.every", help="steps between checkpoints (rank 0 saves)",
                                   low=1, page=Page(widget="slider", low=2, high=40, default=10))
    kill_step: int = option(0, key="failure.kill_step", help="the step at which the rank is killed "
                            "(0: drawn from the seed)", low=0, page=Page(widget="number", high=120, default=0))
    kill_rank: int = option(1, key="failure.kill_rank", help="the rank that is killed", low=0,
                            page=Page(widget="number", high=7, default=1))
    kills: int = option(1, key="failure.kills", help="how many times the rank is killed (once per attempt, "
                        "at later and later steps)", low=0, high=5, page=Page(widget="slider", low=0, high=3,
                                                                               default=1))
    max_restarts: int = option(3, key="failure.max_restarts", help="torchrun's --max-restarts (fewer than "
                               "kills: torchrun gives up)", low=0, high=10,
                               page=Page(widget="number", high=5, default=3))
    mtbf_s: int = option(60, key="failure.mtbf", help="a mean time between failures for the Young/Daly "
                         "interval, seconds", low=1, high=10**7, page=Page(widget="number", high=3600, default=60))
    samples: int = option(4096, help="samples in the synthetic data set", low=1)
    features: int = option(32, help="input features", low=1)
    classes: int = option(4, help="classes to tell apart", low=1)
    hidden: int = option(256, help="MLP width", low=1)
    depth: int = option(3, help="hidden layers", low=1)
    batch: int = option(64, help="samples per rank per step", low=1)
    lr: float = option(0.05, help="learning rate (> 0)")
    momentum: float = option(0.9, help="SGD momentum: optimizer state a checkpoint must hold (0 to 1)")
    seed: int = option(0, help="seed of the data, the model and the random kill step")
    run_dir: str | None = option(None, help="folder for the checkpoint and the ranks' logs (default: one "
                                 "the lab makes and removes)")

    def __post_init__(self) -> None:
        if self.lr <= 0 or not 0 <= self.momentum < 1:
            raise ValueError("need lr > 0 and 0 <= momentum < 1")
        if self.kill_step >= self.steps:
            raise ValueError(f"kill step {self.kill_step} is past the last step ({self.steps - 1})")


def check(params: Params, world_size: int) -> None:
    if params.kill_rank >= world_size:
        raise ParamError("kill_rank", "rank", f"kill rank {params.kill_rank} is not a rank of {world_size}",
                         high=world_size - 1)
    if params.samples < world_size * params.batch:
        raise ValueError(f"{params.samples} samples cannot fill a batch of {params.batch} on each of "
                         f"{world_size} ranks")
    if params.kills and kill_steps(params)[-1] >= params.steps:
        raise ValueError(f"{params.kills} kills after step {params.kill_step} do not fit in {params.steps} steps")


def kill_steps(p: Params) -> list[int]:
    """The step at which attempt a kills its rank, for a < kills: ``kill_step`` first (0: drawn
    from the seed), each later one drawn after the one before, leaving a step for each still to come."""
    rng = random.Random(p.seed)
    steps, low = [], 1
    for i in range(p.kills):
        high = p.steps - (p.kills - i)
        step = p.kill_step if i == 0 and p.kill_step else rng.randint(low, max(low, high))
        steps.append(step)
        low = step + 1
    return steps


# --------------------------------------------------------------------------
# Young/Daly and what a run wasted (no processes: tests/test_labs_failure.py)


def young_daly(delta_s: float, mtbf_s: float) -> float:
    """Young's interval between checkpoints, sqrt(2 delta M) (Daly's refinement differs
    in the order delta/M, a hair at these ratios)."""
    return math.sqrt(2 * delta_s * mtbf_s)


def waste_fraction(tau_s: float, *, delta_s: float, mtbf_s: float, restart_s: float = 0.0) -> float:
    """The expected share of a run lost to checkpoints and failures at interval ``tau_s``:
    each save costs delta once per tau, and each failure (one per M) half an interval of
    work on average and a restart."""
    return delta_s / tau_s + (tau_s / 2 + restart_s) / mtbf_s


def spread(values: Sequence[float]) -> reports.Spread:
    return reports.Spread(median=statistics.median(values), min=min(values), max=max(values))


STEP_KINDS = ("kept", "lost", "redone")


def lanes(logs: Sequence[Sequence[dict]], *, origin: float) -> list[report.WorkLane]:
    """Each rank's timeline from its log (every attempt): its steps kept, lost or redone, its
    checkpoints, and the restarts. A step is lost when its attempt was killed before the next
    checkpoint saved it; redone when an earlier attempt had done it; kept otherwise."""
    killed = {rec["attempt"]: rec["step"] for log in logs for rec in log if rec["kind"] == "kill"}
    saved = sorted({(rec["attempt"], rec["step"]) for log in logs for rec in log if rec["kind"] == "checkpoint"})
    out = []
    for rank, log in enumerate(logs):
        segments = []
        done = set()
        for rec in sorted(log, key=lambda r: r["t0"]):
            a = rec["attempt"]
            if rec["kind"] == "step":
                last = max((s for att, s in saved if att == a and s <= killed.get(a, math.inf)), default=None)
                lost = a in killed and (last is None or rec["step"] >= last)
                redone = rec["step"] in done
                fate = "lost" if lost else "redone" if redone else "kept"
                done.add(rec["step"])
                segments.append(report.Segment(kind=fate, attempt=a, step=rec["step"], start_s=rec["t0"] - origin,
                                                end_s=rec["t1"] - origin))
            elif rec["kind"] in ("checkpoint", "start", "resume"):
                segments.append(report.Segment(kind=rec["kind"], attempt=a, step=rec.get("step", 0),
                                                start_s=rec["t0"] - origin, end_s=rec["t1"] - origin))
        out.append(report.WorkLane(rank=rank, segments=segments))
    return out


def merged(lane: report.WorkLane) -> report.WorkLane:
    """``lane`` with each run of consecutive steps of one fate and attempt as one segment (its
    ``last_step`` the run's last): the same picture, a few segments a rank instead of one a step,
    so that a report of many steps and ranks stays small. A checkpoint between two steps stays
    its own segment, drawn over the run."""
    out: list[report.Segment] = []
    for seg in lane.segments:
        prev = next((p for p in reversed(out) if p.kind in STEP_KINDS), None) if seg.kind in STEP_KINDS else None
        if prev is not None and prev.kind == seg.kind and prev.attempt == seg.attempt \
                and (prev.last_step if prev.last_step is not None else prev.step) + 1 == seg.step \
                and all(o.kind in STEP_KINDS or o.kind == "checkpoint" for o in out[out.index(prev):]):
            out[out.index(prev)] = prev.model_copy(update={"last_step": seg.step, "end_s": seg.end_s})
        else:
            out.append(seg)
    return report.WorkLane(rank=lane.rank, segments=out)


def summarize(params: Params, ranks: list[dict], *, world_size: int, backend: str) -> report.FailureSummary:
    ranks = sorted(ranks, key=lambda r: r["rank"])
    logs = [r["log"] for r in ranks]
    origin = min(rec["t0"] for log in logs for rec in log)
    lanes_ = lanes(logs, origin=origin)
    zero = lanes_[0].segments
    steps = [s.end_s - s.start_s for lane in lanes_ for s in lane.segments if s.kind in ("kept", "redone")]
    saves = [s.end_s - s.start_s for s in zero if s.kind == "checkpoint"]
    kills = sorted((rec["attempt"], rec["t0"] - origin, rec["step"]) for log in logs for rec in log
                   if rec["kind"] == "kill")
    restarts = []
    for attempt, at, step in kills:
        nxt = [s for lane in lanes_ for s in lane.segments if s.attempt == attempt + 1]
        started = min((s.start_s for s in nxt if s.kind == "start"), default=None)
        ready = max((s.end_s for s in nxt if s.kind == "start"), default=None)
        first = min((s.start_s for s in nxt if s.kind in ("kept", "redone", "lost")), default=None)
        if started is None or first is None:
            continue
        restarts.append(report.Restart(attempt=attempt, step=step, killed_s=at, detect_s=started - at,
                                        start_s=ready - started, resume_s=first - ready))
    lost = [s for s in zero if s.kind == "lost"]
    end = max(s.end_s for lane in lanes_ for s in lane.segments)
    delta = statistics.median(saves) if saves else 0.0
    step = statistics.median(steps)
    restart = statistics.median([r.detect_s + r.start_s + r.resume_s for r in restarts]) if restarts else 0.0
    return report.FailureSummary(
        world_size=world_size, backend=backend, steps=params.steps, checkpoint_every=params.checkpoint_every,
        kill_rank=params.kill_rank, kill_steps=[k[2] for k in kills], restarts=max(r["attempt"] for r in ranks),
        max_restarts=params.max_restarts, checkpoint_bytes=ranks[0]["checkpoint_bytes"],
        save_s=spread(saves) if saves else None, step_s=spread(steps), lanes=[merged(lane) for lane in lanes_],
        restart=restarts,
        wall_s=end, checkpoint_s=sum(saves), lost_s=sum(s.end_s - s.start_s for s in lost), lost_steps=len(lost),
        restart_s=sum(r.detect_s + r.start_s + r.resume_s for r in restarts),
        mtbf_s=params.mtbf_s, delta_s=delta, restart_cost_s=restart, tau_s=params.checkpoint_every * step,
        tau_opt_s=young_daly(delta, params.mtbf_s) if delta else None,
        same_weights=ranks[0]["digest"] == ranks[0]["reference_digest"],
        max_abs_diff=ranks[0]["max_abs_diff"], digest=ranks[0]["digest"])


def format_text(summary: dict) -> str:
    s = report.FailureSummary.model_validate(summary)
    lines = [f"failure lab: {s.world_size} ranks ({s.backend}) under torchrun, {s.steps} steps, a checkpoint "
             f"every {s.checkpoint_every} steps (rank 0 saves {s.checkpoint_bytes} bytes)",
             f"rank {s.kill_rank} killed at step(s) {s.kill_steps}; torchrun restarted the job {s.restarts} "
             f"time(s) (--max-restarts {s.max_restarts})"]
    for r in s.restart:
        lines.append(f"  attempt {r.attempt} killed at step {r.step}: new ranks started {r.detect_s:.2f} s later, "
                     f"ready {r.start_s:.2f} s after that (PyTorch, rendezvous), first step {r.resume_s:.2f} s "
                     f"later (checkpoint loaded)")
    save = f"{s.save_s.median * 1e3:.1f} ms ({s.save_s.min * 1e3:.1f}..{s.save_s.max * 1e3:.1f})" if s.save_s \
        else "none taken"
    lines += [f"step {s.step_s.median * 1e3:.2f} ms ({s.step_s.min * 1e3:.2f}..{s.step_s.max * 1e3:.2f}); "
              f"checkpoint {save}",
              f"wall {s.wall_s:.2f} s: checkpoints {s.checkpoint_s:.3f} s, lost work {s.lost_s:.3f} s "
              f"({s.lost_steps} steps redone), restarts {s.restart_s:.2f} s"]
    if s.tau_opt_s is not None:
        lines.append(f"Young/Daly at M = {s.mtbf_s} s: checkpoint every {s.tau_opt_s:.2f} s "
                     f"(~{s.tau_opt_s / s.step_s.median:.0f} steps); this run: every {s.tau_s:.2f} s "
                     f"({s.checkpoint_every} steps)")
    lines.append(f"resumed run against one never killed: {'same weights, bit for bit' if s.same_weights else 'DIFFERENT weights'} "
                 f"(max |diff| {s.max_abs_diff:.1e})")
    return "\n".join(lines)
