"""The DDP lab's report as text: what ``python -m labs ddp`` prints without ``--json``.

No torch here: the text is built from the summary `labs.ddp.lab.summarize` returns
(``labs.ddp.report.DdpSummary``, or the dict a result stores of it).
"""

from __future__ import annotations

import math

from labs.ddp.report import DdpSummary


def format_text(summary) -> str:
    s = DdpSummary.model_validate(summary)
    sec, m = s.sections, s.model
    lines = [f"DDP lab: {s.world_size} ranks, {s.backend}; MLP {m.depth}x{m.hidden}, "
             f"{m.parameters} parameters ({m.gradient_bytes} B of fp32 gradients)"]
    if (e := sec.equivalence) is not None:
        lines += [f"\n[equivalence] {e.steps} steps, {s.world_size} x {e.batch_per_rank} "
                  f"vs one process with {e.global_batch}",
                  f"  max |w_ddp - w_single| = {e.max_abs_diff_vs_single_process:.2e} "
                  f"(tolerance {e.tolerance:.0e}): "
                  f"{'equivalent' if e.equivalent else 'NOT equivalent'}",
                  f"  max |w_rank - w_rank0| over all steps = "
                  f"{e.max_abs_diff_between_ranks:.2e}"
                  f" ({'identical' if e.ranks_identical else 'DIFFERENT'})",
                  f"  loss: {e.losses[0]:.4f} -> {e.losses[-1]:.4f} "
                  f"(single process: {e.single_process_losses[-1]:.4f})"]
    if (d := sec.sampler) is not None:
        lines += [f"\n[sampler] {d.samples} samples, {d.shard_size} per rank, disjoint: "
                  f"{d.shards_disjoint}, padded: {d.padded}"]
        for r, first in enumerate(d.first_indices_per_rank_epoch0 or []):
            lines.append(f"  rank {r} epoch 0 starts {first}")
        for label, orders in (("with set_epoch", d.rank0_with_set_epoch),
                              ("without set_epoch", d.rank0_without_set_epoch)):
            lines.append(f"  rank 0 {label}: " + " | ".join(str(e) for e in orders or []))
        u = d.positions_unchanged_epoch0_to_1 or {}
        lines.append(f"  same order in epoch 1 as in epoch 0: with set_epoch "
                     f"{u['with_set_epoch']:.0%} of positions, without {u['without_set_epoch']:.0%}")
    if (b := sec.breakdown) is not None:
        model = (f"MLP {b.depth}x{b.hidden}, {b.batch_per_rank} samples per rank, "
                 if b.hidden is not None else "")
        lines.append(f"\n[breakdown] {model}{b.unit} of {b.steps}: forward / backward / exposed comm / "
                     "optimizer = total (all-reduce calls)")
        for kind, r in (("naive", b.naive), ("bucketed", b.bucketed), ("ddp", b.ddp)):
            lines.append(f"  {kind:<8} {r['forward']:7.3f} / {r['backward']:7.3f} / "
                         f"{r['exposed_comm']:7.3f} / {r['optimizer']:7.3f} = {r['total']:7.3f} "
                         f"({r['allreduce_calls']})")
        bs, ov = b.bucketing_saving, b.overlap_hidden
        lines.append(f"  saved by bucketing ({bs.calls_before} -> {bs.calls_after} all-reduces): "
                     f"{bs.ms.median:.3f} ms (IQR {bs.ms.q1:.3f}..{bs.ms.q3:.3f})")
        lines.append(f"  hidden by overlap (DDP, {ov.buckets} buckets of <= {b.bucket_cap_mb} MB): "
                     f"{ov.ms.median:.3f} ms (IQR {ov.ms.q1:.3f}..{ov.ms.q3:.3f}), "
                     f"at most the backward, {ov.backward_ms.median:.3f} ms")
        lines.append(f"  naive and DDP weights differ by {b.max_abs_diff_naive_vs_ddp_weights:.1e}")
    if sec.buckets is not None:
        lines.append("\n[buckets] bucket_cap_mb -> all-reduce calls per step, step time")
        for r in sec.buckets.rows:
            lines.append(f"  {r.bucket_cap_mb:>7} MB -> {r.allreduce_calls_per_step:>3} "
                         f"calls, {r.step_ms:.3f} ms")
    if (n := sec.no_sync) is not None:
        lines.append(f"\n[no_sync] {n.micro_batches} micro-batches per optimizer step")
        for mode, r in (("no_sync", n.no_sync), ("sync_every_micro_batch", n.sync_every_micro_batch)):
            lines.append(f"  {mode:<24} {r.allreduce_calls_per_optimizer_step:>3} all-reduces, "
                         f"{r.bytes_per_optimizer_step:>9} B, {r.optimizer_step_ms:.3f} ms")
        lines.append(f"  max |grad difference| = {n.max_abs_grad_diff:.1e}")
    if (f := sec.fp16) is not None:
        lines.append("\n[fp16] bytes handed to all-reduce per step, final loss")
        for name, r in (("fp32", f.fp32), ("fp16", f.fp16)):
            lines.append(f"  {name}: {r.payload_bytes_per_step:>10.0f} B "
                         f"({r.ring_bytes_sent_per_rank_per_step:.0f} B sent per rank by a "
                         f"ring), loss {r.final_loss:.5f}, {r.step_ms:.3f} ms/step")
        lines.append(f"  bytes ratio {f.bytes_ratio:.2f}; weights differ by "
                     f"{f.max_abs_weight_diff:.1e}")
    if sec.scaling is not None:
        lines.append("\n[scaling] ranks -> samples/s, speedup, efficiency")
        for r in sec.scaling.rows:
            lines.append(f"  {r.world_size} -> {r.samples_per_s:9.0f}, "
                         f"{r.speedup:.2f}x, {r.efficiency:.0%}")
        lines.append(f"  ({sec.scaling.note})")
    if (tl := sec.timeline) is not None:
        depth = tl.depth if tl.depth is not None else m.depth
        lines.append(f"\n[timeline] MLP {depth}x{tl.hidden}, {tl.batch_per_rank} "
                     f"samples per rank, {tl.steps} steps: overlap with backward, exposed comm per step, "
                     "idle per rank")
        for name, v in tl.variants.items():
            idle = ", ".join(f"{r.idle_ms:.3f}" for r in v.ranks)
            lines.append(f"  {name:<10} {v.overlap:6.1%} of {v.comm_ms:8.3f} ms comm, "
                         f"exposed {v.exposed_comm_ms:8.3f} ms, idle {idle} ms "
                         f"({v.allreduce_calls} all-reduces)")
        if (fit := tl.fit) is not None and fit.sizes:  # a bandwidth that could not be fitted is stored as null
            bandwidth = math.inf if fit.bandwidth_GBps is None else fit.bandwidth_GBps
            lines.append(f"  dist.all_reduce alone, {len(fit.sizes)} sizes up to {fit.sizes[-1]} B: "
                         f"alpha = {fit.alpha_s * 1e6:.1f} us, B = {bandwidth:.3f} GB/s "
                         f"(rms relative error {fit.rms_rel_err:.0%})")
    return "\n".join(lines)
