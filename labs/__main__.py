"""Command line for the labs: ``python -m labs LAB [options]``, LAB one of ``labs.context.LABS``.

    python -m labs ring --world-size 4
    python -m labs bench --world-size 2 --min-bytes 1048576 --max-bytes 67108864
    python -m labs ddp --world-size 2 --json --out result.json
    python -m labs sharding --world-size 4 --json
    python -m labs compression --world-size 2 --strategies topk topk_ef --seeds 5
    python -m labs straggler --world-size 2 --slow-rank 1 --factor 3
    python -m labs failure --world-size 2 --checkpoint-every 10 --kill-step 25   # under torchrun, restarted
    python -m labs topology --rate-mbit 100          # needs CAP_SYS_ADMIN and CAP_NET_ADMIN (root)
    python -m labs ring --world-size 4 --fail-rank 2 --fail-at-step 3 --fail-mode hang
    torchrun --standalone --nproc-per-node 4 -m labs ring   # rank 0 prints

``ddp --trace DIR`` writes the timeline section's spans as one Chrome/Perfetto
trace per rank (``DIR/rank<r>.json``). ``--events PATH`` appends one JSON object per progress event (flushed, so
another process can tail it); ``--out PATH`` receives the final JSON
document, which ``--json`` also prints: on success the LabResult
(``{"ok": true, "summary": ..., ...}``), on failure
``{"ok": false, "error": {"kind", "rank", "message", "ranks", "pids", ...}}``.
Exit status: 0 success, 1 the lab failed (crash, hang,
timeout), 2 invalid request, 130 cancelled (SIGINT/SIGTERM). SIGTERM or
SIGINT stops every rank; so does killing this process's group.

The options are generated from the fields of ``labs.params.Run`` and each
lab's ``Params`` (``labs.request.parser``): ``--help`` lists them all with
their ranges and defaults, and the largest world size and the default
timeouts follow ``LAB_MAX_WORLD_SIZE``, ``LAB_TIMEOUT_S`` and
``LAB_HANG_TIMEOUT_S`` (``labs.settings.Limits``, the class the web app's
settings nest). The arguments are one ``labs.request.Request``
(``Request.from_argv``), checked once here; the launcher takes its models.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading

EXIT_FAILED, EXIT_INVALID, EXIT_CANCELLED = 1, 2, 130


def _own(lab: str, parser: argparse.ArgumentParser) -> None:
    """The command line's own options, beside the request's (output files, ``ddp --trace``)."""
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--events", metavar="PATH", help="append progress events as JSON lines")
    parser.add_argument("--out", metavar="PATH", help="write the result or error as JSON")
    if lab == "ddp":
        parser.add_argument("--trace", metavar="DIR", help="write each rank's timeline (section "
                            "timeline) as a Chrome/Perfetto trace, DIR/rank<r>.json")


def _parser(limits) -> argparse.ArgumentParser:
    """Options generated from `labs.params.Run` and each lab's Params (``labs.request.parser``);
    only the command line's own (`_own`) are written here."""
    from labs.request import parser

    return parser(limits, own=_own)


def main(argv: list[str] | None = None) -> int:
    from labs.request import Request
    from labs.settings import Limits

    argv = sys.argv[1:] if argv is None else list(argv)
    limits = Limits.from_env()
    args = _parser(limits).parse_args(argv)  # --help, usage errors and our own options
    # A rank under torchrun needs only the lab side; the supervisor is
    # imported only to start the ranks ourselves.
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

    try:  # the request, checked once, before starting anything
        request = Request.from_argv(argv, limits)
    except (ValueError, TypeError) as exc:
        err = context.LabError(kind="invalid", rank=None, message=str(exc), lab=args.lab,
                               world_size=args.world_size, backend=args.backend)
        return finish(_error_doc(err), f"error (invalid): {exc}", EXIT_INVALID)
    module = context.load_lab(request.lab)

    if context.launched_externally():
        # torchrun (or similar) started us as one rank: run in place, rank 0 reports.
        result = context.run_in_env(request.run, request.params, on_event=on_event)
        if result is None:
            return 0
        _write_traces(args, result.summary)
        return finish(result.to_dict(), _result_text(module, result), 0)

    from labs import launch  # the supervisor: only when we start the ranks ourselves

    cancel = threading.Event()

    def stop(_signum, _frame):
        cancel.set()  # the launcher notices, kills every rank and returns "cancelled"

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    outcome = launch.run_lab(request.run, request.params, on_event=on_event, cancel=cancel)
    if outcome.ok:
        _write_traces(args, outcome.summary)
        return finish(outcome.to_dict(), _result_text(module, outcome), 0)
    code = {"invalid": EXIT_INVALID, "cancelled": EXIT_CANCELLED}.get(outcome.kind, EXIT_FAILED)
    who = f" on rank {outcome.rank}" if outcome.rank is not None else ""
    return finish(_error_doc(outcome), f"error ({outcome.kind}{who}): {outcome.message}", code)


def _write_traces(args: argparse.Namespace, summary: dict) -> None:
    """``--trace DIR``: the timeline section's spans as one Chrome trace per rank."""
    directory = getattr(args, "trace", None)
    if not directory:
        return
    timeline = (summary.get("sections") or {}).get("timeline")
    if timeline is None:
        print("--trace: no timeline section in this run (add --sections timeline)", file=sys.stderr)
        return
    from labs.timeline import write_traces

    write_traces(directory, timeline)


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
