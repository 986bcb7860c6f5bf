"""Reading an untrusted PDF where it cannot stall the server.

A PDF is a program for a parser: a few KB of shared, Flate-compressed
content streams cost minutes of pure-Python work (F-1 in the 2026-12-01
review: 8.5 KB, 30 pages, 48 s of the server's CPU, every session blocked).
So the server never parses an upload itself. ``scan`` refuses anything
larger than a certificate PDF can be, then runs this file as a separate
Python process that limits itself (CPU seconds, address space, no file
writes) before it imports pypdf, under a wall-clock timeout as well. The
child reads only the page count (a certificate has exactly one page) and the
/Keywords entry that carries the signed token; it extracts no text, and it
imports nothing from this project, so it starts in isolated mode (``-I``).

Whatever the file does, the server process spends only the cost of starting
a child and reading a few KB of JSON; a file that needs more than the limits
is refused as "too_complex".

Readers are scarce (review N-9: two uploaders looping one costly file kept
genuine checks "busy"), so: every definite answer is remembered by the file's
SHA-256, "too_complex" included, and a file is read at most once while it is
remembered; each client (the page passes its address) has at most one reader
at a time, a second upload meanwhile is told "busy_client"; and the child
gets 1 s of CPU, about five times what a genuine certificate takes (0.17 to
0.23 s measured, interpreter start included, on a loaded 2-core machine).
"""

from __future__ import annotations

import hashlib
import io
import json
import resource
import subprocess
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass

MAX_BYTES = 2 * 2**20  # a rendered certificate is ~50-150 KB (subset fonts, one page)
CPU_SECONDS = 1  # RLIMIT_CPU of the child: a genuine certificate takes ~0.2 s, start included
MEMORY_BYTES = 512 * 2**20  # RLIMIT_AS of the child: the interpreter, pypdf and the file
WALL_SECONDS = 10  # a child that sleeps or waits is killed as well
KEYWORDS_MAX = 16_384  # a token is ~1 KB; more is not a certificate
# Children at once for the whole server: each may hold MEMORY_BYTES for WALL_SECONDS,
# so many anonymous uploads at once must not add up. Over it, an upload is told "busy".
MAX_CONCURRENT = 2
_SLOTS = threading.BoundedSemaphore(MAX_CONCURRENT)
SEEN_MAX = 256  # answers remembered by file hash (a few hundred bytes each)
_SEEN: OrderedDict[bytes, Scan] = OrderedDict()
_READING: set[str] = set()  # clients with a reader running now
_LOCK = threading.Lock()  # guards _SEEN and _READING

# Scan.status values; "ok" means pages and keywords were read. "busy" and
# "busy_client" are the only answers that are not remembered for the file
# (and "too_complex" after the wall-clock timeout, which a loaded machine can cause).
STATUSES = ("ok", "too_large", "unreadable", "pages", "too_complex", "busy", "busy_client")


@dataclass(frozen=True)
class Scan:
    status: str
    pages: int | None = None
    keywords: str | None = None
    detail: str | None = None  # in English, for logs and the CLI


def scan(data: bytes, *, client: str | None = None) -> Scan:
    """Page count and /Keywords of ``data``, read in a limited child process.

    A file stays in the page's uploader, so every rerun of the Verify page
    asks again: what a file says is remembered by its SHA-256 (every definite
    answer, "too_complex" from the CPU or memory limit included; not "busy",
    nor a wall-clock timeout, which a loaded machine may cause). ``client``
    (the uploader's address; None for a caller that is nobody's, the CLI) may
    have one reader at a time: a second upload while the first is read is
    "busy_client" and starts no child."""
    if len(data) > MAX_BYTES:
        return Scan("too_large", detail=f"{len(data)} bytes, more than {MAX_BYTES}")
    digest = hashlib.sha256(data).digest()
    with _LOCK:
        if digest in _SEEN:
            _SEEN.move_to_end(digest)
            return _SEEN[digest]
        if client is not None:
            if client in _READING:
                return Scan("busy_client", detail="this client has an upload being read already")
            _READING.add(client)
    try:
        found, definite = _scan_in_child(data)
    finally:
        if client is not None:
            with _LOCK:
                _READING.discard(client)
    if definite:
        with _LOCK:
            _SEEN[digest] = found
            while len(_SEEN) > SEEN_MAX:
                _SEEN.popitem(last=False)
    return found


def _scan_in_child(data: bytes) -> tuple[Scan, bool]:
    """The child's answer, and whether it is the file's own (not the server's load)."""
    if not _SLOTS.acquire(timeout=1):
        return Scan("busy", detail=f"{MAX_CONCURRENT} uploads are being read already"), False
    command = [sys.executable, "-I", __file__, str(CPU_SECONDS), str(MEMORY_BYTES)]
    try:
        proc = subprocess.run(command, input=data, capture_output=True, timeout=WALL_SECONDS, check=False)
    except subprocess.TimeoutExpired:
        return Scan("too_complex", detail=f"reading took longer than {WALL_SECONDS} s"), False
    finally:
        _SLOTS.release()
    if proc.returncode != 0:
        # SIGXCPU/SIGKILL from RLIMIT_CPU, MemoryError from RLIMIT_AS, or a parser crash.
        return Scan("too_complex", detail=f"the reader stopped (exit status {proc.returncode})"), True
    try:
        found = json.loads(proc.stdout)
        return Scan(found["status"], found.get("pages"), found.get("keywords"), found.get("detail")), True
    except (ValueError, KeyError, TypeError):
        return Scan("too_complex", detail="the reader gave no answer"), True


def _limit(cpu_seconds: int, memory_bytes: int) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))


def _read(data: bytes) -> dict:
    """The child's work, after the limits are set."""
    if b"%PDF-" not in data[:1024]:  # where the PDF header must be; a GIF renamed .pdf stops here
        return {"status": "unreadable", "detail": "no PDF header"}
    from pypdf import PdfReader

    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        pages = len(reader.pages)
        if pages != 1:
            return {"status": "pages", "pages": pages, "detail": f"{pages} pages, a certificate has 1"}
        keywords = str((reader.metadata or {}).get("/Keywords") or "")
    except Exception as e:  # noqa: BLE001  (any parser failure means the same: not readable)
        return {"status": "unreadable", "detail": f"not a readable PDF: {type(e).__name__}: {e}"[:300]}
    return {"status": "ok", "pages": 1, "keywords": keywords[:KEYWORDS_MAX]}


def _main(argv: list[str]) -> int:
    _limit(int(argv[0]), int(argv[1]))
    json.dump(_read(sys.stdin.buffer.read(MAX_BYTES + 1)), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
