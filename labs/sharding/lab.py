"""Sharding: what each rank holds under DDP, ZeRO-1, ZeRO-2 and ZeRO-3 (FSDP2), measured.

Launch:

    python -m labs sharding --world-size 2                   # ~10-20 s on 2 cores
    python -m labs sharding --world-size 4 --json --out sharding.json
    python -m labs sharding --world-size 2 --precision bf16-mixed
    torchrun --standalone --nproc-per-node 2 -m labs.sharding

One MLP (``depth`` square layers of ``width``: about 4.7 MB of fp32
parameters by default), Adam, in ``precision`` (fp32, or bf16-mixed: bf16
weights, gradients and traffic, fp32 master weights and Adam), trained ``steps`` steps from the same
seed on the same batches under four strategies (``labs.sharding.zero``): ``ddp``,
``zero1`` (torch's ZeroRedundancyOptimizer), ``zero2`` (written in
``labs.sharding.zero``: reduce-scatter of the gradients) and ``zero3`` (FSDP2's
``fully_shard``). For each strategy and rank, after the last optimizer step
and before ``zero_grad``:

- ``measured``: bytes of parameters, gradients and optimizer state, read
  from the live tensors (deduplicated by storage; a DTensor counts its shard);
- ``predicted``: ``labs.model.state_bytes``, the lessons' formula (4 + 4 + 8
  bytes per parameter in fp32, 2 + 2 + 12 in bf16-mixed, where the master
  copy counts as optimizer state; the sharded parts over the elements this
  rank really owns: whole tensors under ZeRO-1, a slice under ZeRO-2, rows
  under FSDP2);
- ``peak``: the device allocator's peak during the last step on a GPU;
  null on CPU, where no allocator counts every byte;
- ``wire_bytes_per_step``: what this rank handed to the collectives in the
  last step, spread as a ring spreads it (`labs.sharding.zero.WireCounter`);

and per strategy ``max_abs_diff_vs_ddp`` and ``mean_abs_diff_vs_ddp``, the
largest and the mean difference of a weight from DDP's after the last step
(all ranks): the four must agree within ``tolerance`` (`WEIGHT_TOLERANCE`
says which of the two, by precision), and ``step_collectives``, the
collectives rank 0 called in the last step, one entry per kind and stage
(forward, backward, step) in the order they came: ``{"kind", "stage",
"bytes" (sent, as ``wire_bytes_per_step`` counts them), "calls", "dtype"}``;
the page's shard map replays them. The summary's ``strategies`` maps each
strategy to ``{"ranks": [...], "max_abs_diff_vs_ddp": x,
"mean_abs_diff_vs_ddp": x, "step_collectives": [...]}``.
"""

from __future__ import annotations

from labs import reports
from labs.model import PRECISIONS, STRATEGIES, wire_factor
from labs.params import Page, dataclass, option

PARTS = ("params", "grads", "optimizer")
# How close a measured figure must come to its prediction (the lab's own claim).
LEDGER_TOLERANCE = 0.10
# How close the four strategies' weights must end, by precision, unless --tolerance says.
# fp32: max |w - w_ddp|, absolute. bf16-mixed: mean |w - w_ddp| as a share of the mean
# |w - w_start| DDP moved them. The max means nothing there: on 3+ ranks the strategies
# sum bf16 gradients in other orders, which round differently, and Adam turns a
# gradient near zero into a full step of lr either way (measured on 4 ranks, 3 steps:
# max 2.7e-3 for a max update of 3.1e-3, mean 3.4e-5 for a mean update of 1.2e-3,
# about 3%); a rank that kept stale weights would be off by most of the update.
BF16_TOLERANCE = 0.10
WEIGHT_TOLERANCE = {"fp32": 1e-5, "bf16-mixed": BF16_TOLERANCE}
# What a rank runs (``run_rank``), with torch: imported by the ranks only (``labs.context.rank_code``).
RANK_MODULE = "labs.sharding.zero"
# What the pages read of this lab's summary (``labs.reports.read``).
SUMMARY = reports.ShardingSummary


@dataclass
class Params:
    width: int = option(384, key="sharding.width", help="width of each square layer", low=8,
                        high=2048, page=Page(widget="slider", low=64, high=512, default=384))
    depth: int = option(8, key="sharding.depth", help="layers", low=1, high=32,
                        page=Page(widget="slider", low=2, high=12, default=8))
    batch: int = option(16, help="samples per rank per step", low=1)
    steps: int = option(3, key="labs.steps", help="training steps under each strategy", low=1, high=50,
                        page=Page(widget="slider", low=1, high=6, default=3))
    lr: float = option(1e-3, help="Adam's learning rate (> 0)")
    seed: int = option(0, help="seed of the model and the batches")
    precision: str = option("fp32", key="sharding.precision", choices=tuple(PRECISIONS),
                            labels="widgets.precision.", page=Page(),
                            help="fp32, or bf16 weights and gradients with fp32 master weights and Adam")
    tolerance: float | None = option(help="weights' distance from DDP's allowed after the last step (> 0): "
                                     "max |w - w_ddp| in fp32 (default 1e-5), mean |w - w_ddp| over "
                                     "mean |w - w_start| in bf16-mixed (default 0.1)")

    def __post_init__(self) -> None:
        if self.lr <= 0 or (self.tolerance is not None and self.tolerance <= 0):
            raise ValueError("need lr > 0 and tolerance > 0")

    @property
    def weight_tolerance(self) -> float:
        return self.tolerance if self.tolerance is not None else WEIGHT_TOLERANCE[self.precision]

    @property
    def parameters(self) -> int:
        return self.depth * (self.width * self.width + self.width)


