"""The hand-written rings agree with dist.all_reduce, and their traces add up.

The property test keeps one process group per world size alive for all its
examples (a `RingPool`): hypothesis draws a case, every rank runs it, the
test checks the answers. Spawning processes per example would be far slower.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import inspect
import json
import multiprocessing
import socket
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labs.launch import run_lab
from labs.params import Run
from labs.ring import allreduce
from labs.ring import lab as ring
from tests.procs import gone

CASE_TIMEOUT_S = 60


def _run_case(case: dict, rank: int, world: int) -> dict:
    dtype = allreduce.TORCH_DTYPES[case["dtype"]]
    gen = torch.Generator().manual_seed(case["seed"] * 100 + rank)
    numel = case["numel"]
    if dtype.is_floating_point:
        x = torch.randn(numel, generator=gen, dtype=torch.float64).to(dtype)
    else:
        x = torch.randint(-10**6, 10**6, (numel,), generator=gen)
    if case["layout"] == "transposed":  # a non-contiguous input
        x = x.repeat(2).view(2, numel).t()
    red = dist.ReduceOp.AVG if case["op"] == "avg" else dist.ReduceOp.SUM
    expected = x.clone()
    dist.all_reduce(expected, op=red)
    expected_sum = x.clone()
    dist.all_reduce(expected_sum)
    abs_sum = x.abs().double()
    dist.all_reduce(abs_sum)

    class Snapshot(list):
        """Copies the tensor right after the last reduce-scatter step."""

        snapshot = None

        def append(self, record):
            super().append(record)
            if record["phase"] == "reduce-scatter" and record["step"] == world - 2:
                self.snapshot = ours.clone()

    fn = allreduce.ALGOS[case["algo"]]
    extra = {}
    if case["algo"] == "pipelined":
        extra = {k: case[k] for k in ("segment_bytes", "in_flight") if case.get(k)}
    ours = x.clone()
    trace = Snapshot()
    returned = fn(ours, op=case["op"], trace=trace, **extra)
    scale = abs_sum / world if case["op"] == "avg" else abs_sum
    bound = allreduce.tolerance(scale, dtype, world)
    err = (ours.double() - expected.double()).abs()
    out = {"ok": bool((err <= bound).all()), "max_err": float(err.max()) if numel else 0.0,
           "same_object": returned is ours, "shape_kept": ours.shape == x.shape,
           "trace": [dict(r) for r in trace], "checksum": ours.double().sum().item()}
    if case["algo"] != "naive" and case["layout"] == "flat":
        # Rank r should now own chunk r+1, fully reduced: before any averaging
        # in the plain ring; the pipelined one averages each segment as soon as
        # it is final, so that it can forward it at once.
        owned = (rank + 1) % world
        snap = trace.snapshot if trace.snapshot is not None else x  # one rank: nothing to do
        got = torch.tensor_split(snap, world)[owned]
        averaged = case["algo"] == "pipelined" and case["op"] == "avg" and world > 1
        want = torch.tensor_split(expected if averaged else expected_sum, world)[owned]
        tol = torch.tensor_split(allreduce.tolerance(scale if averaged else abs_sum, dtype, world),
                                 world)[owned]
        out["owned_chunk_reduced"] = bool(((got.double() - want.double()).abs() <= tol).all())
    return out


def _pool_worker(rank: int, world: int, port: int, listen_fd: int | None, conn) -> None:
    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, world, rank == 0, timedelta(seconds=60),
                          master_listen_fd=listen_fd)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                            timeout=timedelta(seconds=CASE_TIMEOUT_S))
    while True:
        case = conn.recv()
        if case is None:
            break
        try:
            conn.send(_run_case(case, rank, world))
        except Exception as exc:  # noqa: BLE001 (report it; the test fails and closes the pool)
            conn.send({"error": repr(exc)})
            break
    dist.barrier()
    dist.destroy_process_group()


class RingPool:
    """``world`` ranks that stay up for a test module and run cases on request."""

    def __init__(self, world: int):
        self.world = world
        mp = multiprocessing.get_context("fork")  # children inherit the imported torch
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))  # the OS picks a free port; we keep it bound
        listener.listen(64)
        port = listener.getsockname()[1]
        self.conns, self.procs = [], []
        for rank in range(world):
            parent, child = mp.Pipe()
            fd = listener.fileno() if rank == 0 else None
            proc = mp.Process(target=_pool_worker, args=(rank, world, port, fd, child), daemon=True)
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)
        listener.close()

    def run(self, case: dict) -> list[dict]:
        for conn in self.conns:
            conn.send(case)
        results = []
        for rank, conn in enumerate(self.conns):
            if not conn.poll(CASE_TIMEOUT_S):
                raise TimeoutError(f"rank {rank} did not answer case {case}")
            results.append(conn.recv())
        return results

    def close(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send(None)
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join()


@pytest.fixture(scope="module", params=[1, 2, 3, 4], ids=lambda n: f"world{n}")
def pool(request):
    p = RingPool(request.param)
    yield p
    p.close()


cases = st.fixed_dictionaries({
    # lengths below the world size give empty chunks; larger ones uneven chunks
    "numel": st.one_of(st.integers(0, 6), st.integers(7, 5000)),
    "dtype": st.sampled_from(sorted(ring.DTYPES)),
    "op": st.sampled_from(["sum", "avg"]),
    "algo": st.sampled_from(["ring", "naive", "pipelined"]),
    "layout": st.sampled_from(["flat", "flat", "transposed"]),
    "seed": st.integers(0, 2**16),
    # pipelined only: segments of one element, of a few (the last ones shorter)
    # or the whole chunk (3 bytes is less than one element of any dtype); one
    # receive in flight, so that every scratch buffer is reused at once, or more
    "segment_bytes": st.sampled_from([None, 3, 24, 1000]),
    "in_flight": st.sampled_from([None, 1, 3]),
}).filter(lambda c: not (c["op"] == "avg" and c["dtype"] == "int64"))


def check_trace(traces: list[list[dict]], case: dict, world: int) -> None:
    """Every send has the matching receive, with the chunks and bytes the algorithm says."""
    elem = ring.DTYPES[case["dtype"]].itemsize
    numel = case["numel"] * (2 if case["layout"] == "transposed" else 1)
    chunk_bytes = [c.numel() * elem for c in torch.tensor_split(torch.empty(numel), world)]
    chunked = case["algo"] != "naive"  # ring and pipelined: the same steps, the same trace
    expected_steps = 2 * (world - 1) if chunked else world - 1
    for rank, trace in enumerate(traces):
        assert [r["step"] for r in trace] == list(range(expected_steps))
        for rec in trace:
            assert rec["send_to"] == (rank + 1) % world
            assert rec["recv_from"] == (rank - 1) % world
            assert rec["t_end"] >= rec["t_start"]
            if chunked:
                assert rec["bytes"] == chunk_bytes[rec["send_chunk"]]
                assert rec["recv_bytes"] == chunk_bytes[rec["recv_chunk"]]
            else:
                assert rec["send_chunk"] is None and rec["bytes"] == numel * elem
        if chunked:
            phases = [r["phase"] for r in trace]
            assert phases == ["reduce-scatter"] * (world - 1) + ["all-gather"] * (world - 1)
            # Each phase sends every chunk but one (r+1 in reduce-scatter, r+2 in
            # all-gather): 2(n-1)/n of the buffer when the chunks are even.
            total = numel * elem
            sent = sum(r["bytes"] for r in trace)
            if world > 1:
                assert sent == 2 * total - chunk_bytes[(rank + 1) % world] - \
                    chunk_bytes[(rank + 2) % world]
    for rank, trace in enumerate(traces):
        receiver = traces[(rank + 1) % world]
        for rec in trace:
            match = receiver[rec["step"]]
            assert match["recv_from"] == rank
            assert match["recv_chunk"] == rec["send_chunk"]
            assert match["recv_bytes"] == rec["bytes"]
            # One machine, one CLOCK_MONOTONIC: a message cannot arrive before it was sent.
            assert match["t_end"] >= rec["t_start"]


@settings(max_examples=25, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=cases)
def test_rings_agree_with_dist_all_reduce(pool, case):
    results = pool.run(case)
    assert all("error" not in r for r in results), results
    for rank, r in enumerate(results):
        assert r["ok"], (rank, case, r["max_err"])
        assert r["same_object"] and r["shape_kept"]
        if "owned_chunk_reduced" in r:
            assert r["owned_chunk_reduced"], (rank, case)
    if case["algo"] != "naive":  # the rings hand every rank the same bits
        assert len({r["checksum"] for r in results}) == 1
    check_trace([r["trace"] for r in results], case, pool.world)


# The pipelined ring's edge cases, on every world size: fewer elements than
# ranks (empty chunks), uneven chunks, segments of one element, segments that
# do not divide the chunk, a segment size below one element, the whole chunk
# in one segment; every dtype; sum and avg.
PIPELINED_CASES = [
    {"numel": numel, "dtype": dtype, "op": op, "segment_bytes": seg, "in_flight": ahead}
    for numel, seg, ahead in [(0, 8, 8), (1, 8, 1), (3, 8, 2), (5, 3, 1), (7, 4, 3),
                              (1001, 40, 1), (1001, 40, 8), (1001, 1 << 20, 8), (4099, 1000, 2)]
    for dtype, op in [("float32", "sum"), ("int64", "sum"), ("bfloat16", "avg"),
                      ("float64", "avg")]
]


def test_pipelined_ring_edge_cases(pool):
    for case in PIPELINED_CASES:
        case = dict(case, algo="pipelined", layout="flat", seed=case["numel"])
        results = pool.run(case)
        assert all("error" not in r for r in results), (case, results)
        for rank, r in enumerate(results):
            assert r["ok"], (rank, case, r["max_err"])
            assert r["same_object"] and r["shape_kept"]
            assert r.get("owned_chunk_reduced", True), (rank, case)
        assert len({r["checksum"] for r in results}) == 1, case
        check_trace([r["trace"] for r in results], case, pool.world)


@pytest.mark.parametrize("name", ["ring_allreduce", "naive_allreduce", "ring_allreduce_pipelined"])
def test_lesson_functions_stand_alone(name):
    """Lessons embed these functions' source: it needs nothing but torch, dist and time."""
    func = getattr(allreduce, name)
    tree = ast.parse(inspect.getsource(func))
    fn = tree.body[0]
    assert ast.get_docstring(fn)
    bound = {a.arg for a in ast.walk(fn) if isinstance(a, ast.arg)}
    bound |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)
              and isinstance(n.ctx, ast.Store)}
    bound |= {n.name for n in ast.walk(fn) if isinstance(n, ast.FunctionDef)}
    used = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    assert used - bound - set(dir(builtins)) <= {"torch", "dist", "time"}


