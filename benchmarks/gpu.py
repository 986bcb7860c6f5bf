"""The GPU section: runs when ``torch.cuda.is_available()``, says why not otherwise.

- 2+ GPUs: the same ``labs.bench`` sweep as the CPU section on NCCL, one
  rank per GPU (up to 8): our ring, the naive ring and ``dist.all_reduce``,
  busbw and the ring / built-in ratio;
- 1 GPU: ``labs.ddp``'s breakdown on one rank (NCCL, world size 1): a
  single-GPU DDP step beside the same step with a hand-written gradient
  sync, and the CPU figure of the labs section for scale.
"""

from __future__ import annotations

from benchmarks.common import Config

IMPLS = ("ring", "naive", "all_reduce")


def run(cfg: Config) -> dict | str:
    import torch

    if not torch.cuda.is_available():
        return "skipped: no CUDA"
    from labs.ddp.report import DdpSummary
    from labs.launch import run_lab
    from labs.reports import BenchSummary
    from labs.request import Request

    count = torch.cuda.device_count()
    names = [torch.cuda.get_device_name(i) for i in range(count)]
    if count >= 2:
        world = min(count, 8)
        params = {"min_bytes": cfg.min_bytes, "max_bytes": cfg.max_bytes, "factor": cfg.factor,
                  "warmup": cfg.warmup, "iters": cfg.iters, "impls": list(IMPLS)}
        request = Request.checked("bench", {**params, "world_size": world, "backend": "nccl", "timeout": 1800,
                                            "hang_timeout": 300})
        outcome = run_lab(request.run, request.params)
        if not outcome.ok:
            raise RuntimeError(f"labs.bench on NCCL: {outcome.kind}: {outcome.message}")
        summary = BenchSummary.model_validate(outcome.summary)
        by = {(r.impl, r.size): r.busbw for r in summary.rows}
        rows = [{"size_bytes": size, **{f"{impl}_busbw_GBps": by[(impl, size)] for impl in IMPLS},
                 "ring_vs_all_reduce": by[("ring", size)] / by[("all_reduce", size)]}
                for size in summary.sizes if size >= cfg.report_from]
        return {"mode": "nccl", "gpus": names, "world_size": world, "rows": rows,
                "wrong_elements": summary.wrong}
    params = {"sections": ["breakdown"]}
    if cfg.ddp_steps is not None:
        params["steps"] = cfg.ddp_steps
    request = Request.checked("ddp", {**params, "world_size": 1, "backend": "nccl", "timeout": 600,
                                      "hang_timeout": 120})
    outcome = run_lab(request.run, request.params)
    if not outcome.ok:
        raise RuntimeError(f"labs.ddp on one GPU: {outcome.kind}: {outcome.message}")
    b = DdpSummary.model_validate(outcome.summary).sections.breakdown
    return {"mode": "single-gpu ddp", "gpus": names, "world_size": 1,
            "ddp_step_ms": b.ddp["total"], "naive_step_ms": b.naive["total"],
            "ddp_vs_naive_step_ratio": b.ddp["total"] / b.naive["total"]}