def check(params: Params, world_size: int) -> None:
    """Any world size will do: FSDP2 and our ZeRO-2 pad an uneven split."""


def _error(measured: dict, predicted: dict) -> float:
    """The largest relative gap between a measured part and its prediction."""
    return max(abs(measured[k] - predicted[k]) / max(predicted[k], 1) for k in PARTS)


def summarize(params: Params, ranks: list[dict], *, world_size: int, backend: str) -> reports.ShardingSummary:
    ranks = sorted(ranks, key=lambda r: r["rank"])
    strategies = {}
    for name in STRATEGIES:
        rows = [{k: r["strategies"][name][k] for k in
                 ("rank", "measured", "predicted", "peak", "wire_bytes_per_step")} for r in ranks]
        strategies[name] = {"ranks": rows, "max_abs_diff_vs_ddp": ranks[0]["max_abs_diff_vs_ddp"][name],
                            "mean_abs_diff_vs_ddp": ranks[0]["mean_abs_diff_vs_ddp"][name],
                            # the collectives of the last step, as rank 0 called them (labs.sharding.zero.WireCounter)
                            "step_collectives": ranks[0]["strategies"][name]["step_collectives"]}
    total = ranks[0]["parameters"]
    weight_bytes = total * PRECISIONS[params.precision]["weights"]
    errors = {name: max(_error(r["measured"], r["predicted"]) for r in s["ranks"])
              for name, s in strategies.items()}
    held = {name: [sum(r["measured"].values()) for r in s["ranks"]] for name, s in strategies.items()}
    tol = params.weight_tolerance
    if params.precision == "fp32":
        equal = all(s["max_abs_diff_vs_ddp"] <= tol for s in strategies.values())
    else:
        equal = all(s["mean_abs_diff_vs_ddp"] <= tol * ranks[0]["mean_abs_update_ddp"] for s in strategies.values())
    ordered = all(held["ddp"][i] > held["zero1"][i] > held["zero2"][i] > held["zero3"][i]
                  for i in range(world_size)) if world_size > 1 else None
    return reports.ShardingSummary(
        lab="sharding", world_size=world_size, backend=backend,
        model=reports.ShardModel(kind="MLP", width=params.width, depth=params.depth, parameters=total,
                                 bytes=weight_bytes),
        precision=params.precision,
        # what the collectives carried, from the record: bf16 under bf16-mixed, as gloo allows
        wire_dtypes=sorted({e["dtype"] for s in strategies.values() for e in s["step_collectives"]}),
        strategies=strategies, ledger_error=errors,
        within_ledger_tolerance=all(e <= LEDGER_TOLERANCE for e in errors.values()),
        ledger_tolerance=LEDGER_TOLERANCE, ordered=ordered,
        predicted_wire_bytes_per_step={n: wire_factor(n, world_size) * weight_bytes for n in STRATEGIES},
        tolerance=tol, weight_check="max" if params.precision == "fp32" else "mean_relative",
        max_abs_update_ddp=ranks[0]["max_abs_update_ddp"],  # how far training moved the weights
        mean_abs_update_ddp=ranks[0]["mean_abs_update_ddp"],
        equal_weights=equal, steps=params.steps)


def _mb(b: float) -> str:
    return f"{b / 1e6:7.2f}"


def format_text(summary) -> str:
    """The summary (a stored dict or the model) as text (``python -m labs sharding`` prints it)."""
    s = reports.ShardingSummary.model_validate(summary)
    m = s.model
    lines = [f"Sharding lab: {s.world_size} ranks, {s.backend}; MLP {m.depth}x{m.width}, "
             f"{m.parameters} parameters ({m.bytes / 1e6:.2f} MB of weights, {s.precision}; "
             f"on the wire: {', '.join(s.wire_dtypes)}), Adam, {s.steps} steps",
             "MB per rank, measured (predicted): params / grads / optimizer = total; wire MB per step"]
    for name in STRATEGIES:
        st = s.strategies[name]
        calls = ", ".join(f"{e.kind} ({e.stage}) {e.bytes / 1e6:.2f} MB" for e in st.step_collectives or [])
        lines.append(f"[{name}] max |w - w_ddp| = {st.max_abs_diff_vs_ddp:.1e}, "
                     f"mean {st.mean_abs_diff_vs_ddp:.1e}, ledger error {s.ledger_error[name]:.1%}; "
                     f"step: {calls}")
        for r in st.ranks:
            me, pr = r.measured, r.predicted
            parts = " / ".join(f"{_mb(me[k])} ({_mb(pr[k]).strip()})" for k in PARTS)
            lines.append(f"  rank {r.rank}: {parts} = {_mb(sum(me.values()))}; "
                         f"wire {_mb(r.wire_bytes_per_step)}"
                         + (f"; peak {_mb(r.peak)}" if r.peak is not None else ""))
    lines.append(f"every figure within {s.ledger_tolerance:.0%} of its prediction: "
                 f"{s.within_ledger_tolerance}; ddp > zero1 > zero2 > zero3 on every rank: {s.ordered}; "
                 + (f"weights equal within {s.tolerance:.0e}: {s.equal_weights} "
                    f"(training moved them by up to {s.max_abs_update_ddp:.1e})" if s.weight_check == "max" else
                    f"mean |w - w_ddp| within {s.tolerance:.0%} of the mean update "
                    f"({s.mean_abs_update_ddp:.1e}): {s.equal_weights}"))
    return "\n".join(lines)
