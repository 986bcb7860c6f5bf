"""Gradient compression: DDP under fp16/bf16, PowerSGD and top-k hooks, bytes and loss measured.

Launch:

    python -m labs compression --world-size 2     # every strategy, 3 seeds, 150 steps: ~10 s on 2 idle cores
    python -m labs compression --world-size 4 --strategies fp32 topk topk_ef --seeds 5
    python -m labs compression --world-size 2 --json --out compression.json
    torchrun --standalone --nproc-per-node 2 -m labs.compression

One small MLP (``depth`` hidden layers of ``hidden``) is trained ``steps``
steps of SGD on a synthetic task (``labs.compression.rank``) under each
strategy, once per seed; a seed fixes the initial weights and the batches, so
the runs of one seed differ only by what the DDP communication hook did to the
gradients (``labs.compression.hooks``):

- ``fp32``: the plain all-reduce (the reference; it always runs);
- ``fp16``, ``bf16``: the bucket cast to 2-byte floats, then all-reduced;
- ``powersgd_r1``, ``_r2``, ``_r4``: PowerSGD of that rank, with its warm
  start and error feedback; dense for its first two steps, as torch requires;
- ``topk``, ``topk_ef``: the ``density`` share of each bucket's entries, by
  magnitude, all-gathered as values and indices; ``topk_ef`` with error feedback.

For each strategy the summary gives the bytes each rank handed to the
collectives in a compressed step, counted at ``torch.distributed``'s door
(``labs.compression.hooks.WireCount``), beside the family's formula
(``labs.model``: 4 P for fp32, 2 P for fp16/bf16, 4 (m + n) r per compressed
matrix for PowerSGD, 8 k per bucket for top-k) and their relative gap, which
must stay under `FORMULA_TOLERANCE`; what that sends per rank on a ring
(all-gather grows with the ranks, all-reduce does not); the evaluation loss
every ``eval_every`` steps, median and range over the seeds; the final loss's
gap to fp32, seed by seed, with a 95 % confidence interval; the time per step
(median and quartiles; shown, never checked: it is this machine's noise as
much as the hook's cost); and whether every rank ended with the same weights.

gloo and PowerSGD: torch's hook chains three all-reduces per bucket, the
last two issued from callbacks; with several buckets gloo can see them in
another order on each rank and abort. On gloo the lab therefore waits for each
bucket's chain (``powersgd_chain="auto"``; see ``labs.compression.hooks.serial``);
``--powersgd-chain overlapped --bucket-cap-kb 8`` shows the failure.

This module imports no torch: the platform reads it to build the form and
check a request. The ranks run ``labs.compression.rank``.
"""

from __future__ import annotations

import math
import statistics

from labs import reports
from labs.model import mean_ci95, powersgd_elements, ring_sent, topk_bytes
from labs.params import Page, dataclass, option

STRATEGIES = ("fp32", "fp16", "bf16", "powersgd_r1", "powersgd_r2", "powersgd_r4", "topk", "topk_ef")
REFERENCE = "fp32"  # what the loss gaps are measured from: it runs whatever the request says
FORMULA_TOLERANCE = 0.01  # the lab's own claim: measured bytes within 1% of the family's formula
SKIPPED_STEPS = 2  # left out of the step times: DDP rebuilds its buckets after step 0; PowerSGD's dense steps
CHAINS = ("auto", "serial", "overlapped")
# What a rank runs (``run_rank``), with torch: imported by the ranks only (``labs.context.rank_code``).
RANK_MODULE = "labs.compression.rank"
# What the pages read of this lab's summary (``labs.reports.read``); `summarize` builds it.
SUMMARY = reports.CompressionSummary


def power_rank(name: str) -> int | None:
    """PowerSGD's approximation rank of a strategy ("powersgd_r2": 2), None for the others."""
    return int(name.removeprefix("powersgd_r")) if name.startswith("powersgd_r") else None