def test_the_lab_knows_torch_dtypes_and_chunks_without_torch():
    """``labs.ring.lab`` (torch-free) says what torch would: each dtype's size and kind, the
    chunks ``tensor_split`` cuts, and the functions behind each algorithm's name."""
    for name, dtype in ring.DTYPES.items():
        real = allreduce.TORCH_DTYPES[name]
        assert (dtype.itemsize, dtype.is_floating_point) == (real.itemsize, real.is_floating_point), name
    for numel in (0, 1, 2, 5, 10, 64, 1001):
        for world in (1, 2, 3, 4, 7):
            split = [c.numel() for c in torch.tensor_split(torch.empty(numel), world)]
            assert ring.chunk_sizes(numel, world) == split, (numel, world)
    assert tuple(allreduce.ALGOS) == ring.ALGOS


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="integer"):
        allreduce.ring_allreduce(torch.ones(4, dtype=torch.int64), op="avg")
    with pytest.raises(ValueError, match="op"):
        allreduce.naive_allreduce(torch.ones(4), op="max")
    with pytest.raises(ValueError, match="integer"):
        allreduce.ring_allreduce_pipelined(torch.ones(4, dtype=torch.int64), op="avg")
    with pytest.raises(ValueError, match="op"):
        allreduce.ring_allreduce_pipelined(torch.ones(4), op="max")
    with pytest.raises(ValueError, match="in_flight"):
        allreduce.ring_allreduce_pipelined(torch.ones(4), in_flight=0)
    with pytest.raises(ValueError):
        ring.Params(dtype="int64", op="avg")


