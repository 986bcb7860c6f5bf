"""What the exercise sandbox costs: the same small torch program through
``labs.sandbox.run.run_python`` in mode bwrap and in mode none.

The program imports torch, forks 2 gloo ranks and all-reduces 1 KiB: the
smallest thing an exercise run does. Runs alternate between the two modes so
both see the same machine; p50 and p95 are over ``Config.sandbox_repeats``
runs each. The difference is what bwrap, setpriv, the cgroup and the
read-only binds add to every graded submission.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from benchmarks.common import Config, p95

PAYLOAD = """
import os, socket, sys
import torch, torch.distributed as dist
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
children = []
for rank in range(2):
    pid = os.fork()
    if pid == 0:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=2)
        t = torch.ones(256)  # 1 KiB of float32
        dist.all_reduce(t)
        ok = t[0].item() == 2.0
        dist.destroy_process_group()
        os._exit(0 if ok else 1)
    children.append(pid)
sys.exit(max(os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in children))
"""


def overhead(cfg: Config) -> dict:
    from labs.sandbox.run import Limits, check_available, run_python

    check_available("bwrap")  # "not available: SandboxUnavailable: why" in the table
    times: dict[str, list[float]] = {"bwrap": [], "none": []}
    with tempfile.TemporaryDirectory(prefix="dpa-bench-sandbox-") as folder:
        (Path(folder) / "allreduce.py").write_text(PAYLOAD)
        for _ in range(cfg.sandbox_repeats):
            for mode in times:
                out = run_python("allreduce", [], files={}, mode=mode, harness=Path(folder),
                                 limits=Limits(wall_s=120))
                if out.returncode != 0:
                    raise RuntimeError(f"mode {mode}: {out.stopped or out.returncode}: "
                                       f"{out.stderr.decode(errors='replace')[-200:]}")
                times[mode].append(out.duration_s)
    result = {"program": "import torch; 2 gloo ranks all-reduce 1 KiB",
              "runs": cfg.sandbox_repeats}
    for mode, values in times.items():
        result[f"{mode}_p50_s"] = statistics.median(values)
        result[f"{mode}_p95_s"] = p95(values)
    result["overhead_p50_s"] = result["bwrap_p50_s"] - result["none_p50_s"]
    return result
