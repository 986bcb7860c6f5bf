"""All-reduce bus bandwidth on gloo, beside the wire it runs on.

For each world size, ``labs.bench`` sweeps time our ring, the naive ring and
``dist.all_reduce`` size by size, interleaved, so the three see the same
machine; each figure is the median over ``Config.sweeps`` sweeps. The yardstick under all of them is raw TCP over loopback between
two processes (`tcp_loopback_GBps`): gloo on one machine moves every byte
through such a socket, so busbw / TCP is the share of the wire a collective
gets. busbw is nccl-tests' ``algbw * 2(n-1)/n``, the rate each rank's link
must sustain; the alpha-beta fit is ``labs.model.fit_alpha_beta`` over every
size of the sweep (the small ones pin down the latency alpha).
"""

from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import time

from benchmarks.common import Config, unavailable

IMPLS = ("ring", "ring_pipelined", "naive", "all_reduce")

# The receiving process: connect, read everything into one buffer, answer one byte.
_RECEIVER = """
import socket, sys
port, total, chunk = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
s = socket.create_connection(("127.0.0.1", port))
buf = memoryview(bytearray(chunk))
got = 0
while got < total:
    n = s.recv_into(buf, min(chunk, total - got))
    if not n:
        raise SystemExit("sender went away")
    got += n
s.sendall(b"k")
s.close()
"""


def tcp_loopback_GBps(total_bytes: int, chunk: int = 4 << 20) -> float:
    """One-way throughput of one TCP stream between two processes, in GB/s.

    The sender ``sendall``s a 4 MiB buffer until ``total_bytes`` have gone;
    the clock stops when the receiver has read the last byte and said so.
    A first eighth is sent untimed to open the TCP window.
    """
    warm = total_bytes // 8
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        receiver = subprocess.Popen([sys.executable, "-c", _RECEIVER, str(port),
                                     str(warm + total_bytes), str(chunk)])
        try:
            conn, _ = listener.accept()
            with conn:
                data = memoryview(bytearray(chunk))
                sent = 0
                while sent < warm:
                    conn.sendall(data[: min(chunk, warm - sent)])
                    sent += min(chunk, warm - sent)
                t0 = time.perf_counter()
                sent = 0
                while sent < total_bytes:
                    conn.sendall(data[: min(chunk, total_bytes - sent)])
                    sent += min(chunk, total_bytes - sent)
                if conn.recv(1) != b"k":
                    raise RuntimeError("the receiver did not confirm")
                elapsed = time.perf_counter() - t0
        finally:
            receiver.wait(timeout=60)
    return total_bytes / elapsed / 1e9


def sweep(cfg: Config, world_size: int) -> dict:
    """``cfg.sweeps`` runs of ``labs.bench`` on ``world_size`` gloo ranks, as figures.

    Each (implementation, size) keeps the median of its runs' mean times: a
    busy neighbour that slows one run down moves no figure far. TCP is
    measured ``cfg.tcp_repeats`` times before each run, and its median is
    the yardstick of this world size's figures.
    """
    from labs.launch import run_lab
    from labs.model import busbw, fit_alpha_beta
    from labs.reports import BenchSummary
    from labs.request import Request

    params = {"min_bytes": cfg.min_bytes, "max_bytes": cfg.max_bytes, "factor": cfg.factor,
              "warmup": cfg.warmup, "iters": cfg.iters, "impls": list(IMPLS)}
    times: dict[tuple[str, int], list[float]] = {}
    wrong, wall, tcp_samples = 0, 0.0, []
    for _ in range(cfg.sweeps):
        tcp_samples += [tcp_loopback_GBps(cfg.tcp_bytes) for _ in range(cfg.tcp_repeats)]
        # Generous hang_timeout: 4 ranks on 2 cores can spend many seconds
        # inside one 64 MiB row without a progress event.
        request = Request.checked("bench", {**params, "world_size": world_size, "backend": "gloo",
                                            "timeout": 1800, "hang_timeout": 300})
        outcome = run_lab(request.run, request.params)
        if not outcome.ok:
            raise RuntimeError(f"labs.bench on {world_size} ranks: {outcome.kind}: "
                               f"{outcome.message}")
        summary = BenchSummary.model_validate(outcome.summary)
        for r in summary.rows:
            times.setdefault((r.impl, r.size), []).append(r.time_us / 1e6)
        wrong += summary.wrong
        wall += outcome.wall_s
    tcp = statistics.median(tcp_samples)
    sizes = sorted({size for _, size in times})
    t = {key: statistics.median(v) for key, v in times.items()}
    rows = []
    for size in sizes:
        if size < cfg.report_from:
            continue
        bw = {impl: busbw(size, t[(impl, size)], world_size) / 1e9 for impl in IMPLS}
        rows.append({"size_bytes": size,
                     **{f"{impl}_busbw_GBps": bw[impl] for impl in IMPLS},
                     "ring_vs_all_reduce": bw["ring"] / bw["all_reduce"],
                     "pipelined_vs_all_reduce": bw["ring_pipelined"] / bw["all_reduce"],
                     **{f"{impl}_of_tcp": bw[impl] / tcp for impl in IMPLS}})
    fits = {}
    for impl in IMPLS:
        fit = fit_alpha_beta(sizes, [t[(impl, size)] for size in sizes], world_size)
        fits[impl] = "not available: fewer than two sizes" if fit is None else {
            "alpha_us": fit["alpha_s"] * 1e6, "bandwidth_GBps": fit["bandwidth_GBps"],
            "bandwidth_of_tcp": fit["bandwidth_GBps"] / tcp, "rms_rel_err": fit["rms_rel_err"]}
    return {"sweeps": cfg.sweeps, "tcp_loopback_GBps": tcp,
            "tcp_loopback_range_GBps": [min(tcp_samples), max(tcp_samples)],
            "rows": rows, "fit": fits, "wrong_elements": wrong,
            "min_ring_vs_all_reduce": min(r["ring_vs_all_reduce"] for r in rows),
            "min_pipelined_vs_all_reduce": min(r["pipelined_vs_all_reduce"] for r in rows),
            "fit_sizes_bytes": sizes, "wall_s": wall}


def run(cfg: Config) -> dict:
    result: dict = {"backend": "gloo", "dtype": "float32", "warmup": cfg.warmup,
                    "iters": cfg.iters, "world_sizes": {}}
    for n in cfg.world_sizes:
        try:
            result["world_sizes"][str(n)] = sweep(cfg, n)
        except Exception as exc:  # noqa: BLE001 - report it, keep measuring the rest
            result["world_sizes"][str(n)] = unavailable(exc)
    return result
