"""The bytes each rank put on the wire, read from the kernel by the harness parent.

    before = wire.snapshot()                    # {socket inode: (sent, received)}
    ...                                         # the ranks run one case
    wire.per_rank(before, wire.snapshot(), inodes_of_each_rank)

Why: the counting ``api`` lives in the rank, where the learner's code runs,
so code written to cheat can set its counters (``dist.send.__self__.sent``).
The kernel's own TCP counters cannot be set from there. Each rank tells the
parent, in its trusted phase, which sockets it holds (``socket_inodes``:
gloo's connections to the other ranks and the store's); the parent, which
runs no learner code and is non-dumpable, reads every TCP socket's counters
through NETLINK_SOCK_DIAG (the ``ss`` of iproute2) right before a case
starts and right after every rank has replied. The ranks have no other way
to each other once their second seccomp filter is on (``bpf.sealed_program``:
no new socket, no file written, no IPC), so what one rank learned from
another crossed these sockets and was counted. ``tcpi_bytes_sent`` counts
what TCP handed to the loopback (there are no retransmissions on it), which
unlike ``tcpi_bytes_acked`` does not wait for a delayed ACK; kernels older
than 4.19 lack it, and then the acked count is used.

A socket of a rank's that is gone after the case (closed by the learner's
code) is counted in ``lost``: what crossed it is not known, so the check
that relies on these numbers fails the case.
"""

from __future__ import annotations

import os
import socket
import struct

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_DONE, NLMSG_ERROR = 3, 2
INET_DIAG_INFO = 2
INODE_AT = 68  # in struct inet_diag_msg
ATTRS_AT = 72  # sizeof(struct inet_diag_msg)
# struct tcp_info: u64 fields
BYTES_ACKED, BYTES_RECEIVED, BYTES_SENT = 120, 128, 200


def socket_inodes(pid: str | int = "self") -> list[int]:
    """The inodes of the sockets a process holds (its ``/proc/PID/fd`` links ``socket:[N]``)."""
    inodes = set()
    base = f"/proc/{pid}/fd"
    for fd in os.listdir(base):
        try:
            target = os.readlink(f"{base}/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return sorted(inodes)


def _parse(data: bytes, out: dict[int, tuple[int, int]]) -> bool:
    """Read one netlink reply into ``out``; True when the dump is complete."""
    off = 0
    while off + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, off)
        if kind == NLMSG_DONE:
            return True
        if kind == NLMSG_ERROR:
            raise OSError("sock_diag refused the dump")
        if length < 16:
            raise OSError("sock_diag sent a malformed message")
        body, end = off + 16, off + length
        inode = struct.unpack_from("=I", data, body + INODE_AT)[0]
        attr = body + ATTRS_AT
        while inode and attr + 4 <= end:
            alen, atype = struct.unpack_from("=HH", data, attr)
            if alen < 4:
                break
            size = alen - 4
            if atype == INET_DIAG_INFO and size >= BYTES_RECEIVED + 8:
                acked, received = struct.unpack_from("=QQ", data, attr + 4 + BYTES_ACKED)
                sent = struct.unpack_from("=Q", data, attr + 4 + BYTES_SENT)[0] \
                    if size >= BYTES_SENT + 8 else acked
                out[inode] = (sent, received)
            attr += (alen + 3) & ~3
        off += (length + 3) & ~3
    return False


def _dump(family: int, out: dict[int, tuple[int, int]]) -> None:
    # struct inet_diag_req_v2: family, protocol, ext (1 << (INET_DIAG_INFO - 1)), pad,
    # states (all), then a zero inet_diag_sockid (48 bytes): every TCP socket.
    req = struct.pack("=BBBxI", family, socket.IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1), 0xFFFFFFFF) + bytes(48)
    msg = struct.pack("=IHHII", 16 + len(req), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, 1, 0) + req
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as nl:
        nl.sendto(msg, (0, 0))
        while not _parse(nl.recv(1 << 16), out):
            pass


def snapshot() -> dict[int, tuple[int, int]] | None:
    """{inode: (bytes sent, bytes received)} of every TCP socket of this network
    namespace (IPv4 and IPv6); None when the kernel will not tell (no sock_diag)."""
    out: dict[int, tuple[int, int]] = {}
    try:
        _dump(socket.AF_INET, out)
        _dump(socket.AF_INET6, out)
    except OSError:
        return None
    return out


def per_rank(before, after, inodes: list) -> list[dict | None]:
    """Per rank (``inodes[r]``: its sockets), what crossed them between the snapshots:
    ``{"sent", "received", "lost"}``; None for every rank when a snapshot or a rank's
    sockets are missing (the checks then say the wire could not be measured)."""
    if before is None or after is None:
        return [None] * len(inodes)
    rows = []
    for mine in inodes:
        if not mine:
            rows.append(None)
            continue
        sent = received = lost = 0
        for inode in mine:
            if inode not in before:
                continue  # not TCP (a pipe's end, a unix socket), or closed before the case
            if inode not in after:
                lost += 1
                continue
            sent += after[inode][0] - before[inode][0]
            received += after[inode][1] - before[inode][1]
        rows.append({"sent": sent, "received": received, "lost": lost})
    return rows
