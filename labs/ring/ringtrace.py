"""The ring lab's trace, read back: which rank sent which chunk to whom at each
step, and how long each step took. Torch-free, so the pages that animate a
ring (the Labs page, the ring exercise's report) load it without PyTorch; the
traces themselves come from ``labs.ring`` and the exercise harness's router.
"""

from __future__ import annotations

from collections.abc import Sequence

# (src, dst, chunk, phase) as in app.calculators.ring_schedule and lab traces;
# chunk is None for the naive ring, which sends the whole buffer.
Send = tuple[int, int, int | None, str]


def trace_steps(traces: Sequence[Sequence[dict]]) -> tuple[list[list[Send]], list[float]]:
    """Sends per step and each step's measured duration, from the ranks' own traces.

    ``traces[r]`` is rank r's list of step records (step, phase, send_chunk,
    send_to, t_start, t_end) on the shared clock. A step lasts from the first
    rank starting it to the last rank finishing it.
    """
    by_step: dict[int, list[dict]] = {}
    for rank, records in enumerate(traces):
        for rec in records:
            by_step.setdefault(int(rec["step"]), []).append({**rec, "rank": rank})
    steps, durations = [], []
    for k in sorted(by_step):
        recs = by_step[k]
        # The naive ring sends whole buffers: its records carry send_chunk None.
        steps.append([(r["rank"], int(r["send_to"]), None if r["send_chunk"] is None else int(r["send_chunk"]),
                       r["phase"]) for r in recs])
        durations.append(max(r["t_end"] for r in recs) - min(r["t_start"] for r in recs))
    return steps, durations
