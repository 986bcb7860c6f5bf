"""The DDP lab's report as text: what ``python -m labs ddp`` prints without ``--json``.

No torch here: the text is built from the summary `labs.ddp.lab.summarize` returns.
"""

from __future__ import annotations


def format_text(summary: dict) -> str:
    s, sec = summary, summary["sections"]
    m = s["model"]
    lines = [f"DDP lab: {s['world_size']} ranks, {s['backend']}; MLP {m['depth']}x{m['hidden']}, "
             f"{m['parameters']} parameters ({m['gradient_bytes']} B of fp32 gradients)"]
    if "equivalence" in sec:
        e = sec["equivalence"]
        lines += [f"\n[equivalence] {e['steps']} steps, {s['world_size']} x {e['batch_per_rank']} "
                  f"vs one process with {e['global_batch']}",
                  f"  max |w_ddp - w_single| = {e['max_abs_diff_vs_single_process']:.2e} "
                  f"(tolerance {e['tolerance']:.0e}): "
                  f"{'equivalent' if e['equivalent'] else 'NOT equivalent'}",
                  f"  max |w_rank - w_rank0| over all steps = "
                  f"{e['max_abs_diff_between_ranks']:.2e}"
                  f" ({'identical' if e['ranks_identical'] else 'DIFFERENT'})",
                  f"  loss: {e['losses'][0]:.4f} -> {e['losses'][-1]:.4f} "
                  f"(single process: {e['single_process_losses'][-1]:.4f})"]
    if "sampler" in sec:
        d = sec["sampler"]
        lines += [f"\n[sampler] {d['samples']} samples, {d['shard_size']} per rank, disjoint: "
                  f"{d['shards_disjoint']}, padded: {d['padded']}"]
        for r, first in enumerate(d["first_indices_per_rank_epoch0"]):
            lines.append(f"  rank {r} epoch 0 starts {first}")
        for label, key in (("with set_epoch", "rank0_with_set_epoch"),
                           ("without set_epoch", "rank0_without_set_epoch")):
            lines.append(f"  rank 0 {label}: " + " | ".join(str(e) for e in d[key]))
        u = d["positions_unchanged_epoch0_to_1"]
        lines.append(f"  same order in epoch 1 as in epoch 0: with set_epoch "
                     f"{u['with_set_epoch']:.0%} of positions, without {u['without_set_epoch']:.0%}")
    if "breakdown" in sec:
        b = sec["breakdown"]
        model = (f"MLP {b['depth']}x{b['hidden']}, {b['batch_per_rank']} samples per rank, "
                 if "hidden" in b else "")
        lines.append(f"\n[breakdown] {model}{b['unit']} of {b['steps']}: forward / backward / exposed comm / "
                     "optimizer = total (all-reduce calls)")
        for kind in ("naive", "bucketed", "ddp"):
            r = b[kind]
            lines.append(f"  {kind:<8} {r['forward']:7.3f} / {r['backward']:7.3f} / "
                         f"{r['exposed_comm']:7.3f} / {r['optimizer']:7.3f} = {r['total']:7.3f} "
                         f"({r['allreduce_calls']})")
        bs, ov = b["bucketing_saving"], b["overlap_hidden"]
        lines.append(f"  saved by bucketing ({bs['calls_before']} -> {bs['calls_after']} all-reduces): "
                     f"{bs['ms']['median']:.3f} ms (IQR {bs['ms']['q1']:.3f}..{bs['ms']['q3']:.3f})")
        lines.append(f"  hidden by overlap (DDP, {ov['buckets']} buckets of <= {b['bucket_cap_mb']} MB): "
                     f"{ov['ms']['median']:.3f} ms (IQR {ov['ms']['q1']:.3f}..{ov['ms']['q3']:.3f}), "
                     f"at most the backward, {ov['backward_ms']['median']:.3f} ms")
        lines.append(f"  naive and DDP weights differ by {b['max_abs_diff_naive_vs_ddp_weights']:.1e}")
    if "buckets" in sec:
        lines.append("\n[buckets] bucket_cap_mb -> all-reduce calls per step, step time")
        for r in sec["buckets"]["rows"]:
            lines.append(f"  {r['bucket_cap_mb']:>7} MB -> {r['allreduce_calls_per_step']:>3} "
                         f"calls, {r['step_ms']:.3f} ms")
    if "no_sync" in sec:
        n = sec["no_sync"]
        lines.append(f"\n[no_sync] {n['micro_batches']} micro-batches per optimizer step")
        for mode in ("no_sync", "sync_every_micro_batch"):
            r = n[mode]
            lines.append(f"  {mode:<24} {r['allreduce_calls_per_optimizer_step']:>3} all-reduces, "
                         f"{r['bytes_per_optimizer_step']:>9} B, {r['optimizer_step_ms']:.3f} ms")
        lines.append(f"  max |grad difference| = {n['max_abs_grad_diff']:.1e}")
    if "fp16" in sec:
        f = sec["fp16"]
        lines.append("\n[fp16] bytes handed to all-reduce per step, final loss")
        for name in ("fp32", "fp16"):
            r = f[name]
            lines.append(f"  {name}: {r['payload_bytes_per_step']:>10.0f} B "
                         f"({r['ring_bytes_sent_per_rank_per_step']:.0f} B sent per rank by a "
                         f"ring), loss {r['final_loss']:.5f}, {r['step_ms']:.3f} ms/step")
        lines.append(f"  bytes ratio {f['bytes_ratio']:.2f}; weights differ by "
                     f"{f['max_abs_weight_diff']:.1e}")
    if "scaling" in sec:
        lines.append("\n[scaling] ranks -> samples/s, speedup, efficiency")
        for r in sec["scaling"]["rows"]:
            lines.append(f"  {r['world_size']} -> {r['samples_per_s']:9.0f}, "
                         f"{r['speedup']:.2f}x, {r['efficiency']:.0%}")
        lines.append(f"  ({sec['scaling']['note']})")
    if "timeline" in sec:
        tl = sec["timeline"]
        lines.append(f"\n[timeline] MLP {tl.get('depth', m['depth'])}x{tl['hidden']}, {tl['batch_per_rank']} "
                     f"samples per rank, {tl['steps']} steps: overlap with backward, exposed comm per step, "
                     "idle per rank")
        for name, v in tl["variants"].items():
            idle = ", ".join(f"{r['idle_ms']:.3f}" for r in v["ranks"])
            lines.append(f"  {name:<10} {v['overlap']:6.1%} of {v['comm_ms']:8.3f} ms comm, "
                         f"exposed {v['exposed_comm_ms']:8.3f} ms, idle {idle} ms "
                         f"({v['allreduce_calls']} all-reduces)")
        fit = tl.get("fit")
        if fit:
            lines.append(f"  dist.all_reduce alone, {len(fit['sizes'])} sizes up to {fit['sizes'][-1]} B: "
                         f"alpha = {fit['alpha_s'] * 1e6:.1f} us, B = {fit['bandwidth_GBps']:.3f} GB/s "
                         f"(rms relative error {fit['rms_rel_err']:.0%})")
    return "\n".join(lines)
