"""Two "nodes" in one box: network namespaces joined by a shaped veth pair, and their cleanup.

Each node of the topology lab is a network namespace of its own, with its
loopback up; with two nodes, a veth pair joins them, one end in each
namespace (both ends are called ``topo0``; nothing of the lab ever appears in
the machine's own namespace), and ``tc tbf`` shapes each end's outgoing
traffic to the rate asked for. Ranks of one node talk to the node's own
address, which the kernel delivers over that namespace's loopback; ranks of
different nodes go through the veth, whose counters (``ip -s link``) say how
many bytes crossed.

Addresses come from ``ADDRESSES``, a /30 of the private range 10.0.0.0/8,
used only inside namespaces this module made: the namespaces have no other
interface and no route anywhere else, so no packet can leave them, and two
runs at once use the same addresses without meeting.

What it needs (`missing` says which is absent): the ``ip`` and ``tc``
commands (iproute2), and the capabilities CAP_SYS_ADMIN (to make a namespace
and to enter one) and CAP_NET_ADMIN (links, addresses, queueing disciplines).

Nothing outlives the run:

- names are unique per run: ``dpa-topo-<pid>-<start time>-<node>``, the pid
  and start time (clock ticks after boot) of the process that made them;
- `Fabric.close` deletes them when the run ends; a namespace with neither a
  name nor a process in it is freed by the kernel, veth and all;
- a keeper process (`keep`, in a session of its own, so that killing the
  run's process group does not take it) holds a pipe from the process that
  made the namespaces and deletes them when that pipe closes: when the maker
  exits, however it exits, ``kill -9`` included;
- `reap_stale` deletes the namespaces of makers that are gone (a keeper
  that was killed too), and runs before every new fabric.

Standard library only: the lab's rank code calls it, and so does the keeper,
``python -m labs.topology.netns --keep NAME...``.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

PREFIX = "dpa-topo"
NETNS_DIR = "/run/netns"
IFACE = "topo0"  # the veth's end, the same name in both namespaces
ADDRESSES = ("10.77.0.1", "10.77.0.2")  # node 0 and node 1; prefix length 30: these two only
# 16 KiB packets: TCP/IP headers add ~0.4% to what the counters see (at 1500 bytes, ~4.5%),
# and tbf's bucket (two packets) lets a lone message pass only ~2% faster than the rate.
MTU = 16384
CAP_NET_ADMIN, CAP_SYS_ADMIN = 12, 21
CLONE_NEWNET = 0x40000000
IP_TIMEOUT_S = 10.0


class Unavailable(RuntimeError):
    """The namespaces cannot be made here. ``reason`` is a key the page words in the
    learner's language ("no_iproute2", "no_capability", "failed"); ``detail`` says more."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


def _caps() -> int:
    """This process's effective capabilities, as a bit mask (0 if unknown)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def missing() -> Unavailable | None:
    """Why this process cannot make the lab's namespaces, or None when it can (as far as
    can be told without trying: a kernel without veth or tbf shows when `create` runs)."""
    absent = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if absent:
        return Unavailable("no_iproute2", f"{' and '.join(absent)} not found on PATH")
    caps = _caps()
    lacking = [name for name, bit in (("CAP_SYS_ADMIN", CAP_SYS_ADMIN), ("CAP_NET_ADMIN", CAP_NET_ADMIN))
               if not caps >> bit & 1]
    if lacking:
        return Unavailable("no_capability", " and ".join(lacking) + " missing")
    return None


def _start_ticks(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot), None if it is gone: with the
    pid this names a process uniquely, though pids are reused."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def run_token(pid: int | None = None) -> str:
    """``<pid>-<start time>`` of the maker: the part of the names that makes them this run's."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}-{_start_ticks(pid)}"


def names(token: str, nodes: int) -> list[str]:
    return [f"{PREFIX}-{token}-{node}" for node in range(nodes)]


