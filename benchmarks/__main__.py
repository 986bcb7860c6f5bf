"""``python -m benchmarks [--quick | --smoke] [--only PART,...] [--json PATH]``: measure, print one table, write JSON."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.common import Config, sandbox, unavailable
from benchmarks.report import LEFT_OUT

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "latest.json"


def _machine() -> str:
    import torch

    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = " (" + " ".join(line.split(":", 1)[1].split()) + ")"
                break
    except OSError:
        pass
    return (f"{os.cpu_count()} CPUs{model}, {platform.system()}, Python "
            f"{platform.python_version()}, torch {torch.__version__}")


def _measure(name: str, fn: Callable[..., object], *args: object) -> object:
    """Run one measurement; a failure becomes its "not available" reason."""
    print(f"  {name} ...", end="", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    try:
        result = fn(*args)
    except Exception as exc:  # noqa: BLE001 - one broken part must not hide the others
        result = unavailable(exc)
    note = f" {result}" if isinstance(result, str) else ""
    print(f" {time.perf_counter() - t0:.1f} s{note}", file=sys.stderr, flush=True)
    return result


PARTS = ("collectives", "labs.launch", "labs.first_event", "labs.ddp", "labs.timeline", "labs.sharding",
         "labs.compression", "labs.straggler", "labs.topology", "labs.queue", "labs.warm", "labs.sandbox",
         "exercises", "gpu", "platform.quiz", "platform.certificate", "platform.verification",
         "platform.arrival", "platform.pages", "platform.load", "platform.classroom")


def run(cfg: Config, base: Path, only: tuple[str, ...] = ()) -> dict:
    """Every part, or those ``only`` names (a part, or a section: ``labs`` is all of ``labs.*``);
    a part left out says so in its place."""
    # Labs first: run_lab forks its ranks only while this process has a
    # single thread, and Streamlit's AppTest starts threads.
    from benchmarks import (
        collectives,
        exercise_costs,
        gpu,
        lab_costs,
        platform_costs,
        resilience_costs,
        sandbox_costs,
    )

    def part(key: str, name: str, fn: Callable[..., object], *args: object) -> object:
        if only and key not in only and key.split(".")[0] not in only:
            return f"{LEFT_OUT} (--only {','.join(only)})"
        return _measure(name, fn, *args)

    return {
        "collectives": part("collectives", "collectives", collectives.run, cfg),
        "labs": {
            "launch": part("labs.launch", "lab launch", lab_costs.launch_overhead, cfg),
            "first_event": part("labs.first_event", "first progress event", lab_costs.first_event, cfg),
            "ddp": part("labs.ddp", "ddp", lab_costs.ddp, cfg),
            "timeline": part("labs.timeline", "ddp timeline", lab_costs.timeline, cfg),
            "sharding": part("labs.sharding", "sharding", lab_costs.sharding, cfg),
            "compression": part("labs.compression", "compression", lab_costs.compression, cfg),
            "topology": part("labs.topology", "topology", lab_costs.topology, cfg),
            "straggler": part("labs.straggler", "straggler", resilience_costs.straggler, cfg),
            "queue": part("labs.queue", "lab queue", lab_costs.queue, cfg, base),
            "warm": part("labs.warm", "warm worker", lab_costs.warm_worker, cfg, base),
            "sandbox": part("labs.sandbox", "exercise sandbox", sandbox_costs.overhead, cfg),
        },
        "exercises": part("exercises", "exercises", exercise_costs.costs, cfg, base),
        "gpu": part("gpu", "gpu", gpu.run, cfg),
        "platform": {
            "quiz": part("platform.quiz", "quiz", platform_costs.quiz_grading, cfg, base),
            "certificate": part("platform.certificate", "certificates", platform_costs.certificate_issuance,
                                cfg, base),
            "verification": part("platform.verification", "verification", platform_costs.verification_lookups,
                                 cfg, base),
            "arrival": part("platform.arrival", "class arrival", platform_costs.class_arrival, cfg, base),
            "pages": part("platform.pages", "pages", platform_costs.page_renders, cfg, base),
            "load": part("platform.load", "load", platform_costs.concurrent_load, cfg),
            "classroom": part("platform.classroom", "classroom", platform_costs.classroom, cfg),
        },
    }


def _parts(value: str) -> tuple[str, ...]:
    names = tuple(v.strip() for v in value.split(",") if v.strip())
    known = set(PARTS) | {p.split(".")[0] for p in PARTS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown part(s) {', '.join(unknown)}; known: {', '.join(PARTS)}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Measure the platform and its labs beside their yardsticks; print one "
                    "table and write it as JSON.")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help="fewer sizes, iterations and pages: under a minute on 2 cores")
    size.add_argument("--smoke", action="store_true",
                      help="every part once at its smallest size, without the load and classroom "
                           "parts: that it all runs (the tests), not a measurement")
    parser.add_argument("--json", metavar="PATH", type=Path, default=DEFAULT_JSON,
                        help="where the JSON goes (default benchmarks/results/latest.json)")
    parser.add_argument("--only", metavar="PART[,PART]", type=_parts, default=(),
                        help="only these parts (e.g. labs.warm,platform.verification; a section name "
                             "such as labs is all its parts); the others say they were left out")
    args = parser.parse_args(argv)
    cfg = Config.smoke_mode() if args.smoke else Config.quick_mode() if args.quick else Config()
    base = sandbox()  # before anything reads the app's settings
    started = datetime.now(UTC)
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    print(f"benchmarks ({cfg.mode} mode), scratch data in {base}",
          file=sys.stderr)
    try:
        sections = run(cfg, base, args.only)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    result = {
        "meta": {
            "mode": cfg.mode,
            "date": started.strftime("%Y-%m-%d %H:%M UTC"),
            "command": "python -m benchmarks" + ("" if cfg.mode == "full" else f" --{cfg.mode}")
                       + (f" --only {','.join(args.only)}" if args.only else ""),
            "machine": _machine(),
            "duration_s": time.perf_counter() - t0,
            # Other work on the machine moves every figure: say how busy it was.
            "load_average_1min": [load_before, os.getloadavg()[0]],
            "shrunk": cfg.shrunk(),
        },
        **sections,
    }
    from benchmarks.report import markdown

    print(markdown(result))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    print(f"\nJSON: {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
