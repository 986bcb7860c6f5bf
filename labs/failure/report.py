"""The failure lab's report, typed: what ``labs.failure.lab.summarize`` builds and the page reads.

Beside the lab that produces it (``labs.reports`` holds the shared parts, and
`labs.reports.read` finds this one through the lab's ``SUMMARY``). No torch.
"""

from __future__ import annotations

from labs.reports import Spread, _Model


class Segment(_Model):
    """A stretch of one rank's time (seconds from the job's first rank start)."""

    kind: str  # "kept" | "lost" | "redone" (a step), "checkpoint", "start" (process start to ready), "resume"
    attempt: int  # torchrun's restart count when it happened
    step: int  # the step (a checkpoint: the steps it holds)
    last_step: int | None = None  # a run of steps of one fate: its last (labs.failure.lab.merged)
    start_s: float
    end_s: float


class WorkLane(_Model):
    rank: int
    segments: list[Segment]


class Restart(_Model):
    """From a kill to the next attempt's first step."""

    attempt: int  # the attempt that was killed
    step: int  # at this step
    killed_s: float
    detect_s: float  # kill -> the new processes started (torchrun noticed, stopped the others, restarted)
    start_s: float  # process start -> ready (PyTorch imported, rendezvous, process group)
    resume_s: float  # ready -> first step (the checkpoint loaded)


class FailureSummary(_Model):
    world_size: int
    backend: str = "gloo"
    steps: int
    checkpoint_every: int
    kill_rank: int
    kill_steps: list[int]
    restarts: int  # how many times torchrun restarted the job
    max_restarts: int
    checkpoint_bytes: int
    save_s: Spread | None  # one save on rank 0 (None: none taken)
    step_s: Spread  # one training step
    lanes: list[WorkLane]
    restart: list[Restart]
    wall_s: float  # first rank start to last step's end
    checkpoint_s: float  # every save, summed
    lost_s: float  # steps done, then thrown away by a kill (rank 0's clock)
    lost_steps: int
    restart_s: float  # every restart, summed
    mtbf_s: float  # the mean time between failures chosen for Young/Daly
    delta_s: float  # the measured cost of a save (median)
    restart_cost_s: float  # the measured cost of a restart (median)
    tau_s: float  # this run's interval between checkpoints, seconds
    tau_opt_s: float | None  # Young/Daly's sqrt(2 delta M); None without a save
    same_weights: bool  # the resumed run ended with the weights of one never killed, bit for bit
    max_abs_diff: float
    digest: str
