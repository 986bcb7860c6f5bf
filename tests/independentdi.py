"""Data Integrity verification written from the specs for the tests, sharing no
code with ``certificates``: eddsa-jcs-2022 with ``rfc8785``, and
eddsa-rdfc-2022 with Oxigraph (``pyoxigraph``: its own JSON-LD parser, in
Rust, and its own RDFC-1.0), not PyLD, which the issuer uses. The contexts are
the bundled files, inlined (Oxigraph fetches nothing); their bytes are pinned
by ``test_bundled_contexts_are_the_published_ones``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pyoxigraph as ox
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

CONTEXTS = Path(__file__).resolve().parent.parent / "certificates" / "contexts"
CONTEXT_FILES = {
    "https://www.w3.org/ns/credentials/v2": CONTEXTS / "credentials-v2.jsonld",
    "https://purl.imsglobal.org/spec/ob/v3p0/context-3.0.3.json": CONTEXTS / "ob-v3p0-context-3.0.3.json",
}
_ALPHABET = b"123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def unbase58(text: str) -> bytes:
    n = 0
    for ch in text.encode():
        n = n * 58 + _ALPHABET.index(ch)
    zeros = len(text) - len(text.lstrip("1"))  # each leading "1" is a leading zero byte
    return b"\0" * zeros + n.to_bytes((n.bit_length() + 7) // 8, "big")


def rdfc(document: dict[str, Any]) -> str:
    """RDFC-1.0 canonical N-Quads of a JSON-LD document, by Oxigraph."""
    inline = {**document, "@context": [json.loads(CONTEXT_FILES[url].read_text())["@context"]
                                       for url in document["@context"]]}
    dataset = ox.Dataset(ox.parse(json.dumps(inline), ox.RdfFormat.JSON_LD))
    dataset.canonicalize(ox.CanonicalizationAlgorithm.RDFC_1_0)
    lines = ox.serialize(dataset, format=ox.RdfFormat.N_QUADS).decode("utf-8").splitlines()
    return "".join(f"{line}\n" for line in sorted(line for line in lines if line.strip()))


def verify(secured: dict[str, Any]) -> list[str]:
    """Verify every embedded proof (one, or a proof set); raises if any does not
    hold, else returns their cryptosuites."""
    listed = secured["proof"]
    document = {k: v for k, v in secured.items() if k != "proof"}
    suites = []
    for proof in listed if isinstance(listed, list) else [listed]:
        options = dict(proof)
        value = options.pop("proofValue")
        assert options["type"] == "DataIntegrityProof" and value[0] == "z"
        raw = unbase58(options["verificationMethod"].split("#z", 1)[1])
        assert raw[:2] == b"\xed\x01"
        if options["cryptosuite"] == "eddsa-jcs-2022":
            data = (hashlib.sha256(rfc8785.dumps(options)).digest()
                    + hashlib.sha256(rfc8785.dumps(document)).digest())
        else:
            assert options["cryptosuite"] == "eddsa-rdfc-2022"
            config = {**options, "@context": document["@context"]}
            data = (hashlib.sha256(rdfc(config).encode()).digest()
                    + hashlib.sha256(rdfc(document).encode()).digest())
        Ed25519PublicKey.from_public_bytes(raw[2:]).verify(unbase58(value[1:]), data)
        suites.append(options["cryptosuite"])
    return suites