@dataclass
class Params:
    strategies: list[str] = option(list(STRATEGIES), key="compression.strategies", choices=STRATEGIES,
                                   labels="compression.strategy.", page=Page(widget="multiselect"),
                                   help="strategies to compare (fp32, the reference, always runs)")
    seeds: int = option(3, key="compression.seeds", low=1, high=10, page=Page(widget="slider", high=5),
                        help="seeds per strategy: each fixes the initial weights and the batches")
    steps: int = option(150, key="labs.steps", low=10, high=2000,
                        page=Page(widget="slider", low=50, high=400),
                        help="SGD steps per run")
    density: float = option(0.01, help="top-k: the share of each bucket's entries a rank sends (0 < d <= 1)")
    features: int = option(32, help="input features", low=1, high=1024)
    hidden: int = option(64, help="width of each hidden layer", low=2, high=1024)
    depth: int = option(2, help="hidden layers", low=1, high=8)
    classes: int = option(10, help="classes of the synthetic task", low=2, high=100)
    batch: int = option(32, help="samples per rank per step", low=1, high=4096)
    lr: float = option(0.2, help="SGD's learning rate (> 0)")
    momentum: float = option(0.0, help="SGD's momentum (0 <= m < 1)")
    eval_every: int = option(10, help="steps between two evaluations of the loss", low=1)
    eval_samples: int = option(1024, help="samples in the evaluation set", low=1, high=65536)
    first_seed: int = option(0, help="the first seed; the others follow it", low=0)
    bucket_cap_kb: float | None = option(help="DDP's bucket cap, KB (> 0; default: the whole model in one bucket)")
    powersgd_chain: str = option("auto", choices=CHAINS,
                                 help="PowerSGD's chained all-reduces: serial (each bucket's done before the "
                                      "next; what gloo needs), overlapped (torch's own), auto (serial on gloo)")

    def __post_init__(self) -> None:
        if not 0 < self.density <= 1 or self.lr <= 0 or not 0 <= self.momentum < 1:
            raise ValueError("need 0 < density <= 1, lr > 0 and 0 <= momentum < 1")
        if self.bucket_cap_kb is not None and self.bucket_cap_kb <= 0:
            raise ValueError("bucket_cap_kb must be > 0")

    @property
    def runs(self) -> list[str]:
        """The strategies that run, in the lab's order: the reference first, whatever was asked."""
        return [s for s in STRATEGIES if s == REFERENCE or s in self.strategies]

    @property
    def shapes(self) -> list[list[int]]:
        """The shape of every parameter of the model, in its order (the ranks' ``make_model``)."""
        out, width = [], self.features
        for _ in range(self.depth):
            out += [[self.hidden, width], [self.hidden]]
            width = self.hidden
        return [*out, [self.classes, width], [self.classes]]

    @property
    def curve_steps(self) -> list[int]:
        """The steps after which the loss is evaluated: 0, every ``eval_every``, and the last."""
        return [0, *(s for s in range(1, self.steps + 1) if s % self.eval_every == 0 or s == self.steps)]


def check(params: Params, world_size: int) -> None:
    """Any world size will do: one rank trains alone, and its hooks still run (sending nothing)."""


def formula_bytes(name: str, params: Params, bucket_numels: list[int]) -> int:
    """What the family's formula says one rank hands over in a compressed step (``labs.model``)."""
    total = sum(math.prod(s) for s in params.shapes)
    if name == "fp32":
        return 4 * total
    if name in ("fp16", "bf16"):
        return 2 * total
    if name.startswith("powersgd_r"):
        return 4 * powersgd_elements(params.shapes, power_rank(name))
    return topk_bytes(bucket_numels, params.density)


def _band(values: list[float]) -> reports.Band:
    return reports.Band(median=statistics.median(values), min=min(values), max=max(values))


def _step_time(times: list[list[float]]) -> reports.StepTime:
    """Median and quartiles of the step times, in ms, pooled over the seeds (first steps left out)."""
    ms = sorted(x * 1e3 for run in times for x in (run[SKIPPED_STEPS:] if len(run) > SKIPPED_STEPS else run))
    q1, _, q3 = statistics.quantiles(ms, n=4, method="inclusive") if len(ms) > 1 else (ms[0],) * 3
    return reports.StepTime(median_ms=statistics.median(ms), q1_ms=q1, q3_ms=q3, samples=len(ms))


def pareto(points: dict[str, tuple[float, float]]) -> list[str]:
    """The names no other point beats on both counts (bytes and loss), by bytes ascending."""
    front = [a for a, (ba, la) in points.items()
             if not any((bb <= ba and lb <= la) and (bb < ba or lb < la) for b, (bb, lb) in points.items() if b != a)]
    return sorted(front, key=lambda a: points[a])


