"""Issuer keys: Ed25519, kept under ``settings.secrets_dir`` with owner-only
permissions, created on first use.

    <secrets_dir>/certificate-keys/          0700
        <kid>.key   private key, PKCS#8 PEM  0600
        <kid>.pub   public key, PEM          0600
        active      the kid that signs new certificates
        row-check   32 random bytes (hex): the key of each row's check  0600

The key id (kid) is a short hash of the public key and is part of every
signed payload, so rotating (``python -m certificates rotate-key``) only
changes which key signs from now on: old public keys stay and keep old
certificates verifiable.

The row check (``check_key``) is an HMAC-SHA256 key that only this server
uses: the database keeps each certificate's MAC under it beside the signature,
so a look-up can trust a stored row without an Ed25519 verify
(``certificates.verify.lookup`` says why that is safe). It signs nothing
anyone else checks; a lost one only makes look-ups slower until
``python -m certificates add-checks`` has run with the new one.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import functools
import hashlib
import json
import os
import secrets
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from academy.settings import get_settings

KEYS_SUBDIR = "certificate-keys"
CHECK_KEY_FILE = "row-check"  # not *.key: those are the PEM private keys


@dataclass(frozen=True)
class IssuerKey:
    kid: str
    public: Ed25519PublicKey
    private: Ed25519PrivateKey | None = None  # None for public-only keys


def key_id(public: Ed25519PublicKey) -> str:
    """16 hex digits of SHA-256 over the raw 32-byte public key."""
    return hashlib.sha256(raw_public(public)).hexdigest()[:16]


def raw_public(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def public_pem(public: Ed25519PublicKey) -> str:
    return public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode("ascii")


def keys_dir(secrets_dir: Path | None = None) -> Path:
    """The key folder, created 0700 (and its parent too, if missing)."""
    base = Path(secrets_dir or get_settings().secrets_dir)
    if not base.exists():
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(base, 0o700)  # mkdir's mode is filtered through the umask
    path = base / KEYS_SUBDIR
    path.mkdir(mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)
    return path


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Serialise key creation between processes (two first requests at once)."""
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _create(folder: Path) -> IssuerKey:
    private = Ed25519PrivateKey.generate()
    public = private.public_key()
    kid = key_id(public)
    _write_private(
        folder / f"{kid}.key",
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
    _write_private(folder / f"{kid}.pub", public_pem(public).encode("ascii"))
    tmp = folder / "active.tmp"
    tmp.unlink(missing_ok=True)
    _write_private(tmp, kid.encode("ascii"))
    os.replace(tmp, folder / "active")
    return IssuerKey(kid=kid, public=public, private=private)


def _load_private(folder: Path, kid: str) -> IssuerKey:
    private = serialization.load_pem_private_key((folder / f"{kid}.key").read_bytes(), None)
    if not isinstance(private, Ed25519PrivateKey):
        raise ValueError(f"{kid}.key is not an Ed25519 key")
    return IssuerKey(kid=kid, public=private.public_key(), private=private)


def active_key(secrets_dir: Path | None = None) -> IssuerKey:
    """The key that signs new certificates; created on first use."""
    folder = keys_dir(secrets_dir)
    active = folder / "active"
    if not active.exists():
        with _locked(folder):
            if not active.exists():
                return _create(folder)
    return _load_private(folder, active.read_text().strip())


def rotate_key(secrets_dir: Path | None = None) -> IssuerKey:
    """Make a new active key; the old ones stay for verifying."""
    folder = keys_dir(secrets_dir)
    with _locked(folder):
        return _create(folder)


def local_public_keys(secrets_dir: Path | None = None) -> Mapping[str, Ed25519PublicKey]:
    """Every public key in the key folder, by kid (read-only: shared by every
    caller). Creates nothing: an offline verifier with only an exported keys
    file has no folder at all.

    Parsed once per state of the folder: every lookup asks, and reading and
    parsing the PEM files cost more than the signature check itself. A key
    added, removed or rewritten is seen at the next call: the folder's and each
    known ``*.pub`` file's modification time, size and inode are compared with
    those of the last full read (a few ``stat`` calls), and the folder is read
    again when one differs, or when the last read came too soon after a change
    to tell it from the next one (``_settled``).
    """
    folder = os.path.join(secrets_dir or get_settings().secrets_dir, KEYS_SUBDIR)
    cached = _PUBLIC_CACHE.get(folder)
    if cached is not None and cached[0] is not None and cached[0] == _stats(folder, cached[1]):
        return cached[2]
    try:
        with os.scandir(folder) as entries:
            names = tuple(sorted(e.name for e in entries if e.name.endswith(".pub")))
    except FileNotFoundError:
        names = ()
    found = {}
    for name in names:
        try:
            parsed = _parse_public(Path(folder, name).read_bytes())
        except FileNotFoundError:  # removed since the listing: read again next time
            continue
        if parsed is not None:
            found[parsed[0]] = parsed[1]
    # Taken after the read: a change made during it differs at the next call.
    state = _stats(folder, names)
    if state is not None and not _settled([s[0] for s in state if s is not None]):
        state = None  # too recent to vouch for: read the folder again next time
    shared = MappingProxyType(found)
    _PUBLIC_CACHE[folder] = (state, names, shared)
    return shared


@functools.lru_cache(maxsize=64)
def _parse_public(pem: bytes) -> tuple[str, Ed25519PublicKey] | None:
    """(kid, key) of a ``*.pub`` file's bytes, None for another kind of key: parsed once
    per content, so reading the folder again soon after a change costs only the reads."""
    public = serialization.load_pem_public_key(pem)
    return (key_id(public), public) if isinstance(public, Ed25519PublicKey) else None


def _settled(mtimes: list[int]) -> bool:
    """Whether the newest of ``mtimes`` is old enough that a later change would show
    as another time: a file system's clock ticks every few milliseconds (give it
    0.1 s), or every second or two where it keeps whole seconds (FAT, old ext3)."""
    if not mtimes:
        return True
    tick = 2_000_000_000 if all(m % 1_000_000_000 == 0 for m in mtimes) else 100_000_000
    return time.time_ns() - max(mtimes) >= tick


_PUBLIC_CACHE: dict[str, tuple[tuple | None, tuple[str, ...], Mapping[str, Ed25519PublicKey]]] = {}


def _stats(folder: str, names: tuple[str, ...]) -> tuple | None:
    """(mtime, size, inode) of the folder and of each of ``names`` in it; ``(None,)``
    when there is no folder, None when one of ``names`` has gone."""
    try:
        st = os.stat(folder)
    except FileNotFoundError:
        return (None,)
    found = [(st.st_mtime_ns, st.st_size, st.st_ino)]
    for name in names:
        try:
            st = os.stat(os.path.join(folder, name))
        except FileNotFoundError:
            return None
        found.append((st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(found)


def check_key(secrets_dir: Path | None = None, *, create: bool = True) -> bytes | None:
    """The 32-byte key of the rows' checks, created on first use (``create``;
    else None while there is none). Read once per process and folder: a key
    replaced while the server runs is seen after a restart, and until then the
    rows checked with the other key fall back to their signature."""
    base = os.fspath(secrets_dir or get_settings().secrets_dir)
    key = _CHECK_KEYS.get(base)
    if key is not None:
        return key
    path = Path(base, KEYS_SUBDIR, CHECK_KEY_FILE)
    if not path.exists():
        if not create:
            return None
        folder = keys_dir(secrets_dir)
        with _locked(folder):
            if not path.exists():
                tmp = folder / (CHECK_KEY_FILE + ".tmp")
                tmp.unlink(missing_ok=True)
                _write_private(tmp, secrets.token_hex(32).encode("ascii"))
                os.replace(tmp, path)  # whole or absent: a reader never sees half a key
    key = bytes.fromhex(path.read_text().strip())
    if len(key) != 32:
        raise ValueError(f"{path} does not hold a 32-byte key")
    _CHECK_KEYS[base] = key
    return key


_CHECK_KEYS: dict[str, bytes] = {}


def load_public_keys_file(path: Path) -> dict[str, Ed25519PublicKey]:
    """Public keys exported by ``python -m certificates public-key``: either
    JSON ``{"keys": [{"kid": ..., "raw": <base64>}, ...]}`` or PEM blocks."""
    text = Path(path).read_text()
    found = {}
    if text.lstrip().startswith("{"):
        for entry in json.loads(text)["keys"]:
            public = Ed25519PublicKey.from_public_bytes(base64.b64decode(entry["raw"]))
            found[key_id(public)] = public
        return found
    for block in text.split("-----END PUBLIC KEY-----"):
        if "-----BEGIN PUBLIC KEY-----" in block:
            pem = (block.strip() + "\n-----END PUBLIC KEY-----\n").encode("ascii")
            public = serialization.load_pem_public_key(pem)
            if isinstance(public, Ed25519PublicKey):
                found[key_id(public)] = public
    return found


def public_keys(
    secrets_dir: Path | None = None, extra_file: Path | None = None
) -> dict[str, Ed25519PublicKey]:
    """The keys a verifier trusts: the local key folder plus an optional file."""
    found = dict(local_public_keys(secrets_dir))
    if extra_file is not None:
        found.update(load_public_keys_file(extra_file))
    return found


@dataclass(frozen=True)
class PublicKeyInfo:
    """One public key as shown on the Verify page and exported."""

    kid: str
    pem: str
    raw_b64: str  # standard base64 of the 32 raw bytes
    active: bool


def public_key_info(secrets_dir: Path | None = None) -> list[PublicKeyInfo]:
    """All public keys, the active one first."""
    active = active_key(secrets_dir).kid
    infos = [
        PublicKeyInfo(
            kid=kid,
            pem=public_pem(public),
            raw_b64=base64.b64encode(raw_public(public)).decode("ascii"),
            active=kid == active,
        )
        for kid, public in local_public_keys(secrets_dir).items()
    ]
    return sorted(infos, key=lambda info: not info.active)


def export_public_keys_json(secrets_dir: Path | None = None) -> str:
    """The JSON form that ``load_public_keys_file`` reads back."""
    keys = [
        {"kid": info.kid, "raw": info.raw_b64, "active": info.active}
        for info in public_key_info(secrets_dir)
    ]
    return json.dumps({"alg": "Ed25519", "keys": keys}, indent=2)
