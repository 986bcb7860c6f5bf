"""Frames: how a rank and the harness's router talk over a pipe.

    frame = struct "<II" (header length, payload length) + header (JSON, UTF-8) + payload

The header says what the frame is (``{"t": "send", "id": 3, "dst": 1, ...}``);
the payload carries a tensor's raw bytes, when there is one. Both sides use
`encode` and `Reader`; nothing here is secret. A reader refuses a frame
whose lengths exceed `MAX_HEADER` or `MAX_PAYLOAD`, or whose header is not
a JSON object: on the router's side that ends the rank that wrote it (a
rank's pipe is the learner's to write to, so the router trusts no frame).
"""

from __future__ import annotations

import json
import struct

PREFIX = struct.Struct("<II")
MAX_HEADER = 8 << 20  # a rank's result (every parameter of a small model) fits with room to spare
MAX_PAYLOAD = 64 << 20


class FrameError(ValueError):
    """A frame that breaks the protocol: too long, not JSON, not an object."""


def encode(header: dict, payload: bytes = b"") -> bytes:
    head = json.dumps(header, separators=(",", ":")).encode()
    return PREFIX.pack(len(head), len(payload)) + head + payload


class Reader:
    """Collects bytes as they arrive and hands back whole frames."""

    def __init__(self):
        self.buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[dict, bytes]]:
        self.buf += data
        frames = []
        while len(self.buf) >= PREFIX.size:
            hlen, plen = PREFIX.unpack_from(self.buf)
            if hlen > MAX_HEADER or plen > MAX_PAYLOAD:
                raise FrameError(f"a frame of {hlen} + {plen} bytes is larger than the protocol allows")
            end = PREFIX.size + hlen + plen
            if len(self.buf) < end:
                break
            try:
                header = json.loads(bytes(self.buf[PREFIX.size:PREFIX.size + hlen]))
            except (ValueError, RecursionError) as exc:
                raise FrameError("a frame whose header is not JSON") from exc
            if not isinstance(header, dict):
                raise FrameError("a frame whose header is not a JSON object")
            frames.append((header, bytes(self.buf[PREFIX.size + hlen:end])))
            del self.buf[:end]
        return frames