@pytest.mark.parametrize("algo", ["ring", "naive", "pipelined"])
def test_ring_lab_result_has_what_the_animation_needs(algo):
    result = run_lab(Run(world_size=3, timeout=60), ring.Params(size=40, dtype="float32", algo=algo))
    assert result.ok, result
    doc = json.loads(json.dumps(result.to_dict()))
    s = doc["summary"]
    for key in ("world_size", "numel", "dtype", "element_size", "chunk_numels", "op", "traces",
                "total_time_s", "correct", "max_abs_err", "backend", "inputs", "outputs",
                "owner_after_reduce_scatter", "clock"):
        assert key in s, key
    assert s["world_size"] == 3 and s["numel"] == 10 and s["element_size"] == 4
    assert s["chunk_numels"] == [4, 3, 3]
    assert s["correct"] and s["backend"] == "gloo"
    assert len(s["traces"]) == 3
    assert all(len(t) == (2 if algo == "naive" else 4) for t in s["traces"])
    assert s["owner_after_reduce_scatter"] == {"0": 1, "1": 2, "2": 0}
    # Times are offsets from the shared origin, every step inside the run.
    for trace in s["traces"]:
        for rec in trace:
            assert 0 <= rec["t_start"] <= rec["t_end"] <= s["total_time_s"] + 1.0
    sums = [sum(col) for col in zip(*s["inputs"], strict=True)]
    assert s["outputs"][0] == pytest.approx(sums, rel=1e-5, abs=1e-5)
    assert doc["work_s"] <= doc["wall_s"]
    assert doc["launcher"] in ("fork", "spawn")