def summarize(params: Params, ranks: list[dict], *, world_size: int,
              backend: str) -> reports.CompressionSummary:
    ranks = sorted(ranks, key=lambda r: r["rank"])
    first = ranks[0]
    runs: dict[str, list[dict]] = {}
    for run in first["runs"]:
        runs.setdefault(run["strategy"], []).append(run)
    digests = {(r["strategy"], r["seed"]): {rk["runs"][i]["digest"] for rk in ranks}
               for i, r in enumerate(first["runs"])}
    sent_by_rank = {(r["strategy"], r["seed"]): {str(rk["runs"][i]["bytes_runs"]) for rk in ranks}
                    for i, r in enumerate(first["runs"])}
    dense = 4 * sum(math.prod(s) for s in params.shapes)
    reference = [r["curve"][-1] for r in runs[REFERENCE]]
    strategies = {}
    for name, mine in runs.items():
        last = mine[0]["last_step"]
        measured = mine[0]["bytes_runs"][-1][0]  # a compressed step: the last
        formula = formula_bytes(name, params, last["bucket_numels"])
        finals = [r["curve"][-1] for r in mine]
        gap = None
        if name != REFERENCE:
            gaps = [f - g for f, g in zip(finals, reference, strict=True)]  # seed by seed: paired
            mean, half = mean_ci95(gaps)
            gap = reports.Gap(mean=mean, half_width=half, seeds=gaps)
        strategies[name] = reports.CompressionStrategy(
            bytes_per_step=measured, formula_bytes=formula,
            formula_error=abs(measured - formula) / formula,
            dense_steps=sum(n for b, n in mine[0]["bytes_runs"] if b == dense and measured != dense),
            by_kind=last["by_kind"], sent_per_step=ring_sent(last["by_kind"], world_size),
            dtypes=last["dtypes"], ratio=dense / measured if measured else None,
            curve=[_band([r["curve"][i] for r in mine]) for i in range(len(params.curve_steps))],
            final=_band(finals), finals=finals, gap=gap, step_time=_step_time([r["times_s"] for r in mine]),
            replicas_equal=all(len(digests[(name, r["seed"])]) == 1 for r in mine),
            ranks_sent_alike=all(len(sent_by_rank[(name, r["seed"])]) == 1 for r in mine))
    front = pareto({n: (s.sent_per_step, s.final.median) for n, s in strategies.items()})
    last = runs[REFERENCE][0]["last_step"]
    return reports.CompressionSummary(
        world_size=world_size, backend=backend, parameters=dense // 4, gradient_bytes=dense,
        shapes=params.shapes, seeds=[r["seed"] for r in runs[REFERENCE]], steps=params.steps,
        curve_steps=params.curve_steps, density=params.density, buckets=last["buckets"],
        powersgd_chain="serial" if params.powersgd_chain == "serial" or (
            params.powersgd_chain == "auto" and backend == "gloo") else "overlapped",
        strategies=strategies, formula_tolerance=FORMULA_TOLERANCE,
        within_formula=all(s.formula_error <= FORMULA_TOLERANCE for s in strategies.values()),
        pareto=front)


def _kb(b: float) -> str:
    return f"{b / 1e3:9.2f}"


def format_text(summary) -> str:
    """The summary as text (``python -m labs compression`` prints it)."""
    s = reports.CompressionSummary.model_validate(summary)
    lines = [f"Compression lab: {s.world_size} ranks, {s.backend}; MLP {s.parameters} parameters "
             f"({s.gradient_bytes / 1e3:.1f} KB of fp32 gradients, {s.buckets} bucket(s)), {s.steps} steps, "
             f"seeds {', '.join(map(str, s.seeds))}",
             "strategy       KB/step measured (formula)  x smaller  KB sent (ring)  final loss median [min, max]"
             "  gap to fp32 (95% CI)   ms/step median [q1, q3]"]
    for name, st in s.strategies.items():
        gap = "reference" if st.gap is None else (
            f"{st.gap.mean:+.4f}" + ("" if st.gap.half_width is None else f" ± {st.gap.half_width:.4f}"))
        lines.append(f"{name:12s} {_kb(st.bytes_per_step)} ({_kb(st.formula_bytes).strip()})  {st.ratio:9.1f}"
                     f"  {_kb(st.sent_per_step)}  {st.final.median:.4f} [{st.final.min:.4f}, {st.final.max:.4f}]"
                     f"  {gap:22s} {st.step_time.median_ms:.2f} [{st.step_time.q1_ms:.2f}, {st.step_time.q3_ms:.2f}]")
    lines.append(f"every measured byte count within {s.formula_tolerance:.0%} of its formula: {s.within_formula}; "
                 f"every rank ended with the same weights: {all(st.replicas_equal for st in s.strategies.values())}; "
                 f"best trade-offs (bytes against loss): {', '.join(s.pareto)}; PowerSGD's all-reduces: "
                 f"{s.powersgd_chain}")
    return "\n".join(lines)
