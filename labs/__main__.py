"""Command line for the labs: ``python -m labs ring|bench|ddp [options]``.

    python -m labs ring --world-size 4
    python -m labs bench --world-size 2 --min-bytes 1048576 --max-bytes 67108864
    python -m labs ddp --world-size 2 --json --out result.json
    python -m labs ring --world-size 4 --fail-rank 2 --fail-at-step 3 --fail-mode hang
    torchrun --standalone --nproc-per-node 4 -m labs ring   # rank 0 prints

``--events PATH`` appends one JSON object per progress event (flushed, so
another process can tail it); ``--out PATH`` receives the final JSON
document, which ``--json`` also prints: on success the LabResult
(``{"ok": true, "summary": ..., ...}``), on failure
``{"ok": false, "error": {"kind", "rank", "message", "ranks", "pids", ...}}``.
Exit status: 0 success, 1 the lab failed (crash, hang,
timeout), 2 invalid request, 130 cancelled (SIGINT/SIGTERM). SIGTERM or
SIGINT stops every rank; so does killing this process's group.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from dataclasses import fields

EXIT_FAILED, EXIT_INVALID, EXIT_CANCELLED = 1, 2, 130


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--world-size", type=int, default=2, help="number of ranks (default 2)")
    common.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto")
    common.add_argument("--timeout", type=float, default=300.0, help="seconds for the whole run")
    common.add_argument("--hang-timeout", type=float, default=10.0,
                        help="seconds without progress before the run counts as hung")
    common.add_argument("--json", action="store_true", help="print the result as JSON")
    common.add_argument("--events", metavar="PATH", help="append progress events as JSON lines")
    common.add_argument("--out", metavar="PATH", help="write the result or error as JSON")
    common.add_argument("--start", choices=["auto", "fork", "spawn"], default="auto",
                        help="how ranks are started (default: fork when safe)")
    common.add_argument("--fail-rank", type=int, help="inject a failure on this rank")
    common.add_argument("--fail-at-step", type=int, default=0, help="...when it reaches this step")
    common.add_argument("--fail-mode", choices=["crash", "hang"], default="crash")

    parser = argparse.ArgumentParser(prog="python -m labs", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="lab", required=True)

    ring = sub.add_parser("ring", parents=[common], help="hand-written ring all-reduce")
    ring.add_argument("--size", type=int, default=1 << 20, help="bytes per rank (default 1 MiB)")
    ring.add_argument("--dtype", choices=["float32", "float64", "bfloat16", "int64"],
                      default="float32")
    ring.add_argument("--op", choices=["sum", "avg"], default="sum")
    ring.add_argument("--algo", choices=["ring", "naive", "pipelined"], default="ring")
    ring.add_argument("--seed", type=int, default=0)

    bench = sub.add_parser("bench", parents=[common], help="collective benchmark sweep")
    bench.add_argument("--size", type=int, help="one message size in bytes (sets min and max)")
    bench.add_argument("--min-bytes", "--min-size", dest="min_bytes", type=int, default=1 << 10,
                       help="smallest message in bytes (default 1 KiB)")
    bench.add_argument("--max-bytes", "--max-size", dest="max_bytes", type=int, default=64 << 20,
                       help="largest message in bytes (default 64 MiB)")
    bench.add_argument("--factor", type=int, default=4, help="size multiplier between rows")
    bench.add_argument("--dtype", choices=["float32", "float64", "bfloat16", "int64"],
                       default="float32")
    bench.add_argument("--op", choices=["sum", "avg"], default="sum")
    bench.add_argument("--warmup", type=int, default=2)
    bench.add_argument("--iters", type=int, default=5)
    bench.add_argument("--impls", nargs="+", metavar="IMPL",
                       help="ring ring_pipelined naive all_reduce reduce_scatter all_gather "
                            "(default: all)")

    ddp = sub.add_parser("ddp", parents=[common], help="DistributedDataParallel, measured")
    ddp.add_argument("--steps", type=int, help="training steps per section")
    ddp.add_argument("--batch", type=int, help="samples per rank per step")
    ddp.add_argument("--hidden", type=int, help="MLP width")
    ddp.add_argument("--sections", nargs="+", metavar="SECTION",
                     help="equivalence sampler breakdown buckets no_sync fp16 scaling")
    ddp.add_argument("--world-sizes", dest="scaling_world_sizes", type=int, nargs="+",
                     metavar="N", help="rank counts for the scaling section (default 1 2 4)")
    ddp.add_argument("--seed", type=int)
    return parser


def _params(args: argparse.Namespace) -> dict:
    """The lab's Params fields that were given on the command line."""
    from labs.context import load_lab

    names = {f.name for f in fields(load_lab(args.lab).Params)}
    values = {k: v for k, v in vars(args).items() if k in names and v is not None}
    if args.lab == "bench" and args.size is not None:
        values["min_bytes"] = values["max_bytes"] = args.size
    return values


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # Heavy imports after parsing, so that --help is instant. A rank under
    # torchrun needs only the lab side; the supervisor is imported to run one.
    from labs import context

    # Under torchrun only rank 0 reports, so only rank 0 touches the files.
    reporter = not context.launched_externally() or os.environ.get("RANK") == "0"
    events = open(args.events, "a", buffering=1) if args.events and reporter else None  # noqa: SIM115

    def on_event(event: dict) -> None:
        if events is not None:
            events.write(json.dumps(event) + "\n")
            events.flush()
        if not args.json and sys.stderr.isatty() and event.get("kind") == "progress":
            overall = event.get("overall") or event.get("fraction") or 0.0
            sys.stderr.write(f"\r[{overall:6.1%}] rank {event['rank']}: {event['phase']:<16}")
            sys.stderr.flush()

    def finish(outcome: dict, text: str, code: int) -> int:
        if args.out:  # write then rename, so a reader never sees half a file
            with open(f"{args.out}.tmp", "w") as f:
                json.dump(outcome, f, indent=1)
            os.replace(f"{args.out}.tmp", args.out)
        if sys.stderr.isatty() and not args.json:
            sys.stderr.write("\r" + " " * 60 + "\r")
        if args.json:
            print(json.dumps(outcome, indent=1))
        if code == 0 and not args.json:
            print(text)
        elif code != 0:
            print(text, file=sys.stderr)
        if events is not None:
            events.close()
        return code

    try:
        fail = None
        if args.fail_rank is not None:
            fail = context.FailSpec(rank=args.fail_rank, step=args.fail_at_step,
                                    mode=args.fail_mode)
        params = _params(args)
        module = context.load_lab(args.lab)
        module.Params(**params)  # validate before starting anything
    except (ValueError, TypeError) as exc:
        err = context.LabError(kind="invalid", rank=None, message=str(exc), lab=args.lab,
                               world_size=args.world_size, backend=args.backend)
        return finish(_error_doc(err), f"error (invalid): {exc}", EXIT_INVALID)

    if context.launched_externally():
        # torchrun (or similar) started us as one rank: run in place, rank 0 reports.
        result = context.run_in_env(args.lab, params, backend=args.backend,
                                    timeout=args.timeout, fail=fail, on_event=on_event)
        if result is None:
            return 0
        return finish(result.to_dict(), _result_text(module, result), 0)

    from labs import launch  # the supervisor: only when we start the ranks ourselves

    cancel = threading.Event()

    def stop(signum, _frame):
        cancel.set()  # the launcher notices, kills every rank and returns "cancelled"

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    outcome = launch.run_lab(args.lab, params, world_size=args.world_size, backend=args.backend,
                             timeout=args.timeout, hang_timeout=args.hang_timeout, fail=fail,
                             on_event=on_event, cancel=cancel, start=args.start)
    if outcome.ok:
        return finish(outcome.to_dict(), _result_text(module, outcome), 0)
    code = {"invalid": EXIT_INVALID, "cancelled": EXIT_CANCELLED}.get(outcome.kind, EXIT_FAILED)
    who = f" on rank {outcome.rank}" if outcome.rank is not None else ""
    return finish(_error_doc(outcome), f"error ({outcome.kind}{who}): {outcome.message}", code)


def _error_doc(error) -> dict:
    return {"ok": False, "error": error.to_dict()}


def _result_text(module, result) -> str:
    text = module.format_text(result.summary)
    m = result.machine
    text += (f"\nlaunch: {result.launcher}, wall {result.wall_s:.2f} s, timed work "
             f"{result.work_s:.3f} s, overhead {result.overhead_s:.2f} s "
             f"({m['cpu_count']} CPUs, torch {m['torch']})")
    for warning in result.warnings:
        text += f"\nwarning: {warning}"
    return text


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