def test_ring_lab_on_one_rank():
    result = run_lab(Run(world_size=1, timeout=60), ring.Params(size=64, op="avg"))
    assert result.ok, result
    assert result.summary["correct"] and result.summary["traces"] == [[]]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_ring_on_nccl_single_gpu():
    result = run_lab(Run(world_size=1, backend="nccl", timeout=120), ring.Params(size=1 << 20))
    assert result.ok, result
    assert result.backend == "nccl" and result.summary["correct"]




def test_pool_helper_cleans_up():
    p = RingPool(2)
    pids = [proc.pid for proc in p.procs]
    assert p.run({"numel": 5, "dtype": "int64", "op": "sum", "algo": "ring", "layout": "flat",
                  "seed": 1})[0]["ok"]
    p.close()
    assert all(gone(pid, wait=0) for pid in pids)


def test_a_ring_run_says_what_it_does_before_and_after_its_steps_and_its_work_is_all_of_it():
    """The page's bar names the input, the warm-up and dist.all_reduce's runs, not only the ring's
    steps; and the rank's work covers them, so that the launcher's overhead beyond it is the
    processes' start and stop (journey review m2: "53.94 s starting and stopping" was mostly work)."""
    events: list[dict] = []
    result = run_lab(Run(world_size=2, timeout=120), ring.Params(size=4096, repeats=2, warmup=1),
                     on_event=events.append)
    assert result.ok, result
    phases = [e["phase"] for e in events if e.get("kind") == "progress" and e.get("rank") == 0]
    assert phases[0] == "input" and "warm-up" in phases and "dist.all_reduce" in phases
    assert phases.index("warm-up") < phases.index("reduce-scatter") < phases.index("dist.all_reduce")
    warm = next(e for e in events if e.get("phase") == "warm-up")
    assert warm["message"] == "untimed run 1/1" and warm["step"] == 0
    for rank in result.ranks:
        assert 0 < rank["ring_s"] <= rank["work_s"] <= result.wall_s
