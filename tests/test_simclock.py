"""The simulated clock (``labs.simclock``, issue #40): pure arithmetic, so these run in the fast lane.

- The flat ring's replay equals the closed-form alpha-beta ring model (``labs.model.ring_time`` on
  one link class; its slowest link at every step when it spans nodes), to rounding.
- The hierarchical all-reduce's replay equals its closed form where no two messages share a port.
- The same log gives the same figure on every replay, and the logs the lab's ranks record are the
  ones `schedule` writes (``tests/test_labs_topology.py`` checks a real run's).
- A log that does not pair up is refused with the rank that waits.
"""

from __future__ import annotations

import pytest

from labs import simclock as sc
from labs.model import ring_time

SHAPED = sc.Target("box", intra=sc.Link(50e-6, 1.2e9), inter=sc.Link(200e-6, 25e6), per_gpu_nic=False)


@pytest.mark.parametrize("n", [2, 3, 4, 8])
@pytest.mark.parametrize("size", [4096, 1 << 20, 64 << 20])
def test_the_flat_ring_on_one_nvlink_node_is_the_closed_form(n, size):
    size -= size % (4 * n)  # S/n bytes per chunk, as the closed form assumes
    replayed = sc.replay(sc.schedule("flat", 1, n, size), sc.node_map(1, n), sc.H100_NODE).time_s
    closed = ring_time(n, size, sc.NVLINK4.alpha_s, sc.NVLINK4.bandwidth_Bps)
    assert replayed == pytest.approx(closed, rel=1e-12)


@pytest.mark.parametrize(("m", "k"), [(2, 1), (2, 2), (2, 4), (2, 8)])
@pytest.mark.parametrize("target", [sc.H100_TWO_NODES, SHAPED], ids=["ib", "shaped"])
def test_a_ring_across_nodes_runs_at_its_slowest_link_every_step(m, k, target):
    size = 16 << 20
    replayed = sc.replay(sc.schedule("flat", m, k, size), sc.node_map(m, k), target)
    assert replayed.time_s == pytest.approx(sc.flat_ring_time(m, k, size, target), rel=1e-12)
    n = m * k
    # Over the run's messages: the ring edge from node 0 to node 1 and back, 2(N-1)/N x S each.
    assert replayed.bytes_inter == pytest.approx(2 * sc.inter_node_bytes("flat", m, k, size))
    assert sc.inter_node_bytes("flat", m, k, size) == pytest.approx(2 * (n - 1) / n * size)


@pytest.mark.parametrize(("m", "k"), [(1, 4), (2, 2), (2, 8)])
@pytest.mark.parametrize("target", [sc.H100_NODE, sc.H100_TWO_NODES], ids=["node", "ib"])
def test_the_hierarchical_all_reduce_is_its_closed_form_without_shared_ports(m, k, target):
    size = 64 << 20
    replayed = sc.replay(sc.schedule("hierarchical", m, k, size), sc.node_map(m, k), target).time_s
    assert replayed == pytest.approx(sc.hierarchical_time(m, k, size, target), rel=1e-12)


def test_on_one_shared_link_the_hierarchical_all_reduce_sends_2m_1_over_m_of_the_buffer():
    size = 4 << 20
    replayed = sc.replay(sc.schedule("hierarchical", 2, 2, size), sc.node_map(2, 2), SHAPED)
    assert replayed.bytes_inter == pytest.approx(2 * size)  # S each way: 2(m-1)/m x S with m = 2
    # The rails share the link: never faster than its bytes at its rate, never slower than the bound.
    assert size / SHAPED.inter.bandwidth_Bps < replayed.time_s <= sc.hierarchical_time(2, 2, size, SHAPED)
    flat = sc.replay(sc.schedule("flat", 2, 2, size), sc.node_map(2, 2), SHAPED).time_s
    assert flat / replayed.time_s == pytest.approx(1.5, rel=0.05)  # 2(N-1)/N over 2(m-1)/m


def test_which_wins_where_at_two_nodes_of_eight():
    """The lesson's figures: across InfiniBand the hierarchical all-reduce wins by several times
    on large messages; on one NVLink node it wins only by its fewer steps."""
    size = 256 << 20
    ib = {a: sc.replay(sc.schedule(a, 2, 8, size), sc.node_map(2, 8), sc.H100_TWO_NODES).time_s
          for a in ("flat", "hierarchical")}
    assert ib["flat"] / ib["hierarchical"] > 5
    node = {a: sc.replay(sc.schedule(a, 1, 8, size), sc.node_map(1, 8), sc.H100_NODE).time_s
            for a in ("flat", "hierarchical")}
    assert node["flat"] == node["hierarchical"]  # one node: the hierarchical all-reduce is the flat ring


def test_a_replay_is_the_same_to_the_last_bit():
    log = sc.schedule("hierarchical", 2, 4, 3 << 20)
    first = sc.replay(log, sc.node_map(2, 4), sc.H100_TWO_NODES)
    again = [sc.replay([list(ops) for ops in log], sc.node_map(2, 4), sc.H100_TWO_NODES) for _ in range(3)]
    assert all(p.time_s == first.time_s and p.rank_end_s == first.rank_end_s for p in again)


def test_uneven_chunks_are_split_as_tensor_split_splits_them():
    log = sc.schedule("flat", 1, 3, 40)  # 10 floats over 3 ranks: 4, 3, 3
    sent = [n for ops in log for kind, _peer, n in ops if kind == "send"]
    assert sorted(set(sent)) == [12, 16]
    assert sum(sent) == 2 * (3 - 1) * 40  # every chunk passes n-1 hops in each phase


def test_a_log_that_does_not_pair_up_is_refused():
    with pytest.raises(sc.LogError, match="rank 1"):
        sc.replay([[("send", 1, 8)], [("recv", 0, 8), ("recv", 0, 8)]], [0, 0], sc.H100_NODE)
    with pytest.raises(sc.LogError, match="peer 5"):
        sc.replay([[("send", 5, 8)], []], [0, 0], sc.H100_NODE)
    with pytest.raises(sc.LogError, match="never sent"):  # each waits for the other first: a deadlock
        sc.replay([[("recv", 1, 8), ("send", 1, 8)], [("recv", 0, 8), ("send", 0, 8)]], [0, 0], sc.H100_NODE)