def _ip(*args: str) -> str:
    """Run ``ip``/``tc`` (the first argument); raises Unavailable("failed") with its words."""
    try:
        done = subprocess.run(list(args), capture_output=True, text=True, timeout=IP_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable("failed", f"{' '.join(args)}: {exc}") from None
    if done.returncode != 0:
        raise Unavailable("failed", f"{' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def ours() -> list[str]:
    """The lab's namespaces on this machine, every run's."""
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(PREFIX + "-"))
    except OSError:
        return []


def delete(name: str) -> None:
    """Delete one namespace by name; nothing if it is gone already."""
    with contextlib.suppress(Unavailable):
        if os.path.exists(os.path.join(NETNS_DIR, name)):
            _ip("ip", "netns", "delete", name)


def reap_stale() -> list[str]:
    """Delete the namespaces whose maker is no longer running; returns their names."""
    gone = []
    for name in ours():
        try:
            pid, ticks = name[len(PREFIX) + 1:].split("-")[:2]
            alive = str(_start_ticks(int(pid))) == ticks
        except ValueError:
            continue  # not a name we make
        if not alive:
            delete(name)
            gone.append(name)
    return gone


@dataclass
class Fabric:
    """The namespaces of one run: one per node, and the shaped link between two."""

    names: list[str]
    rate_mbit: float | None  # None: one node, no link
    keeper: subprocess.Popen | None = None
    addresses: list[str] = field(default_factory=list)

    @property
    def linked(self) -> bool:
        return len(self.names) > 1

    def counters(self) -> list[dict[str, int]]:
        """Bytes and frames each node's end of the link sent and received (``ip -s link``), and
        the TCP segments the node's kernel sent again (``RetransSegs``, /proc/net/snmp)."""
        out = []
        for name in self.names if self.linked else []:
            stats = json.loads(_ip("ip", "-n", name, "-s", "-j", "link", "show", "dev", IFACE))[0]["stats64"]
            out.append({"tx_bytes": stats["tx"]["bytes"], "rx_bytes": stats["rx"]["bytes"],
                        "tx_packets": stats["tx"]["packets"], "rx_packets": stats["rx"]["packets"],
                        "retransmitted": _retransmitted(name)})
        return out

    def close(self) -> None:
        """Delete the namespaces and let the keeper go (it finds nothing left to delete)."""
        for name in self.names:
            delete(name)
        if self.keeper is not None:
            with contextlib.suppress(OSError):
                self.keeper.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.keeper.wait(timeout=IP_TIMEOUT_S)
            self.keeper = None


def _retransmitted(name: str) -> int:
    """TCP segments namespace ``name`` has sent again since it was made."""
    lines = [line.split() for line in _ip("ip", "netns", "exec", name, "cat", "/proc/net/snmp").splitlines()
             if line.startswith("Tcp:")]
    return int(dict(zip(lines[0], lines[1], strict=True))["RetransSegs"])


def create(nodes: int, rate_mbit: float, *, token: str | None = None) -> Fabric:
    """Make ``nodes`` namespaces (1 or 2) and, for two, the veth between them shaped to
    ``rate_mbit`` each way. Raises `Unavailable`, having deleted whatever it made."""
    if nodes not in (1, 2):
        raise ValueError("the topology lab makes one or two nodes")
    why = missing()
    if why is not None:
        raise why
    reap_stale()
    made = Fabric(names=names(token or run_token(), nodes), rate_mbit=rate_mbit if nodes == 2 else None)
    made.keeper = _start_keeper(made.names)
    try:
        for name in made.names:
            _ip("ip", "netns", "add", name)
            _ip("ip", "-n", name, "link", "set", "lo", "up")
            # No tail loss probes: when tbf's queue delays a message's last segment, TCP
            # would send it again, and the counters would count bytes no rank sent. And no
            # slow start after a pause: a connection that waited for another phase would
            # otherwise begin each message at a small window and leave the link half idle
            # (the hierarchical all-reduce's rails pause between its phases; the flat ring's
            # crossing never does).
            _ip("ip", "netns", "exec", name, "sysctl", "-q", "-w", "net.ipv4.tcp_early_retrans=0",
                "net.ipv4.tcp_slow_start_after_idle=0")
        if made.linked:
            a, b = made.names
            _ip("ip", "link", "add", IFACE, "netns", a, "type", "veth", "peer", "name", IFACE, "netns", b)
            # tbf's bucket must hold the largest packet, else it drops it; two of them
            # keep the first bytes of a message from passing much faster than the rate.
            burst = 2 * (MTU + 1024)
            for name, address in zip(made.names, ADDRESSES, strict=True):
                _ip("ip", "-n", name, "addr", "add", f"{address}/30", "dev", IFACE)
                _ip("ip", "-n", name, "link", "set", IFACE, "mtu", str(MTU))
                _ip("ip", "-n", name, "link", "set", IFACE, "up")
                _ip("tc", "-n", name, "qdisc", "add", "dev", IFACE, "root", "tbf", "rate", f"{rate_mbit:g}mbit",
                    "burst", str(burst), "latency", "100ms")
            made.addresses = list(ADDRESSES)
    except BaseException:
        made.close()
        raise
    return made


def _start_keeper(names_: list[str]) -> subprocess.Popen:
    """The process that deletes ``names_`` when this one is gone (see the module's docstring)."""
    return subprocess.Popen([sys.executable, "-m", "labs.topology.netns", "--keep", *names_],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, close_fds=True,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def keep(names_: list[str]) -> None:
    """The keeper's body: wait for the maker's pipe to close, then delete the namespaces."""
    with contextlib.suppress(OSError):
        while os.read(0, 4096):
            pass
    for name in names_:
        delete(name)


# --------------------------------------------------------------------------
# Entering a namespace (a rank's thread)

_libc = None


def _setns(fd: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL("libc.so.6", use_errno=True)
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def enter(name: str) -> int:
    """Move the calling thread into namespace ``name``; returns an fd of the namespace it
    was in, for `leave`. Sockets made from now on live in ``name``; those made before
    (the process group's store and the default group) stay where they were."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    fd = os.open(os.path.join(NETNS_DIR, name), os.O_RDONLY)
    try:
        _setns(fd)
    except OSError:
        os.close(home)
        raise
    finally:
        os.close(fd)
    return home


def leave(home: int) -> None:
    """Back to the namespace `enter` came from: this thread no longer keeps the node's alive."""
    try:
        _setns(home)
    finally:
        os.close(home)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--keep":
        keep(sys.argv[2:])
    else:
        sys.exit("usage: python -m labs.topology.netns --keep NAME...")
