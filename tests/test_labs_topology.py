"""The topology lab (issue #40): two network namespaces, a shaped veth, and nothing left behind.

Every test that starts ranks is marked slow (the fast lane keeps the reaping and the refusal).
The runs that build namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN (CI runs as root); where they
are missing those tests skip and say why, and the lab's own answer to their absence is tested
instead (it runs on the loopback and says so in the learner's language). No timing is asserted:
the bytes come from the link's own counters, the projections from ``labs.simclock``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from academy import i18n
from academy.db import session_scope
from academy.labruns import pages as labruns
from academy.models import LabRun
from app import charts
from app import topology as page
from labs import reports, simclock
from labs.launch import run_lab
from labs.params import ParamError, Run
from labs.topology import lab as topology
from labs.topology import netns
from tests.apptest import open_page
from tests.procs import command_lines, gone
from tests.runquestions import asks_its_questions
from tests.test_charts import colours

ROOT = Path(__file__).resolve().parent.parent
LANGS = sorted(i18n.languages())
WHY_NOT = netns.missing()
needs_namespaces = pytest.mark.skipif(WHY_NOT is not None, reason=f"no network namespaces here: {WHY_NOT}")
SIZES = [262144, 1048576]


def made_by(pid: int) -> list[str]:
    """The lab's namespaces whose maker is process ``pid``."""
    return [n for n in netns.ours() if n.startswith(f"{netns.PREFIX}-{pid}-")]


@pytest.fixture(scope="module")
def result() -> dict:
    """One real run: 2 nodes x 2 ranks, both parts, small sizes (as the worker stores it)."""
    if WHY_NOT is not None:
        pytest.skip(f"no network namespaces here: {WHY_NOT}")
    params = topology.Params(sizes=SIZES, repeats=2, rate_mbit=500, width=256, depth=2, steps=1)
    outcome = run_lab(Run(world_size=4, timeout=300), params)
    assert outcome.ok, outcome
    return json.loads(json.dumps(outcome.to_dict()))


@pytest.mark.slow
@needs_namespaces
def test_the_link_carries_what_the_ranks_sent_across(result):
    s = reports.read("topology", result).summary
    assert (s.fabric, s.nodes, s.per_node, s.rate_mbit) == ("namespaces", 2, 2, 500)
    assert {r.algo for r in s.rows} == set(topology.ALGOS) and all(r.correct for r in s.rows)
    for r in s.rows:
        # The ranks' own messages send the formula's bytes across, each way ...
        assert r.model_bytes == [pytest.approx(r.formula_bytes)] * 2, r
        # ... and the veth's counters saw them: what its frames carried above TCP, within 2%.
        assert r.link_bytes is not None and r.bytes_error <= topology.BYTES_TOLERANCE, r
        assert all(c > p for c, p in zip(r.link_bytes, r.payload_bytes, strict=True))
    assert s.within_tolerance is True
    flat = {r.size: r.formula_bytes for r in s.rows if r.algo == "flat"}
    hier = {r.size: r.formula_bytes for r in s.rows if r.algo == "hierarchical"}
    assert all(flat[z] / hier[z] == pytest.approx(1.5) for z in SIZES)  # 2(N-1)/N over 2(m-1)/m
    assert set(s.links) == {"intra", "inter"} and s.links["inter"].rate_Bps == 500e6 / 8
    # Nothing of the run is left: its namespaces went with it.
    assert made_by(result["pids"][0]) == []


@pytest.mark.slow
@needs_namespaces
def test_the_ranks_logs_are_the_schedule_and_replay_the_same_every_time(result):
    ranks, params = result["ranks"], topology.Params(**result["params"])
    for index, (algo, size) in enumerate(ranks[0]["runs"]):
        logged = [[tuple(op) for op in r["traces"][index]] for r in ranks]
        assert logged == simclock.schedule(algo, 2, 2, size), (algo, size)
    again = topology.summarize(params, ranks, world_size=4, backend="gloo")
    stored = reports.read("topology", result).summary
    assert [r.projected for r in again.rows] == [r.projected for r in stored.rows]
    assert [r.predicted_s for r in again.rows] == [r.predicted_s for r in stored.rows]
    big = {r.algo: r.projected["h100_ib"] for r in stored.rows if r.size == SIZES[-1]}
    assert big["hierarchical"] < big["flat"]


@pytest.mark.slow
@needs_namespaces
def test_hsdp_holds_more_and_sends_less_across_the_link(result):
    s = reports.read("topology", result).summary
    fsdp, hsdp = (next(m for m in s.sharding if m.name == name) for name in ("fsdp", "hsdp"))
    assert (fsdp.shard_size, fsdp.replicas, hsdp.shard_size, hsdp.replicas) == (4, 1, 2, 2)
    for mesh in (fsdp, hsdp):
        for row in mesh.memory:
            for part, value in row.measured.items():
                assert value == pytest.approx(row.predicted[part], rel=0.10), (mesh.name, row.rank, part)
        assert mesh.link_bytes is not None
        assert max(mesh.payload_bytes) == pytest.approx(mesh.predicted_link_bytes, rel=0.08), mesh.name
    held = {m.name: max(sum(r.measured.values()) for r in m.memory) for m in (fsdp, hsdp)}
    assert held["hsdp"] > 1.8 * held["fsdp"]
    assert max(hsdp.payload_bytes) < 0.5 * min(fsdp.payload_bytes)
    assert hsdp.max_abs_diff < 1e-5  # the same training, sharded another way


@pytest.mark.slow
@needs_namespaces
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "cancel"])
def test_a_killed_or_cancelled_run_leaves_no_namespace_and_no_process(sig):
    """The lab's process dies (kill -9) or is cancelled (SIGTERM, as the worker's cancel):
    the ranks die with it, and the keeper deletes the namespaces; nothing of the run remains."""
    cli = subprocess.Popen([sys.executable, "-m", "labs", "topology", "--world-size", "2", "--parts", "allreduce",
                            "--sizes", "4194304", "--repeats", "20", "--rate-mbit", "50"],
                           cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, names, ranks = time.monotonic() + 60, [], []
        while time.monotonic() < deadline and not names:
            ranks = children(cli.pid)
            names = [n for r in ranks for n in made_by(r)]
            time.sleep(0.1)
        assert names, "the run never made its namespaces"
        keepers = [pid for pid, args in command_lines() if b"--keep" in args and names[0].encode() in args]
        assert keepers and all(os.getsid(k) == k for k in keepers)  # a session of its own
        time.sleep(0.5)  # into the all-reduces
        cli.send_signal(sig)
        cli.wait(timeout=30)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    assert all(gone(pid, wait=15) for pid in ranks + keepers)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(n in netns.ours() for n in names):
        time.sleep(0.1)
    assert not [n for n in names if n in netns.ours()]
    held = [pid for pid, _ in command_lines() if _netns_of(pid) in {_inode(n) for n in names} - {None}]
    assert held == []


@pytest.mark.slow
@needs_namespaces
def test_a_crashed_maker_is_reported_and_leaves_no_namespace():
    """Rank 0, which made the namespaces, dies at once (an injected crash): the run ends as a
    named crash, and its keeper deletes what rank 0 made."""
    done = subprocess.run([sys.executable, "-m", "labs", "topology", "--world-size", "2", "--parts", "allreduce",
                           "--sizes", "65536", "--repeats", "2", "--fail-rank", "0", "--fail-at-step", "2",
                           "--fail-mode", "crash"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "crash on rank 0" in done.stderr, done.stderr[-1500:]
    deadline = time.monotonic() + 15  # runs of other tests may hold theirs: only a dead maker's must go
    while time.monotonic() < deadline and orphans():
        time.sleep(0.1)
    assert orphans() == []


def orphans() -> list[str]:
    """The lab's namespaces whose maker is no longer running."""
    out = []
    for name in netns.ours():
        pid, ticks = name[len(netns.PREFIX) + 1:].split("-")[:2]
        if not pid.isdigit() or str(netns._start_ticks(int(pid))) != ticks:
            out.append(name)
    return out


def children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry.name))
            except (OSError, ValueError):
                continue
    return out


def _inode(name: str) -> int | None:
    try:
        return os.stat(os.path.join(netns.NETNS_DIR, name)).st_ino
    except OSError:
        return None


def _netns_of(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def test_stale_namespaces_of_dead_makers_are_reaped(monkeypatch):
    """A name whose maker is gone is deleted before the next run makes its own; live ones stay."""
    deleted = []
    monkeypatch.setattr(netns, "ours", lambda: [f"{netns.PREFIX}-{os.getpid()}-{netns.run_token().split('-')[1]}-0",
                                                f"{netns.PREFIX}-999999999-1-0", f"{netns.PREFIX}-odd"])
    monkeypatch.setattr(netns, "delete", deleted.append)
    assert netns.reap_stale() == [f"{netns.PREFIX}-999999999-1-0"] == deleted


@pytest.mark.slow
@pytest.mark.usefixtures("app_db")
def test_without_namespaces_the_lab_runs_on_the_loopback_and_says_why(tmp_path):
    """Run as a worker without CAP_NET_ADMIN runs it (setpriv drops the capabilities where we have
    them): the lab ends well, on the loopback, with the reason the page words."""
    argv = [sys.executable, "-m", "labs", "topology", "--world-size", "2", "--parts", "allreduce",
            "--sizes", "4096", "--repeats", "1", "--json", "--out", str(tmp_path / "out.json")]
    if WHY_NOT is None:
        argv = ["setpriv", "--bounding-set=-net_admin,-sys_admin", "--inh-caps=-net_admin,-sys_admin", *argv]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    stored = json.loads((tmp_path / "out.json").read_text())
    s = reports.read("topology", stored).summary
    assert (s.fabric, s.unavailable) == ("loopback", "no_capability")
    assert all(r.correct for r in s.rows) and all(r.link_bytes is None for r in s.rows)
    assert s.rows[0].projected  # the simulated clock needs no link
    for lang in LANGS:
        at = _draw(stored, lang)
        assert i18n.t("topology.unavailable.no_capability", lang) in [w.value for w in at.warning]


def _draw(stored: dict, lang: str):
    with session_scope() as s:
        run = LabRun(lab="topology", params={"world_size": stored["world_size"], **stored["params"]},
                     status="done", result=stored, machine=stored["machine"])
        s.add(run)
        s.commit()
        run_id = run.id
    at = open_page("labs", lang, state={"lab_run_id": run_id}, lab="topology")
    assert not at.exception, at.exception
    return at


@pytest.mark.slow
@needs_namespaces
def test_the_run_gives_questions_built_from_its_own_figures(result):
    asks_its_questions("topology", result)  # the recorded run of tests/fixtures/runs is still what the lab writes


@needs_namespaces
@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.usefixtures("app_db")
def test_the_labs_page_draws_both_targets_in_every_language(result, lang):
    at = _draw(result, lang)
    t = lambda key, **v: i18n.t(key, lang, **v)  # noqa: E731
    assert [i.value for i in at.info][0] == t("labs.look.topology")
    assert t("topology.fabric_linked", nodes=2, count=2, rate="500") in [m.value for m in at.success]
    assert len(at.get("plotly_chart")) == 4  # time, the clocks' ratio, FSDP/HSDP link bytes and memory
    ratio = json.loads(at.get("plotly_chart")[1].proto.spec)
    names = {tr["name"] for tr in ratio["data"]}
    assert {t("topology.target.h100_node"), t("topology.target.h100_ib"), t("topology.measured")} <= names
    verdicts = " ".join(m.value for m in at.markdown)
    assert t("topology.target.h100_ib") in verdicts and t("topology.target.h100_node") in verdicts
    assert {t("topology.nodes"), t("topology.rate")} <= {s.label for s in at.selectbox}


@pytest.mark.slow
@needs_namespaces
def test_the_figures_draw_in_the_palette(result):
    s = reports.read("topology", result).summary
    names = {k: k for k in ("measured_flat", "measured_hierarchical", "predicted_flat", "predicted_hierarchical",
                            "size", "ms", "ratio", "measured", "box", "way_0", "way_1", "predicted", "mb_step",
                            "mb_rank", "rank", "fsdp", "hsdp", "params", "grads", "optimizer", "h100_node", "h100_ib",
                            "held_measured", "short_fsdp", "short_hsdp", "mesh_axis")}
    flat = [r for r in s.rows if r.algo == "flat"]
    figures = [page.time_figure(s.rows, names), page.link_figure(s.sharding, names),
               page.memory_figure(s.sharding, names),
               page.ratio_figure([r.size for r in flat], {"measured": [1.2, 1.4], "h100_ib": [2.0, 3.0]}, names)]
    for fig in figures:
        stray = [(where, c) for where, c in colours(fig.to_plotly_json()) if c.lower() not in charts.palette()]
        assert not stray, stray
        assert charts.table(fig)["rows"]  # the text alternative


def test_ranks_that_do_not_split_evenly_are_refused_in_the_learners_words():
    with pytest.raises(ParamError):
        topology.check(topology.Params(namespaces=2), 3)
    with pytest.raises(labruns.LabRequestError) as refused:
        labruns.validate("topology", {"world_size": 3, "namespaces": 2})
    assert refused.value.key == "labs_refused.topology_nodes"
